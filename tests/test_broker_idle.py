"""connections.max.idle.ms, enforced by the socket server's idle sweep (broker/network.py), as Kafka's Selector
does it: each connection records its last activity, one task per server closes those idle past the limit.

The server runs in process on loopback, on an event loop of its own thread, with a handler that answers by the
request's first byte (an echo, a large encoded answer, a file region sent by sendfile, a slow answer). Small
limits; nothing is timed but "closed eventually, within a generous bound" and "still served".
(Through ``kafkalog serve``: tests/test_broker_slow_clients.py and tests/test_broker_limits.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from kafkalog.broker.config import Endpoint
from kafkalog.broker.network import SocketSecurity, SocketServer, sweep_period
from kafkalog.broker.protocol import FileRegion, Response
from securitytools import make_pki

MB = 1 << 20
NETWORK_LOG = "kafka.network.SocketServer"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


class _SegmentFile:
    """What a FileRegion needs of a segment file: its path and a descriptor of its own per send."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)

    def duplicate_fd(self) -> int:
        return os.dup(self.fd)

    def read_region(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def close(self) -> None:
        os.close(self.fd)


class Served:
    """A SocketServer on its own loop thread. Requests: ``e<bytes>`` echo, ``b<n>`` n bytes encoded,
    ``f<n>`` n bytes of the file as a FileRegion (sendfile), ``w<seconds>`` answered after that long."""

    def __init__(self, tmp_path, idle_ms: int, pki=None) -> None:
        self.pki = pki  # a TLS listener when given (securitytools.make_pki)
        path = tmp_path / "segment.log"
        path.write_bytes(bytes(range(256)) * (64 * MB // 256))
        self.file = _SegmentFile(str(path))
        self.regions: list[FileRegion] = []
        self.idle_ms = idle_ms
        self.loop = asyncio.new_event_loop()
        self.server: SocketServer | None = None
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        assert started.wait(10), "server started"
        assert self.server is not None
        self.address = self.server.bound[0]

    async def _handle(self, conn, frame: memoryview):
        kind, arg = bytes(frame[:1]), bytes(frame[1:])
        if kind == b"e":
            return b"", Response([arg])
        if kind == b"b":
            return b"", Response([b"x" * int(arg)])
        if kind == b"f":
            region = FileRegion(SimpleNamespace(file=self.file, position=0, size=int(arg)))  # type: ignore[arg-type]
            self.regions.append(region)
            return b"", Response([region])
        if kind == b"w":
            await asyncio.sleep(float(arg))
            return b"", Response([b"done"])
        raise AssertionError(kind)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            security = SocketSecurity(connections_max_idle_ms=self.idle_ms)
            endpoint = Endpoint("PLAINTEXT", "127.0.0.1", 0)
            if self.pki is not None:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(str(self.pki.server_keystore))
                security.ssl_contexts["SSL"] = context
                endpoint = Endpoint("SSL", "127.0.0.1", 0, "SSL")
            self.server = SocketServer([endpoint], self._handle, max_request_bytes=100 * MB, security=security)
            await self.server.start()
            started.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def call(self, fn):
        """Run ``fn()`` on the server's loop and return its result."""
        done: asyncio.Future = asyncio.run_coroutine_threadsafe(_call(fn), self.loop)  # type: ignore[assignment]
        return done.result(10)

    def connect(self, rcvbuf: int | None = None) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(10)
        sock.connect(self.address)
        if self.pki is not None:
            context = ssl.create_default_context(cafile=str(self.pki.ca))
            return context.wrap_socket(sock, server_hostname="localhost")
        return sock

    def close(self) -> None:
        assert self.server is not None
        asyncio.run_coroutine_threadsafe(self.server.stop(drain_timeout=1), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        self.file.close()


async def _call(fn):
    return fn()


@contextlib.contextmanager
def served(tmp_path, idle_ms: int, pki=None) -> Iterator[Served]:
    server = Served(tmp_path, idle_ms, pki)
    try:
        yield server
    finally:
        server.close()


def request(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def receive(sock: socket.socket, pace: tuple[int, float, int] | None = None) -> bytes:
    """One response frame; ``pace`` (bytes, seconds, until): take at most that many bytes per recv, then sleep,
    for the first ``until`` bytes (the rest at once)."""
    head = _exactly(sock, 4, None)
    return _exactly(sock, struct.unpack(">i", head)[0], pace)


def _exactly(sock: socket.socket, n: int, pace: tuple[int, float, int] | None) -> bytes:
    out = bytearray()
    while len(out) < n:
        if pace is not None and len(out) >= pace[2]:
            pace = None
        step = n - len(out) if pace is None else min(n - len(out), pace[0])
        end = len(out) + step
        while len(out) < end:  # the whole step (what MSG_WAITALL does, which TLS sockets refuse)
            chunk = sock.recv(end - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        if pace is not None:
            time.sleep(pace[1])
    return bytes(out)


def closed_by_server(sock: socket.socket, timeout: float = 20.0) -> bool:
    """Read (and drop) until the server's end closes: EOF or a reset, within ``timeout`` seconds."""
    sock.settimeout(timeout)
    try:
        while sock.recv(1 << 16):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def reset_without_reading(sock: socket.socket, timeout: float = 20.0) -> bool:
    """Without reading (the client never reads): true once the server has reset the connection."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            sock.send(b"")
        except (BrokenPipeError, ConnectionResetError):
            return True
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)
        if info[0] == 7:  # TCP_CLOSE: the reset arrived
            return True
        time.sleep(0.05)
    return False


def test_the_sweep_period_follows_the_limit() -> None:
    assert sweep_period(600_000) == 1.0  # the default: at most 1 s late (Kafka checks every poll, <= 300 ms)
    assert sweep_period(400) == pytest.approx(0.04)  # a tenth of the limit
    assert sweep_period(1) == 0.01  # a floor, so a tiny limit does not spin the loop


def test_an_idle_connection_is_closed_and_an_active_one_is_not(tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=NETWORK_LOG)
    with served(tmp_path, idle_ms=300) as server:
        idle, active = server.connect(), server.connect()
        idle.sendall(request(b"ehello"))
        assert receive(idle) == b"hello"
        deadline = time.monotonic() + 1.5  # five limits' worth of requests, one every 50 ms
        while time.monotonic() < deadline:
            active.sendall(request(b"eping"))
            assert receive(active) == b"ping"
            time.sleep(0.05)
        assert closed_by_server(idle), "closed once idle past connections.max.idle.ms"
        active.sendall(request(b"estill"))
        assert receive(active) == b"still"
        assert "idle for more than connections.max.idle.ms=300" in caplog.text
        assert closed_by_server(active)


def test_a_connection_that_never_sends_a_request_is_closed(tmp_path) -> None:
    with served(tmp_path, idle_ms=200) as server:
        assert closed_by_server(server.connect())
        assert server.call(server.server.connections) == []  # type: ignore[union-attr]


def test_half_a_request_then_nothing_is_closed(tmp_path, caplog) -> None:
    """Slowloris: Kafka's idle expiry counts a half-sent request as idle."""
    caplog.set_level(logging.DEBUG, logger=NETWORK_LOG)
    with served(tmp_path, idle_ms=300) as server:
        body_half, size_half = server.connect(), server.connect()
        body_half.sendall(struct.pack(">i", MB) + b"e" * 1000)
        size_half.sendall(b"\x00\x00")
        assert closed_by_server(body_half)
        assert closed_by_server(size_half)
        assert f"part of a {MB}-byte request received, then nothing for connections.max.idle.ms=300" in caplog.text


def test_a_request_that_trickles_in_is_not_closed(tmp_path) -> None:
    with served(tmp_path, idle_ms=300) as server:
        sock = server.connect()
        body = b"e" + b"t" * 19_999
        data = request(body)
        for i in range(0, len(data), 1000):  # 21 pieces, one every 50 ms: ~1 s, more than three limits
            sock.sendall(data[i : i + 1000])
            time.sleep(0.05)
        assert receive(sock) == body[1:]


def test_a_request_served_for_longer_than_the_limit_is_not_closed(tmp_path) -> None:
    """The limit counts the client's silence, not the broker's time serving it (a long poll, a join)."""
    with served(tmp_path, idle_ms=200) as server:
        sock = server.connect()
        sock.sendall(request(b"w1.0"))
        assert receive(sock) == b"done"


@pytest.mark.parametrize("kind", [b"b", b"f"])
def test_a_client_that_never_reads_its_response_is_reset(tmp_path, caplog, kind) -> None:
    """Encoded bytes wait in the transport's buffer, a file region in sendfile; either way the client takes
    nothing, and the connection is reset (SO_LINGER 0), its file descriptors released."""
    caplog.set_level(logging.DEBUG, logger=NETWORK_LOG)
    with served(tmp_path, idle_ms=300) as server:
        before = len(os.listdir("/proc/self/fd"))
        sock = server.connect(rcvbuf=4096)
        sock.sendall(request(kind + str(32 * MB).encode()))
        assert reset_without_reading(sock), "reset once its response sat untaken"
        sock.close()
        assert "took none of its response for connections.max.idle.ms=300" in caplog.text
        assert all(region.fd == -1 for region in server.regions)
        deadline = time.monotonic() + 10
        while server.call(server.server.connections) and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.05)
        assert server.call(server.server.connections) == []  # type: ignore[union-attr]
        assert len(os.listdir("/proc/self/fd")) <= before


@pytest.mark.parametrize("kind", [b"b", b"f"])
def test_a_slow_reader_that_keeps_taking_its_response_is_not_closed(tmp_path, kind) -> None:
    """The limit is on progress, as Kafka's (a connection is active while the socket takes bytes), not on the
    whole response: the first 12 MiB read at ~5 MB/s take more than two limits. (The rest is read at once:
    the last bytes the kernel's buffers hold are sent, as far as the broker knows, as in Kafka.)"""
    with served(tmp_path, idle_ms=1000) as server:
        sock = server.connect()
        sock.sendall(request(kind + str(16 * MB).encode()))
        answer = receive(sock, pace=(256 * 1024, 0.05, 12 * MB))
        assert len(answer) == 16 * MB
        if kind == b"f":
            assert answer == (bytes(range(256)) * (16 * MB // 256))
        sock.sendall(request(b"eafter"))
        assert receive(sock) == b"after"


def test_minus_one_disables_the_limit(tmp_path) -> None:
    with served(tmp_path, idle_ms=-1) as server:
        idle, half = server.connect(), server.connect()
        half.sendall(struct.pack(">i", 5000) + b"e" * 10)
        assert not closed_by_server(idle, timeout=1.0), "never closed for idleness"
        half.sendall(b"e" * 4990)
        assert receive(half) == b"e" * 4999
        idle.sendall(request(b"estill"))
        assert receive(idle) == b"still"


def test_over_tls_a_slow_reader_is_kept_and_one_that_never_reads_is_reset(tmp_path, pki, caplog) -> None:
    """Under TLS the encrypted bytes wait in the socket's own transport, below asyncio's TLS transport (which
    counts only what it has not encrypted): the sweep reads both, so progress there is activity too."""
    caplog.set_level(logging.DEBUG, logger=NETWORK_LOG)
    with served(tmp_path, idle_ms=1000, pki=pki) as server:
        reader = server.connect()
        reader.sendall(request(b"b" + str(16 * MB).encode()))
        assert len(receive(reader, pace=(256 * 1024, 0.05, 12 * MB))) == 16 * MB
        reader.sendall(request(b"eafter"))
        assert receive(reader) == b"after"
        stalled = server.connect()
        stalled.sendall(request(b"b" + str(32 * MB).encode()))
        raw = socket.socket(fileno=os.dup(stalled.fileno()))  # the TCP socket below, to watch without reading
        try:
            assert reset_without_reading(raw), "reset once its response sat untaken"
        finally:
            raw.close()
        assert "took none of its response for connections.max.idle.ms=1000" in caplog.text
