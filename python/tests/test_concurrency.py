"""Mutual exclusion across threads, processes and asyncio tasks sharing
one client, and cancellation (asyncio, Ctrl-C) that leaves nothing held."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from typing import List, Tuple

import pytest
from nodes import Cluster, DelayProxy, wait_until

from redlock_client import AsyncLock, AsyncRedlock, Redlock

Window = Tuple[float, float, int]


def assert_disjoint_and_rising(windows: List[Window]) -> None:
    """Holding windows (start, end, fencing token) never overlap, and the
    tokens rise in the order the windows came."""
    windows = sorted(windows)
    for (s1, e1, t1), (s2, e2, t2) in zip(windows, windows[1:]):
        assert e1 <= s2, f"two holders at once: [{s1}, {e1}] and [{s2}, {e2}]"
        assert t1 < t2, f"fencing token {t2} after {t1}"


def test_threads_sharing_one_client_hold_one_at_a_time(cluster: Cluster, locks: Redlock, resource: str) -> None:
    windows: List[Window] = []
    errors: List[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(6):
                with locks.lock(resource, ttl=10.0, wait=20.0, retry_delay=(0.001, 0.01)) as lock:
                    token = lock.fencing_token
                    start = time.monotonic()
                    time.sleep(0.002)
                    windows.append((start, time.monotonic(), token))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(windows) == 48
    assert_disjoint_and_rising(windows)


def _process_worker(nodes: List[str], resource: str, rounds: int, out: "multiprocessing.Queue[object]") -> None:
    from redlock_client import Redlock

    try:
        locks = Redlock(nodes)
        for _ in range(rounds):
            with locks.lock(resource, ttl=10.0, wait=30.0, retry_delay=(0.001, 0.02)) as lock:
                token = lock.fencing_token
                start = time.time()
                time.sleep(0.005)
                out.put((start, time.time(), token))
        out.put("done")
    except BaseException as e:
        out.put(f"error: {e!r}")


def test_processes_hold_one_at_a_time_with_rising_tokens(cluster: Cluster, resource: str) -> None:
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    workers = [spawn.Process(target=_process_worker, args=(cluster.urls, resource, 8, out)) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        windows: List[Window] = []
        done = 0
        deadline = time.monotonic() + 60
        while done < len(workers):
            item = out.get(timeout=max(0.1, deadline - time.monotonic()))
            if item == "done":
                done += 1
            elif isinstance(item, str):
                pytest.fail(item)
            else:
                windows.append(item)
    finally:
        for w in workers:
            w.join(10)
            if w.is_alive():
                w.kill()
    assert len(windows) == 32
    assert_disjoint_and_rising(windows)


def test_asyncio_tasks_sharing_one_client_hold_one_at_a_time(cluster: Cluster, resource: str) -> None:
    async def main() -> List[Window]:
        locks = await AsyncRedlock.connect(cluster.urls)
        windows: List[Window] = []
        loop = asyncio.get_running_loop()

        async def worker() -> None:
            for _ in range(4):
                async with locks.lock(resource, ttl=10.0, wait=30.0, fence=True, retry_delay=(0.001, 0.01)) as lock:
                    start = loop.time()
                    await asyncio.sleep(0.001)
                    windows.append((start, loop.time(), lock.fencing_token))

        # The loop keeps running while the rounds are in flight.
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        tick = asyncio.ensure_future(ticker())
        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(16))), 60)
        tick.cancel()
        assert ticks > 50
        await locks.settle()
        return windows

    windows = asyncio.run(main())
    assert len(windows) == 64
    assert_disjoint_and_rising(windows)
    assert cluster.keys_left(resource) == 0


def test_64_tasks_on_their_own_resources(cluster: Cluster, resource: str) -> None:
    async def main() -> None:
        locks = await AsyncRedlock.connect(cluster.urls)

        async def worker(i: int) -> None:
            for _ in range(5):
                lock = await locks.try_acquire(f"{resource}:{i}", ttl=10.0)
                assert lock.is_held
                await lock.release()

        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(64))), 60)
        await locks.settle()

    asyncio.run(main())
    assert sum(cluster.keys_left(f"{resource}:{i}") for i in range(64)) == 0


def test_cancelling_a_waiting_acquire_leaves_nothing_held(cluster: Cluster, locks: Redlock, resource: str) -> None:
    holder = locks.try_acquire(resource, ttl=10.0)

    async def main() -> None:
        alocks = await AsyncRedlock.connect(cluster.urls)
        waiting = asyncio.ensure_future(alocks.acquire(resource, ttl=10.0, wait=30.0, retry_delay=(0.01, 0.03)))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        holder.release()
        # No attempt after the cancellation may take it: watch for a while.
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            assert cluster.holders(resource) == 0, "a cancelled acquire went on and took the lock"
            await asyncio.sleep(0.02)

    asyncio.run(main())
    locks.settle()
    assert cluster.keys_left(resource) == 0


@pytest.mark.parametrize("how", ["acquire", "try_acquire"])
def test_cancelling_while_the_grant_round_is_in_flight_releases_what_it_took(
    cluster: Cluster, resource: str, how: str
) -> None:
    # Every reply comes 300 ms late: the grant round is still in flight when
    # the task is cancelled, and the nodes do grant. What they granted must
    # be released by the client without anybody awaiting it, even though
    # the event loop is gone by the time the late replies come in.
    proxy = DelayProxy(cluster.servers, 0.3)
    try:
        before = [(s.command_calls("lock.acquire"), s.command_calls("lock.release")) for s in cluster.servers]

        async def main() -> AsyncRedlock:
            alocks = await AsyncRedlock.connect(proxy.urls, command_timeout=2.0)
            if how == "acquire":
                call = alocks.acquire(resource, ttl=10.0, wait=30.0)
            else:
                call = alocks.try_acquire(resource, ttl=10.0)
            pending = asyncio.ensure_future(call)
            await asyncio.sleep(0.1)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
            return alocks

        alocks = asyncio.run(main())
        wait_until(5.0, "the cancelled grant, then its release, on every node", lambda: all(
            (s.command_calls("lock.acquire"), s.command_calls("lock.release")) == (a + 1, r + 1)
            for s, (a, r) in zip(cluster.servers, before)
        ))  # fmt: skip
        assert cluster.keys_left(resource) == 0
        time.sleep(0.3)
        after = [s.command_calls("lock.acquire") for s in cluster.servers]
        assert [n - a for n, (a, _) in zip(after, before)] == [1] * 5, "one attempt, no retry after the cancel"
        del alocks
    finally:
        proxy.close()


def test_ctrl_c_during_a_blocking_acquire_leaves_nothing_held(cluster: Cluster, locks: Redlock, resource: str) -> None:
    holder = locks.try_acquire(resource, ttl=10.0)
    main_thread = threading.get_ident()
    timer = threading.Timer(0.3, lambda: signal.pthread_kill(main_thread, signal.SIGINT))
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        locks.acquire(resource, ttl=10.0, wait=30.0)
    assert time.monotonic() - started < 2.0
    timer.join()
    holder.release()
    # No attempt after the interrupt may take it: watch for a while.
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        assert cluster.holders(resource) == 0, "an interrupted acquire went on and took the lock"
        time.sleep(0.02)
    locks.try_acquire(resource, ttl=10.0).release()


def test_async_lost_is_awaitable_and_calls_back_in_the_loop(cluster: Cluster, resource: str) -> None:
    async def main() -> None:
        locks = await AsyncRedlock.connect(cluster.urls)
        lock: AsyncLock = await locks.try_acquire(resource, ttl=0.3)
        loop_thread = threading.get_ident()
        seen = []
        lock.on_lost(lambda error: seen.append((error, threading.get_ident())))
        error = await asyncio.wait_for(lock.lost, 3.0)
        assert error.reason == "expired" and lock.lost.is_set()
        await asyncio.sleep(0)
        assert seen == [(error, loop_thread)]
        with pytest.raises(Exception, match="fencing round has not run"):
            lock.fencing_token

    asyncio.run(main())


def test_a_client_made_before_a_fork_is_refused_in_the_child(cluster: Cluster, locks: Redlock, resource: str) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and exit without running pytest's teardown
        code = 1
        try:
            locks.try_acquire(resource, ttl=5.0)
            os.write(write, b"no error")
        except Exception as e:
            os.write(write, f"{type(e).__name__}: {e}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    said = os.read(read, 1000).decode()
    os.close(read)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, said
    assert "RedlockError: this object was created in another process" in said
    assert cluster.keys_left(resource) == 0
