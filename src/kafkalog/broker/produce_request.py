"""Produce requests (key 0, v3-v11) read without copying their records.

The schema decoder (kafka-python's, generated from Kafka's message JSON) copies every ``bytes`` field out of
the frame: a produce request's record batches, which are nearly all of it, were copied once more after the
kernel had put them in the frame's own buffer (``framing``), about 25 us per MiB, and its objects cost a few
microseconds per partition besides. Here each partition's ``records`` is a ``memoryview`` of the frame, which
stays alive as long as the request does and is never written to (a frame's buffer is its own, see
``framing.FrameStream.read_body``). The fields and their names are the schema decoder's (``transactional_id``,
``acks``, ``timeout_ms``, ``topic_data[].name``, ``.partition_data[].index``, ``.records``), so the handler
reads either.

What the schema says (ProduceRequest.json): v9 and later are flexible (compact strings, arrays and bytes, a
tag buffer after every struct). A request carrying a tagged field (none is defined for Produce up to v11, but
a client may send unknown ones) is handed to the schema decoder, which keeps them; so is nothing else.
Malformed input raises the same ``InvalidRequestError`` as the schema decoder's failures do, and a null
where the schema forbids one is refused as ``protocol._null_where_not_nullable`` refuses it. A record set that
runs past the end of the request is refused too (Kafka's reader fails on it; the schema decoder would have
cut it short).
"""

from __future__ import annotations

import struct

from ..errors import InvalidRecordError
from ..record.varint import read_unsigned_varint

FLEXIBLE_FROM = 9
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hi")  # acks, timeout_ms


class Malformed(ValueError):
    """The request does not parse; the caller turns it into InvalidRequestError with the request's identity."""


class NullField(ValueError):
    """A field the schema does not declare nullable was null; ``args[0]`` is its path (``topic_data.name``)."""


class TaggedFields(Exception):
    """The request carries tagged fields: let the schema decoder read it."""


class PartitionProduceData:
    """One partition of a produce request: its index and its record set (a view of the frame, or None)."""

    __slots__ = ("index", "records")

    def __init__(self, index: int, records: memoryview | None) -> None:
        self.index = index
        self.records = records


class TopicProduceData:
    """One topic of a produce request and its partitions, in request order."""

    __slots__ = ("name", "partition_data")

    def __init__(self, name: str, partition_data: list[PartitionProduceData]) -> None:
        self.name = name
        self.partition_data = partition_data


class ProduceRequestData:
    """A decoded produce request: the schema decoder's field names, records as views of the frame."""

    __slots__ = ("acks", "timeout_ms", "topic_data", "transactional_id")

    def __init__(
        self, transactional_id: str | None, acks: int, timeout_ms: int, topic_data: list[TopicProduceData]
    ) -> None:
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topic_data = topic_data


class _Reader:
    """A cursor over the body; every read checks that the bytes are there (Malformed when not)."""

    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: memoryview, flexible: bool) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def fixed(self, shape: struct.Struct) -> tuple:
        if self.pos + shape.size > len(self.data):
            raise Malformed(f"the request ends at byte {len(self.data)}, inside a field at byte {self.pos}")
        values = shape.unpack_from(self.data, self.pos)
        self.pos += shape.size
        return values

    def varint(self) -> int:
        try:
            value, self.pos = read_unsigned_varint(self.data, self.pos)
        except (InvalidRecordError, IndexError, ValueError) as e:
            raise Malformed(f"bad varint at byte {self.pos}: {e}") from None
        return value

    def length(self, classic: struct.Struct) -> int:
        """A length prefix: compact (unsigned varint, n + 1; 0 is null) when flexible, else signed; -1 is null."""
        if self.flexible:
            return self.varint() - 1
        return self.fixed(classic)[0]

    def view(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.data):
            raise Malformed(f"a field of {n} bytes at byte {self.pos} runs past the end of the request")
        view = self.data[self.pos : end]
        self.pos = end
        return view

    def string(self, path: str, nullable: bool) -> str | None:
        n = self.length(_I16)
        if n < 0:
            if nullable:
                return None
            raise NullField(path)
        try:
            return str(self.view(n), "utf-8")
        except UnicodeDecodeError as e:
            raise Malformed(f"{path} is not UTF-8: {e}") from None

    def array_length(self, path: str) -> int:
        n = self.length(_I32)
        if n < 0:
            raise NullField(path)
        return n

    def no_tags(self) -> None:
        if self.flexible:
            if self.pos >= len(self.data):
                raise Malformed("the request ends before a tag buffer")
            if self.data[self.pos] != 0:
                raise TaggedFields
            self.pos += 1


def decode(version: int, body: memoryview) -> ProduceRequestData:
    """The produce request of ``version`` (3-11) in ``body`` (the frame after its header).

    Raises Malformed or NullField (the caller reports both as the schema decoder's failures are reported) and
    TaggedFields when the request must go to the schema decoder.
    """
    r = _Reader(body, version >= FLEXIBLE_FROM)
    transactional_id = r.string("transactional_id", nullable=True)
    acks, timeout_ms = r.fixed(_HEAD)
    topics = []
    for _ in range(r.array_length("topic_data")):
        name = r.string("topic_data.name", nullable=False)
        partitions = []
        for _ in range(r.array_length("topic_data.partition_data")):
            (index,) = r.fixed(_I32)
            n = r.length(_I32)
            partitions.append(PartitionProduceData(index, None if n < 0 else r.view(n)))
            r.no_tags()
        r.no_tags()
        topics.append(TopicProduceData(name, partitions))  # type: ignore[arg-type]
    r.no_tags()
    return ProduceRequestData(transactional_id, acks, timeout_ms, topics)
