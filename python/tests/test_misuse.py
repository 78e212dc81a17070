"""Misuse gets a clear exception, never a crash of the interpreter, and
nothing reaches the nodes for a call refused before any round."""

from __future__ import annotations

import asyncio
import math
import re
import time

import pytest
from nodes import Cluster, run_python

from redlock_client import (
    AsyncRedlock,
    InvalidArgumentError,
    LockLostError,
    Redlock,
    RedlockError,
    Watchdog,
    freed_channel,
)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"ttl": -1.0}, InvalidArgumentError, "ttl must be a finite number of seconds"),
        ({"ttl": math.nan}, InvalidArgumentError, "ttl must be a finite number of seconds"),
        ({"ttl": math.inf}, InvalidArgumentError, "ttl must be a finite number of seconds"),
        ({"ttl": "10"}, TypeError, "ttl must be seconds"),
        ({"ttl": 0.001}, InvalidArgumentError, "not above the clock-drift allowance"),
        ({"ttl": 5.0, "mode": "shared"}, InvalidArgumentError, "unknown mode \"shared\""),
        ({"ttl": 5.0, "mode": 3}, TypeError, "mode must be a Mode"),
        ({"ttl": 5.0, "mode": "permit"}, InvalidArgumentError, "mode 'permit' needs a permit count"),
        ({"ttl": 5.0, "permits": 2}, InvalidArgumentError, "a permit count is only for mode 'permit'"),
        ({"ttl": 5.0, "mode": "permit", "permits": 0}, InvalidArgumentError, "permits must be at least 1"),
        ({"ttl": 5.0, "mode": "permit", "permits": -3}, InvalidArgumentError, "permits must be at least 1"),
        ({"ttl": 5.0, "mode": "permit", "permits": 2.5}, TypeError, "permits must be an int"),
    ],
)
def test_bad_arguments_are_refused_before_any_round(
    cluster: Cluster, locks: Redlock, resource: str, kwargs: dict, error: type, message: str
) -> None:
    before = sum(s.command_calls("lock.acquire") + s.command_calls("lock.semaphore") for s in cluster.servers)
    with pytest.raises(error, match=message):
        locks.try_acquire(resource, **kwargs)
    with pytest.raises(error, match=message):
        asyncio.run(AsyncRedlock(cluster.urls).try_acquire(resource, **kwargs))
    after = sum(s.command_calls("lock.acquire") + s.command_calls("lock.semaphore") for s in cluster.servers)
    assert after == before, "a refused call reached the nodes"


def test_a_request_the_nodes_refuse_ends_at_once(cluster: Cluster, locks: Redlock, resource: str) -> None:
    """A TTL above the nodes' lock.max-ttl-ms (30 s), or a key that is not a
    lock, is refused by every node: the acquire ends at its first attempt,
    whatever its wait, with a non-retryable InvalidArgumentError that names
    a node and its reply (and the round's counts)."""

    def acquire_calls() -> int:
        return sum(s.command_calls("lock.acquire") for s in cluster.servers)

    says = (
        rf"the nodes refuse the request for '{re.escape(resource)}' \(5 of 5 nodes; a retry would be refused "
        r"again\): member 1 \(redis://[^)]+\): ERR lock.acquire: ttl-ms 60000 is out of range, must be 1..30000"
    )
    before = acquire_calls()
    started = time.monotonic()
    with pytest.raises(InvalidArgumentError, match=says) as raised:
        locks.acquire(resource, ttl=60.0, wait=10.0)
    took = time.monotonic() - started
    error = raised.value
    assert isinstance(error, ValueError) and not error.retryable
    assert (error.resource, error.phase) == (resource, "acquire")
    assert error.tally is not None and (error.tally.nodes, error.tally.failed) == (5, 5)
    assert acquire_calls() - before == 5, "one attempt"
    assert took < 5.0, f"took {took:.1f} s of a 10 s wait"

    async def in_asyncio() -> None:
        with pytest.raises(InvalidArgumentError, match=says):
            await AsyncRedlock(cluster.urls).acquire(resource, ttl=60.0, wait=10.0)

    before = acquire_calls()
    asyncio.run(in_asyncio())
    assert acquire_calls() - before == 5, "one attempt"

    key = f"{resource}:string"
    for server in cluster.servers:
        server.call("SET", key, "x")
    before = acquire_calls()
    with pytest.raises(InvalidArgumentError, match=r"\(5 of 5 nodes; a retry would be refused again\): .*WRONGTYPE"):
        locks.acquire(key, ttl=5.0, wait=10.0)
    assert acquire_calls() - before == 5, "one attempt"


def test_the_mode_exclusive_is_refused_as_ambiguous(cluster: Cluster, locks: Redlock, resource: str) -> None:
    """"exclusive" could mean the plain lock or the write side of a
    read-write lock: every call that takes a mode refuses it, saying which
    to write, and nothing reaches the nodes."""
    says = re.escape(
        "mode 'exclusive' is ambiguous: use 'plain' (LOCK.ACQUIRE, one holder) or 'write' "
        "(the write side of a read-write lock)"
    )
    before = sum(s.command_calls("lock.acquire") + s.command_calls("lock.macquire") for s in cluster.servers)
    calls = [
        lambda: locks.try_acquire(resource, ttl=5.0, mode="exclusive"),
        lambda: locks.try_acquire_many([(resource, "exclusive")], ttl=5.0),
        lambda: locks.release(resource, "some-token", mode="exclusive"),
        lambda: locks.quorum("exclusive"),
        lambda: asyncio.run(AsyncRedlock(cluster.urls).try_acquire(resource, ttl=5.0, mode="exclusive")),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError, match=says):
            call()
    after = sum(s.command_calls("lock.acquire") + s.command_calls("lock.macquire") for s in cluster.servers)
    assert after == before, "a refused call reached the nodes"
    # The plain lock is "plain" (and the default).
    with locks.lock(resource, ttl=5.0, mode="plain") as lock:
        assert lock.mode == "plain"
    lock = locks.try_acquire(resource, ttl=5.0)
    assert lock.mode == "plain"
    lock.release()


def test_bad_names_and_sets(locks: Redlock, resource: str) -> None:
    with pytest.raises(InvalidArgumentError, match="resource must be 1 to 256 bytes"):
        locks.try_acquire("", ttl=5.0)
    with pytest.raises(InvalidArgumentError, match="resource must be 1 to 256 bytes"):
        locks.try_acquire("x" * 257, ttl=5.0)
    with pytest.raises(TypeError, match="resource must be a str"):
        locks.try_acquire(b"bytes", ttl=5.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a sequence of resources"):
        locks.try_acquire_many("abc", ttl=5.0)
    with pytest.raises(InvalidArgumentError, match="appears twice|named twice|twice"):
        locks.try_acquire_many([resource, resource], ttl=5.0)
    with pytest.raises(InvalidArgumentError, match="[Pp]ermit"):
        locks.try_acquire_many([(resource, "permit")], ttl=5.0)
    with pytest.raises(InvalidArgumentError):
        locks.try_acquire_many([], ttl=5.0)
    with pytest.raises(TypeError, match="set member"):
        locks.try_acquire_many([(resource, "read", 3)], ttl=5.0)  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="token must be 1 to 256 bytes"):
        locks.release(resource, "")
    with pytest.raises(InvalidArgumentError, match="attempts must be at least 1"):
        locks.acquire(resource, ttl=5.0, attempts=0)
    with pytest.raises(TypeError, match="watchdog must be a bool or a Watchdog"):
        locks.lock(resource, ttl=5.0, watchdog=30)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "nodes, message",
    [
        ([], "no members given"),
        (["http://127.0.0.1:1"], "member \"http://127.0.0.1:1\""),
        (["rediss://127.0.0.1:1#insecure"], "a #fragment"),
        (["redis://127.0.0.1:1", "redis://127.0.0.1:1"], "listed twice"),
    ],
)
def test_bad_nodes(nodes: list, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        Redlock(nodes)


def test_a_str_is_not_a_node_list() -> None:
    with pytest.raises(TypeError, match="list of URLs"):
        Redlock("redis://127.0.0.1:1")


def test_a_lock_used_after_release_or_detach(locks: Redlock, resource: str) -> None:
    lock = locks.try_acquire(resource, ttl=5.0)
    detached = lock.detach()
    for call in (lock.release, lock.extend, lock.fence, lock.detach, lock.start_watchdog):
        with pytest.raises(InvalidArgumentError, match="was released or detached"):
            call()
    with lock:  # a with-block on a detached lock releases nothing
        pass
    locks.release(resource, detached.token)
    assert "detached" in repr(lock)


def test_a_lock_context_is_entered_once_at_a_time(locks: Redlock, resource: str) -> None:
    context = locks.lock(resource, ttl=5.0)
    with context:
        with pytest.raises(RedlockError, match="already entered"):
            context.__enter__()
    with context:  # again after the first block ended
        pass


def test_the_release_failure_of_a_lost_lock_is_raised_at_the_end_of_the_block(
    cluster: Cluster, locks: Redlock, resource: str
) -> None:
    with pytest.raises(RedlockError, match="to release"):
        with locks.lock(resource, ttl=0.2) as lock:
            assert lock.lost.wait(2.0)
            # Someone else holds it now.
            locks.acquire(resource, ttl=5.0, wait=2.0).detach()
    with pytest.raises(ValueError, match="boom") as raised:
        with locks.lock(f"{resource}:2", ttl=0.2) as lock:
            assert lock.lost.wait(2.0)
            locks.acquire(f"{resource}:2", ttl=5.0, wait=2.0).detach()
            with pytest.raises(LockLostError, match="validity ran out"):
                lock.extend()
            raise ValueError("boom")
    assert any("releasing the lock failed too" in note for note in getattr(raised.value, "__notes__", []))


def test_a_callback_that_raises_is_reported_not_fatal(locks: Redlock, resource: str, capfd: pytest.CaptureFixture) -> None:
    lock = locks.try_acquire(resource, ttl=0.2)
    calls = []

    def bad(error: LockLostError) -> None:
        calls.append(1)
        raise RuntimeError("callback failed")

    lock.on_lost(bad)
    lock.on_lost(lambda error: calls.append(2))
    assert lock.lost.wait(2.0)
    from nodes import wait_until

    wait_until(2.0, "both callbacks", lambda: sorted(calls) == [1, 2])
    assert "callback failed" in capfd.readouterr().err


def test_the_asyncio_api_outside_a_running_loop(cluster: Cluster, resource: str) -> None:
    alocks = AsyncRedlock(cluster.urls)
    coroutine = alocks.try_acquire(resource, ttl=5.0)
    with pytest.raises(RuntimeError, match="no running event loop"):
        coroutine.send(None)
    coroutine.close()


def test_blocking_calls_inside_a_lost_callback_work(cluster: Cluster, locks: Redlock, resource: str) -> None:
    # A sync callback runs on a thread of its own, so it may use the client.
    lock = locks.try_acquire(resource, ttl=0.2)
    retaken = []
    lock.on_lost(lambda error: retaken.append(locks.acquire(resource, ttl=5.0, wait=2.0)))
    assert lock.lost.wait(2.0)
    from nodes import wait_until

    wait_until(3.0, "the callback's acquire", lambda: len(retaken) == 1)
    retaken[0].release()


def test_a_watchdog_bound_of_the_wrong_type(locks: Redlock, resource: str) -> None:
    with locks.lock(resource, ttl=5.0) as lock:
        with pytest.raises(TypeError):
            lock.start_watchdog(Watchdog(renewals_max="many"))  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            lock.start_watchdog(Watchdog(duration_max=-1))


def test_an_interpreter_exiting_with_locks_held_and_watchdogs_running(cluster: Cluster, resource: str) -> None:
    script = (
        "import sys; from redlock_client import Redlock\n"
        "locks = Redlock(sys.argv[1].split(','))\n"
        "held = [locks.try_acquire(f'{sys.argv[2]}:{i}', ttl=0.3) for i in range(5)]\n"
        "for lock in held: lock.start_watchdog(); lock.on_lost(print)\n"
        "print('exiting')\n"
    )
    for _ in range(3):
        done = run_python(script, ",".join(cluster.urls), resource)
        assert done.returncode == 0 and done.stdout.strip() == "exiting", (done.returncode, done.stderr)


def test_freed_channel_names_the_channel_and_refuses_bad_arguments() -> None:
    assert freed_channel("job") == ("__lock@0__:job", "SUBSCRIBE")
    assert freed_channel("job", db=3) == ("__lock@3__:job", "SUBSCRIBE")
    # A cluster member: a channel in the resource's slot, subscribed at its shard.
    assert freed_channel("job", cluster=True) == ("__lock@0__:{job}", "SSUBSCRIBE")
    assert freed_channel("{user:7}:job", cluster=True) == ("__lock@0__:{user:7}:job", "SSUBSCRIBE")
    # No channel in the slot of a tagless name with a `}`: every node hears it.
    assert freed_channel("a}b", cluster=True) == ("__lock@0__:a}b", "SUBSCRIBE")
    with pytest.raises(TypeError, match="resource must be a str"):
        freed_channel(b"job")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cluster must be a bool"):
        freed_channel("job", cluster=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="db must be an int"):
        freed_channel("job", db=True)
    with pytest.raises(InvalidArgumentError, match="db must be between 0 and 2147483647, got -1"):
        freed_channel("job", db=-1)
    with pytest.raises(InvalidArgumentError, match="got 2147483648"):
        freed_channel("job", db=2**31)
