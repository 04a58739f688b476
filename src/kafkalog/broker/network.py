"""The socket server: Kafka's framing on asyncio, one task per connection.

Each connection (a :class:`~.framing.FrameStream`) reads a 4-byte size and that many bytes, straight into a
buffer of their own, hands the frame to the request router, and writes
the response before it reads the next frame: as Kafka's processor mutes a channel while its request is being
served, responses go out in request order and a client may pipeline as many requests as it likes (they wait
in the socket). A frame larger than ``socket.request.max.bytes`` or a negative size closes the connection, as
does a request the router cannot parse; nothing a client sends can stop the server or touch another
connection.

Fetch responses carry regions of segment files: with ``zero_copy`` they are written with ``os.sendfile`` (through
``loop.sendfile`` when the socket is full) on a plain socket, so record bytes never enter Python; on a TLS
connection (or without zero_copy) they are read and copied, to the same bytes, since the kernel cannot encrypt
them. A region of at most ``SMALL_REGION_BYTES`` (64 KiB) is copied too, into the same write as the rest of the
response: for a long poll answered with a few new records, one ``send`` costs less than a write of the head, a
descriptor, a sendfile and a write of the tail, and the client gets the answer in one segment, not three.

Security (Kafka's SocketServer and channel builders): each listener has a security protocol. On SSL and
SASL_SSL listeners the TLS handshake runs first (a failure is logged as Kafka logs a failed authentication and
closes the connection); the principal is the client certificate's subject. On SASL listeners a
:class:`~.security.sasl.SaslAuthenticator` decides which requests may pass before login (the router asks it).
Limits: ``max.connections`` (a new connection waits for a slot, as Kafka's acceptor stops accepting),
``max.connections.per.ip`` with its overrides (a connection over the limit is closed at once and logged), and
``connections.max.idle.ms`` (-1: none).

Idle expiry is Kafka's Selector's (its ``IdleExpiryManager``), without a timer per request: each connection
records when it was last active (``FrameStream.last_activity``: bytes received, a response begun, a write
drained, a file region's step taken by the socket), and one task per server (:meth:`SocketServer.expire_idle`,
every :func:`sweep_period`) closes each connection idle past the limit. Idle means the client's silence, whatever
the connection is in: between requests, in the middle of one (a slowloris client that sent half a request and
stopped; Kafka counts that as idle too) or in a response. A response is judged by progress, as Kafka judges it
(its selector marks a connection active whenever its socket is ready, so a response the client keeps taking,
however slowly, never expires): the sweep reads a change in the connection's write backlog since its last turn
as activity, and a file region the socket does not take at once is sent in ``SENDFILE_STEP_BYTES`` (1 MiB)
steps, each activity; so a client taking at least 1 MiB per limit (1.7 KB/s at the default 10 minutes) is never
cut. A client that takes nothing is closed with a reset (SO_LINGER 0, abort: a graceful close would wait, with
the unsent bytes, for it), and its fetch's file descriptors are released. Not judged: the TLS handshake
(``ssl_handshake_timeout``), a connection waiting for a ``max.connections`` slot, a request in the handler (a long
poll, a group join: the broker's time), a quota throttle. Kafka closes at most one expired connection per poll;
the sweep closes all of them at once.

Sockets (Kafka's Acceptor): each listening socket gets ``socket.receive.buffer.bytes`` as SO_RCVBUF before it
listens (accepted sockets inherit it, and the TCP window scale is agreed at the SYN, so it cannot wait for the
accept) and ``socket.listen.backlog.size`` as its backlog; each accepted socket TCP_NODELAY, SO_KEEPALIVE and
``socket.send.buffer.bytes`` as SO_SNDBUF. -1 leaves a size to the OS (on Linux: autotuned, up to
``net.ipv4.tcp_rmem``/``tcp_wmem``'s maximum); a size set turns Linux's autotuning off for that buffer, as in Kafka.
Both default to -1 here, not Kafka's 102400: this server's one loop pays a wake-up (an epoll round and Python) per
buffer's worth of bytes, and with 100 KiB that is several per 1 MiB request or fetch; a 1 GiB topic was read at
0.55x the rate and produce cost 1.35x the broker CPU per GB (benchmarks/results/socket-buffers-ab-1gib.json).
Kafka's backlog of 50 is drained by an acceptor thread of its own; here the loop that serves requests accepts,
so a burst of connects larger than the backlog while the loop is busy waits for the clients' SYN retries (1 s,
3 s, ...): raise ``socket.listen.backlog.size`` for connection storms.

The loop is asyncio's own: uvloop's transports have no native sendfile (loop.sendfile would copy), so it
would cost the zero-copy path. Measured (issue 23, alternating brokers, 3 rounds on 2 shared cores): uvloop
gave 0.95-0.97x the broker CPU per GB produced (within the noise) and 1.67x per GB consumed (the copies),
and no consistent latency gain at 5,000-10,000 msg/s; not worth losing sendfile.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING

from .config import Endpoint
from .framing import FrameStream
from .protocol import SMALL_REGION_BYTES, FileRegion, InvalidRequestError, Response
from .security.context import ANONYMOUS
from .security.sasl import SaslAuthenticator
from .security.tls import NoMatchingRule, SslPrincipalMapper, principal_of

if TYPE_CHECKING:
    from .metrics import BrokerMetrics

log = logging.getLogger("kafka.network.SocketServer")

_SIZE = struct.Struct(">i")
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection
CLOSE = object()  # a handler's answer meaning: close this connection (e.g. an acks=0 produce that failed)
# A file region the socket does not take at once goes through loop.sendfile in steps of this many bytes, each
# step recorded as activity: the idle sweep sees a slow reader's progress at this grain (see SocketServer).
SENDFILE_STEP_BYTES = 1 << 20

Handler = Callable[["Connection", memoryview], Awaitable["tuple[bytes, Response] | object | None"]]


def sweep_period(max_idle_ms: int) -> float:
    """Seconds between two idle sweeps for ``connections.max.idle.ms``: a tenth of the limit, at most 1 s and
    at least 10 ms. A connection is closed between the limit and the limit plus one period after its last
    activity: at most 10% late for small limits (tests, tight deployments), at most 1 s late at the default 10
    minutes (Kafka's processor checks after each poll, at least every 300 ms, so it is as exact to within a
    second); a sweep costs well under a microsecond per connection, so once a second is nothing even at
    thousands of connections, and the 10 ms floor keeps a tiny limit from spinning the loop."""
    return min(max(max_idle_ms / 10_000.0, 0.01), 1.0)


def _address(address: tuple | None) -> str:
    """A socket address as Java prints one (``/host:port``)."""
    return f"/{address[0]}:{address[1]}" if address else "?"


def _reset(stream: FrameStream) -> None:
    """Close with a reset (SO_LINGER 0, then abort): unsent bytes are dropped, not waited for."""
    sock = stream.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    stream.transport.abort()


class _Fd:
    """A file-like view of a segment's descriptor for loop.sendfile, which wants fileno() and seek().

    The descriptor stays owned by the segment; sendfile is given explicit offsets, so seek has nothing to do.
    """

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, offset: int, whence: int = 0) -> int:
        return offset


class Connection:
    """One client connection: its address, the id Kafka's logs give it (local-remote-index), its listener,
    and who it is (``principal``; on a SASL listener, ``sasl`` holds the login state and its principal)."""

    def __init__(self, stream: FrameStream, index: int, endpoint: Endpoint | None = None) -> None:
        self.stream = stream
        local = stream.get_extra_info("sockname") or ("?", 0)
        peer = stream.get_extra_info("peername") or ("?", 0)
        self.id = f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}-{index}"
        self.peer_host = str(peer[0])
        self.client_host = f"/{peer[0]}"  # as Kafka records a group member's host (InetAddress.toString)
        self.endpoint = endpoint or Endpoint("PLAINTEXT", "", 0)
        self.tls = False
        self.principal = ANONYMOUS
        self.sasl: SaslAuthenticator | None = None
        self.close_after_send = False  # a failed login: answer, then close
        self.mute_until = 0.0  # a throttled client: read nothing before this time.monotonic()
        self.closed = False
        self.busy = False  # a request has been read and its response is not yet written
        # Idle expiry (SocketServer's sweep): not judged while True (TLS handshake, waiting for a slot, a request
        # in the handler, a throttle); ``write_seen`` is the write backlog the sweep saw last; ``expired`` is set
        # by the sweep when it closes the connection ("close": gracefully; "reset": SO_LINGER 0 and abort).
        self.idle_exempt = True
        self.write_seen = 0
        self.expired: str | None = None
        # what the router recorded of the request being served: its metric names and version (broker/metrics.py)
        self.request_metric: tuple[tuple[str, ...], int] | None = None


@dataclass
class SocketSecurity:
    """What the socket server needs to secure its listeners: TLS contexts by listener name, a SASL
    authenticator factory for SASL listeners, and the connection limits."""

    ssl_contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)
    principal_mappers: dict[str, SslPrincipalMapper] = field(default_factory=dict)
    sasl_factory: Callable[[Endpoint], SaslAuthenticator] | None = None
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    connections_max_idle_ms: int = 600000
    ssl_handshake_timeout: float = 10.0


@dataclass(eq=False)
class SocketServer:
    """Accept connections on each listener and serve Kafka requests on them.

    Invariant: at most one request per connection is being handled at any time, and its response is written
    completely (or the connection closed) before the next frame is read.
    """

    listeners: list[Endpoint]
    handler: Handler
    _: KW_ONLY
    max_request_bytes: int
    zero_copy: bool = True
    security: SocketSecurity = field(default_factory=SocketSecurity)
    metrics: BrokerMetrics | None = None
    # socket.send.buffer.bytes / socket.receive.buffer.bytes (-1: the OS's, the broker's default; Kafka's is 102400)
    # and socket.listen.backlog.size
    send_buffer_bytes: int = -1
    receive_buffer_bytes: int = -1
    listen_backlog: int = 50

    def __post_init__(self) -> None:
        self._sweeper: asyncio.Task[None] | None = None
        self._per_ip: dict[str, int] = {}
        self._open = 0  # connections holding a max.connections slot
        self._slot_freed = asyncio.Condition()
        self.bound: list[tuple[str, int]] = []
        self.bound_by_listener: dict[str, tuple[str, int]] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: dict[asyncio.Task, Connection] = {}
        self._index = 0
        self._stopping = False
        self.sendfile_calls = 0

    def connections(self) -> list[Connection]:
        """The open connections (a copy)."""
        return list(self._connections.values())

    async def start(self) -> None:
        for endpoint in self.listeners:
            host = endpoint.host or None
            accept = functools.partial(self._accept, endpoint)
            loop = asyncio.get_running_loop()
            server = await loop.create_server(
                lambda accept=accept: FrameStream(accept),  # type: ignore[misc]
                host,
                endpoint.port,
                reuse_address=True,
                backlog=self.listen_backlog,
                start_serving=False,  # bound, not listening: SO_RCVBUF must be set before listen()
            )
            if self.receive_buffer_bytes != -1:  # accepted sockets inherit it; the window scale is set at the SYN
                for sock in server.sockets:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
            await server.start_serving()
            self._servers.append(server)
            for sock in server.sockets:
                address = sock.getsockname()
                self.bound.append((address[0], address[1]))
                self.bound_by_listener.setdefault(endpoint.name, (address[0], address[1]))
                log.info(
                    "Awaiting socket connections on %s:%d (listener %s, %s).",
                    address[0],
                    address[1],
                    endpoint.name,
                    endpoint.security_protocol,
                )
        if self.security.connections_max_idle_ms >= 0 and self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_idle())

    def _configure_accepted(self, stream: FrameStream) -> None:
        """Kafka's configureAcceptedSocketChannel: TCP_NODELAY, SO_KEEPALIVE and ``socket.send.buffer.bytes``."""
        sock = stream.get_extra_info("socket")
        if sock is None:
            return
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if self.send_buffer_bytes != -1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "Accepted connection from %s on %s, sendBufferSize [actual|requested]: [%d|%d] "
                    "recvBufferSize [actual|requested]: [%d|%d]",
                    _address(stream.get_extra_info("peername")),
                    _address(stream.get_extra_info("sockname")),
                    sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                    self.send_buffer_bytes,
                    sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                    self.receive_buffer_bytes,
                )

    def _ip_limit(self, host: str) -> int:
        return self.security.max_connections_per_ip_overrides.get(host, self.security.max_connections_per_ip)

    async def _accept(self, endpoint: Endpoint, stream: FrameStream) -> None:
        self._configure_accepted(stream)
        peer = stream.get_extra_info("peername") or ("?", 0)
        host = str(peer[0])
        if self._per_ip.get(host, 0) >= self._ip_limit(host):
            log.info(
                "Rejected connection from /%s, address already has the configured maximum of %d connections.",
                host,
                self._ip_limit(host),
            )
            stream.close()
            with contextlib.suppress(Exception):
                await stream.wait_closed()
            return
        self._per_ip[host] = self._per_ip.get(host, 0) + 1
        self._index += 1
        conn = Connection(stream, self._index, endpoint)
        task = asyncio.current_task()
        self._connections[task] = conn
        slot = False
        try:
            await self._wait_for_slot()
            slot = True
            if endpoint.tls and not await self._start_tls(conn):
                return
            if endpoint.sasl and self.security.sasl_factory is not None:
                conn.sasl = self.security.sasl_factory(endpoint)
            await self._serve(conn)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("Unexpected error on connection %s; closing it", conn.id)
        finally:
            if conn.expired == "reset":
                _reset(stream)
            self._connections.pop(task, None)
            left = self._per_ip.get(host, 1) - 1
            if left:
                self._per_ip[host] = left
            else:
                self._per_ip.pop(host, None)
            if slot:
                await self._release_slot()
            conn.closed = True
            stream.close()
            with contextlib.suppress(Exception):
                await stream.wait_closed()

    async def _wait_for_slot(self) -> None:
        """Hold one of ``max.connections`` slots, waiting for one to free (Kafka's acceptor waits likewise)."""
        async with self._slot_freed:
            if self._open >= self.security.max_connections:
                log.info("Waiting for a connection slot: max.connections=%d reached", self.security.max_connections)
            await self._slot_freed.wait_for(lambda: self._open < self.security.max_connections)
            self._open += 1

    async def _release_slot(self) -> None:
        async with self._slot_freed:
            self._open -= 1
            self._slot_freed.notify()

    async def _start_tls(self, conn: Connection) -> bool:
        """Run the TLS handshake; on failure log it as Kafka logs a failed authentication and return False."""
        context = self.security.ssl_contexts[conn.endpoint.name]
        try:
            await conn.stream.start_tls(context, ssl_handshake_timeout=self.security.ssl_handshake_timeout)
        except (ssl.SSLError, ConnectionError, TimeoutError, OSError) as e:
            log.info(
                "Failed authentication with %s (channelId=%s) (SSL handshake failed: %s)", conn.client_host, conn.id, e
            )
            return False
        conn.tls = True
        try:
            mapper = self.security.principal_mappers.get(conn.endpoint.name)
            conn.principal = principal_of(conn.stream.get_extra_info("ssl_object"), mapper)
        except NoMatchingRule as e:
            log.info("Failed authentication with %s (channelId=%s) (%s)", conn.client_host, conn.id, e)
            return False
        return True

    async def _serve(self, conn: Connection) -> None:
        stream = conn.stream
        loop = asyncio.get_running_loop()
        conn.idle_exempt = False
        stream.last_activity = loop.time()
        while not self._stopping:
            muted = conn.mute_until - time.monotonic()
            if muted > 0:  # a quota throttle: the next request waits in the socket (not idle: the broker's choice)
                conn.idle_exempt = True
                await asyncio.sleep(muted)
                conn.idle_exempt = False
                stream.last_activity = loop.time()
            size = await stream.read_size()
            limit, setting = self.max_request_bytes, "socket.request.max.bytes"
            if conn.sasl is not None and not conn.sasl.authenticated:
                # Kafka's SaslServerAuthenticator reads no larger frame from a client that has not logged in
                limit, setting = conn.sasl.settings.max_receive_size, "sasl.server.max.receive.size"
            if size < 0 or size > limit:
                log.warning(
                    "Closing connection %s: frame size %d is %s (%s=%d)",
                    conn.id,
                    size,
                    "negative" if size < 0 else "larger than the limit",
                    setting,
                    limit,
                )
                return
            frame = await stream.read_body(size)
            started = time.perf_counter()
            conn.busy = True
            conn.idle_exempt = True  # being served: the broker's time, however long, is not the client's idleness
            conn.request_metric = None
            try:
                answer = await self.handler(conn, frame)
            except InvalidRequestError as e:
                log.warning("Closing connection %s due to an invalid request: %s", conn.id, e)
                return
            if answer is CLOSE:
                return
            conn.idle_exempt = False
            stream.last_activity = loop.time()  # the response begins: idle from now if the client takes none of it
            if answer is not None:
                header, response = answer
                try:
                    await self._send(conn, header, response)
                finally:
                    response.close()  # its regions' descriptors, also when the sweep cut the send short
            if self.metrics is not None and conn.request_metric is not None:
                self.metrics.request_done(*conn.request_metric, started)
            if conn.close_after_send:
                return
            conn.busy = False

    async def _sweep_idle(self) -> None:
        """Close connections idle past ``connections.max.idle.ms``, every :func:`sweep_period` seconds."""
        limit_ms = self.security.connections_max_idle_ms
        period, limit = sweep_period(limit_ms), limit_ms / 1000.0
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            self.expire_idle(loop.time(), limit)

    def expire_idle(self, now: float, limit: float) -> int:
        """One sweep at ``now`` (the loop's clock): close each connection whose last activity is more than
        ``limit`` seconds old; a change in a connection's write backlog since the last sweep is activity (the
        client took bytes). Returns how many were closed."""
        closed = 0
        for task, conn in self._connections.items():
            if conn.idle_exempt or conn.expired is not None:
                continue
            stream = conn.stream
            pending = stream.write_pending()
            if pending != conn.write_seen:
                conn.write_seen = pending
                stream.last_activity = now
            elif now - stream.last_activity > limit:
                self._expire(task, conn, pending)
                closed += 1
        return closed

    def _expire(self, task: asyncio.Task, conn: Connection, pending: int) -> None:
        """Close an idle connection by cancelling its task (whose cleanup releases what it holds): gracefully
        when nothing is left to send, else with a reset, since a graceful close would wait, with the unsent
        bytes, for a client that does not read."""
        idle = self.security.connections_max_idle_ms
        if conn.busy or pending:  # in _send, or past it with bytes still buffered (under TLS: encrypted ones)
            log.debug(
                "Closing connection %s: its client took none of its response for connections.max.idle.ms=%d "
                "(%d bytes buffered)",
                conn.id,
                idle,
                pending,
            )
        elif conn.stream.receiving:
            log.debug(
                "Closing connection %s: part of a %d-byte request received, then nothing for "
                "connections.max.idle.ms=%d",
                conn.id,
                conn.stream.receiving,
                idle,
            )
        else:
            log.debug("Closing connection %s: idle for more than connections.max.idle.ms=%d", conn.id, idle)
        conn.expired = "reset" if conn.busy or pending else "close"
        task.cancel()

    async def _send(self, conn: Connection, header: bytes, response: Response) -> None:
        """Write one response: its size and header, then each part (file regions by sendfile when zero-copy)."""
        writer = conn.stream
        pending = bytearray(_SIZE.pack(len(header) + response.size))
        pending += header
        for part in response.parts:
            if isinstance(part, FileRegion):
                if self.zero_copy and not conn.tls and part.size > SMALL_REGION_BYTES:
                    writer.write(pending)  # handed over as is (no bytes() copy); a new buffer follows
                    pending = bytearray()
                    await self._sendfile(writer, part)
                else:
                    data = part.read()
                    if len(data) != part.size:
                        raise ConnectionError(f"{part.path} was truncated while being sent; closing {conn.id}")
                    pending += data
            else:
                pending += part
        if pending:
            writer.write(pending)  # not touched again: a TLS transport may hold on to it until it is sent
        await writer.drain()

    async def _sendfile(self, writer: FrameStream, part: FileRegion) -> None:
        """Send a file region with os.sendfile: at once while the socket takes it, then through the loop.

        ``loop.sendfile`` waits for the transport to drain, pauses reading, and goes through a future and the
        selector even when the socket could take the whole region now: several loop iterations per region,
        which a consumer's small fetches (and every long poll answered with new records) pay in latency. So
        the region is first offered to the socket directly when nothing else is queued before it (the
        response's head went out with it), and only what the socket does not take waits for the loop.
        """
        self.sendfile_calls += 1
        sent, eof = 0, False
        fd = part.open()  # one descriptor per region being sent, released when it is
        sock = writer.get_extra_info("socket")
        if sock is not None and writer.transport.get_write_buffer_size() == 0:
            out = sock.fileno()
            try:
                while sent < part.size:
                    n = os.sendfile(out, fd, part.position + sent, part.size - sent)
                    if n == 0:  # end of file: truncated under the send
                        eof = True
                        break
                    sent += n
            except (BlockingIOError, InterruptedError):
                pass  # the socket's buffer is full: the loop sends the rest when it drains
        if sent < part.size and not eof:
            loop = asyncio.get_running_loop()
            while sent < part.size:  # in steps, each one activity for the idle sweep (loop.sendfile reports none)
                step = min(part.size - sent, SENDFILE_STEP_BYTES)
                n = await loop.sendfile(writer.transport, _Fd(fd), part.position + sent, step, fallback=False)
                sent += n
                writer.touch()
                if n < step:  # end of file: truncated under the send
                    break
        part.close()
        if sent != part.size:  # a file truncated under the send: the frame cannot be completed (FileRecords.writeTo)
            raise ConnectionError(f"Size of {part.path} was truncated during a send: sent {sent} of {part.size}")

    async def stop(self, drain_timeout: float = 10.0) -> None:
        """Stop accepting, let each connection finish the request it is serving, then close them."""
        self._stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for server in self._servers:
            server.close()
        busy = []
        for task, conn in list(self._connections.items()):
            if conn.busy:
                busy.append(task)
            else:  # waiting for its next frame: nothing in flight
                task.cancel()
        if busy:
            _, pending = await asyncio.wait(busy, timeout=drain_timeout)
            for task in pending:
                log.warning("Closing connection %s with a request still in flight", self._connections[task].id)
                task.cancel()
        remaining = list(self._connections)
        if remaining:
            await asyncio.wait(remaining, timeout=1.0)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
