"use strict";
// status(): the quorum's health from INFO lock on real masters, as
// `redlock status` prints it: 5 masters that grant, one of them down, one
// in its start-up quarantine, a majority quarantined or unreachable. The
// servers are this file's own, killed by PID at the end.

const assert = require("node:assert/strict");
const { after, test } = require("node:test");

const { Cluster } = require("./nodes");
const { InvalidArgumentError, Redlock } = require("./package");

const T = { timeout: 60_000 };
const clusters = [];

after(() => clusters.forEach((c) => c.close()));

/** N masters whose start-up quarantine (the default length) is ended the one-shot way: every protection on. */
async function protectedMasters(n) {
  const cluster = await Cluster.start(n, ["quarantine-ms", "-1"]);
  clusters.push(cluster);
  for (const server of cluster.servers) assert.equal(typeof (await server.call("LOCK.UNQUARANTINE", "STARTUP")), "number");
  return cluster;
}

/** N masters just started with a 30 s start-up quarantine. */
async function quarantinedMasters(n) {
  const cluster = await Cluster.start(n, ["quarantine-ms", "30000"]);
  clusters.push(cluster);
  return cluster;
}

async function statusOf(urls) {
  const redlock = await Redlock.connect(urls);
  try {
    return await redlock.status();
  } finally {
    await redlock.close();
  }
}

test("5 masters that grant, then one of them down", T, async () => {
  const cluster = await protectedMasters(5);
  const redlock = await Redlock.connect(cluster.urls);
  try {
    const ok = await redlock.status();
    assert.equal(ok.summary, "a majority can grant now: 5 of 5 members grant (need 3)");
    assert.deepEqual([ok.need, ok.granting, ok.grants, ok.cause, ok.readyIn], [3, 5, true, null, null]);
    assert.deepEqual(ok.differences, {});
    assert.deepEqual(ok.protectionsOff, {});
    assert.deepEqual(ok.members.map((m) => m.member), redlock.nodes);
    for (const member of ok.members) {
      assert.equal(member.grants, true);
      assert.equal(member.nodes.length, 1);
      const [node] = member.nodes;
      assert.deepEqual([node.blocked, node.why], [null, null]);
      assert.equal(node.health.quarantine, null);
      assert.equal(node.health.evictingPolicy, null);
      assert.deepEqual(node.health.protectionsOff, []);
      assert.equal(node.health.settings.max_ttl_ms, "30000");
      assert.equal(typeof node.health.fencingCounter, "bigint");
      assert.ok(Object.isFrozen(node.health));
    }
    // A grant moves the fencing counter of the nodes that granted.
    const before = ok.members.map((m) => m.nodes[0].health.fencingCounter);
    const lock = await redlock.tryAcquire("status:counter", { ttl: 5_000, fence: true });
    const during = await redlock.status();
    await lock.release();
    const rose = during.members.filter((m, i) => m.nodes[0].health.fencingCounter > before[i]).length;
    assert.ok(rose >= 3, `the fencing counter rose on ${rose} nodes, a majority at least`);

    cluster.servers[1].kill();
    const oneDown = await redlock.status();
    assert.deepEqual([oneDown.granting, oneDown.grants, oneDown.cause], [4, true, null]);
    assert.equal(oneDown.summary, "a majority can grant now: 4 of 5 members grant (need 3)");
    const down = oneDown.members[1];
    assert.equal(down.grants, false);
    assert.equal(down.nodes[0].health, null);
    assert.equal(down.nodes[0].blocked, "unreachable");
    assert.ok(down.nodes[0].why.length > 0);
    assert.deepEqual(oneDown.members.filter((m) => m.grants).length, 4);

    cluster.servers[2].kill();
    cluster.servers[3].kill();
    const most = await redlock.status();
    assert.deepEqual([most.granting, most.grants, most.cause, most.readyIn], [2, false, "unreachable", null]);
    assert.match(most.summary, /^no majority can grant now: 2 of 5 members grant \(need 3\); 3 unreachable/);
  } finally {
    await redlock.close();
  }
});

test("one master in its start-up quarantine, and the setting that differs", T, async () => {
  const granting = await protectedMasters(4);
  const quarantined = await quarantinedMasters(1);
  const status = await statusOf([...granting.urls, ...quarantined.urls]);
  assert.deepEqual([status.need, status.granting, status.grants, status.cause], [3, 4, true, null]);
  const node = status.members[4].nodes[0];
  assert.equal(node.blocked, "quarantined");
  assert.match(node.why, /^startup quarantine, \d+ ms left$/);
  assert.equal(node.health.quarantine.reason, "startup");
  assert.ok(node.health.quarantine.left > 20_000 && node.health.quarantine.left <= 30_000, `${node.health.quarantine.left} ms left`);
  assert.deepEqual(status.differences, {
    "lock.quarantine-ms": { "-1": granting.urls, 30000: quarantined.urls },
  });
  assert.deepEqual(status.protectionsOff, {});
});

test("a quarantined majority: when it can grant again", T, async () => {
  const granting = await protectedMasters(2);
  const quarantined = await quarantinedMasters(3);
  const status = await statusOf([...granting.urls, ...quarantined.urls]);
  assert.deepEqual([status.granting, status.grants, status.cause], [2, false, "quarantined"]);
  assert.ok(status.readyIn > 20_000 && status.readyIn <= 30_000, `ready in ${status.readyIn} ms`);
  assert.match(status.summary, /3 quarantined; a majority can grant in \d+ ms, when enough quarantines end$/);
});

test("nodes without a quarantine say that a protection is off", T, async () => {
  // The test kit's default: quarantine-ms 0, the protection off for good.
  const off = await Cluster.start(3);
  clusters.push(off);
  const status = await statusOf(off.urls);
  assert.equal(status.grants, true);
  // quarantine-ms 0 turns off the failover quarantine as well.
  assert.deepEqual(status.protectionsOff, { "failover-quarantine": off.urls, "startup-quarantine": off.urls });
  assert.deepEqual(status.members[0].nodes[0].health.protectionsOff, ["startup-quarantine", "failover-quarantine"]);
});

test("status() of a closed client is refused", T, async () => {
  const cluster = await protectedMasters(1);
  const redlock = await Redlock.connect(cluster.urls);
  await redlock.close();
  await assert.rejects(redlock.status(), InvalidArgumentError);
});
