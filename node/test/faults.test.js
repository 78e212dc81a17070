"use strict";
// Faults on real masters: nodes killed (a minority, then a majority),
// paused, quarantined; the AbortSignal of a held lock; release never
// leaving a lock behind. Each test has 5 masters of its own, killed by PID
// at its end whatever the outcome.

const assert = require("node:assert/strict");
const { test } = require("node:test");

const { Cluster, aborted, resourceName } = require("./nodes");
const { LockLostError, NodesUnreachableError, NoQuorumError, QuarantinedError, Redlock } = require("./package");

const T = { timeout: 60_000 };

/** Runs `body(cluster)` on 5 masters of its own, closed whatever happens. */
async function withCluster(body, moduleArgs = []) {
  const cluster = await Cluster.start(5, moduleArgs);
  try {
    return await body(cluster);
  } finally {
    cluster.close();
  }
}

const nothingOn = (cluster, resource) => cluster.lockInfos(resource).then((infos) => infos.every((i) => i === null));

test("with 2 of 5 nodes killed the lock still works; a 2-permit semaphore needs 4", T, (t) =>
  withCluster(async (cluster) => {
    const resource = resourceName(t);
    const locks = await Redlock.connect(cluster.urls);
    cluster.servers[0].kill();
    cluster.servers[3].kill();
    const lock = await locks.tryAcquire(resource, { ttl: 5_000 });
    assert.equal(typeof (await lock.fencingToken()), "bigint");
    assert.ok((await lock.extend(8_000)) > 7_000);
    assert.equal((await lock.release()).yes, 3);
    const error = await locks.tryAcquire(resource, { ttl: 5_000, mode: "permit", permits: 2 }).catch((e) => e);
    assert.ok(error instanceof NodesUnreachableError, String(error));
    assert.match(error.message, /3 of 5 granted \(need 4 for a 2-permit semaphore\); 2 unreachable/);
    await locks.close();
  }),
);

test("with 3 of 5 nodes killed: a clear error at once, and nothing left on the survivors", T, (t) =>
  withCluster(async (cluster) => {
    const resource = resourceName(t);
    const locks = await Redlock.connect(cluster.urls);
    for (const i of [1, 2, 4]) cluster.servers[i].kill();
    const started = Date.now();
    const error = await locks.tryAcquire(resource, { ttl: 5_000 }).catch((e) => e);
    const took = Date.now() - started;
    assert.ok(error instanceof NodesUnreachableError, String(error));
    assert.ok(error instanceof NoQuorumError && error.retryable);
    assert.ok(error.message.startsWith(`no quorum for '${resource}': 2 of 5 granted (need 3); 3 unreachable (first: `), error.message);
    assert.equal(error.resource, resource);
    assert.equal(error.phase, "acquire");
    assert.deepEqual(
      { nodes: error.tally.nodes, need: error.tally.need, yes: error.tally.yes, unreachable: error.tally.unreachable },
      { nodes: 5, need: 3, yes: 2, unreachable: 3 },
    );
    // Refused connections, not timeouts: well within one connect timeout.
    assert.ok(took < 2_000, `took ${took} ms`);
    await locks.settle();
    assert.ok(await nothingOn(cluster, resource), "the grants of the failed round were released");
    await locks.close();
  }),
);

test("the AbortSignal fires when a majority of nodes is killed, before the validity ends", T, (t) =>
  withCluster(async (cluster) => {
    const resource = resourceName(t);
    const locks = await Redlock.connect(cluster.urls);
    const ttl = 3_000;
    const outcome = locks.using(resource, { ttl }, async (signal, lock) => {
      const deadline = Date.now() + lock.validity;
      for (const i of [0, 2, 4]) cluster.servers[i].kill();
      await aborted(signal, ttl);
      assert.ok(Date.now() < deadline, "told before the validity ran out");
      assert.equal(lock.status, "lost");
      return "routine ended";
    });
    const error = await outcome.catch((e) => e);
    assert.ok(error instanceof LockLostError, `using rejects with the loss: ${error}`);
    assert.equal(error.reason, "renewal_failed");
    assert.ok(error.cause instanceof NoQuorumError, String(error.cause));
    assert.equal(error.cause.phase, "extend");
    assert.match(error.message, /the lock on '.*' is lost: a renewal failed: no quorum for '.*' to extend: 2 of 5 extended \(need 3\); 3 unreachable/);
    await locks.close();
  }),
);

test("without a watchdog the signal fires when the validity runs out, not before", T, (t) =>
  withCluster(async (cluster) => {
    const resource = resourceName(t);
    const locks = await Redlock.connect(cluster.urls);
    const lock = await locks.acquire(resource, { ttl: 400 });
    const deadline = performance.now() + lock.validity;
    const reason = await aborted(lock.signal, 5_000);
    assert.ok(performance.now() >= deadline - 1, "not before the deadline");
    assert.ok(reason instanceof LockLostError);
    assert.equal(reason.reason, "expired");
    // A lost lock's release is refused by the nodes that no longer hold it.
    await lock.release().catch(() => {});
    await locks.close();
  }),
);

test("a bounded watchdog stops, and the loss says so", T, (t) =>
  withCluster(async (cluster) => {
    const resource = resourceName(t);
    const locks = await Redlock.connect(cluster.urls);
    const lock = await locks.acquire(resource, { ttl: 300 });
    await lock.startWatchdog({ renewalsMax: 2 });
    const reason = await aborted(lock.signal, 5_000);
    assert.equal(reason.reason, "watchdog_limit");
    assert.match(reason.message, /stopped renewing after 2 renewals/);
    await locks.close();
  }),
);

test("release never leaves a lock behind, also on a node that answers late", T, (t) =>
  withCluster(async (cluster) => {
    // Node 5 is paused: its ACQUIRE waits in its socket while the other
    // four grant; the release returns at the majority, its RELEASE queued
    // behind that ACQUIRE on the same connection. When node 5 resumes it
    // must run both, in order, and keep nothing.
    const resource = resourceName(t);
    const locks = await Redlock.connect(cluster.urls, { commandTimeout: 10_000 });
    const late = cluster.servers[4];
    late.pause();
    try {
      for (let i = 0; i < 3; i++) {
        const lock = await locks.tryAcquire(`${resource}:${i}`, { ttl: 20_000 });
        const tally = await lock.release();
        assert.ok(tally.yes >= 3);
      }
    } finally {
      late.resume();
    }
    await locks.settle();
    assert.equal(await late.commandCalls("lock.acquire"), 3, "node 5 ran the three grants");
    assert.equal(await late.commandCalls("lock.release"), 3, "and the three releases");
    for (let i = 0; i < 3; i++) assert.ok(await nothingOn(cluster, `${resource}:${i}`), `lock ${i} left behind`);
    await locks.close();
  }),
);

test("quarantined nodes refuse new grants, and the error says for how long", T, (t) =>
  withCluster(
    async (cluster) => {
      const resource = resourceName(t);
      const locks = await Redlock.connect(cluster.urls);
      const error = await locks.tryAcquire(resource, { ttl: 5_000 }).catch((e) => e);
      assert.ok(error instanceof QuarantinedError, String(error));
      assert.equal(error.tally.quarantined, 5);
      assert.ok(error.tally.quarantineLeft > 0 && error.tally.quarantineLeft <= 60_000, `${error.tally.quarantineLeft}`);
      assert.match(error.message, /0 of 5 granted \(need 3\); 5 quarantined \(up to \d+ ms left\)/);
      // Nothing is held; each node says why it refuses, and for how long.
      for (const report of await locks.info(resource)) {
        assert.equal(report.info.kind, "none");
        assert.equal(report.info.refused.code, "startup");
        assert.ok(report.info.refused.ms > 0);
      }
      await locks.close();
    },
    ["quarantine-ms", "60000"],
  ),
);
