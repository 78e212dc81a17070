"use strict";
// The bundled types (index.d.ts): `tsc` checks a typed example
// (typed/example.ts: what the README shows is accepted, each
// @ts-expect-error line must be refused), compiles it, and the compiled
// example runs against real masters (`await using` compiled down to
// Symbol.asyncDispose calls).
//
// tsc comes from $REDLOCK_TSC, else target/node-tools (scripts/test
// installs a pinned typescript there); without it the test is skipped
// with that said.

const assert = require("node:assert/strict");
const { spawnSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { test } = require("node:test");

const { Cluster, REPO, resourceName } = require("./nodes");

/** The folder of the package under test: the installed one when NODE_PATH leads to it, as package.js finds it. */
function packageDir() {
  try {
    return path.dirname(require.resolve("redlock-client/package.json"));
  } catch {
    return path.resolve(__dirname, "..");
  }
}

function tsc() {
  const tool = process.env.REDLOCK_TSC || path.join(REPO, "target", "node-tools", "node_modules", ".bin", "tsc");
  return fs.existsSync(tool) ? tool : null;
}

test("the types accept the typed example and refuse its mistakes; the example runs", { timeout: 120_000 }, async (t) => {
  const tool = tsc();
  if (tool === null) {
    t.skip("no tsc: set REDLOCK_TSC, or run scripts/test (it installs typescript under target/node-tools)");
    return;
  }
  const out = fs.mkdtempSync(path.join(os.tmpdir(), "redlock-node-types-"));
  const cluster = await Cluster.start(5);
  try {
    const compiled = spawnSync(tool, ["-p", path.join(__dirname, "typed"), "--outDir", out], {
      encoding: "utf8",
      timeout: 90_000,
    });
    assert.equal(compiled.status, 0, `tsc:\n${compiled.stdout}${compiled.stderr}`);
    // The compiled example requires the package by name: the one under
    // test (package.js), installed or this folder.
    fs.mkdirSync(path.join(out, "node_modules"));
    fs.symlinkSync(packageDir(), path.join(out, "node_modules", "redlock-client"));
    const run = spawnSync(process.execPath, [path.join(out, "example.js"), JSON.stringify(cluster.urls), resourceName(t)], {
      encoding: "utf8",
      timeout: 30_000,
    });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout.trim(), "true 2 2 ok");
  } finally {
    cluster.close();
    fs.rmSync(out, { recursive: true, force: true });
  }
});
