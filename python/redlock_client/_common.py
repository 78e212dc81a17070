"""What the sync and asyncio classes share: the read-only side of a lock
and of a client, and the loss event's bookkeeping."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable, Generic, List, Optional, Sequence, Tuple, TypeVar

from . import _native
from ._types import (
    Tls,
    ModeLike,
    Seconds,
    SetMember,
    Watchdog,
    mode_name,
    one_claim,
    permit_count,
    retry,
    seconds,
    set_claims,
)
from .errors import LockLostError, RedlockError

#: Called with the LockLostError when a lock is lost.
LostCallback = Callable[[LockLostError], Any]
#: What ``lock()`` returns: a sync or an asyncio context.
ContextT = TypeVar("ContextT")


class ClientBase(Generic[ContextT]):
    """The nodes and quorum sizes of a client, and its ``lock`` contexts
    (no I/O until the context is entered)."""

    __slots__ = ("_core",)

    _core: _native.Client

    def _context(self, args: tuple, watchdog: Optional[Tuple[int, float]], on_lost: Any) -> ContextT:
        """The context ``lock()`` returns: LockContext or AsyncLockContext."""
        raise NotImplementedError

    @property
    def nodes(self) -> List[str]:
        """The node URLs, in the order given."""
        return self._core.nodes

    @property
    def majority(self) -> int:
        """N/2 + 1: the grants a plain, read or write lock needs."""
        return self._core.majority

    def quorum(self, mode: ModeLike = "plain", permits: Optional[int] = None) -> int:
        """The grants a lock taken in ``mode`` needs among this client's N
        nodes: a majority, except a semaphore with 2 or more permits
        (``floor(L*N/(L+1)) + 1``: 4 of 5 nodes for 2 permits)."""
        return self._core.quorum(mode_name(mode), permit_count(permits))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} nodes={self.nodes!r}>"

    def lock(
        self,
        resource: str,
        *,
        ttl: Seconds,
        wait: Optional[Seconds] = None,
        mode: ModeLike = "plain",
        permits: Optional[int] = None,
        fence: bool = False,
        watchdog: "bool | Watchdog" = False,
        on_lost: Optional[LostCallback] = None,
        attempts: Optional[int] = None,
        retry_delay: Optional[Tuple[Seconds, Seconds]] = None,
    ) -> ContextT:
        """A context manager (``with``; ``async with`` for AsyncRedlock):
        acquires on entry as ``acquire`` does (waiting up to ``wait``; with
        ``fence=True`` the fencing round too), starts the watchdog if asked
        (``True`` or a :class:`Watchdog`), registers ``on_lost``, and
        releases at the end of the block."""
        claims = one_claim(resource, mode, permits)
        args = (claims, False, seconds(ttl, "ttl"), fence, retry(wait, attempts, retry_delay))
        return self._context(args, watchdog_args(watchdog), on_lost)

    def lock_many(
        self,
        resources: Sequence[SetMember],
        *,
        ttl: Seconds,
        wait: Optional[Seconds] = None,
        fence: bool = False,
        watchdog: "bool | Watchdog" = False,
        on_lost: Optional[LostCallback] = None,
        attempts: Optional[int] = None,
        retry_delay: Optional[Tuple[Seconds, Seconds]] = None,
    ) -> ContextT:
        """:meth:`lock` for a set of resources, all or nothing (each a name
        or (name, mode), mode "plain", "read" or "write")."""
        args = (set_claims(resources), True, seconds(ttl, "ttl"), fence, retry(wait, attempts, retry_delay))
        return self._context(args, watchdog_args(watchdog), on_lost)


def connect_args(
    nodes: Any, connect_timeout: Seconds, command_timeout: Seconds, reconnect_backoff: Seconds, tls: Any
) -> tuple:
    if isinstance(nodes, str):
        raise TypeError("nodes must be a list of URLs (redis://host:port), not one str")
    return (
        [str(n) for n in nodes],
        seconds(connect_timeout, "connect_timeout"),
        seconds(command_timeout, "command_timeout"),
        seconds(reconnect_backoff, "reconnect_backoff"),
        tls_args(tls),
    )


def tls_args(tls: Any) -> Optional[tuple]:
    """The settings of a :class:`Tls` as the native client takes them."""
    if tls is None:
        return None
    if not isinstance(tls, Tls):
        raise TypeError(f"tls must be a redlock_client.Tls, not {type(tls).__name__}")
    path = lambda p: None if p is None else os.fspath(p)  # noqa: E731
    return (
        path(tls.ca_file),
        path(tls.ca_dir),
        path(tls.cert_file),
        path(tls.key_file),
        tls.server_name,
        bool(tls.insecure_skip_verify),
    )


def watchdog_args(watchdog: Any) -> Optional[Tuple[int, float]]:
    """The watchdog's bounds from ``watchdog=True`` / a :class:`Watchdog`."""
    if watchdog is None or watchdog is False:
        return None
    return watchdog_bounds(watchdog)


def watchdog_bounds(watchdog: Any) -> Tuple[int, float]:
    """The bounds of a :class:`Watchdog` (``True`` or None: the defaults)."""
    if watchdog is True or watchdog is None:
        watchdog = Watchdog()
    if not isinstance(watchdog, Watchdog):
        raise TypeError(f"watchdog must be a bool or a Watchdog, not {type(watchdog).__name__}")
    return (watchdog.renewals_max, seconds(watchdog.duration_max, "duration_max"))


class ContextBase:
    """What ``lock()`` returns: the acquire to run on entry and what to do
    with the lock then. One block at a time."""

    __slots__ = ("_client", "_args", "_watchdog", "_on_lost", "_lock")

    def __init__(self, client: Any, args: tuple, watchdog: Optional[Tuple[int, float]], on_lost: Any) -> None:
        self._client = client
        self._args = args
        self._watchdog = watchdog
        self._on_lost = on_lost
        self._lock: Any = None

    def _check_free(self) -> None:
        if self._lock is not None:
            raise RedlockError("this lock() context is already entered; use one lock() per block")


class LockBase:
    """The read-only side of a held lock: what it is and whether it is
    still held (no I/O)."""

    __slots__ = ("_held", "_client", "_lost")

    def __init__(self, held: _native.Held, client: ClientBase) -> None:
        self._held = held
        self._client = client
        self._lost: Any = None

    @property
    def resource(self) -> str:
        """The resource; for a set, the first one given."""
        return self._held.resource

    @property
    def resources(self) -> List[Tuple[str, str]]:
        """Every resource held, with its mode, in the order given."""
        return [(name, mode) for name, mode, _ in self._held.resources]

    @property
    def mode(self) -> str:
        """"plain", "read", "write" or "permit" (a set: its first)."""
        return self._held.resources[0][1]

    @property
    def permits(self) -> Optional[int]:
        """A semaphore's permit count (None for the other modes)."""
        return self._held.resources[0][2]

    @property
    def token(self) -> str:
        """The random 128-bit token (32 hex digits) the lock is held with:
        what ``release``/``extend`` by token take, from any process."""
        return self._held.token

    @property
    def status(self) -> str:
        """"held", "lost" (its validity ran out or a renewal failed),
        "released" or "detached"."""
        return self._held.status()[0]

    @property
    def is_held(self) -> bool:
        """True while held and within its validity."""
        return self._held.status()[0] == "held"

    @property
    def validity(self) -> float:
        """Seconds left before the lock may be someone else's (0 once lost
        or released). Measured from before the round that took or last
        renewed it, minus the clock-drift allowance."""
        return self._held.status()[1]

    @property
    def watchdog(self) -> str:
        """The watchdog: "off", "running", or "stopped" (at its bound)."""
        return self._held.status()[2]

    def _needs_release(self) -> bool:
        """Whether the end of a block must release it (not if it was
        released or detached already)."""
        return self.status not in ("released", "detached")

    def __repr__(self) -> str:
        status, validity, _ = self._held.status()
        claims = self._held.resources
        if len(claims) == 1:
            name, mode, permits = claims[0]
            what = f"{name!r} {mode}" + (f"/{permits}" if permits is not None else "")
        else:
            what = "{" + ", ".join(f"{name!r}: {mode}" for name, mode, _ in claims) + "}"
        return (
            f"<{type(self).__name__} {what} token={self.token} "
            f"fencing_token={self._held.fencing_token} {status} validity={validity:.3f}s>"
        )


def release_failed(failed: RedlockError, error: Optional[BaseException]) -> None:
    """A release at the end of a block failed: raise it, unless the block
    raised (that exception then carries it as a note)."""
    if error is None:
        raise failed
    if hasattr(error, "add_note"):
        error.add_note(f"releasing the lock failed too: {failed}")


class LostBase:
    """When a lock was lost, why, and who wants to know."""

    __slots__ = ("_error", "_callbacks")

    def __init__(self) -> None:
        self._error: Optional[LockLostError] = None
        self._callbacks: List[LostCallback] = []

    @property
    def error(self) -> Optional[LockLostError]:
        """The LockLostError once the lock is lost, else None."""
        return self._error

    @property
    def reason(self) -> Optional[str]:
        """"expired", "watchdog_limit" or "renewal_failed" once lost."""
        return None if self._error is None else self._error.reason

    def _record(self, error: LockLostError) -> List[LostCallback]:
        """Records the loss (once); returns the callbacks to call."""
        if self._error is not None:
            return []
        self._error = error
        callbacks, self._callbacks = self._callbacks, []
        return callbacks


def call_back(callback: LostCallback, error: LockLostError) -> Any:
    """Calls one loss callback; an exception in it is reported, not raised
    (the other callbacks still run)."""
    try:
        return callback(error)
    except Exception:
        print(f"redlock_client: exception in the lost-lock callback {callback!r}:", file=sys.stderr)
        traceback.print_exc()
        return None
