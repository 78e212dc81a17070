//! `redlock status` and `Redlock::status` against real servers: every node
//! up; one down; one quarantined and then most; a setting that differs; a
//! server without the module. Each answers what stands between the quorum
//! and a grant, with its exit code.

use std::process::Command;
use std::time::Duration;

use lock_testkit_client::*;
use redlock_client::{Blocker, Readiness};

mod common;

use common::*;

/// Servers as an operator runs them: every protection on (the default
/// quarantine), the start-up quarantine of these brand-new nodes ended the
/// one-shot way.
fn protected(n: usize) -> Vec<Server> {
    protected_with((0..n).map(|_| Opts::new()).collect())
}

fn protected_with(opts: Vec<Opts>) -> Vec<Server> {
    let servers = start_all(opts.into_iter().map(|o| o.module_arg("quarantine-ms", "-1")).collect());
    for server in &servers {
        let left: i64 = cmd("LOCK.UNQUARANTINE").arg("STARTUP").query(&mut server.conn()).unwrap();
        assert!(left > 0);
    }
    servers
}

/// `redlock status` against `urls`, run to completion (bounded): its exit
/// code and what it printed.
fn status(urls: &[String]) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    cmd.env("REDLOCK_NODES", urls.join(",")).args(["--timeout", "300", "--connect-timeout", "300", "status"]);
    let out = run_bounded(cmd, Duration::from_secs(10));
    (out.status.code().unwrap_or(-1), format!("{}{}", text(&out.stdout), text(&out.stderr)))
}

fn row<'a>(report: &'a str, url: &str) -> &'a str {
    report.lines().find(|l| l.starts_with(url)).unwrap_or_else(|| panic!("no row for {url}:\n{report}"))
}

#[test]
fn every_node_up_and_protected_is_exit_0() {
    let servers = protected(5);
    let urls = urls(&servers);
    let token: i64 = cmd("LOCK.ACQUIRE").arg("k").arg("t").arg(5000).query(&mut servers[2].conn()).unwrap();
    let (code, report) = status(&urls);
    assert_eq!(code, OK, "{report}");
    assert!(report.ends_with("a majority can grant now: 5 of 5 members grant (need 3)\n"), "{report}");
    for url in &urls {
        let line = row(&report, url);
        assert!(line.contains(" grants "), "{line}");
        assert!(line.trim_end().ends_with('-'), "no protection off: {line}");
    }
    // The fencing counter of each node, as INFO lock gives it.
    assert!(row(&report, &urls[2]).contains(&format!(" {token} ")), "{report}");
    assert!(!report.contains("setting differs") && !report.contains("protection off"), "{report}");
}

#[test]
fn one_node_down_still_grants_and_says_which() {
    let mut servers = protected(5);
    servers[4].kill();
    let urls = urls(&servers);
    let (code, report) = status(&urls);
    assert_eq!(code, OK, "a majority grants: {report}");
    assert!(row(&report, &urls[4]).starts_with(&format!("{}  unreachable: ", urls[4])), "{report}");
    assert!(report.ends_with("a majority can grant now: 4 of 5 members grant (need 3)\n"), "{report}");
    // Three down: no majority, and the cause is unreachability.
    servers[3].kill();
    servers[2].kill();
    let (code, report) = status(&urls);
    assert_eq!(code, UNREACHABLE, "{report}");
    assert!(
        report.ends_with(
            "no majority can grant now: 2 of 5 members grant (need 3); 3 unreachable; are the nodes up, and are their URLs right?\n"
        ),
        "{report}"
    );
}

#[test]
fn quarantined_nodes_say_for_how_long() {
    let mut opts: Vec<Opts> = (0..5).map(|_| Opts::new()).collect();
    opts[1] = Opts::new().module_arg("quarantine-ms", "60000");
    let servers = start_all(opts);
    for (i, server) in servers.iter().enumerate() {
        if i != 1 {
            let _: () =
                cmd("CONFIG").arg("SET").arg("lock.quarantine-ms").arg(-1).query(&mut server.conn()).unwrap();
        }
    }
    let urls = urls(&servers);
    let (code, report) = status(&urls);
    let line = row(&report, &urls[1]);
    assert!(
        line.contains("quarantined") && line.contains("startup 5") && line.contains(" ms left"),
        "{line}"
    );
    // Node 1 alone has quarantine-ms 60000, the others -1.
    assert!(report.contains("setting differs: lock.quarantine-ms: -1 on "), "{report}");
    assert!(report.contains(&format!("; 60000 on {}\n", urls[1])), "{report}");
    assert_eq!(code, SETTINGS, "a majority grants, the settings differ: {report}");

    // Three of five quarantined (the restart of a whole quorum): 74, and
    // when a majority will grant again.
    let servers = start_all((0..3).map(|_| Opts::new().module_arg("quarantine-ms", "30000")).collect());
    let (code, report) = status(&lock_testkit_client::urls(&servers));
    assert_eq!(code, QUARANTINED, "{report}");
    assert!(report.contains("no majority can grant now: 0 of 3 members grant (need 2); 3 quarantined; a majority can grant in "), "{report}");
}

#[test]
fn a_setting_that_differs_or_a_protection_off_is_exit_78() {
    let mut opts: Vec<Opts> = (0..3).map(|_| Opts::new()).collect();
    opts[2] = Opts::new().module_arg("max-ttl-ms", "60000");
    let servers = protected_with(opts);
    let urls = urls(&servers);
    let (code, report) = status(&urls);
    assert_eq!(code, SETTINGS, "{report}");
    assert!(
        report.contains(&format!(
            "setting differs: lock.max-ttl-ms: 30000 on {}, {}; 60000 on {}\n",
            urls[0], urls[1], urls[2]
        )),
        "{report}"
    );
    // The settings agree again, but one node runs without the removal
    // quarantine: still 78, naming it.
    let _: () =
        cmd("CONFIG").arg("SET").arg("lock.max-ttl-ms").arg(30_000).query(&mut servers[2].conn()).unwrap();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("lock.removal-quarantine")
        .arg("no")
        .query(&mut servers[0].conn())
        .unwrap();
    let (code, report) = status(&urls);
    assert_eq!(code, SETTINGS, "{report}");
    assert!(report.contains(&format!("protection off: removal-quarantine on {}\n", urls[0])), "{report}");
    assert!(row(&report, &urls[0]).trim_end().ends_with("removal-quarantine"), "{report}");
    assert!(report.contains("setting differs: lock.removal-quarantine: 0 on "), "{report}");
}

#[test]
fn a_server_without_the_module_is_named() {
    let mut servers = protected(2);
    servers.push(Server::with(Opts { without_module: true, ..Opts::new() }));
    let urls = urls(&servers);
    let (code, report) = status(&urls);
    assert_eq!(code, OK, "two of three grant: {report}");
    assert!(row(&report, &urls[2]).contains("no lock module"), "{report}");
    // The library's view of the same.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let quorum = runtime.block_on(async { redlock(&servers).await.status().await });
    assert_eq!(quorum.readiness, Readiness::Grants);
    assert_eq!(quorum.members[2].blocker(), Some(Blocker::NoModule));
    assert_eq!(quorum.members[0].blocker(), None);
    let health = quorum.members[0].nodes[0].health.as_ref().unwrap();
    assert_eq!(health.settings.get("max_ttl_ms").map(String::as_str), Some("30000"));
    assert!(health.protections_off.is_empty(), "{health:?}");

    // Two servers without the module: no majority, and what to do.
    let mut bare = protected(1);
    bare.push(Server::with(Opts { without_module: true, ..Opts::new() }));
    bare.push(Server::with(Opts { without_module: true, ..Opts::new() }));
    let (code, report) = status(&lock_testkit_client::urls(&bare));
    assert_eq!(code, NO_QUORUM, "{report}");
    assert!(report.contains("2 without the lock module; load the module on every node"), "{report}");
}
