# shellcheck shell=bash
# Which PostgreSQL the scripts build and test against. Source this file, then
# call outbox_use_postgres: it sets and exports PG_CONFIG, PG_BINDIR and
# PG_MAJOR and puts PG_BINDIR first on PATH.
#
# The choice, first that applies:
#   1. PG_CONFIG, when it names a pg_config (a path or a command on PATH);
#   2. OUTBOX_PG_MAJOR=NN: Debian's /usr/lib/postgresql/NN/bin;
#   3. the newest major installed under /usr/lib/postgresql.
# Nothing here names a major: the same scripts run on bookworm (15), in the
# trixie (17) and sid (18) chroots CI makes, and on any Debian-style install.

# The distribution's default major (what test/install_deps.sh installs):
# postgresql-common's list of supported versions, else the newest packaged
# postgresql-NN. Prints nothing when neither is known.
outbox_default_major() {
  if [[ -n ${OUTBOX_PG_MAJOR:-} ]]; then
    echo "$OUTBOX_PG_MAJOR"
  elif [[ -x /usr/share/postgresql-common/supported_versions ]]; then
    /usr/share/postgresql-common/supported_versions 2>/dev/null | sort -n | tail -n 1
  else
    apt-cache pkgnames postgresql- 2>/dev/null | sed -nE 's/^postgresql-([0-9]+)$/\1/p' | sort -n | tail -n 1
  fi
}

outbox_use_postgres() {
  local config=""
  if [[ -n ${PG_CONFIG:-} ]] && command -v "$PG_CONFIG" >/dev/null; then
    config=$(command -v "$PG_CONFIG")
  elif [[ -n ${OUTBOX_PG_MAJOR:-} ]]; then
    config=/usr/lib/postgresql/$OUTBOX_PG_MAJOR/bin/pg_config
  else
    config=$(compgen -G '/usr/lib/postgresql/*/bin/pg_config' | sort -V | tail -n 1 || true)
  fi
  if [[ -z $config || ! -x $config ]]; then
    echo "no PostgreSQL found (${config:-no /usr/lib/postgresql/*/bin/pg_config}): run test/install_deps.sh" >&2
    return 1
  fi
  PG_CONFIG=$config
  PG_BINDIR=$("$PG_CONFIG" --bindir)
  PG_MAJOR=$("$PG_CONFIG" --version | sed -nE 's/^PostgreSQL ([0-9]+).*/\1/p')
  PATH="$PG_BINDIR:$PATH"
  export PG_CONFIG PG_BINDIR PG_MAJOR PATH
}
