"""The asyncio API: :class:`AsyncRedlock`, :class:`AsyncLock`,
:class:`AsyncLostEvent`.

Each call runs on the extension's Tokio runtime; its result comes back to
the event loop through a socket the loop watches (one wake-up per burst of
results), so the loop never blocks and the runtime's threads never wait for
the GIL. One client may be shared by any number of tasks (and loops).

Cancelling a task that awaits an acquire stops its retries; an attempt
already under way still ends, and what it took is released. Any other
call, once started, runs to its end (a release is never cut in half).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Iterable, List, Optional, Sequence, Tuple, Type

from . import _native
from ._common import (
    ClientBase,
    ContextBase,
    LockBase,
    LostBase,
    LostCallback,
    call_back,
    connect_args,
    release_failed,
    watchdog_bounds,
)
from ._types import (
    Detached,
    Entered,
    ModeLike,
    NodeInfo,
    QuorumStatus,
    Seconds,
    SetMember,
    Tally,
    Tls,
    Watchdog,
    mode_name,
    name,
    node_infos,
    quorum_status,
    one_claim,
    permit_count,
    resource_names,
    retry,
    seconds,
    set_claims,
    tally,
)
from .errors import LockLostError, RedlockError

_bridges: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _native.Bridge]" = weakref.WeakKeyDictionary()
_bridges_mutex = threading.Lock()
_last = threading.local()


def _bridge() -> Tuple[asyncio.AbstractEventLoop, _native.Bridge]:
    """The running loop and its bridge (made and watched on first use)."""
    loop = asyncio.get_running_loop()
    last = getattr(_last, "loop", None)
    if last is not None and last() is loop:
        return loop, _last.bridge
    with _bridges_mutex:
        bridge = _bridges.get(loop)
        if bridge is None:
            bridge = _native.Bridge()
            loop.add_reader(bridge.fileno(), bridge.drain)
            _bridges[loop] = bridge
    _last.loop, _last.bridge = weakref.ref(loop), bridge
    return loop, bridge


async def _run(start: Callable[..., Any], *args: Any) -> Any:
    """Starts ``start(*args, (bridge, future))`` and awaits its result. On
    cancellation the operation is told (only an acquire's retry loop stops;
    see the module's docstring)."""
    loop, bridge = _bridge()
    future = loop.create_future()
    task = start(*args, (bridge, future))
    try:
        return await future
    except asyncio.CancelledError:
        task.cancel()
        raise


class AsyncRedlock(ClientBase["AsyncLockContext"]):
    """The asyncio twin of :class:`Redlock`: the same calls, awaited.

    ::

        locks = await AsyncRedlock.connect(["redis://a:6379", "redis://b:6379", "redis://c:6379"])
        async with locks.lock("orders:42", ttl=10.0, wait=5.0) as lock:
            await store.write(data, fence=await lock.fence())

    ``AsyncRedlock(nodes)`` connects too, blocking the calling thread for up
    to ``connect_timeout``; inside a running loop prefer ``await
    AsyncRedlock.connect(nodes)``.
    """

    __slots__ = ()

    def _context(self, args: tuple, watchdog: Optional[Tuple[int, float]], on_lost: Any) -> "AsyncLockContext":
        return AsyncLockContext(self, args, watchdog, on_lost)

    def __init__(
        self,
        nodes: Iterable[str],
        *,
        connect_timeout: Seconds = 0.5,
        command_timeout: Seconds = 0.25,
        reconnect_backoff: Seconds = 0.25,
        tls: Optional[Tls] = None,
    ) -> None:
        self._core = _native.Client(*connect_args(nodes, connect_timeout, command_timeout, reconnect_backoff, tls))

    @classmethod
    async def connect(
        cls,
        nodes: Iterable[str],
        *,
        connect_timeout: Seconds = 0.5,
        command_timeout: Seconds = 0.25,
        reconnect_backoff: Seconds = 0.25,
        tls: Optional[Tls] = None,
    ) -> "AsyncRedlock":
        """Connects without blocking the event loop (the connect runs in the
        loop's default executor)."""
        args = connect_args(nodes, connect_timeout, command_timeout, reconnect_backoff, tls)
        self = cls.__new__(cls)
        self._core = await asyncio.get_running_loop().run_in_executor(None, lambda: _native.Client(*args))
        return self

    async def __aenter__(self) -> "AsyncRedlock":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.settle()

    async def try_acquire(
        self,
        resource: str,
        *,
        ttl: Seconds,
        mode: ModeLike = "plain",
        permits: Optional[int] = None,
        fence: bool = False,
    ) -> "AsyncLock":
        """One attempt; see :meth:`Redlock.try_acquire`."""
        claims = one_claim(resource, mode, permits)
        return AsyncLock(await _run(self._core.acquire, claims, False, seconds(ttl, "ttl"), fence, None), self)

    async def acquire(
        self,
        resource: str,
        *,
        ttl: Seconds,
        mode: ModeLike = "plain",
        permits: Optional[int] = None,
        wait: Optional[Seconds] = None,
        attempts: Optional[int] = None,
        retry_delay: Optional[Tuple[Seconds, Seconds]] = None,
        fence: bool = False,
    ) -> "AsyncLock":
        """Retried attempts; see :meth:`Redlock.acquire`. Cancelling the
        awaiting task stops the retries and leaves nothing held."""
        policy = retry(wait, attempts, retry_delay)
        claims = one_claim(resource, mode, permits)
        return AsyncLock(await _run(self._core.acquire, claims, False, seconds(ttl, "ttl"), fence, policy), self)

    async def try_acquire_many(self, resources: Sequence[SetMember], *, ttl: Seconds, fence: bool = False) -> "AsyncLock":
        """A set, all or nothing, one attempt; see :meth:`Redlock.try_acquire_many`."""
        held = await _run(self._core.acquire, set_claims(resources), True, seconds(ttl, "ttl"), fence, None)
        return AsyncLock(held, self)

    async def acquire_many(
        self,
        resources: Sequence[SetMember],
        *,
        ttl: Seconds,
        wait: Optional[Seconds] = None,
        attempts: Optional[int] = None,
        retry_delay: Optional[Tuple[Seconds, Seconds]] = None,
        fence: bool = False,
    ) -> "AsyncLock":
        """A set, all or nothing, retried; see :meth:`Redlock.acquire_many`."""
        policy = retry(wait, attempts, retry_delay)
        held = await _run(self._core.acquire, set_claims(resources), True, seconds(ttl, "ttl"), fence, policy)
        return AsyncLock(held, self)

    async def release(
        self, resource: str, token: str, *, mode: ModeLike = "plain", permits: Optional[int] = None
    ) -> Tally:
        """Release by token; see :meth:`Redlock.release`."""
        args = ([name(resource, "resource")], False, name(token, "token"), mode_name(mode), permit_count(permits))
        return tally(await _run(self._core.release, *args))

    async def release_many(self, resources: Sequence[str], token: str) -> Tally:
        """Release of a set by token; see :meth:`Redlock.release_many`."""
        return tally(await _run(self._core.release, resource_names(resources), True, name(token, "token"), "plain", None))

    async def extend(
        self,
        resource: str,
        token: str,
        *,
        ttl: Seconds,
        mode: ModeLike = "plain",
        permits: Optional[int] = None,
    ) -> float:
        """Extend by token; see :meth:`Redlock.extend`."""
        names = [name(resource, "resource")]
        args = (names, False, name(token, "token"), seconds(ttl, "ttl"), mode_name(mode), permit_count(permits))
        return await _run(self._core.extend, *args)

    async def extend_many(self, resources: Sequence[str], token: str, *, ttl: Seconds) -> float:
        """Extend a set by token; see :meth:`Redlock.extend_many`."""
        args = (resource_names(resources), True, name(token, "token"), seconds(ttl, "ttl"), "plain", None)
        return await _run(self._core.extend, *args)

    async def enter(self, resource: str, owner: str, *, ttl: Seconds) -> Entered:
        """Reentrant acquire; see :meth:`Redlock.enter`."""
        args = (name(resource, "resource"), name(owner, "owner"), seconds(ttl, "ttl"))
        return Entered(*await _run(self._core.enter, *args))

    async def exit(self, resource: str, owner: str) -> int:
        """Reentrant release; see :meth:`Redlock.exit`."""
        return await _run(self._core.exit, name(resource, "resource"), name(owner, "owner"))

    @asynccontextmanager
    async def reentrant(self, resource: str, owner: str, *, ttl: Seconds) -> AsyncIterator[Entered]:
        """``async with locks.reentrant(resource, owner, ttl=...)``."""
        entered = await self.enter(resource, owner, ttl=ttl)
        try:
            yield entered
        finally:
            await self.exit(resource, owner)

    async def info(self, resource: str) -> List[NodeInfo]:
        """``LOCK.INFO`` from every node, in node order."""
        return node_infos(await _run(self._core.info, name(resource, "resource")))

    async def status(self) -> QuorumStatus:
        """``INFO lock`` from every node: can a majority grant right now,
        and if not, why (see :class:`QuorumStatus`)."""
        return quorum_status(await _run(self._core.status))

    async def settle(self) -> None:
        """Waits (bounded) for the calls rounds left in the background."""
        await _run(self._core.settle)


class AsyncLockContext(ContextBase):
    """What :meth:`AsyncRedlock.lock` returns (``async with``)."""

    __slots__ = ()

    async def __aenter__(self) -> "AsyncLock":
        self._check_free()
        lock = AsyncLock(await _run(self._client._core.acquire, *self._args), self._client)
        try:
            if self._watchdog is not None:
                await _run(lock._held.start_watchdog, *self._watchdog)
            if self._on_lost is not None:
                lock.on_lost(self._on_lost)
        except BaseException:
            await lock._release_quietly()
            raise
        self._lock = lock
        return lock

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            await lock.__aexit__(kind, error, tb)


class AsyncLock(LockBase):
    """A lock held on a quorum of nodes (asyncio). ``async with`` releases
    it at the end of the block."""

    __slots__ = ()

    @property
    def fencing_token(self) -> int:
        """The quorum fencing token, once the fencing round ran (``await
        lock.fence()``, or ``fence=True`` at acquire); raises
        :class:`RedlockError` before that (a property cannot await)."""
        token = self._held.fencing_token
        if token is None:
            raise RedlockError("the fencing round has not run yet: await lock.fence() (or acquire with fence=True)")
        return token

    async def fence(self) -> int:
        """The fencing round (the first call); returns the quorum's fencing
        token. See :meth:`Lock.fence`."""
        return await _run(self._held.fence)

    async def extend(self, ttl: Optional[Seconds] = None) -> float:
        """See :meth:`Lock.extend`."""
        return await _run(self._held.extend, None if ttl is None else seconds(ttl, "ttl"))

    async def release(self) -> Tally:
        """See :meth:`Lock.release`. Runs to its end even if the awaiting
        task is cancelled."""
        return tally(await _run(self._held.release))

    async def detach(self) -> Detached:
        """See :meth:`Lock.detach`."""
        token, fencing_token, validity = await _run(self._held.detach)
        return Detached(self.resource, self.resources, token, fencing_token, validity)

    async def start_watchdog(self, watchdog: Optional[Watchdog] = None) -> None:
        """See :meth:`Lock.start_watchdog`."""
        bounds = watchdog_bounds(watchdog)
        await _run(self._held.start_watchdog, *bounds)

    @property
    def lost(self) -> "AsyncLostEvent":
        """Awaitable: ``error = await lock.lost`` returns when the lock is
        lost (a renewal failed, or the validity ran out); ``is_set()``,
        ``error``, ``add_callback``. Bound to the running loop at first use."""
        if self._lost is None:
            loop, bridge = _bridge()
            event = AsyncLostEvent(loop)
            self._held.on_lost(event._fire, bridge)
            self._lost = event
        return self._lost

    def on_lost(self, callback: Callable[[LockLostError], Any]) -> None:
        """Calls ``callback(LockLostError)`` in the event loop once when the
        lock is lost; a coroutine it returns is run as a task."""
        self.lost.add_callback(callback)

    async def _release_quietly(self) -> None:
        try:
            await self.release()
        except RedlockError:
            pass

    async def __aenter__(self) -> "AsyncLock":
        return self

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if self._needs_release():
            try:
                await self.release()
            except RedlockError as failed:
                release_failed(failed, error)


class AsyncLostEvent(LostBase):
    """Set once when a lock is lost; awaitable (``await lock.lost``)."""

    __slots__ = ("_loop", "_event")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop
        self._event = asyncio.Event()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> LockLostError:
        """Returns the LockLostError once the lock is lost."""
        await self._event.wait()
        assert self._error is not None
        return self._error

    def __await__(self) -> Any:
        return self.wait().__await__()

    def add_callback(self, callback: LostCallback) -> None:
        """Calls ``callback(error)`` in the loop when lost (soon, if it is
        already)."""
        if self._error is None:
            self._callbacks.append(callback)
        else:
            self._loop.call_soon(self._call, callback, self._error)

    def _call(self, callback: LostCallback, error: LockLostError) -> None:
        result = call_back(callback, error)
        if inspect.isawaitable(result):
            asyncio.ensure_future(result)

    def _fire(self, error: LockLostError) -> None:
        for callback in self._record(error):
            self._call(callback, error)
        self._event.set()

