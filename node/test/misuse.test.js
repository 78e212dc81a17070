"use strict";
// Misuse: every bad argument is refused with an InvalidArgumentError that
// says what is wrong, and nothing reaches the nodes for a call refused
// before any round.

const assert = require("node:assert/strict");
const { test } = require("node:test");

const { resourceName, sharedQuorum } = require("./nodes");
const { InvalidArgumentError, Lock, Redlock, RedlockError, freedChannel } = require("./package");

let cluster;
let locks;
sharedQuorum(Redlock, 5, (shared) => ({ cluster, locks } = shared));

const T = { timeout: 60_000 };

/** The lock.* calls the nodes have run so far. */
async function lockCalls() {
  let total = 0;
  for (const server of cluster.servers) {
    const stats = await server.call("INFO", "commandstats");
    for (const match of stats.matchAll(/^cmdstat_lock\.[a-z]+:calls=(\d+)/gm)) total += Number(match[1]);
  }
  return total;
}

async function refused(promise, pattern) {
  const error = await promise.then(
    () => assert.fail(`not refused (expected ${pattern})`),
    (e) => e,
  );
  assert.ok(error instanceof InvalidArgumentError, `${error && error.stack}`);
  assert.ok(error instanceof RedlockError);
  assert.equal(error.retryable, false);
  assert.match(error.message, pattern);
}

test("bad arguments are refused with a clear error before any round", T, async (t) => {
  const r = resourceName(t);
  const before = await lockCalls();
  const cases = [
    [() => locks.tryAcquire(r), /ttl \(milliseconds\) is required/],
    [() => locks.tryAcquire(r, { ttl: "5000" }), /ttl must be a finite number of milliseconds, at least 0; got "5000"/],
    [() => locks.tryAcquire(r, { ttl: -1 }), /ttl must be a finite number of milliseconds, at least 0; got -1/],
    [() => locks.tryAcquire(r, { ttl: NaN }), /ttl must be a finite number/],
    [() => locks.tryAcquire(r, { ttl: Infinity }), /ttl must be a finite number/],
    [() => locks.tryAcquire(r, { ttl: 1 }), /ttl 1 ms is not above the clock-drift allowance \(2 ms\)/],
    [() => locks.tryAcquire(r, { ttl: 0 }), /ttl 0 ms is not above the clock-drift allowance/],
    [() => locks.tryAcquire(r, { ttl: 5000, fenced: true }), /unknown option "fenced" of the acquire options/],
    [() => locks.tryAcquire(r, { ttl: 5000, wait: 100 }), /unknown option "wait"/],
    [() => locks.tryAcquire(r, "5000"), /the acquire options must be an object, not "5000"/],
    [() => locks.tryAcquire(r, { ttl: 5000, fence: "yes" }), /fence must be true or false/],
    [() => locks.tryAcquire("", { ttl: 5000 }), /resource/],
    [() => locks.tryAcquire(42, { ttl: 5000 }), /resource must be a string, not 42/],
    [() => locks.tryAcquire(r, { ttl: 5000, mode: "exclusive" }), /mode 'exclusive' is ambiguous: use 'plain'/],
    [() => locks.tryAcquire(r, { ttl: 5000, mode: "shared" }), /unknown mode "shared"/],
    [() => locks.tryAcquire(r, { ttl: 5000, mode: "permit" }), /mode 'permit' needs a permit count/],
    [() => locks.tryAcquire(r, { ttl: 5000, permits: 2 }), /a permit count is only for mode 'permit', not 'plain'/],
    [() => locks.tryAcquire(r, { ttl: 5000, mode: "permit", permits: 0 }), /permits must be a whole number from 1/],
    [() => locks.tryAcquire(r, { ttl: 5000, mode: "permit", permits: 1.5 }), /permits must be a whole number/],
    [() => locks.acquire(r, { ttl: 5000, attempts: 0 }), /attempts must be a whole number from 1/],
    [() => locks.acquire(r, { ttl: 5000, retryDelay: 5 }), /retryDelay must be \[min, max\] milliseconds/],
    [() => locks.acquire(r, { ttl: 5000, wait: -5 }), /wait must be a finite number/],
    [() => locks.tryAcquireMany(r, { ttl: 5000 }), /resources must be an array/],
    [() => locks.tryAcquireMany([], { ttl: 5000 }), /./],
    [() => locks.tryAcquireMany([`{${r}}:a`, `{${r}}:a`], { ttl: 5000 }), /twice/],
    [() => locks.tryAcquireMany([[`{${r}}:a`, "permit"]], { ttl: 5000 }), /permit/],
    [() => locks.tryAcquireMany([{ resource: r }], { ttl: 5000 }), /a set member is a resource or \[resource, mode\]/],
    [() => locks.tryAcquireMany([r], { ttl: 5000, mode: "read" }), /unknown option "mode"/],
    [() => locks.release(r, 7), /token must be a string, not 7/],
    [() => locks.release(r, ""), /token/],
    [() => locks.extend(r, "abc", {}), /ttl \(milliseconds\) is required/],
    [() => locks.enter(r, "", { ttl: 5000 }), /owner/],
    [() => locks.enter(r, "me"), /ttl \(milliseconds\) is required/],
    [() => locks.exit(r, null), /owner must be a string, not null/],
    [() => locks.info(undefined), /resource must be a string/],
    [() => locks.using(r, { ttl: 5000 }), /routine must be a function/],
    [() => locks.using(r, { ttl: 5000, watchdog: { every: 5 } }, async () => {}), /unknown option "every" of the watchdog/],
  ];
  for (const [call, pattern] of cases) await refused(call(), pattern);
  assert.equal(await lockCalls(), before, "a refused call sent nothing to the nodes");
  assert.throws(() => locks.quorum("permit"), InvalidArgumentError);
});

test("a request the nodes refuse ends at once, whatever the wait", T, async (t) => {
  // A TTL above the nodes' lock.max-ttl-ms (30 s), or a key that is not a
  // lock, is refused by every node: one attempt, and a non-retryable
  // InvalidArgumentError that names a node and its reply.
  const r = resourceName(t);
  const acquireCalls = async () => {
    let total = 0;
    for (const server of cluster.servers) total += await server.commandCalls("lock.acquire");
    return total;
  };
  let before = await acquireCalls();
  const started = performance.now();
  const error = await locks.acquire(r, { ttl: 60_000, wait: 10_000 }).catch((e) => e);
  const took = performance.now() - started;
  assert.ok(error instanceof InvalidArgumentError, `${error && error.stack}`);
  assert.equal(error.retryable, false);
  assert.match(
    error.message,
    /^the nodes refuse the request for '.*' \(5 of 5 nodes; a retry would be refused again\): member 1 \(redis:\/\/[^)]+\): ERR lock.acquire: ttl-ms 60000 is out of range, must be 1..30000/,
  );
  assert.equal(error.resource, r);
  assert.equal(error.phase, "acquire");
  assert.equal(error.tally.failed, 5);
  assert.equal((await acquireCalls()) - before, 5, "one attempt");
  assert.ok(took < 5_000, `took ${took} ms of a 10 s wait`);

  const key = `${r}:string`;
  for (const server of cluster.servers) await server.call("SET", key, "x");
  before = await acquireCalls();
  await refused(locks.acquire(key, { ttl: 5000, wait: 10_000 }), /\(5 of 5 nodes; a retry would be refused again\): .*WRONGTYPE/);
  assert.equal((await acquireCalls()) - before, 5, "one attempt");
  // using() too: the routine never runs.
  await refused(locks.using(key, { ttl: 5000, wait: 10_000 }, async () => assert.fail("ran")), /WRONGTYPE/);
});

test("bad node lists and connect options", T, async () => {
  await refused(Redlock.connect("redis://127.0.0.1:6379"), /nodes must be an array of node URLs/);
  await refused(Redlock.connect([]), /no members given/);
  await refused(Redlock.connect(["http://127.0.0.1:6379"]), /redis:\/\//);
  // Host and port without a scheme: the example given parses.
  await refused(
    Redlock.connect(["localhost 6379"]),
    /not a URL: write it as redis\[s\]:\/\/\[\[user\]:password@\]host:port\[\/db\], e\.g\. redis:\/\/localhost:6379$/,
  );
  await refused(Redlock.connect(["redis://127.0.0.1:notaport"]), /./);
  await refused(Redlock.connect([6379]), /a node URL must be a string, not 6379/);
  await refused(Redlock.connect(cluster.urls, { timeout: 5 }), /unknown option "timeout" of the connect options/);
  await refused(Redlock.connect(cluster.urls, { commandTimeout: -1 }), /commandTimeout must be a finite number/);
});

test("a lock used after its release or detach, and a closed client", T, async (t) => {
  const r = resourceName(t);
  const lock = await locks.acquire(r, { ttl: 5000 });
  await lock.release();
  await refused(lock.extend(), /the lock on '.*' was released or detached/);
  await refused(lock.fencingToken(), /released or detached/);
  await refused(lock.detach(), /released or detached/);
  await refused(lock.startWatchdog(), /released or detached/);
  await refused(lock.extend("soon"), /ttl must be a finite number/);
  await refused(lock.startWatchdog({ renewalsMax: -1 }), /renewalsMax must be a whole number from 0/);
  const other = await Redlock.connect(cluster.urls);
  await other.close();
  await refused(other.tryAcquire(r, { ttl: 5000 }), /this Redlock client is closed/);
  assert.throws(() => new Lock({}), TypeError);
  assert.throws(() => new Redlock({}), TypeError);
});


test("freedChannel names the channel and refuses bad arguments", () => {
  assert.deepEqual(freedChannel("job"), { channel: "__lock@0__:job", subscribe: "SUBSCRIBE" });
  assert.deepEqual(freedChannel("job", { db: 3 }), { channel: "__lock@3__:job", subscribe: "SUBSCRIBE" });
  // A cluster member: a channel in the resource's slot, subscribed at its shard.
  assert.deepEqual(freedChannel("job", { cluster: true }), { channel: "__lock@0__:{job}", subscribe: "SSUBSCRIBE" });
  assert.deepEqual(freedChannel("{user:7}:job", { cluster: true }), {
    channel: "__lock@0__:{user:7}:job",
    subscribe: "SSUBSCRIBE",
  });
  // No channel in the slot of a tagless name with a `}`: every node hears it.
  assert.deepEqual(freedChannel("a}b", { cluster: true }), { channel: "__lock@0__:a}b", subscribe: "SUBSCRIBE" });
  assert.throws(() => freedChannel(7), { name: "TypeError", message: "resource must be a string, not number" });
  assert.throws(() => freedChannel("job", { cluster: 1 }), {
    name: "TypeError",
    message: "cluster must be a boolean, not number",
  });
  for (const db of [-1, 1.5, 2 ** 31, "0"]) {
    assert.throws(() => freedChannel("job", { db }), (error) => {
      assert.ok(error instanceof InvalidArgumentError, String(error));
      assert.match(error.message, /^invalid argument: db must be an integer between 0 and 2147483647, got /);
      return true;
    });
  }
});
