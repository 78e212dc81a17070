"use strict";
// A Redis Cluster (or Valkey Cluster) as a quorum member: 3 shards with the
// module on every node, spelled `redis+cluster://host:port?addr=host:port`.
// Locks taken, fenced, extended and released through it land on the master
// of each key's slot (read with the test kit's own RESP client); a set must
// share a slot. The cluster is this file's own, killed by PID at the end.

const assert = require("node:assert/strict");
const { after, before, test } = require("node:test");

const { RedisCluster, resourceName, serverName } = require("./nodes");
const { InvalidArgumentError, LockHeldError, Redlock } = require("./package");

let cluster;
let locks;

before(async () => {
  cluster = RedisCluster.start(3, 0);
  locks = await Redlock.connect([cluster.member]);
});

after(async () => {
  if (locks) await locks.close();
  if (cluster) cluster.close();
});

const T = { timeout: 120_000 };

/** A field of LOCK.INFO on `node`, or undefined when nothing is held there. */
async function field(node, key, name) {
  const info = await node.lockInfo(key);
  if (!Array.isArray(info)) return undefined;
  const at = info.indexOf(name);
  return at >= 0 ? info[at + 1] : undefined;
}

test(`server under test: ${serverName()}`, () => {});

test("a cluster member takes, fences, extends and releases on each key's master", T, async (t) => {
  const base = resourceName(t);
  const keys = [...Array.from({ length: 9 }, (_, i) => `${base}:${i}`), `{${base}}:a`, `{${base}}:b`];
  const masters = new Set();
  for (const key of keys) {
    const master = await cluster.masterOf(key);
    masters.add(master.port);
    const lock = await locks.tryAcquire(key, { ttl: 10_000 });
    assert.equal(await field(master, key, "holder"), lock.token, `${key} on ${master.port}`);
    for (const other of cluster.nodes.filter((n) => n !== master)) {
      await assert.rejects(other.call("EXISTS", key).then((r) => { if (r instanceof Error) throw r; }), /MOVED/);
    }
    const fence = await lock.fencingToken();
    assert.equal(typeof fence, "bigint");
    assert.ok(fence > 0n);
    assert.equal(BigInt(await field(master, key, "fence")), fence);
    const validity = await lock.extend(20_000);
    assert.ok(validity > 19_000 && validity <= 20_000, `validity ${validity}`);
    assert.ok((await field(master, key, "ttl-ms")) > 15_000);
    await assert.rejects(locks.tryAcquire(key, { ttl: 10_000 }), LockHeldError);
    const [info] = await locks.info(key);
    assert.equal(info.node, cluster.member);
    assert.equal(info.shard, `127.0.0.1:${master.port}`);
    assert.equal(info.info.holder, lock.token);
    const tally = await lock.release();
    assert.equal(tally.nodes, 1, "one member, one vote");
    assert.equal(tally.yes, 1);
    assert.equal(await field(master, key, "holder"), undefined);
  }
  assert.equal(masters.size, 3, "the keys reach every shard");

  // A set in one slot (a hash tag) is granted on its master; across slots
  // it is refused with the hash-tag advice.
  const tagged = [`{${base}}:x`, `{${base}}:y`];
  const set = await locks.tryAcquireMany(tagged, { ttl: 10_000 });
  const master = await cluster.masterOf(tagged[0]);
  assert.equal(await field(master, tagged[1], "holder"), set.token);
  assert.ok((await set.fencingToken()) > 0n);
  await set.release();
  assert.equal(await field(master, tagged[0], "holder"), undefined);
  await assert.rejects(
    locks.tryAcquireMany([`${base}:x`, `${base}:y`], { ttl: 10_000 }),
    (e) => e instanceof InvalidArgumentError && /different hash slots/.test(e.message),
  );
  await locks.settle();
});
