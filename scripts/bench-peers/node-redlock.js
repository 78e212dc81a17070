#!/usr/bin/env node
// node-redlock (npm `redlock` v5 with `ioredis`) driver for scripts/bench-client.
// Uncontended acquire + release cycles over the first N of the given
// loopback ports; prints one JSON object in the shape of
// client/examples/bench_quorum.rs.
//
//   NODE_PATH=target/bench-peers/node/node_modules node scripts/bench-peers/node-redlock.js \
//       --ports 7000,7001,7002 --n 3 --iterations 2000 --warmup 200
//
// One cycle: redlock.acquire([resource], ttl, {retryCount: 0}) (the v5
// ACQUIRE Lua script, by EVALSHA, on all N at once; resolves as soon as a
// majority granted) then lock.release() (the RELEASE script on all N;
// resolves at a majority). Acquire latency = the acquire call alone.
//
// --tasks T runs T cycle loops at once on the same Redlock (one ioredis
// client per node, shared), each doing iterations / T cycles. Without
// --shared each loop has its own 4 resources; with --shared K loop i uses
// resource i % K and retries a refused acquire after a random delay in
// --retry-min-ms ..= --retry-max-ms (the same bounds the Rust driver
// uses). The retry is done here, around acquire with retryCount 0, and not
// with node-redlock's own retryCount: between its own retries node-redlock
// does not release a failed attempt's partial grants, and its acquire
// script refuses a key that exists, so a retry could be refused by the
// caller's own leftovers until their TTL; a failed acquire() does release
// them. Acquire latency with --shared: from the first attempt to the
// grant, retries included.
"use strict";

function parseArgs(argv) {
  const out = { ports: [], n: 0, iterations: 2000, warmup: 200, ttlMs: 10000,
                prefix: "bench:node", maxSeconds: 60, label: "", tasks: 1, shared: 0,
                retryMinMs: 2, retryMaxMs: 10 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = argv[i + 1];
    switch (a) {
      case "--ports": out.ports = v.split(",").map(Number); i++; break;
      case "--n": out.n = Number(v); i++; break;
      case "--iterations": out.iterations = Number(v); i++; break;
      case "--warmup": out.warmup = Number(v); i++; break;
      case "--ttl-ms": out.ttlMs = Number(v); i++; break;
      case "--prefix": out.prefix = v; i++; break;
      case "--max-seconds": out.maxSeconds = Number(v); i++; break;
      case "--label": out.label = v; i++; break;
      case "--tasks": out.tasks = Number(v); i++; break;
      case "--shared": out.shared = Number(v); i++; break;
      case "--retry-min-ms": out.retryMinMs = Number(v); i++; break;
      case "--retry-max-ms": out.retryMaxMs = Number(v); i++; break;
      default: throw new Error(`unknown argument ${a}`);
    }
  }
  if (!(out.n >= 1 && out.n <= out.ports.length)) {
    throw new Error(`--n ${out.n} must be 1..${out.ports.length} (the ports given)`);
  }
  return out;
}

function percentileMs(sortedNs, p) {
  if (sortedNs.length === 0) return null;
  const i = Math.min(sortedNs.length - 1, Math.round((sortedNs.length - 1) * p));
  return Number(sortedNs[i]) / 1e6;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const Redlock = require("redlock").default;
  const Redis = require("ioredis");
  const clients = args.ports.slice(0, args.n).map((port) => new Redis({
    host: "127.0.0.1", port, lazyConnect: true, enableOfflineQueue: true,
    connectTimeout: 2000, commandTimeout: 2000, maxRetriesPerRequest: 1,
    retryStrategy: () => null,
  }));
  await Promise.all(clients.map((c) => c.connect()));
  const redlock = new Redlock(clients, {
    driftFactor: 0.01, retryCount: 0, retryDelay: 0, retryJitter: 0,
    automaticExtensionThreshold: 500,
  });
  // Errors are counted from the results; the emitter must have a listener.
  redlock.on("error", () => {});
  const settings = { retryCount: 0 };
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const retryWithinMs = 30000;

  // One loop's cycles on its resources; pushes the samples.
  async function loop(resources, cycles, deadline, samples) {
    for (let i = 0; i < cycles; i++) {
      if (process.hrtime.bigint() > deadline) break;
      const resource = resources[i % resources.length];
      const t0 = process.hrtime.bigint();
      let lock;
      for (;;) {
        try {
          lock = await redlock.acquire([resource], args.ttlMs, settings);
          break;
        } catch (e) {
          const waited = Number(process.hrtime.bigint() - t0) / 1e6;
          if (args.shared > 0 && waited < retryWithinMs) {
            await sleep(args.retryMinMs + Math.random() * (args.retryMaxMs - args.retryMinMs));
            continue;
          }
          samples.failures++;
          process.stderr.write(`node-redlock: acquire ${resource}: ${e.message}\n`);
          break;
        }
      }
      if (!lock) continue;
      const t1 = process.hrtime.bigint();
      samples.acquire.push(t1 - t0);
      try {
        await lock.release();
      } catch (e) {
        samples.failures++;
        process.stderr.write(`node-redlock: release ${resource}: ${e.message}\n`);
      }
      samples.release.push(process.hrtime.bigint() - t1);
    }
  }

  // `total` cycles split over the loops.
  async function run(total, maxSeconds) {
    const samples = { acquire: [], release: [], failures: 0 };
    const started = process.hrtime.bigint();
    const deadline = started + BigInt(Math.round(maxSeconds * 1e9));
    const loops = [];
    for (let t = 0; t < args.tasks; t++) {
      const resources = args.shared > 0
        ? [`${args.prefix}:shared:${t % args.shared}`]
        : Array.from({ length: 4 }, (_, i) => `${args.prefix}:${t}:${i}`);
      const cycles = Math.floor(total / args.tasks) + (t < total % args.tasks ? 1 : 0);
      loops.push(loop(resources, cycles, deadline, samples));
    }
    await Promise.all(loops);
    return { samples, started };
  }

  await run(args.warmup, 30);
  const { samples, started } = await run(args.iterations, args.maxSeconds);
  const { acquire, release, failures } = samples;
  const wall = Number(process.hrtime.bigint() - started) / 1e9;
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  acquire.sort(cmp);
  release.sort(cmp);
  const pkg = require("path").join(require.resolve("redlock"), "..", "..", "..", "package.json");
  const version = JSON.parse(require("fs").readFileSync(pkg, "utf8")).version;
  console.log(JSON.stringify({
    client: `node-redlock ${version.replace(/^v/, "")}`, label: args.label, n: args.n,
    tasks: args.tasks, shared: args.shared, fenced: false,
    iterations: args.iterations, completed: acquire.length, failures, seconds: wall,
    ops_per_s: acquire.length / wall,
    acquire_p50_ms: percentileMs(acquire, 0.5), acquire_p99_ms: percentileMs(acquire, 0.99),
    release_p50_ms: percentileMs(release, 0.5),
  }));
  // The last release resolved at a majority; QUIT goes after the commands
  // still on their way to the other nodes (one ordered connection each), so
  // they all land before the process exits. Bounded: 2 s, then disconnect.
  await Promise.race([
    Promise.all(clients.map((c) => c.quit().catch(() => {}))),
    new Promise((resolve) => setTimeout(resolve, 2000)),
  ]);
  clients.forEach((c) => c.disconnect());
}

main().then(() => process.exit(0), (e) => {
  process.stderr.write(`node-redlock: ${e.stack || e}\n`);
  process.exit(1);
});
