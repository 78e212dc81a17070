//! Histories with cluster members: the client's real cluster code meets
//! the simulated cluster's redirects and faults in them, and the module
//! and the client pass them.

use lock_sim::cluster::key_slot;
use lock_sim::node::{Node, Persistence, Rules};
use lock_sim::resp::Reply;
use lock_sim::run::{self, Setup};

/// A call's words, split at spaces.
fn words(line: &str) -> Vec<Vec<u8>> {
    line.split(' ').map(|p| p.as_bytes().to_vec()).collect()
}

/// The token of a grant, or why there is none.
fn token(reply: Reply) -> u64 {
    match reply {
        Reply::Int(token) => u64::try_from(token).unwrap_or(0),
        other => panic!("not granted: {other:?}"),
    }
}

fn quarantined(reply: &Reply) -> bool {
    matches!(reply, Reply::Error("QUARANTINE", _))
}

/// The nodes' quarantine (`lock.quarantine-ms` auto, TTLs up to 600 ms).
const QUARANTINE_MS: i64 = 600 + 1000;

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
        "Error(\"CLUSTERDOWN\"",
        "Error(\"TRYAGAIN\"",
        "cluster_state:fail",
        "is cut off from shard",
        "atomic import (CLUSTER MIGRATESLOTS)",
        "(the atomic import completed)",
        "is aborted",
        "(an operator finishes the stalled reshard)",
        "every node knows the change (gossip)",
        "operator: status()",
        "takes and releases the lock again: every member runs the release",
    ] {
        assert!(seen.contains(what), "no cluster history has {what}");
    }
}

/// An importing node refuses new grants in the slot it imports, from
/// `SETSLOT ... IMPORTING` until a quarantine after `SETSLOT ... NODE`, but
/// for the lock that arrived by the import: its holder extends and
/// releases it, and once released it is granted again at once with a
/// token above the arrived one (the arrival raised the counter to it),
/// even when that token is far ahead of the importer's clock (a fencing
/// round raised it to another node's token). Another key of the slot,
/// whose lock was released on the source before the import, gets its
/// first grant on the importer only once the wait is over, by when the
/// importer's clock has passed every token the exporter had issued.
#[test]
fn an_importing_node_waits_out_its_slot_but_for_the_locks_that_arrived() {
    let slot = key_slot(b"res");
    let other =
        (0..).map(|i| format!("k{i}")).find(|k| key_slot(k.as_bytes()) == slot).expect("a key in res's slot");
    let mut source = Node::new(Rules::Module, Persistence::None, 600, 0);
    let mut importer = Node::new(Rules::Module, Persistence::None, 600, 0);
    let granted = token(source.call(&words("LOCK.ACQUIRE res a 500"), 0));
    // A quorum token 900 ms ahead of both clocks.
    let ahead = granted + 900_000;
    assert_eq!(source.call(&words(&format!("LOCK.FENCE res a {ahead}")), 1), Reply::Int(1));
    let released = token(source.call(&words(&format!("LOCK.ACQUIRE {other} x 500")), 2));
    assert_eq!(source.call(&words(&format!("LOCK.RELEASE {other} x")), 3), Reply::Int(1));

    importer.import_started(slot);
    let refused = importer.call(&words(&format!("LOCK.ACQUIRE {other} y 500")), 5);
    assert!(quarantined(&refused), "a new grant in a slot being imported: {refused:?}");
    importer.lock_arrived(b"res", source.take_key(b"res"), 10);
    assert_eq!(importer.call(&words("LOCK.EXTEND res a 500"), 20), Reply::Int(1));
    assert_eq!(importer.call(&words("LOCK.RELEASE res a"), 30), Reply::Int(1));
    let after = token(importer.call(&words("LOCK.ACQUIRE res b 500"), 40));
    assert!(after > ahead, "the importer issued {after}, not above the arrived token {ahead}");

    importer.import_ended(slot, 50);
    let refused = importer.call(&words(&format!("LOCK.ACQUIRE {other} y 500")), 50 + QUARANTINE_MS - 1);
    assert!(quarantined(&refused), "the wait lasts a quarantine after the import: {refused:?}");
    let first = token(importer.call(&words(&format!("LOCK.ACQUIRE {other} y 500")), 50 + QUARANTINE_MS));
    assert!(first > released && first > ahead, "{first} after {released} and {ahead}");
}

/// A lock that arrives by a migration is not taken over by expiry before
/// the importer's quarantine has run since its arrival (its record may be
/// behind its holder's lease: the exporter a promoted replica that missed
/// an extension), and its holder's release ends that at once.
#[test]
fn an_arrived_lock_is_not_taken_over_by_expiry_before_a_quarantine_but_its_release_frees_it() {
    let mut source = Node::new(Rules::Module, Persistence::None, 600, 0);
    let mut importer = Node::new(Rules::Module, Persistence::None, 600, 0);
    token(source.call(&words("LOCK.ACQUIRE res a 100"), 0));
    importer.lock_arrived(b"res", source.take_key(b"res"), 10);
    let refused = importer.call(&words("LOCK.ACQUIRE res b 500"), 10 + QUARANTINE_MS - 1);
    assert!(quarantined(&refused), "expired on the record, maybe not in its holder's lease: {refused:?}");
    token(importer.call(&words("LOCK.ACQUIRE res b 500"), 10 + QUARANTINE_MS));

    // A release by a caller that holds nothing there does not end it, even
    // once the record ran out on the importer's clock.
    token(source.call(&words("LOCK.ACQUIRE res3 e 100"), 0));
    importer.lock_arrived(b"res3", source.take_key(b"res3"), 10);
    assert_eq!(importer.call(&words("LOCK.RELEASE res3 z"), 200), Reply::Int(0));
    let refused = importer.call(&words("LOCK.ACQUIRE res3 f 500"), 201);
    assert!(quarantined(&refused), "a stranger's release ended the quarantine: {refused:?}");

    token(source.call(&words("LOCK.ACQUIRE res c 100"), 0));
    importer.lock_arrived(b"res2", source.take_key(b"res"), 10);
    assert_eq!(importer.call(&words("LOCK.RELEASE res2 c"), 20), Reply::Int(1));
    token(importer.call(&words("LOCK.ACQUIRE res2 d 500"), 21));
}

/// The histories that found a released lock's token lost across a reshard
/// (the importer's next token below it) pass, and still have their faults:
/// an `always` restart or an upgrade after a wall-clock step (a token up to
/// a second ahead of its node's clock, fenced onto a cluster's shard), then
/// the resource's slot migrated (they failed while the simulated cluster
/// had neither the slot wait nor the arrival's raise, its nodes one clock).
/// Then the first histories, from seed 0, that the simulator's planted
/// bugs fail (scripts/mutants.toml, `sim-*`): no slot wait (token order),
/// no raise at a lock's arrival (token order), no quarantine of an arrived
/// lock (mutual exclusion), the source's writes not streamed during
/// Valkey's atomic migration (token order), a promoted replica
/// without its quarantine (mutual exclusion).
#[test]
fn a_released_lock_s_token_survives_a_reshard() {
    let all = Setup::module();
    let upgrade = Setup::upgrade();
    for (seed, setup, faults) in [
        (8_100_047_251, &all, &["n1 crashes (Always)", "cluster 1: slot 3139 migrating"][..]),
        (8_100_079_681, &all, &["n2 crashes (Always)", "cluster 0: MIGRATE res"]),
        (8_100_166_437, &all, &["n0 crashes (Always)", "cluster 0: MIGRATE res from n3 to n4"]),
        (9_100_149_554, &upgrade, &["n1's wall clock steps +565 ms", "cluster 0: MIGRATE res"]),
        (8_634, &all, &["slot 3139 stays open (the reshard stalls)", "(the atomic import completed)"]),
        (1_423, &all, &["MIGRATE res"]),
        (12_230, &all, &["atomic import (CLUSTER MIGRATESLOTS)", "(the atomic import completed)"]),
        (202_079, &all, &["atomic import (CLUSTER MIGRATESLOTS)", "(the atomic import completed)"]),
        (273, &all, &["its replica n8 is promoted (and quarantines)"]),
        // A release by a client that holds nothing there (or whose lock has
        // run out on the importer's clock) ended an arrived lock's
        // quarantine, and its holder's lease still ran.
        (9_200_053_852, &all, &["MIGRATE res from n3 to n4"]),
        (9_200_121_159, &all, &["MIGRATE res"]),
        (9_200_130_517, &all, &["cluster 0: MIGRATE res from n3 to n4"]),
        // A reader fenced ahead released before its slot moved with an
        // older reader: the simulated importer rose to the moved holders'
        // tokens only, the module to the key's top token (its header keeps
        // a released holder's while others keep the key).
        (9_300_335_455, &all, &["cluster 0: MIGRATE res from n3 to n5", "lock.shared res"]),
    ] {
        passes_with(seed, setup, faults);
    }
}

/// `status()` asks the nodes one after another. In these histories a
/// cluster member could not grant throughout a call, but for a different
/// node's reason before and after a moment inside it (a promoted master's
/// quarantine ended, then client 0 was cut off from another shard master;
/// a shard master's partition healed as another died): each node was seen
/// granting when asked, the member never granted as a whole. The verdict
/// judges such a call as one whose truth changed, not as an over-count; it
/// still judges calls through which every node stayed as it was.
#[test]
fn a_status_that_saw_each_node_grant_in_turn_is_not_an_over_count() {
    let upgrade = Setup::upgrade();
    for (seed, faults) in [
        (
            9_304_252_319,
            &["operator: status() from 1609 ms: a majority can grant now", "c0 x n5 partitioned"][..],
        ),
        (
            9_304_315_553,
            &["operator: status() from 1280 ms: a majority can grant now", "shard 1's master n4 dies"],
        ),
    ] {
        passes_with(seed, &upgrade, faults);
    }
}

/// Seed `seed`'s history under `setup` passes and still has each of
/// `faults` (a schedule change that drops them would make the seed test
/// nothing).
fn passes_with(seed: u64, setup: &Setup, faults: &[&str]) {
    let outcome = run::run(seed, setup, &run::schedule(seed, setup));
    assert!(outcome.violations.is_empty(), "seed {seed}: {:?}\n{}", outcome.violations, outcome.history);
    for fault in faults {
        assert!(outcome.history.contains(fault), "seed {seed} no longer has `{fault}`:\n{}", outcome.history);
    }
}
