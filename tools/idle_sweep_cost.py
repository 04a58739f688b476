"""What connections.max.idle.ms costs the socket server (issue 23), before and after the idle sweep.

Before: up to three ``asyncio.timeout`` timers per request (waiting for the size, for the body, for the response
to drain). After: per request two flag stores and one ``loop.time()``; per sweep, one look at each connection
(``SocketServer.expire_idle``). Prints, best of ``--rounds``: the cost of one ``async with asyncio.timeout()``
around an await and of the bookkeeping that replaced it (both include the await), and of one sweep per
connection over ``--connections`` open connections. Runs in process, without sockets: the figures are the
Python work, not the system calls the two share.

    PYTHONPATH=src nice -n 10 python -m tools.idle_sweep_cost [--connections 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time


class _Transport(asyncio.Transport):
    """An idle connection's transport as the sweep reads it: nothing waiting to be written."""

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name, default=None):
        return default

    def is_closing(self) -> bool:
        return False


async def _noop() -> None:
    return None


async def _per_request(requests: int, rounds: int) -> tuple[float, float]:
    from kafkalog.broker.framing import FrameStream
    from kafkalog.broker.network import Connection

    loop = asyncio.get_running_loop()
    stream = FrameStream(lambda _stream: _noop())
    stream.transport = _Transport()
    conn = Connection(stream, 0)
    timer = bookkeeping = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(requests):
            async with asyncio.timeout(600.0):
                await _noop()
        timer = min(timer, (time.perf_counter() - start) / requests)
        start = time.perf_counter()
        for _ in range(requests):
            conn.idle_exempt = True
            conn.idle_exempt = False
            stream.last_activity = loop.time()
            await _noop()
        bookkeeping = min(bookkeeping, (time.perf_counter() - start) / requests)
    return timer, bookkeeping


async def _sweep(connections: int, rounds: int) -> float:
    from kafkalog.broker.framing import FrameStream
    from kafkalog.broker.network import Connection, SocketServer

    loop = asyncio.get_running_loop()
    server = SocketServer([], None, max_request_bytes=1)  # type: ignore[arg-type]
    for index in range(connections):
        stream = FrameStream(lambda _stream: _noop())
        stream.transport = _Transport()
        stream.last_activity = loop.time()
        conn = Connection(stream, index)
        conn.idle_exempt = False
        server._connections[object()] = conn  # type: ignore[index]
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        assert server.expire_idle(loop.time(), 600.0) == 0
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    timer, bookkeeping = asyncio.run(_per_request(args.requests, args.rounds))
    sweep = asyncio.run(_sweep(args.connections, args.rounds))
    print(
        json.dumps(
            {
                "timeout_per_await_us": round(timer * 1e6, 3),
                "bookkeeping_per_request_us": round(bookkeeping * 1e6, 3),
                "connections": args.connections,
                "sweep_ms": round(sweep * 1e3, 3),
                "sweep_per_connection_ns": round(sweep / args.connections * 1e9, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
