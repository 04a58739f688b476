"""Adapters over three independent Kafka record codecs, used as oracles by test_differential.py.

The oracles are kafka-python 3.0.12, aiokafka 0.14.0's Cython codec and aiokafka's pure-Python fallback
(the ``_...Py`` classes AIOKAFKA_NO_EXTENSIONS=1 selects). Everything here is independent of kafkalog:
the helpers that play the broker's part (assigning offsets, stamping LogAppendTime) recompute checksums
with the ``crc32c`` package and ``zlib`` directly, never with kafkalog's code.

Known quirks of the oracles, each checked by a test rather than assumed:
- kafka-python's v2 builder writes partitionLeaderEpoch 0 where Kafka (and aiokafka) write -1.
- kafka-python's and aiokafka-py's v2 builders send a batch uncompressed when compressing it does not
  make it smaller; aiokafka's Cython builder, like Kafka's Java producer, always compresses.
- Bug in aiokafka's Cython v2 builder: it takes a first timestamp of -1 (NO_TIMESTAMP) for "not set yet",
  so a batch whose first record has timestamp -1 gets the first later real timestamp as its baseTimestamp
  and the -1 record reads back with that timestamp (Kafka keeps baseTimestamp -1). The Python builders agree
  with Kafka.
- No v2 builder can write LogAppendTime or control batches: those are the broker's business, so
  ``stamp_log_append_time`` emulates it.
- Both legacy builders leave the wrapper's offset and timestamp at 0 for the broker to fill in.
- A legacy ``LegacyRecordBatch`` holds exactly one message: kafka-python and aiokafka-py assert on a
  longer buffer, aiokafka's Cython reader silently reads the first message only (and reports a bad CRC).
  Message sets are read through ``MemoryRecords``.
- Magic 0 + lz4: aiokafka refuses to write or read it; kafka-python computes the "broken" header
  checksum with the ``xxhash`` package (a declared test dependency).
- aiokafka's v2 records carry no control-record type; ``aiokafka.record.control_record.ControlRecord``
  parses the key. kafka-python yields ``ControlRecord`` objects with ``type``/``commit``/``abort``.
- aiokafka's ``_MemoryRecordsPy`` builds its batches with the module-level ``DefaultRecordBatch``, which
  is the Cython class unless AIOKAFKA_NO_EXTENSIONS was set before import.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

import aiokafka.record.default_records as aio_default
import aiokafka.record.legacy_records as aio_legacy
import aiokafka.record.memory_records as aio_memory
import kafka.record.default_records as kp_default
import kafka.record.legacy_records as kp_legacy
import kafka.record.memory_records as kp_memory
from aiokafka.record.control_record import ControlRecord as AioControlRecord
from crc32c import crc32c as _crc32c

# v2 header: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_FIELDS = (
    "base_offset",
    "batch_length",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "record_count",
)

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BATCH_SIZE = 1 << 30  # large enough that the oracle builders never refuse an append


# ----- the oracles ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Oracle:
    name: str
    batch: Any  # DefaultRecordBatch class
    builder: Any  # DefaultRecordBatchBuilder class
    legacy_batch: Any
    legacy_builder: Any
    memory_records: Any
    writes_ple: int  # the partitionLeaderEpoch its v2 builder writes
    skips_useless_compression: bool  # its v2 builder sends uncompressed when compressing does not shrink

    def __repr__(self) -> str:
        return self.name


KAFKA_PYTHON = Oracle(
    "kafka-python",
    kp_default.DefaultRecordBatch,
    kp_default.DefaultRecordBatchBuilder,
    kp_legacy.LegacyRecordBatch,
    kp_legacy.LegacyRecordBatchBuilder,
    kp_memory.MemoryRecords,
    0,
    True,
)
AIOKAFKA_CYTHON = Oracle(
    "aiokafka-cython",
    aio_default.DefaultRecordBatch,
    aio_default.DefaultRecordBatchBuilder,
    aio_legacy.LegacyRecordBatch,
    aio_legacy.LegacyRecordBatchBuilder,
    aio_memory.MemoryRecords,
    -1,
    False,
)
AIOKAFKA_PY = Oracle(
    "aiokafka-py",
    aio_default._DefaultRecordBatchPy,
    aio_default._DefaultRecordBatchBuilderPy,
    aio_legacy._LegacyRecordBatchPy,
    aio_legacy._LegacyRecordBatchBuilderPy,
    aio_memory._MemoryRecordsPy,
    -1,
    True,
)
ORACLES = (KAFKA_PYTHON, AIOKAFKA_CYTHON, AIOKAFKA_PY)


# ----- reading with an oracle ----------------------------------------------------------------------


def oracle_batch_header(batch) -> dict:
    """The header fields every oracle's DefaultRecordBatch exposes, under kafkalog's names."""
    return {
        "base_offset": batch.base_offset,
        "magic": batch.magic,
        "crc": batch.crc,
        "attributes": batch.attributes,
        "last_offset_delta": batch.last_offset_delta,
        "base_timestamp": batch.first_timestamp,
        "max_timestamp": batch.max_timestamp,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "compression_type": batch.compression_type,
        "timestamp_type": batch.timestamp_type,
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control_batch,
        "next_offset": batch.next_offset,
    }


def oracle_record(record) -> tuple:
    """(offset, timestamp, key, value, headers) of an oracle's record, headers as a tuple of pairs."""
    return (
        record.offset,
        record.timestamp,
        record.key,
        record.value,
        tuple(tuple(h) for h in record.headers),
    )


def oracle_read_v2(oracle: Oracle, data: bytes) -> tuple[dict, list[tuple], bool, list]:
    """Parse one v2 batch with ``oracle``: (header fields, records, crc valid, raw record objects)."""
    batch = oracle.batch(bytes(data))
    crc_ok = batch.validate_crc()  # must run before iterating
    header = oracle_batch_header(batch)
    raw = list(batch)
    return header, [oracle_record(r) for r in raw], crc_ok, raw


def oracle_read_all(oracle: Oracle, data: bytes) -> list[tuple[Any, bool, list]]:
    """Walk a buffer of batches with the oracle's MemoryRecords: [(batch, crc valid, [record objects])]."""
    records = oracle.memory_records(bytes(data))
    out = []
    while records.has_next():
        batch = records.next_batch()
        crc_ok = batch.validate_crc()  # before iterating, as the oracles require
        out.append((batch, crc_ok, list(batch)))
    return out


def control_type_of(oracle: Oracle, record) -> int:
    """The control record type as the oracle decodes it (kafka-python natively, aiokafka via its parser)."""
    if oracle is KAFKA_PYTHON:
        assert isinstance(record, kp_default.ControlRecord), type(record)
        return record.type
    return AioControlRecord.parse(record.key).type_


# ----- writing with an oracle ----------------------------------------------------------------------


def oracle_build_v2(
    oracle: Oracle,
    records,
    *,
    codec: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """Build one v2 batch with the oracle's builder from (offset_delta, timestamp, key, value, headers)."""
    builder = oracle.builder(
        magic=2,
        compression_type=codec,
        is_transactional=int(transactional),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=BATCH_SIZE,
    )
    for offset_delta, timestamp, key, value, headers in records:
        meta = builder.append(offset_delta, timestamp, key, value, [tuple(h) for h in headers])
        assert meta is not None, "the oracle refused an append"
    return bytes(builder.build())


def oracle_build_legacy(oracle: Oracle, magic: int, codec: int, records) -> bytes:
    """Build legacy messages with the oracle's builder from (offset, timestamp, key, value)."""
    builder = oracle.legacy_builder(magic=magic, compression_type=codec, batch_size=BATCH_SIZE)
    for offset, timestamp, key, value in records:
        assert builder.append(offset, timestamp, key, value) is not None, "the oracle refused an append"
    return bytes(builder.build())


# ----- playing the broker --------------------------------------------------------------------------


def v2_header(data: bytes, position: int = 0) -> dict:
    return dict(zip(V2_FIELDS, V2_HEADER.unpack_from(data, position), strict=True))


def set_base_offset(data: bytes, base_offset: int) -> bytes:
    """Assign the batch's base offset, as the broker does (not covered by the CRC)."""
    return struct.pack(">q", base_offset) + bytes(data[8:])


def set_partition_leader_epoch(data: bytes, epoch: int) -> bytes:
    """Overwrite partitionLeaderEpoch, as the broker does (not covered by the CRC)."""
    return bytes(data[:12]) + struct.pack(">i", epoch) + bytes(data[16:])


def stamp_log_append_time(data: bytes, append_time: int) -> bytes:
    """Set LogAppendTime and maxTimestamp on a v2 batch and recompute its CRC-32C, as the broker does."""
    buf = bytearray(data)
    (attributes,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attributes | 0x08)
    struct.pack_into(">q", buf, 35, append_time)
    struct.pack_into(">I", buf, 17, _crc32c(bytes(buf[21:])))
    return bytes(buf)


def set_legacy_offset(data: bytes, offset: int) -> bytes:
    """Set the offset of a legacy message (wrapper), as the broker does (outside the CRC)."""
    return struct.pack(">q", offset) + bytes(data[8:])


def stamp_legacy_log_append_time(data: bytes, append_time: int) -> bytes:
    """Turn a v1 message into LogAppendTime with ``append_time`` and recompute its CRC-32."""
    buf = bytearray(data)
    assert buf[16] == 1, "LogAppendTime exists from magic 1 on"
    buf[17] |= 0x08
    struct.pack_into(">q", buf, 18, append_time)
    struct.pack_into(">I", buf, 12, zlib.crc32(bytes(buf[16:])) & 0xFFFFFFFF)
    return bytes(buf)
