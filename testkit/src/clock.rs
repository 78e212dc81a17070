//! The clock shim's file: what moves a shimmed server's clocks at run time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};

use crate::dirs::TempDir;

/// The shim's clock file for one server (`Opts::clock_file(file.path())`):
/// an offset in ms from real time of its wall clock, which [`set`] moves at
/// run time, and the rate (ppm) at which its monotonic clock runs fast,
/// fixed when the server starts (see `testkit/shim/clockshim.c`). Its
/// directory is removed on drop.
///
/// [`set`]: ClockFile::set
pub struct ClockFile {
    dir: TempDir,
    path: PathBuf,
    offset: AtomicI64,
    rate_ppm: u32,
}

impl ClockFile {
    /// The real time, at the real rate.
    pub fn new() -> ClockFile {
        ClockFile::starting_at(0, 0)
    }

    /// `offset_ms` from real time, the monotonic clock `rate_ppm` fast.
    pub fn starting_at(offset_ms: i64, rate_ppm: u32) -> ClockFile {
        let dir = TempDir::new("clock");
        let file = ClockFile { path: dir.path().join("offset"), dir, offset: AtomicI64::new(0), rate_ppm };
        file.set(offset_ms);
        file
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The offset last set.
    pub fn offset(&self) -> i64 {
        self.offset.load(Ordering::SeqCst)
    }

    /// Moves the server's wall clock to `offset_ms` from real time. Written
    /// to a side file and renamed, so the shim never reads half a number.
    pub fn set(&self, offset_ms: i64) {
        let tmp = self.dir.path().join("offset.tmp");
        std::fs::write(&tmp, format!("{offset_ms} {}", self.rate_ppm)).expect("write clock offset");
        std::fs::rename(&tmp, &self.path).expect("rename clock offset");
        self.offset.store(offset_ms, Ordering::SeqCst);
    }
}

impl Default for ClockFile {
    fn default() -> ClockFile {
        ClockFile::new()
    }
}
