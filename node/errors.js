"use strict";
// The errors of redlock-client: one class per error of the Rust client.
//
//   RedlockError
//   ├── LockHeldError          another owner holds it (retryable)
//   ├── NoQuorumError          too few nodes said yes (retryable); the counts are in .tally
//   │   ├── QuarantinedError       ... because nodes are in their restart quarantine
//   │   └── NodesUnreachableError  ... because nodes did not answer in time
//   ├── ExpiredBeforeUseError  granted, but the rounds ate the whole TTL (retryable)
//   ├── LockLostError          the lock is lost (.reason; a failed renewal is the .cause)
//   └── InvalidArgumentError   a caller mistake
//
// The messages are the Rust client's own, with the per-node counts, e.g.
// "no quorum for 'orders:42': 2 of 5 granted (need 3); 3 unreachable".
// The native module hands a failure over as a plain object (its kind,
// message, resource, round, counts); fromFailure() picks the class.

class RedlockError extends Error {
  constructor(message, { resource = null, phase = null, tally = null, reason = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    /** The resource, or null when the error is not about one. */
    this.resource = resource;
    /** The quorum round: "acquire", "fence", "extend", "release", "enter", "exit"; or null. */
    this.phase = phase;
    /** The round's per-node counts, when a round failed. */
    this.tally = tally;
    /** Why a lock is lost (LockLostError). */
    this.reason = reason;
  }

  /** Whether a later attempt may succeed (the client's is_retryable). */
  get retryable() {
    return false;
  }
}

class LockHeldError extends RedlockError {
  get retryable() {
    return true;
  }
}

class NoQuorumError extends RedlockError {
  get retryable() {
    return true;
  }
}

class QuarantinedError extends NoQuorumError {}

class NodesUnreachableError extends NoQuorumError {}

class ExpiredBeforeUseError extends RedlockError {
  get retryable() {
    return true;
  }
}

class LockLostError extends RedlockError {}

class InvalidArgumentError extends RedlockError {}

const KINDS = {
  held: LockHeldError,
  expired_before_use: ExpiredBeforeUseError,
  lost: LockLostError,
  invalid_argument: InvalidArgumentError,
};

// The most specific class for a round short of its quorum: the nodes whose
// answers made the difference (without their refusals the round had its
// quorum).
function noQuorumClass(tally) {
  if (tally) {
    if (tally.quarantined && tally.yes + tally.quarantined >= tally.need) return QuarantinedError;
    const silent = tally.unreachable + tally.timedOut + tally.clusterUnavailable;
    if (silent && tally.yes + silent >= tally.need) return NodesUnreachableError;
  }
  return NoQuorumError;
}

// A counts object with only the fields it has (the native one gives null
// for a missing quarantine time and first failure).
function tallyOf(native) {
  if (!native) return null;
  return Object.freeze({
    nodes: native.nodes,
    need: native.need,
    yes: native.yes,
    no: native.no,
    quarantined: native.quarantined,
    quarantineLeft: native.quarantineLeft ?? null,
    unreachable: native.unreachable,
    timedOut: native.timedOut,
    failed: native.failed,
    firstFailure: native.firstFailure ?? null,
    pending: native.pending,
    clusterUnavailable: native.clusterUnavailable,
    firstClusterUnavailable: native.firstClusterUnavailable ?? null,
  });
}

/** The error for a native failure (its `info`). */
function fromFailure(info) {
  const cls = info.kind === "no_quorum" ? noQuorumClass(info.tally) : KINDS[info.kind] || RedlockError;
  const cause = info.cause ? fromFailure(info.cause) : undefined;
  return new cls(info.message, {
    resource: info.resource ?? null,
    phase: info.phase ?? null,
    tally: tallyOf(info.tally),
    reason: info.reason ?? null,
    cause,
  });
}

/** An InvalidArgumentError found by the JavaScript layer, worded as the client words its own. */
function invalid(message) {
  return new InvalidArgumentError(`invalid argument: ${message}`);
}

module.exports = {
  RedlockError,
  LockHeldError,
  NoQuorumError,
  QuarantinedError,
  NodesUnreachableError,
  ExpiredBeforeUseError,
  LockLostError,
  InvalidArgumentError,
  fromFailure,
  invalid,
  tallyOf,
};
