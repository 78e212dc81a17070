//! The main job (`scripts/run`) works: it starts masters with the module,
//! ends their start-up quarantine the one-shot way, and its demo shows
//! grants (not quarantine refusals), the quorum CLI, the new lock kinds and
//! `redlock status`. It finds what cargo built where cargo says (here under
//! another name for the target directory than `target/`), and leaves that
//! CLI on the PATH of `run/env`. Its masters run in a temporary directory
//! and are stopped by `scripts/run stop`, also when an assertion fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lock_testkit::{outside_cargo_test, target_dir};

struct Demo {
    state: PathBuf,
    /// Another name for the target directory (a symlink to it), given to
    /// scripts/run as CARGO_TARGET_DIR: nothing may assume `target/`.
    target: PathBuf,
}

impl Demo {
    fn run(&self, args: &[&str]) -> Output {
        // As from a shell: its cargo builds what the release built, not a
        // variant for this test's environment.
        outside_cargo_test(&mut Command::new(repo().join("scripts/run")))
            .args(args)
            .env("LOCK_RUN_DIR", &self.state)
            .env("CARGO_TARGET_DIR", &self.target)
            .output()
            .expect("run scripts/run")
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.run(&["stop"]);
        let _ = std::fs::remove_dir_all(&self.state);
        let _ = std::fs::remove_file(&self.target);
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn scripts_run_starts_masters_and_shows_locks_working() {
    let scratch = std::env::temp_dir();
    let state = scratch.join(format!("redis-lock-demo-{}", std::process::id()));
    let target = scratch.join(format!("redis-lock-demo-target-{}", std::process::id()));
    std::os::unix::fs::symlink(target_dir(), &target).expect("symlink the target directory");
    let demo = Demo { state, target };
    let out = demo.run(&["3"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "scripts/run failed:\n{stdout}\n{stderr}");
    let cli = demo.target.join("release/redlock");
    for expected in [
        &format!("using the redlock CLI at {}", cli.display()),
        "ending the start-up quarantine of these brand-new masters (LOCK.UNQUARANTINE STARTUP)",
        "3 masters with the lock module",
        "granted on 3 of 3 nodes; majority is 2: HELD",
        "child runs holding reports:daily, fencing token",
        "job 1 holds a permit",
        "job 2 holds a permit",
        "lock_protections_off:none",
        "a majority can grant now: 3 of 3 members grant (need 2)",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }
    let refused = stdout.lines().any(|line| line.trim_start().starts_with("QUARANTINE"));
    assert!(!refused, "the demo's masters refused grants:\n{stdout}");
    let pids: Vec<PathBuf> = std::fs::read_dir(&demo.state)
        .expect("state dir")
        .filter_map(|e| e.ok().map(|e| e.path().join("redis.pid")))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(pids.len(), 3, "three masters keep running");

    // A shell that sources run/env finds that CLI as `redlock`, with the
    // masters: `redlock status` answers on them, every protection on.
    let env = demo.state.join("env");
    let shell = format!(". '{}' && command -v redlock && redlock status", env.display());
    let out = Command::new("bash").args(["-c", &shell]).env_remove("REDLOCK_NODES").output().expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with(&format!("{}\n", demo.state.join("bin/redlock").display())), "{stdout}");
    assert!(stdout.ends_with("a majority can grant now: 3 of 3 members grant (need 2)\n"), "{stdout}");

    let stop = demo.run(&["stop"]);
    assert!(stop.status.success());
    assert!(!demo.state.exists(), "stop removes the state");
}

/// `scripts/run cluster`: a cluster of 3 masters with a replica each, the
/// module on every node; the demo takes locks through it with `redis-cli
/// -c` and the CLI (one member, the cluster), writes `run/env` naming that
/// member, and `scripts/run stop` stops every node.
#[test]
fn scripts_run_cluster_starts_a_cluster_and_shows_locks_through_it() {
    let scratch = std::env::temp_dir();
    let state = scratch.join(format!("redis-lock-demo-cluster-{}", std::process::id()));
    let target = scratch.join(format!("redis-lock-demo-cluster-target-{}", std::process::id()));
    std::os::unix::fs::symlink(target_dir(), &target).expect("symlink the target directory");
    let demo = Demo { state, target };
    let out = demo.run(&["cluster"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "scripts/run cluster failed:\n{stdout}\n{stderr}");
    for expected in [
        "A cluster of 3 masters and 3 replicas with the lock module",
        "LOCK.RELEASE orders:1 demo (-c) -> 1",
        "REDLOCK_FENCING_TOKEN=",
        "      released\n",
        "are in different hash slots",
        "child holds {orders}:1 and the rest of its set, fencing token",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("QUARANTINE"), "the demo's cluster refused grants:\n{stdout}");
    let env = std::fs::read_to_string(demo.state.join("env")).expect("run/env");
    assert!(env.contains("export REDLOCK_NODES=redis+cluster://127.0.0.1:"), "{env}");
    // A shell that sources run/env finds the CLI scripts/run built, as
    // `redlock`, and takes a lock through the cluster with it.
    let shell = format!(
        ". '{}' && command -v redlock && redlock exec demo:env -- true && echo done",
        demo.state.join("env").display()
    );
    let run = Command::new("bash").args(["-c", &shell]).env_remove("REDLOCK_NODES").output().expect("bash");
    let said = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(said, format!("{}\ndone\n", demo.state.join("bin/redlock").display()));
    let pids: Vec<u32> = std::fs::read_dir(&demo.state)
        .expect("state dir")
        .filter_map(|e| e.ok().map(|e| e.path().join("redis.pid")))
        .filter_map(|p| std::fs::read_to_string(p).ok()?.trim().parse().ok())
        .collect();
    assert_eq!(pids.len(), 6, "six nodes keep running");
    let stop = demo.run(&["stop"]);
    assert!(stop.status.success());
    assert!(!demo.state.exists(), "stop removes the state");
    for pid in pids {
        assert!(!Path::new(&format!("/proc/{pid}/exe")).exists(), "node {pid} still runs");
    }
}
