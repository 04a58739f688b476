"""The v2 builder: Kafka's MemoryRecordsBuilder rules (spec 1.2, 1.3, 1.6), and its two encoders agreeing."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchtools import ATTRIBUTES, BASE_TIMESTAMP, LEADER_EPOCH, MAX_TIMESTAMP, RECORDS
from kafkalog.errors import InvalidRecordError, InvalidTimestampError, UnsupportedCompressionTypeError
from kafkalog.record import (
    ControlRecordType,
    RecordBatchBuilder,
    TimestampType,
    build_batch,
    control_batch,
    iter_batches,
    to_arrow,
)
from kafkalog.record.builder import encode_records_fast, encode_records_reference, record_size
from kafkalog.record.columnar import reference_to_arrow

# Spec section 16: two batches laid out by hand from the format (checked there against kafka-python).
SPEC_RECORD_BATCH = bytes.fromhex(
    "000000000000000000000040ffffffff02db5e9cdd0000000000000000018bcfe568000000018bcfe56800ffffffffffffffff"
    "ffffffffffff000000011c000000066b65790a76616c756500"
)
SPEC_COMMIT_MARKER = bytes.fromhex(
    "000000000000000a00000042000000030240d514e90030000000000000018bcfe568000000018bcfe5680000000000000003e8"
    "0005ffffffff000000012000000008000000010c00000000000700"
)


def _one(data: bytes):
    (batch,) = iter_batches(data)
    batch.ensure_valid()
    return batch


def test_spec_record_batch_bytes() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"key", b"value", timestamp=1_700_000_000_000)
    assert builder.build() == SPEC_RECORD_BATCH


def test_spec_commit_marker_bytes() -> None:
    data = control_batch(
        ControlRecordType.COMMIT, 1000, 5, 7, 1_700_000_000_000, base_offset=10, partition_leader_epoch=3
    )
    assert data == SPEC_COMMIT_MARKER
    assert len(data) == 78
    batch = _one(data)
    assert (batch.is_control, batch.is_transactional, batch.base_sequence) == (True, True, -1)
    marker = batch.end_transaction_marker()
    assert (marker.type, marker.coordinator_epoch) == (ControlRecordType.COMMIT, 7)


def test_abort_marker() -> None:
    batch = _one(control_batch(ControlRecordType.ABORT, 42, 1, 9, 5, base_offset=3))
    assert batch.end_transaction_marker().type == ControlRecordType.ABORT
    assert struct.unpack_from(">h", batch.buffer, ATTRIBUTES)[0] == 0x30
    with pytest.raises(ValueError):
        control_batch(ControlRecordType.LEADER_CHANGE, 1, 1, 1, 1)


def test_base_timestamp_is_the_first_record_and_max_is_strict() -> None:
    """baseTimestamp = the first record's timestamp (not the minimum); deltas may be negative."""
    builder = RecordBatchBuilder()
    for ts in (5_000, 3_000, 9_000, 9_000):
        builder.append(None, b"v", timestamp=ts)
    batch = _one(builder.build())
    assert (batch.base_timestamp, batch.max_timestamp) == (5_000, 9_000)
    assert [r.timestamp for r in batch] == [5_000, 3_000, 9_000, 9_000]


def test_no_timestamp_records() -> None:
    builder = RecordBatchBuilder()
    builder.append(None, b"v", timestamp=-1)
    batch = _one(builder.build())
    assert (batch.base_timestamp, batch.max_timestamp) == (-1, -1)


def test_negative_timestamp_is_refused() -> None:
    with pytest.raises(InvalidTimestampError, match="Invalid negative timestamp -5"):
        RecordBatchBuilder().append(None, b"v", timestamp=-5)


def test_timestamp_none_means_now_from_the_clock() -> None:
    class Clock:
        def milliseconds(self) -> int:
            return 1_234_567

    builder = RecordBatchBuilder(clock=Clock())
    builder.append(None, b"v")
    assert [r.timestamp for r in _one(builder.build())] == [1_234_567]


def test_log_append_time_substitutes_max_timestamp() -> None:
    """Every record reads back with the batch's maxTimestamp; the deltas keep the producer's values."""
    builder = RecordBatchBuilder(timestamp_type="LogAppendTime", log_append_time=2_000_000)
    builder.append(b"a", b"1", timestamp=1_000)
    builder.append(b"b", b"2", timestamp=1_500)
    data = builder.build()
    batch = _one(data)
    assert batch.attributes & 0x08
    assert batch.timestamp_type == "LogAppendTime"
    assert struct.unpack_from(">q", data, BASE_TIMESTAMP)[0] == 1_000
    assert struct.unpack_from(">q", data, MAX_TIMESTAMP)[0] == 2_000_000
    assert [r.timestamp for r in batch] == [2_000_000, 2_000_000]
    assert to_arrow(data).column("timestampType").to_pylist() == [1, 1]
    assert to_arrow(data).column("timestamp").cast("int64").to_pylist() == [2_000_000, 2_000_000]


def test_delete_horizon_rebases_timestamps() -> None:
    builder = RecordBatchBuilder(delete_horizon_ms=10_000)
    builder.append(b"k", None, timestamp=4_000)
    batch = _one(builder.build())
    assert batch.has_delete_horizon and batch.delete_horizon_ms == 10_000
    assert batch.attributes & 0x40
    assert [r.timestamp for r in batch] == [4_000]


def test_offsets_sequential_and_explicit_with_gaps() -> None:
    builder = RecordBatchBuilder(base_offset=10)
    assert builder.append(b"a", b"1", timestamp=0) == 10
    assert builder.append(b"b", b"2", timestamp=0, offset=15) == 15
    assert builder.append(b"c", b"3", timestamp=0) == 16
    batch = _one(builder.build())
    assert (batch.base_offset, batch.last_offset_delta, batch.last_offset) == (10, 6, 16)
    assert [r.offset for r in batch] == [10, 15, 16]
    with pytest.raises(InvalidRecordError, match="monotonically"):
        builder.append(b"d", b"4", timestamp=0, offset=16)


def test_offset_delta_must_fit_int32() -> None:
    builder = RecordBatchBuilder(base_offset=0)
    with pytest.raises(InvalidRecordError):
        builder.append(b"k", b"v", timestamp=0, offset=2**31)


def test_sequences_wrap_past_int32_max() -> None:
    """A record's sequence is baseSequence + offsetDelta, restarting at 0 past Int32.MAX."""
    builder = RecordBatchBuilder(producer_id=7, producer_epoch=2, base_sequence=2**31 - 2)
    for _ in range(3):
        builder.append(None, b"v", timestamp=0)
    batch = _one(builder.build())
    assert [r.sequence for r in batch] == [2**31 - 2, 2**31 - 1, 0]
    assert batch.last_sequence == 0
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 2, 2**31 - 2)


def test_transactional_needs_a_producer_id() -> None:
    with pytest.raises(ValueError):
        RecordBatchBuilder(is_transactional=True)
    batch = _one(
        _build_one(RecordBatchBuilder(is_transactional=True, producer_id=5, producer_epoch=0, base_sequence=0))
    )
    assert batch.is_transactional and batch.attributes & 0x10


def _build_one(builder: RecordBatchBuilder) -> bytes:
    builder.append(b"k", b"v", timestamp=1)
    return builder.build()


def test_empty_builder_builds_nothing() -> None:
    assert RecordBatchBuilder().build() == b""


def test_partition_leader_epoch_default_is_minus_one() -> None:
    data = _build_one(RecordBatchBuilder())
    assert struct.unpack_from(">i", data, LEADER_EPOCH)[0] == -1


@pytest.mark.parametrize(
    ("codec", "prefix"),
    [
        ("gzip", bytes.fromhex("1f8b")),
        ("snappy", b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"),
        ("lz4", bytes.fromhex("04224d18604082")),
        ("zstd", bytes.fromhex("28b52ffd")),
    ],
)
def test_codec_framing_and_attributes(codec: str, prefix: bytes) -> None:
    data = _build_one(RecordBatchBuilder(compression=codec))
    batch = _one(data)
    assert batch.compression == codec
    assert data[RECORDS:].startswith(prefix)
    assert [(r.key, r.value) for r in batch] == [(b"k", b"v")]


def test_compression_levels_follow_kafka_ranges() -> None:
    for codec, level in (
        ("gzip", -1),
        ("gzip", 1),
        ("gzip", 9),
        ("lz4", 1),
        ("lz4", 17),
        ("zstd", 22),
        ("zstd", -5),
    ):
        assert _one(_build_one(RecordBatchBuilder(compression=codec, compression_level=level))).is_valid()
    for codec, level, config in (
        ("gzip", 0, "compression.gzip.level"),
        ("lz4", 18, "compression.lz4.level"),
        ("zstd", 23, "compression.zstd.level"),
    ):
        with pytest.raises(ValueError, match=config):
            RecordBatchBuilder(compression=codec, compression_level=level)


def test_unknown_codec_name() -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        RecordBatchBuilder(compression="brotli")
    assert _one(_build_one(RecordBatchBuilder(compression="uncompressed"))).compression == "none"


def test_type_errors_are_clear() -> None:
    builder = RecordBatchBuilder()
    with pytest.raises(TypeError, match="key must be bytes"):
        builder.append("text", b"v")
    with pytest.raises(TypeError, match="value must be bytes"):
        builder.append(b"k", 5)
    with pytest.raises(TypeError, match="header key"):
        builder.append(b"k", b"v", headers=[(None, b"x")])


def test_timestamp_type_names() -> None:
    assert TimestampType.parse("createtime") == TimestampType.CREATE_TIME
    with pytest.raises(ValueError):
        TimestampType.parse("EventTime")


# ----- the two encoders, and the two decoders, on random records --------------------------------------

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=300))
_header = st.tuples(st.text(max_size=12), _bytes_or_none)
_record = st.tuples(_bytes_or_none, _bytes_or_none, st.integers(-(2**40), 2**40), st.lists(_header, max_size=3))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    records=st.lists(_record, min_size=1, max_size=30),
    offset_gaps=st.lists(st.integers(0, 2**20), max_size=30),
)
def test_fast_encoder_equals_reference(records, offset_gaps) -> None:
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    ts = np.array([r[2] for r in records], dtype=np.int64)
    deltas = np.cumsum(
        [0] + [offset_gaps[i % len(offset_gaps)] + 1 if offset_gaps else 1 for i in range(len(records) - 1)]
    ).astype(np.int64)
    headers = [tuple(r[3]) for r in records]
    fast = encode_records_fast(keys, values, ts, deltas, headers)
    assert fast == encode_records_reference(keys, values, ts, deltas, headers)
    assert len(fast) == sum(
        record_size(k, v, int(d), int(t), h) for k, v, t, d, h in zip(keys, values, ts, deltas, headers, strict=True)
    )


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    records=st.lists(_record, min_size=1, max_size=20),
    codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
    ts_type=st.sampled_from(["CreateTime", "LogAppendTime"]),
)
def test_round_trip_and_decoders_agree(records, codec, ts_type) -> None:
    builder = RecordBatchBuilder(compression=codec, timestamp_type=ts_type, log_append_time=123, base_offset=50)
    for key, value, ts, headers in records:
        builder.append(key, value, timestamp=abs(ts), headers=headers)
    data = builder.build()
    assert builder.estimated_size_in_bytes() >= len(data) or codec != "none"
    batch = _one(data)
    got = list(batch)
    assert [(r.key, r.value) for r in got] == [(k, v) for k, v, _, _ in records]
    assert [list(r.headers) for r in got] == [list(h) for _, _, _, h in records]
    expected_ts = [123] * len(records) if ts_type == "LogAppendTime" else [abs(t) for _, _, t, _ in records]
    assert [r.timestamp for r in got] == expected_ts
    assert [r.offset for r in got] == list(range(50, 50 + len(records)))
    assert to_arrow(data).equals(reference_to_arrow(data))


# ----- the bulk path: whole columns in, the same bytes out -----------------------------------------------


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    records=st.lists(_record, min_size=1, max_size=25),
    codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
)
def test_build_from_columns_equals_appending(records, codec) -> None:
    options = {"compression": codec, "base_offset": 7, "producer_id": 3, "producer_epoch": 1, "base_sequence": 0}
    appended = RecordBatchBuilder(**options)
    for key, value, ts, headers in records:
        appended.append(key, value, timestamp=abs(ts), headers=headers)
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    timestamps = [abs(r[2]) for r in records]
    headers = [r[3] for r in records]
    expected = appended.build()  # same encoder and the same codec call: the same bytes, whatever the codec
    assert build_batch(keys, values, timestamps, headers, **options) == expected
    assert (
        build_batch(
            pa.array(keys, pa.binary()), pa.array(values, pa.large_binary()), np.array(timestamps), headers, **options
        )
        == expected
    )


def test_build_from_arrow_slices_and_chunks() -> None:
    values = pa.array([b"a", None, b"ccc", b"dddd", b""], pa.binary())
    keys = pa.chunked_array([pa.array(["k0", "k1"]), pa.array([None, "k3", "k4"])])
    data = build_batch(keys.combine_chunks()[1:4], values[1:4], [10, 11, 12])
    assert [(r.offset, r.key, r.value, r.timestamp) for r in _one(data)] == [
        (0, b"k1", None, 10),
        (1, None, b"ccc", 11),
        (2, b"k3", b"dddd", 12),
    ]
    assert [r.key for r in _one(build_batch(keys, values, [1] * 5))] == [b"k0", b"k1", None, b"k3", b"k4"]


def test_build_from_checks_its_columns() -> None:
    with pytest.raises(ValueError, match="2 keys for 3 values"):
        build_batch([b"a", b"b"], [b"1", b"2", b"3"], [1, 2, 3])
    with pytest.raises(ValueError, match="timestamps"):
        build_batch([b"a"], [b"1"], [1, 2])
    with pytest.raises(InvalidTimestampError, match="record 1"):
        build_batch([b"a", b"b"], [b"1", b"2"], [5, -7])
    with pytest.raises(TypeError):
        build_batch([b"a"], [12345], [1])
    assert build_batch([], [], []) == b""
    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", timestamp=1)
    with pytest.raises(ValueError, match="already holds"):
        builder.build_from([b"a"], [b"b"], [1])
