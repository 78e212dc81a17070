"use strict";
// Locks on 5 real masters: every mode, sets, reentrant holds, fencing
// tokens, release and extend by token, info, `using` and `await using`'s
// dispose. The servers are this file's own, killed by PID at the end.

const assert = require("node:assert/strict");
const { spawnSync } = require("node:child_process");
const path = require("node:path");
const { test } = require("node:test");

const { resourceName, serverName, sharedQuorum } = require("./nodes");
const { InvalidArgumentError, LockHeldError, NoQuorumError, Redlock } = require("./package");

let cluster;
let locks;
sharedQuorum(Redlock, 5, (shared) => ({ cluster, locks } = shared));

const T = { timeout: 60_000 };

test(`server under test: ${serverName()}`, () => {});

test("acquire takes the lock on a quorum and release frees it everywhere", T, async (t) => {
  const resource = resourceName(t);
  const lock = await locks.acquire(resource, { ttl: 10_000 });
  assert.equal(lock.resource, resource);
  assert.equal(lock.mode, "plain");
  assert.match(lock.token, /^[0-9a-f]{32}$/);
  assert.equal(lock.status, "held");
  assert.ok(lock.validity > 9_000 && lock.validity <= 10_000, `validity ${lock.validity}`);
  assert.equal(lock.fenced, undefined);
  const infos = await cluster.lockInfos(resource);
  assert.ok(infos.filter((i) => i !== null).length >= 3, "held on a majority");
  await assert.rejects(locks.tryAcquire(resource, { ttl: 10_000 }), LockHeldError);

  const tally = await lock.release();
  assert.equal(lock.status, "released");
  assert.equal(tally.nodes, 5);
  assert.equal(tally.need, 3);
  assert.ok(tally.yes >= 3);
  await locks.settle();
  assert.deepEqual(await cluster.lockInfos(resource), [null, null, null, null, null]);
  // A second release is refused: nothing is held with this lock any more.
  await assert.rejects(lock.release(), (e) => e instanceof InvalidArgumentError && /released or detached/.test(e.message));
});

test("the fencing token is a bigint that rises from holder to holder", T, async (t) => {
  const resource = resourceName(t);
  const other = await Redlock.connect(cluster.urls);
  const tokens = [];
  for (let i = 0; i < 6; i++) {
    // Unfenced holders in between take tokens too.
    const client = i % 2 === 0 ? locks : other;
    const unfenced = await client.acquire(resource, { ttl: 5_000 });
    await unfenced.release();
    const lock = await client.acquire(resource, { ttl: 5_000, fence: i % 3 === 0 });
    const token = await lock.fencingToken();
    assert.equal(typeof token, "bigint");
    assert.equal(lock.fenced, token);
    assert.equal(await lock.fencingToken(), token, "the same token on a second call");
    tokens.push(token);
    await lock.release();
  }
  for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `tokens rise: ${tokens}`);
  await other.close();
});

test("readers share, a writer is alone, and writers' tokens rise", T, async (t) => {
  const resource = resourceName(t);
  const r1 = await locks.tryAcquire(resource, { ttl: 5_000, mode: "read" });
  const r2 = await locks.tryAcquire(resource, { ttl: 5_000, mode: "read" });
  assert.equal(r2.mode, "read");
  await assert.rejects(locks.tryAcquire(resource, { ttl: 5_000, mode: "write" }), LockHeldError);
  await r1.release();
  await r2.release();
  const w1 = await locks.tryAcquire(resource, { ttl: 5_000, mode: "write", fence: true });
  await assert.rejects(locks.tryAcquire(resource, { ttl: 5_000, mode: "read" }), LockHeldError);
  await w1.release();
  const w2 = await locks.tryAcquire(resource, { ttl: 5_000, mode: "write", fence: true });
  assert.ok(w2.fenced > w1.fenced);
  await w2.release();
});

test("a two-permit semaphore admits two and needs four of five grants", T, async (t) => {
  const resource = resourceName(t);
  assert.equal(locks.quorum("permit", 2), 4);
  assert.equal(locks.quorum("plain"), 3);
  const a = await locks.tryAcquire(resource, { ttl: 5_000, mode: "permit", permits: 2 });
  const b = await locks.tryAcquire(resource, { ttl: 5_000, mode: "permit", permits: 2 });
  assert.equal(a.permits, 2);
  assert.deepEqual(a.resources, [{ resource, mode: "permit", permits: 2 }]);
  await assert.rejects(locks.tryAcquire(resource, { ttl: 5_000, mode: "permit", permits: 2 }), LockHeldError);
  await a.release();
  await b.release();
});

test("a semaphore full on two nodes refuses a holder granted by the other three", T, async (t) => {
  // Two permits, 5 nodes: two holders occupy both permits on nodes 1-2
  // only; a third is granted on nodes 3-5, a majority but not the 4 a
  // 2-permit semaphore needs, so it is refused and nodes 1-2 never see
  // three holders counted by a quorum.
  const resource = resourceName(t);
  const two = await Redlock.connect(cluster.urls.slice(0, 2));
  const a = await two.tryAcquire(resource, { ttl: 10_000, mode: "permit", permits: 2 });
  const b = await two.tryAcquire(resource, { ttl: 10_000, mode: "permit", permits: 2 });
  const error = await locks.tryAcquire(resource, { ttl: 10_000, mode: "permit", permits: 2 }).catch((e) => e);
  assert.ok(error instanceof LockHeldError, `refused: ${error}`);
  assert.equal(error.tally.yes, 3);
  assert.equal(error.tally.need, 4);
  assert.match(error.message, /3 of 5 granted \(need 4 for a 2-permit semaphore\); 2 held by another owner/);
  await a.release();
  await b.release();
  await two.close();
});

test("a set is taken all or nothing, with one fencing token", T, async (t) => {
  const base = resourceName(t);
  const [a, b, c] = [`{${base}}:a`, `{${base}}:b`, `{${base}}:c`];
  const blocker = await locks.tryAcquire(b, { ttl: 5_000 });
  await assert.rejects(locks.tryAcquireMany([a, b, c], { ttl: 5_000 }), LockHeldError);
  assert.deepEqual(await cluster.lockInfos(a), [null, null, null, null, null], "nothing of the set was kept");
  await blocker.release();
  const set = await locks.tryAcquireMany([a, [b, "write"], [c, "read"]], { ttl: 5_000, fence: true });
  assert.deepEqual(set.resources, [
    { resource: a, mode: "plain" },
    { resource: b, mode: "write" },
    { resource: c, mode: "read" },
  ]);
  assert.equal(typeof set.fenced, "bigint");
  await assert.rejects(locks.tryAcquire(a, { ttl: 5_000 }), LockHeldError);
  await set.release();
  const single = await locks.tryAcquire(a, { ttl: 5_000, fence: true });
  assert.ok(single.fenced > set.fenced, "a later single holder's token is above the set's");
  await single.release();
});

test("reentrant holds count and share one fencing token", T, async (t) => {
  const resource = resourceName(t);
  const first = await locks.enter(resource, "worker-1", { ttl: 5_000 });
  const again = await locks.enter(resource, "worker-1", { ttl: 5_000 });
  assert.equal(typeof first.fencingToken, "bigint");
  assert.equal(again.fencingToken, first.fencingToken);
  assert.ok(again.validity > 4_000);
  await assert.rejects(locks.enter(resource, "worker-2", { ttl: 5_000 }), LockHeldError);
  assert.equal(await locks.exit(resource, "worker-1"), 1);
  assert.equal(await locks.exit(resource, "worker-1"), 0);
  const next = await locks.enter(resource, "worker-2", { ttl: 5_000 });
  assert.ok(next.fencingToken > first.fencingToken);
  assert.equal(await locks.exit(resource, "worker-2"), 0);
  await assert.rejects(locks.exit(resource, "worker-2"), NoQuorumError);
});

test("extend and release by token, from another process", T, async (t) => {
  const resource = resourceName(t);
  const lock = await locks.acquire(resource, { ttl: 3_000 });
  const detached = await lock.detach();
  assert.equal(lock.status, "detached");
  assert.equal(detached.token, lock.token);
  const script = `
    const { Redlock } = require(${JSON.stringify(path.join(__dirname, "package.js"))});
    (async () => {
      const locks = await Redlock.connect(JSON.parse(process.argv[1]));
      const left = await locks.extend(process.argv[2], process.argv[3], { ttl: 20000 });
      const tally = await locks.release(process.argv[2], process.argv[3]);
      await locks.close();
      console.log(JSON.stringify({ left, yes: tally.yes }));
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const run = spawnSync(process.execPath, ["-e", script, JSON.stringify(cluster.urls), resource, detached.token], {
    encoding: "utf8",
    timeout: 30_000,
  });
  assert.equal(run.status, 0, run.stderr);
  const out = JSON.parse(run.stdout);
  assert.ok(out.left > 19_000, `extended: ${run.stdout}`);
  assert.equal(out.yes, 5);
  assert.deepEqual(await cluster.lockInfos(resource), [null, null, null, null, null]);
  // Released already: a second release by token finds nothing to release.
  await assert.rejects(locks.release(resource, detached.token), (e) => e instanceof NoQuorumError && e.phase === "release");
});

test("sets extend and release by token", T, async (t) => {
  const base = resourceName(t);
  const names = [`{${base}}:a`, `{${base}}:b`];
  const set = await locks.acquireMany(names, { ttl: 3_000 });
  const { token } = await set.detach();
  assert.ok((await locks.extendMany(names, token, { ttl: 10_000 })) > 9_000);
  assert.equal((await locks.releaseMany(names, token)).yes, 5);
  await locks.settle();
  assert.deepEqual(await cluster.lockInfos(names[1]), [null, null, null, null, null]);
});

test("info reports every node", T, async (t) => {
  const resource = resourceName(t);
  const lock = await locks.acquire(resource, { ttl: 10_000, fence: true });
  await locks.settle();
  const reports = await locks.info(resource);
  assert.deepEqual(reports.map((r) => r.node), cluster.urls);
  for (const report of reports) {
    assert.equal(report.error, null);
    assert.equal(report.info.kind, "plain");
    assert.equal(report.info.holder, lock.token);
    assert.equal(report.info.fence, lock.fenced);
    assert.ok(report.info.ttl > 0 && report.info.ttl <= 10_000);
  }
  await lock.release();
  await locks.settle();
  assert.deepEqual((await locks.info(resource)).map((r) => r.info), [null, null, null, null, null]);
});

test("using runs the routine while holding the lock, with the watchdog, and releases", T, async (t) => {
  const resource = resourceName(t);
  const result = await locks.using(resource, { ttl: 600, fence: true }, async (signal, lock) => {
    assert.equal(signal.aborted, false);
    assert.equal(lock.watchdog, "running");
    // Longer than the TTL: the watchdog keeps it.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    assert.equal(lock.status, "held");
    assert.equal(signal.aborted, false);
    return lock.fenced;
  });
  assert.equal(typeof result, "bigint");
  await locks.settle();
  assert.deepEqual(await cluster.lockInfos(resource), [null, null, null, null, null]);
  // The routine's error is the caller's; the lock is released all the same.
  await assert.rejects(
    locks.using([`{${resource}}:a`, `{${resource}}:b`], { ttl: 5_000, watchdog: false }, async (_signal, lock) => {
      assert.equal(lock.watchdog, "off");
      throw new Error("the routine failed");
    }),
    /the routine failed/,
  );
  await locks.settle();
  assert.deepEqual(await cluster.lockInfos(`{${resource}}:a`), [null, null, null, null, null]);
});

test("Symbol.asyncDispose releases the lock (what `await using` calls)", T, async (t) => {
  const resource = resourceName(t);
  const lock = await locks.acquire(resource, { ttl: 10_000 });
  await lock[Symbol.asyncDispose]();
  assert.equal(lock.status, "released");
  await lock[Symbol.asyncDispose](); // nothing left to do
  const detached = await locks.acquire(resource, { ttl: 10_000 });
  const { token } = await detached.detach();
  await detached[Symbol.asyncDispose](); // a detached lock stays held
  await assert.rejects(locks.tryAcquire(resource, { ttl: 10_000 }), LockHeldError);
  await locks.release(resource, token);
});

test("a lock garbage-collected while held is released", T, async (t) => {
  const resource = resourceName(t);
  const script = `
    const { Redlock } = require(${JSON.stringify(path.join(__dirname, "package.js"))});
    (async () => {
      const locks = await Redlock.connect(JSON.parse(process.argv[1]));
      await (async () => { await locks.acquire(process.argv[2], { ttl: 30000 }); })();
      for (let i = 0; i < 20; i++) { global.gc(); await new Promise((r) => setTimeout(r, 20)); }
      await locks.settle();
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const run = spawnSync(process.execPath, ["--expose-gc", "-e", script, JSON.stringify(cluster.urls), resource], {
    encoding: "utf8",
    timeout: 30_000,
  });
  assert.equal(run.status, 0, run.stderr);
  assert.deepEqual(await cluster.lockInfos(resource), [null, null, null, null, null]);
});

test("an AbortSignal stops an acquire's wait", T, async (t) => {
  const resource = resourceName(t);
  const acquireCalls = async () => {
    let total = 0;
    for (const server of cluster.servers) total += await server.commandCalls("lock.acquire");
    return total;
  };
  const holder = await locks.acquire(resource, { ttl: 20_000 });
  // Aborted already: nothing reaches the nodes.
  let before = await acquireCalls();
  await assert.rejects(locks.acquire(resource, { ttl: 5_000, signal: AbortSignal.abort() }), { name: "AbortError" });
  assert.equal(await acquireCalls(), before);
  // Aborted while it waits: it rejects with the signal's reason, long
  // before its wait, and tries no more.
  const controller = new AbortController();
  const started = performance.now();
  const waiting = locks.acquire(resource, { ttl: 5_000, wait: 20_000, retryDelay: [10, 20], signal: controller.signal });
  const failed = waiting.catch((e) => e);
  before = await acquireCalls();
  while ((await acquireCalls()) < before + 10) await new Promise((resolve) => setTimeout(resolve, 10));
  controller.abort();
  const error = await failed;
  assert.equal(error, controller.signal.reason);
  assert.equal(error.name, "AbortError");
  assert.ok(performance.now() - started < 10_000, "stopped within its wait");
  await locks.settle();
  const after = await acquireCalls();
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(await acquireCalls(), after, "no attempt after the abort");
  // using: the routine never runs; a timeout's signal works the same.
  await assert.rejects(
    locks.using(resource, { ttl: 5_000, wait: 20_000, signal: AbortSignal.timeout(50) }, async () => assert.fail("ran")),
    { name: "TimeoutError" },
  );
  await holder.release();
  await locks.settle();
  assert.deepEqual(await cluster.lockInfos(resource), [null, null, null, null, null], "the waiters took nothing");
  await assert.rejects(locks.acquire(resource, { ttl: 5_000, signal: "soon" }), InvalidArgumentError);
});
