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


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    try:
        return read_unsigned_varint(data, pos)
    except (InvalidRecordError, IndexError, ValueError) as e:
        raise Malformed(f"bad varint at byte {pos}: {e}") from None


def _past_end(data: memoryview, pos: int) -> Malformed:
    return Malformed(f"the request ends at byte {len(data)}, inside a field at byte {pos}")


def _length(data: memoryview, pos: int, flexible: bool, classic: struct.Struct) -> tuple[int, int]:
    """(a length or count, the position after it): compact when flexible (an unsigned varint of n + 1, so 0 is
    null, most of them one byte), else ``classic`` (int16 for strings, int32 for arrays and bytes; -1 null)."""
    if flexible:
        n = data[pos]
        if n < 0x80:
            return n - 1, pos + 1
        n, pos = _varint(data, pos)
        return n - 1, pos
    return classic.unpack_from(data, pos)[0], pos + classic.size


def _string(data: memoryview, pos: int, flexible: bool) -> tuple[str | None, int]:
    """(a nullable string, the position after it)."""
    n, pos = _length(data, pos, flexible, _I16)
    if n < 0:
        return None, pos
    if pos + n > len(data):
        raise _past_end(data, pos)
    return str(data[pos : pos + n], "utf-8"), pos + n


def decode(version: int, body: memoryview) -> ProduceRequestData:
    """The produce request of ``version`` (3-11) in ``body`` (the frame after its header).

    Raises Malformed or NullField (the caller reports both as the schema decoder's failures are reported) and
    TaggedFields when the request must go to the schema decoder. One flat function: it runs for every
    produce request; per partition it makes two small calls (a length, a record count), with the common one-byte
    compact lengths answered without the general varint reader.
    """
    flexible = version >= FLEXIBLE_FROM
    data, end = body, len(body)
    unpack_i32 = _I32.unpack_from
    try:
        transactional_id, pos = _string(data, 0, flexible)
        acks, timeout_ms = _HEAD.unpack_from(data, pos)
        topic_count, pos = _length(data, pos + 6, flexible, _I32)
        if topic_count < 0:
            raise NullField("topic_data")
        topics = []
        for _ in range(topic_count):
            name, pos = _string(data, pos, flexible)
            if name is None:
                raise NullField("topic_data.name")
            count, pos = _length(data, pos, flexible, _I32)
            if count < 0:
                raise NullField("topic_data.partition_data")
            partitions = []
            for _ in range(count):
                (index,) = unpack_i32(data, pos)
                n, pos = _length(data, pos + 4, flexible, _I32)
                records = None
                if n >= 0:
                    if pos + n > end:
                        raise Malformed(f"a record set of {n} bytes at byte {pos} runs past the end of the request")
                    records = data[pos : pos + n]
                    pos += n
                if flexible:
                    if data[pos]:
                        raise TaggedFields
                    pos += 1
                partitions.append(PartitionProduceData(index, records))
            if flexible:
                if data[pos]:
                    raise TaggedFields
                pos += 1
            topics.append(TopicProduceData(name, partitions))
        if flexible and data[pos]:
            raise TaggedFields
    except struct.error as e:
        raise Malformed(str(e)) from None
    except IndexError:
        raise Malformed(f"the request ends at byte {end}, inside a field") from None
    except UnicodeDecodeError as e:
        raise Malformed(f"a string is not UTF-8: {e}") from None
    return ProduceRequestData(transactional_id, acks, timeout_ms, topics)
