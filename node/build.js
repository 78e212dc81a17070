#!/usr/bin/env node
"use strict";
// The package's install script (npm install runs it), and the way to
// rebuild by hand: `node build.js`.
//
// In a release tarball (scripts/release), the native module comes
// prebuilt, as redlock_client.node beside prebuilt.json, which says whom
// it fits (platform, arch, the lowest glibc). When it fits this machine
// and loads, this script builds nothing and says so. Otherwise, and in the
// repository's node/ folder (no prebuilt.json), it builds the native
// module from source with cargo and puts it beside index.js as
// redlock_client.node; a tarball has no Rust source, so there it stops
// with a message saying what to do.
//
// cargo builds the crate redlock-client-node (this folder) in release, in
// the repository's workspace (its target/ directory, or
// $CARGO_TARGET_DIR); the built library's path comes from cargo's own
// report of its artifacts, not from a guess. $CARGO names the cargo
// binary (default: cargo on the PATH, then ~/.cargo/bin/cargo).

const { spawnSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

const OUT = path.join(__dirname, "redlock_client.node");
const CRATE = "redlock-client-node";

function cargo() {
  if (process.env.CARGO) return process.env.CARGO;
  const probe = spawnSync("cargo", ["--version"], { stdio: "ignore" });
  if (probe.status === 0) return "cargo";
  const home = path.join(os.homedir(), ".cargo", "bin", "cargo");
  if (fs.existsSync(home)) return home;
  fail("cargo not found: install Rust (https://rustup.rs) or set $CARGO, then run `node build.js` here");
}

// npm (7 and later) runs an install script in the background and shows
// its output only if it fails: a first build would be minutes of silence.
// When stderr is not a terminal but the process has one (npm install in a
// shell), this script and cargo write there instead; with no terminal (CI,
// a log), to stderr as before.
function terminal() {
  if (process.stderr.isTTY) return null;
  try {
    return fs.openSync("/dev/tty", "w");
  } catch {
    return null;
  }
}

const TTY = terminal();

function say(line) {
  if (TTY === null) process.stderr.write(line);
  else fs.writeSync(TTY, line);
}

function fail(message) {
  say(`redlock-client build: ${message}\n`);
  process.exit(1);
}

// Major and minor of a glibc version ("2.36"), for comparing.
function glibcParts(text) {
  const [major, minor] = String(text).split(".").map(Number);
  return [major || 0, minor || 0];
}

// Why the prebuilt module does not fit this machine, or null when it does.
function misfit(prebuilt) {
  if (prebuilt.platform !== process.platform || prebuilt.arch !== process.arch) {
    return `it is for ${prebuilt.platform}-${prebuilt.arch}, this is ${process.platform}-${process.arch}`;
  }
  if (prebuilt.libc === "glibc") {
    const header = process.report ? process.report.getReport().header : {};
    const runtime = header.glibcVersionRuntime;
    if (!runtime) return "it needs glibc, and this system's C library is not glibc";
    const [haveMajor, haveMinor] = glibcParts(runtime);
    const [needMajor, needMinor] = glibcParts(prebuilt.glibc);
    if (haveMajor < needMajor || (haveMajor === needMajor && haveMinor < needMinor)) {
      return `it needs glibc ${prebuilt.glibc} or later, this system has ${runtime}`;
    }
  }
  try {
    require(OUT);
  } catch (error) {
    return `it does not load here: ${error.message}`;
  }
  return null;
}

// true when the prebuilt module is used; false when there is none (the
// repository's folder); exits when one is there but does not fit and
// there is no source to build from.
function usePrebuilt() {
  const manifest = path.join(__dirname, "prebuilt.json");
  if (!fs.existsSync(manifest)) return false;
  const prebuilt = JSON.parse(fs.readFileSync(manifest, "utf8"));
  const why = fs.existsSync(OUT) ? misfit(prebuilt) : "redlock_client.node is missing";
  if (why === null) {
    say(
      `redlock-client: using the prebuilt native module (${prebuilt.platform}-${prebuilt.arch}, ` +
        `glibc ${prebuilt.glibc} or later, version ${prebuilt.version}); nothing to build\n`,
    );
    return true;
  }
  if (!fs.existsSync(path.join(__dirname, "Cargo.toml"))) {
    fail(
      `the prebuilt native module does not fit this machine (${why}), and this package has no Rust ` +
        "source to build another: install from a clone of the repository instead " +
        "(npm install --install-links=false /path/to/clone/node, which builds it with cargo)",
    );
  }
  say(`redlock-client: the prebuilt native module does not fit this machine (${why}): building from source\n`);
  return false;
}

function main() {
  if (usePrebuilt()) return;
  const args = ["build", "--release", "--package", CRATE, "--message-format=json-render-diagnostics"];
  say(`redlock-client build: compiling the native module: cargo ${args.join(" ")} (a first build takes a few minutes)\n`);
  // stdout: cargo's JSON messages; stderr (progress, diagnostics): the user's.
  const built = spawnSync(cargo(), args, {
    cwd: __dirname,
    stdio: ["ignore", "pipe", TTY === null ? "inherit" : TTY],
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
  });
  if (built.error) fail(`cargo did not run: ${built.error.message}`);
  if (built.status !== 0) fail(`cargo build failed (exit ${built.status})`);
  let library = null;
  for (const line of built.stdout.split("\n")) {
    if (!line.startsWith("{")) continue;
    const message = JSON.parse(line);
    if (message.reason === "compiler-artifact" && message.target && message.target.name === "redlock_client_node") {
      library = message.filenames.find((f) => /\.(so|dylib|dll)$/.test(f)) || library;
    }
  }
  if (!library) fail("cargo reported no library for the crate");
  // A copy renamed into place: a process that has the old one loaded keeps it.
  const tmp = `${OUT}.${process.pid}.tmp`;
  fs.copyFileSync(library, tmp);
  fs.renameSync(tmp, OUT);
  say(`redlock-client build: ${OUT}\n`);
}

main();
