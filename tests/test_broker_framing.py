"""The socket server's read path (broker/framing.py): Kafka's size-prefixed frames, however the bytes arrive.

The stream is driven as asyncio's transport drives a BufferedProtocol (get_buffer, then buffer_updated with
what recv_into wrote), by a fake transport that records pauses, so every split of the bytes can be tried.
"""

from __future__ import annotations

import asyncio
import random
import struct

import numpy as np
import pytest

from kafkalog.broker import framing
from kafkalog.broker.framing import SCRATCH_BYTES, FrameStream


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.pauses = 0
        self.closing = False
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        assert not self.reading, "resumed while reading"
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name, default=None):
        return default

    def write(self, data) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closing = True


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def deliver(stream: FrameStream, data: bytes, step: int | None = None) -> int:
    """Feed ``data`` as the transport would, ``step`` bytes per recv at most (all it offers, by default);
    stop when the stream pauses reading. Returns how many bytes were taken."""
    taken = 0
    while taken < len(data) and stream.transport.is_reading():
        buf = stream.get_buffer(-1)
        assert len(buf) > 0, "get_buffer must never offer an empty buffer"
        n = min(len(buf), len(data) - taken, step or len(data))
        buf[:n] = data[taken : taken + n]
        taken += n
        stream.buffer_updated(n)
    return taken


async def _started(on_connect=None) -> tuple[FrameStream, FakeTransport]:
    async def idle(_stream: FrameStream) -> None:
        return None

    stream = FrameStream(on_connect or idle)
    transport = FakeTransport()
    stream.connection_made(transport)
    return stream, transport


async def read_frames(stream: FrameStream, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        size = await stream.read_size()
        out.append(bytes(await stream.read_body(size)))
    return out


@pytest.mark.parametrize("step", [1, 3, 7, 4096, None])
def test_frames_split_anywhere_and_pipelined_come_out_whole(step) -> None:
    rng = random.Random(step or 0)
    bodies = [rng.randbytes(rng.choice([0, 1, 5, 300, 5000, 40_000, 200_000])) for _ in range(12)]
    data = b"".join(frame(b) for b in bodies)

    async def run() -> list[bytes]:
        stream, _ = await _started()
        reader = asyncio.ensure_future(read_frames(stream, len(bodies)))
        taken = 0
        while taken < len(data):
            taken += deliver(stream, data[taken:], step)
            await asyncio.sleep(0)  # let the reader take what is there (and resume a paused stream)
        return await asyncio.wait_for(reader, 10)

    assert asyncio.run(run()) == bodies


def test_a_large_body_is_received_straight_into_its_own_buffer() -> None:
    body = random.Random(1).randbytes(1 << 20)

    async def run():
        stream, _ = await _started()
        deliver(stream, frame(body)[:1000])  # the size and the start of the body land in the scratch buffer
        size = await stream.read_size()
        reading = asyncio.ensure_future(stream.read_body(size))
        await asyncio.sleep(0)
        buf = stream.get_buffer(-1)
        assert len(buf) == len(body) - 996  # the socket is offered exactly the rest of the body
        deliver(stream, frame(body)[1000:])
        return await reading

    got = asyncio.run(run())
    assert isinstance(got.obj, np.ndarray) and got.nbytes == len(body)  # not copied again after the socket
    assert bytes(got) == body


def test_a_body_above_the_chunk_size_comes_in_chunks_and_is_joined(monkeypatch) -> None:
    monkeypatch.setattr(framing, "BODY_CHUNK_BYTES", 64 * 1024)
    body = random.Random(2).randbytes(300_000)

    async def run():
        stream, _ = await _started()
        reader = asyncio.ensure_future(read_frames(stream, 2))
        data = frame(body) + frame(b"next")
        taken = 0
        while taken < len(data):
            taken += deliver(stream, data[taken:], 10_000)
            await asyncio.sleep(0)
        return await reader

    assert asyncio.run(run()) == [body, b"next"]


def test_reading_pauses_while_the_scratch_buffer_is_full_and_resumes_once_read() -> None:
    small = [bytes([i]) * 1000 for i in range(100)]  # ~100 KB of pipelined requests: more than the scratch holds
    data = b"".join(frame(b) for b in small)

    async def run():
        stream, transport = await _started()
        taken = deliver(stream, data)
        assert not transport.reading and transport.pauses == 1
        assert taken == SCRATCH_BYTES  # bounded: the rest waits in the socket
        got = []
        while len(got) < len(small):
            got += await asyncio.wait_for(read_frames(stream, 1), 5)
            if transport.reading and taken < len(data):
                taken += deliver(stream, data[taken:])
        return got

    assert asyncio.run(run()) == small


def test_end_of_stream_inside_a_frame_is_an_incomplete_read() -> None:
    async def run(cut: int):
        stream, _ = await _started()
        deliver(stream, frame(b"x" * 50_000)[:cut])
        stream.eof_received()
        size = await stream.read_size()
        await stream.read_body(size)

    with pytest.raises(asyncio.IncompleteReadError):
        asyncio.run(run(2))  # inside the size
    with pytest.raises(asyncio.IncompleteReadError):
        asyncio.run(run(30_000))  # inside the body


def test_bytes_received_are_recorded_as_activity_and_a_body_waits_without_a_timer() -> None:
    """No timer per request: the stream records when bytes last came (``last_activity``) and which frame's body
    it is receiving (``receiving``); the socket server's idle sweep reads both (tests/test_broker_idle.py)."""

    async def run():
        stream, _ = await _started()
        data = frame(b"y" * 100_000)
        deliver(stream, data[:5000])
        size = await stream.read_size()
        reading = asyncio.ensure_future(stream.read_body(size))
        await asyncio.sleep(0)
        assert stream.receiving == 100_000
        seen = stream.last_activity
        await asyncio.sleep(0.3)  # nothing comes: still waiting, no TimeoutError of its own
        assert not reading.done() and stream.last_activity == seen
        deliver(stream, data[5000:6000])
        assert stream.last_activity > seen
        deliver(stream, data[6000:])
        assert bytes(await reading) == b"y" * 100_000
        assert stream.receiving == 0

    asyncio.run(run())


def test_drain_waits_for_resume_writing_and_fails_when_the_connection_is_lost() -> None:
    async def run():
        stream, _ = await _started()
        await stream.drain()  # not paused: returns at once
        stream.pause_writing()
        waiting = asyncio.ensure_future(stream.drain())
        await asyncio.sleep(0)
        assert not waiting.done()
        stream.resume_writing()
        await asyncio.wait_for(waiting, 1)
        stream.pause_writing()
        lost = asyncio.ensure_future(stream.drain())
        await asyncio.sleep(0)
        stream.connection_lost(None)
        with pytest.raises(ConnectionResetError):
            await lost
        await asyncio.wait_for(stream.wait_closed(), 1)

    asyncio.run(run())
