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


def decode(version: int, body: memoryview) -> ProduceRequestData:
    """The produce request of ``version`` (3-11) in ``body`` (the frame after its header).

    Raises Malformed or NullField (the caller reports both as the schema decoder's failures are reported) and
    TaggedFields when the request must go to the schema decoder. One flat function: it runs for every
    produce request, and per partition it does only what the wire format needs (a call per field would double
    it for requests of many small partitions).
    """
    flexible = version >= FLEXIBLE_FROM
    data, end = body, len(body)
    unpack_i32, unpack_i16 = _I32.unpack_from, _I16.unpack_from
    try:
        # transactional_id: nullable string
        if flexible:
            n, pos = _varint(data, 0)
            n -= 1
        else:
            (n,) = unpack_i16(data, 0)
            pos = 2
        transactional_id = None
        if n >= 0:
            if pos + n > end:
                raise _past_end(data, pos)
            transactional_id = str(data[pos : pos + n], "utf-8")
            pos += n
        acks, timeout_ms = _HEAD.unpack_from(data, pos)
        pos += 6
        if flexible:
            topic_count = data[pos]  # one byte below 128: most lengths and counts
            if topic_count < 0x80:
                pos += 1
            else:
                topic_count, pos = _varint(data, pos)
            topic_count -= 1
        else:
            (topic_count,) = unpack_i32(data, pos)
            pos += 4
        if topic_count < 0:
            raise NullField("topic_data")
        topics = []
        for _ in range(topic_count):
            if flexible:
                n = data[pos]  # one byte below 128: most lengths and counts
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = _varint(data, pos)
                n -= 1
            else:
                (n,) = unpack_i16(data, pos)
                pos += 2
            if n < 0:
                raise NullField("topic_data.name")
            if pos + n > end:
                raise _past_end(data, pos)
            name = str(data[pos : pos + n], "utf-8")
            pos += n
            if flexible:
                count = data[pos]  # one byte below 128: most lengths and counts
                if count < 0x80:
                    pos += 1
                else:
                    count, pos = _varint(data, pos)
                count -= 1
            else:
                (count,) = unpack_i32(data, pos)
                pos += 4
            if count < 0:
                raise NullField("topic_data.partition_data")
            partitions = []
            for _ in range(count):
                (index,) = unpack_i32(data, pos)
                pos += 4
                if flexible:
                    n = data[pos]  # one byte below 128: most lengths and counts
                    if n < 0x80:
                        pos += 1
                    else:
                        n, pos = _varint(data, pos)
                    n -= 1
                else:
                    (n,) = unpack_i32(data, pos)
                    pos += 4
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
