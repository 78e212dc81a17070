//! What the CLI's tests share: the binary, its exit codes as the README's
//! table gives them, and a bounded run.

// Each test file uses its own part of this.
#![allow(dead_code)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_redlock");

// The exit codes, as the README's table gives them.
pub const OK: i32 = 0;
pub const USAGE: i32 = 2;
pub const NOT_HELD: i32 = 3;
pub const UNREACHABLE: i32 = 68;
pub const NO_QUORUM: i32 = 69;
pub const HELD: i32 = 73;
pub const QUARANTINED: i32 = 74;
pub const SETTINGS: i32 = 78;

/// Runs to completion within `within` (killed and failed otherwise).
pub fn run_bounded(mut cmd: Command, within: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn redlock");
    let deadline = Instant::now() + within;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "redlock did not finish within {within:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
