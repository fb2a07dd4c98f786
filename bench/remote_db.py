"""Both engines against a database across the network (prints, never asserts).

netem is not available on these machines, so a TCP proxy on 127.0.0.1 stands between each
engine and PostgreSQL and holds every chunk for D ms in each direction before passing it on:
a round trip costs 2·D more, bandwidth is untouched, and the order of bytes is kept. The proxy
runs in a process of its own, so its work never shares the engines' interpreter.

For each D (default 0.5 and 2 ms) it runs, through the proxy and interleaved as those benches
do, `bench/inline.py` (inline steps, K=10 and K=1000), and `bench/queued.py` (queued steps on 2
worker processes, and one sequential run of K=1000 steps in place), and prints their
figures under a heading naming D. An engine that sends fewer round trips per step loses less
to D: the ratio pikku ÷ DBOS at D = 0.5 ms is this bench's number. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
CHUNK_BYTES = 65536


# --------------------------------------------------------------------------------------------
# The proxy


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Pass what `reader` receives to `writer`, each chunk `delay` seconds after it arrived."""
    loop = asyncio.get_running_loop()
    held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await held.get()
            if not chunk:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    delivering = asyncio.create_task(deliver())
    try:
        while chunk := await reader.read(CHUNK_BYTES):
            held.put_nowait((loop.time() + delay, chunk))
    except ConnectionError:
        pass
    held.put_nowait((loop.time() + delay, b""))
    with contextlib.suppress(ConnectionError):
        await delivering


async def _serve(listen_port: int, upstream: tuple[str, int], delay: float) -> None:
    async def connect(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter):
        server_reader, server_writer = await asyncio.open_connection(*upstream)
        for sock in (client_writer, server_writer):
            sock.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            _relay(client_reader, server_writer, delay),
            _relay(server_reader, client_writer, delay),
        )

    server = await asyncio.start_server(connect, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def delaying_proxy(server_url: str, delay_ms: float) -> Iterator[str]:
    """A proxy process in front of `server_url`'s host and port; yields the URL through it."""
    parts = urlsplit(server_url)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, __file__, "--serve", str(port), parts.hostname or "127.0.0.1"]
    command += [str(parts.port or 5432), str(delay_ms)]
    proxy = subprocess.Popen(command)
    try:
        _wait_for_port(port)
        netloc = f"{parts.username}@127.0.0.1:{port}" if parts.username else f"127.0.0.1:{port}"
        yield urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    finally:
        proxy.terminate()
        proxy.wait()


def _wait_for_port(port: int) -> None:
    for _ in range(100):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the delaying proxy did not listen on port {port}")


# --------------------------------------------------------------------------------------------
# The benches through it


def bench_commands(args: argparse.Namespace, server: str) -> list[list[str]]:
    common = ["--server", server] + (["--no-dbos"] if args.no_dbos else [])
    inline = [str(ROOT / "bench" / "inline.py"), "--small-runs", "20", "--large-runs", "2"]
    inline += ["--rounds", "2"]
    queued = [str(ROOT / "bench" / "queued.py"), "--workers", "2", "--rounds", "1"]
    queued += ["--growth-ks", "1000", "--fairness-long-k", "0", "-n", str(args.workflows)]
    return [[sys.executable, *inline, *common], [sys.executable, *queued, *common]]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server",
        default=os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432"),
        help="PostgreSQL server URL without a database (default: %(default)s)",
    )
    parser.add_argument("--delays", default="0.5,2", help="ms added in each direction")
    parser.add_argument("-n", "--workflows", type=int, default=100, help="queued workflows")
    parser.add_argument("--no-dbos", action="store_true", help="run pikku's half only")
    parser.add_argument("--serve", nargs=4, metavar=("PORT", "HOST", "UPSTREAM", "MS"))
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.serve:
        port, host, upstream_port, delay_ms = args.serve
        upstream = (host, int(upstream_port))
        asyncio.run(_serve(int(port), upstream, float(delay_ms) / 1000))
        return
    for delay_ms in (float(d) for d in args.delays.split(",")):
        with delaying_proxy(args.server, delay_ms) as server:
            for command in bench_commands(args, server):
                name = Path(command[1]).name
                print(f"\n######## D = {delay_ms} ms each way: {name}", flush=True)
                subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
