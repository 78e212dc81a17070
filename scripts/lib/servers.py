#!/usr/bin/env python3
"""Local servers for the scripts: a free loopback port, and a server (with
the module, usually) started on one.

A start is retried on another port when the one found free was taken before
the server bound it, each attempt in a directory of its own (unless the
caller gives one); the server must answer PING as itself (its
``process_id``) within a deadline before it is used; it is stopped by PID.
The Rust tests have the same in the test kit (``testkit/``).

From Python (the scripts add ``scripts/lib`` to ``sys.path``)::

    from servers import start_server
    server = start_server("redis-server", module=so, module_args=["quarantine-ms", "0"],
                          args=["--save", ""], prefix=["taskset", "-c", "0"])
    ...  server.port, server.pid, server.dir, server.call("PING")
    server.close()          # SIGKILL by PID, and its own directory removed

A Redis Cluster of such servers (masters with their replicas, slots
assigned, every wait bounded) is ``start_cluster(...)``; from bash
``servers.py cluster --dir DIR --shards 3 --replicas 1 -- ARGS`` prints
``PORT PID`` per node.

From bash, the server keeps running after the command (in a session of its
own) and is the caller's to stop, by PID::

    read -r port pid < <(python3 scripts/lib/servers.py start --bin "$bin" --dir "$dir" \\
        --prefix "taskset -c 0" -- --save "" --loadmodule "$so" quarantine-ms 0)

Every server gets ``--port``, ``--bind 127.0.0.1``, ``--daemonize no``,
``--dir`` and ``--logfile DIR/redis.log``; anything else (persistence, the
module and its arguments) is the caller's.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

START_DEADLINE = 20.0


def free_port() -> int:
    """A loopback port that is free now (the server may still lose it), and
    ``port + 10000`` too: a server in cluster mode binds its cluster bus
    there, and refuses to start on a port above 55535."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 55000:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free loopback port found (with its cluster bus port) in 100 tries")


def encode(*words: object) -> bytes:
    """One command in RESP."""
    out = [b"*%d\r\n" % len(words)]
    for word in words:
        data = word if isinstance(word, bytes) else str(word).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


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


def call(port: int, *words: object, timeout: float = 5.0) -> object:
    """One command on a new connection to ``port``; an error reply is
    returned as a :class:`ReplyError`."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(encode(*words))
        return _Reader(sock).reply()


def server_name(binary: str) -> str:
    """"Valkey 9.1.2 (path)", from the binary's --version line."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    words = out.split()
    version = next((w[2:] for w in words if w.startswith("v=")), "?")
    return f"{words[0] if words else '?'} {version} ({binary})"


class Server:
    """A started server; :meth:`close` (or :meth:`stop`) ends it."""

    def __init__(self, binary: str, port: int, directory: str, own_dir: bool, process: subprocess.Popen) -> None:
        self.binary = binary
        self.port = port
        self.dir = directory
        self.own_dir = own_dir
        self.process: Optional[subprocess.Popen] = process

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the server is not running"
        return self.process.pid

    def call(self, *words: object, timeout: float = 5.0) -> object:
        return call(self.port, *words, timeout=timeout)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = Path(self.dir, "redis.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL by PID (which also ends a SIGSTOPped server), reaped."""
        if self.process is not None:
            try:
                os.kill(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)
            self.process = None

    def stop(self, within: float = 30.0) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL after ``within`` s."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=within)
            except subprocess.TimeoutExpired:
                pass
            self.kill()

    def close(self) -> None:
        """Kills it and removes its directory if it made one."""
        self.kill()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def _answers_as(port: int, pid: int) -> bool:
    try:
        info = call(port, "INFO", "server", timeout=1.0)
        # PING also waits out the loading of a dataset (LOADING until then).
        return isinstance(info, str) and f"process_id:{pid}\r\n" in info and call(port, "PING", timeout=1.0) == "PONG"
    except OSError:
        return False


def start_server(
    binary: Optional[str] = None,
    *,
    module: Optional[str] = None,
    module_args: Sequence[str] = (),
    args: Sequence[str] = (),
    conf: Optional[str] = None,
    prefix: Sequence[str] = (),
    directory: Optional[str] = None,
    dir_prefix: str = "redis-lock-",
    deadline: float = START_DEADLINE,
    attempts: int = 5,
    detach: bool = False,
) -> Server:
    """Starts ``binary`` (default ``$LOCK_SERVER_BIN`` or ``redis-server``)
    on a free loopback port and waits until it answers as itself.

    ``conf`` is a config file (the first argument); ``args`` more server
    options; ``module`` is loaded with ``module_args``; ``prefix`` is a
    command that execs the server (taskset, valgrind), so that the PID is the
    server's; ``detach`` puts it in a session of its own (it outlives the
    caller's process group). Raises RuntimeError, with the server's log, if
    no attempt started.
    """
    binary = binary or os.environ.get("LOCK_SERVER_BIN") or "redis-server"
    failures = []
    for _ in range(attempts):
        port = free_port()
        own_dir = directory is None
        where = tempfile.mkdtemp(prefix=dir_prefix) if own_dir else str(directory)
        command = [*prefix, binary, *([conf] if conf else []), "--port", str(port), "--bind", "127.0.0.1",
                   "--daemonize", "no", "--dir", where, "--logfile", os.path.join(where, "redis.log"), *args]
        if module:
            command += ["--loadmodule", module, *module_args]
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=detach)
        server = Server(binary, port, where, own_dir, process)
        until = time.monotonic() + deadline
        while time.monotonic() < until:
            if process.poll() is not None:
                break  # e.g. the port was taken meanwhile
            if _answers_as(port, process.pid):
                return server
            time.sleep(0.02)
        else:
            tail = server.log_tail()
            server.close()
            raise RuntimeError(f"{server_name(binary)} on port {port} did not answer in {deadline} s: {tail}")
        failures.append(f"port {port}: {server.log_tail()}")
        server.close()
    raise RuntimeError(f"could not start {server_name(binary)}:\n" + "\n".join(failures))


class Cluster:
    """A Redis Cluster (or Valkey Cluster) of started servers: ``shards``
    masters, each with ``replicas`` replicas; :meth:`close` kills them all."""

    def __init__(self, nodes: Sequence[Server], shards: int, replicas: int) -> None:
        self.nodes = list(nodes)
        self.shards = shards
        self.replicas = replicas

    @property
    def masters(self) -> list:
        """The running masters."""
        return [n for n in self.nodes if n.process is not None and _role(n.port) == "master"]

    @property
    def member(self) -> str:
        """The quorum member that names this cluster (two seeds)."""
        first = f"redis+cluster://127.0.0.1:{self.nodes[0].port}"
        return f"{first}?addr=127.0.0.1:{self.nodes[1].port}" if len(self.nodes) > 1 else first

    def master_of(self, key: str) -> Server:
        """The master that serves ``key`` now (as CLUSTER SLOTS says)."""
        slot = call(self.nodes[0].port, "CLUSTER", "KEYSLOT", key)
        for first, last, master, *_ in call(self.nodes[0].port, "CLUSTER", "SLOTS"):  # type: ignore[union-attr]
            if first <= slot <= last:
                return next(n for n in self.nodes if n.port == master[1])
        raise RuntimeError(f"no master serves slot {slot}")

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def _role(port: int) -> str:
    info = call(port, "INFO", "replication")
    for line in str(info).splitlines():
        if line.startswith("role:"):
            return line[5:].strip()
    return ""


def _cluster_info(port: int) -> dict:
    text = call(port, "CLUSTER", "INFO")
    return dict(line.split(":", 1) for line in str(text).split("\r\n") if ":" in line)


def _wait(what: str, check, deadline: float) -> None:
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        try:
            if check():
                return
        except (OSError, ConnectionError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"cluster: timed out after {deadline} s waiting for {what}")


def start_cluster(
    binary: Optional[str] = None,
    *,
    shards: int = 3,
    replicas: int = 1,
    module: Optional[str] = None,
    module_args: Sequence[str] = (),
    args: Sequence[str] = (),
    conf: Optional[str] = None,
    node_timeout_ms: int = 5000,
    directories: Optional[Sequence[str]] = None,
    dir_prefix: str = "redis-lock-cluster-",
    prefix: Sequence[str] = (),
    deadline: float = 60.0,
    detach: bool = False,
) -> Cluster:
    """Starts ``shards * (1 + replicas)`` servers in cluster mode (each as
    :func:`start_server` starts one: free port, answering as itself), gives
    each master an equal range of slots, meets them, attaches the replicas,
    and waits (bounded by ``deadline``) until every node says
    ``cluster_state:ok``, knows every other, and every replica is in sync.
    On any failure the servers started so far are killed."""
    count = shards * (1 + replicas)
    cluster_args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(node_timeout_ms), "--cluster-replica-validity-factor", "0",
                    "--repl-diskless-sync-delay", "0", *args]  # fmt: skip
    nodes: list = []
    try:
        for i in range(count):
            where = directories[i] if directories else None
            nodes.append(start_server(binary, module=module, module_args=module_args, args=cluster_args, conf=conf,
                                      directory=where, dir_prefix=dir_prefix, prefix=prefix, deadline=deadline,
                                      detach=detach))
        ids = [call(n.port, "CLUSTER", "MYID") for n in nodes]
        # Each node its own config epoch before they meet (as redis-cli
        # --cluster create does): nodes that all start at 0 resolve the
        # collision by bumping their epochs one by one after the cluster is
        # ok, and a slot moved meanwhile can be claimed back by its old
        # owner's new, higher epoch.
        for epoch, node in enumerate(nodes, start=1):
            reply = call(node.port, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
            if reply != "OK":
                raise RuntimeError(f"CLUSTER SET-CONFIG-EPOCH: {reply}")
        per = 1 + replicas
        for shard in range(shards):
            first, last = shard * 16384 // shards, (shard + 1) * 16384 // shards - 1
            reply = call(nodes[shard * per].port, "CLUSTER", "ADDSLOTSRANGE", first, last)
            if reply != "OK":
                raise RuntimeError(f"CLUSTER ADDSLOTSRANGE: {reply}")
        for node in nodes[1:]:
            call(nodes[0].port, "CLUSTER", "MEET", "127.0.0.1", node.port)
        known = str(count)
        _wait("every node to know every other",
              lambda: all(_cluster_info(n.port).get("cluster_known_nodes") == known for n in nodes), deadline)
        for shard in range(shards):
            for replica in nodes[shard * per + 1:(shard + 1) * per]:
                reply = call(replica.port, "CLUSTER", "REPLICATE", ids[shard * per])
                if reply != "OK":
                    raise RuntimeError(f"CLUSTER REPLICATE: {reply}")

        def ok(node: Server) -> bool:
            info = _cluster_info(node.port)
            replication = str(call(node.port, "INFO", "replication"))
            in_sync = "role:master" in replication or "master_link_status:up" in replication
            return info.get("cluster_state") == "ok" and info.get("cluster_slots_ok") == "16384" and in_sync

        _wait("cluster_state:ok on every node, every replica in sync", lambda: all(ok(n) for n in nodes), deadline)
        if module or "--loadmodule" in args:
            # A brand-new cluster: the slots its masters took were nobody's
            # before, so the waits ADDSLOTSRANGE started end.
            for shard in range(shards):
                call(nodes[shard * per].port, "LOCK.UNQUARANTINE", "IMPORTS")
    except BaseException:
        for node in nodes:
            node.close()
        raise
    return Cluster(nodes, shards, replicas)


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Starts a server on a free loopback port; prints 'PORT PID'. The server keeps running.")
    sub = parser.add_subparsers(dest="what", required=True)
    start = sub.add_parser("start", help="start a server (arguments after -- go to the server)")
    start.add_argument("--bin", default=None, help="the server binary (default $LOCK_SERVER_BIN or redis-server)")
    start.add_argument("--dir", required=True, help="its directory (made if missing; kept)")
    start.add_argument("--conf", default=None, help="a config file, given first")
    start.add_argument("--prefix", default="", help='a command that execs the server, e.g. "taskset -c 0"')
    start.add_argument("--deadline", type=float, default=START_DEADLINE)
    start.add_argument("args", nargs=argparse.REMAINDER)
    cluster = sub.add_parser("cluster", help="start a cluster; prints 'PORT PID' per node, masters first in each shard")
    cluster.add_argument("--bin", default=None)
    cluster.add_argument("--dir", required=True, help="a directory per node is made in it (node1, node2, ...)")
    cluster.add_argument("--conf", default=None)
    cluster.add_argument("--shards", type=int, default=3)
    cluster.add_argument("--replicas", type=int, default=1)
    cluster.add_argument("--node-timeout-ms", type=int, default=5000)
    cluster.add_argument("--deadline", type=float, default=60.0)
    cluster.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    extra = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    if ns.what == "cluster":
        count = ns.shards * (1 + ns.replicas)
        dirs = [os.path.join(ns.dir, f"node{i + 1}") for i in range(count)]
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        try:
            started = start_cluster(ns.bin, shards=ns.shards, replicas=ns.replicas, args=extra, conf=ns.conf,
                                    node_timeout_ms=ns.node_timeout_ms, directories=dirs, deadline=ns.deadline,
                                    detach=True)
        except RuntimeError as e:
            print(f"servers.py: {e}", file=sys.stderr)
            return 1
        for node in started.nodes:
            print(node.port, node.pid, flush=True)
        return 0
    os.makedirs(ns.dir, exist_ok=True)
    try:
        server = start_server(ns.bin, args=extra, conf=ns.conf, prefix=shlex.split(ns.prefix), directory=ns.dir,
                              deadline=ns.deadline, detach=True)
    except RuntimeError as e:
        print(f"servers.py: {e}", file=sys.stderr)
        return 1
    print(server.port, server.pid, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
