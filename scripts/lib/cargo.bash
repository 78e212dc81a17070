# Where cargo puts what it builds, asked of cargo itself: $CARGO_TARGET_DIR,
# a .cargo/config.toml's build.target-dir, or the workspace's target/.
# Sourced; expects $top (the repository root).
#
#   cargo_target_dir    prints the directory (absolute)

cargo_target_dir() {
  (cd "$top" && cargo metadata --format-version 1 --no-deps) |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}
