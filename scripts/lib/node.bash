# The Node.js package (node/, napi-rs over client/) for scripts/test and
# scripts/bench-node. Sourced; expects $top (the repository root).
#
#   node_tools DIR PACKAGE@VERSION...   installs the pinned npm PACKAGEs
#                                       into DIR/node_modules (npm install
#                                       --prefix), all of them together when
#                                       one is missing or at another version
#                                       (npm removes, as extraneous, what a
#                                       --no-save install does not name)
#   node_install_package DIR            makes DIR a project of its own (a
#                                       package.json) and installs node/ into
#                                       it with the README's own command,
#                                       `npm install --install-links=false
#                                       /path/to/repo/node`,
#                                       whose install script builds the
#                                       native module with cargo
#                                       (node/build.js); its node_modules is
#                                       then what NODE_PATH names for the
#                                       tests
#   node_install_tarball DIR TGZ        the same with a packed package
#                                       (scripts/release's npm tarball, in
#                                       dist/): its install script must use
#                                       the prebuilt native module and build
#                                       nothing

# The versions the tests run with: tsc checks the bundled types.
NODE_TEST_PACKAGES=("typescript@5.9.3")

node_tools() {
  local dir=$1
  shift
  local missing=() wanted name version have
  for wanted in "$@"; do
    name=${wanted%@*}
    version=${wanted##*@}
    have=$(node -p "try { require('$dir/node_modules/$name/package.json').version } catch { '' }" 2>/dev/null || true)
    # Some packages publish their version with a leading v (redlock's
    # 5.0.0-beta.2 says "v5.0.0-beta.2").
    [ "${have#v}" = "$version" ] || missing+=("$wanted")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "node: installing $* into $dir (${missing[*]} missing)" >&2
    mkdir -p "$dir"
    timeout 600 npm install --silent --no-audit --no-fund --no-save --prefix "$dir" "$@" >&2
  fi
}

node_install_package() {
  local dir=$1
  # A new project each time, as a user's: npm runs the install script of a
  # package it adds, not of one it already has. What the script builds is
  # removed first, so the check below sees that this install built it.
  rm -rf "$dir" "$top/node/redlock_client.node"
  mkdir -p "$dir"
  echo '{ "name": "redlock-client-tests", "private": true }' >"$dir/package.json"
  (cd "$dir" && timeout 1200 npm install --install-links=false --no-audit --no-fund --loglevel=error "$top/node") >&2
  # npm runs the install script of a local folder (the warning of npm 11
  # says it may not always); the tests need what it built.
  [ -f "$top/node/redlock_client.node" ] || {
    echo "node: npm install did not build node/redlock_client.node" >&2
    return 1
  }
}

node_install_tarball() {
  local dir=$1 tarball out
  tarball=$(realpath "$2")
  rm -rf "$dir"
  mkdir -p "$dir"
  echo '{ "name": "redlock-client-tests", "private": true }' >"$dir/package.json"
  # setsid: no terminal, so that what build.js says reaches npm's output.
  out=$(cd "$dir" && timeout 600 setsid -w npm install --offline --foreground-scripts --no-audit --no-fund \
    --loglevel=error "$tarball" 2>&1) || {
    echo "node: npm install $tarball failed: $out" >&2
    return 1
  }
  grep -q "using the prebuilt native module" <<<"$out" || {
    echo "node: npm install $tarball did not use the prebuilt native module: $out" >&2
    return 1
  }
}
