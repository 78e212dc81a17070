"""Every mode, sets, reentrant holds, by-token calls and fencing tokens,
against 5 real nodes; the nodes' own view (LOCK.INFO, the keys) is read
with a separate RESP client, not through the package."""

from __future__ import annotations

import datetime
import time

import pytest
from nodes import Cluster, run_python

from redlock_client import (
    InvalidArgumentError,
    LockHeldError,
    Mode,
    NoQuorumError,
    Redlock,
    Tally,
)


def test_with_block_takes_the_lock_on_a_quorum_and_releases_it_everywhere(
    cluster: Cluster, locks: Redlock, resource: str
) -> None:
    with locks.lock(resource, ttl=10.0, wait=2.0) as lock:
        assert lock.is_held and lock.status == "held"
        assert lock.resource == resource and lock.mode == "plain" and lock.permits is None
        assert len(lock.token) == 32 and int(lock.token, 16) >= 0
        assert 9.0 < lock.validity <= 10.0
        # The round returns at its majority; the other grants land just after.
        assert cluster.holders(resource) >= 3
        token = lock.fencing_token
        assert token > 0 and lock.fencing_token == token
        infos = [s.lock_info(resource) for s in cluster.servers]
        holders = [dict(zip(i[::2], i[1::2]))["holder"] for i in infos if i is not None]
        assert holders.count(lock.token) >= 3
        text = repr(lock)
        assert resource in text and "plain" in text and lock.token in text
        assert f"fencing_token={token}" in text and "validity=" in text
        with pytest.raises(LockHeldError, match=r"held by another owner: 0 of 5 granted \(need 3\)"):
            locks.try_acquire(resource, ttl=10.0)
    assert lock.status == "released" and not lock.is_held and lock.validity == 0.0
    locks.settle()
    assert cluster.keys_left(resource) == 0


def test_durations_are_seconds_or_timedeltas(locks: Redlock, resource: str) -> None:
    lock = locks.try_acquire(resource, ttl=datetime.timedelta(seconds=3))
    assert 2.5 < lock.validity <= 3.0
    assert 9.0 < lock.extend(datetime.timedelta(milliseconds=10_000)) <= 10.0
    assert 4.0 < lock.extend(5) <= 5.0
    assert 4.0 < lock.extend() <= 5.0, "extend() renews for the TTL it had"
    assert isinstance(lock.release(), Tally)


def test_release_returns_the_counts_and_a_second_release_is_refused(locks: Redlock, resource: str) -> None:
    lock = locks.try_acquire(resource, ttl=5.0)
    tally = lock.release()
    assert tally.nodes == 5 and tally.need == 3 and tally.yes >= 3 and tally.has_quorum
    assert tally.yes + tally.pending == 5
    with pytest.raises(InvalidArgumentError, match="was released"):
        lock.release()
    with pytest.raises(InvalidArgumentError, match="was released"):
        lock.extend(5.0)


def test_readers_share_a_writer_is_alone_and_writers_tokens_rise(
    cluster: Cluster, locks: Redlock, resource: str
) -> None:
    readers = [locks.try_acquire(resource, ttl=10.0, mode="read") for _ in range(3)]
    assert all(r.mode == "read" for r in readers)
    with pytest.raises(LockHeldError):
        locks.try_acquire(resource, ttl=10.0, mode=Mode.WRITE)
    for reader in readers:
        reader.release()
    tokens = []
    for _ in range(3):
        with locks.lock(resource, ttl=10.0, mode="write", wait=2.0) as writer:
            tokens.append(writer.fencing_token)
            with pytest.raises(LockHeldError):
                locks.try_acquire(resource, ttl=10.0, mode="read")
    assert tokens == sorted(set(tokens)), f"writers' tokens must strictly rise: {tokens}"
    locks.settle()
    assert cluster.keys_left(resource) == 0


def test_a_two_permit_semaphore_admits_two_and_needs_four_of_five_grants(
    cluster: Cluster, locks: Redlock, resource: str
) -> None:
    assert locks.quorum("permit", 2) == 4 and locks.quorum("permit", 1) == 3 and locks.majority == 3
    first = locks.try_acquire(resource, ttl=10.0, mode="permit", permits=2)
    second = locks.try_acquire(resource, ttl=10.0, mode="permit", permits=2)
    assert first.permits == 2 and first.mode == "permit"
    with pytest.raises(LockHeldError):
        locks.try_acquire(resource, ttl=10.0, mode="permit", permits=2)
    first.release()
    second.release()


def test_a_semaphore_full_on_two_nodes_refuses_a_holder_granted_by_three(
    cluster: Cluster, locks: Redlock, resource: str
) -> None:
    # Two other holders take both permits on nodes 0 and 1 only (by hand):
    # a third holder can get grants from nodes 2, 3 and 4 alone, which is a
    # majority but not the 2-permit semaphore's quorum of 4. Granting it
    # would let three clients believe they hold one of two permits.
    for server in cluster.servers[:2]:
        for owner in ("other-a", "other-b"):
            assert isinstance(server.call("LOCK.SEMAPHORE", resource, owner, 2, 10_000), int)
    with pytest.raises(LockHeldError, match=r"3 of 5 granted \(need 4 for a 2-permit semaphore\)"):
        locks.try_acquire(resource, ttl=10.0, mode="permit", permits=2)
    # Nothing of ours is left on the three nodes that granted.
    for server in cluster.servers[2:]:
        info = server.lock_info(resource)
        assert info is None, f"a refused permit stayed on {server.url}: {info}"
    for server in cluster.servers[:2]:
        for owner in ("other-a", "other-b"):
            server.call("LOCK.RELEASE", resource, owner)


def test_a_set_is_taken_all_or_nothing_with_one_fencing_token(
    cluster: Cluster, locks: Redlock, resource: str
) -> None:
    a, b, c = (f"{{{resource}}}:{x}" for x in "abc")
    blocker = locks.try_acquire(b, ttl=10.0)
    with pytest.raises(LockHeldError, match=r"'\{.*:a, .*:b, .*:c\}' is held by another owner"):
        locks.try_acquire_many([a, b, c], ttl=10.0)
    assert cluster.keys_left(a) == 0 and cluster.keys_left(c) == 0, "a refused set takes nothing"
    blocker.release()
    with locks.lock_many([a, (b, "write"), (c, Mode.READ)], ttl=10.0, wait=2.0, fence=True) as held:
        assert held.resources == [(a, "plain"), (b, "write"), (c, "read")]
        set_token = held.fencing_token
        assert set_token > 0
        for key in (a, b, c):
            assert cluster.holders(key) >= 3
    with locks.lock(a, ttl=10.0, wait=2.0) as alone:
        assert alone.fencing_token > set_token, "a later holder of one key gets a higher token"
    locks.settle()
    assert sum(cluster.keys_left(k) for k in (a, b, c)) == 0


def test_extend_and_release_by_token_from_another_process(cluster: Cluster, locks: Redlock, resource: str) -> None:
    lock = locks.try_acquire(resource, ttl=5.0)
    detached = lock.detach()
    assert detached.token == lock.token and lock.status == "detached"
    assert cluster.holders(resource) >= 3, "a detached lock stays held"
    # Another process extends it, then releases it, knowing only the token.
    script = (
        "import sys; from redlock_client import Redlock\n"
        "nodes, resource, token = sys.argv[1].split(','), sys.argv[2], sys.argv[3]\n"
        "locks = Redlock(nodes)\n"
        "left = locks.extend(resource, token, ttl=20.0)\n"
        "assert 19.0 < left <= 20.0, left\n"
        "print(locks.release(resource, token).yes)\n"
    )
    done = run_python(script, ",".join(cluster.urls), resource, detached.token)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 5, "a release by token waits for every node"
    assert cluster.keys_left(resource) == 0
    with pytest.raises(NoQuorumError, match="to release: 0 of 5 released"):
        locks.release(resource, detached.token)


def test_sets_extend_and_release_by_token(cluster: Cluster, locks: Redlock, resource: str) -> None:
    keys = [f"{{{resource}}}:{i}" for i in range(3)]
    detached = locks.try_acquire_many(keys, ttl=5.0).detach()
    assert 9.0 < locks.extend_many(keys, detached.token, ttl=10.0) <= 10.0
    assert locks.release_many(keys, detached.token).yes == 5
    assert sum(cluster.keys_left(k) for k in keys) == 0


def test_reentrant_holds_count_and_share_one_token(cluster: Cluster, locks: Redlock, resource: str) -> None:
    first = locks.enter(resource, "job-7", ttl=10.0)
    again = locks.enter(resource, "job-7", ttl=10.0)
    # A re-entry answers the same quorum token or a higher one (its
    # deciding majority may differ from the first one's).
    assert again.fencing_token >= first.fencing_token and 9.0 < again.validity <= 10.0
    with pytest.raises(LockHeldError):
        locks.enter(resource, "job-8", ttl=10.0)
    assert locks.exit(resource, "job-7") == 1
    with locks.reentrant(resource, "job-7", ttl=10.0) as inner:
        assert inner.fencing_token >= again.fencing_token
    assert locks.exit(resource, "job-7") == 0
    locks.settle()
    assert cluster.keys_left(resource) == 0


def test_fencing_tokens_rise_across_holders_and_clients(cluster: Cluster, locks: Redlock, resource: str) -> None:
    other = Redlock(list(reversed(cluster.urls)))
    tokens = []
    for i in range(12):
        client = locks if i % 2 else other
        lock = client.acquire(resource, ttl=10.0, wait=2.0)
        if i % 3 == 2:
            lock.release()  # a holder that never asks for its token
            continue
        tokens.append(lock.fencing_token)
        lock.release()
    assert len(tokens) == 8 and all(a < b for a, b in zip(tokens, tokens[1:])), tokens


def test_info_reports_every_node(cluster: Cluster, locks: Redlock, resource: str) -> None:
    assert [n.info for n in locks.info(resource)] == [None] * 5
    with locks.lock(resource, ttl=10.0, mode="permit", permits=3) as lock:
        locks.settle()
        rows = locks.info(resource)
        assert [r.node for r in rows] == cluster.urls
        for row in rows:
            assert row.error is None and row.info is not None
            assert row.info.kind == "semaphore" and row.info.permits == 3
            [holder] = row.info.holders
            assert holder.holder == lock.token and holder.mode == "permit" and 9.0 < holder.ttl <= 10.0


def test_a_lock_dropped_while_held_is_released(cluster: Cluster, locks: Redlock, resource: str) -> None:
    import gc

    lock = locks.try_acquire(resource, ttl=30.0)
    assert cluster.holders(resource) >= 3
    del lock
    gc.collect()
    locks.settle()
    assert cluster.keys_left(resource) == 0
    locks.try_acquire(resource, ttl=5.0).release()


def test_many_nodes_down_at_connect_is_no_error_until_a_round(resource: str) -> None:
    dead = [f"redis://127.0.0.1:{p}/" for p in (1, 2, 3)]
    started = time.monotonic()
    locks = Redlock(dead, connect_timeout=0.2)
    with pytest.raises(NoQuorumError, match="3 unreachable"):
        locks.try_acquire(resource, ttl=5.0)
    assert time.monotonic() - started < 5.0
