"""Nodes killed, paused (SIGSTOP) and quarantined, on each test's own 5
nodes; the survivors are checked directly (LOCK.INFO, EXISTS)."""

from __future__ import annotations

import threading
import time

import pytest
from nodes import Cluster, wait_until

from redlock_client import (
    LockLostError,
    NodesUnreachableError,
    NoQuorumError,
    QuarantinedError,
    Redlock,
    Watchdog,
)


def test_two_of_five_nodes_killed_the_lock_still_works(own_cluster: Cluster, resource: str) -> None:
    locks = Redlock(own_cluster.urls)
    own_cluster[0].kill()
    own_cluster[3].kill()
    live = [own_cluster[i] for i in (1, 2, 4)]
    with locks.lock(resource, ttl=10.0, wait=2.0, fence=True) as lock:
        assert lock.fencing_token > 0
        assert own_cluster.holders(resource, live) == 3
        assert 9.0 < lock.extend(10.0) <= 10.0
    assert own_cluster.keys_left(resource, live) == 0
    # The writer and reader quorums are majorities too; a 2-permit semaphore
    # needs 4 of 5, so it cannot be granted now (and says why).
    locks.try_acquire(resource, ttl=5.0, mode="write").release()
    with pytest.raises(NoQuorumError, match=r"3 of 5 granted \(need 4 for a 2-permit semaphore\); 2 unreachable"):
        locks.try_acquire(resource, ttl=5.0, mode="permit", permits=2)
    assert own_cluster.keys_left(resource, live) == 0


def test_three_of_five_nodes_killed_fails_fast_and_leaves_nothing(own_cluster: Cluster, resource: str) -> None:
    locks = Redlock(own_cluster.urls)
    for i in (0, 2, 4):
        own_cluster[i].kill()
    live = [own_cluster[1], own_cluster[3]]
    started = time.monotonic()
    with pytest.raises(NodesUnreachableError) as raised:
        locks.try_acquire(resource, ttl=10.0)
    took = time.monotonic() - started
    assert took < 1.0, f"a round with 3 dead nodes took {took:.3f} s"
    error = raised.value
    assert str(error).startswith(f"no quorum for '{resource}': 2 of 5 granted (need 3); 3 unreachable (first: ")
    assert isinstance(error, ConnectionError) and error.retryable and error.phase == "acquire"
    assert error.tally is not None and (error.tally.yes, error.tally.unreachable, error.tally.need) == (2, 3, 3)
    assert own_cluster.holders(resource, live) == 0 and own_cluster.keys_left(resource, live) == 0
    # Retrying within a wait fails the same way, within the wait.
    started = time.monotonic()
    with pytest.raises(NodesUnreachableError):
        locks.acquire(resource, ttl=10.0, wait=0.5)
    assert time.monotonic() - started < 2.0
    assert own_cluster.keys_left(resource, live) == 0


def test_one_node_paused_past_the_ttl_the_watchdog_keeps_the_lock(own_cluster: Cluster, resource: str) -> None:
    locks = Redlock(own_cluster.urls)
    ttl = 0.6
    with locks.lock(resource, ttl=ttl, watchdog=True) as lock:
        own_cluster[2].pause()
        try:
            assert not lock.lost.wait(3 * ttl), f"lost with 4 of 5 nodes up: {lock.lost.error}"
            assert lock.is_held and lock.watchdog == "running"
        finally:
            own_cluster[2].resume()


def test_three_nodes_paused_past_the_ttl_lost_fires_before_the_validity_ends(
    own_cluster: Cluster, resource: str
) -> None:
    locks = Redlock(own_cluster.urls)
    ttl = 1.5
    called = []
    lock = locks.acquire(resource, ttl=ttl, wait=2.0)
    lock.on_lost(lambda error: called.append((time.monotonic(), error, threading.current_thread().name)))
    lock.start_watchdog()
    # The validity of the current lease ends at its start + ttl - drift; a
    # renewal starts every ttl/3, so the lease that can no longer be renewed
    # is the one current when the nodes stop answering.
    paused = [own_cluster[i] for i in (0, 1, 2)]
    for server in paused:
        server.pause()
    try:
        paused_at = time.monotonic()
        deadline = paused_at + lock.validity
        assert lock.lost.wait(ttl * 2), "the loss was never reported"
        lost_at = time.monotonic()
        assert lost_at < deadline, f"reported {lost_at - deadline:.3f} s after the validity ended"
        error = lock.lost.error
        assert isinstance(error, LockLostError) and error.reason == "renewal_failed"
        assert isinstance(error.__cause__, NoQuorumError) and error.__cause__.phase == "extend"
        assert "to extend: 2 of 5 extended (need 3); 3 timed out" in str(error.__cause__)
        assert lock.status == "lost" and lock.validity == 0.0
        wait_until(2.0, "the on_lost callback", lambda: len(called) == 1)
        assert called[0][1] is error and called[0][2] != threading.main_thread().name
        with pytest.raises(LockLostError):
            lock.extend()
    finally:
        for server in paused:
            server.resume()


def test_without_a_watchdog_lost_fires_when_the_validity_ends(cluster: Cluster, locks: Redlock, resource: str) -> None:
    lock = locks.try_acquire(resource, ttl=0.4)
    deadline = time.monotonic() + lock.validity
    assert lock.lost.wait(2.0)
    assert time.monotonic() >= deadline - 0.005, "reported before the deadline"
    assert lock.lost.reason == "expired" and lock.status == "lost"
    seen = []
    lock.on_lost(seen.append)  # already lost: called at once
    assert seen == [lock.lost.error]


def test_a_bounded_watchdog_stops_and_the_loss_says_so(cluster: Cluster, locks: Redlock, resource: str) -> None:
    lock = locks.try_acquire(resource, ttl=0.3)
    lock.start_watchdog(Watchdog(renewals_max=2, duration_max=60.0))
    assert lock.watchdog == "running"
    assert lock.lost.wait(3.0)
    assert lock.lost.reason == "watchdog_limit" and lock.status == "lost"


def test_quarantined_nodes_refuse_new_grants_with_their_time_left(request: pytest.FixtureRequest, resource: str) -> None:
    # Three nodes just (re)started with a 30 s quarantine, two without.
    quarantined = Cluster(3, module_args=["quarantine-ms", "30000"])
    request.addfinalizer(quarantined.close)
    fresh = Cluster(2)
    request.addfinalizer(fresh.close)
    locks = Redlock(quarantined.urls + fresh.urls)
    with pytest.raises(QuarantinedError, match=r"2 of 5 granted \(need 3\); 3 quarantined \(up to \d+ ms left\)") as e:
        locks.try_acquire(resource, ttl=5.0)
    assert e.value.tally is not None and 0 < (e.value.tally.quarantine_left or 0) <= 30.0
    assert fresh.keys_left(resource) == 0
