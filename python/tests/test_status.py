"""``status()`` (sync and asyncio): the quorum's health from ``INFO lock``
on real nodes, as ``redlock status`` prints it."""

from __future__ import annotations

import asyncio

import pytest
from nodes import Cluster

from redlock_client import AsyncRedlock, QuorumStatus, Redlock


def test_status_names_a_quarantined_node_and_what_differs(request: pytest.FixtureRequest) -> None:
    # Two nodes with the default quarantine, ended the one-shot way (every
    # protection on); one just started with a 30 s quarantine.
    protected = Cluster(2, module_args=["quarantine-ms", "-1"])
    request.addfinalizer(protected.close)
    for node in protected.servers:
        assert isinstance(node.call("LOCK.UNQUARANTINE", "STARTUP"), int)
    quarantined = Cluster(1, module_args=["quarantine-ms", "30000"])
    request.addfinalizer(quarantined.close)
    status = Redlock(protected.urls + quarantined.urls).status()
    assert isinstance(status, QuorumStatus)
    assert (status.need, status.granting, status.grants, status.cause) == (2, 2, True, None)
    assert status.summary == "a majority can grant now: 2 of 3 members grant (need 2)"
    first, _, last = status.members
    assert first.grants and first.nodes[0].health is not None
    assert first.nodes[0].health.protections_off == []
    assert first.nodes[0].health.settings["max_ttl_ms"] == "30000"
    node = last.nodes[0]
    assert not last.grants and node.blocked == "quarantined"
    assert node.health is not None and node.health.quarantine is not None
    reason, left = node.health.quarantine
    assert reason == "startup" and 20.0 < left <= 30.0
    assert status.differences == {
        "lock.quarantine-ms": {"-1": protected.urls, "30000": quarantined.urls},
    }
    assert status.protections_off == {}


def test_async_status_with_most_nodes_down(own_cluster: Cluster) -> None:
    for node in own_cluster.servers[2:]:
        node.kill()

    async def main() -> QuorumStatus:
        return await AsyncRedlock(own_cluster.urls).status()

    status = asyncio.run(main())
    assert (status.granting, status.grants, status.cause) == (2, False, "unreachable")
    assert [m.nodes[0].blocked for m in status.members] == [None, None, "unreachable", "unreachable", "unreachable"]
    assert status.summary.startswith("no majority can grant now: 2 of 5 members grant (need 3); 3 unreachable")
    # The test nodes run without a quarantine (quarantine-ms 0): said so.
    assert status.protections_off["startup-quarantine"] == own_cluster.urls[:2]
