"""The blocking API: :class:`Redlock`, :class:`Lock`, :class:`LostEvent`.

Every call that goes to the nodes blocks the calling thread with the GIL
released, so other threads run meanwhile; one client may be shared by any
number of threads.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Type

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


class Redlock(ClientBase["LockContext"]):
    """A quorum (Redlock) client over N independent members that load the
    lock module, each one master (``redis://host:port``) or one cluster
    (``redis+cluster://host:port?addr=host:port``: one vote), over TLS when
    written ``rediss://`` / ``rediss+cluster://`` (settings: ``tls=``
    :class:`Tls`). Connects at
    once (in parallel, bounded by ``connect_timeout``); a node that cannot be
    reached now is no error: it counts as unreachable, and later calls try
    it again.

    ::

        locks = Redlock(["redis://a:6379", "redis://b:6379", "redis://c:6379"])
        with locks.lock("orders:42", ttl=10.0, wait=5.0) as lock:
            store.write(data, fence=lock.fencing_token)

    Durations are seconds (``int``/``float``) or ``datetime.timedelta``.
    ``command_timeout`` bounds each command on each node (keep it well below
    your TTLs), ``reconnect_backoff`` how long a node that failed to connect
    counts as unreachable at once.
    """

    __slots__ = ()

    def _context(self, args: tuple, watchdog: Optional[Tuple[int, float]], on_lost: Any) -> "LockContext":
        return LockContext(self, args, watchdog, on_lost)

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

    def __enter__(self) -> "Redlock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.settle()

    def try_acquire(
        self,
        resource: str,
        *,
        ttl: Seconds,
        mode: ModeLike = "plain",
        permits: Optional[int] = None,
        fence: bool = False,
    ) -> "Lock":
        """One attempt (one round trip) to take ``resource`` in ``mode``
        ("permit" with ``permits=L``: one of a semaphore's L permits) for
        ``ttl``. Raises :class:`LockHeldError`, :class:`NoQuorumError` (or
        a subclass), :class:`ExpiredBeforeUseError` or
        :class:`InvalidArgumentError`; on failure nothing stays taken.
        ``fence=True`` also runs the fencing round (see
        :attr:`Lock.fencing_token`)."""
        claims = one_claim(resource, mode, permits)
        return Lock(self._core.acquire(claims, False, seconds(ttl, "ttl"), fence), self)

    def acquire(
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
    ) -> "Lock":
        """:meth:`try_acquire`, retried after a random delay (``retry_delay``,
        default 0.05 to 0.2 s) while the failure is retryable, for ``wait``
        seconds in all (default: 3 attempts), at most ``attempts`` attempts.
        Raises the last attempt's error. Ctrl-C stops the wait; an attempt
        under way then still ends, and what it took is released."""
        claims = one_claim(resource, mode, permits)
        policy = retry(wait, attempts, retry_delay)
        return Lock(self._core.acquire(claims, False, seconds(ttl, "ttl"), fence, policy), self)

    def try_acquire_many(self, resources: Sequence[SetMember], *, ttl: Seconds, fence: bool = False) -> "Lock":
        """One attempt to take a set of resources, all or nothing, each a
        name (plain) or (name, mode) with mode "plain", "read" or
        "write": one ``LOCK.MACQUIRE`` per node, one token and one fencing
        token for the whole set."""
        return Lock(self._core.acquire(set_claims(resources), True, seconds(ttl, "ttl"), fence), self)

    def acquire_many(
        self,
        resources: Sequence[SetMember],
        *,
        ttl: Seconds,
        wait: Optional[Seconds] = None,
        attempts: Optional[int] = None,
        retry_delay: Optional[Tuple[Seconds, Seconds]] = None,
        fence: bool = False,
    ) -> "Lock":
        """:meth:`try_acquire_many`, retried as :meth:`acquire` retries."""
        policy = retry(wait, attempts, retry_delay)
        return Lock(self._core.acquire(set_claims(resources), True, seconds(ttl, "ttl"), fence, policy), self)

    def release(self, resource: str, token: str, *, mode: ModeLike = "plain", permits: Optional[int] = None) -> Tally:
        """Releases the lock held with ``token`` (taken in ``mode``) on every
        node, from any process; waits for every node's answer. Raises
        :class:`NoQuorumError` when fewer than the quorum released."""
        names = [name(resource, "resource")]
        return tally(self._core.release(names, False, name(token, "token"), mode_name(mode), permit_count(permits)))

    def release_many(self, resources: Sequence[str], token: str) -> Tally:
        """:meth:`release` of a set taken with :meth:`try_acquire_many`."""
        return tally(self._core.release(resource_names(resources), True, name(token, "token")))

    def extend(
        self,
        resource: str,
        token: str,
        *,
        ttl: Seconds,
        mode: ModeLike = "plain",
        permits: Optional[int] = None,
    ) -> float:
        """Extends the lock held with ``token`` for ``ttl`` from now, from
        any process; returns the validity left in seconds."""
        names = [name(resource, "resource")]
        args = (names, False, name(token, "token"), seconds(ttl, "ttl"), mode_name(mode), permit_count(permits))
        return self._core.extend(*args)

    def extend_many(self, resources: Sequence[str], token: str, *, ttl: Seconds) -> float:
        """:meth:`extend` of a set taken with :meth:`try_acquire_many`."""
        return self._core.extend(resource_names(resources), True, name(token, "token"), seconds(ttl, "ttl"))

    def enter(self, resource: str, owner: str, *, ttl: Seconds) -> Entered:
        """Reentrant acquire by ``owner`` (``LOCK.ENTER``, then the fencing
        round at once): the first entry grants a new fencing token, later
        ones by the same owner add a hold and return the same token or a
        higher one."""
        token, validity = self._core.enter(name(resource, "resource"), name(owner, "owner"), seconds(ttl, "ttl"))
        return Entered(token, validity)

    def exit(self, resource: str, owner: str) -> int:
        """Reentrant release (``LOCK.EXIT``): the holds left (0: free)."""
        return self._core.exit(name(resource, "resource"), name(owner, "owner"))

    @contextmanager
    def reentrant(self, resource: str, owner: str, *, ttl: Seconds) -> Iterator[Entered]:
        """``with locks.reentrant(resource, owner, ttl=...) as entered:``
        :meth:`enter` then :meth:`exit`."""
        entered = self.enter(resource, owner, ttl=ttl)
        try:
            yield entered
        finally:
            self.exit(resource, owner)

    def info(self, resource: str) -> List[NodeInfo]:
        """``LOCK.INFO`` from every node, in node order."""
        return node_infos(self._core.info(name(resource, "resource")))

    def status(self) -> QuorumStatus:
        """``INFO lock`` from every node: can a majority grant right now,
        and if not, why (see :class:`QuorumStatus`)."""
        return quorum_status(self._core.status())

    def settle(self) -> None:
        """Waits (bounded) for the calls that rounds left running in the
        background (releases returning at their majority, dropped locks'
        releases). Call it before the process exits."""
        self._core.settle()


class LockContext(ContextBase):
    """What :meth:`Redlock.lock` returns: acquires on entry, releases on
    exit. One ``with`` at a time."""

    __slots__ = ()

    def __enter__(self) -> "Lock":
        self._check_free()
        lock = Lock(self._client._core.acquire(*self._args), self._client)
        try:
            if self._watchdog is not None:
                lock._held.start_watchdog(*self._watchdog)
            if self._on_lost is not None:
                lock.on_lost(self._on_lost)
        except BaseException:
            lock._release_quietly()
            raise
        self._lock = lock
        return lock

    def __exit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.__exit__(kind, error, tb)


class Lock(LockBase):
    """A lock held on a quorum of nodes. Use it in ``with`` (released at the
    end) or call :meth:`release`. A Lock that is garbage-collected while
    held is released in the background."""

    __slots__ = ()

    @property
    def fencing_token(self) -> int:
        """The quorum's fencing token: strictly above the token of every
        fenced holder whose hold ended before this one began. Pass it to the
        protected resource, which should refuse writes carrying a lower one.
        The first read runs the fencing round (blocking); later reads
        return the same token."""
        token = self._held.fencing_token
        return self.fence() if token is None else token

    def fence(self) -> int:
        """Runs the fencing round if it has not run yet; returns the token.
        Raises :class:`NoQuorumError` (phase "fence"; a later call tries
        again) or :class:`LockLostError` (the validity ran out first)."""
        return self._held.fence()

    def extend(self, ttl: Optional[Seconds] = None) -> float:
        """Extends the lock on every node for ``ttl`` (default: the TTL it
        was taken with), counted from the start of the round; returns the
        validity left. A failure means the lock is lost."""
        return self._held.extend(None if ttl is None else seconds(ttl, "ttl"))

    def release(self) -> Tally:
        """Releases on every node; returns once the quorum confirmed (the
        other nodes' releases go on in the background). Raises
        :class:`NoQuorumError` when fewer confirmed: the lock had expired or
        been taken, so the work done under it may have overlapped another
        holder's."""
        return tally(self._held.release())

    def detach(self) -> Detached:
        """Gives the lock up without releasing it: it stays held until its
        TTL, or a release by token (:meth:`Redlock.release`), from any
        process. The watchdog stops."""
        token, fencing_token, validity = self._held.detach()
        return Detached(self.resource, self.resources, token, fencing_token, validity)

    def start_watchdog(self, watchdog: Optional[Watchdog] = None) -> None:
        """Renews the lock every ttl/3 in the background, within the bounds
        of ``watchdog`` (default :class:`Watchdog`). A renewal that the
        quorum does not confirm marks the lock lost at once (see
        :attr:`lost`)."""
        bounds = watchdog_bounds(watchdog)
        self._held.start_watchdog(*bounds)

    @property
    def lost(self) -> "LostEvent":
        """An event set when the lock is lost (a renewal failed, or the
        validity ran out): ``lock.lost.is_set()``, ``lock.lost.wait(t)``,
        ``lock.lost.error``. Never set after a release or detach."""
        if self._lost is None:
            event = LostEvent()
            self._held.on_lost(event._fire)
            self._lost = event
        return self._lost

    def on_lost(self, callback: Callable[[LockLostError], Any]) -> None:
        """Calls ``callback(LockLostError)`` once when the lock is lost, on a
        thread of its own (at once if it is lost already)."""
        self.lost.add_callback(callback)

    def _release_quietly(self) -> None:
        try:
            self.release()
        except RedlockError:
            pass

    def __enter__(self) -> "Lock":
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if self._needs_release():
            try:
                self.release()
            except RedlockError as failed:
                release_failed(failed, error)


class LostEvent(LostBase):
    """Set once when a lock is lost (a ``threading.Event`` with the error)."""

    __slots__ = ("_event", "_mutex")

    def __init__(self) -> None:
        super().__init__()
        self._event = threading.Event()
        self._mutex = threading.Lock()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: Optional[Seconds] = None) -> bool:
        """Blocks until the lock is lost or ``timeout`` seconds pass; True
        if it is lost."""
        return self._event.wait(None if timeout is None else seconds(timeout, "timeout"))

    def add_callback(self, callback: LostCallback) -> None:
        """Calls ``callback(error)`` when lost (now, if it is already)."""
        with self._mutex:
            error = self._error
            if error is None:
                self._callbacks.append(callback)
                return
        call_back(callback, error)

    def _fire(self, error: LockLostError) -> None:
        with self._mutex:
            callbacks = self._record(error)
        self._event.set()
        for callback in callbacks:
            call_back(callback, error)

