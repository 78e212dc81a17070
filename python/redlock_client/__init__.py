"""A quorum (Redlock) client for the redis-lock module, over the Rust
client ``redlock_client`` (crate ``redlock-client``).

Every decision (the majority, validity, the clock-free fencing round, the
semaphore quorum, ordered release, the watchdog and its loss report) is the
Rust client's; this package converts types, errors and time, and releases
the GIL while it waits on the network.

::

    from redlock_client import Redlock

    locks = Redlock(["redis://a:6379", "redis://b:6379", "redis://c:6379"])
    with locks.lock("orders:42", ttl=10.0, wait=5.0) as lock:
        store.write(data, fence=lock.fencing_token)

:class:`Redlock` blocks (the GIL released); :class:`AsyncRedlock` is the
asyncio twin. Errors are in :mod:`redlock_client.errors`.
"""

import atexit as _atexit
from typing import Tuple as _Tuple

from . import _native, errors
from ._async import AsyncLock, AsyncLockContext, AsyncLostEvent, AsyncRedlock
from ._sync import Lock, LockContext, LostEvent, Redlock
from ._types import (
    Detached,
    Entered,
    HolderInfo,
    LockInfo,
    MemberStatus,
    Mode,
    NodeHealth,
    NodeInfo,
    NodeStatus,
    QuorumStatus,
    Tally,
    Watchdog,
)
from ._types import name as _name
from .errors import _invalid
from .errors import (
    ExpiredBeforeUseError,
    InvalidArgumentError,
    LockHeldError,
    LockLostError,
    NodesUnreachableError,
    NoQuorumError,
    QuarantinedError,
    RedlockError,
)

__all__ = [
    "Redlock",
    "Lock",
    "LockContext",
    "LostEvent",
    "AsyncRedlock",
    "AsyncLock",
    "AsyncLockContext",
    "AsyncLostEvent",
    "Mode",
    "Watchdog",
    "Tally",
    "NodeInfo",
    "LockInfo",
    "HolderInfo",
    "QuorumStatus",
    "MemberStatus",
    "NodeStatus",
    "NodeHealth",
    "Entered",
    "Detached",
    "freed_channel",
]
__all__ += errors.__all__

# The workspace version (Cargo.toml), compiled into the extension: the
# wheel's own version too (pyproject.toml takes it from Cargo.toml).
__version__: str = _native.__version__


def freed_channel(resource: str, *, cluster: bool = False, db: int = 0) -> _Tuple[str, str]:
    """The pub/sub channel on which the lock module announces that
    ``resource``'s lock was freed (the message ``released`` or
    ``expired``), and the command to subscribe with, for code that waits
    in its own event loop: ``("__lock@0__:job", "SUBSCRIBE")`` on a single
    master; with ``cluster=True`` (a cluster member) ``("__lock@0__:{job}",
    "SSUBSCRIBE")``, sent to a node of the shard that serves the resource.
    ``db`` is the database the resource's locks are in."""
    if not isinstance(cluster, bool):
        raise TypeError(f"cluster must be a bool, not {type(cluster).__name__}")
    if isinstance(db, bool) or not isinstance(db, int):
        raise TypeError(f"db must be an int, not {type(db).__name__}")
    if not 0 <= db <= 0x7FFF_FFFF:
        raise _invalid(f"db must be between 0 and {0x7FFF_FFFF}, got {db}")
    return _native.freed_channel(_name(resource, "resource"), cluster, db)


# No thread of the runtime calls into Python once the interpreter exits.
_atexit.register(_native.shutdown)
