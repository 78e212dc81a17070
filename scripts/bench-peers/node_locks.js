#!/usr/bin/env node
"use strict";
// One measurement of scripts/bench-node: acquire + release cycles of one
// Node.js lock client against the first N of the given loopback masters,
// for a fixed time, by one caller or by many async tasks sharing one
// client. Prints one JSON object.
//
//   NODE_PATH=target/bench-peers/node-locks/node_modules:target/node/app/node_modules \
//     node scripts/bench-peers/node_locks.js --client ours --ports 7000,7001,7002 --n 3 --tasks 64 --seconds 2
//
// Clients (each as its users would call it):
//   ours            redlock-client (node/): tryAcquire + release
//   ours-fenced     the same, reading the fencing token of each lock (the fencing round)
//   node-redlock    redlock v5 on ioredis: acquire([r], ttl, {retryCount: 0}) + release
//   redis-semaphore RedlockMutex on ioredis: tryAcquire() + release() (a new mutex per cycle,
//                   its refresh timer off, as node-redlock's and ours run no renewal here)
//
// Uncontended (default): each task cycles over 4 resources of its own.
// --shared K: task i on resource i % K; a refused acquire is retried,
// within 30 s: ours with its retry policy (a random 2-10 ms between
// attempts), node-redlock by this loop around an acquire with retryCount
// 0 (2-10 ms; its failed acquire releases its partial grants),
// redis-semaphore with its own acquire() (retryInterval 6 ms, fixed: it
// has no jitter). The cycle latency is one acquire, from its first
// attempt, plus its release; the CPU time is this process's (every
// thread: the Rust client's runtime too) over the measured part, warm-up
// excluded; with --server-pids, the servers' CPU time over the same part.

const TTL_MS = 10_000;
const RETRY_WITHIN_MS = 30_000;

function parseArgs(argv) {
  const out = {
    client: "", ports: [], n: 0, tasks: 1, seconds: 2, warmup: 100, prefix: "bench:node", shared: 0, serverPids: [], tickUs: 10_000,
    cycles: 0, commandTimeout: 250,
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    switch (flag) {
      case "--client": out.client = value; break;
      case "--ports": out.ports = value.split(",").map(Number); break;
      case "--n": out.n = Number(value); break;
      case "--tasks": out.tasks = Number(value); break;
      case "--seconds": out.seconds = Number(value); break;
      case "--warmup": out.warmup = Number(value); break;
      case "--prefix": out.prefix = value; break;
      case "--shared": out.shared = Number(value); break;
      case "--server-pids": out.serverPids = value.split(",").map(Number); break;
      case "--tick-us": out.tickUs = Number(value); break;
      case "--cycles": out.cycles = Number(value); break;
      case "--command-timeout": out.commandTimeout = Number(value); break;
      default: throw new Error(`unknown argument ${flag}`);
    }
  }
  if (!(out.n >= 1 && out.n <= out.ports.length)) throw new Error(`--n ${out.n}: only ${out.ports.length} ports given`);
  return out;
}

// The CPU time (user + system) of the processes `pids`, in µs, from
// /proc/PID/stat (in clock ticks of `tickUs` µs).
function processesCpuUs(pids, tickUs) {
  const fs = require("node:fs");
  let ticks = 0;
  for (const pid of pids) {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    // The fields after the command name (in parentheses): utime and stime are the 12th and 13th.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    ticks += Number(rest[11]) + Number(rest[12]);
  }
  return ticks * tickUs;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const jitter = () => 2 + Math.random() * 8;

function versionOf(name) {
  const path = require("node:path");
  const fs = require("node:fs");
  let dir = path.dirname(require.resolve(name));
  for (;;) {
    const file = path.join(dir, "package.json");
    if (fs.existsSync(file)) {
      const pkg = JSON.parse(fs.readFileSync(file, "utf8"));
      if (pkg.name === name) return pkg.version.replace(/^v/, "");
    }
    const up = path.dirname(dir);
    if (up === dir) return "?";
    dir = up;
  }
}

// Each client: { cycle(resource) -> acquire ns or null when refused (the
// release done), close(), label }.
async function makeClient(args) {
  const ports = args.ports.slice(0, args.n);
  const contended = args.shared > 0;
  if (args.client === "ours" || args.client === "ours-fenced") {
    const { Redlock, LockHeldError, NoQuorumError } = require("redlock-client");
    const locks = await Redlock.connect(ports.map((p) => `redis://127.0.0.1:${p}/`), { commandTimeout: args.commandTimeout });
    const fenced = args.client === "ours-fenced";
    const options = contended ? { ttl: TTL_MS, wait: RETRY_WITHIN_MS, retryDelay: [2, 10] } : { ttl: TTL_MS };
    return {
      // The package's version export (the workspace's): node/package.json
      // has none, only the release's packed copy gets one.
      label: `redlock-client ${require("redlock-client").version}${fenced ? " (fenced)" : ""}`,
      async cycle(resource) {
        const t0 = process.hrtime.bigint();
        let lock;
        try {
          lock = contended ? await locks.acquire(resource, options) : await locks.tryAcquire(resource, options);
        } catch (error) {
          if (error instanceof LockHeldError || error instanceof NoQuorumError) return null;
          throw error;
        }
        if (fenced) await lock.fencingToken();
        const acquired = process.hrtime.bigint() - t0;
        await lock.release();
        return acquired;
      },
      close: () => locks.close(),
    };
  }
  const Redis = require("ioredis");
  const clients = ports.map(
    (port) =>
      new Redis({ host: "127.0.0.1", port, lazyConnect: true, connectTimeout: 2000, commandTimeout: 2000, maxRetriesPerRequest: 1 }),
  );
  await Promise.all(clients.map((c) => c.connect()));
  const close = async () => {
    await Promise.race([Promise.all(clients.map((c) => c.quit().catch(() => {}))), sleep(2000)]);
    clients.forEach((c) => c.disconnect());
  };
  if (args.client === "node-redlock") {
    const Redlock = require("redlock").default;
    const redlock = new Redlock(clients, { driftFactor: 0.01, retryCount: 0, retryDelay: 0, retryJitter: 0 });
    redlock.on("error", () => {});
    return {
      label: `node-redlock ${versionOf("redlock")} (ioredis ${versionOf("ioredis")})`,
      async cycle(resource) {
        const t0 = process.hrtime.bigint();
        for (;;) {
          try {
            const lock = await redlock.acquire([resource], TTL_MS, { retryCount: 0 });
            const acquired = process.hrtime.bigint() - t0;
            await lock.release();
            return acquired;
          } catch (error) {
            if (!contended || Number(process.hrtime.bigint() - t0) / 1e6 > RETRY_WITHIN_MS) return null;
            await sleep(jitter());
          }
        }
      },
      close,
    };
  }
  if (args.client === "redis-semaphore") {
    const { RedlockMutex } = require("redis-semaphore");
    const options = { lockTimeout: TTL_MS, refreshInterval: 0, acquireTimeout: RETRY_WITHIN_MS, retryInterval: 6 };
    return {
      label: `redis-semaphore ${versionOf("redis-semaphore")} RedlockMutex (ioredis ${versionOf("ioredis")})`,
      async cycle(resource) {
        const mutex = new RedlockMutex(clients, resource, options);
        const t0 = process.hrtime.bigint();
        if (contended) {
          try {
            await mutex.acquire();
          } catch {
            return null;
          }
        } else if (!(await mutex.tryAcquire())) {
          return null;
        }
        const acquired = process.hrtime.bigint() - t0;
        await mutex.release();
        return acquired;
      },
      close,
    };
  }
  throw new Error(`unknown client ${args.client}`);
}

function percentileMs(sorted, p) {
  if (sorted.length === 0) return null;
  return Number(sorted[Math.min(sorted.length - 1, Math.round((sorted.length - 1) * p))]) / 1e6;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const client = await makeClient(args);
  const resources = (task) =>
    args.shared > 0 ? [`${args.prefix}:shared:${task % args.shared}`] : [0, 1, 2, 3].map((k) => `${args.prefix}:${task}:${k}`);
  const warmupEach = args.tasks === 1 ? args.warmup : Math.max(2, Math.floor(args.warmup / 10));
  await Promise.all(
    Array.from({ length: args.tasks }, async (_, task) => {
      const own = resources(task);
      for (let i = 0; i < warmupEach; i++) await client.cycle(own[i % own.length]);
    }),
  );
  const acquire = [];
  const cycle = [];
  let refused = 0;
  let started = 0;
  const cpu0 = process.cpuUsage();
  const servers0 = processesCpuUs(args.serverPids, args.tickUs);
  const t0 = process.hrtime.bigint();
  const end = t0 + BigInt(Math.round(args.seconds * 1e9));
  await Promise.all(
    Array.from({ length: args.tasks }, async (_, task) => {
      const own = resources(task);
      for (let i = 0; process.hrtime.bigint() < end && (args.cycles === 0 || started < args.cycles); i++) {
        started += 1;
        const start = process.hrtime.bigint();
        const acquired = await client.cycle(own[i % own.length]);
        if (acquired === null) {
          refused += 1;
          continue;
        }
        acquire.push(acquired);
        cycle.push(process.hrtime.bigint() - start);
      }
    }),
  );
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  const servers = processesCpuUs(args.serverPids, args.tickUs) - servers0;
  await client.close();
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  acquire.sort(cmp);
  cycle.sort(cmp);
  console.log(
    JSON.stringify({
      client: client.label,
      family: args.client,
      n: args.n,
      tasks: args.tasks,
      shared: args.shared,
      completed: cycle.length,
      refused,
      seconds: wall,
      ops_per_s: cycle.length / wall,
      acquire_p50_ms: percentileMs(acquire, 0.5),
      cycle_p50_ms: percentileMs(cycle, 0.5),
      cycle_p99_ms: percentileMs(cycle, 0.99),
      cpu_us_per_cycle: (cpu.user + cpu.system) / Math.max(1, cycle.length),
      server_cpu_us_per_cycle: args.serverPids.length ? servers / Math.max(1, cycle.length) : null,
      node: process.versions.node,
    }),
  );
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`node_locks: ${error.stack || error}\n`);
    process.exit(1);
  },
);
