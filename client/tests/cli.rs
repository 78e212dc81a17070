//! The `redlock` command line, run as a user would (the built binary).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lock_testkit_client::*;

mod common;

use common::*;

fn redlock(servers: &[Server]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("REDLOCK_NODES", urls(servers).join(",")).args(["--timeout", "200", "--connect-timeout", "300"]);
    cmd.env_remove("REDLOCK_TOKEN");
    cmd
}

/// `redlock WORDS...` against `servers`, run to completion (bounded).
fn call(servers: &[Server], words: &[&str]) -> Output {
    let mut cmd = redlock(servers);
    cmd.args(words);
    run_bounded(cmd, Duration::from_secs(10))
}

/// `redlock acquire WORDS...`, which must succeed: what it printed.
fn acquired(servers: &[Server], words: &[&str]) -> String {
    let out = call(servers, &[&["acquire"], words].concat());
    assert_eq!(out.status.code(), Some(0), "acquire {words:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Waits (bounded by `within`) for a spawned `redlock` to exit.
fn finish(mut child: std::process::Child, within: Duration) -> Output {
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "exec did not finish within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// `NAME=value` lines printed by `acquire`.
fn field(stdout: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in {stdout}"))
        .to_string()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("redlock-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn process_exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn acquire_extend_info_release_by_hand() {
    let mut servers = cluster(5);
    let mut acquire = redlock(&servers);
    acquire.args(["acquire", "deploy", "--ttl", "5000"]);
    let out = run_bounded(acquire, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let token = field(&stdout, "REDLOCK_TOKEN");
    let fence: u64 = field(&stdout, "REDLOCK_FENCING_TOKEN").parse().unwrap();
    assert!(fence > 0);
    assert_eq!(field(&stdout, "REDLOCK_RESOURCE"), "deploy");
    // Still held after the process exited.
    for server in &servers {
        assert_eq!(holder(server, "deploy").as_deref(), Some(token.as_str()));
    }

    let mut again = redlock(&servers);
    again.args(["acquire", "deploy", "--ttl", "5000", "--wait", "300"]);
    let out = run_bounded(again, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(HELD), "held: {}", text(&out.stderr));
    assert!(text(&out.stderr)
        .contains("is held by another owner: 0 of 5 granted (need 3); 5 held by another owner"));

    let mut extend = redlock(&servers);
    extend.args(["extend", "deploy", "--ttl", "20000"]).env("REDLOCK_TOKEN", &token);
    let out = run_bounded(extend, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(info_int(&mut servers[0].conn(), "deploy", "ttl-ms").unwrap() > 15_000);

    let mut info = redlock(&servers);
    info.args(["info", "deploy"]);
    let out = run_bounded(info, Duration::from_secs(10));
    let table = text(&out.stdout);
    assert_eq!(table.lines().count(), 6, "{table}");
    assert!(table.lines().next().unwrap().starts_with("member"));
    assert_eq!(table.lines().filter(|l| l.contains(&token) && l.contains("held")).count(), 5, "{table}");

    let mut wrong = redlock(&servers);
    wrong.args(["release", "deploy", "--token", "not-the-token"]);
    let out = run_bounded(wrong, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(NOT_HELD), "{}", text(&out.stderr));

    let mut release = redlock(&servers);
    release.args(["release", "deploy", "--token", &token]);
    let out = run_bounded(release, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_free(&all(&servers), "deploy");

    // Three nodes down: a distinct code, and a message that says why.
    for server in &mut servers[..3] {
        server.kill();
    }
    let mut down = redlock(&servers);
    down.args(["acquire", "deploy", "--ttl", "5000"]);
    let out = run_bounded(down, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(UNREACHABLE), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("2 of 5 granted (need 3); 3 unreachable"), "{stderr}");
    assert!(stderr.starts_with("redlock: too few nodes reachable for 'deploy': "), "{stderr}");
    assert!(!stderr.contains("no quorum"), "exit 68 is not 69's 'no quorum': {stderr}");
    let mut info = redlock(&servers);
    info.args(["info", "deploy"]);
    let table = text(&run_bounded(info, Duration::from_secs(10)).stdout);
    assert_eq!(table.lines().filter(|l| l.contains("unreachable")).count(), 3, "{table}");
    assert_eq!(table.lines().filter(|l| l.contains("free")).count(), 2, "{table}");
}

#[test]
fn exec_passes_the_fencing_token_and_the_exit_code_and_releases() {
    let servers = cluster(5);
    let dir = scratch("exec");
    let env_file = dir.join("env");
    let script = format!(
        "echo \"$REDLOCK_RESOURCE $REDLOCK_TOKEN $REDLOCK_FENCING_TOKEN\" > {0}.tmp && mv {0}.tmp {0}; sleep 0.5; exit 7",
        env_file.display()
    );
    let mut exec = redlock(&servers);
    exec.args(["exec", "cron-job", "--ttl", "3000", "--", "sh", "-c", &script]);
    let child = exec.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_until(Duration::from_secs(10), "the command to start", || env_file.exists());
    let seen = std::fs::read_to_string(&env_file).unwrap();
    let words: Vec<&str> = seen.split_whitespace().collect();
    assert_eq!(words.len(), 3, "{seen}");
    assert_eq!(words[0], "cron-job");
    let fence: u64 = words[2].parse().expect("a numeric fencing token");
    assert!(fence > 0);
    // While the command runs, the lock is held with the token it was given.
    for server in &servers {
        assert_eq!(holder(server, "cron-job").as_deref(), Some(words[1]));
    }
    // A second run of the job is refused while the first holds the lock.
    let mut second = redlock(&servers);
    second.args(["exec", "cron-job", "--", "true"]);
    let out = run_bounded(second, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(HELD), "{}", text(&out.stderr));

    let out = finish(child, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(7), "the command's exit code; stderr: {}", text(&out.stderr));
    assert_free(&all(&servers), "cron-job");

    // A command that does not exist: 127, and nothing left locked.
    let mut missing = redlock(&servers);
    missing.args(["exec", "cron-job", "--", "/nonexistent/command"]);
    let out = run_bounded(missing, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
    assert_free(&all(&servers), "cron-job");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--no-fence`: no fencing round, and no fencing token (not even one the
/// caller's environment had).
#[test]
fn no_fence_skips_the_fencing_round_and_the_token() {
    let servers = cluster(5);
    let mut acquire = redlock(&servers);
    acquire.args(["acquire", "deploy", "--ttl", "5000", "--no-fence"]);
    let out = run_bounded(acquire, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("REDLOCK_FENCING_TOKEN"), "{stdout}");
    let token = field(&stdout, "REDLOCK_TOKEN");
    let mut release = redlock(&servers);
    release.args(["release", "deploy", "--token", &token]);
    assert_eq!(run_bounded(release, Duration::from_secs(10)).status.code(), Some(0));

    let dir = scratch("no-fence");
    let seen = dir.join("seen");
    let script = format!("echo \"${{REDLOCK_FENCING_TOKEN-unset}} $REDLOCK_TOKEN\" > {}", seen.display());
    let mut exec = redlock(&servers);
    exec.args(["exec", "--no-fence", "job", "--", "sh", "-c", &script]).env("REDLOCK_FENCING_TOKEN", "999");
    let out = run_bounded(exec, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert!(seen.starts_with("unset ") && seen.trim().len() == "unset ".len() + 32, "{seen}");
    assert_eq!(servers.iter().map(fence_calls).sum::<i64>(), 0, "no fencing round");
    assert_free(&all(&servers), "job");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three of five nodes die while the command runs: the renewal fails,
/// `exec` stops the command and exits 75 within one renewal interval plus
/// the grace period.
#[test]
fn exec_stops_the_command_when_the_lock_is_lost() {
    for ignores_sigterm in [false, true] {
        let mut servers = cluster(5);
        let dir = scratch(if ignores_sigterm { "lost-stubborn" } else { "lost" });
        let pid_file = dir.join("pid");
        let script = if ignores_sigterm {
            format!(
                "trap '' TERM; echo $$ > {0}.tmp && mv {0}.tmp {0}; while :; do sleep 0.05; done",
                pid_file.display()
            )
        } else {
            format!("echo $$ > {0}.tmp && mv {0}.tmp {0}; exec sleep 30", pid_file.display())
        };
        let mut exec = redlock(&servers);
        exec.args(["exec", "guarded", "--ttl", "1500", "--grace", "400", "--", "sh", "-c", &script]);
        let mut child = exec.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        wait_until(Duration::from_secs(10), "the command to start", || pid_file.exists());
        let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        assert!(process_exists(pid));

        for server in &mut servers[..3] {
            server.kill();
        }
        let killed = Instant::now();
        // One renewal interval (500 ms) + the grace (400 ms) + slack.
        let bound = Duration::from_millis(500 + 400 + 1_100);
        while child.try_wait().unwrap().is_none() {
            if killed.elapsed() > bound {
                let _ = child.kill();
                panic!("exec still running {bound:?} after the nodes died");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let took = killed.elapsed();
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(75), "stderr: {stderr}");
        assert!(stderr.contains("is lost") && stderr.contains("3 unreachable"), "{stderr}");
        assert!(!process_exists(pid), "the command (pid {pid}) is still running");
        if ignores_sigterm {
            assert!(stderr.contains("sending SIGKILL"), "{stderr}");
            assert!(took >= Duration::from_millis(400), "SIGKILL came before the grace period: {took:?}");
        }
        assert_free(&[&servers[3], &servers[4]], "guarded");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Whether `pid` runs: it exists and is not a zombie (an orphan that its
/// new parent has not reaped yet has stopped all the same).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) state ...`: the state follows the last parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        Err(_) => false,
    }
}

/// The pids a command wrote to `file`, one a line.
fn pids_in(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Kills (SIGKILL, by pid) what a failed test leaves of a command's
/// processes, so that no `sleep 30` outlives it.
struct KillLeftovers(PathBuf);

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        for pid in pids_in(&self.0).into_iter().filter(|&pid| alive(pid)) {
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
        }
    }
}

/// `redlock exec` stops everything the command started, not only its first
/// process: a shell with a job in the background and a pipeline in the
/// foreground, each process of which writes its pid. When the lock is
/// lost (revoked on a majority: the next renewal fails), every one of them
/// is gone within one renewal interval plus the grace period, and exec
/// exits 75; a SIGTERM sent to `redlock` is passed on to all of them too
/// (exit 143, the shell's death by SIGTERM). Both times the lock is free.
#[test]
fn exec_stops_every_process_of_the_command() {
    let servers = cluster(3);
    let dir = scratch("group");
    for how in ["lost", "sigterm"] {
        let resource = format!("group-{how}");
        let pid_file = dir.join(how);
        let _leftovers = KillLeftovers(pid_file.clone());
        let child_writes = format!("sh -c 'echo $$ >> {}; exec sleep 30'", pid_file.display());
        let script = format!("echo $$ >> {0}; {1} & {1} | {1}; wait", pid_file.display(), child_writes);
        let mut exec = redlock(&servers);
        exec.args(["exec", &resource, "--ttl", "1500", "--grace", "400", "--", "sh", "-c", &script]);
        let mut child = exec.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        wait_until(Duration::from_secs(10), "the shell and its three children to start", || {
            pids_in(&pid_file).len() == 4
        });
        let pids = pids_in(&pid_file);
        assert!(pids.iter().all(|&pid| alive(pid)), "{pids:?}");

        let struck = Instant::now();
        if how == "lost" {
            for server in &servers[..2] {
                assert_eq!(int(&mut server.conn(), &["LOCK.REVOKE", &resource]), 1);
            }
        } else {
            let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
            assert!(status.success());
        }
        // One renewal interval (500 ms) + the grace (400 ms) + slack.
        let bound = Duration::from_millis(500 + 400 + 1_100);
        let mut exited = None;
        while exited.is_none() || pids.iter().any(|&pid| alive(pid)) {
            if struck.elapsed() > bound {
                let left: Vec<i32> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
                let _ = child.kill();
                panic!("{how}: after {bound:?}, exec exited: {exited:?}, processes still running: {left:?} of {pids:?}");
            }
            if exited.is_none() {
                exited = child.try_wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        if how == "lost" {
            assert_eq!(out.status.code(), Some(75), "stderr: {stderr}");
            assert!(stderr.contains("is lost"), "{stderr}");
        } else {
            assert_eq!(out.status.code(), Some(128 + 15), "stderr: {stderr}");
        }
        assert!(!stderr.contains("sending SIGKILL"), "SIGTERM stops them all: {stderr}");
        assert_free(&all(&servers), &resource);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--help` is short (the commands, examples, the exit codes in one
/// breath); each command's `--help` is long, with the whole table.
#[test]
fn help_is_short_and_each_command_has_a_long_one() {
    let help = |words: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.env_remove("REDLOCK_NODES").args(words);
        let out = run_bounded(cmd, Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(0), "{words:?}");
        text(&out.stdout)
    };
    let short = help(&["--help"]);
    assert!(short.lines().count() <= 30, "{} lines: {short}", short.lines().count());
    for needle in ["Examples:", "redlock exec", "Exit codes:", "73 held", "74 quarantined", "check"] {
        assert!(short.contains(needle), "--help lacks {needle}: {short}");
    }
    assert_eq!(help(&["-h"]), short);
    let exec = help(&["exec", "--help"]);
    for needle in
        ["cron", "REDLOCK_FENCING_TOKEN", "--mode permit --permits 2", "--no-fence", "Modes", "--tls-ca-file"]
    {
        assert!(exec.contains(needle), "exec --help lacks {needle}: {exec}");
    }
    for command in ["exec", "acquire", "release", "extend", "check", "info"] {
        let long = help(&[command, "--help"]);
        for code in ["  0 ", "  2 ", "  3 ", "  68 ", "  69 ", "  73 ", "  74 ", "  75 ", "  126 "] {
            assert!(long.contains(code), "{command} --help lacks exit code {code}: {long}");
        }
    }
    assert!(help(&["acquire", "--help"]).contains("[default: 10000]"), "acquire's default --ttl");

    // No nodes given, an unknown flag: usage errors.
    for words in [&["info", "x"][..], &["--nodes", "redis://n", "acquire", "x", "--frobnicate"]] {
        let mut cmd = Command::new(BIN);
        cmd.env_remove("REDLOCK_NODES").args(words);
        assert_eq!(run_bounded(cmd, Duration::from_secs(10)).status.code(), Some(USAGE), "{words:?}");
    }
}

/// A member that cannot be used: a usage error that names it and says
/// what to write instead (before any node is contacted).
#[test]
fn bad_node_urls_say_what_to_write() {
    for (url, says) in [
        (
            "localhost:6379",
            "not a URL: write it as redis[s]://[[user]:password@]host:port[/db], e.g. redis://localhost:6379",
        ),
        ("http://10.0.0.1:6379", "the scheme is http://, not redis://"),
        ("rediss://10.0.0.1:6379#insecure", "a #fragment (TLS settings are tls_ca_file"),
        ("redis://10.0.0.1:port", "invalid port number"),
        ("redis://10.0.0.1:6379/zero", "not a number"),
        ("redis+cluster://10.0.0.1:7000/1", "a cluster has database 0 only"),
        (
            "redis+cluster://10.0.0.1:7000?seed=10.0.0.2:7000",
            "unknown parameter \"seed\" (only addr=host:port)",
        ),
        ("redis+cluster://10.0.0.1:7000?addr=10.0.0.2", "addr=10.0.0.2 is not host:port"),
    ] {
        let mut cmd = Command::new(BIN);
        cmd.env("REDLOCK_NODES", format!("redis://127.0.0.1:1,{url}")).args(["acquire", "x"]);
        let out = run_bounded(cmd, Duration::from_secs(10));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(USAGE), "{url}: {stderr}");
        assert!(stderr.contains(&format!("member {url:?}")) && stderr.contains(says), "{url}: {stderr}");
        assert!(
            !stderr.contains("InvalidClientConfig") && !stderr.contains("did not parse"),
            "{url}: {stderr}"
        );
    }
}

/// `--mode exclusive` is a usage error that says to write plain or write
/// (the word could mean either), before any node is contacted.
#[test]
fn the_mode_exclusive_is_a_usage_error() {
    for words in [
        &["acquire", "deploy", "--mode", "exclusive"][..],
        &["exec", "deploy", "--mode", "exclusive", "--", "true"],
        &["release", "a", "b", "--mode", "read,exclusive", "--token", "t"],
    ] {
        let mut cmd = Command::new(BIN);
        cmd.env("REDLOCK_NODES", "redis://127.0.0.1:1").args(words);
        let out = run_bounded(cmd, Duration::from_secs(10));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(USAGE), "{words:?}: {stderr}");
        assert!(
            stderr.contains(
                "mode 'exclusive' is ambiguous: use 'plain' (LOCK.ACQUIRE, one holder) or 'write' (the write \
                 side of a read-write lock)"
            ),
            "{words:?}: {stderr}"
        );
    }
}

/// The lock.acquire calls of every node so far, summed.
fn acquire_calls(servers: &[Server]) -> i64 {
    servers.iter().map(|s| calls(s, "lock.acquire")).sum()
}

/// An argument every node refuses (`ERR ... out of range`), or a key that
/// is not a lock (`WRONGTYPE`), is a usage error, not "no quorum", and
/// `--wait` does not retry it: one attempt.
#[test]
fn an_argument_the_nodes_refuse_is_a_usage_error() {
    let servers = cluster(3);
    let _: () = cmd("SET").arg("config").arg("x").query(&mut servers[0].conn()).unwrap();
    let _: () = cmd("SET").arg("config").arg("x").query(&mut servers[1].conn()).unwrap();
    for (words, says) in [
        (["acquire", "deploy", "--ttl", "99999999"], "ERR lock.acquire: ttl-ms 99999999 is out of range"),
        (["acquire", "config", "--ttl", "5000"], "WRONGTYPE Operation against a key holding the wrong kind"),
    ] {
        let before = acquire_calls(&servers);
        let started = Instant::now();
        let mut acquire = redlock(&servers);
        acquire.args(words).args(["--wait", "10000"]);
        let out = run_bounded(acquire, Duration::from_secs(20));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(USAGE), "{stderr}");
        assert!(stderr.contains("the nodes refuse the request for '"), "{stderr}");
        assert!(stderr.contains("a retry would be refused again): member 1 (redis://"), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!stderr.contains("no quorum"), "{stderr}");
        assert_eq!(acquire_calls(&servers) - before, 3, "one attempt: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(5), "retried for {:?}", started.elapsed());
    }
    assert_free(&all(&servers), "deploy");
    assert_free(&[&servers[2]], "config");

    let token = field(&acquired(&servers, &["deploy"]), "REDLOCK_TOKEN");
    let out = call(&servers, &["extend", "deploy", "--ttl", "99999999", "--token", &token]);
    assert_eq!(out.status.code(), Some(USAGE), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("ttl-ms"), "{}", text(&out.stderr));
}

/// Releasing twice: the second release says the token no longer holds the
/// lock (3, not "held by another owner"), as does extending it then.
#[test]
fn a_double_release_is_not_held() {
    let servers = cluster(3);
    let token = field(&acquired(&servers, &["deploy"]), "REDLOCK_TOKEN");
    for (attempt, code) in [(1, 0), (2, NOT_HELD)] {
        let mut release = redlock(&servers);
        release.args(["release", "deploy"]).env("REDLOCK_TOKEN", &token);
        let out = run_bounded(release, Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(code), "release {attempt}: {}", text(&out.stderr));
    }
    let stderr = text(&call(&servers, &["release", "deploy", "--token", &token]).stderr);
    assert!(
        stderr.contains(
            "'deploy' is not held with this token (already released, expired, or taken by another owner), \
             nothing to release: 0 of 3 released (need 2); 3 not holding"
        ),
        "{stderr}"
    );
    let out = call(&servers, &["extend", "deploy", "--ttl", "5000", "--token", &token]);
    assert_eq!(out.status.code(), Some(NOT_HELD), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nothing to extend"), "{}", text(&out.stderr));
}

/// `redlock check RESOURCE TOKEN`: 0 (and quiet) while the token is the
/// live grant on a majority, 3 once it is not, 68 when the nodes cannot
/// say.
#[test]
fn check_asks_the_quorum_whether_a_fencing_token_is_live() {
    let mut servers = cluster(3);
    let check = |servers: &[Server], token: &str| call(servers, &["check", "deploy", token]);
    let stdout = acquired(&servers, &["deploy", "--ttl", "20000"]);
    let (token, fence) = (field(&stdout, "REDLOCK_TOKEN"), field(&stdout, "REDLOCK_FENCING_TOKEN"));

    let out = check(&servers, &fence);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!((text(&out.stdout), text(&out.stderr)), (String::new(), String::new()), "quiet");
    let stale = (fence.parse::<u64>().unwrap() - 1).to_string();
    let out = check(&servers, &stale);
    assert_eq!(out.status.code(), Some(NOT_HELD), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains(&format!("fencing token {stale} is not the live grant of 'deploy' on a majority")),
        "{}",
        text(&out.stderr)
    );

    // One node down: the other two still confirm it. (A node whose own,
    // late grant carried a token above T answers 0 for T: if there is
    // one, it is the one to go.)
    let fence_number: u64 = fence.parse().unwrap();
    let down = servers.iter().position(|s| !checks(s, "deploy", fence_number)).unwrap_or(0);
    servers[down].kill();
    assert_eq!(check(&servers, &fence).status.code(), Some(0));
    assert_eq!(call(&servers, &["release", "deploy", "--token", &token]).status.code(), Some(0));
    assert_eq!(check(&servers, &fence).status.code(), Some(NOT_HELD), "released");
    servers[(down + 1) % 3].kill();
    let out = check(&servers, &fence);
    assert_eq!(out.status.code(), Some(UNREACHABLE), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot tell"), "{}", text(&out.stderr));
}

/// A node list that names servers without the module: a usage error (no
/// retry helps), whose message says to load the module.
#[test]
fn servers_without_the_module_say_to_load_it() {
    let servers = start_all((0..3).map(|_| Opts { without_module: true, ..Opts::new() }).collect());
    // The ERR replies of every node so far (INFO errorstats), each read
    // on one connection opened before (a new one may add errors of its own
    // handshake).
    let mut conns: Vec<Connection> = servers.iter().map(Server::conn).collect();
    let mut errors = || -> i64 {
        let count = |c: &mut Connection| {
            let stats: String = cmd("INFO").arg("errorstats").query(c).unwrap();
            let line = stats.lines().find_map(|l| l.strip_prefix("errorstat_ERR:count="));
            line.map_or(0, |n| n.trim().parse().unwrap())
        };
        conns.iter_mut().map(count).sum()
    };
    let before = errors();
    let started = Instant::now();
    let out = call(&servers, &["acquire", "deploy", "--wait", "8000"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(USAGE), "{stderr}");
    // One attempt: per node, its LOCK.ACQUIRE and the undo's LOCK.RELEASE.
    assert_eq!(errors() - before, 6, "one attempt: {stderr}");
    assert!(started.elapsed() < Duration::from_secs(4), "retried for {:?}", started.elapsed());
    assert!(stderr.contains("ERR unknown command 'lock.acquire'"), "{stderr}");
    assert!(stderr.contains("the lock module is not loaded on that node: add `loadmodule"), "{stderr}");
}

/// The README's Rust quick start (built with the tests, as every example
/// is) says what is wrong in a sentence: no node list, or nodes down.
#[test]
fn the_quick_start_example_says_what_is_wrong() {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let example = deps.parent().unwrap().join("examples/quickstart");
    assert!(example.exists(), "{} (cargo test builds the examples)", example.display());
    let out = Command::new(&example).env_remove("REDLOCK_NODES").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "quickstart: REDLOCK_NODES is not set: `. run/env` after scripts/run sets it\n"
    );
    let mut servers = cluster(3);
    let urls = urls(&servers).join(",");
    for server in &mut servers {
        server.kill();
    }
    let mut cmd = Command::new(&example);
    cmd.env("REDLOCK_NODES", urls);
    let out = run_bounded(cmd, Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("quickstart: no quorum for 'orders:42': 0 of 3 granted (need 2); 3 unreachable"),
        "{stderr}"
    );
    assert!(!stderr.contains("NoQuorum {"), "no Debug dump: {stderr}");
}

/// Nodes in their start-up quarantine: 74, and the message says when to
/// try again; a mix of causes (one node held by another owner, two down)
/// is "no quorum", 69.
#[test]
fn quarantine_and_mixed_failures_have_their_codes() {
    let quarantined = start_all((0..3).map(|_| Opts::new().module_arg("quarantine-ms", "30000")).collect());
    let out = call(&quarantined, &["acquire", "deploy"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(QUARANTINED), "{stderr}");
    assert!(stderr.contains("3 quarantined") && stderr.contains("; retry in "), "{stderr}");
    drop(quarantined);

    let mut servers = cluster(5);
    let taken: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg("deploy")
        .arg("someone-else")
        .arg(20_000)
        .query(&mut servers[0].conn())
        .unwrap();
    assert!(taken.is_some());
    for server in &mut servers[3..] {
        server.kill();
    }
    let out = call(&servers, &["acquire", "deploy"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(NO_QUORUM), "{stderr}");
    assert!(stderr.contains("2 of 5 granted (need 3); 1 held by another owner; 2 unreachable"), "{stderr}");
}

/// `exec --mode permit --permits 2`: two commands run at once, a third is
/// refused at once (73, saying that 4 of 5 nodes are needed) or, with
/// `--wait`, runs once a permit is free.
#[test]
fn exec_with_two_permits_runs_two_commands_at_once() {
    let servers = cluster(5);
    let dir = scratch("permits");
    let go = dir.join("go");
    // Each holder marks that it runs, then waits (bounded: 20 s) for "go".
    let holder_script = |name: &str| {
        format!(
            "touch {0}; i=0; while [ ! -e {1} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done",
            dir.join(name).display(),
            go.display()
        )
    };
    let permit_exec = |extra: &[&str], script: &str| {
        let mut exec = redlock(&servers);
        exec.args(["exec", "--mode", "permit", "--permits", "2", "backups", "--ttl", "3000"]);
        exec.args(extra).args(["--", "sh", "-c", script]);
        exec.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    };
    let first = permit_exec(&[], &holder_script("one"));
    let second = permit_exec(&[], &holder_script("two"));
    wait_until(Duration::from_secs(10), "both holders to run", || {
        dir.join("one").exists() && dir.join("two").exists()
    });
    // Both hold a permit on every node (the rounds' late calls have had
    // time: they are bounded by the 200 ms timeout).
    wait_until(Duration::from_secs(2), "both permits on every node", || {
        servers.iter().all(|s| info_int(&mut s.conn(), "backups", "holds") == Some(2))
    });

    // A third, without --wait: refused at once, and told why.
    let mut third = redlock(&servers);
    third.args(["exec", "--mode", "permit", "--permits", "2", "backups", "--", "true"]);
    let out = run_bounded(third, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(HELD), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("(need 4 for a 2-permit semaphore)"), "{}", text(&out.stderr));

    // A third with --wait: waits while both permits are taken, then runs.
    let ran = dir.join("three");
    let waiting = permit_exec(&["--wait", "15000"], &format!("touch {}", ran.display()));
    std::thread::sleep(Duration::from_millis(500));
    assert!(!ran.exists(), "the third command ran while two held the permits");
    std::fs::write(&go, b"").unwrap();
    for child in [first, second, waiting] {
        let out = finish(child, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    }
    assert!(ran.exists(), "the waiting command ran");
    for server in &servers {
        assert_eq!(lock_info(&mut server.conn(), "backups"), None, "port {}", server.port);
    }

    // --mode permit needs --permits (a usage error), and acquire prints the
    // mode and count, which release takes back.
    let mut bad = redlock(&servers);
    bad.args(["acquire", "--mode", "permit", "backups", "--ttl", "3000"]);
    assert_eq!(run_bounded(bad, Duration::from_secs(10)).status.code(), Some(2));
    let mut acquire = redlock(&servers);
    acquire.args(["acquire", "--mode", "permit", "--permits", "2", "backups", "--ttl", "3000"]);
    let out = run_bounded(acquire, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        (field(&stdout, "REDLOCK_MODE"), field(&stdout, "REDLOCK_PERMITS")),
        ("permit".into(), "2".into())
    );
    let mut info = redlock(&servers);
    info.args(["info", "backups"]);
    let table = text(&run_bounded(info, Duration::from_secs(10)).stdout);
    assert!(
        table.lines().filter(|l| l.contains("semaphore/2") && l.contains("permit")).count() >= 3,
        "{table}"
    );
    let mut release = redlock(&servers);
    release.args([
        "release",
        "--mode",
        "permit",
        "--permits",
        "2",
        "backups",
        "--token",
        &field(&stdout, "REDLOCK_TOKEN"),
    ]);
    let out = run_bounded(release, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    for server in &servers {
        assert_eq!(lock_info(&mut server.conn(), "backups"), None, "port {}", server.port);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `exec` with three resources: one set, all or nothing, one fencing
/// token; `--mode` once per resource; the command's exit code; released
/// everywhere. Then acquire, extend and release of a set by hand.
#[test]
fn exec_holds_three_resources_as_one_set() {
    let servers = cluster(3);
    let keys = ["acct:1", "acct:2", "ledger"];
    let dir = scratch("set");
    let (env_file, go) = (dir.join("env"), dir.join("go"));
    // The resources one per line, then the token and the fencing token;
    // then wait (bounded: 20 s) for "go", and exit 5.
    let script = format!(
        "{{ printf '%s\\n' \"$REDLOCK_RESOURCES\"; echo \"$REDLOCK_RESOURCE $REDLOCK_TOKEN $REDLOCK_FENCING_TOKEN\"; }} \
         > {0}.tmp && mv {0}.tmp {0}; i=0; while [ ! -e {1} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; exit 5",
        env_file.display(),
        go.display()
    );
    let mut exec = redlock(&servers);
    exec.args(["exec", "--mode", "plain", "acct:1", "acct:2", "--mode", "write", "ledger", "--mode", "read"]);
    exec.args(["--ttl", "3000", "--", "sh", "-c", &script]);
    let child = exec.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_until(Duration::from_secs(10), "the command to start", || env_file.exists());
    let seen = std::fs::read_to_string(&env_file).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines[..3], keys, "{seen}");
    let words: Vec<&str> = lines[3].split(' ').collect();
    assert_eq!(words.len(), 3, "{seen}");
    assert_eq!(words[0], "acct:1", "REDLOCK_RESOURCE is the first");
    let (token, fence) = (words[1], words[2].parse::<u64>().expect("a numeric fencing token"));
    // Every node holds the three keys for the command's token (late grants
    // have had time: bounded by the 200 ms timeout); T is the live grant of
    // every key on a majority.
    wait_until(Duration::from_secs(2), "the set on every node", || {
        servers.iter().all(|s| keys.iter().all(|k| holders(s, k).iter().any(|(h, _)| h == token)))
    });
    for key in keys {
        assert!(servers.iter().filter(|s| checks(s, key, fence)).count() >= 2, "'{key}' fenced with {fence}");
    }
    // A writer of one key of the set is refused (73); a set with a permit,
    // a --mode count that does not match, or a resource named twice is a
    // usage error (2).
    let mut writer = redlock(&servers);
    writer.args(["exec", "--mode", "write", "acct:2", "--", "true"]);
    let out = run_bounded(writer, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(HELD), "{}", text(&out.stderr));
    for (bad, code, says) in [
        (
            &["exec", "--mode", "permit", "--permits", "2", "x", "y", "--", "true"][..],
            2,
            "cannot be part of a set",
        ),
        (&["exec", "--mode", "read,write", "x", "y", "z", "--", "true"][..], 2, "--mode given 2 times"),
        (&["acquire", "x", "x", "--ttl", "1000"][..], 2, "resource 'x' is listed twice"),
    ] {
        let mut cmd = redlock(&servers);
        cmd.args(bad);
        let out = run_bounded(cmd, Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(code), "{bad:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{bad:?}: {}", text(&out.stderr));
    }

    std::fs::write(&go, b"").unwrap();
    let out = finish(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(5), "the command's exit code; stderr: {}", text(&out.stderr));
    for server in &servers {
        for key in keys {
            assert_eq!(lock_info(&mut server.conn(), key), None, "'{key}' on port {}", server.port);
        }
    }

    // By hand: acquire prints the set, extend and release take it back.
    let mut acquire = redlock(&servers);
    acquire.args(["acquire", "a", "b", "c", "--ttl", "5000"]);
    let out = run_bounded(acquire, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("REDLOCK_RESOURCES='a\nb\nc'\n"), "{stdout}");
    let token = field(&stdout, "REDLOCK_TOKEN");
    let set_fence: u64 = field(&stdout, "REDLOCK_FENCING_TOKEN").parse().unwrap();
    assert!(set_fence > fence, "{set_fence} after the exec's {fence}");
    let mut extend = redlock(&servers);
    extend.args(["extend", "a", "b", "c", "--ttl", "20000", "--token", &token]);
    let out = run_bounded(extend, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(info_int(&mut servers[0].conn(), "c", "ttl-ms").unwrap() > 15_000);
    let mut part = redlock(&servers);
    part.args(["release", "a", "b", "--token", &token]);
    let out = run_bounded(part, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "releasing part of a set by token: {}", text(&out.stderr));
    let mut rest = redlock(&servers);
    rest.args(["release", "a", "b", "c", "--token", &token]);
    let out = run_bounded(rest, Duration::from_secs(10));
    assert_eq!(
        out.status.code(),
        Some(NOT_HELD),
        "a and b are gone: not the set any more; {}",
        text(&out.stderr)
    );
    for server in &servers {
        for key in ["a", "b", "c"] {
            assert_eq!(lock_info(&mut server.conn(), key), None, "'{key}' on port {}", server.port);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The TLS settings as flags and as REDLOCK_* variables: a lock taken,
/// extended and released over mutual TLS; an unknown CA exits 68
/// (unreachable) naming the node and the cause; TLS settings with no
/// rediss:// member are a usage error. Skipped (and said) on a server
/// built without TLS (see client/tests/tls.rs).
#[test]
fn tls_settings_as_flags_and_environment() {
    if !tls_or_skip("tls_settings_as_flags_and_environment") {
        return;
    }
    let servers = start_all((0..3).map(|_| Opts::new().tls(TlsPort::new("server", true))).collect());
    let certs = certs();
    let nodes: Vec<String> = servers.iter().map(|s| s.tls_url("localhost")).collect();
    let tls = |words: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.env("REDLOCK_NODES", nodes.join(",")).args(["--timeout", "500", "--connect-timeout", "1000"]);
        cmd.env_remove("REDLOCK_TOKEN");
        // The CA as a flag, the client's identity from the environment.
        cmd.arg("--tls-ca-file").arg(certs.crt("ca"));
        cmd.env("REDLOCK_TLS_CERT_FILE", certs.crt("client"))
            .env("REDLOCK_TLS_KEY_FILE", certs.key("client"));
        cmd.args(words);
        run_bounded(cmd, Duration::from_secs(10))
    };
    let out = tls(&["acquire", "deploy", "--ttl", "5000"]);
    assert_eq!(out.status.code(), Some(0), "acquire over mutual TLS: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let token = field(&stdout, "REDLOCK_TOKEN");
    assert!(field(&stdout, "REDLOCK_FENCING_TOKEN").parse::<u64>().unwrap() > 0);
    for server in &servers {
        assert_eq!(holder(server, "deploy").as_deref(), Some(token.as_str()));
    }
    let out = tls(&["extend", "deploy", "--ttl", "20000", "--token", &token]);
    assert_eq!(out.status.code(), Some(0), "extend: {}", text(&out.stderr));
    let out = tls(&["release", "deploy", "--token", &token]);
    assert_eq!(out.status.code(), Some(0), "release: {}", text(&out.stderr));
    assert_free(&all(&servers), "deploy");

    // A CA that signed none of the nodes' certificates (the flag wins over
    // the variable; it may follow the command).
    let mut cmd = Command::new(BIN);
    cmd.env("REDLOCK_NODES", nodes.join(",")).env("REDLOCK_TLS_CA_FILE", certs.crt("ca"));
    cmd.args(["acquire", "deploy", "--tls-ca-file"]).arg(certs.crt("other-ca"));
    let out = run_bounded(cmd, Duration::from_secs(10));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(UNREACHABLE), "{stderr}");
    assert!(
        stderr.contains("3 unreachable (first: TLS handshake with ") && stderr.contains("failed: unknown CA"),
        "{stderr}"
    );
    assert!(
        servers.iter().any(|s| stderr.contains(&format!("localhost:{}", s.tls_port.unwrap()))),
        "no node named: {stderr}"
    );
    // `status` says it per node.
    let mut cmd = Command::new(BIN);
    cmd.env("REDLOCK_NODES", nodes.join(",")).arg("--tls-ca-file").arg(certs.crt("other-ca")).arg("status");
    let out = run_bounded(cmd, Duration::from_secs(10));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(UNREACHABLE), "{stdout}{}", text(&out.stderr));
    for server in &servers {
        let node = format!("localhost:{}", server.tls_port.unwrap());
        assert!(
            stdout.lines().any(|l| l.contains(&node)
                && l.contains("unreachable: TLS handshake")
                && l.contains("unknown CA")),
            "{node}: {stdout}"
        );
    }

    // No CA given: the system's trust store, which does not hold the test
    // CA, unless SSL_CERT_FILE (read with the system's store) names it.
    let system = |ca: Option<&Path>| {
        let mut cmd = Command::new(BIN);
        cmd.env("REDLOCK_NODES", nodes[0].as_str()).env_remove("SSL_CERT_DIR").env_remove("SSL_CERT_FILE");
        cmd.env("REDLOCK_TLS_CERT_FILE", certs.crt("client"))
            .env("REDLOCK_TLS_KEY_FILE", certs.key("client"));
        if let Some(ca) = ca {
            cmd.env("SSL_CERT_FILE", ca);
        }
        cmd.args(["acquire", "system-roots", "--ttl", "1000"]);
        run_bounded(cmd, Duration::from_secs(10))
    };
    let out = system(None);
    assert_eq!(out.status.code(), Some(UNREACHABLE), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("unknown CA"), "{}", text(&out.stderr));
    let out = system(Some(&certs.crt("ca")));
    assert_eq!(out.status.code(), Some(0), "SSL_CERT_FILE: {}", text(&out.stderr));

    // TLS settings, but every member plain.
    let plain = servers[0].url();
    let mut cmd = Command::new(BIN);
    cmd.env("REDLOCK_NODES", &plain).env("REDLOCK_TLS_INSECURE_SKIP_VERIFY", "true").args(["acquire", "x"]);
    let out = run_bounded(cmd, Duration::from_secs(10));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(USAGE), "{stderr}");
    assert!(stderr.contains("tls_insecure_skip_verify is given but no member is rediss://"), "{stderr}");
}
