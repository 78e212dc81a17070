# Where cargo puts what it builds, asked of cargo itself: $CARGO_TARGET_DIR,
# a .cargo/config.toml's build.target-dir, or the workspace's target/.
# Sourced; expects $top (the repository root).
#
#   cargo_target_dir    prints the directory (absolute)

cargo_target_dir() {
  (cd "$top" && cargo metadata --format-version 1 --no-deps) |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

# The cargo profile that scripts/bench and scripts/jepsen build their
# programs with (not the module: LOCK_MODULE_SO or the release build):
# release, as their figures are measured on release builds, unless
# LOCK_BUILD_PROFILE names another. scripts/check-scripts sets `ci`, the
# tests' profile, so that its smoke runs use what scripts/test has built
# (target/ci) instead of building again.
#
#   build_profile       prints the profile's name
build_profile() {
  echo "${LOCK_BUILD_PROFILE:-release}"
}

# The packages scripts/test builds and tests: the workspace but the Python
# and Node.js bindings' crates and the man pages' writer (scripts/test says
# why). A build of another script that names them too gets the same
# features (cargo unifies them over the packages selected) and so finds
# scripts/test's build of its profile, not a build of its own
# (scripts/bench-tls, in Python, reads this list from here).
tested_packages=(--workspace --exclude redlock-client-python --exclude redlock-client-node --exclude redlock-docgen)
