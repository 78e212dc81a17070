"use strict";
// A native failure (a plain object: its kind, message, resource, round,
// counts) as the error class of its kind (errors.js), and the JavaScript
// layer's own InvalidArgumentError.

const errors = require("./errors");

const KINDS = {
  held: errors.LockHeldError,
  expired_before_use: errors.ExpiredBeforeUseError,
  lost: errors.LockLostError,
  invalid_argument: errors.InvalidArgumentError,
};

// The most specific class for a round short of its quorum: the nodes whose
// answers made the difference (without their refusals the round had its
// quorum).
function noQuorumClass(tally) {
  if (tally) {
    if (tally.quarantined && tally.yes + tally.quarantined >= tally.need) return errors.QuarantinedError;
    const silent = tally.unreachable + tally.timedOut + tally.clusterUnavailable;
    if (silent && tally.yes + silent >= tally.need) return errors.NodesUnreachableError;
  }
  return errors.NoQuorumError;
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
    firstUnreachable: native.firstUnreachable ?? null,
    timedOut: native.timedOut,
    failed: native.failed,
    firstFailure: native.firstFailure ?? null,
    pending: native.pending,
    clusterUnavailable: native.clusterUnavailable,
    firstClusterUnavailable: native.firstClusterUnavailable ?? null,
  });
}

// The same from what a release resolves to: the native TallyRow, one
// number for the usual tally (nodes, need, yes, no and pending, 10 bits
// each from the lowest; every other count 0, no text), else a TallyInfo.
const TALLY_FIELD = 1024;

function tallyOfRow(row) {
  if (typeof row !== "number") return tallyOf(row);
  const field = (i) => Math.floor(row / TALLY_FIELD ** i) % TALLY_FIELD;
  return Object.freeze({
    nodes: field(0),
    need: field(1),
    yes: field(2),
    no: field(3),
    quarantined: 0,
    quarantineLeft: null,
    unreachable: 0,
    firstUnreachable: null,
    timedOut: 0,
    failed: 0,
    firstFailure: null,
    pending: field(4),
    clusterUnavailable: 0,
    firstClusterUnavailable: null,
  });
}

/** The error for a native failure (its `info`). */
function fromFailure(info) {
  const cls = info.kind === "no_quorum" ? noQuorumClass(info.tally) : KINDS[info.kind] || errors.RedlockError;
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
  return new errors.InvalidArgumentError(`invalid argument: ${message}`);
}

module.exports = { fromFailure, invalid, tallyOf, tallyOfRow };
