// Types of redlock-client (index.js). Times are milliseconds; fencing
// tokens are bigints.

/** What a grant asks the nodes for ("write" sends the module's LOCK.EXCLUSIVE). */
export type Mode = "plain" | "read" | "write" | "permit";
/** The modes a member of a set may have. */
export type SetMode = "plain" | "read" | "write";
/** One member of a set: a resource (plain) or [resource, mode]. */
export type SetMember = string | readonly [string, SetMode];

export interface ConnectOptions {
  /** Opening a connection to one node, ms (500). */
  connectTimeout?: number;
  /** One command on one node, ms (250). */
  commandTimeout?: number;
  /** After a failed connect, ms during which the node counts as unreachable at once (250). */
  reconnectBackoff?: number;
}

export interface AcquireOptions {
  /** The lock's time to live, ms. */
  ttl: number;
  /** "plain" (default), "read", "write" or "permit". */
  mode?: Mode;
  /** A semaphore's permit count (mode "permit" only; every client must give the same). */
  permits?: number;
  /** Run the fencing round too, so that `lock.fenced` has the token at once. */
  fence?: boolean;
}

export interface RetryOptions {
  /** Retry within this many ms in all. */
  wait?: number;
  /** At most this many attempts. */
  attempts?: number;
  /** [min, max] ms of random delay between two attempts. */
  retryDelay?: readonly [number, number];
  /** Stops the wait: the call rejects with the signal's reason (what an attempt under way took is released). */
  signal?: AbortSignal;
}

export interface SetOptions {
  ttl: number;
  fence?: boolean;
}

export interface WatchdogLimits {
  /** Stop after this many renewals (10000). */
  renewalsMax?: number;
  /** Stop renewing after this many ms (an hour). */
  durationMax?: number;
}

export interface UsingOptions extends AcquireOptions, RetryOptions {
  /** The watchdog's bounds, or false for no watchdog. */
  watchdog?: WatchdogLimits | false;
}

export interface ByTokenOptions {
  mode?: Mode;
  permits?: number;
}

/** A round's answers, counted by kind. */
export interface Tally {
  readonly nodes: number;
  readonly need: number;
  readonly yes: number;
  readonly no: number;
  readonly quarantined: number;
  /** The longest quarantine left among the quarantined nodes, ms. */
  readonly quarantineLeft: number | null;
  readonly unreachable: number;
  readonly timedOut: number;
  readonly failed: number;
  readonly firstFailure: string | null;
  /** Nodes still to answer when the round returned at its quorum. */
  readonly pending: number;
  /** Cluster members that could not route the call (CLUSTERDOWN, no master for the slot, too many redirects, no seed answering). */
  readonly clusterUnavailable: number;
  /** Why, for the first of them (it names the member). */
  readonly firstClusterUnavailable: string | null;
}

export interface ResourceHeld {
  readonly resource: string;
  readonly mode: Mode;
  readonly permits?: number;
}

export interface Detached {
  readonly resource: string;
  readonly resources: readonly ResourceHeld[];
  readonly token: string;
  readonly fencingToken: bigint | undefined;
  /** ms of validity left when it was detached. */
  readonly validity: number;
}

export interface Entered {
  readonly fencingToken: bigint;
  /** ms of validity left when it was granted. */
  readonly validity: number;
}

export interface HolderInfo {
  readonly holder: string;
  readonly mode: string;
  readonly fence: bigint;
  readonly ttl: number;
  readonly deadline: number;
}

export interface LockInfo {
  /** "plain", "reentrant", "shared", "semaphore", or "none" (nobody holds it but a grant is refused). */
  readonly kind: string;
  readonly holder: string;
  readonly holds: number;
  readonly fence: bigint;
  /** ms left on that node. */
  readonly ttl: number;
  /** The node's deadline, epoch ms of its wall clock. */
  readonly deadline: number;
  readonly waiters: number;
  readonly permits: number | null;
  readonly holders: readonly HolderInfo[];
  /** Why a node refuses a new grant of a lock nobody holds, for how many ms (-1: until something changes). */
  readonly refused: { readonly code: string; readonly ms: number; readonly reason: string } | null;
}

export interface NodeInfo {
  /** The member as given (`redis://...` or `redis+cluster://...`). */
  readonly node: string;
  /** For a cluster member, the master that answered (`host:port`); null otherwise. */
  readonly shard: string | null;
  /** null when no lock is held there. */
  readonly info: LockInfo | null;
  /** Why the node gave no answer. */
  readonly error: string | null;
}

/** What a reachable node with the module says of itself (INFO lock). */
export interface NodeHealth {
  /** Its start-up or promotion quarantine in force ("startup" or "promotion", ms left); null when none. */
  readonly quarantine: { readonly reason: string; readonly left: number } | null;
  /** The maxmemory-policy that can evict lock keys; null when none can. */
  readonly evictingPolicy: string | null;
  /** lock.eviction-mode: "refuse" or "quarantine". */
  readonly evictionMode: string;
  readonly fencingCounter: bigint;
  /** Protections its settings turn off, e.g. ["startup-quarantine"]. */
  readonly protectionsOff: readonly string[];
  readonly quarantinedKeys: number;
  readonly quarantinedDbs: number;
  /** Wall clock minus module clock, ms: non-zero after a clock jump. */
  readonly wallClockOffset: number;
  /** The settings in force: { max_ttl_ms: "30000", ... }. */
  readonly settings: Readonly<Record<string, string>>;
}

/** Why a node cannot grant now. */
export type Blocked = "unreachable" | "no-module" | "quarantined" | "evicting" | "error";

export interface NodeStatus {
  readonly node: string;
  /** null when the node gave no INFO lock (see `blocked`). */
  readonly health: NodeHealth | null;
  /** Why it cannot grant now, null when it can; `why` in words. */
  readonly blocked: Blocked | null;
  readonly why: string | null;
}

/** One quorum member (one vote): a master, or a cluster with a node per shard master. */
export interface MemberStatus {
  readonly member: string;
  /** Whether every node of the member can grant now. */
  readonly grants: boolean;
  readonly nodes: readonly NodeStatus[];
}

/** status(): every member's health, and whether a majority can grant right now. */
export interface QuorumStatus {
  readonly members: readonly MemberStatus[];
  readonly need: number;
  readonly granting: number;
  readonly grants: boolean;
  /** The kind of refusal that alone keeps the majority from granting; null when it grants or the causes are mixed. */
  readonly cause: Blocked | null;
  /** ms until enough quarantines end for a majority to grant; null otherwise. */
  readonly readyIn: number | null;
  /** The verdict in one line, as `redlock status` prints it. */
  readonly summary: string;
  /** { setting: { value: [nodes] } } for the settings that differ between nodes. */
  readonly differences: Readonly<Record<string, Readonly<Record<string, readonly string[]>>>>;
  /** { protection: [nodes] } for the protections some node has off. */
  readonly protectionsOff: Readonly<Record<string, readonly string[]>>;
}

/** A lock held on a quorum of nodes. */
export class Lock {
  private constructor();
  readonly resource: string;
  readonly resources: readonly ResourceHeld[];
  readonly mode: Mode;
  readonly permits: number | undefined;
  readonly token: string;
  readonly status: "held" | "lost" | "released" | "detached";
  readonly isHeld: boolean;
  /** ms of validity left. */
  readonly validity: number;
  readonly watchdog: "off" | "running" | "stopped";
  /** The fencing token once fencingToken() (or `fence: true`) got it. */
  readonly fenced: bigint | undefined;
  /** Fires when the lock is lost; its reason is a LockLostError. */
  readonly signal: AbortSignal;
  /** The quorum's fencing token (the first call runs the fencing round). */
  fencingToken(): Promise<bigint>;
  /** Resolves to the validity left, ms. */
  extend(ttl?: number): Promise<number>;
  release(): Promise<Tally>;
  detach(): Promise<Detached>;
  startWatchdog(limits?: WatchdogLimits): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A client for N lock nodes. */
export class Redlock {
  private constructor();
  static connect(nodes: readonly string[], options?: ConnectOptions): Promise<Redlock>;
  readonly nodes: readonly string[];
  readonly majority: number;
  quorum(mode?: Mode, permits?: number): number;
  tryAcquire(resource: string, options: AcquireOptions): Promise<Lock>;
  acquire(resource: string, options: AcquireOptions & RetryOptions): Promise<Lock>;
  tryAcquireMany(resources: readonly SetMember[], options: SetOptions): Promise<Lock>;
  acquireMany(resources: readonly SetMember[], options: SetOptions & RetryOptions): Promise<Lock>;
  using<T>(
    resources: string | readonly SetMember[],
    options: UsingOptions,
    routine: (signal: AbortSignal, lock: Lock) => Promise<T> | T,
  ): Promise<T>;
  release(resource: string, token: string, options?: ByTokenOptions): Promise<Tally>;
  releaseMany(resources: readonly string[], token: string): Promise<Tally>;
  extend(resource: string, token: string, options: { ttl: number } & ByTokenOptions): Promise<number>;
  extendMany(resources: readonly string[], token: string, options: { ttl: number }): Promise<number>;
  enter(resource: string, owner: string, options: { ttl: number }): Promise<Entered>;
  exit(resource: string, owner: string): Promise<number>;
  info(resource: string): Promise<NodeInfo[]>;
  status(): Promise<QuorumStatus>;
  settle(): Promise<void>;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** The channel a freed lock is announced on, and the command to subscribe with. */
export interface FreedChannel {
  channel: string;
  /** "SSUBSCRIBE" on a cluster member (at the shard that serves the resource), else "SUBSCRIBE". */
  subscribe: "SUBSCRIBE" | "SSUBSCRIBE";
}

/** The package's version (the workspace's, from Cargo.toml). */
export const version: string;

export function freedChannel(resource: string, options?: { cluster?: boolean; db?: number }): FreedChannel;

export interface RedlockErrorFields {
  resource?: string | null;
  phase?: string | null;
  tally?: Tally | null;
  reason?: string | null;
  cause?: unknown;
}

export class RedlockError extends Error {
  constructor(message: string, fields?: RedlockErrorFields);
  /** The resource, or null when the error is not about one. */
  readonly resource: string | null;
  /** The quorum round: "acquire", "fence", "extend", "release", "enter", "exit"; or null. */
  readonly phase: "acquire" | "fence" | "extend" | "release" | "enter" | "exit" | null;
  /** The failed round's per-node counts. */
  readonly tally: Tally | null;
  /** LockLostError: "expired", "watchdog_limit" or "renewal_failed". */
  readonly reason: "expired" | "watchdog_limit" | "renewal_failed" | null;
  /** Whether a later attempt may succeed. */
  readonly retryable: boolean;
}
export class LockHeldError extends RedlockError {}
export class NoQuorumError extends RedlockError {}
export class QuarantinedError extends NoQuorumError {}
export class NodesUnreachableError extends NoQuorumError {}
export class ExpiredBeforeUseError extends RedlockError {}
export class LockLostError extends RedlockError {}
export class InvalidArgumentError extends RedlockError {}
