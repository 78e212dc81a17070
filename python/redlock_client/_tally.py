"""The per-node counts of a quorum round, apart from the other types so
that the exceptions (which carry one) and the types (which raise them) do
not import each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Tally:
    """The per-member counts of one quorum round (a member is one master or
    one cluster)."""

    #: Nodes the round went to.
    nodes: int
    #: Yes answers it needed (a majority, or a semaphore's larger quorum).
    need: int
    yes: int
    #: Held by another owner (grant rounds) or not holding (other rounds).
    no: int
    quarantined: int
    #: The longest quarantine left among the quarantined nodes, in seconds.
    quarantine_left: Optional[float]
    unreachable: int
    timed_out: int
    #: Nodes that answered with another error; the first one's text below.
    failed: int
    first_failure: Optional[str]
    #: Nodes whose answer was still in flight when the round was decided
    #: (they finish in the background; always 0 in an error's tally).
    pending: int
    #: Cluster members that could not route the call (``CLUSTERDOWN``, no
    #: master for the key's slot, too many redirects, no seed answering);
    #: why, for the first (it names the member).
    cluster_unavailable: int = 0
    first_cluster_unavailable: Optional[str] = None
    #: Why, for the first of the unreachable nodes (a refused connection, a
    #: TLS failure naming the node and its cause, ...).
    first_unreachable: Optional[str] = None

    @property
    def has_quorum(self) -> bool:
        return self.yes >= self.need

    @classmethod
    def _from_native(cls, t: tuple) -> "Tally":
        left_ms = t[5]
        quarantine_left = None if left_ms is None else left_ms / 1000.0
        unreachable, first_unreachable = t[6]
        cluster_unavailable, first_cluster_unavailable = t[11]
        return cls(
            t[0], t[1], t[2], t[3], t[4], quarantine_left, unreachable, *t[7:11],
            cluster_unavailable, first_cluster_unavailable, first_unreachable,
        )  # fmt: skip
