#!/usr/bin/env python3
"""A TCP proxy that adds a fixed latency to every reply, for
scripts/bench-client's "slow node" rows.

    python3 scripts/bench-peers/delay_proxy.py --delay-ms 20 --upstream 7004 [--upstream 7005 ...] \\
        --port-file /tmp/ports

For each --upstream port it listens on a free loopback port and writes one
line "UPSTREAM LISTEN" to --port-file (written whole, then renamed, once all
listeners are up). Requests (client -> server) are forwarded at once;
every chunk of reply bytes (server -> client) is forwarded DELAY ms after
it arrived, in order. That is added latency, not a bandwidth limit:
pipelined replies are not serialised behind each other's delay.
Standard library only; exits by itself after --max-seconds.
"""

import argparse
import asyncio
import os
import signal
import socket


async def pipe(reader, writer, delay):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def forward():
        while True:
            item = await queue.get()
            if item is None:
                break
            due, data = item
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(forward())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            queue.put_nowait((loop.time() + delay, data))
    except (ConnectionError, OSError):
        pass
    finally:
        queue.put_nowait(None)
        try:
            await sender
        except (ConnectionError, OSError):
            pass
        try:
            writer.close()
        except (ConnectionError, OSError):
            pass


async def serve(upstream, delay):
    async def handle(c_reader, c_writer):
        try:
            s_reader, s_writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", upstream), timeout=2)
        except (OSError, asyncio.TimeoutError):
            c_writer.close()
            return
        for w in (c_writer, s_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pipe(c_reader, s_writer, 0.0), pipe(s_reader, c_writer, delay),
                             return_exceptions=True)

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", type=int, action="append", required=True)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    args = ap.parse_args()
    servers = []
    lines = []
    for up in args.upstream:
        server = await serve(up, args.delay_ms / 1000)
        servers.append(server)
        lines.append(f"{up} {server.sockets[0].getsockname()[1]}\n")
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(lines)
    os.replace(tmp, args.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), timeout=args.max_seconds)
    except asyncio.TimeoutError:
        pass
    for server in servers:
        server.close()


if __name__ == "__main__":
    asyncio.run(main())
