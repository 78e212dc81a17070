//! Temporary directories, one fresh one per call.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A new empty directory `redis-lock-<what>-<pid>-<n>` under the system's
/// temporary directory (an old one of that name is removed first).
pub fn fresh_dir(what: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "redis-lock-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// A [`fresh_dir`] removed (with what it holds) on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        TempDir { path: fresh_dir(what) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
