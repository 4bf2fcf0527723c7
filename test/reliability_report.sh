#!/usr/bin/env bash
# Prints the fault suite's results (reliability.tsv, written by TAP tests 070
# and 071 through test/lib/OutboxFaults.pm) as the Markdown table of
# docs/reliability.md, and exits non-zero if any row lost an event, delivered
# one of a rolled-back transaction, or broke per-key order.
#
#   bash test/reliability_report.sh test/results/tap/tmp_check/reliability.tsv
set -euo pipefail
tsv=${1:?usage: reliability_report.sh RELIABILITY.TSV}
awk -F'\t' '
  NR == 1 {
    for (i = 1; i <= NF; i++) col[$i] = i
    print "| sink | fault | injected | committed events | lost | duplicates | rolled back delivered | order violations | recovery (s) | detail |"
    print "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    next
  }
  {
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $col["sink"], $col["fault"],
      $col["injections"], $col["committed"], $col["lost"], $col["duplicates"],
      $col["rolled_back_delivered"], $col["order_violations"], $col["recovery_s"], $col["detail"]
    if ($col["lost"] != 0 || $col["rolled_back_delivered"] != 0 || $col["order_violations"] != 0) bad++
    committed += $col["committed"]; lost += $col["lost"]; dups += $col["duplicates"]
  }
  END {
    printf "\n%d rows, %d committed events, %d lost, %d duplicates\n", NR - 1, committed, lost, dups
    exit bad > 0
  }' "$tsv"
