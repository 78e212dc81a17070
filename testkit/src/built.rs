//! What the tests build before their first server: the module `.so` and the
//! LD_PRELOAD clock shim, each once per test binary.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The repository root (the module crate, the workspace's root), whichever
/// workspace member's test uses the kit.
pub fn repo_dir() -> PathBuf {
    let kit = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    kit.parent().map(PathBuf::from).unwrap_or(kit)
}

/// `cmd` without the variables cargo sets for a test process (the test's
/// package: `CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...; `OUT_DIR`), for a
/// cargo started from a test, directly or through a script. Build scripts
/// rerun when such a variable differs from their last run (ring's reads
/// them), so a cargo build inherited the test's and built ring, the TLS
/// crates and the client again, and the next build from a plain shell
/// (the README check, the release) built them back: some 70 s each time
/// on 2 cores. Cargo's own settings (`CARGO_HOME`, `CARGO_TARGET_DIR`,
/// `CARGO_BUILD_*`, ...) stay.
pub fn outside_cargo_test(cmd: &mut Command) -> &mut Command {
    const SET_FOR_TESTS: [&str; 7] = [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "OUT_DIR",
    ];
    for (name, _) in std::env::vars_os() {
        let set_for_tests = name.to_str().is_some_and(|n| SET_FOR_TESTS.iter().any(|p| n.starts_with(p)));
        if set_for_tests {
            cmd.env_remove(&name);
        }
    }
    cmd
}

/// Where cargo puts what it builds, as cargo says (`cargo metadata`:
/// `$CARGO_TARGET_DIR`, a `.cargo/config.toml`'s `build.target-dir`, or the
/// workspace's `target/`), asked once per test binary.
pub fn target_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .current_dir(repo_dir())
            .output()
            .expect("run cargo metadata");
        assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
        let json = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(
            json_string(&json, "target_directory").expect("cargo metadata names the target directory"),
        )
    })
    .clone()
}

/// The string value of `"key":"..."` in cargo's JSON (a path: its escapes
/// are `\\` and `\"` at most).
fn json_string(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut value = String::new();
    let mut chars = json.get(start..)?.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => value.push(chars.next()?),
            c => value.push(c),
        }
    }
    None
}

/// The module `.so`: `$LOCK_MODULE_SO`, or else built once per test binary
/// (release, as users run it).
pub fn module_path() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Ok(path) = std::env::var("LOCK_MODULE_SO") {
                return PathBuf::from(path);
            }
            let status = outside_cargo_test(&mut Command::new(env!("CARGO")))
                .args(["build", "--release", "--lib", "--quiet"])
                .current_dir(repo_dir())
                .status()
                .expect("run cargo build for the module");
            assert!(status.success(), "building the module failed");
            let path = target_dir().join("release/libredis_lock.so");
            assert!(path.exists(), "{} missing after build", path.display());
            path
        })
        .clone()
}

/// The LD_PRELOAD clock shim (`testkit/shim/clockshim.c`, which says what
/// it does), compiled once per test binary. Test binaries run at the same
/// time (scripts/test runs two servers' suites side by side), so each
/// compiles to a file of its own and renames it into place: a server that
/// has the shim loaded keeps the file it mapped, and none loads a file
/// that another compiler is still writing.
pub fn clock_shim_path() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = target_dir().join("clockshim.so");
            let partial = target_dir().join(format!("clockshim.so.{}", std::process::id()));
            let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("shim/clockshim.c");
            let status = Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
                .arg(&partial)
                .arg(&src)
                .status()
                .expect("run cc for the clock shim");
            assert!(status.success(), "compiling the clock shim failed");
            std::fs::rename(&partial, &out).expect("move the clock shim into place");
            out
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_directory_is_read_from_cargo_metadata() {
        let json = r#"{"packages":[],"target_directory":"/tmp/a \"b\" c\\d/target","version":1}"#;
        assert_eq!(json_string(json, "target_directory").as_deref(), Some(r#"/tmp/a "b" c\d/target"#));
        assert_eq!(json_string(json, "workspace_root"), None);
        assert!(target_dir().is_absolute(), "{}", target_dir().display());
    }
}
