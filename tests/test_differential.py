"""Differential tests against three independent Kafka codecs, in both directions.

Direction 1: batches built by kafkalog's ``RecordBatchBuilder`` (and ``control_batch``) must parse in
kafka-python, aiokafka's Cython codec and aiokafka's pure-Python codec with every field intact and a
valid CRC. Direction 2: batches (v2, and legacy v0/v1 messages) built by each oracle's builder must
parse in kafkalog, through record iteration and through ``to_arrow``, exactly as the oracle and Kafka's
semantics say. Expected values are computed here from the inputs, not read back from either side.
The oracles' quirks are described in ``oracles.py`` and asserted where they matter.
"""

from __future__ import annotations

import io
import json
import os
import random
import struct
import subprocess
import sys
from dataclasses import dataclass, replace
from unittest import mock

import kafka.codec
import kafka.record.default_records
import lz4.frame
import pyarrow as pa
import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import oracles
from kafkalog.record import (
    ControlRecordType,
    CorruptRecordError,
    LegacyBatch,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    control_batch,
    iter_batches,
    to_arrow,
)
from oracles import AIOKAFKA_CYTHON, AIOKAFKA_PY, CODECS, KAFKA_PYTHON, ORACLES

INT32_MAX = (1 << 31) - 1
CODEC_NAMES = tuple(CODECS)
LEGACY_CODECS = ("gzip", "snappy", "lz4")
ORACLE_IDS = [o.name for o in ORACLES]
HYPOTHESIS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ----- what a batch should hold ----------------------------------------------------------------------


@dataclass
class Spec:
    """One v2 batch to build: records are (offset_delta, timestamp, key, value, headers)."""

    records: list
    codec: str = "none"
    base_offset: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    transactional: bool = False
    log_append_time: int | None = None  # None: CreateTime
    partition_leader_epoch: int = -1


def _increment_sequence(seq: int, inc: int) -> int:
    if seq > INT32_MAX - inc:
        return inc - (INT32_MAX - seq) - 1
    return seq + inc


def expected_header(spec: Spec, codec_id: int | None = None) -> dict:
    codec_id = CODECS[spec.codec] if codec_id is None else codec_id
    attributes = codec_id
    if spec.log_append_time is not None:
        attributes |= 0x08
    if spec.transactional:
        attributes |= 0x10
    if spec.log_append_time is not None:
        max_ts = spec.log_append_time
    else:
        max_ts = -1
        for _, ts, *_ in spec.records:
            max_ts = max(max_ts, ts)
    last_delta = spec.records[-1][0]
    return {
        "base_offset": spec.base_offset,
        "magic": 2,
        "attributes": attributes,
        "last_offset_delta": last_delta,
        "base_timestamp": spec.records[0][1],
        "max_timestamp": max_ts,
        "producer_id": spec.producer_id,
        "producer_epoch": spec.producer_epoch,
        "base_sequence": spec.base_sequence,
        "compression_type": codec_id,
        "timestamp_type": 1 if spec.log_append_time is not None else 0,
        "is_transactional": spec.transactional,
        "is_control": False,
        "next_offset": spec.base_offset + last_delta + 1,
    }


def expected_records(spec: Spec) -> list[tuple]:
    """(offset, timestamp, key, value, headers) of every record, as a consumer must see them."""
    return [
        (
            spec.base_offset + od,
            spec.log_append_time if spec.log_append_time is not None else ts,
            key,
            value,
            tuple((k, v) for k, v in headers),
        )
        for od, ts, key, value, headers in spec.records
    ]


def expected_sequences(spec: Spec) -> list[int]:
    if spec.base_sequence < 0:
        return [-1] * len(spec.records)
    return [_increment_sequence(spec.base_sequence, od) for od, *_ in spec.records]


# ----- our side ---------------------------------------------------------------------------------------


def build_ours(spec: Spec) -> bytes:
    builder = RecordBatchBuilder(
        spec.codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME if spec.log_append_time is not None else TimestampType.CREATE_TIME,
        producer_id=spec.producer_id,
        producer_epoch=spec.producer_epoch,
        base_sequence=spec.base_sequence,
        is_transactional=spec.transactional,
        base_offset=spec.base_offset,
        partition_leader_epoch=spec.partition_leader_epoch,
        log_append_time=spec.log_append_time,
    )
    for od, ts, key, value, headers in spec.records:
        assert builder.append(key, value, ts, headers, offset=spec.base_offset + od) == spec.base_offset + od
    return builder.build()


def our_header(batch: RecordBatch) -> dict:
    return {
        "base_offset": batch.base_offset,
        "magic": batch.magic,
        "attributes": batch.attributes,
        "last_offset_delta": batch.last_offset_delta,
        "base_timestamp": batch.base_timestamp,
        "max_timestamp": batch.max_timestamp,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "compression_type": batch.compression_type,
        "timestamp_type": int(batch.timestamp_type_id),
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control,
        "next_offset": batch.next_offset,
    }


def arrow_rows(table: pa.Table) -> list[tuple]:
    """(offset, timestamp ms, timestampType, key, value, headers) of every row of a to_arrow table."""
    cols = [
        table.column("offset").to_pylist(),
        table.column("timestamp").cast(pa.int64()).to_pylist(),
        table.column("timestampType").to_pylist(),
        table.column("key").to_pylist(),
        table.column("value").to_pylist(),
        [tuple((h["key"], h["value"]) for h in hs) for hs in table.column("headers").to_pylist()],
    ]
    return list(zip(*cols, strict=True))


def assert_ours_reads(data: bytes, spec: Spec, codec_id: int | None = None) -> None:
    """kafkalog reads ``data`` (one v2 batch) as ``spec`` says: header, records, sequences, to_arrow."""
    batches = list(iter_batches(data))
    assert len(batches) == 1
    batch = batches[0]
    assert isinstance(batch, RecordBatch)
    batch.ensure_valid()
    assert batch.is_valid()
    assert batch.size_in_bytes == len(data)
    assert batch.record_count == len(spec.records)
    assert batch.partition_leader_epoch == oracles.v2_header(data)["partition_leader_epoch"]
    assert our_header(batch) == expected_header(spec, codec_id)
    records = batch.records()
    assert [tuple(r[:5]) for r in records] == expected_records(spec)
    assert [r.sequence for r in records] == expected_sequences(spec)
    ts_type = 1 if spec.log_append_time is not None else 0
    rows = [(o, t, ts_type, k, v, h) for o, t, k, v, h in expected_records(spec)]
    assert arrow_rows(to_arrow(data)) == rows
    assert arrow_rows(to_arrow(bytearray(data))) == rows  # what the oracles' builders return


def assert_oracle_reads(oracle, data: bytes, spec: Spec) -> None:
    """The oracle reads ``data`` (built by kafkalog from ``spec``) with a valid CRC and every field intact."""
    header, records, crc_ok, _ = oracles.oracle_read_v2(oracle, data)
    assert crc_ok, f"{oracle.name} rejects the CRC of our batch"
    raw = oracles.v2_header(data)
    assert header.pop("crc") == raw["crc"]
    assert raw["partition_leader_epoch"] == spec.partition_leader_epoch
    assert raw["record_count"] == len(spec.records)
    assert raw["batch_length"] == len(data) - 12
    assert header == expected_header(spec)
    assert records == expected_records(spec)
    if oracle is KAFKA_PYTHON:  # the only oracle exposing these
        batch = oracle.batch(data)
        assert batch.leader_epoch == spec.partition_leader_epoch
        assert batch.records_count == len(spec.records)
        assert batch.size_in_bytes == len(data)
        expected_last_seq = (
            -1 if spec.base_sequence < 0 else _increment_sequence(spec.base_sequence, spec.records[-1][0])
        )
        assert batch.last_sequence == expected_last_seq
        assert batch.has_producer_id() == (spec.producer_id >= 0)


def assert_same_bytes_but_ple(oracle, ours: bytes, theirs: bytes) -> None:
    """Uncompressed, same fields: identical bytes, except kafka-python's partitionLeaderEpoch 0 (Kafka -1)."""
    if oracle.writes_ple == 0:
        assert theirs[12:16] == b"\x00\x00\x00\x00"
        assert ours[12:16] == b"\xff\xff\xff\xff"
        assert ours[:12] + ours[16:] == theirs[:12] + theirs[16:]
    else:
        assert ours == theirs


# ----- frame inspection (to prove the multi-block cases are multi-block) --------------------------------


def lz4_blocks(frame: bytes) -> list[bool]:
    """For each block of an lz4 frame: True when it is stored raw (incompressible)."""
    flg = frame[4]
    pos = 7 + (8 if flg & 0x08 else 0)
    raw = []
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if word == 0:
            return raw
        pos += (word & 0x7FFFFFFF) + (4 if flg & 0x10 else 0)
        raw.append(bool(word & 0x80000000))


def xerial_block_count(stream: bytes) -> int:
    assert stream[:8] == b"\x82SNAPPY\x00"
    pos, count = 16, 0
    while pos < len(stream):
        (length,) = struct.unpack_from(">i", stream, pos)
        pos += 4 + length
        count += 1
    assert pos == len(stream)
    return count


# ----- record material --------------------------------------------------------------------------------

NON_ASCII_KEYS = ("clé", "ключ", "键", "🔑", "Ω≈ç√")


def rich_records(ts0: int = 1_700_000_000_000) -> list:
    """Nulls, empties, headers of every kind, timestamps out of order, compressible values."""
    return [
        (0, ts0, b"key-0", b"value-0" * 20, ()),
        (1, ts0 + 5, None, b"null key" * 10, [("a", b"1")]),
        (2, ts0 - 3, b"k2", None, [("tombstone", None)]),
        (3, ts0 + 1, None, None, ()),
        (4, ts0 + 10_000_000, b"", b"", [("", b""), ("empty", b"")]),
        (5, ts0, b"k5", b"x" * 300, [(k, k.encode() * 3) for k in NON_ASCII_KEYS]),
        (
            6,
            ts0 + 7,
            "ключ".encode(),
            "значение".encode() * 8,
            [("h", None), ("h", b"dup"), ("h2", b"\x00\xff")],
        ),
        (7, ts0 + 2, b"k7", b"repeat " * 40, [("many", bytes([i])) for i in range(12)]),
    ]


def large_records(seed: int = 7) -> list:
    """Values over 64 KiB (several lz4 blocks) and over 32 KiB (several xerial snappy blocks), mixing
    incompressible and compressible bytes so that some lz4 blocks are stored raw."""
    rng = random.Random(seed)
    return [
        (0, 1_600_000_000_000, b"big-0", rng.randbytes(70_000) + b"z" * 130_000, [("part", b"0")]),
        (1, 1_600_000_000_001, None, b"abcdefgh" * 12_000, ()),
        (2, 1_600_000_000_002, b"big-2", rng.randbytes(40_000), [("part", b"2")]),
    ]


def many_records(n: int = 5_000) -> list:
    return [
        (
            i,
            1_650_000_000_000 + (i * 37) % 1000,
            None if i % 11 == 0 else b"k%d" % (i % 97),
            None if i % 13 == 0 else b"value-%d-" % i * (i % 5),
            [("i", str(i).encode())] if i % 3 == 0 else (),
        )
        for i in range(n)
    ]


TRANSACTIONAL = {
    "producer_id": 4_000_000_000_123,
    "producer_epoch": 32_000,
    "base_sequence": 77,
    "transactional": True,
}
IDEMPOTENT = {"producer_id": 42, "producer_epoch": 3, "base_sequence": INT32_MAX - 3}  # the sequence wraps


# =====================================================================================================
# Direction 1: kafkalog writes, the oracles read
# =====================================================================================================


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("codec", CODEC_NAMES)
@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
@pytest.mark.parametrize("producer", [{}, IDEMPOTENT, TRANSACTIONAL], ids=["plain", "idempotent", "transactional"])
def test_ours_to_oracle_every_codec_and_field(oracle, codec, timestamp_type, producer):
    spec = Spec(
        rich_records(),
        codec=codec,
        base_offset=1_234_567_890_123,
        partition_leader_epoch=7,
        log_append_time=1_800_000_000_000 if timestamp_type == "LogAppendTime" else None,
        **producer,
    )
    data = build_ours(spec)
    assert_oracle_reads(oracle, data, spec)
    assert_ours_reads(data, spec)


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_ours_to_oracle_large_values(oracle, codec):
    spec = Spec(large_records(), codec=codec, base_offset=10)
    data = build_ours(spec)
    payload = data[61:]
    if codec == "lz4":
        blocks = lz4_blocks(payload)
        assert len(blocks) >= 4
        assert any(blocks) and not all(blocks)  # some blocks stored raw, some compressed
    if codec == "snappy":
        assert xerial_block_count(payload) >= 8
    assert_oracle_reads(oracle, data, spec)


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_ours_to_oracle_many_records(oracle, codec):
    spec = Spec(many_records(), codec=codec, base_offset=3, **IDEMPOTENT)
    assert_oracle_reads(oracle, build_ours(spec), spec)


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_ours_to_oracle_offset_gaps(oracle, codec):
    """Offsets with gaps (as compaction leaves them): each oracle applies the stored deltas."""
    records = [(d, 1000 + d, b"k%d" % d, b"v", ()) for d in (0, 1, 5, 6, 100, 70_000)]
    spec = Spec(records, codec=codec, base_offset=500)
    data = build_ours(spec)
    assert_oracle_reads(oracle, data, spec)
    assert_ours_reads(data, spec)


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("marker", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batch_in_oracles(oracle, marker):
    data = control_batch(marker, 1000, 5, 7, 1_700_000_000_000, base_offset=10, partition_leader_epoch=3)
    assert len(data) == 78
    header, records, crc_ok, raw = oracles.oracle_read_v2(oracle, data)
    assert crc_ok
    assert header["is_control"] and header["is_transactional"]
    assert header["attributes"] == 0x30
    assert (header["producer_id"], header["producer_epoch"], header["base_sequence"]) == (1000, 5, -1)
    assert (header["base_timestamp"], header["max_timestamp"]) == (1_700_000_000_000, 1_700_000_000_000)
    assert header["base_offset"] == 10 and header["next_offset"] == 11
    assert len(records) == 1
    offset, timestamp, key, value, headers = records[0]
    assert (offset, timestamp, headers) == (10, 1_700_000_000_000, ())
    assert oracles.control_type_of(oracle, raw[0]) == int(marker)
    assert struct.unpack(">hh", key) == (0, int(marker))
    assert struct.unpack(">hi", value) == (0, 7)  # EndTransactionMarker: version 0, coordinator epoch 7
    if oracle is KAFKA_PYTHON:  # kafka-python decodes control records itself
        assert raw[0].version == 0
        assert raw[0].commit == (marker == ControlRecordType.COMMIT)
        assert raw[0].abort == (marker == ControlRecordType.ABORT)


def test_control_batch_matches_spec_vector():
    vector = bytes.fromhex(
        "000000000000000a00000042000000030240d514e90030000000000000018bcfe568000000018bcfe568"
        "0000000000000003e80005ffffffff000000012000000008000000010c00000000000700"
    )
    assert (
        control_batch(ControlRecordType.COMMIT, 1000, 5, 7, 1_700_000_000_000, base_offset=10, partition_leader_epoch=3)
        == vector
    )


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
def test_oracle_memory_records_walk_our_log(oracle):
    """A run of our batches (every codec, a commit marker) walked by the oracle's MemoryRecords."""
    specs, chunks, base = [], [], 0
    for codec in CODEC_NAMES:
        spec = Spec(rich_records(), codec=codec, base_offset=base, **TRANSACTIONAL)
        specs.append(spec)
        chunks.append(build_ours(spec))
        base += len(spec.records)
    chunks.append(
        control_batch(
            ControlRecordType.COMMIT,
            TRANSACTIONAL["producer_id"],
            32_000,
            9,
            1_700_000_000_500,
            base_offset=base,
        )
    )
    walked = oracles.oracle_read_all(oracle, b"".join(chunks))
    assert len(walked) == len(CODEC_NAMES) + 1
    assert all(crc_ok for _, crc_ok, _ in walked)
    for (batch, _, records), spec, chunk in zip(walked, specs, chunks, strict=False):
        header = oracles.oracle_batch_header(batch)
        assert header.pop("crc") == oracles.v2_header(chunk)["crc"]
        assert header == expected_header(spec)
        assert [oracles.oracle_record(r) for r in records] == expected_records(spec)
    control, _, control_records = walked[-1]
    assert control.is_control_batch and control.base_offset == base
    assert oracles.control_type_of(oracle, control_records[0]) == ControlRecordType.COMMIT
    # and to_arrow hides the marker unless asked
    table = to_arrow(b"".join(chunks))
    assert table.num_rows == base
    assert to_arrow(b"".join(chunks), include_control=True).num_rows == base + 1


# =====================================================================================================
# Direction 2: the oracles write, kafkalog reads
# =====================================================================================================


def oracle_spec(spec: Spec, oracle) -> Spec:
    """The spec of what ``oracle_build_v2`` writes: base offset 0, CreateTime, the oracle's PLE."""
    return replace(spec, base_offset=0, log_append_time=None, partition_leader_epoch=oracle.writes_ple)


def build_oracle(oracle, spec: Spec) -> bytes:
    return oracles.oracle_build_v2(
        oracle,
        spec.records,
        codec=CODECS[spec.codec],
        producer_id=spec.producer_id,
        producer_epoch=spec.producer_epoch,
        base_sequence=spec.base_sequence,
        transactional=spec.transactional,
    )


def broker_append(data: bytes, spec: Spec) -> bytes:
    """What the broker does to a produced batch: assign the base offset and maybe LogAppendTime."""
    data = oracles.set_base_offset(data, spec.base_offset)
    if spec.log_append_time is not None:
        data = oracles.stamp_log_append_time(data, spec.log_append_time)
    return data


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("codec", CODEC_NAMES)
@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
@pytest.mark.parametrize("producer", [{}, IDEMPOTENT, TRANSACTIONAL], ids=["plain", "idempotent", "transactional"])
def test_oracle_to_ours_every_codec_and_field(oracle, codec, timestamp_type, producer):
    spec = Spec(rich_records(), codec=codec, **producer)
    produced = build_oracle(oracle, spec)
    assert produced[22] & 0x07 == CODECS[codec], "the records are compressible: the oracle must compress"
    as_written = oracle_spec(spec, oracle)
    assert_ours_reads(produced, as_written)
    appended = replace(
        as_written,
        base_offset=98_765_432_100,
        log_append_time=1_900_000_000_000 if timestamp_type == "LogAppendTime" else None,
    )
    assert_ours_reads(broker_append(produced, appended), appended)


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_oracle_to_ours_large_values(oracle, codec):
    spec = oracle_spec(Spec(large_records(), codec=codec), oracle)
    produced = build_oracle(oracle, spec)
    assert produced[22] & 0x07 == CODECS[codec]
    if codec == "lz4":
        assert len(lz4_blocks(produced[61:])) >= 3  # 64 KiB blocks in both oracles' frames
    if codec == "snappy":
        assert xerial_block_count(produced[61:]) >= 8
    assert_ours_reads(produced, spec)


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_oracle_to_ours_many_records(oracle, codec):
    spec = oracle_spec(Spec(many_records(), codec=codec, **TRANSACTIONAL), oracle)
    produced = build_oracle(oracle, spec)
    assert produced[22] & 0x07 == CODECS[codec]
    assert_ours_reads(produced, spec)


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
def test_oracle_incompressible_batch(oracle):
    """Quirk: kafka-python and aiokafka-py send a batch uncompressed when compression does not shrink it;
    aiokafka's Cython builder compresses anyway (as Kafka does). We read either."""
    spec = Spec([(0, 5, None, random.Random(1).randbytes(50), ())], codec="gzip")
    produced = build_oracle(oracle, spec)
    codec_id = 0 if oracle.skips_useless_compression else CODECS["gzip"]
    assert produced[22] & 0x07 == codec_id
    assert_ours_reads(produced, oracle_spec(spec, oracle), codec_id=codec_id)


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_oracle_empty_batch_to_ours(oracle, codec):
    """Oracle builders emit a header-only batch (count 0) when nothing was appended; aiokafka's Cython one
    even compresses the empty records section. It holds no record, even when compressed (Kafka's rule)."""
    produced = oracles.oracle_build_v2(oracle, [], codec=CODECS[codec])
    header = oracles.v2_header(produced)
    assert header["record_count"] == 0
    assert header["attributes"] & 0x07 == (0 if oracle.skips_useless_compression else CODECS[codec])
    (batch,) = iter_batches(produced)
    batch.ensure_valid()
    assert (batch.record_count, batch.records()) == (0, [])
    assert to_arrow(produced).num_rows == 0
    assert to_arrow(oracles.set_base_offset(produced, 10) + produced).num_rows == 0


def test_aiokafka_cython_first_timestamp_minus_one():
    """Oracle bug, pinned: aiokafka's Cython builder treats a first timestamp of -1 as unset. Kafka (and our
    builder, kafka-python, aiokafka-py) keep baseTimestamp = -1 and read the record back with -1."""
    records = [(0, -1, b"k", b"v", ()), (1, 5, None, None, ()), (2, -1, None, b"x", ())]
    cython = build_oracle(AIOKAFKA_CYTHON, Spec(records))
    assert oracles.v2_header(cython)["base_timestamp"] == 5
    assert [r.timestamp for r in next(iter_batches(cython))] == [5, 5, -1]
    spec = Spec(records)
    for oracle in (KAFKA_PYTHON, AIOKAFKA_PY):
        assert_same_bytes_but_ple(oracle, build_ours(spec), build_oracle(oracle, spec))
    assert_ours_reads(build_ours(spec), spec)
    assert [r.timestamp for r in next(iter_batches(build_ours(spec)))] == [-1, 5, -1]


def _zstd_streamed(data: bytes) -> bytes:
    out = io.BytesIO()
    writer = zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).stream_writer(out, closefd=False)
    writer.write(data)
    writer.close()
    return out.getvalue()


def _zstd_two_frames(data: bytes) -> bytes:
    half = len(data) // 2
    return zstandard.ZstdCompressor().compress(data[:half]) + zstandard.ZstdCompressor().compress(data[half:])


def _gzip_two_members(data: bytes) -> bytes:
    half = len(data) // 2
    return kafka.codec.gzip_encode(data[:half], compresslevel=1) + kafka.codec.gzip_encode(data[half:])


def _lz4_variant(block_size: int, block_checksum: bool, content_checksum: bool):
    def encode(data: bytes) -> bytes:
        return lz4.frame.compress(
            data,
            block_size=block_size,
            block_linked=False,
            store_size=True,
            block_checksum=block_checksum,
            content_checksum=content_checksum,
        )

    return encode


FRAMING_VARIANTS = {
    "gzip-two-members": ("gzip", _gzip_two_members),
    "snappy-raw": ("snappy", lambda d: kafka.codec.snappy_encode(d, xerial_compatible=False)),
    "snappy-xerial-8k": ("snappy", lambda d: kafka.codec.snappy_encode(d, xerial_blocksize=8192)),
    "snappy-xerial-1m": ("snappy", lambda d: kafka.codec.snappy_encode(d, xerial_blocksize=1 << 20)),
    "zstd-streamed": ("zstd", _zstd_streamed),
    "zstd-two-frames": ("zstd", _zstd_two_frames),
    **{
        f"lz4-bd{bs}-bc{int(bc)}-cc{int(cc)}": ("lz4", _lz4_variant(bs, bc, cc))
        for bs in (lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX256KB, lz4.frame.BLOCKSIZE_MAX1MB)
        for bc in (False, True)
        for cc in (False, True)
    },
}


@pytest.mark.parametrize("variant", FRAMING_VARIANTS)
def test_codec_framing_variants(variant):
    """Framings the codec libraries under kafka-python also produce, all of which Kafka's readers accept:
    raw snappy, other xerial block sizes, several gzip members / zstd frames, lz4 frames with larger
    blocks, block and content checksums. kafka-python's builder writes them; kafka-python and we read them."""
    codec, encode = FRAMING_VARIANTS[variant]
    spec = oracle_spec(Spec(large_records(), codec=codec), KAFKA_PYTHON)
    with mock.patch.object(kafka.record.default_records, f"{codec}_encode", encode):
        produced = build_oracle(KAFKA_PYTHON, spec)
    assert produced[22] & 0x07 == CODECS[codec]
    _, records, crc_ok, _ = oracles.oracle_read_v2(KAFKA_PYTHON, produced)
    assert crc_ok and records == expected_records(spec)
    assert_ours_reads(produced, spec)


def test_lz4_linked_blocks_refused():
    """Kafka's Lz4BlockInputStream refuses dependent (linked) blocks; kafka-python's reader accepts them.
    We side with Kafka."""
    spec = oracle_spec(Spec(large_records(), codec="lz4"), KAFKA_PYTHON)
    with mock.patch.object(
        kafka.record.default_records, "lz4_encode", lambda d: lz4.frame.compress(d, block_linked=True)
    ):
        produced = build_oracle(KAFKA_PYTHON, spec)
    assert not produced[61 + 4] & 0x20
    assert oracles.oracle_read_v2(KAFKA_PYTHON, produced)[1] == expected_records(spec)
    (batch,) = iter_batches(produced)
    with pytest.raises(CorruptRecordError, match="Dependent block"):
        batch.records()


def test_oracle_lz4_framings_differ_and_we_read_both():
    """kafka-python's lz4 frame stores the content size (FLG 0x68); aiokafka's carries block checksums
    (FLG 0x70); Kafka writes neither (0x60). Every one must read."""
    spec = Spec(large_records(), codec="lz4")
    flags = {o.name: build_oracle(o, spec)[61 + 4] for o in ORACLES}
    assert flags == {"kafka-python": 0x68, "aiokafka-cython": 0x70, "aiokafka-py": 0x70}
    assert build_ours(spec)[61 + 4] == 0x60


def test_oracle_segment_to_arrow():
    """A segment-like run: batches from every oracle and codec, offsets assigned as the broker would,
    some stamped LogAppendTime, plus legacy messages; to_arrow over the whole buffer."""
    chunks, rows, base = [], [], 0
    for i, oracle in enumerate(ORACLES):
        for codec in CODEC_NAMES:
            spec = Spec(rich_records(1_700_000_000_000 + i), codec=codec, **TRANSACTIONAL)
            produced = build_oracle(oracle, spec)
            appended = replace(
                oracle_spec(spec, oracle),
                base_offset=base,
                log_append_time=1_800_000_000_000 + base if codec == "zstd" else None,
            )
            chunks.append(broker_append(produced, appended))
            ts_type = 1 if appended.log_append_time is not None else 0
            rows += [(o, t, ts_type, k, v, h) for o, t, k, v, h in expected_records(appended)]
            base += len(spec.records)
    legacy_rows = [(j, 5000 + j, b"lk", b"lv") for j in range(3)]
    legacy = oracles.oracle_build_legacy(KAFKA_PYTHON, 1, CODECS["gzip"], legacy_rows)
    chunks.append(oracles.set_legacy_offset(legacy, base + 2))
    rows += [(base + j, 5000 + j, 0, b"lk", b"lv", ()) for j in range(3)]
    base += 3
    spec = Spec(rich_records(), codec="lz4")
    chunks.append(oracles.set_base_offset(build_oracle(AIOKAFKA_CYTHON, spec), base))
    rows += [(o, t, 0, k, v, h) for o, t, k, v, h in expected_records(replace(spec, base_offset=base))]
    buffer = b"".join(chunks)
    assert arrow_rows(to_arrow(buffer)) == rows
    assert [tuple(r[:5]) for b in iter_batches(buffer) for r in b] == [(o, t, k, v, h) for o, t, _, k, v, h in rows]


# ----- byte equality -----------------------------------------------------------------------------------


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("producer", [{}, IDEMPOTENT, TRANSACTIONAL], ids=["plain", "idempotent", "transactional"])
@pytest.mark.parametrize("material", ["rich", "many", "large", "gaps"])
def test_uncompressed_bytes_identical_but_leader_epoch(oracle, producer, material):
    records = {
        "rich": rich_records(),
        "many": many_records(500),
        "large": large_records(),
        "gaps": [(d, 1000 - d, b"k", b"v", ()) for d in (0, 3, 9, 300)],
    }[material]
    spec = Spec(records, **producer)
    ours = build_ours(spec)
    theirs = build_oracle(oracle, spec)
    assert_same_bytes_but_ple(oracle, ours, theirs)
    # and the broker rewriting the epoch makes kafka-python's bytes ours exactly (the CRC does not cover it)
    assert oracles.set_partition_leader_epoch(theirs, -1) == ours


def test_spec_v2_vector_bytes():
    vector = bytes.fromhex(
        "000000000000000000000040ffffffff02db5e9cdd0000000000000000018bcfe568000000018bcfe56800ffffffffffff"
        "ffffffffffffffff000000011c000000066b65790a76616c756500"
    )
    spec = Spec([(0, 1_700_000_000_000, b"key", b"value", ())])
    assert build_ours(spec) == vector
    for oracle in ORACLES:
        assert_same_bytes_but_ple(oracle, vector, build_oracle(oracle, spec))


@pytest.mark.parametrize("oracle", ORACLES, ids=ORACLE_IDS)
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_records_section_identical(oracle, codec):
    """Compressed bytes differ between libraries (levels, gzip mtime, lz4 flags), but the records section
    inside must be the same bytes, and the header the same apart from length, CRC and epoch."""
    spec = Spec([*rich_records(), (8, 0, b"k", b"v" * 5000, ())], codec=codec, **TRANSACTIONAL)
    ours = RecordBatch(build_ours(spec))
    theirs = RecordBatch(build_oracle(oracle, spec))
    assert bytes(ours.records_section()) == bytes(theirs.records_section())
    mine, other = oracles.v2_header(bytes(ours.buffer)), oracles.v2_header(bytes(theirs.buffer))
    for name in ("batch_length", "crc", "partition_leader_epoch"):
        mine.pop(name), other.pop(name)
    assert mine == other


# =====================================================================================================
# Legacy v0/v1: the oracles write, kafkalog reads
# =====================================================================================================


def test_kafka_python_uses_the_real_xxhash():
    """kafka-python's magic 0 lz4 framing needs the ``xxhash`` package (a declared test dependency)."""
    assert kafka.codec.xxhash is not None
    frame = lz4.frame.compress(b"hello" * 100, block_linked=False)
    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)
    assert frame[descriptor_end] == (kafka.codec.xxhash.xxh32(frame[4:descriptor_end]).intdigest() >> 8) & 0xFF


LEGACY_ORACLES = [(o, m) for o in ORACLES for m in (0, 1)]
LEGACY_IDS = [f"{o.name}-v{m}" for o, m in LEGACY_ORACLES]


def legacy_records(n: int = 6, ts0: int = 1_500_000_000_000) -> list:
    return [
        (
            i,
            ts0 + (i * 7919) % 50,
            None if i % 4 == 1 else b"k%d" % i,
            None if i % 4 == 2 else b"v%d-" % i * 30,
        )
        for i in range(n)
    ] + [(n, ts0 + 1, b"", b"")]


def assert_legacy_reads(data: bytes, expected: list[tuple], magic: int, ts_type: int, messages: int) -> None:
    batches = list(iter_batches(data))
    assert len(batches) == messages
    for batch in batches:
        assert isinstance(batch, LegacyBatch)
        assert batch.magic == magic
        batch.ensure_valid()
        assert int(batch.timestamp_type_id) == ts_type
    assert [tuple(r[:4]) for b in batches for r in b] == expected
    assert [r.headers for b in batches for r in b] == [()] * len(expected)
    assert arrow_rows(to_arrow(data)) == [(o, t, ts_type, k, v, ()) for o, t, k, v in expected]


def oracle_legacy_view(oracle, data: bytes) -> list[tuple]:
    """What the oracle's MemoryRecords reads: (offset, timestamp, key, value), timestamp None → -1."""
    out = []
    for _, crc_ok, records in oracles.oracle_read_all(oracle, data):
        assert crc_ok
        out += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in records]
    return out


@pytest.mark.parametrize(("oracle", "magic"), LEGACY_ORACLES, ids=LEGACY_IDS)
def test_legacy_uncompressed_message_set(oracle, magic):
    base = 1_000_000
    records = [(base + i, ts, k, v) for i, ts, k, v in legacy_records()]
    data = oracles.oracle_build_legacy(oracle, magic, 0, records)
    expected = [(o, ts if magic == 1 else -1, k, v) for o, ts, k, v in records]
    assert_legacy_reads(data, expected, magic, magic - 1, messages=len(records))
    for reader in ORACLES:
        assert oracle_legacy_view(reader, data) == expected


@pytest.mark.parametrize(("oracle", "magic"), LEGACY_ORACLES, ids=LEGACY_IDS)
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_compressed_wrapper(oracle, magic, codec):
    n = 7
    base = 2_000
    # v1 producers write relative inner offsets 0..n-1; v0 inner offsets are absolute
    inner = [((base if magic == 0 else 0) + i, ts, k, v) for i, ts, k, v in legacy_records(n - 1)]
    if magic == 0 and codec == "lz4" and oracle is not KAFKA_PYTHON:
        # aiokafka limitation: no magic 0 lz4 (KAFKA-3160's broken header checksum), neither side.
        with pytest.raises(Exception, match="LZ4 is not supported"):
            oracles.oracle_build_legacy(oracle, magic, CODECS[codec], inner)
        return
    data = oracles.oracle_build_legacy(oracle, magic, CODECS[codec], inner)
    # Oracle quirk: the wrapper is written with offset 0 and timestamp 0, left for the broker.
    (wrapper,) = iter_batches(data)
    assert (wrapper.offset, wrapper.compression, wrapper.timestamp) == (0, codec, -1 if magic == 0 else 0)

    def expect(wrapper_offset: int, log_append_time: int | None = None) -> list[tuple]:
        out = []
        for off, ts, k, v in inner:
            if magic == 1 and wrapper_offset != 0:
                off = wrapper_offset - (n - 1) + off  # relative → absolute, Kafka's rule
            out.append((off, -1 if magic == 0 else (log_append_time if log_append_time is not None else ts), k, v))
        return out

    ts_type = magic - 1
    # As written (wrapper offset 0): v1 relative offsets are taken as-is (old librdkafka rule), v0 absolute.
    assert_legacy_reads(data, expect(0), magic, ts_type, messages=1)
    # As the broker appends it: wrapper offset = last absolute offset.
    appended = oracles.set_legacy_offset(data, base + n - 1)
    assert_legacy_reads(appended, expect(base + n - 1), magic, ts_type, messages=1)
    (wrapper,) = iter_batches(appended)
    assert [r.offset for r in wrapper] == list(range(base, base + n))
    assert (wrapper.base_offset, wrapper.last_offset, wrapper.next_offset) == (base, base + n - 1, base + n)
    assert wrapper.record_count == n
    readers = [KAFKA_PYTHON] if magic == 0 and codec == "lz4" else ORACLES
    for reader in readers:
        assert oracle_legacy_view(reader, data) == expect(0)
        assert oracle_legacy_view(reader, appended) == expect(base + n - 1)
    if magic == 0 and codec == "lz4":
        for reader in (AIOKAFKA_CYTHON, AIOKAFKA_PY):  # aiokafka cannot read it either (documented above)
            with pytest.raises(Exception, match="LZ4 is not supported"):
                oracle_legacy_view(reader, data)
    if magic == 1:  # LogAppendTime on the wrapper: every inner record takes the wrapper's timestamp
        stamped = oracles.stamp_legacy_log_append_time(appended, 1_777_000_000_000)
        assert_legacy_reads(stamped, expect(base + n - 1, 1_777_000_000_000), magic, 1, messages=1)
        for reader in ORACLES:
            assert oracle_legacy_view(reader, stamped) == expect(base + n - 1, 1_777_000_000_000)


@pytest.mark.parametrize(("oracle", "magic"), LEGACY_ORACLES, ids=LEGACY_IDS)
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_compressed_large(oracle, magic, codec):
    if magic == 0 and codec == "lz4" and oracle is not KAFKA_PYTHON:
        with pytest.raises(Exception, match="LZ4 is not supported"):  # aiokafka: no magic 0 lz4
            oracles.oracle_build_legacy(oracle, 0, 3, [(0, None, None, b"x")])
        return
    rng = random.Random(3)
    inner = [(i, 1_500_000_000_000 + i, b"key%d" % i, rng.randbytes(30_000) + b"q" * 50_000) for i in range(4)]
    data = oracles.oracle_build_legacy(oracle, magic, CODECS[codec], inner)
    appended = oracles.set_legacy_offset(data, 10 + 3) if magic == 1 else data
    offsets = [10 + i for i in range(4)] if magic == 1 else [i for i in range(4)]
    expected = [(o, ts if magic == 1 else -1, k, v) for o, (_, ts, k, v) in zip(offsets, inner, strict=True)]
    assert_legacy_reads(appended, expected, magic, magic - 1, messages=1)


# =====================================================================================================
# Property tests
# =====================================================================================================

payloads = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.binary(max_size=4096),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(1, 600)),
)
header_lists = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=40))), max_size=4)
timestamps = st.one_of(st.just(-1), st.integers(0, 1 << 44), st.integers(0, 1 << 62))
producers = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {
            "producer_id": st.integers(0, (1 << 63) - 1),
            "producer_epoch": st.integers(0, (1 << 15) - 1),
            "base_sequence": st.integers(0, INT32_MAX),
            "transactional": st.booleans(),
        }
    ),
)


@st.composite
def record_lists(draw, min_size: int = 1, max_size: int = 25) -> list:
    n = draw(st.integers(min_size, max_size))
    gaps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)) if draw(st.booleans()) else [1] * n
    deltas, d = [], 0
    for g in gaps:
        deltas.append(d)
        d += g
    return [(od, draw(timestamps), draw(payloads), draw(payloads), draw(header_lists)) for od in deltas]


@st.composite
def specs(draw) -> Spec:
    return Spec(
        draw(record_lists()),
        codec=draw(st.sampled_from(CODEC_NAMES)),
        base_offset=draw(st.one_of(st.integers(0, 1 << 50), st.just((1 << 63) - 200))),
        log_append_time=draw(st.one_of(st.none(), st.integers(0, 1 << 44))),
        partition_leader_epoch=draw(st.one_of(st.integers(-1, 1000), st.just(INT32_MAX))),
        **draw(producers),
    )


@HYPOTHESIS
@given(spec=specs())
def test_property_ours_to_every_oracle(spec):
    data = build_ours(spec)
    for oracle in ORACLES:
        assert_oracle_reads(oracle, data, spec)
    assert_ours_reads(data, spec)


@HYPOTHESIS
@given(spec=specs(), oracle=st.sampled_from(ORACLES))
def test_property_oracle_to_ours(spec, oracle):
    first_ts, *later = (ts for _, ts, *_ in spec.records)
    # aiokafka-cython's -1 first-timestamp bug is pinned by test_aiokafka_cython_first_timestamp_minus_one
    assume(not (oracle is AIOKAFKA_CYTHON and first_ts == -1 and any(ts != -1 for ts in later)))
    produced = build_oracle(oracle, spec)
    written = oracle_spec(spec, oracle)
    codec_id = produced[22] & 0x07
    assert codec_id in (0, CODECS[spec.codec])  # the oracle may fall back to uncompressed
    assert_ours_reads(produced, written, codec_id)
    appended = replace(written, base_offset=spec.base_offset, log_append_time=spec.log_append_time)
    assert_ours_reads(broker_append(produced, appended), appended, codec_id)
    ours = build_ours(replace(written, codec=CODEC_NAMES[codec_id], partition_leader_epoch=-1))
    if codec_id == 0:
        assert_same_bytes_but_ple(oracle, ours, produced)
    else:
        assert bytes(RecordBatch(ours).records_section()) == bytes(RecordBatch(produced).records_section())


@HYPOTHESIS
@given(
    oracle=st.sampled_from(ORACLES),
    magic=st.sampled_from((0, 1)),
    codec=st.sampled_from(("none", *LEGACY_CODECS)),
    rows=st.lists(st.tuples(timestamps, payloads, payloads), min_size=1, max_size=20),
    base=st.integers(0, 1 << 50),
    log_append_time=st.one_of(st.none(), st.integers(0, 1 << 44)),
)
def test_property_legacy_oracle_to_ours(oracle, magic, codec, rows, base, log_append_time):
    n = len(rows)
    compressed = codec != "none"
    if magic == 0 and codec == "lz4" and oracle is not KAFKA_PYTHON:
        return  # aiokafka cannot write magic 0 lz4; asserted in test_legacy_compressed_wrapper
    if compressed and magic == 1:
        inner = [(i, ts, k, v) for i, (ts, k, v) in enumerate(rows)]  # relative, as a v1 producer writes
    else:
        inner = [(base + i, ts, k, v) for i, (ts, k, v) in enumerate(rows)]
    data = oracles.oracle_build_legacy(oracle, magic, CODECS[codec], inner)
    oracle_view = oracle_legacy_view(oracle, data)
    if compressed:
        data = oracles.set_legacy_offset(data, base + n - 1)
    stamp = compressed and magic == 1 and log_append_time is not None
    if stamp:
        data = oracles.stamp_legacy_log_append_time(data, log_append_time)
    expected = [
        (base + i, -1 if magic == 0 else (log_append_time if stamp else ts), k, v) for i, (ts, k, v) in enumerate(rows)
    ]
    assert_legacy_reads(data, expected, magic, 1 if stamp else magic - 1, messages=1 if compressed else n)
    assert oracle_legacy_view(oracle, data) == expected
    if compressed and magic == 1:  # as written, wrapper offset 0: the relative offsets are taken as-is
        assert oracle_view == [(i, ts if magic == 1 else -1, k, v) for i, (ts, k, v) in enumerate(rows)]


# =====================================================================================================
# aiokafka's pure-Python codec as AIOKAFKA_NO_EXTENSIONS=1 selects it
# =====================================================================================================

_NO_EXTENSIONS_SCRIPT = r"""
import json
from aiokafka.record import default_records as d, legacy_records as l, memory_records as m
from kafkalog.record import RecordBatchBuilder, iter_batches, to_arrow


def hx(b):
    return None if b is None else b.hex()


def row(r):
    return [r.offset, r.timestamp, hx(r.key), hx(r.value), [[k, hx(v)] for k, v in r.headers]]


recs = [
    (0, 1700000000000, b"k0", b"v0" * 500, [("h", b"1")]),
    (1, 1700000000005, None, None, [("n", None)]),
    (2, 1699999999999, "ключ".encode(), b"", []),
]
classes = [d.DefaultRecordBatchBuilder, d.DefaultRecordBatch, m.MemoryRecords, l.LegacyRecordBatchBuilder,
           l.LegacyRecordBatch]
out = {"classes": [c.__name__ for c in classes]}
b = d.DefaultRecordBatchBuilder(magic=2, compression_type=3, is_transactional=0, producer_id=9,
                                producer_epoch=1, base_sequence=5, batch_size=1 << 20)
for r in recs:
    b.append(*r)
theirs = bytes(b.build())
out["theirs_attributes"] = theirs[22]
out["ours_read"] = [[*row(r), r.sequence] for batch in iter_batches(theirs) for r in batch]
out["arrow_offsets"] = to_arrow(theirs).column("offset").to_pylist()
ours = RecordBatchBuilder("lz4", base_offset=40, producer_id=9, producer_epoch=1, base_sequence=5)
for off, ts, k, v, h in recs:
    ours.append(k, v, ts, h)
walk = m.MemoryRecords(ours.build())
batch = walk.next_batch()
out["batch_class"] = type(batch).__name__
out["crc"] = batch.validate_crc()
out["oracle_read"] = [row(r) for r in batch]
print(json.dumps(out))
"""


def _hexed(records, base_offset: int) -> list:
    return [
        [
            base_offset + od,
            ts,
            k.hex() if k is not None else None,
            v.hex() if v is not None else None,
            [[hk, hv.hex() if hv is not None else None] for hk, hv in h],
        ]
        for od, ts, k, v, h in records
    ]


def test_aiokafka_no_extensions_round_trip_in_subprocess():
    env = {**os.environ, "AIOKAFKA_NO_EXTENSIONS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _NO_EXTENSIONS_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["classes"] == [
        "_DefaultRecordBatchBuilderPy",
        "_DefaultRecordBatchPy",
        "_MemoryRecordsPy",
        "_LegacyRecordBatchBuilderPy",
        "_LegacyRecordBatchPy",
    ]
    assert out["batch_class"] == "_DefaultRecordBatchPy"
    recs = [
        (0, 1700000000000, b"k0", b"v0" * 500, [("h", b"1")]),
        (1, 1700000000005, None, None, [("n", None)]),
        (2, 1699999999999, "ключ".encode(), b"", []),
    ]
    assert out["theirs_attributes"] == 3  # lz4, compressed by the pure-Python builder
    assert out["ours_read"] == [[*r, 5 + i] for i, r in enumerate(_hexed(recs, 0))]
    assert out["arrow_offsets"] == [0, 1, 2]
    assert out["crc"] is True
    assert out["oracle_read"] == _hexed(recs, 40)
