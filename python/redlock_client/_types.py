"""Plain values of the API: modes, durations, tallies, node reports."""

from __future__ import annotations

import datetime
import enum
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ._tally import Tally

try:
    from typing import Literal
except ImportError:  # pragma: no cover
    from typing_extensions import Literal  # type: ignore


class Mode(str, enum.Enum):
    """What a grant asks the nodes for. Plain strings work too: "plain",
    "read", "write" or "permit" ("write" sends the module's
    ``LOCK.EXCLUSIVE``)."""

    #: The plain lock (``LOCK.ACQUIRE``): one holder.
    PLAIN = "plain"
    #: A read hold of a read-write lock (``LOCK.SHARED``): many readers.
    READ = "read"
    #: A write hold of a read-write lock (``LOCK.EXCLUSIVE``): alone.
    WRITE = "write"
    #: One of ``permits`` permits of a semaphore (``LOCK.SEMAPHORE``).
    PERMIT = "permit"

    def __str__(self) -> str:
        return self.value


ModeName = Literal["plain", "read", "write", "permit"]
#: A mode as a :class:`Mode` or its name.
ModeLike = Union[Mode, ModeName]
#: A duration: seconds (int or float) or a ``datetime.timedelta``.
Seconds = Union[float, int, datetime.timedelta]
#: One member of a set: a resource (plain) or (resource, mode).
SetMember = Union[str, Tuple[str, ModeLike]]


@dataclass(frozen=True)
class Watchdog:
    """Bounds of the automatic renewal (every ttl/3): it stops after
    ``renewals_max`` renewals or ``duration_max`` seconds, whichever comes
    first; the lock then runs out at the end of its last validity and
    ``lock.lost`` fires with reason "watchdog_limit"."""

    renewals_max: int = 10_000
    duration_max: Seconds = 3600.0


@dataclass(frozen=True)
class Tls:
    """How the ``rediss://`` members (and every node of a
    ``rediss+cluster://`` member) are spoken to: the settings of the Rust
    client's ``Tls``, by the same names (the client's README, "TLS").
    The default: the system's trusted CAs, no client certificate, each
    node's certificate checked for the host its URL names.

    ``ca_file`` / ``ca_dir``: PEM CA certificates to trust instead of the
    system's (a file; a directory's ``*.pem`` and ``*.crt`` files).
    ``cert_file`` and ``key_file``: this client's certificate and key (PEM),
    for nodes that require one (``tls-auth-clients yes``: mutual TLS).
    ``server_name``: the name every node's certificate must hold, instead
    of the host in its URL. ``insecure_skip_verify``: accept any
    certificate for any name (encrypted, but anyone on the path can pose
    as a node): for tests only."""

    ca_file: Optional[Union[str, os.PathLike]] = None
    ca_dir: Optional[Union[str, os.PathLike]] = None
    cert_file: Optional[Union[str, os.PathLike]] = None
    key_file: Optional[Union[str, os.PathLike]] = None
    server_name: Optional[str] = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True)
class HolderInfo:
    """One holder of a read-write lock or semaphore on one node."""

    holder: str
    #: "read", "write" or "permit".
    mode: str
    fence: int
    #: Seconds left on that node.
    ttl: float
    #: The node's deadline, epoch milliseconds of its wall clock.
    deadline_ms: int


@dataclass(frozen=True)
class LockInfo:
    """``LOCK.INFO`` of one node. A plain or reentrant lock fills
    ``holder``, ``fence``, ``ttl`` and ``deadline_ms``; a read-write lock
    (kind "shared") or semaphore lists its ``holders`` instead."""

    kind: str
    holder: str
    holds: int
    fence: int
    ttl: float
    deadline_ms: int
    waiters: int
    permits: Optional[int]
    holders: List[HolderInfo] = field(default_factory=list)


@dataclass(frozen=True)
class NodeInfo:
    """One member's answer to ``info``: ``info`` is None when no lock is held
    there; ``error`` says why there is no answer. For a cluster member,
    ``shard`` is the address (``host:port``) of the master that answered."""

    node: str
    info: Optional[LockInfo]
    error: Optional[str]
    shard: Optional[str] = None


@dataclass(frozen=True)
class NodeHealth:
    """What a reachable node with the module says of itself (``INFO
    lock``)."""

    #: ``(reason, seconds left)`` of its start-up or promotion quarantine,
    #: or None.
    quarantine: Optional[Tuple[str, float]]
    #: The ``maxmemory-policy`` that can evict lock keys, or None.
    evicting_policy: Optional[str]
    #: ``lock.eviction-mode``: "refuse" or "quarantine".
    eviction_mode: str
    fencing_counter: int
    #: Protections its settings turn off, e.g. ["startup-quarantine"].
    protections_off: List[str]
    quarantined_keys: int
    quarantined_dbs: int
    #: Wall clock minus module clock, ms: non-zero after a clock jump.
    wall_clock_offset_ms: int
    #: The settings in force: {"max_ttl_ms": "30000", ...}.
    settings: Dict[str, str]


@dataclass(frozen=True)
class NodeStatus:
    """One node of a quorum member: its health, and ``blocked`` (why it
    cannot grant now: "unreachable", "no-module", "quarantined",
    "evicting" or "error") with ``why``, both None when it can."""

    node: str
    health: Optional[NodeHealth]
    blocked: Optional[str]
    why: Optional[str]


@dataclass(frozen=True)
class MemberStatus:
    """One quorum member (one vote): one master, with one node, or one
    cluster, with a node per shard master (and a row for slots that no
    master serves; one row that says why when no seed answers)."""

    member: str
    nodes: List[NodeStatus]

    @property
    def grants(self) -> bool:
        """Whether every node of the member can grant now (a cluster: every
        shard, so any key gets its vote)."""
        return all(n.blocked is None for n in self.nodes)

    @property
    def grants_some_slots(self) -> bool:
        """A cluster some but not all of whose shards grant: the keys of
        those shards' slots get its vote, the others' do not. Such a member
        is not counted in :attr:`QuorumStatus.granting`."""
        granting = sum(n.blocked is None for n in self.nodes)
        return 0 < granting < len(self.nodes)


@dataclass(frozen=True)
class QuorumStatus:
    """``status()``: every member's health, and whether a majority can
    grant right now. ``cause`` names the kind of refusal that alone keeps
    the majority from granting (None when it grants, or when the causes
    are mixed); ``ready_in``: seconds until enough quarantines end."""

    members: List[MemberStatus]
    need: int
    granting: int
    grants: bool
    cause: Optional[str]
    ready_in: Optional[float]
    #: The verdict in one line, as ``redlock status`` prints it.
    summary: str
    #: {setting: {value: [nodes]}} for settings that differ between nodes.
    differences: Dict[str, Dict[str, List[str]]]
    #: {protection: [nodes]} for protections some node has off.
    protections_off: Dict[str, List[str]]


@dataclass(frozen=True)
class Entered:
    """A reentrant hold (``enter``): its fencing token and the validity
    left, in seconds, when it was granted."""

    fencing_token: int
    validity: float


@dataclass(frozen=True)
class Detached:
    """What is left of a lock after ``detach()``: it stays held until its
    TTL runs out or someone releases it with the token."""

    resource: str
    resources: List[Tuple[str, str]]
    token: str
    fencing_token: Optional[int]
    #: Seconds of validity left when it was detached.
    validity: float


def seconds(value: Seconds, what: str) -> float:
    """A duration argument as float seconds (checked: finite, not negative)."""
    from .errors import _invalid

    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be seconds (int or float) or a datetime.timedelta, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise _invalid(f"{what} must be a finite number of seconds, at least 0; got {value}")
    return value


def mode_name(mode: ModeLike) -> str:
    if isinstance(mode, Mode):
        return mode.value
    if isinstance(mode, str):
        return mode
    raise TypeError(f"mode must be a Mode or one of 'plain', 'read', 'write', 'permit', not {type(mode).__name__}")


def permit_count(permits: Optional[int]) -> Optional[int]:
    from .errors import _invalid

    if permits is None:
        return None
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise TypeError(f"permits must be an int, not {type(permits).__name__}")
    if not 1 <= permits <= 0xFFFF_FFFF:
        raise _invalid(f"permits must be at least 1, got {permits}")
    return permits


def name(value: str, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def one_claim(resource: str, mode: ModeLike, permits: Optional[int]) -> List[Tuple[str, str, Optional[int]]]:
    return [(name(resource, "resource"), mode_name(mode), permit_count(permits))]


def set_claims(resources: Sequence[SetMember]) -> List[Tuple[str, str, Optional[int]]]:
    if isinstance(resources, str):
        raise TypeError("resources must be a sequence of resources (a str is one resource: use lock())")
    claims: List[Tuple[str, str, Optional[int]]] = []
    for member in resources:
        if isinstance(member, str):
            claims.append((member, "plain", None))
        elif isinstance(member, tuple) and len(member) == 2:
            claims.append((name(member[0], "resource"), mode_name(member[1]), None))
        else:
            raise TypeError(f"a set member is a resource or (resource, mode), not {member!r}")
    return claims


def resource_names(resources: Sequence[str]) -> List[str]:
    if isinstance(resources, str):
        raise TypeError("resources must be a sequence of resources, not a str")
    return [name(r, "resource") for r in resources]


def retry(wait: Optional[Seconds], attempts: Optional[int], retry_delay: Optional[Tuple[Seconds, Seconds]]) -> tuple:
    """An acquire's retry policy as the extension takes it."""
    delays = None
    if retry_delay is not None:
        low, high = retry_delay
        delays = (seconds(low, "retry_delay"), seconds(high, "retry_delay"))
    if attempts is not None:
        from .errors import _invalid

        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise TypeError(f"attempts must be an int, not {type(attempts).__name__}")
        if not 1 <= attempts <= 0xFFFF_FFFF:
            raise _invalid(f"attempts must be at least 1, got {attempts}")
    return (None if wait is None else seconds(wait, "wait"), attempts, delays)


def tally(t: tuple) -> Tally:
    return Tally._from_native(t)


def node_infos(rows: list) -> List[NodeInfo]:
    out = []
    for node, shard, row, error in rows:
        info = None
        if row is not None:
            kind, holder, holds, fence, ttl_ms, deadline_ms, waiters, permits, holders = row
            info = LockInfo(
                kind,
                holder,
                holds,
                fence,
                ttl_ms / 1000.0,
                deadline_ms,
                waiters,
                permits,
                [HolderInfo(h, m, f, t / 1000.0, d) for h, m, f, t, d in holders],
            )
        out.append(NodeInfo(node, info, error, shard))
    return out


def quorum_status(row: tuple) -> QuorumStatus:
    members_row, need, granting, grants, cause, ready_in_ms, summary, differences, off = row
    members = []
    for member, nodes in members_row:
        out = []
        for node, health, blocked in nodes:
            h = None
            if health is not None:
                quarantine, policy, mode, counter, protections, keys, dbs, offset, settings = health
                h = NodeHealth(
                    None if quarantine is None else (quarantine[0], quarantine[1] / 1000.0),
                    policy,
                    mode,
                    counter,
                    list(protections),
                    keys,
                    dbs,
                    offset,
                    dict(settings),
                )
            kind, why = blocked if blocked is not None else (None, None)
            out.append(NodeStatus(node, h, kind, why))
        members.append(MemberStatus(member, out))
    return QuorumStatus(
        members,
        need,
        granting,
        grants,
        cause,
        None if ready_in_ms is None else ready_in_ms / 1000.0,
        summary,
        {setting: {value: list(nodes) for value, nodes in values} for setting, values in differences},
        {protection: list(nodes) for protection, nodes in off},
    )
