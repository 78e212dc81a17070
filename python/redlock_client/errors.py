"""The exceptions of ``redlock_client``: one per error of the Rust client.

::

    RedlockError
    ├── LockHeldError          another owner holds it (retryable)
    ├── NoQuorumError          too few nodes said yes (retryable); the counts are in .tally
    │   ├── QuarantinedError       ... because nodes are in their restart quarantine
    │   └── NodesUnreachableError  ... because nodes did not answer (also a ConnectionError)
    ├── ExpiredBeforeUseError  granted, but the rounds ate the whole TTL (retryable)
    ├── LockLostError          the lock is lost (.reason; a failed renewal is the __cause__)
    └── InvalidArgumentError   a caller mistake (also a ValueError), or a request the nodes refuse

The messages are the Rust client's own, with the per-node counts, e.g.
``no quorum for 'orders:42': 2 of 5 granted (need 3); 3 unreachable``.
"""

from __future__ import annotations

from typing import Optional

from ._tally import Tally

__all__ = [
    "RedlockError",
    "LockHeldError",
    "NoQuorumError",
    "QuarantinedError",
    "NodesUnreachableError",
    "ExpiredBeforeUseError",
    "LockLostError",
    "InvalidArgumentError",
]


class RedlockError(Exception):
    """Base class of every error of this package.

    Attributes: ``resource`` (the resource, or ``'{a, b}'`` for a set; None
    when the error is not about one), ``phase`` (the quorum round: "acquire",
    "fence", "extend", "release", "enter", "exit"; None when not from a
    round), ``tally`` (the round's per-node counts, a :class:`Tally`, when a
    round failed), ``reason`` (for :class:`LockLostError`).
    """

    #: Whether a later attempt may succeed (the client's ``is_retryable``).
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        resource: Optional[str] = None,
        phase: Optional[str] = None,
        tally: Optional[Tally] = None,
        reason: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.resource = resource
        self.phase = phase
        self.tally = tally
        self.reason = reason


class LockHeldError(RedlockError):
    """Another owner holds the lock (on a majority, or on every node that
    did not grant). Retrying later may succeed."""

    retryable = True


class NoQuorumError(RedlockError):
    """Fewer nodes than the quorum said yes in a round, for reasons other
    than (only) another holder: nodes unreachable, timing out, quarantined,
    or answering errors. ``tally`` has the counts, the message too."""

    retryable = True


class QuarantinedError(NoQuorumError):
    """No quorum because nodes refuse new grants during their restart (or
    promotion) quarantine: without the quarantined nodes' refusals the round
    would have had its quorum. ``tally.quarantine_left`` is the longest time
    left, in seconds."""


class NodesUnreachableError(NoQuorumError, ConnectionError):
    """No quorum because nodes could not be reached or did not answer in
    time: without them the round would have had its quorum."""


class ExpiredBeforeUseError(RedlockError):
    """A quorum granted, but the rounds took so long that no validity was
    left; the grants were released."""

    retryable = True


class LockLostError(RedlockError):
    """The lock is lost: do not touch the protected resource any more.

    ``reason``: "expired" (its validity ran out without a renewal),
    "watchdog_limit" (the watchdog reached its bound, then the validity ran
    out), or "renewal_failed" (a renewal was not confirmed by the quorum;
    that error is the ``__cause__``)."""


class InvalidArgumentError(RedlockError, ValueError):
    """A caller mistake: an empty resource, a bad TTL or mode, a bad node
    URL, a lock used after its release, ...; or a request so many nodes
    refuse that no quorum can grant it (a TTL above their lock.max-ttl-ms,
    a key that is not a lock, the module not loaded): raised at the first
    attempt, whatever the wait, with ``resource``, ``phase`` and ``tally``."""


_KINDS = {
    "held": LockHeldError,
    "expired_before_use": ExpiredBeforeUseError,
    "lost": LockLostError,
    "invalid_argument": InvalidArgumentError,
    "usage": RedlockError,
}


def _no_quorum_class(tally: Optional[Tally]) -> type:
    """The most specific class for a round short of its quorum: the nodes
    whose answers made the difference."""
    if tally is not None:
        if tally.quarantined and tally.yes + tally.quarantined >= tally.need:
            return QuarantinedError
        silent = tally.unreachable + tally.timed_out + tally.cluster_unavailable
        if silent and tally.yes + silent >= tally.need:
            return NodesUnreachableError
    return NoQuorumError


def _from_native(
    kind: str,
    message: str,
    resource: Optional[str],
    phase: Optional[str],
    tally: Optional[tuple],
    reason: Optional[str],
    cause: Optional[BaseException],
) -> RedlockError:
    """Builds the exception for an error of the Rust client (called by the
    extension module)."""
    counts = Tally._from_native(tally) if tally is not None else None
    if kind == "no_quorum":
        cls = _no_quorum_class(counts)
    else:
        cls = _KINDS.get(kind, RedlockError)
    error = cls(message, resource=resource, phase=phase, tally=counts, reason=reason)
    if cause is not None:
        error.__cause__ = cause
    return error


def _invalid(message: str) -> InvalidArgumentError:
    """An InvalidArgumentError raised by the Python layer, worded as the
    Rust client words its own."""
    return InvalidArgumentError(f"invalid argument: {message}")
