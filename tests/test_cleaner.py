"""Log compaction, rule by rule (spec section 12; Kafka's LogCleanerTest ported to kafkalog's Cleaner).

Every test builds a small log on a MockTime clock, cleans it with ``Cleaner(SkimpyOffsetMap(...), clock)`` and a
``LogToClean``, and checks what stays against what it appended: which offsets, keys and values, which batch headers,
which transaction index entries. The expectations are worked out from the records written and Kafka's rules, never
read back from the cleaner. Rebuilt and copied batches are also decoded by kafka-python and both aiokafka codecs
(``oracles.py``), which must see valid CRCs and the same records as kafkalog's reader.
"""

from __future__ import annotations

import itertools
import os
import struct
import sys
from pathlib import Path

import pytest

from kafkalog.cleaner.cleaner import Cleaner
from kafkalog.cleaner.offset_map import SkimpyOffsetMap
from kafkalog.cleaner.policy import LogToClean, group_segments_by_size
from kafkalog.cleaner.stats import CleanerStats
from kafkalog.errors import CorruptRecordError, KafkaStorageError, LogCleaningAbortedError
from kafkalog.layout import INT32_MAX
from kafkalog.manager import TopicPartition
from kafkalog.record import ControlRecordType, RecordBatchBuilder, iter_batches, iter_file_batches
from kafkalog.storage import Log
from kafkalog.storage.config import LogConfig
from kafkalog.testing import MockTime
from oracles import (
    CODECS,
    KAFKA_PYTHON,
    ORACLES,
    oracle_batch_header,
    oracle_build_legacy,
    oracle_read_all,
    set_legacy_offset,
)

T0 = 1_700_000_000_000  # MockTime's default start
TP = TopicPartition("t", 0)
DAY_MS = 86_400_000
EMPTY_BATCH_SIZE = 61  # a v2 batch header with no records
DELETE_HORIZON_FLAG = 0x40  # attribute bit 6
# Kafka's LogCleanerTest log config: 1 KiB segments and indexes, compacted.
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1024", "segment.index.bytes": "1024"}
MAP_MEMORY = 64 * 1024  # 2730 slots: far more than any test here needs unless it says so


# ----- building logs ------------------------------------------------------------------------------------------------


@pytest.fixture
def clock() -> MockTime:
    return MockTime()


def open_log(tmp_path: Path, clock: MockTime, **overrides) -> Log:
    config = dict(COMPACT)
    config.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return Log.open(tmp_path / "t-0", config, clock)


def reopen(log: Log, clock: MockTime, *, recover: bool) -> Log:
    """Close and reopen a log; ``recover`` replays every segment from offset 0 (an unclean start)."""
    log.close()
    return Log.open(
        log.directory,
        log.config,
        clock,
        recovery_point=0,
        had_clean_shutdown=not recover,
        log_start_offset=log.log_start_offset,
    )


def kv(key: int | bytes | None, value: int | bytes | None) -> tuple:
    """Kafka's test ``record(key, value)``: ints are written as their decimal strings."""
    enc = lambda x: str(x).encode() if isinstance(x, int) else x  # noqa: E731
    return enc(key), enc(value)


def append(log: Log, key, value, timestamp: int | None = None, **producer) -> int:
    """One single-record batch (optionally idempotent/transactional); returns its offset."""
    builder = RecordBatchBuilder(clock=log.clock, **producer)
    builder.append(*kv(key, value), timestamp)
    return log.append(builder.build()).first_offset


def producer_batch(
    pid: int, seq: int, keys, *, epoch: int = 0, transactional: bool = False, codec: str = "none", **options
) -> bytes:
    """A batch of ``keys`` (value = key) from producer ``pid`` starting at sequence ``seq``."""
    builder = RecordBatchBuilder(
        codec, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional, **options
    )
    for k in keys:
        builder.append(*kv(k, k), T0)
    return builder.build()


class TxnProducer:
    """Kafka's ``appendTransactionalAsLeader``: each call appends one batch and advances the sequence."""

    def __init__(self, log: Log, pid: int, epoch: int = 0) -> None:
        self.log, self.pid, self.epoch, self.seq = log, pid, epoch, 0

    def __call__(self, keys) -> tuple[int, int]:
        info = self.log.append(producer_batch(self.pid, self.seq, keys, epoch=self.epoch, transactional=True))
        self.seq += len(keys)
        return info.first_offset, info.last_offset

    def commit(self) -> int:
        return self.log.append_end_txn_marker(ControlRecordType.COMMIT, self.pid, self.epoch, 0).first_offset

    def abort(self) -> int:
        return self.log.append_end_txn_marker(ControlRecordType.ABORT, self.pid, self.epoch, 0).first_offset


def clean(
    log: Log,
    clock: MockTime,
    first_dirty: int = 0,
    *,
    upper: int | None = None,
    now: int | None = None,
    offset_map: SkimpyOffsetMap | None = None,
    io_buffer_size: int = 256 * 1024,
) -> tuple[int, CleanerStats]:
    """One clean of [first_dirty, upper or the active segment's base); returns (next first dirty offset, stats)."""
    cleaner = Cleaner(offset_map or SkimpyOffsetMap(MAP_MEMORY), clock, io_buffer_size=io_buffer_size)
    upper = log.active_segment.base_offset if upper is None else upper
    cleanable = LogToClean(TP, log, first_dirty, upper)
    return cleaner.do_clean(cleanable, clock.milliseconds() if now is None else now)


# ----- reading logs back --------------------------------------------------------------------------------------------


def stored_batches(log: Log) -> list:
    """Every batch on disk, in order (over a copy of each segment's bytes)."""
    return [b for s in log.segments for b in iter_batches(s.log.path.read_bytes()[: s.size])]


def keys_in_log(log: Log) -> list[int]:
    """Kafka's LogTestUtils.keysInLog: keys of the data records that have a value."""
    return [int(r.key) for b in stored_batches(log) if not b.is_control for r in b if r.value is not None]


def offsets_in_log(log: Log) -> list[int]:
    """Kafka's offsetsInLog: offsets of every record with a key and a value (control records included)."""
    return [r.offset for b in stored_batches(log) for r in b if r.key is not None and r.value is not None]


def last_offsets_per_batch(log: Log) -> list[int]:
    return [b.last_offset for b in stored_batches(log)]


def last_sequences(log: Log) -> dict[int, int]:
    return {b.producer_id: b.last_sequence for b in stored_batches(log) if not b.is_control and b.has_producer_id}


def txn_index_entries(path: Path) -> list[tuple]:
    """(version, producer id, first offset, last offset, last stable offset) of each 34-byte .txnindex entry."""
    data = path.read_bytes() if path.exists() else b""
    return [struct.unpack_from(">hqqqq", data, i) for i in range(0, len(data), 34)]


def seg_file(log: Log, base: int, suffix: str) -> Path:
    return log.directory / f"{base:020d}{suffix}"


def assert_monotonic(log: Log) -> None:
    """Batches and records in strictly increasing offset order; each batch inside its segment's range."""
    previous_last = -1
    bases = log.segments.base_offsets
    for i, segment in enumerate(log.segments):
        upper = bases[i + 1] if i + 1 < len(bases) else log.log_end_offset
        for batch in iter_batches(segment.log.path.read_bytes()[: segment.size]):
            assert segment.base_offset <= batch.base_offset <= batch.last_offset < upper
            assert batch.base_offset > previous_last
            offsets = [r.offset for r in batch]
            assert offsets == sorted(set(offsets))
            assert all(batch.base_offset <= o <= batch.last_offset for o in offsets)
            previous_last = batch.last_offset


def assert_oracles_decode(log: Log) -> int:
    """kafka-python and both aiokafka codecs read every segment: valid CRCs, our headers and records."""
    checked = 0
    for segment in log.segments:
        data = segment.log.path.read_bytes()[: segment.size]
        ours = [(b, list(b)) for b in iter_batches(data)]
        for oracle in ORACLES:
            theirs = oracle_read_all(oracle, data)
            assert len(theirs) == len(ours), oracle
            for (batch, crc_ok, records), (our, our_records) in zip(theirs, ours, strict=True):
                assert crc_ok, f"{oracle}: bad CRC at offset {our.base_offset}"
                got = [(r.offset, r.timestamp, r.key, r.value) for r in records]
                assert got == [(r.offset, r.timestamp, r.key, r.value) for r in our_records], oracle
                checked += 1
                if our.magic < 2:  # a legacy message set has no v2 header fields to compare
                    continue
                header = oracle_batch_header(batch)
                assert header["base_offset"] == our.base_offset
                assert header["next_offset"] == our.next_offset
                assert header["attributes"] == our.attributes
                assert header["base_timestamp"] == our.base_timestamp
                assert header["max_timestamp"] == our.max_timestamp
                assert (header["producer_id"], header["producer_epoch"], header["base_sequence"]) == (
                    our.producer_id,
                    our.producer_epoch,
                    our.base_sequence,
                )
    return checked


# ----- the basic rule: the latest value of each key -----------------------------------------------------------------


def test_latest_value_per_key_kept_older_dropped(tmp_path, clock):
    log = open_log(tmp_path, clock)
    written = []  # (offset, key, value)
    while len(log.segments) < 5:
        offset = log.log_end_offset
        append(log, offset % 7, offset)
        written.append((offset, offset % 7, offset))
    upper = log.active_segment.base_offset
    dirty_bytes = sum(s.size for s in log.segments if s.base_offset < upper)
    end, stats = clean(log, clock)
    assert end == upper  # the map covered the whole dirty range
    latest = {}
    for offset, key, _ in written:
        if offset < upper:
            latest[key] = offset
    expected = sorted(latest.values()) + [o for o, _, _ in written if o >= upper]
    assert offsets_in_log(log) == expected
    assert [(r.offset, int(r.key), int(r.value)) for r in log.records()] == [
        (o, o % 7, o) for o in expected
    ]  # values are their offsets
    assert stats.messages_read == upper
    assert stats.messages_written == 7
    assert stats.bytes_read == dirty_bytes
    assert stats.invalid_messages_read == 0
    assert_monotonic(log)


def test_clean_reads_the_whole_range_and_writes_the_survivors(tmp_path, clock):
    # Kafka's testLogCleanerStats, with a map big enough for all keys: keys 0,1,0,1,0; clean from offset 2.
    log = open_log(tmp_path, clock)
    for i, key in enumerate([0, 1, 0, 1, 0]):
        append(log, key, i)
    log.roll()
    size_before = log.size
    end, stats = clean(log, clock, 2)
    assert end == 5
    assert offsets_in_log(log) == [3, 4]
    assert (stats.messages_read, stats.messages_written, stats.invalid_messages_read) == (5, 2, 0)
    assert stats.bytes_read == size_before
    assert stats.bytes_written == log.size
    assert stats.end_ms >= stats.start_ms


def test_null_key_records_are_dropped_and_counted_invalid(tmp_path, clock):
    # Kafka's testCleaningWithUnkeyedMessages: a compacted topic refuses null keys, so they are written while the
    # log is still cleanup.policy=delete and the policy is switched before cleaning.
    log = open_log(tmp_path, clock, cleanup_policy="delete")
    unkeyed = 0
    while len(log.segments) < 2:
        append(log, None, log.log_end_offset)
        unkeyed += 1
    size_with_unkeyed = log.size
    while len(log.segments) < 3:
        append(log, log.log_end_offset, log.log_end_offset)
    expected_size = log.size - size_with_unkeyed
    keyed = [r.offset for r in log.records() if r.key is not None]
    log.config = LogConfig(COMPACT)
    _, stats = clean(log, clock)
    assert all(r.key is not None for r in log.records())
    assert [r.offset for r in log.records()] == keyed
    assert log.size == expected_size
    assert stats.invalid_messages_read == unkeyed


# ----- a map that fills up ------------------------------------------------------------------------------------------


def one_entry_map() -> SkimpyOffsetMap:
    """Two 24-byte slots at load factor 0.75: the map takes one entry (Kafka's makeCleaner(2))."""
    offset_map = SkimpyOffsetMap(48, 0.75)
    assert offset_map.max_entries == 1
    return offset_map


def test_partial_segment_clean_keeps_records_past_the_maps_latest_offset(tmp_path, clock):
    # Kafka's testPartialSegmentClean: keys 0,1,0,1,0 at offsets 0..4, a map that holds one key.
    log = open_log(tmp_path, clock)
    for i, key in enumerate([0, 1, 0, 1, 0]):
        append(log, key, i)
    log.roll()
    # From 2: key 0 → 2 is mapped, key 1 at 3 finds the map full. Latest mapped offset 2, so the clean covers
    # [0, 3): offset 0 (key 0, older than 2) goes; offset 1 (key 1, not in the map) stays; 3 and 4 are past the
    # map's latest offset and stay whatever their keys.
    end, _ = clean(log, clock, 2, offset_map=one_entry_map())
    assert end == 3 < log.active_segment.base_offset
    assert keys_in_log(log) == [1, 0, 1, 0]
    assert offsets_in_log(log) == [1, 2, 3, 4]
    # Continuing from the returned offset makes progress one key at a time.
    end, _ = clean(log, clock, end, offset_map=one_entry_map())
    assert end == 4
    assert keys_in_log(log) == [0, 1, 0]
    assert offsets_in_log(log) == [2, 3, 4]
    end, _ = clean(log, clock, end, offset_map=one_entry_map())
    assert end == 5 == log.active_segment.base_offset
    assert keys_in_log(log) == [1, 0]
    assert offsets_in_log(log) == [3, 4]


def test_records_past_the_maps_latest_offset_are_kept_even_when_duplicated(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for i, key in enumerate([0, 1, 2, 2, 2]):
        append(log, key, i)
    log.roll()
    # key 0 at 0 is mapped; key 1 at 1 finds the map full: latest offset 0, end 1.
    end, _ = clean(log, clock, 0, offset_map=one_entry_map())
    assert end == 1
    assert offsets_in_log(log) == [0, 1, 2, 3, 4]  # the three 2s are past the map: all kept


def test_full_map_gives_partial_cleans_that_continue_to_the_dirty_end(tmp_path, clock):
    log = open_log(tmp_path, clock)
    written = []
    for i in range(60):
        key = (i * 7) % 13
        append(log, key, i)
        written.append((i, key))
    log.roll()
    upper = log.active_segment.base_offset
    first_dirty, ends = 0, []
    while first_dirty < upper:
        offset_map = SkimpyOffsetMap(24 * 5, 0.9)  # 5 slots, 4 entries
        end, _ = clean(log, clock, first_dirty, offset_map=offset_map)
        assert first_dirty < end <= upper
        ends.append(end)
        first_dirty = end
    assert len(ends) > 1 and ends[0] < upper  # the first clean stopped short: its end is the next checkpoint
    latest = {}
    for offset, key in written:
        latest[key] = offset
    assert offsets_in_log(log) == sorted(latest.values())
    assert_monotonic(log)


# ----- tombstones ---------------------------------------------------------------------------------------------------


def test_tombstones_get_a_delete_horizon_then_go_after_it(tmp_path, clock):
    log = open_log(tmp_path, clock, delete_retention_ms=1000)
    for key in range(5):
        append(log, key, key)  # offsets 0..4
    builder = RecordBatchBuilder(clock=clock)
    builder.append(b"1", None, T0 - 50)
    builder.append(b"3", None, T0 - 40)
    tombstones = log.append(builder.build()).first_offset  # offsets 5, 6
    append(log, 9, 9)  # offset 7: the tombstone batch is not the last of the round
    log.roll()
    original = {
        b.base_offset: bytes(b.source_buffer[b.position : b.position + b.size_in_bytes]) for b in stored_batches(log)
    }
    clock.advance(10)
    now = clock.milliseconds()

    clean(log, clock)
    by_base = {b.base_offset: b for b in stored_batches(log)}
    batch = by_base[tombstones]
    assert batch.attributes & DELETE_HORIZON_FLAG
    assert batch.delete_horizon_ms == batch.base_timestamp == now + 1000
    assert batch.max_timestamp == T0 - 40
    assert [(r.offset, r.key, r.value, r.timestamp) for r in batch] == [
        (5, b"1", None, T0 - 50),
        (6, b"3", None, T0 - 40),
    ]
    assert batch.last_offset == 6 and batch.is_valid()
    # Keys 1 and 3 lost their values (superseded by the tombstones); the others are copied untouched, no horizon.
    assert offsets_in_log(log) == [0, 2, 4, 7]
    for base in (0, 2, 4, 7):
        kept = by_base[base]
        assert bytes(kept.source_buffer[kept.position : kept.position + kept.size_in_bytes]) == original[base]
    assert assert_oracles_decode(log) > 0

    # Before the horizon, another clean keeps them and leaves the horizon alone.
    clean(log, clock, 0, now=now + 999)
    batch = {b.base_offset: b for b in stored_batches(log)}[tombstones]
    assert [r.offset for r in batch] == [5, 6] and batch.delete_horizon_ms == now + 1000
    # At the horizon they go, and with them the whole batch.
    clean(log, clock, 0, now=now + 1000)
    assert [b.base_offset for b in stored_batches(log)] == [0, 2, 4, 7]
    assert all(r.value is not None for b in stored_batches(log) for r in b)
    assert_monotonic(log)


def test_cleaning_with_deletes_removes_every_deleted_key_after_the_horizon(tmp_path, clock):
    # Kafka's testCleaningWithDeletes, in two passes (KIP-534).
    log = open_log(tmp_path, clock)
    while len(log.segments) < 2:
        append(log, log.log_end_offset, log.log_end_offset)
    leo = log.log_end_offset
    for key in range(0, leo, 2):
        append(log, key, None)
    later = []
    while len(log.segments) < 4:
        later.append(log.log_end_offset)
        append(log, log.log_end_offset, log.log_end_offset)
    clean(log, clock)
    keys = {int(r.key) for b in stored_batches(log) for r in b}
    assert all(k in keys for k in range(0, leo, 2))  # the tombstones are still there
    assert not any(k in keys_in_log(log) for k in range(0, leo, 2))  # but no value for a deleted key
    clean(log, clock, 0, now=clock.milliseconds() + DAY_MS)
    keys = {int(r.key) for b in stored_batches(log) for r in b}
    assert not any(k in keys for k in range(0, leo, 2))
    assert keys_in_log(log) == [k for k in range(1, leo, 2)] + later


# ----- the last batch of the round and of each producer -------------------------------------------------------------


def test_last_batch_of_the_round_is_kept_as_an_empty_batch(tmp_path, clock):
    log = open_log(tmp_path, clock, delete_retention_ms=1000)
    for key in range(4):
        append(log, key, key)  # 0..3
    builder = RecordBatchBuilder(clock=clock)
    builder.append(b"8", None, T0)
    builder.append(b"9", None, T0 + 5)
    log.append(builder.build())  # 4..5, tombstones only: the last batch before the active segment
    log.roll()
    upper = log.active_segment.base_offset
    assert upper == 6
    clean(log, clock)
    clean(log, clock, 0, now=clock.milliseconds() + 1000)
    last = stored_batches(log)[-1]
    # Everything in it went, but the batch stays (RETAIN_EMPTY): a bare header keeping the offsets.
    assert (last.base_offset, last.last_offset, last.next_offset) == (4, 5, upper)
    assert last.record_count == 0 and last.size_in_bytes == EMPTY_BATCH_SIZE
    assert last.base_timestamp == -1 and last.max_timestamp == T0 + 5
    assert last.attributes == 0  # no codec, no delete horizon on an empty batch
    assert last.is_valid()
    assert offsets_in_log(log) == [0, 1, 2, 3]
    assert assert_oracles_decode(log) > 0
    log = reopen(log, clock, recover=True)
    assert log.log_end_offset == upper
    assert last_offsets_per_batch(log) == [0, 1, 2, 3, 5]


def test_a_middle_batch_with_nothing_left_is_deleted(tmp_path, clock):
    log = open_log(tmp_path, clock)
    append(log, 1, 1)  # 0: superseded by 2
    append(log, 2, 2)  # 1
    append(log, 1, 3)  # 2
    log.roll()
    clean(log, clock)
    assert last_offsets_per_batch(log) == [1, 2]


def test_active_producers_last_batch_stays_as_an_empty_batch(tmp_path, clock):
    # Kafka's testLogCleanerRetainsProducerLastSequence.
    log = open_log(tmp_path, clock)
    append(log, 0, 0)  # 0
    append(log, 0, 1, producer_id=1, producer_epoch=0, base_sequence=0)  # 1
    append(log, 0, 2, producer_id=2, producer_epoch=0, base_sequence=0)  # 2
    append(log, 0, 3, producer_id=3, producer_epoch=0, base_sequence=0)  # 3
    append(log, 1, 1, producer_id=2, producer_epoch=0, base_sequence=1)  # 4
    log.roll()
    before = {b.base_offset: b for b in stored_batches(log)}
    clean(log, clock)
    assert last_offsets_per_batch(log) == [1, 3, 4]
    assert last_sequences(log) == {1: 0, 2: 1, 3: 0}
    assert keys_in_log(log) == [0, 1]
    assert offsets_in_log(log) == [3, 4]
    empty = stored_batches(log)[0]
    original = before[1]
    assert empty.size_in_bytes == EMPTY_BATCH_SIZE and empty.record_count == 0
    assert (empty.base_offset, empty.last_offset) == (1, 1)
    assert empty.base_timestamp == -1
    assert empty.max_timestamp == original.max_timestamp
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (1, 0, 0)
    assert empty.partition_leader_epoch == original.partition_leader_epoch
    assert empty.is_valid()
    assert assert_oracles_decode(log) > 0
    # After a reload that replays every segment, producer 1's sequence 0 is still known: a retry is a duplicate.
    log = reopen(log, clock, recover=True)
    retry = log.append(producer_batch(1, 0, [0]))
    assert retry.is_duplicate and (retry.first_offset, retry.last_offset) == (1, 1)
    assert log.append(producer_batch(1, 1, [5])).first_offset == log.log_end_offset - 1


def test_duplicate_check_after_cleaning(tmp_path, clock):
    # Kafka's testDuplicateCheckAfterCleaning: idempotent batches with overlapping keys.
    log = open_log(tmp_path, clock, segment_bytes=2048)
    log.append(producer_batch(1, 0, [1, 2, 3]))  # 0..2
    log.append(producer_batch(2, 0, [3, 1, 4]))  # 3..5
    log.append(producer_batch(3, 0, [1, 4]))  # 6..7
    log.roll()
    clean(log, clock)
    assert last_offsets_per_batch(log) == [2, 5, 7]
    assert last_sequences(log) == {1: 2, 2: 2, 3: 1}
    assert keys_in_log(log) == [2, 3, 1, 4]
    assert offsets_in_log(log) == [1, 3, 6, 7]
    log = reopen(log, clock, recover=True)
    for pid, keys, first, last in ((1, [1, 2, 3], 0, 2), (3, [1, 4], 6, 7), (2, [3, 1, 4], 3, 5)):
        retry = log.append(producer_batch(pid, 0, keys))
        assert retry.is_duplicate and (retry.first_offset, retry.last_offset) == (first, last)
    log.append(producer_batch(4, 0, [2]))  # 8
    log.roll()
    clean(log, clock)
    assert last_sequences(log) == {1: 2, 2: 2, 3: 1, 4: 0}
    assert last_offsets_per_batch(log) == [2, 5, 7, 8]
    assert keys_in_log(log) == [3, 1, 4, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8]
    log = reopen(log, clock, recover=True)
    retry = log.append(producer_batch(1, 0, [1, 2, 3]))
    assert retry.is_duplicate and (retry.first_offset, retry.last_offset) == (0, 2)


# ----- transactions -------------------------------------------------------------------------------------------------


def test_aborted_data_is_removed_whatever_its_key(tmp_path, clock):
    # Kafka's testBasicTransactionAwareCleaning: keys written only by an aborted transaction still go.
    log = open_log(tmp_path, clock, segment_bytes=2048)
    p1, p2 = TxnProducer(log, 1), TxnProducer(log, 2)
    p1([1, 2])  # 0, 1
    p2([2, 3])  # 2, 3
    p1([3, 4])  # 4, 5
    p1.abort()  # 6
    p2.commit()  # 7
    p1([2])  # 8
    p1.commit()  # 9
    aborted_before = log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted_before] == [(1, 0, 6)]
    log.roll()
    clean(log, clock)
    assert keys_in_log(log) == [3, 2]  # 1 and 4 only ever had aborted values
    assert offsets_in_log(log) == [3, 6, 7, 8, 9]
    assert log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset) == aborted_before
    assert [r.offset for r in log.records(isolation="read_committed")] == [3, 8]
    assert_monotonic(log)


def test_transactions_spanning_segments(tmp_path, clock):
    # Kafka's testCleanWithTransactionsSpanningSegments.
    log = open_log(tmp_path, clock)
    p1, p2, p3 = TxnProducer(log, 1), TxnProducer(log, 2), TxnProducer(log, 3)
    p1([1, 2])
    p3([2, 3])
    p2([3, 4])
    log.roll()
    p2([5, 6])
    p3([6, 7])
    p1([7, 8])
    p2.abort()
    p3([8, 9])
    p3.commit()
    p1([9, 10])
    p1.abort()
    # Only the first segment is cleanable; nothing in it is decided yet except p2's abort.
    dirty, _ = clean(log, clock)
    assert keys_in_log(log) == [2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]
    log.roll()
    p2([11])
    p1([12])
    clean(log, clock, dirty)
    assert keys_in_log(log) == [2, 3, 6, 7, 8, 9, 11, 12]


def test_commit_marker_goes_in_two_passes_once_its_transaction_is_gone(tmp_path, clock):
    # Kafka's testCommitMarkerRemoval with the KIP-534 delete horizon.
    log = open_log(tmp_path, clock, segment_bytes=256, delete_retention_ms=1000)
    producer = TxnProducer(log, 1)
    producer([1])  # 0
    producer([2, 3])  # 1, 2
    producer.commit()  # 3
    producer([2])  # 4
    producer.commit()  # 5
    log.roll()
    # Nothing can go yet but offset 1 (key 2, superseded by 4): the marker at 3 still has data (offsets 0, 2).
    dirty, _ = clean(log, clock)
    assert keys_in_log(log) == [1, 3, 2]
    assert offsets_in_log(log) == [0, 2, 3, 4, 5]
    producer([1, 3])  # 6, 7
    producer.commit()  # 8
    log.roll()
    # Offsets 0 and 2 go now, but they were read in this pass: the marker at 3 stays, without a horizon yet.
    dirty, _ = clean(log, clock, dirty)
    assert keys_in_log(log) == [2, 1, 3]
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    assert not any(b.has_delete_horizon for b in stored_batches(log))
    # The next pass finds no batch of its transaction: the marker stays once more, now with a horizon.
    now = clock.milliseconds()
    clean(log, clock, 0, now=now)
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    marker = stored_batches(log)[0]
    assert marker.is_control and marker.base_offset == 3 and marker.record_count == 1
    assert marker.attributes & DELETE_HORIZON_FLAG and marker.delete_horizon_ms == now + 1000
    # The markers whose transactions still hold data never get one.
    assert [b.has_delete_horizon for b in stored_batches(log) if b.is_control] == [True, False, False]
    clean(log, clock, 0, now=now + 999)  # before the horizon: still there
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    clean(log, clock, 0, now=now + 1000)
    assert keys_in_log(log) == [2, 1, 3]
    assert offsets_in_log(log) == [4, 5, 6, 7, 8]
    assert assert_oracles_decode(log) > 0


def test_abort_marker_and_its_index_entry_stay_while_its_batches_remain(tmp_path, clock):
    # Kafka's testAbortMarkerRetentionWithEmptyBatch.
    log = open_log(tmp_path, clock, segment_bytes=256, delete_retention_ms=1000)
    producer = TxnProducer(log, 1)
    producer([2, 3])  # 0, 1: the producer's last data batch
    producer.abort()  # 2
    log.roll()
    entries_before = txn_index_entries(seg_file(log, 0, ".txnindex"))
    assert [e[1:4] for e in entries_before] == [(1, 0, 2)]

    def aborted() -> list[tuple]:
        return [(t.producer_id, t.first_offset, t.last_offset) for t in log.collect_aborted_transactions(0, 100)]

    clean(log, clock)
    assert aborted() == [(1, 0, 2)]
    assert keys_in_log(log) == []
    assert offsets_in_log(log) == [2]  # the abort marker
    assert last_offsets_per_batch(log) == [1, 2]  # the aborted batch, empty: it holds the last sequence
    assert txn_index_entries(seg_file(log, 0, ".txnindex")) == entries_before  # written to the new .txnindex
    # Cleaned again (from the start: the whole log is in the map), nothing changes.
    clean(log, clock, 0)
    assert aborted() == [(1, 0, 2)]
    assert offsets_in_log(log) == [2] and last_offsets_per_batch(log) == [1, 2]
    # A newer sequence frees the empty batch; the marker stays once more, as the empty batch was still read.
    producer([1])  # 3
    log.roll()
    clean(log, clock, 0)
    assert aborted() == [(1, 0, 2)]
    assert keys_in_log(log) == [1]
    assert offsets_in_log(log) == [2, 3]
    assert last_offsets_per_batch(log) == [2, 3]
    # Now no batch of the transaction is left: the marker gets its horizon, then goes after it.
    now = clock.milliseconds()
    clean(log, clock, 0, now=now)
    assert offsets_in_log(log) == [2, 3]
    assert stored_batches(log)[0].delete_horizon_ms == now + 1000
    assert aborted() == []  # the index entry is not kept once its data is gone
    clean(log, clock, 0, now=now + 1000)
    assert keys_in_log(log) == [1]
    assert offsets_in_log(log) == [3]
    assert last_offsets_per_batch(log) == [3]
    assert aborted() == []


def test_aborted_transaction_spanning_segments(tmp_path, clock):
    # Kafka's testAbortedTransactionSpanningSegments: the batch is the producer's last, the marker keeps its data.
    log = open_log(tmp_path, clock, segment_bytes=128)
    producer = TxnProducer(log, 1)
    producer([1])
    log.roll()
    producer.abort()
    log.roll()
    for _ in range(2):
        clean(log, clock, 0)
        assert offsets_in_log(log) == [1]
        assert last_offsets_per_batch(log) == [0, 1]


def test_committed_transaction_spanning_segments(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=128)
    producer = TxnProducer(log, 1)
    producer([1])
    log.roll()
    producer.commit()
    log.roll()
    clean(log, clock, 0)
    assert offsets_in_log(log) == [0, 1]
    assert last_offsets_per_batch(log) == [0, 1]


def test_empty_control_batch_is_cleaned_without_error(tmp_path, clock):
    # Kafka's testCleanEmptyControlBatch: a marker with no transaction data before it.
    log = open_log(tmp_path, clock, segment_bytes=256)
    TxnProducer(log, 1).commit()  # 0
    append(log, 2, 2)  # 1
    append(log, 3, 3)  # 2
    log.roll()
    # The marker is producer 1's last entry. First pass: its transaction is empty, so it gets a delete horizon.
    now = clock.milliseconds()
    clean(log, clock, now=now)
    assert keys_in_log(log) == [2, 3]
    assert offsets_in_log(log) == [0, 1, 2]
    assert stored_batches(log)[0].delete_horizon_ms == now + DAY_MS
    # Past the horizon its record goes, but the batch stays as an empty batch: it carries the epoch for fencing.
    clean(log, clock, 0, now=now + DAY_MS + 1)
    assert keys_in_log(log) == [2, 3]
    assert offsets_in_log(log) == [1, 2]
    assert last_offsets_per_batch(log) == [0, 1, 2]
    empty = stored_batches(log)[0]
    assert empty.is_control and empty.is_transactional and empty.record_count == 0
    assert empty.size_in_bytes == EMPTY_BATCH_SIZE and not empty.has_delete_horizon
    # An empty control batch cleaned again causes no error and stays.
    clean(log, clock, 0, now=now + 2 * DAY_MS)
    assert offsets_in_log(log) == [1, 2]
    assert last_offsets_per_batch(log) == [0, 1, 2]
    assert assert_oracles_decode(log) > 0


def test_commit_marker_retention_with_empty_batch(tmp_path, clock):
    # Kafka's testCommitMarkerRetentionWithEmptyBatch; every clean maps the whole log (first dirty 0).
    log = open_log(tmp_path, clock, segment_bytes=256)
    p1, p2 = TxnProducer(log, 1), TxnProducer(log, 2)
    p1([2, 3])  # 0, 1
    log.roll()
    p2([2, 3])  # 2, 3
    p2.commit()  # 4
    log.roll()
    append(log, 2, 2)  # 5
    append(log, 3, 3)  # 6
    p1.commit()  # 7
    log.roll()
    now = clock.milliseconds()
    # Both transactions' records go, their batches stay empty (each holds its producer's last sequence).
    clean(log, clock, now=now)
    assert keys_in_log(log) == [2, 3]
    assert offsets_in_log(log) == [4, 5, 6, 7]
    assert last_offsets_per_batch(log) == [1, 3, 4, 5, 6, 7]
    clean(log, clock, now=now)
    assert offsets_in_log(log) == [4, 5, 6, 7]
    assert last_offsets_per_batch(log) == [1, 3, 4, 5, 6, 7]
    # A newer batch from producer 2 frees its empty batch; its marker at 4 was still preceded by it this pass.
    p2([1])  # 8
    p2.commit()  # 9
    log.roll()
    clean(log, clock, now=now)
    assert keys_in_log(log) == [2, 3, 1]
    assert offsets_in_log(log) == [4, 5, 6, 7, 8, 9]
    assert last_offsets_per_batch(log) == [1, 4, 5, 6, 7, 8, 9]
    # Two passes: the marker at 4 gets its horizon, then goes.
    clean(log, clock, now=now)
    clean(log, clock, now=now + DAY_MS + 1)
    assert keys_in_log(log) == [2, 3, 1]
    assert offsets_in_log(log) == [5, 6, 7, 8, 9]
    assert last_offsets_per_batch(log) == [1, 5, 6, 7, 8, 9]


def test_empty_batch_removal_with_sequence_reuse(tmp_path, clock):
    # Kafka's testEmptyBatchRemovalWithSequenceReuse: the group coordinator starts every transaction at sequence 0.
    log = open_log(tmp_path, clock, segment_bytes=2048)
    for offset, key in ((0, 1), (2, 2)):
        txn = {"producer_id": 1, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True}
        builder = RecordBatchBuilder(base_offset=offset, **txn)
        builder.append(*kv(key, key), T0)
        log.append_as_follower(builder.build())
        assert log.append_end_txn_marker(ControlRecordType.COMMIT, 1, 0, 0).first_offset == offset + 1
    append(log, 1, 1)  # 4
    append(log, 2, 1)  # 5
    log.roll()
    now = clock.milliseconds()
    # Both transactional batches are cleaned; the second stays empty, holding the producer's sequence and epoch.
    clean(log, clock, now=now)
    assert offsets_in_log(log) == [1, 3, 4, 5]
    assert last_offsets_per_batch(log) == [1, 2, 3, 4, 5]
    # First pass: the first marker gets its horizon; second pass: it goes.
    clean(log, clock, now=now)
    clean(log, clock, now=now + DAY_MS + 1)
    assert offsets_in_log(log) == [3, 4, 5]
    assert last_offsets_per_batch(log) == [2, 3, 4, 5]


# ----- how batches are written --------------------------------------------------------------------------------------


def test_batch_with_every_record_kept_is_copied_byte_for_byte(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=100_000)
    builder = RecordBatchBuilder("gzip", producer_id=5, producer_epoch=1, base_sequence=0)
    for k in range(10, 20):
        builder.append(*kv(k, b"unique-%d" % k), T0 + k, [("h", b"%d" % k)])
    log.append(builder.build(), leader_epoch=3)  # 0..9: every key unique
    for k in range(3):
        append(log, k, k)  # 10, 11, 12
        append(log, k, k + 100)  # superseding
    log.roll()
    on_disk = stored_batches(log)[0]
    original = bytes(on_disk.source_buffer[on_disk.position : on_disk.position + on_disk.size_in_bytes])
    clean(log, clock)
    first = stored_batches(log)[0]
    assert bytes(first.source_buffer[first.position : first.position + first.size_in_bytes]) == original
    assert offsets_in_log(log)[:10] == list(range(10))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_rebuilt_batch_keeps_its_header_fields_and_last_offset(tmp_path, clock, codec):
    log = open_log(tmp_path, clock, segment_bytes=100_000)
    builder = RecordBatchBuilder(codec, producer_id=7, producer_epoch=3, base_sequence=40)
    records = [(b"a", b"A" * 30, T0 - 40), (b"b", b"B" * 30, T0 - 10), (b"c", b"C" * 30, T0 - 30), (b"d", b"D", T0)]
    for key, value, ts in records:
        builder.append(key, value, ts, [("hk", key)] if key == b"c" else ())
    log.append(builder.build(), leader_epoch=5)  # 0..3
    append(log, b"a", b"new-a")  # 4
    append(log, b"d", b"new-d")  # 5
    log.roll()
    clean(log, clock)
    rebuilt = stored_batches(log)[0]
    assert rebuilt.is_valid()
    assert rebuilt.compression_type == CODECS[codec]
    assert (rebuilt.base_offset, rebuilt.last_offset, rebuilt.last_offset_delta) == (0, 3, 3)
    assert rebuilt.record_count == 2
    assert (rebuilt.producer_id, rebuilt.producer_epoch, rebuilt.base_sequence) == (7, 3, 40)
    assert rebuilt.last_sequence == 43  # the producer's last sequence survives
    assert rebuilt.partition_leader_epoch == 5
    assert not rebuilt.is_transactional and not rebuilt.is_control and not rebuilt.has_delete_horizon
    assert rebuilt.base_timestamp == T0 - 10  # the first kept record's
    assert rebuilt.max_timestamp == T0 - 10  # the largest kept
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in rebuilt] == [
        (1, b"b", b"B" * 30, T0 - 10, ()),
        (2, b"c", b"C" * 30, T0 - 30, (("hk", b"c"),)),
    ]
    assert [r.sequence for r in rebuilt] == [41, 42]
    assert offsets_in_log(log) == [1, 2, 4, 5]
    assert assert_oracles_decode(log) == 3 * len(ORACLES)
    # kafka-python sees the same codec, leader epoch and headers.
    data = log.segments.first().log.path.read_bytes()
    batch, _, kp_records = oracle_read_all(ORACLES[0], data)[0]
    assert batch.compression_type == CODECS[codec]
    assert struct.unpack_from(">i", data, 12)[0] == 5
    assert [tuple(h) for h in kp_records[1].headers] == [("hk", b"c")]


def test_offsets_stay_monotonic_with_gaps_across_merged_segments(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=600)
    keys = [i % 4 if i % 3 else 100 + i for i in range(80)]
    for key in keys:
        append(log, key, key)
    log.roll()
    clean(log, clock)
    latest = {k: o for o, k in enumerate(keys)}
    expected = sorted(latest.values())
    assert offsets_in_log(log) == expected
    assert any(b - a > 1 for a, b in itertools.pairwise(expected))  # there are gaps
    assert_monotonic(log)
    assert log.log_end_offset == len(keys)


# ----- grouping and swapping segments -------------------------------------------------------------------------------


def hello_log(tmp_path: Path, clock: MockTime, segments: int, **overrides) -> Log:
    log = open_log(tmp_path, clock, **overrides)
    while len(log.segments) < segments:
        append(log, b"hello", b"hello")
    return log


def check_segment_order(groups) -> None:
    bases = [s.base_offset for g in groups for s in g]
    assert bases == sorted(bases)


def test_group_segments_by_size(tmp_path, clock):
    # Kafka's testSegmentGrouping.
    log = hello_log(tmp_path, clock, 10, segment_bytes=300, index_interval_bytes=1)
    segments = list(log.segments)
    groups = group_segments_by_size(segments, INT32_MAX, INT32_MAX, log.log_end_offset)
    assert len(groups) == 1 and len(groups[0]) == 10
    check_segment_order(groups)
    for max_size, max_index in ((1, INT32_MAX), (INT32_MAX, 1)):
        groups = group_segments_by_size(segments, max_size, max_index, log.log_end_offset)
        assert len(groups) == 10 and all(len(g) == 1 for g in groups)
        check_segment_order(groups)
    group_size = 3
    log_size = sum(s.size for s in segments[:group_size]) + 1
    groups = group_segments_by_size(segments, log_size, INT32_MAX, log.log_end_offset)
    check_segment_order(groups)
    assert all(len(g) == group_size for g in groups[:-1])
    index_size = sum(s.offset_index.size_in_bytes for s in segments[:group_size]) + 1
    assert index_size > 1
    groups = group_segments_by_size(segments, INT32_MAX, index_size, log.log_end_offset)
    check_segment_order(groups)
    assert all(len(g) == group_size for g in groups[:-1])


def test_group_segments_by_time_index_size(tmp_path, clock):
    # With the default index interval, rolled segments have no offset index entry but one (final) time index entry:
    # only the time index limits the groups.
    log = hello_log(tmp_path, clock, 10, segment_bytes=300)
    segments = list(log.segments)[:-1]  # the rolled ones, as a clean would group them
    assert all(s.offset_index.size_in_bytes == 0 and s.time_index.size_in_bytes == 12 for s in segments)
    groups = group_segments_by_size(segments, INT32_MAX, 3 * 12 + 1, log.active_segment.base_offset)
    check_segment_order(groups)
    assert [len(g) for g in groups] == [3, 3, 3]


def test_group_segments_with_sparse_offsets(tmp_path, clock):
    # Kafka's testSegmentGroupingWithSparseOffsets: a group never spans more than Int.MaxValue offsets.
    log = open_log(tmp_path, clock, segment_bytes=400, index_interval_bytes=1)
    while len(log.segments) == 1:
        append(log, b"hello", b"hello")
    builder = RecordBatchBuilder(base_offset=INT32_MAX - 1)
    builder.append(b"hello", b"hello", T0)
    log.append_as_follower(builder.build())
    append(log, b"hello", b"hello")
    assert log.active_segment.offset_index.last_offset == INT32_MAX
    groups = group_segments_by_size(list(log.segments), INT32_MAX, INT32_MAX, log.log_end_offset)
    assert len(groups) == 1
    append(log, b"hello", b"hello")  # the second segment's last offset passes Int.MaxValue
    groups = group_segments_by_size(list(log.segments), INT32_MAX, INT32_MAX, log.log_end_offset)
    assert len(groups) == 2
    check_segment_order(groups)
    while len(log.segments) < 4:
        append(log, b"hello", b"hello")
    groups = group_segments_by_size(list(log.segments), INT32_MAX, INT32_MAX, log.log_end_offset)
    assert len(groups) == len(log.segments) - 1
    for group in groups:
        assert group[-1].offset_index.last_offset - group[0].base_offset <= INT32_MAX
    check_segment_order(groups)


def test_group_segments_following_load_of_zero_index(tmp_path, clock):
    # Kafka's testSegmentGroupingFollowingLoadOfZeroIndex: the range check reads the next segment's base.
    log = open_log(tmp_path, clock, segment_bytes=400, index_interval_bytes=400)
    for offset in (0, 1):
        builder = RecordBatchBuilder(base_offset=offset)
        builder.append(b"hello", b"hello", T0)
        log.append_as_follower(builder.build())
    log.roll(INT32_MAX // 2)
    for offset in (INT32_MAX // 2, INT32_MAX + 1):
        builder = RecordBatchBuilder(base_offset=offset)
        builder.append(b"hello", b"hello", T0)
        log.append_as_follower(builder.build())
    assert log.log_end_offset - 1 - log.log_start_offset > INT32_MAX
    assert log.segments.last().offset_index.last_offset - log.log_start_offset <= INT32_MAX
    groups = group_segments_by_size(list(log.segments), INT32_MAX, INT32_MAX, log.log_end_offset)
    assert len(groups) == 2
    for group in groups:
        assert group[-1].read_next_offset() - 1 - group[0].base_offset <= INT32_MAX
    check_segment_order(groups)


def small_segments_log(tmp_path: Path, clock: MockTime, segments: int, per_segment: int, **overrides) -> Log:
    """``segments`` rolled segments of ``per_segment`` records over keys 0..4, then an empty active segment."""
    log = open_log(tmp_path, clock, **overrides)
    for _ in range(segments):
        for _ in range(per_segment):
            append(log, log.log_end_offset % 5, b"%06d" % log.log_end_offset)  # every segment the same size
        log.roll()
    return log


def test_each_group_becomes_one_cleaned_segment_named_after_its_first_base(tmp_path, clock, monkeypatch):
    log = small_segments_log(tmp_path, clock, 6, 4, segment_bytes=100_000)
    sources = [s.base_offset for s in log.segments][:-1]
    swaps = []
    original_replace = log.replace_segments

    def recording_replace(new_segments, old_segments):
        swaps.append(
            (
                [s.log.path.name for s in new_segments],
                sorted(p.name for p in log.directory.iterdir() if p.name.endswith(".cleaned")),
                [s.base_offset for s in old_segments],
            )
        )
        original_replace(new_segments, old_segments)

    monkeypatch.setattr(log, "replace_segments", recording_replace)
    clean(log, clock)
    assert swaps == [
        (
            ["00000000000000000000.log.cleaned"],
            # no .txnindex: like Kafka's, it is only created when an aborted transaction is written to it
            [f"00000000000000000000{s}.cleaned" for s in (".index", ".log", ".timeindex")],
            sources,
        )
    ]
    assert log.segments.base_offsets == [0, 24]
    assert offsets_in_log(log) == [19, 20, 21, 22, 23]
    clock.advance(log.config.file_delete_delay_ms)  # the replaced files' asynchronous delete
    names = sorted(p.name for p in log.directory.iterdir() if p.suffix in (".log", ".index", ".timeindex"))
    assert names == [f"{0:020d}{s}" for s in (".index", ".log", ".timeindex")] + [f"{24:020d}.log"]
    assert not any(p.name.endswith((".deleted", ".cleaned", ".swap")) for p in log.directory.iterdir())


def test_groups_follow_segment_bytes(tmp_path, clock, monkeypatch):
    log = small_segments_log(tmp_path, clock, 6, 4, segment_bytes=100_000)
    sizes = [s.size for s in log.segments][:-1]
    # segment.bytes fits exactly two source segments: groups [0, 4], [8, 12], [16, 20].
    log.config = LogConfig({**COMPACT, "segment.bytes": str(sizes[0] + sizes[1])})
    assert sizes[0] + sizes[1] + sizes[2] > int(log.config.segment_bytes)
    groups = []
    original_replace = log.replace_segments
    monkeypatch.setattr(
        log,
        "replace_segments",
        lambda new, old: (groups.append([s.base_offset for s in old]), original_replace(new, old)),
    )
    clean(log, clock)
    assert groups == [[0, 4], [8, 12], [16, 20]]
    assert log.segments.base_offsets == [0, 8, 16, 24]


def test_cleaned_segment_keeps_the_last_source_segments_mtime(tmp_path, clock):
    log = small_segments_log(tmp_path, clock, 3, 4, segment_bytes=100_000)
    for i, segment in enumerate(list(log.segments)[:-1]):
        mtime_ns = (1_600_000_000 + 1000 * i) * 1_000_000_000
        os.utime(segment.log.path, ns=(mtime_ns, mtime_ns))
    clean(log, clock)
    cleaned = log.segments.first()
    assert cleaned.base_offset == 0 and len(log.segments) == 2
    assert os.stat(cleaned.log.path).st_mtime_ns == (1_600_000_000 + 2000) * 1_000_000_000


def test_cleaned_segments_indexes_are_valid(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=2000, index_interval_bytes=100, segment_index_bytes=1 << 20)
    ts = T0 - 100_000
    written = []
    for i in range(120):
        key = i % 9 if i % 4 else 1000 + i
        append(log, key, i, ts + 37 * i)
        written.append((i, key, ts + 37 * i))
    log.roll()
    # A small read buffer: the cleaner appends each buffer's survivors separately, so the indexes get entries
    # (one append per whole segment would never make one: spec 3.4).
    clean(log, clock, io_buffer_size=150)
    latest = {}
    for offset, key, _ in written:
        latest[key] = offset
    kept = [(o, t) for o, k, t in written if latest[k] == o]
    assert offsets_in_log(log) == [o for o, _ in kept]
    # Every offset index entry points at a batch start, no later than the batch holding its offset.
    total_entries = 0
    for segment in list(log.segments)[:-1]:
        data = segment.log.path.read_bytes()[: segment.size]
        starts = {b.position: b for b in iter_batches(data)}
        raw = seg_file(log, segment.base_offset, ".index").read_bytes()
        entries = [struct.unpack_from(">ii", raw, i) for i in range(0, len(raw), 8)]
        total_entries += len(entries)
        for (rel_a, pos_a), (rel_b, pos_b) in itertools.pairwise(entries):
            assert rel_a < rel_b and pos_a < pos_b
        for rel, pos in entries:
            assert pos in starts
            assert starts[pos].base_offset <= segment.base_offset + rel
        traw = seg_file(log, segment.base_offset, ".timeindex").read_bytes()
        tentries = [struct.unpack_from(">qi", traw, i) for i in range(0, len(traw), 12)]
        assert tentries == sorted(tentries)
        for t, rel in tentries:
            batch = next(b for b in starts.values() if b.base_offset <= segment.base_offset + rel <= b.last_offset)
            assert batch.max_timestamp == t  # the entry names the batch holding the max timestamp so far
    assert total_entries > 0, "index.interval.bytes=100 and a small read buffer must give index entries"

    def probe(lg: Log) -> tuple[list, list]:
        reads = []
        for o in range(lg.log_end_offset):
            first = next(iter(lg.records(o)), None)
            reads.append(first.offset if first is not None else None)
        lookups = []
        for _, t in kept:
            found = lg.offset_for_timestamp(t)
            lookups.append(found.offset if found is not None else None)
        return reads, lookups

    expected_reads = [next((o for o, _ in kept if o >= target), None) for target in range(log.log_end_offset)]
    expected_lookups = [next(o for o, t2 in kept if t2 >= t) for _, t in kept]
    assert probe(log) == (expected_reads, expected_lookups)
    size = log.size
    log = reopen(log, clock, recover=False)  # the cleaner's own index files
    assert probe(log) == (expected_reads, expected_lookups)
    log = reopen(log, clock, recover=True)  # indexes rebuilt from the .log files
    assert log.size == size  # recovery found every cleaned batch valid
    assert probe(log) == (expected_reads, expected_lookups)


# ----- independent decoders over a busy cleaned log -----------------------------------------------------------------


def test_independent_decoders_read_every_cleaned_file(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=1500, delete_retention_ms=1000)
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    txn = TxnProducer(log, 9)
    for round_ in range(6):
        codec = codecs[round_ % len(codecs)]
        builder = RecordBatchBuilder(codec, clock=clock)
        for k in range(6):
            key = (round_ * 3 + k) % 8
            builder.append(*kv(key, b"r%d-%s" % (round_, codec.encode()) if k != 2 else None), T0 + round_ * 10 + k)
        log.append(builder.build())
        txn([50 + round_])
        txn.abort() if round_ % 2 else txn.commit()
        log.append(producer_batch(3, round_ * 2, [60 + round_ % 2, 70], codec=codec))
    log.roll()
    before = {}
    for r in log.records(isolation="read_committed"):
        if r.value is None:
            before.pop(r.key, None)
        else:
            before[r.key] = r.value
    clean(log, clock)
    assert assert_oracles_decode(log) > 10
    clean(log, clock, 0, now=clock.milliseconds() + 1000)
    assert assert_oracles_decode(log) > 5
    after = {}
    for r in log.records(isolation="read_committed"):
        assert r.value is not None  # every tombstone is past its horizon
        after[r.key] = r.value
    assert after == before
    assert_monotonic(log)
    for b in stored_batches(log):
        assert b.is_valid()


# ----- more of Kafka's LogCleanerTest -------------------------------------------------------------------------------


def test_uncleanable_section_is_left_alone(tmp_path, clock):
    # Kafka's testCleaningWithUncleanableSection: an uncleanable offset inside a segment stops the clean at that
    # segment's base; the segments from there on keep every record.
    log = open_log(tmp_path, clock)
    n, cleanable_segments, total_segments = 10, 2, 7
    while len(log.segments) <= cleanable_segments:
        append(log, log.log_end_offset % n, log.log_end_offset)
    first_uncleanable = log.log_end_offset + 1  # inside segment number 3
    while len(log.segments) < total_segments - 1:
        append(log, log.log_end_offset % n, log.log_end_offset)

    def distinct_values_by_segment() -> list[int]:
        return [len({r.value for b in iter_file_batches(s.log.path) for r in b}) for s in log.segments]

    before = distinct_values_by_segment()
    assert all(count > n for count in before[:-1]), "each segment must hold duplicates for this test to mean much"
    end, _ = clean(log, clock, 0, upper=first_uncleanable)
    assert end == log.segments.base_offsets[cleanable_segments]  # the base of the segment holding the offset
    after = distinct_values_by_segment()
    assert all(a < b for a, b in zip(after[:cleanable_segments], before[:cleanable_segments], strict=True))
    assert after[cleanable_segments:] == before[cleanable_segments:]


def test_log_to_clean_sizes(tmp_path, clock):
    # Kafka's testLogToClean and testLogToCleanWithUncleanableSection: one record per 100-byte segment.
    log = open_log(tmp_path, clock, segment_bytes=100)
    for _ in range(6):
        append(log, b"1", b"\0" * 25)
    segments = list(log.segments)
    assert len(segments) == 6
    active = log.active_segment.base_offset
    whole = LogToClean(TP, log, active, active)
    assert whole.total_bytes == log.size - log.active_segment.size
    # segments 0, 1 clean; 2, 3 cleanable; 4, 5 uncleanable
    part = LogToClean(TP, log, segments[2].base_offset, segments[4].base_offset)
    clean_size = segments[0].size + segments[1].size
    cleanable_size = segments[2].size + segments[3].size
    assert part.clean_bytes == clean_size
    assert part.cleanable_bytes == cleanable_size
    assert part.total_bytes == clean_size + cleanable_size
    assert part.cleanable_ratio == pytest.approx(cleanable_size / (clean_size + cleanable_size))


def test_aborted_clean_leaves_the_log_untouched(tmp_path, clock):
    # Kafka's testCleanSegmentsWithAbort: check_done raising stops the clean and removes the .cleaned files.
    log = open_log(tmp_path, clock)
    while len(log.segments) < 4:
        append(log, log.log_end_offset % 3, log.log_end_offset)
    before = offsets_in_log(log)

    def abort(tp) -> None:
        raise LogCleaningAbortedError(f"{tp} aborted")

    cleaner = Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock, check_done=abort)
    with pytest.raises(LogCleaningAbortedError):
        cleaner.clean(LogToClean(TP, log, 0, log.active_segment.base_offset))
    assert offsets_in_log(log) == before
    assert not any(p.name.endswith((".cleaned", ".swap", ".deleted")) for p in log.directory.iterdir())


def groups_log(tmp_path: Path, clock: MockTime) -> tuple[Log, list[list[int]]]:
    """A log of several 1 KiB segments, one cleaning group each (two would overflow segment.bytes); returns it
    with the base offsets of its groups."""
    log = open_log(tmp_path, clock)
    while len(log.segments) < 5:
        append(log, log.log_end_offset % 3, b"v%04d" % log.log_end_offset + b"x" * 300)
    upper = log.active_segment.base_offset
    groups = group_segments_by_size(log.log_segments(0, upper), 1024, 1024, upper)
    assert len(groups) >= 3, "the test needs one group per segment"
    return log, [[s.base_offset for s in g] for g in groups]


def test_a_failure_in_a_later_group_keeps_the_groups_cleaned_before_it(tmp_path, clock, monkeypatch):
    """A group is flushed and swapped in on the flush thread while the next one is cleaned. When cleaning the next
    group fails, the one cleaned before still goes in, as in Kafka, where it was swapped in before the next was
    begun; the failing group stays as it was."""
    log, groups = groups_log(tmp_path, clock)
    before = {r.offset: (r.key, r.value) for r in log.records()}
    real = Cleaner.clean_into

    def failing(self, tp, log_obj, source, dest, *args, **kwargs):
        if source.base_offset == groups[1][0]:
            raise OSError("injected failure in the second group")
        return real(self, tp, log_obj, source, dest, *args, **kwargs)

    monkeypatch.setattr(Cleaner, "clean_into", failing)
    cleaner = Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock)
    upper = log.active_segment.base_offset
    with pytest.raises(OSError, match="injected"):
        cleaner.clean(LogToClean(TP, log, 0, upper))
    assert not any(p.name.endswith((".cleaned", ".swap")) for p in log.directory.iterdir())
    after = {r.offset: (r.key, r.value) for r in log.records()}
    # The first group now holds only each key's latest record in the whole dirty range (none: every key is written
    # again later), so it is empty; everything from the second group on is untouched.
    assert {o for o in before if o < groups[1][0]} - set(after) == {o for o in before if o < groups[1][0]}
    assert {o: v for o, v in after.items() if o >= groups[1][0]} == {o: v for o, v in before.items()
                                                                      if o >= groups[1][0]}  # fmt: skip
    assert [s.base_offset for s in log.segments][1:] == [g[0] for g in groups[1:]] + [upper]
    reopened = reopen(log, clock, recover=True)
    try:
        assert {r.offset: (r.key, r.value) for r in reopened.records()} == after
    finally:
        reopened.close()


def test_a_failed_flush_swaps_nothing_in_and_leaves_no_cleaned_files(tmp_path, clock, monkeypatch):
    log, groups = groups_log(tmp_path, clock)
    before = {r.offset: (r.key, r.value) for r in log.records()}
    from kafkalog.storage.segment import LogSegment

    real = LogSegment.flush

    def failing_flush(self, *args, **kwargs):
        if self.log.path.name.endswith(".cleaned"):
            raise OSError("injected fsync failure")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "flush", failing_flush)
    with pytest.raises(OSError, match="injected fsync"):
        Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock).clean(LogToClean(TP, log, 0, log.active_segment.base_offset))
    assert not any(p.name.endswith((".cleaned", ".swap", ".deleted")) for p in log.directory.iterdir())
    assert {r.offset: (r.key, r.value) for r in log.records()} == before
    assert [s.base_offset for s in log.segments][:-1] == [g[0] for g in groups]


def test_a_failed_swap_keeps_the_groups_before_it_and_swaps_in_none_after(tmp_path, clock, monkeypatch):
    """Groups go in in order on the flush thread: when the second group's swap fails, the first is in, the second
    and every later one stay as they were, no cleaned file is left, and the clean raises the swap's error."""
    log, groups = groups_log(tmp_path, clock)
    before = {r.offset: (r.key, r.value) for r in log.records()}
    real = Log.replace_segments
    swapped: list[int] = []

    def failing_swap(self, new_segments, old_segments):
        if old_segments[0].base_offset == groups[1][0]:
            raise OSError("injected swap failure")
        swapped.append(old_segments[0].base_offset)
        return real(self, new_segments, old_segments)

    monkeypatch.setattr(Log, "replace_segments", failing_swap)
    with pytest.raises(OSError, match="injected swap"):
        Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock).clean(LogToClean(TP, log, 0, log.active_segment.base_offset))
    assert swapped == [groups[0][0]]
    assert not any(p.name.endswith((".cleaned", ".swap")) for p in log.directory.iterdir())
    after = {r.offset: (r.key, r.value) for r in log.records()}
    assert {o: v for o, v in after.items() if o >= groups[1][0]} == {o: v for o, v in before.items()
                                                                      if o >= groups[1][0]}  # fmt: skip
    assert set(after) < set(before)  # the first group was cleaned
    assert [s.base_offset for s in log.segments][:-1] == [g[0] for g in groups]


def test_preallocated_cleaned_segment_is_trimmed(tmp_path, clock):
    # Kafka's testSizeTrimmedForPreallocatedAndCompactedTopic.
    log = open_log(tmp_path, clock, preallocate="true")
    for i, key in enumerate([0, 1, 0, 1, 0]):
        append(log, key, i)
    log.roll()
    clean(log, clock, 2)
    first = log.segments.first()
    assert os.path.getsize(first.log.path) == first.size < 1024
    assert offsets_in_log(log) == [3, 4]


def test_large_messages_grow_the_read_buffer(tmp_path, clock):
    # Kafka's testLargeMessage: batches far larger than the read buffer are read whole.
    big = 20_000
    log = open_log(tmp_path, clock, segment_bytes=big * 16, max_message_bytes=big * 2)
    while len(log.segments) < 2:
        append(log, log.log_end_offset % 4, b"\0" * big)
    upper = log.active_segment.base_offset
    cleaner = Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock, io_buffer_size=1024, max_io_buffer_size=1024)
    end, _ = cleaner.clean(LogToClean(TP, log, 0, upper))
    assert end == upper
    assert offsets_in_log(log)[:4] == list(range(upper - 4, upper))


def test_message_larger_than_max_message_size_is_still_cleaned(tmp_path, clock):
    # Kafka's testMessageLargerThanMaxMessageSize: the topic's max.message.bytes was lowered after large batches
    # were written; the cleaner still reads them (it grows its buffer to the next batch's size).
    big = 20_000
    log = open_log(tmp_path, clock, segment_bytes=big * 16, max_message_bytes=big * 2)
    while len(log.segments) < 2:
        append(log, log.log_end_offset % 4, b"\0" * big)
    log.config = LogConfig({**COMPACT, "segment.bytes": str(big * 16), "max.message.bytes": str(big // 2)})
    upper = log.active_segment.base_offset
    cleaner = Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock, io_buffer_size=1024, max_io_buffer_size=1024)
    end, _ = cleaner.clean(LogToClean(TP, log, 0, upper))
    assert end == upper
    assert offsets_in_log(log)[:4] == list(range(upper - 4, upper))


def test_corrupt_batch_size_larger_than_the_segment_fails_the_clean(tmp_path, clock):
    # Kafka's testCorruptMessageSizeLargerThanBytesAvailable: a batch running past the end of its segment.
    big = 20_000
    log = open_log(tmp_path, clock, segment_bytes=big * 16, max_message_bytes=big * 2)
    while len(log.segments) < 2:
        append(log, log.log_end_offset % 4, b"\0" * big)
    first = log.segments.first()
    before = first.log.path.read_bytes()
    with open(first.log.path, "r+b") as f:  # batch length of the second batch → far past the end
        position = struct.unpack_from(">i", before, 8)[0] + 12
        f.seek(position + 8)
        f.write(struct.pack(">i", 10 * big * 16))
    cleaner = Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock, io_buffer_size=1024, max_io_buffer_size=1024)
    with pytest.raises((CorruptRecordError, KafkaStorageError)):
        cleaner.clean(LogToClean(TP, log, 0, log.active_segment.base_offset))
    assert first.log.path.read_bytes()[:position] == before[:position]  # nothing was swapped in
    assert not any(p.name.endswith(".cleaned") for p in log.directory.iterdir())


@pytest.mark.parametrize("fast", [True, False])
def test_a_malformed_record_that_a_later_one_supersedes_still_fails_the_clean(tmp_path, clock, fast):
    """The copy pass drops a record that the map shows superseded without reading its value; the map pass reads
    every record in full, so a malformed one still fails the clean (as Kafka's readFrom would) and nothing is
    swapped in, on the fast path as on the reference one."""
    from kafkalog.errors import InvalidRecordError

    log = open_log(tmp_path, clock)
    append(log, 0, b"old-value")  # superseded below
    while len(log.segments) < 3:
        append(log, log.log_end_offset % 3, b"v%d" % log.log_end_offset)
    first = log.segments.first()
    data = first.log.path.read_bytes()
    at = data.index(b"\x12old-value")  # the value-length varint (9, zigzag 18): say 8 instead
    with open(first.log.path, "r+b") as f:
        f.seek(at)
        f.write(b"\x10")
    before = {p.name: p.read_bytes() for p in log.directory.iterdir() if p.suffix == ".log"}
    cleaner = Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock, fast=fast)
    with pytest.raises(InvalidRecordError):
        cleaner.clean(LogToClean(TP, log, 0, log.active_segment.base_offset))
    assert {p.name: p.read_bytes() for p in log.directory.iterdir() if p.suffix == ".log"} == before
    assert not any(p.name.endswith((".cleaned", ".swap")) for p in log.directory.iterdir())


def test_deleted_batches_with_no_messages_read(tmp_path, clock):
    # Kafka's testDeletedBatchesWithNoMessagesRead: a 100-byte read buffer, batches dropped whole.
    log = open_log(tmp_path, clock, max_message_bytes=100, segment_bytes=1000, delete_retention_ms=1000)
    producer = TxnProducer(log, 1)
    producer([1])  # 0
    producer.abort()  # 1
    producer([2])  # 2
    producer([2])  # 3
    producer.commit()  # 4
    log.roll()
    cleaner = Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock, io_buffer_size=100, max_io_buffer_size=100)
    upper = log.active_segment.base_offset
    now = clock.milliseconds()
    cleaner.do_clean(LogToClean(TP, log, 0, upper), now)
    assert keys_in_log(log) == [2]
    assert offsets_in_log(log) == [1, 3, 4]
    cleaner.do_clean(LogToClean(TP, log, 0, upper), now)  # the abort marker gets its horizon
    cleaner.do_clean(LogToClean(TP, log, 0, upper), now + 1000)  # and goes
    assert keys_in_log(log) == [2]
    assert offsets_in_log(log) == [3, 4]


def test_log_append_time_batch_rebuilt_keeps_its_append_time(tmp_path, clock):
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    builder = RecordBatchBuilder("lz4")
    for key, ts in ((b"a", T0 - 500), (b"b", T0 - 400), (b"c", T0 - 300)):
        builder.append(key, key * 20, ts)
    log.append(builder.build())  # 0..2, stamped with the append time
    append_time = clock.milliseconds()
    clock.advance(5)
    append(log, b"b", b"newer")  # 3
    log.roll()
    clean(log, clock)
    rebuilt = stored_batches(log)[0]
    assert rebuilt.timestamp_type == "LogAppendTime" and rebuilt.compression == "lz4"
    assert (rebuilt.base_offset, rebuilt.last_offset, rebuilt.record_count) == (0, 2, 2)
    assert rebuilt.max_timestamp == append_time
    assert [(r.offset, r.timestamp) for r in rebuilt] == [(0, append_time), (2, append_time)]
    assert assert_oracles_decode(log) > 0


def test_rebuilt_transactional_batch_stays_transactional(tmp_path, clock):
    log = open_log(tmp_path, clock)
    producer = TxnProducer(log, 4, epoch=2)
    producer([1, 2, 3])  # 0..2
    producer.commit()  # 3
    append(log, 2, b"x")  # 4
    log.roll()
    clean(log, clock)
    batch = stored_batches(log)[0]
    assert batch.is_transactional and not batch.is_control
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_offset) == (4, 2, 0, 2)
    assert [r.offset for r in batch] == [0, 2]
    assert [r.offset for r in log.records(isolation="read_committed")] == [0, 2, 4]
    assert assert_oracles_decode(log) > 0


# ----- legacy (magic v0/v1) messages ----------------------------------------------------------------------------------


def append_legacy(log: Log, codec: int, messages) -> None:
    """Replicate a magic-1 message set (kafka-python's builder) holding (offset, key, value) messages."""
    data = oracle_build_legacy(KAFKA_PYTHON, 1, codec, [(o, T0, k, v) for o, k, v in messages])
    if codec:
        data = set_legacy_offset(data, messages[-1][0])  # a wrapper carries its last inner offset
    log.append_as_follower(data)


def test_legacy_tombstone_goes_once_its_segment_is_older_than_the_delete_horizon(tmp_path, clock):
    # v0/v1 tombstones have no horizon in the batch: they stay while their segment's mtime is after the last clean
    # segment's mtime minus delete.retention.ms. One single-message segment each (segment.bytes 50).
    log = open_log(tmp_path, clock, segment_bytes=50)
    for offset, key, value in ((0, b"a", b"v0"), (1, b"a", None), (2, b"b", b"v2"), (3, b"c", b"v3")):
        append_legacy(log, 0, [(offset, key, value)])
    assert log.segments.base_offsets == [0, 1, 2, 3]
    log.roll()
    end, _ = clean(log, clock, 0, upper=2)  # nothing is clean yet (no reference segment): every tombstone stays
    assert end == 2
    assert [(r.offset, r.key, r.value) for r in log.records()] == [(1, b"a", None), (2, b"b", b"v2"), (3, b"c", b"v3")]
    now_s = T0 // 1000
    tombstone_segment = log.segments.floor(1)
    os.utime(tombstone_segment.log.path, (now_s - 2 * DAY_MS // 1000,) * 2)  # two days old
    for base in (2, 3):
        os.utime(log.segments.get(base).log.path, (now_s,) * 2)
    # Cleaning from 3: the last clean segment is segment 2 (mtime now), so the horizon is now - 1 day, and the
    # tombstone's segment, two days old, is past it.
    clean(log, clock, 3)
    assert [(r.offset, r.key, r.value) for r in log.records()] == [(2, b"b", b"v2"), (3, b"c", b"v3")]


def test_legacy_compressed_wrapper_is_rewritten_in_its_own_magic(tmp_path, clock):
    log = open_log(tmp_path, clock)
    append_legacy(log, 1, [(0, b"a", b"v0"), (1, b"b", b"v1"), (2, b"a", b"v2")])  # one gzip wrapper
    log.roll()
    clean(log, clock)
    assert [(r.offset, r.key, r.value) for r in log.records()] == [(1, b"b", b"v1"), (2, b"a", b"v2")]
    (wrapper,) = stored_batches(log)
    assert (wrapper.magic, wrapper.compression) == (1, "gzip")
    assert assert_oracles_decode(log) == len(ORACLES)


# ----- crashes during the swap ------------------------------------------------------------------------------------


SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")


def rename_suffix(directory: Path, old: str, new: str, bases=None) -> None:
    """Rename the segment files ``<base><.log|.index|...><old>`` to ``...<new>`` (for the given bases)."""
    for path in list(directory.iterdir()):
        stem, _, rest = path.name.partition(".")
        if "." + rest not in [kind + old for kind in SEGMENT_FILES] or (bases is not None and int(stem) not in bases):
            continue
        path.rename(path.with_name(path.name[: len(path.name) - len(old)] + new))


def test_recovery_after_a_crash_at_each_step_of_the_swap(tmp_path, clock):
    # Kafka's testRecoveryAfterCrash: the loader finishes or rolls back a swap interrupted at any point.
    log = open_log(tmp_path, clock, segment_bytes=300, index_interval_bytes=1, file_delete_delay_ms=10)
    while len(log.segments) < 10:
        append(log, log.log_end_offset % 7, log.log_end_offset)
    all_records = [(r.offset, r.key, r.value) for r in log.records()]
    # As Kafka's test cleans the first nine segments as one group, let them all fit one cleaned segment.
    log.config = LogConfig({**COMPACT, "segment.bytes": "100000", "index.interval.bytes": "1"})

    def records(lg: Log) -> list[tuple]:
        return [(r.offset, r.key, r.value) for r in lg.records()]

    def clean_and_close(lg: Log) -> tuple[Log, list[tuple], int]:
        clean(lg, clock)  # the old files stay as .deleted: the MockTime never reaches their delete
        assert len(lg.segments) == 2  # one cleaned segment, then the active one
        cleaned, head = records(lg), lg.segments.first().base_offset
        lg.close()
        return lg, cleaned, head

    # 1) crash after the .cleaned files were written, before any rename: the clean is rolled back.
    log, cleaned, head = clean_and_close(log)
    assert cleaned != all_records
    rename_suffix(log.directory, "", ".cleaned", bases={head})
    rename_suffix(log.directory, ".deleted", "")
    log = reopen(log, clock, recover=True)
    assert records(log) == all_records
    # 2) crash after .cleaned → .swap, before the old files were renamed .deleted: the swap is completed.
    log, cleaned, head = clean_and_close(log)
    rename_suffix(log.directory, "", ".swap", bases={head})
    rename_suffix(log.directory, ".deleted", "")
    log = reopen(log, clock, recover=True)
    assert records(log) == cleaned
    # 3) crash after the old files became .deleted, before .swap → final name: completed as well.
    log.close()
    rename_suffix(log.directory, "", ".swap", bases={head})
    log = reopen(log, clock, recover=True)
    assert records(log) == cleaned
    # 4) crash after the swap, before the asynchronous delete: nothing to do.
    log = reopen(log, clock, recover=True)
    assert records(log) == cleaned
    assert not any(p.name.endswith((".cleaned", ".swap")) for p in log.directory.iterdir())


def _parts_segment(directory: Path, parts: list[tuple[int, int, int]], *, in_parts: bool):
    """A segment given batches (base offset, record count, timestamp) in read buffers of two, appended one buffer at
    a time or all at once (LogSegment.append_in_parts); its .log, .index and .timeindex bytes."""
    from kafkalog.storage.segment import LogSegment

    directory.mkdir()
    segment = LogSegment.open(directory, 0, index_interval_bytes=100, max_index_size=4096, clock=MockTime())
    buffers, appends = [], []
    for k in range(0, len(parts), 2):
        batches = []
        for base, count, ts in parts[k : k + 2]:
            builder = RecordBatchBuilder(base_offset=base)
            for i in range(count):
                builder.append(b"k%d" % (base + i), b"v" * 40, ts + i)
            batches.append(builder.build())
        last_base, last_count, _ = parts[min(k + 1, len(parts) - 1)]
        max_ts, at = max((ts + count - 1, base) for base, count, ts in parts[k : k + 2])
        buffers.append(b"".join(batches))
        appends.append((last_base + last_count - 1, max_ts, at))
    buffers.insert(1, b"")  # a read buffer that kept nothing: no append at all
    appends.insert(1, (-1, -1, -1))
    if in_parts:
        ends = list(itertools.accumulate(map(len, buffers)))
        segment.append_in_parts(b"".join(buffers), [(end, *a) for end, a in zip(ends, appends, strict=True)])
    else:
        for data, (largest, max_ts, at) in zip(buffers, appends, strict=True):
            segment.append(largest, max_ts, at, data)
    segment.flush()
    segment.close()
    return {p.suffix: p.read_bytes() for p in directory.iterdir()}


def test_append_in_parts_writes_what_one_append_per_part_writes(tmp_path):
    """The cleaner writes a run of read buffers at once; the files, index entries included, are those of one
    LogSegment.append per buffer (Kafka's cleanInto)."""
    parts = [(base * 3, 3, 1_000 + (base * 37) % 11) for base in range(9)]
    one_by_one = _parts_segment(tmp_path / "one-0", parts, in_parts=False)
    at_once = _parts_segment(tmp_path / "all-0", parts, in_parts=True)
    assert one_by_one == at_once
    assert len(one_by_one[".index"]) > 8  # the parts made index entries, not only the first append


def test_a_clean_maps_each_segment_once_and_lets_the_maps_go(tmp_path, monkeypatch):
    """The copy pass reads the segments through the maps the map pass made, and the clean ends holding none."""
    from kafkalog.cleaner import pipeline as cleaner_module

    mapped: list[str] = []
    real = cleaner_module.map_file

    def counting(path):
        mapped.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(cleaner_module, "map_file", counting)
    clock = MockTime()
    log = open_log(tmp_path, clock, segment_bytes=2000)
    try:
        for i in range(150):
            append(log, i % 7, i)
        sources = [s.log.path.name for s in list(log.segments)[:-1]]
        assert len(sources) > 2
        cleaner = Cleaner(SkimpyOffsetMap(MAP_MEMORY), clock)
        cleaner.do_clean(LogToClean(TP, log, 0, log.active_segment.base_offset), clock.milliseconds())
        assert sorted(mapped) == sorted(sources)
        assert cleaner._runs._held == {} and cleaner._runs._held_bytes == 0
        active_base = log.active_segment.base_offset
        kept = [(r.offset, int(r.key)) for b in stored_batches(log) for r in b if r.offset < active_base]
        assert kept == sorted((max(i for i in range(active_base) if i % 7 == k), k) for k in range(7))
    finally:
        log.close()


def test_start_writeback_asks_for_whole_written_pages_only(tmp_path, monkeypatch):
    """The cleaner starts the writeback of what it wrote while it goes on: the pages holding the bytes but the last
    one, which the next append writes into; nothing once the file is closed or where the call does not exist."""
    from kafkalog.storage import file_records as file_records_module
    from kafkalog.storage.file_records import FileRecords

    calls = []
    monkeypatch.setattr(file_records_module, "_sync_file_range", lambda fd, start, n, flags: calls.append((start, n)))
    page = file_records_module._PAGE
    records = FileRecords.open(tmp_path / "00000000000000000000.log")
    records.append(b"x" * (3 * page + 100))
    records.start_writeback(0, 3 * page + 100)
    records.start_writeback(page + 5, page + 7)  # within the page the next append writes into: nothing to ask
    records.start_writeback(page + 5, 3 * page + 100)
    records.close()
    records.start_writeback(0, 3 * page)
    monkeypatch.setattr(file_records_module, "_sync_file_range", None)
    assert calls == [(0, 3 * page), (page, 2 * page)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_start_writeback_on_linux_runs_the_real_call(tmp_path):
    from kafkalog.storage import file_records as file_records_module
    from kafkalog.storage.file_records import FileRecords

    assert file_records_module._sync_file_range is not None
    records = FileRecords.open(tmp_path / "00000000000000000000.log")
    try:
        records.append(b"y" * (4 * file_records_module._PAGE))
        records.start_writeback(0, records.size)
        records.flush()
        assert (tmp_path / "00000000000000000000.log").read_bytes() == b"y" * records.size
    finally:
        records.close()
