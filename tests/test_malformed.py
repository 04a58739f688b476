"""Malformed input: only the documented errors, no hang, no giant allocation (spec 1.3, 1.4, 1.8).

The fuzz tests also hold the two decoders to one answer: on any input, the per-record reference
path and the columnar fast path either both succeed with the same records, or both raise a
KafkaLogError.
"""

from __future__ import annotations

import struct
import tracemalloc

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchtools import BATCH_LENGTH, MAGIC, RECORDS, RECORDS_COUNT, patch, replace_records, with_crc
from kafkalog.errors import CorruptRecordError, InvalidRecordError, KafkaLogError
from kafkalog.record import RecordBatchBuilder, control_batch, iter_batches, to_arrow
from kafkalog.record.columnar import reference_to_arrow
from kafkalog.record.types import ControlRecordType


def _batch(codec: str = "none", n: int = 5, headers: bool = True) -> bytes:
    builder = RecordBatchBuilder(compression=codec, base_offset=100)
    for i in range(n):
        hdrs = [("h", b"v" * i), ("n", None)] if headers and i % 2 else []
        builder.append(
            f"k{i}".encode() if i % 3 else None, b"value-%d" % i * (i + 1), timestamp=1_000 + i, headers=hdrs
        )
    return builder.build()


SEEDS = [_batch(c) for c in ("none", "gzip", "snappy", "lz4", "zstd")] + [
    _batch("none", 1, headers=False),
    control_batch(ControlRecordType.ABORT, 7, 1, 3, 5_000, base_offset=9),
]


def _decode_everything(buf: bytes):
    """Touch every field of every batch and record through both decoders; return a comparable result."""
    reference = []
    for batch in iter_batches(buf):
        fields = (
            batch.base_offset,
            batch.last_offset,
            batch.magic,
            batch.timestamp_type,
            batch.max_timestamp,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.is_transactional,
            batch.is_control,
            batch.crc,
            batch.size_in_bytes,
            batch.is_valid(),
        )
        reference.append((fields, [tuple(r) for r in batch]))
    return reference


def _outcome(fn, buf):
    try:
        return "ok", fn(buf)
    except KafkaLogError as e:
        return "error", type(e)


def _check_agreement(buf: bytes) -> None:
    ref_status, ref = _outcome(lambda b: reference_to_arrow(b, include_control=True), buf)
    fast_status, fast = _outcome(lambda b: to_arrow(b, include_control=True), buf)
    assert ref_status == fast_status, f"reference {ref_status} {ref!r} but fast {fast_status} {fast!r}"
    if ref_status == "ok":
        assert fast.equals(ref)
    _outcome(_decode_everything, buf)  # only KafkaLogError may escape


fuzz = settings(
    max_examples=1500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@fuzz
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_bit_flips_in_records_with_fixed_crc(seed: bytes, data) -> None:
    """Flipped bits behind a recomputed CRC reach the record decoders, which must agree and fail cleanly."""
    buf = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(RECORDS, len(buf) - 1))
        buf[pos] ^= 1 << data.draw(st.integers(0, 7))
    _check_agreement(with_crc(buf))


@fuzz
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_random_overwrites_anywhere(seed: bytes, data) -> None:
    """Any byte anywhere, with or without a CRC fix: only documented errors."""
    buf = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    fix = data.draw(st.booleans())
    _check_agreement(with_crc(buf) if fix and buf[MAGIC] == 2 and len(buf) > RECORDS else bytes(buf))


@fuzz
@given(
    seed=st.sampled_from(SEEDS),
    field=st.sampled_from([(BATCH_LENGTH, ">i"), (RECORDS_COUNT, ">i")]),
    value=st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([-1, 0, 13, 14, 2**31 - 1, -(2**31)])),
)
def test_huge_and_negative_length_fields(seed: bytes, field, value: int) -> None:
    _check_agreement(patch(seed, field[0], field[1], value))


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.binary(min_size=0, max_size=300))
def test_random_bytes(buf: bytes) -> None:
    _check_agreement(buf)


@pytest.mark.parametrize("seed", SEEDS, ids=["none", "gzip", "snappy", "lz4", "zstd", "single", "control"])
def test_truncation_at_every_byte_stops_quietly(seed: bytes) -> None:
    """A partial batch at the end of a buffer is not there yet: the scan stops without an error."""
    complete = len(list(iter_batches(seed)))
    for cut in range(len(seed)):
        assert len(list(iter_batches(seed + seed[:cut]))) == complete
        assert to_arrow(seed[:cut]).num_rows == 0


def test_size_below_14_is_corruption_with_position() -> None:
    seed = SEEDS[0]
    bad = seed + struct.pack(">qi", 0, 13) + b"\0" * 20
    with pytest.raises(CorruptRecordError, match="less than the minimum record overhead") as info:
        list(iter_batches(bad))
    assert info.value.position == len(seed)


def test_zero_filled_tail_is_corruption() -> None:
    """A preallocated, zero-filled file tail has size 0 < 14."""
    with pytest.raises(CorruptRecordError):
        list(iter_batches(SEEDS[0] + b"\0" * 64))


@pytest.mark.parametrize("magic", [3, 4, 127, 255])
def test_unknown_magic_is_corruption(magic: int) -> None:
    bad = bytearray(SEEDS[0])
    bad[MAGIC] = magic
    with pytest.raises(CorruptRecordError, match="Invalid magic"):
        list(iter_batches(bytes(bad)))


def test_crc_mismatch_names_both_crcs() -> None:
    bad = bytearray(SEEDS[0])
    bad[-1] ^= 0xFF
    (batch,) = iter_batches(bytes(bad))
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match=r"stored crc = \d+, computed crc = \d+"):
        batch.ensure_valid()
    with pytest.raises(CorruptRecordError):
        to_arrow(bytes(bad))


def test_batch_smaller_than_header_is_corrupt() -> None:
    small = struct.pack(">qiib", 0, 40, -1, 2) + b"\0" * 36
    (batch,) = iter_batches(small)
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="smaller than the minimum allowed overhead 61"):
        batch.ensure_valid()


def test_negative_record_count() -> None:
    bad = patch(SEEDS[0], RECORDS_COUNT, ">i", -1)
    with pytest.raises(InvalidRecordError, match="invalid record count -1"):
        list(next(iter_batches(bad)))
    with pytest.raises(InvalidRecordError):
        to_arrow(bad)


def test_huge_record_count_allocates_nothing_large() -> None:
    bad = patch(SEEDS[0], RECORDS_COUNT, ">i", 2**31 - 1)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRecordError, match="premature EOF"):
            to_arrow(bad)
        with pytest.raises(InvalidRecordError, match="premature EOF"):
            list(next(iter_batches(bad)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (b"\xfe\xff\xff\xff\x0f" + b"\0" * 10, "Invalid record size"),  # body length 2^31-1
        (b"\xff\xff\xff\xff\xff\x01", "varint"),  # a 6-byte varint
        (b"\x14\x00" + b"\xff" * 10 + b"\x01" + b"\0" * 8, "varlong"),  # an 11-byte varlong timestamp delta
        (b"\x0c\x00\x00\x00\x01\x01\x03", "headers"),  # header count -2
        (b"\x0c\x00\x00\x00\x01\x01\x7e", "headers"),  # 63 headers in 0 bytes
        (b"\x10\x00\x00\x00\x01\x01\x02\x03\x01", "header key size"),  # header key length -2
        (b"\x0e\x00\x00\x00\xfe\xff\xff\xff\x0f\x01\x00", "overruns"),  # key of 2^31-1 bytes
        (b"\x0a\x00\x00\x00\x01\x01\x00\x00", "Invalid record size"),  # body says 5, record takes 6
    ],
)
def test_malformed_records(records: bytes, message: str) -> None:
    bad = replace_records(SEEDS[5], records, count=1)
    with pytest.raises(InvalidRecordError, match=message):
        list(next(iter_batches(bad)))
    with pytest.raises(InvalidRecordError):
        to_arrow(bad)


def test_records_left_over_after_count() -> None:
    seed = SEEDS[5]
    bad = replace_records(seed, bytes(seed[RECORDS:]) * 2, count=1)
    with pytest.raises(InvalidRecordError, match="records still remaining"):
        list(next(iter_batches(bad)))
    with pytest.raises(InvalidRecordError, match="records still remaining"):
        to_arrow(bad)


def test_empty_table_has_the_schema() -> None:
    assert to_arrow(b"").schema == reference_to_arrow(b"").schema
    assert isinstance(to_arrow(b""), pa.Table)
