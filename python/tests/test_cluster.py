"""A cluster as a quorum member, sync and asyncio: a real Redis Cluster (or
Valkey Cluster) of 3 shards with a replica each, the module on every node,
spelled ``redis+cluster://host:port?addr=host:port``; the nodes' own view is
read with a separate RESP client."""

from __future__ import annotations

import asyncio

import pytest
from nodes import Cluster, RedisCluster

from redlock_client import AsyncRedlock, InvalidArgumentError, NodesUnreachableError, QuorumStatus, Redlock


def test_a_cluster_member_takes_fences_extends_and_releases(redis_cluster: RedisCluster, resource: str) -> None:
    locks = Redlock([redis_cluster.member])
    with locks.lock(resource, ttl=10.0) as lock:
        master = redis_cluster.master_of(resource)
        assert redis_cluster.holder(resource) == lock.token
        assert lock.fencing_token > 0
        assert 19.0 < lock.extend(20.0) <= 20.0
        [info] = locks.info(resource)
        assert info.node == redis_cluster.member and info.shard == f"127.0.0.1:{master.port}"
        assert info.info is not None and info.info.holder == lock.token
    assert redis_cluster.holder(resource) is None
    # Keys spread over every shard, and a hash tag.
    for key in [f"{resource}:{i}" for i in range(12)] + ["{%s}:a" % resource]:
        with locks.lock(key, ttl=5.0) as lock:
            assert redis_cluster.holder(key) == lock.token
    locks.settle()


def test_asyncio_through_a_cluster_member(redis_cluster: RedisCluster, resource: str) -> None:
    async def main() -> None:
        locks = await AsyncRedlock.connect([redis_cluster.member])
        async with locks.lock(resource, ttl=10.0) as lock:
            assert redis_cluster.holder(resource) == lock.token
            assert await lock.fence() > 0
            await lock.extend(15.0)
        assert redis_cluster.holder(resource) is None
        await locks.settle()

    asyncio.run(main())


def test_a_set_across_slots_is_refused_with_the_hash_tag_advice(redis_cluster: RedisCluster, resource: str) -> None:
    locks = Redlock([redis_cluster.member])
    with pytest.raises(InvalidArgumentError, match=r"different hash slots.*\{orders\}:1 and \{orders\}:2"):
        locks.try_acquire_many([f"{resource}:1", f"{resource}:2"], ttl=5.0)
    tagged = ["{%s}:1" % resource, ("{%s}:2" % resource, "read")]
    with locks.lock_many(tagged, ttl=5.0) as lock:
        assert redis_cluster.holder("{%s}:1" % resource) == lock.token
        assert lock.fencing_token > 0
    assert redis_cluster.holder("{%s}:1" % resource) is None
    locks.settle()


def test_masters_and_a_cluster_in_one_quorum(redis_cluster: RedisCluster, own_cluster: Cluster, resource: str) -> None:
    members = [own_cluster[0].url, redis_cluster.member, own_cluster[1].url]
    locks = Redlock(members)
    assert locks.nodes == members
    own_cluster[1].kill()
    with locks.lock(resource, ttl=5.0) as lock:
        assert redis_cluster.holder(resource) == lock.token
        assert own_cluster[0].lock_info(resource) is not None
    own_cluster[0].kill()
    with pytest.raises(NodesUnreachableError, match=r"1 of 3 granted \(need 2\); 2 unreachable"):
        locks.try_acquire(resource, ttl=5.0)
    locks.settle()


def test_bad_cluster_spellings_say_what_to_write() -> None:
    for member, says in [
        ("redis+cluster://127.0.0.1:1/3", "a cluster has database 0 only"),
        ("redis+cluster://127.0.0.1:1?seed=h:2", "only addr=host:port"),
    ]:
        with pytest.raises(InvalidArgumentError, match=says):
            Redlock([member])


def test_status_asks_every_shard_master(request: pytest.FixtureRequest) -> None:
    # No replica: a killed master stays down; the other shards keep serving.
    redis_cluster = RedisCluster(3, 0, args=["--cluster-require-full-coverage", "no"], node_timeout_ms=1500)
    request.addfinalizer(redis_cluster.close)
    masters = redis_cluster.cluster.masters
    locks = Redlock([redis_cluster.member])
    status = locks.status()
    [member] = status.members
    assert sorted(n.node for n in member.nodes) == sorted(f"127.0.0.1:{m.port}" for m in masters)
    assert member.grants and not member.grants_some_slots
    assert (status.granting, status.grants) == (1, True)
    assert status.protections_off["startup-quarantine"] == [n.node for n in member.nodes]

    victim = masters[2]
    victim.kill()

    async def after_the_kill() -> QuorumStatus:
        return await (await AsyncRedlock.connect([redis_cluster.member])).status()

    for status in (locks.status(), asyncio.run(after_the_kill())):
        [member] = status.members
        assert not member.grants and member.grants_some_slots, member
        assert (status.granting, status.grants, status.cause) == (0, False, "unreachable")
        granting = sorted(n.node for n in member.nodes if n.blocked is None)
        assert granting == sorted(f"127.0.0.1:{m.port}" for m in masters[:2])
        # The killed master (or, once the cluster marked it failed, its
        # slots with no master) is the one that cannot grant.
        [down] = [n for n in member.nodes if n.blocked is not None]
        assert down.blocked == "unreachable"
        assert down.node == f"127.0.0.1:{victim.port}" or "no master serves" in (down.why or ""), down
        assert "1 more grants the keys of some shards only" in status.summary, status.summary

    gone = f"redis+cluster://127.0.0.1:{victim.port}"
    [member] = Redlock([gone]).status().members
    [node] = member.nodes
    assert (node.node, node.blocked) == (gone, "unreachable")
    assert node.why is not None and f"member 1 ({gone})" in node.why, node.why
    locks.settle()
