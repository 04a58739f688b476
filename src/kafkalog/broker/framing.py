"""One client connection's byte stream, as the socket server uses it: Kafka's size-prefixed frames read
straight into buffers of their own, and writes with flow control.

asyncio's StreamReader copies every byte several times on the way to a request: ``recv`` into a new bytes
object, that appended to the reader's buffer, sliced out of it again (and the rest of the buffer moved down),
and the slices of a large request joined. A 1 MiB produce request paid that four times, in 256 KiB pieces,
each piece a trip through the loop. Kafka's ``NetworkReceive`` reads the 4-byte size, then the body into a
buffer of exactly that size; :class:`FrameStream` does the same with asyncio's ``BufferedProtocol``: the
kernel copies a large body once, into the buffer the handler gets.

Small requests arrive several to a ``recv``: bytes that are not part of a body being read go to a fixed
scratch buffer (``SCRATCH_BYTES``), frames wholly inside it are copied out of it, and reading pauses while it
is full, so what a client pipelines ahead of the server is bounded by it (plus the socket's own buffers).

Buffers are ``numpy.empty``: memory the kernel maps only as bytes arrive, so a client that announces a
100 MB request and sends 1 KB of it (slowloris) costs the broker 1 KB of memory, not 100 MB, and a large
body is not zero-filled before it is overwritten. A body above ``BODY_CHUNK_BYTES`` is received in chunks of
that size, each allocated once the previous one is full, and joined at the end (the one extra copy, only for
requests larger than any producer sends by default).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

# Pipelined small requests and frame heads; a body not wholly here gets a buffer of its own. Every connection
# holds one (1,000 connections: 32 MiB), so it is kept small.
SCRATCH_BYTES = 32 * 1024
BODY_CHUNK_BYTES = 8 * 1024 * 1024
_COMPACT_BELOW = 4096  # room at the end of scratch below which its unread bytes move to the front


class FrameStream(asyncio.BufferedProtocol):
    """The protocol and the stream API of one connection (reads: :meth:`read_size`, :meth:`read_body`;
    writes: :meth:`write`, :meth:`drain`; :meth:`start_tls`, :meth:`close`).

    Invariants: the connection's bytes are handed out in order, each once. Unread bytes live either in the
    scratch buffer between ``_start`` and ``_end``, or (while a body is being received) at the front of
    ``_body``; never both, since the scratch is emptied into the body when it is set, and ``_body`` is dropped
    the moment it is complete, so ``get_buffer`` never offers an empty buffer. Reading is paused only while the
    scratch is full and no body is being received (``_paused``). One reader at a time (the connection's task).
    """

    def __init__(self, on_connect: Callable[[FrameStream], Awaitable[None]]) -> None:
        self._on_connect = on_connect
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set by connection_made
        self._view = memoryview(np.empty(SCRATCH_BYTES, np.uint8))  # type: ignore[arg-type]
        self._start = 0
        self._end = 0
        self._body: memoryview | None = None  # the body being received, and how much of it has come
        self._got = 0
        self.receiving = 0  # the size of the frame whose body is being received (0: none), for the idle sweep's log
        # loop.time() of the connection's last activity (bytes received, a write drained, a response begun):
        # what the socket server's idle sweep reads; set here instead of a timer per request
        self.last_activity = 0.0
        self._raw_transport: asyncio.Transport | None = None  # under TLS: the socket's own transport
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._lost: BaseException | None = None  # why the connection ended, once it has
        self._paused = False
        self._write_paused = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._over_ssl = False
        self.task: asyncio.Task[None] | None = None

    # ----- protocol callbacks ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._over_ssl = transport.get_extra_info("sslcontext") is not None
        self.last_activity = self._loop.time()
        self.task = self._loop.create_task(self._on_connect(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return self._body[self._got :]
        room = SCRATCH_BYTES - self._end
        if room < _COMPACT_BELOW and self._start:
            unread = self._end - self._start
            self._view[:unread] = self._view[self._start : self._end]
            self._start, self._end = 0, unread
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_activity = self._loop.time()
        if self._body is not None:
            self._got += nbytes
            if self._got == len(self._body):
                self._body = None  # complete: whatever comes next goes to the scratch buffer
                self._wake()
            return
        self._end += nbytes
        if self._end == SCRATCH_BYTES and self._start == 0:
            self._pause()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return not self._over_ssl  # keep the transport open to answer what was read (asyncio's streams do too)

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._lost = exc if exc is not None else ConnectionResetError("Connection lost")
        self._wake()
        while self._drain_waiters:
            waiter = self._drain_waiters.popleft()
            if not waiter.done():
                waiter.set_exception(self._lost)
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self.last_activity = self._loop.time()  # the client took bytes
        while self._drain_waiters:
            waiter = self._drain_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    # ----- reading -------------------------------------------------------------------------------------
    async def read_size(self) -> int:
        """The next frame's 4-byte signed size. IncompleteReadError at end of stream."""
        while self._end - self._start < 4:
            if self._eof:
                raise asyncio.IncompleteReadError(bytes(self._view[self._start : self._end]), 4)
            await self._wait()
        start = self._start
        self._start = start + 4
        size = int.from_bytes(self._view[start : start + 4], "big", signed=True)
        self._consumed()
        return size

    async def read_body(self, size: int) -> memoryview:
        """The next ``size`` bytes (a frame's body; ``size`` at least 0), which the caller has checked against
        ``socket.request.max.bytes``. IncompleteReadError when the stream ends first. No timer: a body that
        stops coming is the socket server's idle sweep's to close (``receiving`` says which frame it was)."""
        start, unread = self._start, self._end - self._start
        if unread >= size:  # the whole frame is here already (small requests)
            self._start = start + size
            data = memoryview(bytes(self._view[start : start + size]))
            self._consumed()
            return data
        chunks: list[memoryview] = []
        left = size
        self.receiving = size
        try:
            while left:
                chunk = memoryview(np.empty(min(left, BODY_CHUNK_BYTES), np.uint8))  # type: ignore[arg-type]
                await self._receive_into(chunk)
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            self.receiving = 0
        return chunks[0] if len(chunks) == 1 else memoryview(b"".join(chunks))

    async def _receive_into(self, chunk: memoryview) -> None:
        """Fill ``chunk``: first from the scratch buffer, then straight from the socket."""
        unread = min(self._end - self._start, len(chunk))
        chunk[:unread] = self._view[self._start : self._start + unread]
        self._start += unread
        if self._start == self._end:
            self._start = self._end = 0
        if unread == len(chunk):
            self._resume()
            return
        self._body, self._got = chunk, unread  # the scratch is empty now: the rest goes straight here
        self._resume()
        try:
            while self._got < len(chunk):
                if self._eof:
                    raise asyncio.IncompleteReadError(bytes(chunk[: self._got]), len(chunk))
                await self._wait()
        finally:
            self._body = None

    def _consumed(self) -> None:
        if self._start == self._end:
            self._start = self._end = 0
        self._resume()

    async def _wait(self) -> None:
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause(self) -> None:
        if not self._paused:
            self._paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self._paused and (self._body is not None or self._start or self._end < SCRATCH_BYTES):
            self._paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()

    # ----- writing -------------------------------------------------------------------------------------
    def touch(self) -> None:
        """Record activity now (a response begun, a file region's piece taken by the socket)."""
        self.last_activity = self._loop.time()

    def write_pending(self) -> int:
        """Bytes written and not yet taken by the socket: the transport's buffer, and under TLS the encrypted
        bytes in the socket's own transport too (asyncio's TLS transport counts only what it has not
        encrypted yet). The idle sweep reads a change in it as the client taking its response."""
        pending = self.transport.get_write_buffer_size()
        if self._raw_transport is not None:
            pending += self._raw_transport.get_write_buffer_size()
        return pending

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait until the transport's buffer is below its high-water mark (ConnectionResetError if lost)."""
        if self._lost is not None:
            raise self._lost
        if self.transport.is_closing():
            await asyncio.sleep(0)  # let connection_lost run, as StreamWriter.drain does
            if self._lost is not None:
                raise self._lost
        if not self._write_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)

    async def start_tls(self, context: ssl.SSLContext, *, ssl_handshake_timeout: float | None = None) -> None:
        """Upgrade to TLS as the server side (nothing may have been read yet)."""
        transport = await self._loop.start_tls(
            self.transport, self, context, server_side=True, ssl_handshake_timeout=ssl_handshake_timeout
        )
        if transport is None:  # the connection was closed during the handshake
            raise ConnectionResetError("Connection lost during the TLS handshake")
        self._raw_transport = self.transport
        self.transport = transport  # type: ignore[assignment]
        self._over_ssl = True

    def close(self) -> None:
        self.transport.close()

    async def wait_closed(self) -> None:
        await self._closed
