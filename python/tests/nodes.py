"""Real lock nodes for the tests: redis-server processes with the module.

Each server gets a free loopback port and its own temporary directory (its
log there), is started with ``quarantine-ms 0`` unless told otherwise (a new
node grants at once), answers PING as itself (its ``process_id``) before it
is used, and is killed by PID (SIGKILL, which also ends a SIGSTOPped one)
when the test's finalizer runs, also when the test failed. Every wait has a
deadline.

The server binary is ``$LOCK_SERVER_BIN`` (default ``redis-server``) and the
module ``$LOCK_MODULE_SO`` (default: the repository's
``target/release/libredis_lock.so``), as for the Rust tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
START_DEADLINE = 20.0


def server_bin() -> str:
    return os.environ.get("LOCK_SERVER_BIN") or "redis-server"


def module_so() -> str:
    so = os.environ.get("LOCK_MODULE_SO") or str(REPO / "target" / "release" / "libredis_lock.so")
    if not Path(so).is_file():
        raise RuntimeError(f"module {so} not found: cargo build --release --lib, or set LOCK_MODULE_SO")
    return so


def server_name() -> str:
    """"Valkey 9.1.2 (path)", from the binary's --version line."""
    out = subprocess.run([server_bin(), "--version"], capture_output=True, text=True, timeout=10).stdout
    words = out.split()
    version = next((w[2:] for w in words if w.startswith("v=")), "?")
    return f"{words[0] if words else '?'} {version} ({server_bin()})"


def wait_until(within: float, what: str, check: Callable[[], bool], every: float = 0.01) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {within} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def encode(*words: object) -> bytes:
    out = [b"*%d\r\n" % len(words)]
    for word in words:
        data = word if isinstance(word, bytes) else str(word).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def run_python(script: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Runs ``script`` in another interpreter (this one's), from this
    directory: the package is the installed one, not the source tree."""
    command = [sys.executable, "-c", script, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=Path(__file__).parent)


class ReplyError(Exception):
    pass


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def reply(self) -> object:
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return ReplyError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.exactly(n).decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ConnectionError(f"unexpected reply line {line!r}")


class Server:
    """One redis-server with the module, stopped by :meth:`close`."""

    def __init__(self, module_args: Sequence[str] = (), prefix: Sequence[str] = ()) -> None:
        self.module_args = list(module_args)
        # A command to start the server under, e.g. taskset (the benchmark).
        self.prefix = list(prefix)
        if "quarantine-ms" not in self.module_args:
            self.module_args += ["quarantine-ms", "0"]
        self.process: Optional[subprocess.Popen] = None
        failures = []
        for _ in range(5):
            self.port = free_port()
            self.dir = tempfile.mkdtemp(prefix="redlock-py-test-")
            if self._spawn():
                return
            failures.append(f"port {self.port}: {self.log_tail()}")
            shutil.rmtree(self.dir, ignore_errors=True)
        raise RuntimeError(f"could not start {server_name()}:\n" + "\n".join(failures))

    def _spawn(self) -> bool:
        command = [
            *self.prefix, server_bin(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--protected-mode", "no", "--daemonize", "no", "--dir", self.dir,
            "--logfile", os.path.join(self.dir, "redis.log"), "--loadmodule", module_so(), *self.module_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                return False  # e.g. the port was taken meanwhile
            try:
                info = self.call("INFO", "server", timeout=1.0)
                if isinstance(info, str) and f"process_id:{self.process.pid}\r\n" in info:
                    if self.call("PING", timeout=1.0) == "PONG":
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"{server_name()} on port {self.port} did not answer in {START_DEADLINE} s: {self.log_tail()}")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the server is not running"
        return self.process.pid

    def call(self, *words: object, timeout: float = 5.0) -> object:
        """One command on a new connection; an error reply is returned as
        a :class:`ReplyError`."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(encode(*words))
            return _Reader(sock).reply()

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
        if self.process is not None:
            try:
                os.kill(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)
            self.process = None

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = Path(self.dir, "redis.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


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
