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
//   └── InvalidArgumentError   a caller mistake, or a request the nodes refuse (at the first attempt)
//
// The messages are the Rust client's own, with the per-node counts, e.g.
// "no quorum for 'orders:42': 2 of 5 granted (need 3); 3 unreachable".
// The native module hands a failure over as a plain object (its kind,
// message, resource, round, counts); failure.js picks the class.

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

// Only the classes: Node's ES module loader finds these names as named
// exports of the package (index.js spreads them into its own).
module.exports = {
  RedlockError,
  LockHeldError,
  NoQuorumError,
  QuarantinedError,
  NodesUnreachableError,
  ExpiredBeforeUseError,
  LockLostError,
  InvalidArgumentError,
};
