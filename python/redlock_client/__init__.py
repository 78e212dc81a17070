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
]
__all__ += errors.__all__

__version__ = "0.1.0"

# No thread of the runtime calls into Python once the interpreter exits.
_atexit.register(_native.shutdown)
