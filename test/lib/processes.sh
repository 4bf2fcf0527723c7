# shellcheck shell=bash
# The processes a run left in a directory. Source this file:
#
#   source test/lib/processes.sh
#   mapfile -t pids < <(processes_in DIR)
#
# A process counts when it works in DIR (a postmaster's working directory
# is its data directory) or names DIR on its command line (a broker started
# with a path under DIR). Processes of other runs and of the chroots (PID
# namespaces of their own) name other directories; the calling shell is
# never listed.

processes_in() {
  local dir=$1 pid cwd
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    ((pid == $$ || pid == BASHPID)) && continue
    cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || continue
    if [[ $cwd == "$dir"/* ]] || tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/"; then
      echo "$pid"
    fi
  done
}
