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

/// The module `.so`: `$LOCK_MODULE_SO`, or else built once per test binary
/// (release, as users run it).
pub fn module_path() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Ok(path) = std::env::var("LOCK_MODULE_SO") {
                return PathBuf::from(path);
            }
            let status = Command::new(env!("CARGO"))
                .args(["build", "--release", "--lib", "--quiet"])
                .current_dir(repo_dir())
                .status()
                .expect("run cargo build for the module");
            assert!(status.success(), "building the module failed");
            let path = repo_dir().join("target/release/libredis_lock.so");
            assert!(path.exists(), "{} missing after build", path.display());
            path
        })
        .clone()
}

/// The LD_PRELOAD clock shim (`testkit/shim/clockshim.c`, which says what
/// it does), compiled once per test binary.
pub fn clock_shim_path() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = repo_dir().join("target/clockshim.so");
            let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("shim/clockshim.c");
            let status = Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
                .arg(&out)
                .arg(&src)
                .status()
                .expect("run cc for the clock shim");
            assert!(status.success(), "compiling the clock shim failed");
            out
        })
        .clone()
}
