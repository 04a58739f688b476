"""build_legacy (Kafka's MemoryRecordsBuilder for magic 0/1) byte for byte against kafka-python's builder, and read
back by kafkalog's LegacyBatch, kafka-python and both aiokafka codecs.

kafka-python's LegacyRecordBatchBuilder is a producer's builder, so where it and Kafka's builder differ the
expectation follows Kafka (each difference is also asserted by a test below):
- a compressed wrapper: kafka-python writes offset 0 and timestamp 0 for the broker to fill in; Kafka's builder
  writes the last offset and (v1) the max timestamp, i.e. what the broker then stores. The expectation sets them
  and recomputes the CRC-32 (with zlib).
- LogAppendTime: kafka-python cannot write it. Kafka's builder gives every message, inner ones too, the
  timestamp-type bit and the log append time; the expectation stamps kafka-python's messages so.
- gzip: kafka-python compresses at level 9 through gzip.GzipFile (its header holds the current time); Kafka at
  the default level through java.util.zip, whose exact bytes no Python library reproduces (spec 17.2). The
  expectation compresses with kafkalog's gzip codec; kafka-python's own stream inflates to the same messages.
- lz4, magic 1: kafka-python's lz4.frame stores the content size (FLG 0x68 + 8 bytes); Kafka's
  Lz4BlockOutputStream never does (FLG 0x60). The expectation calls kafka-python's lz4 with store_size=False.
- lz4, magic 0 (KAFKA-3160): Kafka's builder writes the "broken" descriptor checksum (over the frame magic too,
  useBrokenFlagDescriptorChecksum = magic == 0), and so does kafka-python: equal unpatched. snappy: equal unpatched.
"""

from __future__ import annotations

import functools
import random
import struct
import zlib
from unittest import mock

import kafka.codec
import kafka.record.legacy_records as kp_legacy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oracles
from kafkalog.cleaner.cleaner import Cleaner
from kafkalog.cleaner.offset_map import SkimpyOffsetMap
from kafkalog.cleaner.policy import LogToClean
from kafkalog.errors import UnsupportedCompressionTypeError
from kafkalog.manager import TopicPartition
from kafkalog.record import compression as codecs
from kafkalog.record.legacy import LegacyBatch
from kafkalog.record.legacy_builder import build_legacy
from kafkalog.record.scan import iter_batches
from kafkalog.record.types import NO_TIMESTAMP, TimestampType
from kafkalog.storage import Log
from kafkalog.testing import MockTime
from oracles import CODECS, KAFKA_PYTHON, ORACLES

CT, LAT = TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME
APPEND_TIME = 1_777_000_000_000
LEGACY_CODECS = ("none", "gzip", "snappy", "lz4")
HYPOTHESIS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ----- Kafka's bytes, made with kafka-python ----------------------------------------------------------------


def split_messages(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        out.append(data[pos : pos + 12 + size])
        pos += 12 + size
    return out


def restamp(message: bytes, *, offset: int | None = None, type_bit: bool = False, timestamp: int | None = None):
    """Set a legacy message's offset, LogAppendTime bit and (v1) timestamp; recompute its CRC-32 with zlib."""
    buf = bytearray(message)
    if offset is not None:
        struct.pack_into(">q", buf, 0, offset)
    if type_bit:
        buf[17] |= 0x08
    if timestamp is not None and buf[16] == 1:
        struct.pack_into(">q", buf, 18, timestamp)
    struct.pack_into(">I", buf, 12, zlib.crc32(bytes(buf[16:])) & 0xFFFFFFFF)
    return bytes(buf)


def kafka_codec(magic: int, codec: str):
    """(kafka-python's module-level encoder name, the encoder writing Kafka's framing), None when unpatched."""
    if codec == "gzip":
        return "gzip_encode", codecs.gzip.compress
    if codec == "lz4" and magic == 1:
        return "lz4_encode", functools.partial(kafka.codec.lz4_encode, store_size=False)
    return None


def kafka_expected(magic: int, codec: str, records, ts_type=CT, log_append_time=NO_TIMESTAMP) -> bytes:
    """What Kafka's MemoryRecordsBuilder writes, built with kafka-python and the fix-ups listed in the docstring."""
    stamp = magic == 1 and ts_type == LAT
    base = records[0][0]
    relative = magic == 1 and codec != "none"
    rows = [(o - base if relative else o, log_append_time if stamp else ts, k, v) for o, ts, k, v in records]
    if codec == "none":
        data = oracles.oracle_build_legacy(KAFKA_PYTHON, magic, 0, rows)
        return b"".join(restamp(m, type_bit=True) for m in split_messages(data)) if stamp else data
    patch = kafka_codec(magic, codec)
    encoder_name = patch[0] if patch else {"snappy": "snappy_encode", "lz4": "lz4_encode_old_kafka"}[codec]
    encode = patch[1] if patch else getattr(kp_legacy, encoder_name)
    if stamp:
        plain_encode = encode

        def encode(data):  # the inner messages carry the LogAppendTime bit as well (appendLegacyRecord)
            return plain_encode(b"".join(restamp(m, type_bit=True) for m in split_messages(data)))

    with mock.patch.object(kp_legacy, encoder_name, encode):
        data = oracles.oracle_build_legacy(KAFKA_PYTHON, magic, CODECS[codec], rows)
    wrapper_ts = log_append_time if stamp else max([NO_TIMESTAMP] + [ts for _, ts, _, _ in records])
    return restamp(data, offset=records[-1][0], type_bit=stamp, timestamp=wrapper_ts)


# ----- reading back --------------------------------------------------------------------------------------------


def wrapper_value(data: bytes) -> bytes:
    """The value of the first message (a wrapper's compressed stream): after the null key (-1)."""
    pos = 12 + (14 if data[16] == 0 else 22) - 8  # the key length field
    assert struct.unpack_from(">i", data, pos)[0] == -1
    (size,) = struct.unpack_from(">i", data, pos + 4)
    return data[pos + 8 : pos + 8 + size]


def inner_messages(data: bytes, codec: str) -> list[bytes]:
    return split_messages(bytes(codecs.decompress(codec, wrapper_value(data), magic=data[16])))


def read_ours(data: bytes) -> list[tuple]:
    out = []
    for batch in iter_batches(data):
        assert isinstance(batch, LegacyBatch)
        batch.ensure_valid()
        out += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return out


def read_oracle(oracle, data: bytes) -> list[tuple]:
    out = []
    for _, crc_ok, records in oracles.oracle_read_all(oracle, data):
        assert crc_ok, oracle
        out += [(r.offset, NO_TIMESTAMP if r.timestamp is None else r.timestamp, r.key, r.value) for r in records]
    return out


def readers(magic: int, codec: str) -> tuple:
    # aiokafka neither writes nor reads magic 0 lz4 (KAFKA-3160's checksum): kafka-python alone reads it.
    return (KAFKA_PYTHON,) if (magic, codec) == (0, "lz4") else ORACLES


def check(magic: int, codec: str, records, ts_type=CT, log_append_time=NO_TIMESTAMP) -> bytes:
    """build_legacy equals Kafka's bytes, and every reader gets the records back."""
    data = build_legacy(magic, records, compression_type=codec, timestamp_type=ts_type, log_append_time=log_append_time)
    assert data == kafka_expected(magic, codec, records, ts_type, log_append_time)
    if magic == 0:
        expected = [(o, NO_TIMESTAMP, k, v) for o, _, k, v in records]
    else:
        expected = [(o, log_append_time if ts_type == LAT else ts, k, v) for o, ts, k, v in records]
    assert read_ours(data) == expected
    for oracle in readers(magic, codec):
        assert read_oracle(oracle, data) == expected, oracle
    batches = list(iter_batches(data))
    assert len(batches) == (len(records) if codec == "none" else 1)
    for batch in batches:
        assert (batch.magic, batch.compression) == (magic, codec)
        assert batch.timestamp_type_id == (TimestampType.NO_TIMESTAMP_TYPE if magic == 0 else ts_type)
    return data


RECORDS = [
    (1000, 1_500_000_000_040, b"k0", b"v0" * 20),
    (1001, 1_500_000_000_010, None, b"no key"),
    (1004, NO_TIMESTAMP, b"k2", None),
    (1009, 1_500_000_000_090, b"", b""),
    (1010, 1_500_000_000_020, None, None),
]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_create_time_equals_kafka(magic, codec):
    data = check(magic, codec, RECORDS)
    if codec != "none":
        (wrapper,) = iter_batches(data)
        assert wrapper.offset == 1010  # the last offset, whatever the inner offsets
        assert wrapper.timestamp == (NO_TIMESTAMP if magic == 0 else 1_500_000_000_090)
        inner_offsets = [struct.unpack_from(">q", m)[0] for m in inner_messages(data, codec)]
        assert inner_offsets == ([0, 1, 4, 9, 10] if magic == 1 else [1000, 1001, 1004, 1009, 1010])


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_log_append_time_equals_kafka(codec):
    data = check(1, codec, RECORDS, LAT, APPEND_TIME)
    messages = split_messages(data)
    if codec != "none":
        assert len(messages) == 1  # the wrapper:
        assert (data[17], struct.unpack_from(">q", data, 18)[0]) == (CODECS[codec] | 0x08, APPEND_TIME)
        messages = inner_messages(data, codec)
    assert len(messages) == len(RECORDS)
    for m in messages:  # every message, inner ones too, carries the bit and the append time
        assert (m[17], struct.unpack_from(">q", m, 18)[0]) == (0x08, APPEND_TIME)


def test_magic_0_ignores_timestamps_and_their_type():
    plain = build_legacy(0, RECORDS, compression_type="gzip", timestamp_type=CT, log_append_time=NO_TIMESTAMP)
    for ts_type in (TimestampType.NO_TIMESTAMP_TYPE, LAT):
        assert build_legacy(0, RECORDS, compression_type="gzip", timestamp_type=ts_type, log_append_time=5) == plain


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_large_sets_span_several_codec_blocks(magic, codec):
    # snappy frames 32 KiB blocks and lz4 64 KiB ones; random bytes make lz4 store blocks raw.
    rng = random.Random(7)
    value = [rng.randbytes(30_000) + b"q" * 50_000 for _ in range(4)]
    records = [(50 + 3 * i, 1_600_000_000_000 + i, b"key%d" % i, value[i]) for i in range(4)]
    check(magic, codec, records)


def test_lz4_frame_headers_are_kafkas():
    # Kafka's own vector (MessageCompressionTest.testLZ4FramingV0): magic, FLG 0x60, BD 0x40, broken HC 0x1A.
    v0 = build_legacy(0, RECORDS, compression_type="lz4", timestamp_type=CT, log_append_time=NO_TIMESTAMP)
    v1 = build_legacy(1, RECORDS, compression_type="lz4", timestamp_type=CT, log_append_time=NO_TIMESTAMP)
    value_at = {0: 12 + 14, 1: 12 + 22}  # the wrapper's value follows its record overhead
    assert v0[value_at[0] : value_at[0] + 7] == bytes.fromhex("04224d1860401a")
    assert v1[value_at[1] : value_at[1] + 7] == bytes.fromhex("04224d18604082")  # the correct checksum


# ----- the differences from kafka-python, asserted ---------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_kafka_python_unpatched_differs_only_where_documented(magic, codec):
    ours = build_legacy(magic, RECORDS, compression_type=codec, timestamp_type=CT, log_append_time=NO_TIMESTAMP)
    base = RECORDS[0][0]
    rows = [(o - base if magic == 1 else o, ts, k, v) for o, ts, k, v in RECORDS]
    theirs = oracles.oracle_build_legacy(KAFKA_PYTHON, magic, CODECS[codec], rows)
    (w_ours,), (w_theirs,) = iter_batches(ours), iter_batches(theirs)
    # The wrapper's offset and timestamp are left to the broker.
    assert (w_theirs.offset, w_theirs.timestamp) == (0, NO_TIMESTAMP if magic == 0 else 0)
    assert (w_ours.offset, w_ours.timestamp) == (1010, NO_TIMESTAMP if magic == 0 else 1_500_000_000_090)
    assert w_ours.attributes == w_theirs.attributes == CODECS[codec]
    assert inner_messages(ours, codec) == inner_messages(theirs, codec)  # the same inner messages, byte for byte
    value_ours, value_theirs = wrapper_value(ours), wrapper_value(theirs)
    if codec == "gzip":
        assert value_theirs[3:10] != value_ours[3:10]  # GzipFile's header: mtime, XFL 2 (level 9), OS 255
    elif codec == "lz4" and magic == 1:
        assert (value_ours[4], value_theirs[4]) == (0x60, 0x68)  # kafka-python stores the content size...
        assert value_theirs[15:] == value_ours[7:]  # ...between FLG/BD and HC; the blocks are the same
    else:
        assert value_theirs == value_ours  # snappy, and magic 0 lz4 with its broken checksum
    if kafka_codec(magic, codec) is None:  # with only the broker's fix-ups, kafka-python's bytes are Kafka's
        assert restamp(theirs, offset=1010, timestamp=1_500_000_000_090) == ours


# ----- Kafka's builder refusals -------------------------------------------------------------------------------


def test_no_records_build_nothing():
    assert build_legacy(1, [], compression_type="gzip", timestamp_type=CT, log_append_time=NO_TIMESTAMP) == b""


@pytest.mark.parametrize(
    ("magic", "records", "codec", "ts_type", "error"),
    [
        (2, RECORDS, "none", CT, "Invalid magic value 2"),
        (1, RECORDS, "none", TimestampType.NO_TIMESTAMP_TYPE, "TimestampType must be set"),
        (1, [(5, 0, b"k", b"v"), (5, 0, b"k", b"v")], "none", CT, "Offsets must increase monotonically"),
        (1, [(5, 0, b"k", b"v"), (4, 0, b"k", b"v")], "gzip", CT, "Offsets must increase monotonically"),
        (1, [(5, -2, b"k", b"v")], "none", CT, "Invalid negative timestamp -2"),
        (0, [(0, 0, b"k", b"v"), (1 << 31, 0, b"k", b"v")], "gzip", CT, "Maximum offset delta exceeded"),
    ],
)
def test_refusals(magic, records, codec, ts_type, error):
    with pytest.raises(ValueError, match=error):
        build_legacy(magic, records, compression_type=codec, timestamp_type=ts_type, log_append_time=NO_TIMESTAMP)


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_is_refused(magic):
    with pytest.raises(UnsupportedCompressionTypeError):
        build_legacy(magic, RECORDS, compression_type="zstd", timestamp_type=CT, log_append_time=NO_TIMESTAMP)


# ----- properties ----------------------------------------------------------------------------------------------

payloads = st.one_of(st.none(), st.binary(max_size=64), st.sampled_from([b"", b"a" * 300]))


@st.composite
def record_lists(draw):
    offset = draw(st.integers(0, 1 << 40))
    out = []
    for _ in range(draw(st.integers(1, 8))):
        timestamp = draw(st.one_of(st.just(NO_TIMESTAMP), st.integers(0, 1 << 42)))
        out.append((offset, timestamp, draw(payloads), draw(payloads)))
        offset += draw(st.one_of(st.just(1), st.integers(1, 1 << 20)))
    return out


@HYPOTHESIS
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(LEGACY_CODECS),
    append_time=st.one_of(st.none(), st.integers(0, 1 << 42)),
    records=record_lists(),
)
def test_property_equals_kafka_and_round_trips(magic, codec, append_time, records):
    if append_time is None:
        check(magic, codec, records)
    else:
        check(magic, codec, records, LAT, append_time)


# ----- the cleaner ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ts_type", [CT, LAT], ids=["CreateTime", "LogAppendTime"])
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_cleaner_rebuilds_a_partly_kept_wrapper_as_kafka_does(tmp_path, magic, codec, ts_type):
    # buildRetainedRecordsInto: the kept messages, in the wrapper's own magic, codec and timestamp type, from the
    # first kept offset. Offset 0 loses to 2 (key a); 3 and 5 have no key, so the wrapper now ends at 4.
    clock = MockTime()
    t = clock.milliseconds()
    lat = APPEND_TIME if magic == 1 and ts_type == LAT else NO_TIMESTAMP
    records = [
        (0, t + 5, b"a", b"a0"),
        (1, t + 9, b"b", b"b1"),
        (2, t + 1, b"a", b"a2"),
        (3, t + 20, None, b"x3"),
        (4, t + 2, b"c", None),  # a tombstone, kept: its segment is younger than any delete horizon
        (5, t + 30, None, b"x5"),
    ]
    kept = [records[1], records[2], records[4]]
    log = Log.open(tmp_path / "t-0", {"cleanup.policy": "compact"}, clock)
    log.append_as_follower(
        build_legacy(magic, records, compression_type=codec, timestamp_type=ts_type, log_append_time=lat)
    )
    log.roll()
    cleaner = Cleaner(SkimpyOffsetMap(64 * 1024), clock)
    cleaner.do_clean(LogToClean(TopicPartition("t", 0), log, 0, log.active_segment.base_offset), t)
    cleaned = log.segments.first()
    data = cleaned.log.path.read_bytes()[: cleaned.size]
    assert data == kafka_expected(magic, codec, kept, ts_type, lat)  # Kafka's bytes, made with kafka-python
    expected = [(o, NO_TIMESTAMP if magic == 0 else (lat if ts_type == LAT else ts), k, v) for o, ts, k, v in kept]
    assert read_ours(data) == expected
    for oracle in readers(magic, codec):
        assert read_oracle(oracle, data) == expected, oracle
    # RecordsInfo of a compressed set: its max timestamp (or append time) at the wrapper's, i.e. the last, offset.
    if magic == 1:
        max_ts = lat if ts_type == LAT else t + 9
        assert (cleaned.max_timestamp_so_far, cleaned.shallow_offset_of_max_timestamp_so_far) == (max_ts, 4)
