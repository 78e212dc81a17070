"use strict";
// Mutual exclusion under contention: many async tasks sharing one client,
// and several processes with a client each, all on one resource. Each
// holder records its holding window on the monotonic clock shared by the
// processes of this machine (process.hrtime) and its fencing token; no
// two windows may overlap, and the tokens must rise in the windows' order.

const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const path = require("node:path");
const { after, before, test } = require("node:test");

const { Cluster, resourceName, sleep } = require("./nodes");
const { Redlock } = require("./package");

let cluster;

before(async () => {
  cluster = await Cluster.start(5);
});

after(() => {
  if (cluster) cluster.close();
});

/** Fails unless the windows [start, end, token] never overlap and their tokens rise in order. */
function assertOneAtATime(windows) {
  const sorted = [...windows].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  for (let i = 1; i < sorted.length; i++) {
    const [start, , token] = sorted[i];
    const [, previousEnd, previousToken] = sorted[i - 1];
    assert.ok(start >= previousEnd, `two holders at once: windows ${i - 1} and ${i} overlap`);
    assert.ok(token > previousToken, `tokens do not rise: ${previousToken} then ${token}`);
  }
}

// One holder's cycles: take the lock (retrying), read its fencing token,
// hold it a little, record the window, release. Shared by the tasks below
// and, as a string, by the child processes.
const HOLDER = `
async function cycles(locks, resource, count, windows) {
  for (let i = 0; i < count; i++) {
    const lock = await locks.acquire(resource, { ttl: 5000, wait: 30000, retryDelay: [1, 5] });
    const token = await lock.fencingToken();
    const start = process.hrtime.bigint();
    await new Promise((resolve) => setTimeout(resolve, Math.random() * 2));
    const end = process.hrtime.bigint();
    windows.push([start, end, token]);
    await lock.release();
  }
}`;
// eslint-disable-next-line no-new-func
const cycles = new Function(`${HOLDER}; return cycles;`)();

test("32 async tasks sharing one client hold one at a time, tokens rising", { timeout: 120_000 }, async (t) => {
  const resource = resourceName(t);
  const locks = await Redlock.connect(cluster.urls);
  const windows = [];
  await Promise.all(Array.from({ length: 32 }, () => cycles(locks, resource, 4, windows)));
  await locks.close();
  assert.equal(windows.length, 128);
  assertOneAtATime(windows);
});

test("4 processes with a client each hold one at a time, tokens rising", { timeout: 120_000 }, async (t) => {
  const resource = resourceName(t);
  const script = `
    const { Redlock } = require(${JSON.stringify(path.join(__dirname, "package.js"))});
    ${HOLDER}
    (async () => {
      const locks = await Redlock.connect(JSON.parse(process.argv[1]));
      const windows = [];
      await Promise.all([0, 1, 2, 3].map(() => cycles(locks, process.argv[2], 5, windows)));
      await locks.close();
      console.log(JSON.stringify(windows.map((w) => w.map(String))));
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const children = Array.from({ length: 4 }, () => {
    const child = spawn(process.execPath, ["-e", script, JSON.stringify(cluster.urls), resource], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const done = new Promise((resolve) => child.on("exit", (code) => resolve({ code, out, err })));
    return { child, done };
  });
  const killer = setTimeout(() => children.forEach(({ child }) => child.kill("SIGKILL")), 100_000);
  const results = await Promise.all(children.map((c) => c.done));
  clearTimeout(killer);
  const windows = [];
  for (const { code, out, err } of results) {
    assert.equal(code, 0, err);
    for (const [start, end, token] of JSON.parse(out)) windows.push([BigInt(start), BigInt(end), BigInt(token)]);
  }
  assert.equal(windows.length, 80);
  assertOneAtATime(windows);
});

test("64 tasks on resources of their own all succeed at once", { timeout: 60_000 }, async (t) => {
  const base = resourceName(t);
  const locks = await Redlock.connect(cluster.urls);
  const held = await Promise.all(Array.from({ length: 64 }, (_, i) => locks.tryAcquire(`${base}:${i}`, { ttl: 10_000 })));
  assert.equal(new Set(held.map((l) => l.token)).size, 64);
  await Promise.all(held.map((l) => l.release()));
  await locks.close();
  for (let i = 0; i < 64; i += 16) {
    assert.deepEqual(await cluster.lockInfos(`${base}:${i}`), [null, null, null, null, null]);
  }
  await sleep(0);
});

// The voluntary context switches of this process's main thread (the
// JavaScript thread) so far: each time it went to sleep and was woken.
function jsThreadWakeUps() {
  const status = require("node:fs").readFileSync(`/proc/${process.pid}/task/${process.pid}/status`, "utf8");
  return Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)[1]);
}

test(
  "a call that only waits does not wake the JavaScript thread every millisecond",
  { timeout: 60_000, skip: process.platform !== "linux" && "reads /proc" },
  async (t) => {
    const resource = resourceName(t);
    const locks = await Redlock.connect(cluster.urls);
    const holder = await locks.tryAcquire(resource, { ttl: 10_000 });
    // About 1.5 s of waiting: attempts 300-400 ms apart, each refused.
    const before = jsThreadWakeUps();
    const started = Date.now();
    const error = await locks.acquire(resource, { ttl: 5_000, wait: 1_500, retryDelay: [300, 400] }).catch((e) => e);
    const waited = Date.now() - started;
    const wakeUps = jsThreadWakeUps() - before;
    assert.ok(error instanceof Error, `the acquire of a held lock succeeded: ${error}`);
    assert.ok(waited >= 1_000, `the wait ended after ${waited} ms`);
    // Driven by the 1 ms timer for the whole wait, the thread would wake
    // some 1,500 times; once the helper drives, only for the attempts'
    // first few ms and the settling.
    assert.ok(wakeUps < 300, `the JavaScript thread woke ${wakeUps} times in a ${waited} ms wait`);
    await holder.release();
    await locks.close();
  },
);
