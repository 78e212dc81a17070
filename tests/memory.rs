//! Memory: a freed lock leaves nothing behind, and a held lock costs
//! little more than the same lock done with `SET key token NX PX`.

use lock_testkit::*;

use std::time::Instant;

/// Acquire/release cycles over distinct keys (override with
/// `LOCK_MEMORY_CYCLES`, e.g. 1000000 for a million).
const CYCLES: usize = 200_000;
/// Cycles per pipelined batch: all acquires, then all releases.
const BATCH: usize = 1_000;
/// How far `used_memory` may end up from where it started.
const TOLERANCE: i64 = 256 * 1024;
/// How much more a held lock may cost than `SET key token NX PX`.
const OVERHEAD_MAX: i64 = 96;

/// A 36-byte token, the size of a UUID in text.
const TOKEN: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

fn used_memory(c: &mut Connection) -> i64 {
    info_field(c, "memory", "used_memory")
}

/// Which lock kind a cycle takes and frees.
#[derive(Clone, Copy)]
enum Kind {
    Plain,
    /// A read hold of a read-write lock.
    Shared,
    /// One permit of a 3-permit semaphore.
    Permit,
}

/// Runs `count` acquire+release cycles on keys `{prefix}:{start..}`,
/// pipelined in batches, and checks every reply.
fn cycles(c: &mut Connection, prefix: &str, start: usize, count: usize) {
    cycles_of(c, Kind::Plain, prefix, start, count)
}

fn cycles_of(c: &mut Connection, kind: Kind, prefix: &str, start: usize, count: usize) {
    let mut last_fence = 0i64;
    for batch_start in (start..start + count).step_by(BATCH) {
        let keys: Vec<String> = (batch_start..(batch_start + BATCH).min(start + count))
            .map(|i| format!("{prefix}:{i}"))
            .collect();
        let mut pipe = redis::pipe();
        for key in &keys {
            match kind {
                Kind::Plain => pipe.cmd("LOCK.ACQUIRE").arg(key).arg(TOKEN).arg(30_000),
                Kind::Shared => pipe.cmd("LOCK.SHARED").arg(key).arg(TOKEN).arg(30_000),
                Kind::Permit => pipe.cmd("LOCK.SEMAPHORE").arg(key).arg(TOKEN).arg(3).arg(30_000),
            };
        }
        for key in &keys {
            pipe.cmd("LOCK.RELEASE").arg(key).arg(TOKEN);
        }
        let replies: Vec<i64> = pipe.query(c).expect("pipelined cycles");
        let (fences, released) = replies.split_at(keys.len());
        for fence in fences {
            assert!(*fence > last_fence, "fence {fence} after {last_fence}");
            last_fence = *fence;
        }
        assert!(released.iter().all(|&r| r == 1), "a release did not free its lock");
    }
}

#[test]
fn a_freed_lock_leaves_nothing_behind() {
    let cycles_wanted: usize = std::env::var("LOCK_MEMORY_CYCLES")
        .ok()
        .map(|v| v.parse().expect("LOCK_MEMORY_CYCLES must be a number"))
        .unwrap_or(CYCLES);
    let server = Server::start();
    let mut c = server.conn();

    // Warm-up: the same pattern, so that the dictionaries, the client's
    // buffers and the allocator's caches reach their working size.
    cycles(&mut c, "warm", 0, 20 * BATCH);
    let dbsize: i64 = cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, 0);
    let before = used_memory(&mut c);
    let clients_before = info_field(&mut c, "memory", "mem_clients_normal");
    let grants_before = info_stat(&mut c, "grants");
    let releases_before = info_stat(&mut c, "releases");

    // Two halves: a leak grows with the number of cycles, so the second
    // half must not add what the first one did.
    let half = cycles_wanted / 2;
    let started = Instant::now();
    cycles(&mut c, "lock", 0, half);
    let middle = used_memory(&mut c);
    cycles(&mut c, "lock", half, cycles_wanted - half);
    let elapsed = started.elapsed();

    let dbsize: i64 = cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, 0, "keys left behind");
    let keyspace: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    assert!(!keyspace.contains("db0:"), "keyspace not empty: {keyspace}");
    assert_eq!(info_stat(&mut c, "grants") - grants_before, cycles_wanted as i64);
    assert_eq!(info_stat(&mut c, "releases") - releases_before, cycles_wanted as i64);
    let after = used_memory(&mut c);
    let clients_after = info_field(&mut c, "memory", "mem_clients_normal");
    let delta = after - before;
    let delta_without_clients = delta - (clients_after - clients_before);
    eprintln!(
        "{cycles_wanted} acquire+release cycles in {elapsed:?} ({:.0} cycles/s, pipelined by {BATCH}); \
         used_memory {before} -> {middle} (half way) -> {after}: delta {delta} bytes \
         ({delta_without_clients} without client buffers, which went {clients_before} -> {clients_after})",
        cycles_wanted as f64 / elapsed.as_secs_f64()
    );
    assert!(
        (after - middle).abs() <= TOLERANCE / 2,
        "used_memory moved by {} bytes over the second {} cycles",
        after - middle,
        cycles_wanted - half
    );
    assert!(
        delta.abs() <= TOLERANCE,
        "used_memory moved by {delta} bytes over {cycles_wanted} cycles (tolerance {TOLERANCE})"
    );
}

/// The same for read-write locks and semaphores: their holder lists are
/// deleted with the last holder.
#[test]
fn freed_read_locks_and_permits_leave_nothing_behind() {
    let server = Server::start();
    let mut c = server.conn();
    for kind in [Kind::Shared, Kind::Permit] {
        cycles_of(&mut c, kind, "warm", 0, 10 * BATCH);
    }
    let before = used_memory(&mut c);
    for kind in [Kind::Shared, Kind::Permit] {
        cycles_of(&mut c, kind, "lock", 0, 50_000);
    }
    let dbsize: i64 = cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, 0, "keys left behind");
    let delta = used_memory(&mut c) - before;
    eprintln!("100000 read-lock and permit cycles: used_memory delta {delta} bytes");
    assert!(delta.abs() <= TOLERANCE, "used_memory moved by {delta} bytes");
}

fn memory_usage(c: &mut Connection, key: &str) -> i64 {
    cmd("MEMORY").arg("USAGE").arg(key).query(c).unwrap_or_else(|e| panic!("MEMORY USAGE {key}: {e}"))
}

#[test]
fn a_held_lock_costs_about_as_much_as_set_nx_px() {
    assert_eq!(TOKEN.len(), 36);
    let server = Server::start();
    let mut c = server.conn();

    // Key names of equal length, so only the values differ.
    let ok: String =
        cmd("SET").arg("setnx:lock").arg(TOKEN).arg("NX").arg("PX").arg(30_000).query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    let set_cost = memory_usage(&mut c, "setnx:lock");

    let fence: i64 = cmd("LOCK.ACQUIRE").arg("plain:lock").arg(TOKEN).arg(30_000).query(&mut c).unwrap();
    assert!(fence > 0);
    let stored: Vec<u8> = cmd("GET").arg("plain:lock").query(&mut c).unwrap();
    let lock_cost = memory_usage(&mut c, "plain:lock");
    eprintln!(
        "MEMORY USAGE with a {}-byte token: SET NX PX {set_cost} bytes; LOCK.ACQUIRE {lock_cost} bytes \
         (+{} ; stored value {} bytes: {:?})",
        TOKEN.len(),
        lock_cost - set_cost,
        stored.len(),
        String::from_utf8_lossy(&stored)
    );
    assert!(
        lock_cost <= set_cost + OVERHEAD_MAX,
        "a held lock costs {lock_cost} bytes, SET NX PX {set_cost} (+{} > {OVERHEAD_MAX})",
        lock_cost - set_cost
    );

    // Rewrites of the value (renewal, extension) must not make it grow.
    let again: i64 = cmd("LOCK.ACQUIRE").arg("plain:lock").arg(TOKEN).arg(30_000).query(&mut c).unwrap();
    assert_eq!(again, fence);
    for _ in 0..10 {
        let extended: i64 =
            cmd("LOCK.EXTEND").arg("plain:lock").arg(TOKEN).arg(20_000).query(&mut c).unwrap();
        assert_eq!(extended, 1);
    }
    let rewritten_cost = memory_usage(&mut c, "plain:lock");

    // A reentrant lock entered several times.
    for _ in 0..5 {
        let _: i64 = cmd("LOCK.ENTER").arg("reent:lock").arg(TOKEN).arg(30_000).query(&mut c).unwrap();
    }
    let reentrant_cost = memory_usage(&mut c, "reent:lock");
    eprintln!(
        "after renewal + 10 extensions: {rewritten_cost} bytes; reentrant lock with 5 holds: {reentrant_cost} bytes"
    );
    for (what, cost) in [("renewed and extended", rewritten_cost), ("reentrant", reentrant_cost)] {
        assert!(cost <= set_cost + OVERHEAD_MAX, "{what} lock costs {cost} bytes, SET NX PX {set_cost}");
    }

    // Shared locks and semaphores are a hash with a header and two fields per
    // holder (its record, and its token for LOCK.CHECK): dearer for one
    // holder, then a bounded cost per holder.
    let _: i64 = cmd("LOCK.SHARED").arg("share:lock").arg(TOKEN).arg(30_000).query(&mut c).unwrap();
    let shared_cost = memory_usage(&mut c, "share:lock");
    let _: i64 = cmd("LOCK.SEMAPHORE").arg("semap:lock").arg(TOKEN).arg(3).arg(30_000).query(&mut c).unwrap();
    let permit_cost = memory_usage(&mut c, "semap:lock");
    for i in 1..100 {
        let reader = format!("{TOKEN}-{i:03}");
        let _: i64 = cmd("LOCK.SHARED").arg("share:lock").arg(reader).arg(30_000).query(&mut c).unwrap();
    }
    let hundred_cost = memory_usage(&mut c, "share:lock");
    let per_holder = (hundred_cost - shared_cost) / 99;
    eprintln!(
        "read lock with one reader: {shared_cost} bytes; semaphore with one permit held: {permit_cost} bytes; \
         100 readers: {hundred_cost} bytes ({per_holder} bytes per further reader with a {}-byte token)",
        TOKEN.len() + 4
    );
    // A group is a small hash (see docs/design.md, "Storage"): the owner is
    // stored twice (its record's field name and its token's index entry),
    // plus the header field, three field names and the record. The bound is
    // a fixed allowance over SET NX PX, not a ratio: servers differ a lot in
    // what a plain string costs (104 bytes on Redis 7.0, 72 on Valkey 9.1,
    // which embeds key and value) and much less in what a small hash costs.
    let owner_copies = 2 * (TOKEN.len() as i64 + 4);
    for (what, cost) in [("read", shared_cost), ("semaphore", permit_cost)] {
        assert!(
            cost <= set_cost + owner_copies + 128,
            "a one-holder {what} lock costs {cost} bytes, SET NX PX {set_cost}"
        );
    }
    // The owner is stored twice (its record's field name, and its token's
    // index entry) in a hash table (from 5 holders on: see
    // codec::LISTPACK_HOLDERS_MAX), plus two table entries and the record.
    assert!(per_holder <= 2 * (TOKEN.len() as i64 + 4) + 200, "{per_holder} bytes per reader");
}
