"""A minimal RESP client for the benchmark scripts: pipelined commands on one
socket, replies checked, nothing to install."""

import socket
import time


def resp(*words):
    out = [b"*%d\r\n" % len(words)]
    for w in words:
        w = w if isinstance(w, bytes) else str(w).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(w), w))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        deadline = time.time() + 120
        while True:
            try:
                self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            return Exception(rest.decode())
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.s.recv(1 << 16)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ValueError(line)

    def run(self, commands, depth=64, check=None):
        replies = []
        for i in range(0, len(commands), depth):
            batch = commands[i:i + depth]
            self.s.sendall(b"".join(resp(*c) for c in batch))
            for c in batch:
                r = self._reply()
                if isinstance(r, Exception) or (check and not check(r)):
                    raise RuntimeError(f"{c[0]} answered {r!r}")
                replies.append(r)
        return replies
