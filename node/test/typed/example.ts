// A typed use of the package, checked by `tsc` (test/types.test.js) and
// then run against real masters: the types must accept what the README
// shows and refuse what the API refuses (each @ts-expect-error below must
// be an error, or tsc fails). `await using` is compiled by tsc down to
// Symbol.asyncDispose calls, so it runs on Node 18.18 and later.
import {
  ConnectOptions,
  InvalidArgumentError,
  Lock,
  LockHeldError,
  NoQuorumError,
  Redlock,
  RedlockError,
  QuorumStatus,
  Tally,
  TlsOptions,
  freedChannel,
} from "redlock-client";

// TLS settings (rediss:// members): the client's, in camelCase.
const tlsOptions: ConnectOptions = { tls: { caFile: "/etc/redlock/ca.pem", insecureSkipVerify: false } };
// @ts-expect-error a path is a string
const badTls: TlsOptions = { caFile: 1 };
void tlsOptions;
void badTls;

declare const process: { argv: string[] };

async function main(nodes: string[], resource: string): Promise<string> {
  await using redlock = await Redlock.connect(nodes, { commandTimeout: 250 });
  let fence: bigint;
  {
    await using lock: Lock = await redlock.acquire(resource, { ttl: 10_000, wait: 5_000 });
    fence = await lock.fencingToken();
    const left: number = lock.validity;
    if (left <= 0) throw new Error("not held");
  } // released here
  const again = await redlock.tryAcquire(resource, { ttl: 10_000, fence: true });
  if (again.fenced === undefined || again.fenced <= fence) throw new Error("the fencing token did not rise");
  const tally: Tally = await again.release();

  const result: number = await redlock.using([`{${resource}}:a`, [`{${resource}}:b`, "read"]], { ttl: 5_000 }, async (signal, lock) => {
    if (signal.aborted || lock.resources.length !== 2) throw new Error("bad set");
    return lock.resources.length;
  });

  try {
    await redlock.tryAcquire(resource, { ttl: 1 });
    throw new Error("not refused");
  } catch (error) {
    if (!(error instanceof InvalidArgumentError) || !(error instanceof RedlockError)) throw error;
  }
  const held = await redlock.tryAcquire(resource, { ttl: 5_000, mode: "permit", permits: 2 });
  await held.release();
  const health: QuorumStatus = await redlock.status();
  const counters: bigint[] = health.members.map((m) => m.nodes[0].health?.fencingCounter ?? 0n);
  if (!health.grants || counters.length !== nodes.length || health.cause !== null) throw new Error(health.summary);
  const errorKinds: Array<typeof RedlockError> = [LockHeldError, NoQuorumError];
  const freed = freedChannel(resource, { cluster: false });
  if (freed.channel !== `__lock@0__:${resource}` || freed.subscribe !== "SUBSCRIBE") throw new Error(freed.channel);

  // @ts-expect-error: "exclusive" is no mode (plain or write)
  void redlock.tryAcquire(resource, { ttl: 5_000, mode: "exclusive" }).catch(() => {});
  // @ts-expect-error: the TTL is required
  void redlock.tryAcquire(resource, {}).catch(() => {});
  // @ts-expect-error: a fencing token is a bigint, not a number
  const wrong: number = fence;
  // @ts-expect-error: a set member's mode is never a permit
  void redlock.tryAcquireMany([[resource, "permit"]], { ttl: 5_000 }).catch(() => {});
  // @ts-expect-error: the subscribe command is one of two
  const verb: "PSUBSCRIBE" = freed.subscribe;
  void wrong;
  void verb;

  return `${tally.yes >= tally.need} ${result} ${errorKinds.length} ok`;
}

main(JSON.parse(process.argv[2]), process.argv[3]).then(
  (out) => console.log(out),
  (error) => {
    console.error(error);
    throw error;
  },
);
