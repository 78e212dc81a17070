"use strict";
// redlock-client: quorum (Redlock) locks over N Redis / Valkey masters that
// load the redis-lock module, for Node.js, over the Rust client.
//
// This file checks arguments and converts values; every decision (majority,
// validity, the fencing round, the semaphore quorum, ordered release, the
// watchdog) is the Rust client's, in the native module redlock_client.node
// (src/, built by build.js). Times are milliseconds; fencing tokens are
// bigints.

const path = require("node:path");
const util = require("node:util");
const { fromFailure, invalid, tallyOfRow } = require("./failure");

const NATIVE = path.join(__dirname, "redlock_client.node");

function loadNative() {
  try {
    return require(NATIVE);
  } catch (error) {
    if (error && error.code === "MODULE_NOT_FOUND") {
      throw new Error(
        `redlock-client: the native module ${NATIVE} is not built; build it with ` +
          `"node ${path.join(__dirname, "build.js")}" (needs cargo), or reinstall the package`,
      );
    }
    throw error;
  }
}

const native = loadNative();

// `await using` needs Symbol.asyncDispose (Node 18.18, 20.4 and later
// define it); on an older Node the method is there under a registered
// symbol, unused.
const asyncDispose = Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose");

/** The value of a native outcome, or its failure thrown as the error of its kind. */
function unwrap(outcome) {
  if (outcome instanceof native.Failure) throw fromFailure(outcome.info);
  return outcome;
}

// --- argument checks: each bad argument gets an InvalidArgumentError that
// names it and what it got; nothing reaches the nodes before they pass.

function describe(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return String(value);
  return `a ${typeof value}`;
}

function options(value, what, allowed) {
  if (value === undefined) return {};
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw invalid(`${what} must be an object, not ${describe(value)}`);
  }
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) {
      throw invalid(`unknown option ${JSON.stringify(key)} of ${what} (known: ${allowed.join(", ")})`);
    }
  }
  return value;
}

function millis(value, what) {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw invalid(`${what} must be a finite number of milliseconds, at least 0; got ${describe(value)}`);
  }
  return value;
}

function optionalMillis(value, what) {
  return value === undefined ? undefined : millis(value, what);
}

function text(value, what) {
  if (typeof value !== "string") throw invalid(`${what} must be a string, not ${describe(value)}`);
  return value;
}

function count(value, what, least) {
  if (!Number.isInteger(value) || value < least || value > 0xffff_ffff) {
    throw invalid(`${what} must be a whole number from ${least} to 4294967295; got ${describe(value)}`);
  }
  return value;
}

function optionalCount(value, what, least) {
  return value === undefined || value === null ? undefined : count(value, what, least);
}

function modeName(value) {
  if (value === undefined) return "plain";
  return text(value, "mode");
}

function flag(value, what) {
  if (value === undefined) return false;
  if (typeof value !== "boolean") throw invalid(`${what} must be true or false, not ${describe(value)}`);
  return value;
}

function claimOf(resource, opts) {
  return { resource: text(resource, "resource"), mode: modeName(opts.mode), permits: optionalCount(opts.permits, "permits", 1) };
}

function setClaims(resources) {
  if (!Array.isArray(resources)) {
    throw invalid(`resources must be an array of resources (a string, or [resource, mode]), not ${describe(resources)}`);
  }
  return resources.map((member) => {
    if (typeof member === "string") return { resource: member, mode: "plain" };
    if (Array.isArray(member) && member.length === 2) {
      return { resource: text(member[0], "resource"), mode: text(member[1], "mode") };
    }
    throw invalid(`a set member is a resource or [resource, mode], not ${describe(member)}`);
  });
}

function resourceNames(resources) {
  if (!Array.isArray(resources)) throw invalid(`resources must be an array of strings, not ${describe(resources)}`);
  return resources.map((r) => text(r, "resource"));
}

const ACQUIRE = ["ttl", "mode", "permits", "fence"];
const RETRY = ["wait", "attempts", "retryDelay", "signal"];
const ACQUIRE_RETRY = [...ACQUIRE, ...RETRY];
const SET = ["ttl", "fence"];
const SET_RETRY = [...SET, ...RETRY];
const WATCHDOG = ["renewalsMax", "durationMax"];

/** The retry policy of an acquire as the native module takes it (undefined: one attempt). */
// An AbortSignal that cancels an acquire's wait (as fetch's and
// timers/promises' do), or undefined.
function signalOf(value) {
  if (value === undefined) return undefined;
  const isSignal =
    value !== null && typeof value === "object" && typeof value.aborted === "boolean" &&
    typeof value.addEventListener === "function" && typeof value.removeEventListener === "function";
  if (!isSignal) throw invalid(`signal must be an AbortSignal, not ${describe(value)}`);
  return value;
}

// The ids of acquires that wait with a signal (the native side's handle
// on them), unique within the process.
let lastAbortId = 0;

function retryOf(opts) {
  let delayMin;
  let delayMax;
  if (opts.retryDelay !== undefined) {
    const delay = opts.retryDelay;
    if (!Array.isArray(delay) || delay.length !== 2) {
      throw invalid(`retryDelay must be [min, max] milliseconds, not ${describe(delay)}`);
    }
    delayMin = millis(delay[0], "retryDelay");
    delayMax = millis(delay[1], "retryDelay");
  }
  return {
    wait: optionalMillis(opts.wait, "wait"),
    attempts: optionalCount(opts.attempts, "attempts", 1),
    delayMin,
    delayMax,
  };
}

function watchdogOf(value) {
  const opts = options(value, "the watchdog", WATCHDOG);
  return [
    opts.renewalsMax === undefined ? 10_000 : count(opts.renewalsMax, "renewalsMax", 0),
    opts.durationMax === undefined ? 3_600_000 : millis(opts.durationMax, "durationMax"),
  ];
}

function ttlOf(opts) {
  if (opts.ttl === undefined) throw invalid("ttl (milliseconds) is required");
  return millis(opts.ttl, "ttl");
}

/** One node's LOCK.INFO, with null for what it does not have. */
function lockInfo(info) {
  return Object.freeze({
    kind: info.kind,
    holder: info.holder,
    holds: info.holds,
    fence: info.fence,
    ttl: info.ttl,
    deadline: info.deadline,
    waiters: info.waiters,
    permits: info.permits ?? null,
    holders: Object.freeze(info.holders.map((h) => Object.freeze({ ...h }))),
    refused: info.refused ? Object.freeze({ ...info.refused }) : null,
  });
}

const freezeAll = (list) => Object.freeze(list.map((item) => Object.freeze(item)));
const nodesBy = (pairs, key) => Object.freeze(Object.fromEntries(pairs.map((p) => [p[key], Object.freeze([...p.nodes])])));

/** One node's INFO lock, with null for what it does not have. */
function nodeHealth(health) {
  if (!health) return null;
  return Object.freeze({
    quarantine: health.quarantineReason == null ? null : Object.freeze({ reason: health.quarantineReason, left: health.quarantineLeft }),
    evictingPolicy: health.evictingPolicy ?? null,
    evictionMode: health.evictionMode,
    fencingCounter: health.fencingCounter,
    protectionsOff: Object.freeze([...health.protectionsOff]),
    quarantinedKeys: health.quarantinedKeys,
    quarantinedDbs: health.quarantinedDbs,
    wallClockOffset: health.wallClockOffset,
    settings: Object.freeze(Object.fromEntries(health.settings)),
  });
}

/** The quorum's status from the native one: maps where the native module has lists. */
function quorumStatus(status) {
  const members = status.members.map((m) => {
    const nodes = freezeAll(
      m.nodes.map((n) => ({ node: n.node, health: nodeHealth(n.health), blocked: n.blocked ?? null, why: n.why ?? null })),
    );
    return { member: m.member, grants: nodes.every((n) => n.blocked === null), nodes };
  });
  const differences = status.differences.map((d) => [d.setting, nodesBy(d.values, "value")]);
  return Object.freeze({
    members: freezeAll(members),
    need: status.need,
    granting: status.granting,
    grants: status.grants,
    cause: status.cause ?? null,
    readyIn: status.readyIn ?? null,
    summary: status.summary,
    differences: Object.freeze(Object.fromEntries(differences)),
    protectionsOff: nodesBy(status.protectionsOff, "protection"),
  });
}

// --- the lock -------------------------------------------------------------

/**
 * A lock held on a quorum of nodes (the Rust client's Guard). Release it
 * with release(), `await using`, or Redlock.using(); a Lock that is
 * garbage-collected while held is released in the background.
 */
class Lock {
  #held;
  #resources = null;
  #controller = null;

  /** @internal Made by Redlock's acquire calls. */
  constructor(held) {
    if (!(held instanceof native.Held)) throw new TypeError("a Lock is made by Redlock's acquire calls");
    this.#held = held;
  }

  // Read from the native lock at the first use: a lock taken and released
  // without a look at them never converts them.
  #list() {
    if (this.#resources === null) {
      this.#resources = Object.freeze(
        this.#held.resources.map((r) => Object.freeze(r.permits == null ? { resource: r.resource, mode: r.mode } : r)),
      );
    }
    return this.#resources;
  }

  /** The resource (a set's first). */
  get resource() {
    return this.#list()[0].resource;
  }

  /** Every resource held, in the order given, with its mode (and a semaphore's permits). */
  get resources() {
    return this.#list();
  }

  /** "plain", "read", "write" or "permit" (a set: its first resource's). */
  get mode() {
    return this.#list()[0].mode;
  }

  /** A semaphore's permit count, or undefined. */
  get permits() {
    return this.#list()[0].permits ?? undefined;
  }

  /** The random token (32 hex digits) the lock is held with. */
  get token() {
    return this.#held.token;
  }

  /** "held", "lost", "released" or "detached". */
  get status() {
    return this.#held.status().state;
  }

  get isHeld() {
    return this.status === "held";
  }

  /** Milliseconds of validity left (0 unless held). */
  get validity() {
    return this.#held.status().validity;
  }

  /** The watchdog: "off", "running" or "stopped" (it reached its bound). */
  get watchdog() {
    return this.#held.status().watchdog;
  }

  /** The quorum fencing token if fencingToken() (or `fence: true`) got it already; else undefined. */
  get fenced() {
    return this.#held.fenced ?? undefined;
  }

  /**
   * The quorum's fencing token, a bigint strictly above every earlier
   * fenced holder's. The first call runs the fencing round (LOCK.FENCE on
   * the nodes that need it); later calls return the same token.
   */
  async fencingToken() {
    return unwrap(await this.#held.fence());
  }

  /** Extends the lock for `ttl` ms (default: the TTL it was taken with); resolves to the validity left, in ms. A failure means the lock is lost. */
  async extend(ttl) {
    return unwrap(await this.#held.extend(optionalMillis(ttl, "ttl")));
  }

  /**
   * Releases on every node; resolves at the quorum with the round's
   * counts. Rejects with NoQuorumError (phase "release") when fewer
   * released: the lock had expired or been taken there, so the work done
   * under it may have overlapped another holder's.
   */
  async release() {
    return tallyOfRow(unwrap(await this.#held.release()));
  }

  /** Gives the lock up without releasing it: it stays until its TTL, or a release by token. */
  async detach() {
    const detached = unwrap(await this.#held.detach());
    return Object.freeze({
      resource: this.resource,
      resources: this.resources,
      token: detached.token,
      fencingToken: detached.fencingToken ?? undefined,
      validity: detached.validity,
    });
  }

  /**
   * Renews the lock every ttl/3 on all N nodes, within the bounds
   * (`renewalsMax`, default 10000; `durationMax` ms, default an hour). A
   * renewal the quorum does not confirm marks the lock lost at once, and
   * `signal` fires.
   */
  async startWatchdog(limits) {
    const [renewalsMax, durationMax] = watchdogOf(limits);
    unwrap(await this.#held.startWatchdog(renewalsMax, durationMax));
  }

  /**
   * An AbortSignal that fires when the lock is lost (a renewal failed on
   * the quorum, or the validity ran out), with a LockLostError as its
   * reason; never after a release or detach.
   */
  get signal() {
    if (this.#controller === null) {
      const controller = new AbortController();
      this.#controller = controller;
      this.#held.onLost((info) => controller.abort(fromFailure(info)));
    }
    return this.#controller.signal;
  }

  /** `await using lock = await redlock.acquire(...)`: released at the end of the block (nothing to do if it was released or detached). */
  async [asyncDispose]() {
    const status = this.status;
    if (status === "held" || status === "lost") await this.release();
  }

  [util.inspect.custom]() {
    const fenced = this.fenced === undefined ? "" : ` fencingToken=${this.fenced}`;
    const status = this.#held.status();
    return `Lock <${this.resources.map((r) => r.resource).join(", ")}> ${this.mode} token=${this.token}${fenced} ${status.state} validity=${Math.round(status.validity)}ms`;
  }
}

// --- the client -----------------------------------------------------------

/** The native acquire of one resource (`claim`) or a set (`many`: the claims). */
function acquireNative(client, claim, many, ttl, fence, retry, abortId) {
  if (many) return client.acquireMany(claim, ttl, fence, retry, abortId);
  return client.acquire(claim.resource, claim.mode, claim.permits, ttl, fence, retry, abortId);
}

/**
 * acquireNative whose wait `signal` stops (the retries); an attempt under
 * way still ends, and what it took is released. Rejects with the signal's
 * reason.
 */
async function acquireUntil(signal, client, claim, many, ttl, fence, retry) {
  signal.throwIfAborted();
  lastAbortId = lastAbortId >= 0xffffffff ? 1 : lastAbortId + 1;
  const id = lastAbortId;
  const onAbort = () => client.abort(id);
  signal.addEventListener("abort", onAbort, { once: true });
  let out;
  try {
    out = await acquireNative(client, claim, many, ttl, fence, retry, id);
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
  if (out instanceof native.Failure && out.info.kind === "aborted") throw signal.reason;
  return out;
}

/**
 * A client for N lock nodes: one connection and one ordered writer per
 * node, shared by every call. Make it with `await Redlock.connect(nodes)`.
 */
class Redlock {
  #client;
  #closed = false;

  /** @internal Use Redlock.connect(). */
  constructor(client) {
    if (!(client instanceof native.Client)) throw new TypeError("use Redlock.connect(nodes, options)");
    this.#client = client;
  }

  /**
   * Connects to every node (`redis://[[user]:password@]host:port[/db]`), in
   * parallel, each within `connectTimeout` ms. An unreachable node is no
   * error: it counts as such in each round, and later calls try it again.
   */
  static async connect(nodes, connectOptions) {
    if (!Array.isArray(nodes)) {
      throw invalid(`nodes must be an array of node URLs (redis://host:port), not ${describe(nodes)}`);
    }
    const urls = nodes.map((n) => text(n, "a node URL"));
    const opts = options(connectOptions, "the connect options", ["connectTimeout", "commandTimeout", "reconnectBackoff"]);
    const client = unwrap(
      await native.connect(
        urls,
        opts.connectTimeout === undefined ? 500 : millis(opts.connectTimeout, "connectTimeout"),
        opts.commandTimeout === undefined ? 250 : millis(opts.commandTimeout, "commandTimeout"),
        opts.reconnectBackoff === undefined ? 250 : millis(opts.reconnectBackoff, "reconnectBackoff"),
      ),
    );
    return new Redlock(client);
  }

  #open() {
    if (this.#closed) throw invalid("this Redlock client is closed");
    return this.#client;
  }

  /** The node URLs, in order. */
  get nodes() {
    return this.#client.nodes;
  }

  /** N / 2 + 1. */
  get majority() {
    return this.#client.majority;
  }

  /** The grants a lock taken in this mode needs (a semaphore with L permits: floor(L*N/(L+1))+1). */
  quorum(mode, permits) {
    return unwrap(this.#client.quorum(modeName(mode), optionalCount(permits, "permits", 1)));
  }

  // The native acquire's Promise (of a Held or a Failure): one resource
  // (`claim`, as claimOf makes it) or a set (`many`: setClaims').
  #take(claim, many, opts, retry) {
    const client = this.#open();
    const ttl = ttlOf(opts);
    const fence = flag(opts.fence, "fence");
    const signal = signalOf(opts.signal);
    if (signal === undefined) return acquireNative(client, claim, many, ttl, fence, retry, undefined);
    return acquireUntil(signal, client, claim, many, ttl, fence, retry);
  }

  /**
   * One attempt to take `resource`: { ttl (ms), mode ("plain", "read",
   * "write", "permit"), permits (for "permit"), fence (run the fencing
   * round too) }. One round trip; rejects with LockHeldError,
   * NoQuorumError (QuarantinedError, NodesUnreachableError),
   * ExpiredBeforeUseError or InvalidArgumentError, having released what it
   * took.
   */
  async tryAcquire(resource, acquireOptions) {
    const opts = options(acquireOptions, "the acquire options", ACQUIRE);
    return new Lock(unwrap(await this.#take(claimOf(resource, opts), false, opts, undefined)));
  }

  /**
   * tryAcquire, retried after a random delay while the failure is
   * retryable: within `wait` ms in all, at most `attempts` attempts,
   * `retryDelay` [min, max] ms between them (default: 3 attempts, 50-200 ms).
   * `signal` (an AbortSignal) stops the wait: rejects with its reason, and
   * an attempt under way releases what it took.
   */
  async acquire(resource, acquireOptions) {
    const opts = options(acquireOptions, "the acquire options", ACQUIRE_RETRY);
    return new Lock(unwrap(await this.#take(claimOf(resource, opts), false, opts, retryOf(opts))));
  }

  /**
   * One attempt to take a set of resources all or nothing, with one token
   * and one fencing token (one LOCK.MACQUIRE per node): each member a
   * resource (plain) or [resource, "plain" | "read" | "write"].
   */
  async tryAcquireMany(resources, acquireOptions) {
    const opts = options(acquireOptions, "the acquire options", SET);
    return new Lock(unwrap(await this.#take(setClaims(resources), true, opts, undefined)));
  }

  /** tryAcquireMany, retried like acquire. */
  async acquireMany(resources, acquireOptions) {
    const opts = options(acquireOptions, "the acquire options", SET_RETRY);
    return new Lock(unwrap(await this.#take(setClaims(resources), true, opts, retryOf(opts))));
  }

  /**
   * Runs `routine(signal, lock)` while holding the lock: acquires (retried
   * as acquire; a set when `resources` is an array), starts the watchdog
   * (`watchdog`: its bounds, or false for none), and releases when the
   * routine settles. `signal` is the lock's AbortSignal: it fires when the
   * lock is lost. Resolves to the routine's result; rejects with the
   * routine's error, with the LockLostError if the lock was lost meanwhile,
   * or with the release's error.
   */
  async using(resources, usingOptions, routine) {
    const opts = options(usingOptions, "the using options", [...ACQUIRE, ...RETRY, "watchdog"]);
    if (typeof routine !== "function") throw invalid(`routine must be a function, not ${describe(routine)}`);
    const { watchdog, ...acquireOptions } = opts;
    const limits = watchdog === false ? null : watchdogOf(watchdog);
    const lock = Array.isArray(resources)
      ? await this.acquireMany(resources, acquireOptions)
      : await this.acquire(resources, acquireOptions);
    let result;
    try {
      if (limits !== null) await lock.startWatchdog({ renewalsMax: limits[0], durationMax: limits[1] });
      result = await routine(lock.signal, lock);
    } catch (error) {
      await lock.release().catch(() => {});
      throw error;
    }
    if (lock.signal.aborted) {
      await lock.release().catch(() => {});
      throw lock.signal.reason;
    }
    await lock.release();
    return result;
  }

  /** Release by token, for tools: { mode, permits } as it was taken. Resolves with the counts when the mode's quorum released. */
  async release(resource, token, releaseOptions) {
    const opts = options(releaseOptions, "the release options", ["mode", "permits"]);
    const claim = claimOf(resource, opts);
    const out = await this.#open().release([claim.resource], false, text(token, "token"), claim.mode, claim.permits);
    return tallyOfRow(unwrap(out));
  }

  /** Release of a set by token. */
  async releaseMany(resources, token) {
    const out = await this.#open().release(resourceNames(resources), true, text(token, "token"), "plain", undefined);
    return tallyOfRow(unwrap(out));
  }

  /** Extend by token for { ttl } ms; resolves to the validity left, in ms. */
  async extend(resource, token, extendOptions) {
    const opts = options(extendOptions, "the extend options", ["ttl", "mode", "permits"]);
    const claim = claimOf(resource, opts);
    const ttl = ttlOf(opts);
    return unwrap(
      await this.#open().extend([claim.resource], false, text(token, "token"), ttl, claim.mode, claim.permits),
    );
  }

  /** Extend a set by token. */
  async extendMany(resources, token, extendOptions) {
    const opts = options(extendOptions, "the extend options", ["ttl"]);
    const ttl = ttlOf(opts);
    return unwrap(await this.#open().extend(resourceNames(resources), true, text(token, "token"), ttl, "plain", undefined));
  }

  /**
   * Reentrant acquire by `owner` (LOCK.ENTER on every node, fenced at
   * once): the first entry grants a new fencing token, later ones add a
   * hold and return the same. Resolves to { fencingToken, validity }.
   */
  async enter(resource, owner, enterOptions) {
    const opts = options(enterOptions, "the enter options", ["ttl"]);
    const out = await this.#open().enter(text(resource, "resource"), text(owner, "owner"), ttlOf(opts));
    const entered = unwrap(out);
    return Object.freeze({ fencingToken: entered.fencingToken, validity: entered.validity });
  }

  /** Reentrant release: resolves to the holds left (0: free). */
  async exit(resource, owner) {
    return unwrap(await this.#open().exit(text(resource, "resource"), text(owner, "owner")));
  }

  /** LOCK.INFO from every node, in node order: [{ node, info, error }]. */
  async info(resource) {
    const reports = await this.#open().info(text(resource, "resource"));
    return reports.map((r) =>
      Object.freeze({ node: r.node, shard: r.shard ?? null, info: r.info ? lockInfo(r.info) : null, error: r.error ?? null }),
    );
  }

  /**
   * INFO lock of every node, as `redlock status` shows it: can a majority
   * grant right now (`grants`), and if not why (`cause`: "unreachable",
   * "quarantined", "evicting", "no-module" or "error", when one kind alone
   * keeps the majority from granting; `readyIn`: ms until enough
   * quarantines end), with each member's nodes and their health. Never
   * rejects for the nodes' sake: an unreachable node is a row that says so.
   */
  async status() {
    return quorumStatus(await this.#open().status());
  }

  /** Waits (bounded) for the calls that rounds left running in the background: call it before the process exits. */
  async settle() {
    await this.#client.settle();
  }

  /** Settles, then refuses further calls. */
  async close() {
    this.#closed = true;
    await this.#client.settle();
  }

  /** `await using redlock = await Redlock.connect(...)`: closed at the end of the block. */
  async [asyncDispose]() {
    await this.close();
  }

  [util.inspect.custom]() {
    return `Redlock <${this.nodes.join(", ")}>${this.#closed ? " closed" : ""}`;
  }
}

/**
 * The pub/sub channel on which the lock module announces that `resource`'s
 * lock was freed (the message "released" or "expired"), and the command to
 * subscribe with, for code that waits in its own event loop:
 * `{ channel: "__lock@0__:job", subscribe: "SUBSCRIBE" }` on a master; with
 * `cluster: true` (a cluster member) `{ channel: "__lock@0__:{job}",
 * subscribe: "SSUBSCRIBE" }`, sent to a node of the shard that serves the
 * resource. `db`: the database the resource's locks are in.
 */
function freedChannel(resource, options = {}) {
  if (typeof resource !== "string") throw new TypeError(`resource must be a string, not ${typeof resource}`);
  const { cluster = false, db = 0 } = options ?? {};
  if (typeof cluster !== "boolean") throw new TypeError(`cluster must be a boolean, not ${typeof cluster}`);
  if (!Number.isInteger(db) || db < 0 || db > 0x7fffffff) {
    throw invalid(`db must be an integer between 0 and ${0x7fffffff}, got ${String(db)}`);
  }
  const [channel, subscribe] = native.freedChannel(resource, cluster, db);
  return { channel, subscribe };
}

// The workspace version (Cargo.toml), compiled into the native module; the
// package.json that scripts/release packs carries the same.
const version = native.version();

// Shorthand only, and a spread of require(): Node's ES module loader finds
// these names as named exports (`import { Redlock } from "redlock-client"`).
module.exports = { Redlock, Lock, freedChannel, version, ...require("./errors") };
