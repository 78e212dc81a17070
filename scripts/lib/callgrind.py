"""Instructions a server executes for a batch of calls, counted by callgrind:
shared by scripts/bench-instructions (the evidence tables) and
scripts/cost-gate (the committed baseline).

The server runs under ``valgrind --tool=callgrind`` with instrumentation
off; :meth:`CountedServer.count` sends a batch of commands pipelined with
instrumentation on and reads the instructions executed from a dump
(``callgrind_control``). Counts do not depend on the machine's load, except
for what the server does on timers while a batch runs (its cron): with
``collect`` set to a function (``processCommand``), only what runs inside
it is counted, which leaves out the event loop, the cron, the socket reads
and writes, and keeps the command's own work (lookup, ACL, the command, its
replication and its reply).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from typing import Optional, Sequence

from resp import Conn
from servers import start_server

TOOLS = ("valgrind", "callgrind_control")


def missing_tools() -> list:
    """The tools this needs that are not on the PATH."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def server_binary(top: str, name: str) -> str:
    """The binary of a server of the matrix (or a path), as
    scripts/lib/servers.bash finds it; raises RuntimeError with its message."""
    lib = os.path.join(top, "scripts", "lib", "servers.bash")
    out = subprocess.run(["bash", "-c", 'top="$1"; . "$2"; server_bin "$3"', "-", top, lib, name],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return out.stdout.strip()


def module_path(top: str) -> str:
    """The release build of the module (the tests' build): CARGO_TARGET_DIR
    or target/ of the repository."""
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(top, "target"))
    target = target if os.path.isabs(target) else os.path.join(top, target)
    return os.path.join(target, "release", "libredis_lock.so")


class CountedServer:
    """A server with the module under callgrind; :meth:`close` stops it."""

    def __init__(self, binary: str, module: str, module_args: Sequence[str], *,
                 args: Sequence[str] = (), collect: Optional[str] = None,
                 environment: Sequence[str] = ()) -> None:
        self.dir = tempfile.mkdtemp(prefix="redis-lock-callgrind.")
        self.server = None
        self.dumps = 0
        valgrind = ["env", *environment, "valgrind", "--tool=callgrind", "--instr-atstart=no",
                    "--callgrind-out-file=" + os.path.join(self.dir, "callgrind.out.%p")]
        if collect:
            valgrind += ["--collect-atstart=no", "--toggle-collect=" + collect]
        try:
            # env and valgrind exec the server: the PID is the server's.
            self.server = start_server(binary, module=module, module_args=list(module_args),
                                       args=["--save", "", "--appendonly", "no", *args], prefix=valgrind,
                                       directory=self.dir, deadline=120, attempts=3)
            self.conn = Conn(self.server.port)
            info = self.call("INFO", "server").decode()
        except BaseException:
            self.close()
            raise
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        self.name = ("Valkey " + fields["valkey_version"].strip()) if "valkey_version" in fields \
            else ("Redis " + fields["redis_version"].strip())
        # Valkey 9's compare commands (DELIFEQ, SET ... IFEQ).
        self.native = self.call("COMMAND", "INFO", "DELIFEQ")[0] is not None

    def call(self, *words):
        return self.conn.run([words])[0]

    def run(self, commands, check=None):
        """Commands pipelined 64 deep, not counted; their replies."""
        return self.conn.run(commands, check=check)

    def count(self, commands, depth=64):
        """Runs `commands` pipelined (`depth` deep) with instrumentation on;
        returns (instructions executed, replies)."""
        self._instrument(True)
        replies = self.conn.run(commands, depth=depth)
        self._instrument(False)
        self.dumps += 1
        return self._dump("batch%d" % self.dumps), replies

    def _instrument(self, on: bool) -> None:
        subprocess.run(["callgrind_control", "--instr=" + ("on" if on else "off"), str(self.server.pid)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)

    def _dump(self, tag: str) -> int:
        """Dumps the counters collected since the last dump; their total."""
        subprocess.run(["callgrind_control", "--dump=" + tag, str(self.server.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        deadline = time.time() + 60
        while time.time() < deadline:
            for path in glob.glob(os.path.join(self.dir, "callgrind.out.*")):
                with open(path, errors="replace") as f:
                    text = f.read()
                if "desc: Trigger: dump " + tag + "\n" in text:
                    for line in text.splitlines():
                        if line.startswith("totals:"):
                            self._keep(path, tag)
                            return int(line.split()[1])
                    # A dump with nothing collected has no totals line.
                    self._keep(path, tag)
                    return 0
            time.sleep(0.1)
        raise RuntimeError("no callgrind dump for " + tag)

    def _keep(self, path: str, tag: str) -> None:
        """Moves a dump to $CALLGRIND_KEEP (to read with callgrind_annotate),
        or removes it."""
        keep = os.environ.get("CALLGRIND_KEEP")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.move(path, os.path.join(keep, "callgrind.%d.%s" % (self.server.pid, tag)))
        else:
            os.unlink(path)

    def close(self) -> None:
        if self.server is not None:
            self.server.stop(within=30)
            self.server = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()
