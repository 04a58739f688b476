"""Scenario tests of the partition log against Kafka's rules, with every expected number worked out by hand.

Each test spells out the arithmetic from the spec (../shared/spec/kafka-log-format.md): section 6 for rolling,
3.4 for index entries, 2 for validation, 7 for reads and ListOffsets, 8 for retention, 11 for flushing.
Nothing here is captured from kafkalog's own output.

Unless a test says otherwise, records are single-record batches built by ``one()``: a 10-byte key and a
72-byte value, timestamp delta 0, offset delta 0, no headers. Their v2 size (spec 1.2, 1.3):

    record body = attributes 1 + timestampDelta varlong(0) 1 + offsetDelta varint(0) 1
                + keyLength varint(10 → zigzag 20) 1 + key 10
                + valueLength varint(72 → zigzag 144, ≥ 128 so 2 bytes) 2 + value 72
                + headersCount varint(0) 1                                             = 89
    record      = length varint(89 → zigzag 178, 2 bytes) 2 + 89                       = 91
    batch       = 61-byte header + 91                                                  = 152
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from kafkalog.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from kafkalog.record import ControlRecordType, RecordBatchBuilder
from kafkalog.record.types import TimestampType
from kafkalog.storage import Log
from kafkalog.testing import MockTime

T0 = 1_700_000_000_000  # MockTime's default start
BATCH = 152  # size of one() (module docstring)
INT32_MAX = 2**31 - 1
KEY = b"k" * 10
VALUE = b"v" * 72
TIMESTAMP_TYPE_MASK = 0x08
CODEC_MASK = 0x07


# ----- helpers -----------------------------------------------------------------------------------


def open_log(tmp_path: Path, config: dict | None = None, clock: MockTime | None = None, **kwargs) -> Log:
    return Log.open(tmp_path / "topic-0", config or {}, clock=clock or MockTime(), **kwargs)


def one(ts: int = T0, key: bytes | None = KEY, value: bytes | None = VALUE, **builder_options) -> bytes:
    """A one-record batch; 152 bytes with the default key and value."""
    builder = RecordBatchBuilder(**builder_options)
    builder.append(key, value, ts)
    return builder.build()


def batch_of(timestamps, *, key: bytes | None = KEY, **builder_options) -> bytes:
    builder = RecordBatchBuilder(**builder_options)
    for i, ts in enumerate(timestamps):
        builder.append(key, b"value-%d" % i, ts)
    return builder.build()


def seg_path(log_dir: Path, base: int, suffix: str) -> Path:
    return log_dir / f"{base:020d}{suffix}"


def offset_index_entries(path: Path) -> list[tuple[int, int]]:
    """(relative offset, position) pairs of an .index file (spec 3.2)."""
    data = path.read_bytes()
    return [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]


def time_index_entries(path: Path) -> list[tuple[int, int]]:
    """(timestamp, relative offset) pairs of a .timeindex file (spec 3.3)."""
    data = path.read_bytes()
    return [struct.unpack_from(">qi", data, i) for i in range(0, len(data), 12)]


def stored_batches(log: Log, offset: int = 0, isolation: str = "log_end"):
    return list(log.read(offset, 10 * 1024 * 1024, isolation).records.batches())


def offsets(records) -> list[int]:
    return [r.offset for r in records]


def files_state(log_dir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(log_dir.iterdir()) if not p.name.endswith(".snapshot")}


class ManualScheduler:
    """A scheduler that only runs tasks when told to, to see what a roll schedules."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, object, int]] = []

    def schedule_once(self, name, fn, delay_ms=0):
        self.tasks.append((name, fn, delay_ms))

    def run_all(self) -> None:
        tasks, self.tasks = self.tasks, []
        for _, fn, _ in tasks:
            fn()


# ----- rolling (spec 6) and index entries (spec 3.4) ---------------------------------------------


def test_one_batch_size_is_152_bytes():
    # The whole file's arithmetic rests on this (module docstring).
    assert len(one()) == BATCH


def test_size_roll_points_and_index_entries(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"segment.bytes": 16384, "index.interval.bytes": 1000}, clock)
    # Offset i carries timestamp T0 + i: increasing, and at most 349 ms apart, so segment.ms (7 days) never
    # triggers; only the size rule does.
    for i in range(350):
        info = log.append(one(T0 + i))
        assert (info.first_offset, info.last_offset) == (i, i)

    # Roll rule 1: roll when size > segment.bytes − messagesSize = 16384 − 152 = 16232.
    # Before the k-th append to a segment its size is 152·k: 106·152 = 16112 (stays), 107·152 = 16264 > 16232
    # (rolls). So a segment takes 107 batches, and with one offset per batch the bases are 0, 107, 214, 321.
    assert log.segments.base_offsets == [0, 107, 214, 321]
    # 350 − 321 = 29 batches in the active segment.
    assert [s.size for s in log.segments] == [107 * 152] * 3 + [29 * 152]
    assert [s.size for s in log.segments] == [16264, 16264, 16264, 4408]
    assert log.log_end_offset == 350
    log.close()

    log_dir = tmp_path / "topic-0"
    # Index rule (3.4): before the k-th append (k from 0), if bytesSinceLastIndexEntry > 1000, add
    # (offset of this append, its start position 152·k) and reset to 0; then add 152.
    # Without an entry the counter after k appends is 152·k: 6·152 = 912 (no), 7·152 = 1064 > 1000 → entry at
    # k = 7, position 1064. After it the counter restarts at 152, reaching 1064 again before k = 14, etc.
    # So entries sit at k = 7j, position 1064·j: j = 1..15 for 107 batches (k ≤ 106, 7·15 = 105),
    # j = 1..4 for the 29 batches of the last segment (k ≤ 28).
    full = [(7 * j, 1064 * j) for j in range(1, 16)]
    assert offset_index_entries(seg_path(log_dir, 0, ".index")) == full
    assert offset_index_entries(seg_path(log_dir, 107, ".index")) == full
    assert offset_index_entries(seg_path(log_dir, 214, ".index")) == full
    assert offset_index_entries(seg_path(log_dir, 321, ".index")) == [(7 * j, 1064 * j) for j in range(1, 5)]

    # Time index: with each offset-index entry, (max timestamp so far, offset of the batch holding it); the
    # batch at k holds T0 + base + k, the max so far. On roll (and close) a final (max, its offset) entry is
    # appended when its timestamp is strictly greater than the last: for a rolled segment the last batch
    # k = 106 (ts T0 + base + 106) is newer than the entry at k = 105, so it is added; for the active one the
    # last batch is k = 28, which already has an entry, so close adds nothing.
    for base in (0, 107, 214):
        expected = [(T0 + base + 7 * j, 7 * j) for j in range(1, 16)] + [(T0 + base + 106, 106)]
        assert time_index_entries(seg_path(log_dir, base, ".timeindex")) == expected
    expected = [(T0 + 321 + 7 * j, 7 * j) for j in range(1, 5)]
    assert time_index_entries(seg_path(log_dir, 321, ".timeindex")) == expected
    for base, size in ((0, 16264), (107, 16264), (214, 16264), (321, 4408)):
        assert seg_path(log_dir, base, ".log").stat().st_size == size


def test_first_append_to_a_segment_never_adds_an_index_entry(tmp_path):
    log = open_log(tmp_path, {"index.interval.bytes": 0})
    # Interval 0: the first append has counter 0 (not > 0): no entry; every later append has counter ≥ 152 > 0.
    for i in range(4):
        log.append(one(T0 + i))
    log.close()
    # Entries (offset k, position 152·k) for k = 1, 2, 3.
    assert offset_index_entries(seg_path(tmp_path / "topic-0", 0, ".index")) == [(1, 152), (2, 304), (3, 456)]


def test_multi_batch_append_indexes_last_offset_at_start_position(tmp_path):
    log = open_log(tmp_path, {"index.interval.bytes": 0})
    log.append(one(T0))  # offset 0 at position 0, no entry
    # One append of two batches (3 records, then 2 records), as a follower sends them: it starts at 152
    # and its last offset is 5. The entry holds (last offset of the append, start of the append) = (5, 152).
    first = RecordBatchBuilder(base_offset=1)
    for _ in range(3):
        first.append(KEY, VALUE, T0)
    second = RecordBatchBuilder(base_offset=4)
    for _ in range(2):
        second.append(KEY, VALUE, T0)
    log.append_as_follower(first.build() + second.build())
    log.close()
    assert offset_index_entries(seg_path(tmp_path / "topic-0", 0, ".index")) == [(5, 152)]


def test_time_index_holds_the_offset_of_the_max_timestamp_batch(tmp_path):
    log = open_log(tmp_path, {"index.interval.bytes": 0})
    for ts in (T0 + 10, T0 + 5, T0 + 20, T0 + 3):  # offsets 0..3, out of time order
        log.append(one(ts))
    log.close()
    log_dir = tmp_path / "topic-0"
    # Offset entries for k = 1, 2, 3 at 152·k. Time entries go with them: (max so far, its batch's offset):
    # k = 1: max T0 + 10 from offset 0 (offset 1 has only T0 + 5) → (T0 + 10, 0)
    # k = 2: max T0 + 20 at offset 2 → (T0 + 20, 2)
    # k = 3: max still T0 + 20, not strictly greater → nothing; close adds nothing either.
    assert offset_index_entries(seg_path(log_dir, 0, ".index")) == [(1, 152), (2, 304), (3, 456)]
    assert time_index_entries(seg_path(log_dir, 0, ".timeindex")) == [(T0 + 10, 0), (T0 + 20, 2)]


def test_full_time_index_rolls_before_size_limit(tmp_path):
    # segment.index.bytes = 24: offset index 24 // 8 = 3 entries; time index roundDown(24, 12) = 24 → 2 entries,
    # and a time index is full at entries ≥ maxEntries − 1 = 1.
    log = open_log(tmp_path, {"segment.index.bytes": 24, "index.interval.bytes": 0})
    # Segment 0: append 0 → no entry; append 1 → counter 152 > 0 → one offset entry and one time entry.
    log.append(one(T0))
    log.append(one(T0 + 1))
    active = log.active_segment
    assert (active.offset_index.entries, active.offset_index.max_entries) == (1, 3)
    assert not active.offset_index.is_full()  # 1 of 3
    assert (active.time_index.entries, active.time_index.max_entries) == (1, 2)
    assert active.time_index.is_full()  # 1 ≥ 2 − 1
    assert active.size == 304  # far below segment.bytes
    # So append 2 rolls at offset 2 (rule 4), and likewise append 4 at offset 4.
    for i in range(2, 5):
        log.append(one(T0 + i))
    assert log.segments.base_offsets == [0, 2, 4]
    log.close()


def test_full_offset_index_rolls(tmp_path):
    # segment.index.bytes = 24 → offset index 3 entries. Records without timestamps (-1) never enter the time
    # index (an entry needs ts > the empty index's -1), so here the offset index fills first: entries at
    # k = 1, 2, 3 (interval 0) → full at 3 entries → the 5th append (k = 4) rolls.
    log = open_log(tmp_path, {"segment.index.bytes": 24, "index.interval.bytes": 0})
    for _ in range(4):
        log.append(one(-1))
    active = log.active_segment
    assert (active.offset_index.entries, active.offset_index.max_entries) == (3, 3)
    assert active.time_index.entries == 0
    for _ in range(5):
        log.append(one(-1))
    assert log.segments.base_offsets == [0, 4, 8]


def test_segment_ms_rolls_on_the_first_batch_max_timestamp(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"segment.ms": 1000}, clock)
    # First batch: records at T0 and T0 + 500 → base timestamp T0, max timestamp T0 + 500. The roll is timed
    # from the first batch's MAX timestamp, T0 + 500, and against the incoming batch's max timestamp, not the
    # clock (which stays at T0 throughout).
    log.append(batch_of([T0, T0 + 500]))  # offsets 0, 1
    log.append(one(T0 + 1200))  # waited 1200 − 500 = 700 ≤ 1000: offset 2, no roll
    # (Timing from the base timestamp T0 would have given 1200 and rolled.)
    log.append(one(T0 + 1500))  # waited 1000, not > 1000: offset 3, no roll
    # The newest batch (T0 + 1500) does not restart the wait: it is still timed from the first batch.
    assert log.segments.base_offsets == [0]
    log.append(one(T0 + 1501))  # waited 1001 > 1000 − jitter 0: roll, at this append's first offset 4
    assert log.segments.base_offsets == [0, 4]
    # The new segment times from its own first batch (T0 + 1501): T0 + 2501 waits 1000, no roll.
    log.append(one(T0 + 2501))
    assert log.segments.base_offsets == [0, 4]
    assert clock.milliseconds() == T0


def test_segment_ms_without_record_timestamps_uses_the_clock(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"segment.ms": 1000}, clock)
    # Timestamp -1 (NO_TIMESTAMP): the first batch's max timestamp is -1 < 0, so the wait is
    # now − segment creation time (the segment was created at open, at T0).
    log.append(one(-1))
    clock.advance(1000)
    log.append(one(-1))  # waited 1000, not > 1000
    assert log.segments.base_offsets == [0]
    clock.advance(1)
    log.append(one(-1))  # waited 1001 > 1000: roll at offset 2
    assert log.segments.base_offsets == [0, 2]


def test_segment_jitter_reduces_roll_time(tmp_path):
    seed = 2
    # LogConfig.randomSegmentJitter: abs(Java nextInt()) % min(segment.jitter.ms, segment.ms), drawn once when
    # the segment is opened. The first segment of a fresh log takes the rng's first draw.
    draw = random.Random(seed).getrandbits(32) - 2**31  # a Java nextInt()
    jitter = abs(draw) % min(500, 1000)
    assert 0 < jitter < 500  # the seed gives a non-trivial jitter (275)
    log = open_log(tmp_path, {"segment.ms": 1000, "segment.jitter.ms": 500}, rng=random.Random(seed))
    assert log.active_segment.rolling_jitter_ms == jitter
    log.append(one(T0))  # offset 0; the roll is timed from T0
    # Roll when waited > segment.ms − jitter = 1000 − 275 = 725.
    log.append(one(T0 + 1000 - jitter))  # waited 725: no roll
    assert log.segments.base_offsets == [0]
    log.append(one(T0 + 1000 - jitter + 1))  # waited 726 > 725: roll (without jitter, 726 ≤ 1000 would not)
    assert log.segments.base_offsets == [0, 2]


def test_empty_segment_never_rolls_on_time(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"segment.ms": 1000}, clock)
    clock.advance(5000)
    log.append(one(-1))  # rule 2 needs size > 0: the empty segment takes it
    assert log.segments.base_offsets == [0]


def test_compacted_topic_rolls_on_max_compaction_lag(tmp_path):
    # maxSegmentMs = min(max.compaction.lag.ms 1000, segment.ms 7 days) = 1000 for a compacted topic.
    log = open_log(tmp_path, {"cleanup.policy": "compact", "max.compaction.lag.ms": 1000})
    log.append(one(T0))
    log.append(one(T0 + 1000))  # waited 1000: no roll
    log.append(one(T0 + 1001))  # waited 1001 > 1000: roll at 2
    assert log.segments.base_offsets == [0, 2]


def test_time_roll_after_reopen_uses_the_first_batch_on_disk(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"segment.ms": 1000}, clock)
    log.append(batch_of([T0 + 100, T0 + 500]))  # offsets 0, 1; max T0 + 500
    log.append(one(T0 + 900))  # offset 2
    log.close()
    log = Log.open(tmp_path / "topic-0", {"segment.ms": 1000}, clock=clock, had_clean_shutdown=True, recovery_point=3)
    # Timed from the first batch's max timestamp read back from the file: T0 + 500.
    log.append(one(T0 + 1500))  # waited 1000: no roll
    assert log.segments.base_offsets == [0]
    log.append(one(T0 + 1501))  # waited 1001: roll at 4
    assert log.segments.base_offsets == [0, 4]


def test_batch_up_to_segment_bytes_fits_larger_is_rejected(tmp_path):
    # segment.bytes = 152: one batch fills the segment exactly (0 > 152 − 152 = 0 is false, no roll on empty);
    # the second append rolls (152 > 0).
    log = open_log(tmp_path, {"segment.bytes": BATCH})
    log.append(one(T0))
    log.append(one(T0))
    assert log.segments.base_offsets == [0, 1]
    # segment.bytes = 151 < 152: RecordBatchTooLargeException, nothing written.
    small = open_log(tmp_path / "small", {"segment.bytes": 151})
    with pytest.raises(RecordBatchTooLargeError):
        small.append(one(T0))
    assert small.log_end_offset == 0 and small.active_segment.size == 0


def test_rolling_twice_replaces_the_empty_active_segment(tmp_path):
    log = open_log(tmp_path)
    log.append(one(T0))
    log.roll()
    log.roll()  # a segment at 1 exists, but it is the empty active one: replaced, not an error
    assert log.segments.base_offsets == [0, 1]
    assert log.append(one(T0)).first_offset == 1


def test_offset_gap_beyond_int32_in_follower_append_rolls(tmp_path):
    log = open_log(tmp_path)
    log.append_as_follower(one(T0, base_offset=0))
    # Relative offset INT32_MAX − 0 = 2147483647 still fits the segment (0 ≤ rel ≤ Int32.MAX): no roll.
    log.append_as_follower(one(T0, base_offset=INT32_MAX))
    assert log.segments.base_offsets == [0]
    # 2^31 + 5 − 0 = 2147483653 > Int32.MAX: rule 5 rolls, at the append's first offset 2147483653.
    log.append_as_follower(one(T0, base_offset=2**31 + 5))
    assert log.segments.base_offsets == [0, 2147483653]
    assert log.log_end_offset == 2147483654
    assert seg_path(tmp_path / "topic-0", 2147483653, ".log").name == "00000000002147483653.log"
    assert seg_path(tmp_path / "topic-0", 2147483653, ".log").stat().st_size == BATCH
    assert offsets(log.records(INT32_MAX)) == [INT32_MAX, 2147483653]


# ----- timestamps (spec 2, validateRecord) -------------------------------------------------------


@pytest.fixture
def bounded_log(tmp_path):
    # The clock is at T0; records may be at most 1000 ms before it and 500 ms after it.
    return open_log(
        tmp_path, {"message.timestamp.before.max.ms": 1000, "message.timestamp.after.max.ms": 500}, MockTime()
    )


def test_timestamp_too_far_in_the_past_is_rejected(bounded_log):
    # now − ts = T0 − (T0 − 1001) = 1001 > 1000
    with pytest.raises(InvalidTimestampError):
        bounded_log.append(one(T0 - 1001))
    assert bounded_log.log_end_offset == 0


def test_timestamp_too_far_in_the_future_is_rejected(bounded_log):
    # ts − now = 501 > 500
    with pytest.raises(InvalidTimestampError):
        bounded_log.append(one(T0 + 501))
    assert bounded_log.log_end_offset == 0


def test_timestamps_at_the_limits_are_accepted(bounded_log):
    # now − ts = 1000, not > 1000; ts − now = 500, not > 500
    assert bounded_log.append(one(T0 - 1000)).first_offset == 0
    assert bounded_log.append(one(T0 + 500)).first_offset == 1
    # One bad record fails the whole batch: T0 is fine, T0 − 2000 is not.
    with pytest.raises(InvalidTimestampError):
        bounded_log.append(batch_of([T0, T0 - 2000]))
    assert [r.timestamp for r in bounded_log.records()] == [T0 - 1000, T0 + 500]


def test_log_append_time_topic_stamps_the_broker_time(tmp_path):
    clock = MockTime()
    log = open_log(
        tmp_path,
        {"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": 1000},
        clock,
    )
    clock.advance(12_345)
    now = T0 + 12_345
    # Producer timestamps far in the past: LogAppendTime skips the range check (it applies to CreateTime only).
    info = log.append(batch_of([T0 - 100_000, T0 - 5, T0 - 7]))
    assert info.log_append_time == now
    assert info.max_timestamp == now
    (batch,) = stored_batches(log)
    assert batch.attributes & TIMESTAMP_TYPE_MASK  # the batch is flagged LogAppendTime
    assert batch.max_timestamp == now
    # Every record reads back with the batch's max timestamp, the broker's time.
    assert [r.timestamp for r in log.records()] == [now, now, now]
    assert batch.ensure_valid() is None  # the CRC was recomputed over the new attributes and max timestamp
    # ListOffsets by time: the first record with ts ≥ now is offset 0; MAX_TIMESTAMP (-3) returns the first record
    # of the batch whose timestamp equals the max, again offset 0.
    assert (log.offset_for_timestamp(now).timestamp, log.offset_for_timestamp(now).offset) == (now, 0)
    assert (log.offset_for_timestamp(-3).timestamp, log.offset_for_timestamp(-3).offset) == (now, 0)


def test_producer_log_append_time_batch_into_create_time_topic(tmp_path):
    log = open_log(tmp_path, {"message.timestamp.before.max.ms": 1000}, MockTime())
    # A producer batch flagged LogAppendTime with append time T0 − 100; its records were written at T0 − 50, T0 − 60.
    batch = batch_of([T0 - 50, T0 - 60], timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=T0 - 100)
    # CreateTime topic, record timestamp ≠ -1: only the range check applies. Each record reads as the batch max
    # T0 − 100 (now − ts = 100 ≤ 1000): accepted. In place, setMaxTimestamp(CreateTime, max of the record
    # timestamps as read = T0 − 100) turns the batch into CreateTime.
    info = log.append(batch)
    assert (info.first_offset, info.last_offset) == (0, 1)
    (stored,) = stored_batches(log)
    assert stored.attributes & TIMESTAMP_TYPE_MASK == 0
    assert stored.max_timestamp == T0 - 100
    stored.ensure_valid()
    # Read as CreateTime, the records show the deltas' original producer timestamps.
    assert [r.timestamp for r in log.records()] == [T0 - 50, T0 - 60]

    # The same kind of batch with the append time out of range (now − (T0 − 5000) = 5000 > 1000) is rejected.
    too_old = batch_of([T0], timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=T0 - 5000)
    with pytest.raises(InvalidTimestampError):
        log.append(too_old)


def test_producer_log_append_time_batch_into_log_append_time_topic_is_rejected(tmp_path):
    # The topic is not CreateTime, so the branch that allows it is skipped, and a LogAppendTime batch is an error.
    log = open_log(tmp_path, {"message.timestamp.type": "LogAppendTime"}, MockTime())
    with pytest.raises(InvalidTimestampError):
        log.append(batch_of([T0], timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=T0))
    assert log.log_end_offset == 0


# ----- validation (spec 2) -----------------------------------------------------------------------


def test_client_batch_with_nonzero_base_offset_is_rejected(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(InvalidRecordError):
        log.append(one(T0, base_offset=5))
    assert log.log_end_offset == 0


def test_bad_crc_is_corrupt(tmp_path):
    log = open_log(tmp_path)
    bad = bytearray(one(T0))
    bad[-2] ^= 0xFF  # a value byte: covered by the CRC (bytes 21..end), not fixed
    with pytest.raises(CorruptRecordError):
        log.append(bytes(bad))
    assert log.log_end_offset == 0


def test_batch_larger_than_max_message_bytes(tmp_path):
    # 152 > 151 → RecordTooLargeException; 152 ≤ 152 is fine.
    log = open_log(tmp_path, {"max.message.bytes": 151})
    with pytest.raises(RecordTooLargeError):
        log.append(one(T0))
    log2 = open_log(tmp_path / "b", {"max.message.bytes": 152})
    assert log2.append(one(T0)).last_offset == 0


def test_compacted_topic_rejects_null_keys(tmp_path):
    log = open_log(tmp_path, {"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecordError):
        log.append(one(T0, key=None))
    # A keyed record, even a tombstone (null value), is fine.
    assert log.append(one(T0, value=None)).first_offset == 0
    # A null key anywhere in the batch fails it.
    builder = RecordBatchBuilder()
    builder.append(b"a", b"1", T0)
    builder.append(None, b"2", T0)
    with pytest.raises(InvalidRecordError):
        log.append(builder.build())
    assert log.log_end_offset == 1


def _three_records(compression: str) -> bytes:
    builder = RecordBatchBuilder(compression=compression)
    builder.append(b"a", b"alpha" * 20, T0, [("h", b"x")])
    builder.append(b"b", None, T0 + 1)
    builder.append(None, b"gamma" * 20, T0 + 2)
    return builder.build()


EXPECTED_THREE = [
    (0, T0, b"a", b"alpha" * 20, (("h", b"x"),)),
    (1, T0 + 1, b"b", None, ()),
    (2, T0 + 2, None, b"gamma" * 20, ()),
]


@pytest.mark.parametrize("source", ["gzip", "none"])
def test_zstd_topic_recompresses_producer_batches(tmp_path, source):
    log = open_log(tmp_path, {"compression.type": "zstd"})
    log.append(one(T0))  # offset 0, so the recompressed batch gets offsets 1..3
    info = log.append(_three_records(source))
    assert (info.first_offset, info.last_offset) == (1, 3)
    batch = stored_batches(log, 1)[-1]
    assert batch.attributes & CODEC_MASK == 4  # zstd
    assert batch.compression == "zstd"
    assert (batch.base_offset, batch.last_offset, batch.record_count) == (1, 3, 3)
    batch.ensure_valid()
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]
    assert got == [(o + 1, ts, k, v, h) for o, ts, k, v, h in EXPECTED_THREE]


def test_producer_compression_keeps_the_producer_codec_in_place(tmp_path):
    log = open_log(tmp_path, {"compression.type": "producer"})
    original = _three_records("gzip")
    log.append(original)
    (batch,) = stored_batches(log)
    assert batch.compression == "gzip"
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]
    assert got == EXPECTED_THREE
    # In place: only baseOffset (0 → 0 here) and partitionLeaderEpoch (bytes 12..15, −1 → leader epoch 0) change;
    # the length, magic, CRC and everything after are the producer's bytes.
    stored = log.read(0).records.tobytes()
    assert stored[:12] == original[:12]
    assert struct.unpack_from(">i", stored, 12)[0] == 0
    assert stored[16:] == original[16:]


def test_several_batches_to_a_recompressing_topic_are_rejected(tmp_path):
    # Recompressing (target zstd ≠ source none) allows exactly one v2 batch per append.
    log = open_log(tmp_path, {"compression.type": "zstd"})
    with pytest.raises(InvalidRecordError):
        log.append(one(T0) + one(T0))
    assert log.log_end_offset == 0
    # Uncompressed in place (target = source = none) takes several batches: offsets 0 and 1.
    plain = open_log(tmp_path / "plain")
    info = plain.append(one(T0) + one(T0))
    assert (info.first_offset, info.last_offset) == (0, 1)
    assert [(b.base_offset, b.last_offset) for b in stored_batches(plain)] == [(0, 0), (1, 1)]


def test_log_append_time_on_a_compressed_batch_in_place(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"message.timestamp.type": "LogAppendTime"}, clock)
    clock.advance(777)
    original = _three_records("gzip")
    log.append(original)
    (batch,) = stored_batches(log)
    # Same codec (producer → gzip): in place. The records section is the producer's compressed bytes; only the
    # header changes: timestamp type flag, max timestamp = now, and a recomputed CRC.
    assert batch.compression == "gzip"
    assert batch.attributes & TIMESTAMP_TYPE_MASK
    assert batch.max_timestamp == T0 + 777
    batch.ensure_valid()
    stored = log.read(0).records.tobytes()
    assert stored[61:] == original[61:]
    assert [r.timestamp for r in log.records()] == [T0 + 777] * 3


def test_offsets_are_assigned_contiguously_across_appends(tmp_path):
    log = open_log(tmp_path)
    a = log.append(batch_of([T0, T0, T0]))
    b = log.append(one(T0))
    c = log.append([(b"x", b"1", T0), (b"y", b"2", T0)])
    assert [(i.first_offset, i.last_offset) for i in (a, b, c)] == [(0, 2), (3, 3), (4, 5)]
    assert offsets(log.records()) == [0, 1, 2, 3, 4, 5]
    assert [(x.base_offset, x.last_offset) for x in stored_batches(log)] == [(0, 2), (3, 3), (4, 5)]
    assert log.log_end_offset == 6


def test_nothing_is_written_when_an_append_fails(tmp_path):
    clock = MockTime()
    log = open_log(
        tmp_path,
        {"cleanup.policy": "compact", "max.message.bytes": 200, "message.timestamp.before.max.ms": 1000,
         "index.interval.bytes": 0},
        clock,
    )  # fmt: skip
    for i in range(3):
        log.append(one(T0 + i))
    log_dir = tmp_path / "topic-0"
    before = files_state(log_dir)
    corrupt = bytearray(one(T0))
    corrupt[-1] ^= 1
    failures = [
        (one(T0, base_offset=3), InvalidRecordError),  # client base offset ≠ 0
        (bytes(corrupt), CorruptRecordError),  # bad CRC
        (one(T0, value=b"v" * 200), RecordTooLargeError),  # > 200 bytes
        (one(T0, key=None), InvalidRecordError),  # compacted topic, null key
        (one(T0 - 5000), InvalidTimestampError),  # 5000 ms old > 1000
        (batch_of([T0, T0 - 5000]), InvalidTimestampError),  # first record fine, second not
    ]
    for records, error in failures:
        with pytest.raises(error):
            log.append(records)
        assert log.log_end_offset == 3
        assert log.active_segment.size == 3 * BATCH
        assert files_state(log_dir) == before
    # The next good append takes the next offset, right after the last good one.
    assert log.append(one(T0 + 3)).first_offset == 3
    assert offsets(log.records()) == [0, 1, 2, 3]


# ----- reads (spec 7) ----------------------------------------------------------------------------


@pytest.fixture
def two_batch_log(tmp_path):
    """Offsets 0..4 in one batch (position 0), 5..9 in another."""
    log = open_log(tmp_path, auto_high_watermark=False)
    log.append(batch_of([T0] * 5))
    log.append(batch_of([T0] * 5))
    log.update_high_watermark(10)
    return log


def test_read_at_log_end_is_empty(two_batch_log):
    fetch = two_batch_log.read(10)
    assert fetch.records.size_in_bytes == 0
    assert fetch.fetch_offset_metadata.message_offset == 10


def test_read_below_log_start_or_above_log_end_is_out_of_range(two_batch_log):
    with pytest.raises(OffsetOutOfRangeError):
        two_batch_log.read(11)
    two_batch_log.delete_records(3)
    with pytest.raises(OffsetOutOfRangeError):
        two_batch_log.read(2)
    # 3 is inside the first batch: the read starts at that batch (offset 0), the consumer skips 0..2.
    assert two_batch_log.read(3).records.tobytes()[:8] == struct.pack(">q", 0)


def test_read_in_the_middle_of_a_batch_starts_at_the_batch(two_batch_log):
    fetch = two_batch_log.read(7)
    batches = list(fetch.records.batches())
    assert [b.base_offset for b in batches] == [5]
    first_size = stored_batches(two_batch_log)[0].size_in_bytes
    assert fetch.fetch_offset_metadata.relative_position_in_segment == first_size
    assert offsets(two_batch_log.records(7)) == [7, 8, 9]


def test_max_bytes_smaller_than_first_batch(tmp_path):
    log = open_log(tmp_path)
    log.append(one(T0))
    log.append(one(T0))
    # min_one_message: adjustedMax = max(10, 152) = 152 → exactly the first batch, not a byte of the second.
    fetch = log.read(0, max_bytes=10, min_one_message=True)
    assert fetch.records.size_in_bytes == BATCH
    assert [b.base_offset for b in fetch.records.batches()] == [0]
    assert not fetch.first_entry_incomplete
    # Without it: adjustedMax = 10 (not 0), fetchSize = min(304, 10) = 10 raw bytes, no complete batch, and
    # firstEntryIncomplete = 10 < 152.
    fetch = log.read(0, max_bytes=10, min_one_message=False)
    assert fetch.records.size_in_bytes == 10
    assert fetch.first_entry_incomplete
    assert list(fetch.records.batches()) == []
    # adjustedMax 0 → empty records.
    assert log.read(0, max_bytes=0, min_one_message=False).records.size_in_bytes == 0
    # max_bytes 200 < 2·152: fetchSize = min(304 − 0, 200) = 200 raw bytes, ending in a partial second batch.
    fetch = log.read(0, max_bytes=200)
    assert fetch.records.size_in_bytes == 200
    assert [b.base_offset for b in fetch.records.batches()] == [0]


def test_high_watermark_bounds_reads(tmp_path):
    log = open_log(tmp_path, auto_high_watermark=False)
    log.append(batch_of([T0] * 5))  # 0..4
    log.append(batch_of([T0] * 5))  # 5..9
    assert log.high_watermark == 0
    assert list(log.records()) == []
    log.update_high_watermark(5)
    assert offsets(log.records()) == [0, 1, 2, 3, 4]
    # The upper bound is the HW's position, the end of the first batch: the read stops there.
    fetch = log.read(0)
    assert [b.base_offset for b in fetch.records.batches()] == [0]
    # At the HW, and between the HW and the log end: empty, not an error.
    assert log.read(5).records.size_in_bytes == 0
    assert log.read(7).records.size_in_bytes == 0
    # A follower (log_end isolation) sees everything.
    assert [b.base_offset for b in log.read(0, isolation="log_end").records.batches()] == [0, 5]
    log.update_high_watermark(10)
    assert offsets(log.records()) == list(range(10))


def _timestamp_log(tmp_path) -> Log:
    """Two segments; timestamps out of order within batches (relative to T0):

    segment 0: batch A offsets 0, 1, 2 at +100, +300, +200 (max +300); batch B offsets 3, 4 at +150, +250
    segment 5: batch C offsets 5, 6, 7 at +500, +650, +600 (max +650)
    """
    log = open_log(tmp_path)
    log.append(batch_of([T0 + 100, T0 + 300, T0 + 200]))
    log.append(batch_of([T0 + 150, T0 + 250]))
    log.roll()
    log.append(batch_of([T0 + 500, T0 + 650, T0 + 600]))
    assert log.segments.base_offsets == [0, 5]
    return log


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        # Segment 0 is the first whose largest timestamp (+300) ≥ target; in it batch A is the first batch
        # with max ≥ target, and its first record with ts ≥ target is returned.
        (T0, (T0 + 100, 0)),
        (T0 + 100, (T0 + 100, 0)),
        (T0 + 101, (T0 + 300, 1)),
        # +250: record 4 has exactly +250, but batch A (max +300) comes first and holds offset 1 (+300).
        (T0 + 250, (T0 + 300, 1)),
        (T0 + 300, (T0 + 300, 1)),
        # +301 > segment 0's max +300: segment 5, batch C, first record ≥ +301 is offset 5 (+500).
        (T0 + 301, (T0 + 500, 5)),
        (T0 + 550, (T0 + 650, 6)),
        (T0 + 650, (T0 + 650, 6)),
    ],
)
def test_offset_for_timestamp(tmp_path, target, expected):
    log = _timestamp_log(tmp_path)
    found = log.offset_for_timestamp(target)
    assert (found.timestamp, found.offset) == expected


def test_offset_for_timestamp_special_values(tmp_path):
    log = _timestamp_log(tmp_path)
    assert log.offset_for_timestamp(T0 + 651) is None  # no segment's largest timestamp reaches it
    assert (log.offset_for_timestamp(-2).timestamp, log.offset_for_timestamp(-2).offset) == (-1, 0)
    assert (log.offset_for_timestamp(-1).timestamp, log.offset_for_timestamp(-1).offset) == (-1, 8)
    # -3: the segment with the greatest max (segment 5, +650), the batch whose max is +650, and in it the
    # first record at +650: offset 6 (not the batch's last offset 7).
    found = log.offset_for_timestamp(-3)
    assert (found.timestamp, found.offset) == (T0 + 650, 6)
    # After DeleteRecords to 1, -2 is the new log start and timestamp searches start at offset 1:
    # target T0 finds batch A, whose first record ≥ T0 at an offset ≥ 1 is offset 1 (+300).
    log.delete_records(1)
    assert log.offset_for_timestamp(-2).offset == 1
    found = log.offset_for_timestamp(T0)
    assert (found.timestamp, found.offset) == (T0 + 300, 1)


# ----- log start offset and retention (spec 8) ---------------------------------------------------


def _three_segments(tmp_path, config=None, clock=None, timestamps=(T0, T0, T0)) -> Log:
    """Segments at 0, 5, 10, five one-record batches each; segment s's records at timestamps[s]."""
    log = open_log(tmp_path, config, clock)
    for s, ts in enumerate(timestamps):
        if s:
            log.roll()
        for _ in range(5):
            log.append(one(ts))
    assert log.segments.base_offsets == [0, 5, 10]
    return log


def test_read_stops_at_the_segment_end(tmp_path):
    log = _three_segments(tmp_path)
    # A fetch reads from one segment only: from 3, the batches 3 and 4 of segment 0 (5 is in the next one).
    fetch = log.read(3, max_bytes=10 * BATCH)
    assert [b.base_offset for b in fetch.records.batches()] == [3, 4]
    assert fetch.records.size_in_bytes == 2 * BATCH


def test_delete_records_moves_the_log_start(tmp_path):
    log = _three_segments(tmp_path)
    assert log.delete_records(7) == 7
    assert log.log_start_offset == 7
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6)
    assert offsets(log.records()) == list(range(7, 15))
    assert log.offset_for_timestamp(-2).offset == 7
    # DeleteRecords never moves backwards.
    assert log.delete_records(3) == 7
    # Segments are untouched until a retention pass: then only segment 0 goes (the next base 5 ≤ 7);
    # segment 5 stays because its successor's base 10 > 7.
    assert log.segments.base_offsets == [0, 5, 10]
    assert log.delete_old_segments() == 1
    assert log.segments.base_offsets == [5, 10]
    assert log.log_start_offset == 7
    assert offsets(log.records()) == list(range(7, 15))


def test_delete_records_refuses_beyond_high_watermark(tmp_path):
    log = open_log(tmp_path, auto_high_watermark=False)
    for _ in range(10):
        log.append(one(T0))
    log.update_high_watermark(6)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(7)
    assert log.log_start_offset == 0
    assert log.delete_records(6) == 6  # = HW is allowed


def test_retention_ms_deletes_old_segments_and_files_later(tmp_path):
    clock = MockTime()
    config = {"retention.ms": 1000, "file.delete.delay.ms": 5000}
    # Segment 0 at T0 − 5000, segment 5 at T0 − 1000, segment 10 (active) at T0.
    log = _three_segments(tmp_path, config, clock, (T0 - 5000, T0 - 1000, T0))
    log_dir = tmp_path / "topic-0"
    # now − largest: 5000 > 1000 → delete; 1000, not > 1000 → keep, and the walk stops there.
    assert log.delete_old_segments() == 1
    assert log.segments.base_offsets == [5, 10]
    assert log.log_start_offset == 5
    assert not seg_path(log_dir, 0, ".log").exists()
    assert Path(f"{seg_path(log_dir, 0, '.log')}.deleted").exists()
    # Physically removed only after file.delete.delay.ms = 5000.
    clock.advance(4999)
    assert Path(f"{seg_path(log_dir, 0, '.log')}.deleted").exists()
    clock.advance(1)
    assert not any(p.name.endswith(".deleted") for p in log_dir.iterdir())
    # Now T0 + 5000: segment 5 is 6000 ms old → deleted; segment 10 is 5000 ms old, but it is the active
    # segment and the last: every segment would go, so a new empty segment is rolled at 15 first.
    assert log.delete_old_segments() == 2
    assert log.segments.base_offsets == [15]
    assert log.log_start_offset == 15


def test_retention_walk_stops_at_the_first_segment_to_keep(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"retention.ms": 1000}, clock)
    # Segments: 0 old (T0 − 5000), 1 new (T0), 2 old (T0 − 5000), 3 active new (T0).
    for i, ts in enumerate([T0 - 5000, T0, T0 - 5000, T0]):
        if i:
            log.roll()
        log.append(one(ts))
    assert log.delete_old_segments() == 1  # segment 1 stops the walk: segment 2 stays although old
    assert log.segments.base_offsets == [1, 2, 3]


def test_retention_ms_without_timestamps_uses_file_mtime(tmp_path):
    import os

    clock = MockTime()
    log = open_log(tmp_path, {"retention.ms": 1000}, clock)
    log.append(one(-1))  # offset 0: no timestamp, largestTimestamp falls back to the .log mtime
    log.roll()
    log.append(one(-1))  # offset 1
    log_dir = tmp_path / "topic-0"
    for base, mtime in ((0, T0 - 5000), (1, T0)):
        os.utime(seg_path(log_dir, base, ".log"), ns=(mtime * 1_000_000, mtime * 1_000_000))
    # now − mtime: 5000 > 1000 → delete segment 0; segment 1: 0 → keep.
    assert log.delete_old_segments() == 1
    assert log.segments.base_offsets == [1]


def test_compact_only_topic_deletes_by_log_start_only(tmp_path):
    clock = MockTime()
    log = _three_segments(tmp_path, {"cleanup.policy": "compact", "retention.ms": 1000}, clock,
                          (T0 - 5000, T0 - 5000, T0 - 5000))  # fmt: skip
    assert log.delete_old_segments() == 0  # no 'delete' in the policy: time retention does not apply
    log.delete_records(5)
    assert log.delete_old_segments() == 1  # segment 0: next base 5 ≤ log start 5
    assert log.segments.base_offsets == [5, 10]


def test_retention_bytes_deletes_oldest_first(tmp_path):
    log = open_log(tmp_path, {"retention.bytes": 152})
    # Segment sizes: 0 → 2 batches (304), 2 → 2 batches (304), 4 (active) → 1 batch (152); total 760.
    for i in range(5):
        if i in (2, 4):
            log.roll()
        log.append(one(T0))
    assert [s.size for s in log.segments] == [304, 304, 152]
    # diff = 760 − 152 = 608. Segment 0: 608 − 304 = 304 ≥ 0 → delete, diff 304. Segment 2: 304 − 304 = 0 ≥ 0
    # → delete, diff 0. Segment 4: 0 − 152 < 0 → stop.
    assert log.delete_old_segments() == 2
    assert log.segments.base_offsets == [4]
    assert log.log_start_offset == 4
    assert log.size == 152
    # Total 152 = retention.bytes: diff 0, no segment fits in it.
    assert log.delete_old_segments() == 0


def test_retention_bytes_one_segment(tmp_path):
    log = open_log(tmp_path, {"retention.bytes": 450})
    for i in range(5):
        if i in (2, 4):
            log.roll()
        log.append(one(T0))
    # diff = 760 − 450 = 310: segment 0 (304) → 6 left; segment 2 (304) > 6 → stop.
    assert log.delete_old_segments() == 1
    assert log.segments.base_offsets == [2, 4]


def test_when_every_segment_goes_an_empty_active_segment_is_rolled_first(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"retention.ms": 1000}, clock)
    log.append(one(T0 - 5000))  # offset 0
    log.roll()
    log.append(one(T0 - 5000))  # offset 1, active
    assert log.delete_old_segments() == 2
    # New active segment at the log end 2, empty; log start = its base.
    assert log.segments.base_offsets == [2]
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.active_segment.size == 0
    assert seg_path(tmp_path / "topic-0", 2, ".log").exists()
    assert log.read(2).records.size_in_bytes == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1)
    assert log.append(one(T0)).first_offset == 2


def test_retention_does_not_pass_the_high_watermark(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"retention.ms": 1000}, clock, auto_high_watermark=False)
    for i in range(3):
        if i:
            log.roll()
        log.append(one(T0 - 5000))
    # Segment 0's upper bound is 1 (next base): HW 1 ≥ 1 → deletable; segment 1's is 2 > HW 1 → stop.
    log.update_high_watermark(1)
    assert log.delete_old_segments() == 1
    assert log.segments.base_offsets == [1, 2]


# ----- idempotent producer -----------------------------------------------------------------------

PID = 1000


def _idempotent(seq: int, n: int, epoch: int = 0, pid: int = PID) -> bytes:
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        builder.append(b"k", b"seq-%d" % (seq + i), T0)
    return builder.build()


def test_idempotent_sequences_and_duplicates(tmp_path):
    log = open_log(tmp_path)
    first = log.append(_idempotent(0, 3))  # sequences 0..2 → offsets 0..2
    second = log.append(_idempotent(3, 2))  # sequences 3..4 → offsets 3..4
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    size = log.size
    # A retry of the first batch (same pid, epoch, sequences 0..2): not written, original offsets returned.
    retry = log.append(_idempotent(0, 3))
    assert retry.is_duplicate
    assert (retry.first_offset, retry.last_offset) == (0, 2)
    assert log.log_end_offset == 5
    assert log.size == size
    # The next in-order batch continues normally.
    assert log.append(_idempotent(5, 1)).first_offset == 5
    assert [r.sequence for r in log.records()] == [0, 1, 2, 3, 4, 5]


def test_only_the_last_five_batches_are_deduplicated(tmp_path):
    log = open_log(tmp_path)
    for seq in range(6):
        log.append(_idempotent(seq, 1))  # batches with sequences 0..5
    # Kafka keeps the metadata of the last 5 batches (sequences 1..5): a retry of 1 is a duplicate...
    dup = log.append(_idempotent(1, 1))
    assert dup.is_duplicate and dup.first_offset == 1
    # ...but a retry of 0 is no longer known: sequence 0 after 5 is out of order.
    with pytest.raises(OutOfOrderSequenceError):
        log.append(_idempotent(0, 1))
    assert log.log_end_offset == 6


def test_sequence_gap_is_out_of_order(tmp_path):
    log = open_log(tmp_path)
    log.append(_idempotent(0, 3))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(_idempotent(4, 1))  # expected 3
    assert log.log_end_offset == 3


def test_older_epoch_is_fenced(tmp_path):
    log = open_log(tmp_path)
    log.append(_idempotent(0, 1, epoch=0))
    log.append(_idempotent(0, 1, epoch=1))  # a bumped epoch starts again at sequence 0
    with pytest.raises(InvalidProducerEpochError):
        log.append(_idempotent(1, 1, epoch=0))
    assert log.log_end_offset == 2


def test_retry_after_truncation_is_written_again(tmp_path):
    log = open_log(tmp_path)
    for seq in range(3):
        log.append(_idempotent(seq, 1))  # sequence s at offset s
    # Truncating to 1 removes sequences 1 and 2: the producer state is rebuilt with last sequence 0.
    log.truncate_to(1)
    info = log.append(_idempotent(1, 1))
    assert not info.is_duplicate
    assert (info.first_offset, info.last_offset) == (1, 1)
    assert log.log_end_offset == 2
    # And a retry of sequence 0, still on the log, is a duplicate at its original offset.
    dup = log.append(_idempotent(0, 1))
    assert dup.is_duplicate and dup.first_offset == 0


def test_duplicate_detected_across_a_roll(tmp_path):
    log = open_log(tmp_path)
    log.append(_idempotent(0, 2))  # offsets 0, 1
    log.roll()
    log.append(_idempotent(2, 1))  # offset 2, new segment
    dup = log.append(_idempotent(0, 2))
    assert dup.is_duplicate and (dup.first_offset, dup.last_offset) == (0, 1)
    assert log.log_end_offset == 3


# ----- transactions ------------------------------------------------------------------------------


def _txn(pid: int, seq: int, n: int, epoch: int = 0) -> bytes:
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    for i in range(n):
        builder.append(b"k", b"%d-%d" % (pid, seq + i), T0)
    return builder.build()


def test_transactions_lso_isolation_and_txn_index(tmp_path):
    log = open_log(tmp_path)
    a, b = 2000, 3000
    log.append([(b"k", b"plain-0", T0), (b"k", b"plain-1", T0)])  # offsets 0, 1
    assert log.last_stable_offset == 2  # no open transaction: LSO = HW = 2
    log.append(_txn(a, 0, 2))  # A's transaction: offsets 2, 3
    assert log.last_stable_offset == 2  # the first offset of the open transaction
    log.append(_txn(b, 0, 2))  # B's transaction: offsets 4, 5
    assert log.last_stable_offset == 2  # still A's first offset
    assert log.high_watermark == 6
    # read_committed stops at the LSO: only the plain records.
    assert offsets(log.records(isolation="read_committed")) == [0, 1]
    # B aborts: marker at offset 6. A is still open, so the LSO stays 2.
    info = log.append_end_txn_marker(ControlRecordType.ABORT, b, 0, coordinator_epoch=7)
    assert (info.first_offset, info.last_offset) == (6, 6)
    assert log.last_stable_offset == 2
    # A commits: marker at 7; nothing open any more, LSO = HW = 8.
    log.append_end_txn_marker(ControlRecordType.COMMIT, a, 0, coordinator_epoch=7)
    assert log.last_stable_offset == 8 == log.log_end_offset
    # read_committed: the plain records and A's; B's aborted 4, 5 skipped; markers 6, 7 never shown.
    assert offsets(log.records(isolation="read_committed")) == [0, 1, 2, 3]
    # read_uncommitted: all data, still no control records.
    assert offsets(log.records(isolation="read_uncommitted")) == [0, 1, 2, 3, 4, 5]
    # The read_committed fetch carries the abort: (producer B, first offset 4).
    fetch = log.read(0, isolation="read_committed")
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in fetch.aborted_transactions] == [(b, 4, 6)]
    # Markers on disk: 78-byte control batches (spec 1.6), attributes 0x30.
    markers = [x for x in stored_batches(log) if x.is_control]
    assert [(m.base_offset, m.size_in_bytes, m.attributes) for m in markers] == [(6, 78, 0x30), (7, 78, 0x30)]
    log.close()
    # .txnindex entry (34 bytes): version 0, producer B, first offset 4, last offset 6 (the marker), and the LSO
    # when the abort completed: A's open transaction at 2.
    data = seg_path(tmp_path / "topic-0", 0, ".txnindex").read_bytes()
    assert len(data) == 34
    assert struct.unpack(">hqqqq", data) == (0, b, 4, 6, 2)


def test_retried_transactional_batch_is_a_duplicate(tmp_path):
    # UnifiedLog.analyzeAndValidateProducerState checks every client batch with a producer id for a duplicate,
    # transactional or not (ProducerStateEntry.findDuplicateBatch: same epoch, same sequence range).
    log = open_log(tmp_path)
    log.append(_txn(2000, 0, 2))  # sequences 0, 1 → offsets 0, 1
    size = log.size
    retry = log.append(_txn(2000, 0, 2))
    assert retry.is_duplicate
    assert (retry.first_offset, retry.last_offset) == (0, 1)
    assert log.log_end_offset == 2 and log.size == size


def test_abort_with_no_other_open_transaction_records_the_next_offset_as_lso(tmp_path):
    log = open_log(tmp_path)
    log.append(_txn(2000, 0, 3))  # offsets 0..2
    log.append_end_txn_marker(ControlRecordType.ABORT, 2000, 0, coordinator_epoch=1)  # offset 3
    assert log.last_stable_offset == 4
    assert list(log.records(isolation="read_committed")) == []
    assert offsets(log.records(isolation="read_uncommitted")) == [0, 1, 2]
    log.close()
    data = seg_path(tmp_path / "topic-0", 0, ".txnindex").read_bytes()
    # Nothing else open: the LSO after the abort is the marker offset + 1 = 4.
    assert struct.unpack(">hqqqq", data) == (0, 2000, 0, 3, 4)


def test_commit_writes_no_txn_index_entry(tmp_path):
    log = open_log(tmp_path)
    log.append(_txn(2000, 0, 1))
    log.append_end_txn_marker(ControlRecordType.COMMIT, 2000, 0, coordinator_epoch=1)
    log.close()
    txn = seg_path(tmp_path / "topic-0", 0, ".txnindex")
    assert not txn.exists() or txn.stat().st_size == 0


def test_aborted_transaction_spanning_segments(tmp_path):
    log = open_log(tmp_path)
    log.append(_txn(2000, 0, 2))  # offsets 0, 1 in segment 0
    log.append(one(T0))  # offset 2, plain
    log.roll()
    log.append(_txn(2000, 2, 1))  # offset 3, segment 3
    log.append(one(T0))  # offset 4, plain
    assert log.last_stable_offset == 0
    log.append_end_txn_marker(ControlRecordType.ABORT, 2000, 0, coordinator_epoch=1)  # offset 5
    assert log.last_stable_offset == 6
    # read_committed from 0 and from the second segment both skip 0, 1, 3.
    assert offsets(log.records(isolation="read_committed")) == [2, 4]
    assert offsets(log.records(3, isolation="read_committed")) == [4]
    assert offsets(log.records(isolation="read_uncommitted")) == [0, 1, 2, 3, 4]
    log.close()
    log_dir = tmp_path / "topic-0"
    # The entry goes to the segment where the ABORT marker was written (base 3), with first offset 0.
    txn0 = seg_path(log_dir, 0, ".txnindex")
    assert not txn0.exists() or txn0.stat().st_size == 0
    assert struct.unpack(">hqqqq", seg_path(log_dir, 3, ".txnindex").read_bytes()) == (0, 2000, 0, 5, 6)


def test_lso_is_capped_by_the_high_watermark(tmp_path):
    log = open_log(tmp_path, auto_high_watermark=False)
    log.append(one(T0))  # 0
    log.append(one(T0))  # 1
    log.append(_txn(2000, 0, 1))  # 2, open transaction
    log.update_high_watermark(1)
    assert log.last_stable_offset == 1  # min(first unstable 2, HW 1)
    log.update_high_watermark(3)
    assert log.last_stable_offset == 2


# ----- truncation --------------------------------------------------------------------------------


def test_truncate_in_the_middle_of_a_segment(tmp_path):
    log = open_log(tmp_path, {"index.interval.bytes": 0})
    for i in range(10):
        log.append(one(T0 + i))
    assert log.truncate_to(6)
    assert log.log_end_offset == 6
    assert log.active_segment.size == 6 * BATCH
    assert offsets(log.records()) == [0, 1, 2, 3, 4, 5]
    assert log.read(6).records.size_in_bytes == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7)
    # Index entries at or above 6 are gone (entries were at k = 1..9, position 152·k).
    assert log.active_segment.offset_index.entries == 5
    # Re-append: offsets continue at 6, and reads see the new record.
    assert log.append(one(T0 + 100, value=b"new")).first_offset == 6
    assert [(r.offset, r.value) for r in log.records(5)] == [(5, VALUE), (6, b"new")]
    # ListOffsets by time forgot the truncated timestamps (T0 + 6..9) and sees the new one.
    found = log.offset_for_timestamp(T0 + 7)
    assert (found.timestamp, found.offset) == (T0 + 100, 6)
    # Truncating to or beyond the log end does nothing.
    assert not log.truncate_to(7)
    assert not log.truncate_to(100)


def test_index_counter_restarts_after_truncation(tmp_path):
    log = open_log(tmp_path, {"index.interval.bytes": 0})
    for i in range(10):
        log.append(one(T0 + i))
    log.truncate_to(6)  # entries k = 1..5 stay; bytesSinceLastIndexEntry is reset to 0
    log.append(one(T0 + 6))  # offset 6 at 912: counter 0, not > 0 → no entry
    log.append(one(T0 + 7))  # offset 7 at 1064: counter 152 > 0 → entry (7, 1064)
    log.close()
    entries = offset_index_entries(seg_path(tmp_path / "topic-0", 0, ".index"))
    assert entries == [(k, 152 * k) for k in range(1, 6)] + [(7, 1064)]


def test_truncation_removes_the_abort_from_the_txn_index(tmp_path):
    log = open_log(tmp_path)
    log.append(_txn(2000, 0, 3))  # offsets 0..2
    log.append_end_txn_marker(ControlRecordType.ABORT, 2000, 0, coordinator_epoch=1)  # offset 3
    log.append(one(T0))  # offset 4
    assert log.last_stable_offset == 5
    log.truncate_to(3)
    # The marker is gone: the transaction is open again, the LSO is its first offset, read_committed sees nothing.
    assert log.last_stable_offset == 0
    assert list(log.records(isolation="read_committed")) == []
    assert log.read(0, isolation="read_uncommitted").records.size_in_bytes > 0
    assert log.segments.first().txn_index.all_aborted_txns() == []
    # Abort again: a new entry, LSO after it 4.
    log.append_end_txn_marker(ControlRecordType.ABORT, 2000, 0, coordinator_epoch=1)  # offset 3
    log.close()
    assert struct.unpack(">hqqqq", seg_path(tmp_path / "topic-0", 0, ".txnindex").read_bytes()) == (0, 2000, 0, 3, 4)


def test_truncate_below_the_log_start_lowers_it(tmp_path):
    # UnifiedLog.truncateTo: logStartOffset = min(targetOffset, logStartOffset).
    log = _three_segments(tmp_path)
    log.delete_records(7)
    assert log.truncate_to(6)
    assert log.log_start_offset == 6
    assert log.log_end_offset == 6
    assert log.read(6).records.size_in_bytes == 0
    assert log.offset_for_timestamp(-2).offset == 6
    assert log.append(one(T0)).first_offset == 6
    assert offsets(log.records()) == [6]


def test_truncate_across_segments(tmp_path):
    clock = MockTime()
    log = _three_segments(tmp_path, {"file.delete.delay.ms": 1000}, clock)
    log_dir = tmp_path / "topic-0"
    assert log.truncate_to(7)
    # Segment 10 is removed entirely; segment 5 keeps 5, 6.
    assert log.segments.base_offsets == [0, 5]
    assert log.log_end_offset == 7
    assert log.active_segment.base_offset == 5
    assert log.active_segment.size == 2 * BATCH
    assert offsets(log.records()) == list(range(7))
    assert not seg_path(log_dir, 10, ".log").exists()
    clock.advance(1000)
    assert not any(p.name.startswith(f"{10:020d}") for p in log_dir.iterdir())
    # Re-append into segment 5 at offset 7.
    assert log.append(one(T0)).first_offset == 7
    assert log.segments.base_offsets == [0, 5]
    assert offsets(log.records(5)) == [5, 6, 7]


def test_truncate_to_a_segment_base(tmp_path):
    log = _three_segments(tmp_path)
    assert log.truncate_to(5)
    # Segment 5 becomes empty (its base stays), segment 10 goes.
    assert log.segments.base_offsets == [0, 5]
    assert log.active_segment.size == 0
    assert log.log_end_offset == 5
    assert log.append(one(T0)).first_offset == 5


# ----- flushing (spec 11) ------------------------------------------------------------------------


def test_flush_messages_one_moves_recovery_point_with_every_append(tmp_path):
    log = open_log(tmp_path, {"flush.messages": 1})
    for i in range(3):
        log.append(one(T0))
        assert log.recovery_point == i + 1  # LEO − recovery point = 1 ≥ 1 → flush to the LEO


def test_flush_messages_three(tmp_path):
    log = open_log(tmp_path, {"flush.messages": 3})
    points = []
    for _ in range(7):
        log.append(one(T0))
        points.append(log.recovery_point)
    # LEO − RP: 1, 2 (< 3); 3 ≥ 3 → RP 3; 1, 2; 3 → RP 6; 1.
    assert points == [0, 0, 3, 3, 3, 6, 6]
    # A 4-record batch from RP 6: LEO 11, 11 − 6 = 5 ≥ 3 → RP 11.
    log.append(batch_of([T0] * 4))
    assert log.recovery_point == 11


def test_default_flush_policy_waits_for_flush(tmp_path):
    log = open_log(tmp_path)
    for _ in range(5):
        log.append(one(T0))
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 5


def test_roll_schedules_a_flush_of_the_previous_segment(tmp_path):
    scheduler = ManualScheduler()
    log = open_log(tmp_path, scheduler=scheduler)
    for _ in range(3):
        log.append(one(T0))
    log.roll()
    # The roll takes a producer-state snapshot at the new base offset 3.
    assert (tmp_path / "topic-0" / f"{3:020d}.snapshot").exists()
    assert log.recovery_point == 0  # not flushed yet: the flush is asynchronous
    assert len(scheduler.tasks) == 1
    for _ in range(2):
        log.append(one(T0))  # offsets 3, 4 in the new segment
    scheduler.run_all()
    # Everything below the new segment's base 3 is flushed; the recovery point moves to 3, not to the LEO 5.
    assert log.recovery_point == 3
    assert log.log_end_offset == 5


def test_roll_flush_runs_on_the_mock_scheduler(tmp_path):
    clock = MockTime()
    log = open_log(tmp_path, {"segment.bytes": 3 * BATCH}, clock)
    for _ in range(4):
        log.append(one(T0))
    # 3·152 = 456 bytes: 2·152 = 304 > 456 − 152 = 304? No; 3·152 = 456 > 304 → the 4th append rolls at 3.
    assert log.segments.base_offsets == [0, 3]
    clock.advance(0)  # run whatever is due (the roll's flush, due immediately)
    assert "flush" not in " ".join(clock.scheduler.pending())
    assert log.recovery_point == 3
