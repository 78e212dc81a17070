//! Histories with cluster members: the client's real cluster code meets
//! the simulated cluster's redirects and faults in them, and the module
//! and the client pass them.

use lock_sim::run::{self, Setup};

#[test]
fn cluster_histories_have_their_redirects_and_faults_and_pass() {
    let setup = Setup::module();
    let mut seen = String::new();
    let mut clustered = 0;
    for seed in 0..200 {
        let outcome = run::run(seed, &setup, &run::schedule(seed, &setup));
        assert!(outcome.violations.is_empty(), "seed {seed}:\n{}", outcome.history);
        if outcome.history.contains("CLUSTER SHARDS") {
            clustered += 1;
            // A cluster history replays byte for byte too.
            if clustered == 1 {
                assert_eq!(outcome.history, run::run(seed, &setup, &run::schedule(seed, &setup)).history);
            }
            seen.push_str(&outcome.history);
        }
    }
    assert!(
        (20..=90).contains(&clustered),
        "a fifth of the histories have a cluster member: {clustered} of 200"
    );
    for what in [
        "Error(\"MOVED\"",
        "Error(\"ASK\"",
        "ASKING = Status(\"OK\")",
        "MIGRATE res from",
        "stays open (the reshard stalls)",
        "is promoted (and quarantines)",
        "every node knows the change (gossip)",
        "operator: status()",
        "takes and releases the lock again: every member runs the release",
    ] {
        assert!(seen.contains(what), "no cluster history has {what}");
    }
}
