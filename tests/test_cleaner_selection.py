"""Which log the cleaner picks, what range it cleans, and the cleaner's bookkeeping (spec section 12).

Ports the behaviours Kafka's LogCleanerManagerTest checks: the dirty ratio and min.cleanable.dirty.ratio, the bounds
of the dirty range (active segment, last stable offset, min.compaction.lag.ms), max.compaction.lag.ms, checkpoint
resets, the cleaner-offset-checkpoint files, uncleanable partitions, retention of compact,delete logs, the Throttler,
the metrics and the scheduled cleaner task. Sizes and offsets expected here are read from the segments the test wrote
(or worked out from the records), never from the cleaner's own results.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kafkalog.cleaner.policy import LogToClean, cleanable_offsets, max_compaction_delay
from kafkalog.cleaner.stats import Throttler
from kafkalog.manager import LogManager, TopicPartition
from kafkalog.record import ControlRecordType, RecordBatchBuilder
from kafkalog.storage import Log
from kafkalog.testing import MockTime

START = 1_700_000_000_000
CHECKPOINT = "cleaner-offset-checkpoint"
NO_THREAD = {"log.cleaner.enable": "false"}
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1024"}


@pytest.fixture
def clock() -> MockTime:
    return MockTime(start_ms=START)


@pytest.fixture
def manager(tmp_path: Path, clock: MockTime):
    with LogManager(tmp_path, NO_THREAD, clock=clock) as m:
        yield m


def fill(manager: LogManager, topic: str, segments: int, keys: int = 5) -> None:
    """Produce one-record batches over ``keys`` keys until the log has ``segments`` segments."""
    log = manager.get_log(topic)
    while len(log.segments) < segments:
        offset = log.log_end_offset
        manager.produce(topic, b"value-%06d" % offset, key=b"key-%d" % (offset % keys), partition=0)


def checkpoint_text(directory: Path) -> str:
    return (directory / CHECKPOINT).read_text()


def checkpoint_entries(directory: Path) -> dict[tuple[str, int], int]:
    """Parse Kafka's offset checkpoint format by hand: version, count, then "topic partition offset" lines."""
    lines = checkpoint_text(directory).splitlines()
    if not lines:
        return {}  # Kafka creates the file empty and reads an empty file as no entries
    assert lines[0] == "0"
    count = int(lines[1])
    entries = [line.split(" ") for line in lines[2:]]
    assert len(entries) == count
    return {(t, int(p)): int(o) for t, p, o in entries}


def write_checkpoint(directory: Path, entries: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for (t, p), o in entries.items()]
    (directory / CHECKPOINT).write_text("\n".join(lines) + "\n")


def sizes_below(log: Log, offset: int) -> int:
    return sum(s.size for s in log.segments if s.base_offset < offset)


def cleaned_topics(result) -> list[str]:
    return [r.topic for r in result.cleaned]


# ----- the dirty ratio ---------------------------------------------------------------------------------------------


def test_first_clean_has_ratio_one_and_cleans_up_to_the_active_segment(manager, tmp_path):
    manager.create_topic("t", config=COMPACT)
    fill(manager, "t", 4)
    log = manager.get_log("t")
    active = log.active_segment.base_offset
    assert checkpoint_text(tmp_path) == ""  # created empty at startup, as Kafka's CheckpointFile does
    result = manager.clean_once()
    assert cleaned_topics(result) == ["t"]
    (cleaned,) = result.cleaned
    assert cleaned.cleanable_ratio == 1.0  # nothing clean yet: cleanable / (0 + cleanable)
    assert (cleaned.first_dirty_offset, cleaned.end_offset, cleaned.error) == (0, active, None)
    assert checkpoint_entries(tmp_path) == {("t", 0): active}
    assert checkpoint_text(tmp_path) == f"0\n1\nt 0 {active}\n"
    # Nothing dirty is left below the active segment: the next pass has nothing to do.
    assert manager.clean_once().cleaned == []


def test_dirty_ratio_and_min_cleanable_dirty_ratio(manager, tmp_path):
    manager.create_topic("t", config=COMPACT)
    fill(manager, "t", 4)
    manager.clean_once()
    log = manager.get_log("t")
    first_dirty = checkpoint_entries(tmp_path)[("t", 0)]
    fill(manager, "t", len(log.segments) + 2)
    active = log.active_segment.base_offset
    clean_bytes = sizes_below(log, first_dirty)
    cleanable_bytes = sizes_below(log, active) - clean_bytes
    ratio = cleanable_bytes / (clean_bytes + cleanable_bytes)
    assert 0 < ratio < 1
    # The log must be strictly dirtier than min.cleanable.dirty.ratio: at exactly the ratio it waits.
    manager.alter_topic_config("t", {"min.cleanable.dirty.ratio": repr(ratio)})
    assert manager.clean_once().cleaned == []
    assert checkpoint_entries(tmp_path) == {("t", 0): first_dirty}
    manager.alter_topic_config("t", {"min.cleanable.dirty.ratio": repr(ratio * 0.999)})
    (cleaned,) = manager.clean_once().cleaned
    assert cleaned.cleanable_ratio == pytest.approx(ratio)
    assert (cleaned.first_dirty_offset, cleaned.end_offset) == (first_dirty, active)
    assert checkpoint_entries(tmp_path) == {("t", 0): active}
    assert manager.cleaner.metrics()["max-dirty-percent"] == 0  # the last look found nothing dirty


def test_log_to_clean_counts_the_segment_holding_the_first_dirty_offset_as_cleanable(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", {**COMPACT, "segment.bytes": "200"}, clock)
    for _ in range(12):
        log.append([(b"1", b"\0" * 25)])  # 94-byte batches: two per segment
    segments = list(log.segments)
    assert [s.base_offset for s in segments] == [0, 2, 4, 6, 8, 10]
    mid = 5  # inside the third segment: it counts as clean and as cleanable
    to_clean = LogToClean(TopicPartition("t", 0), log, mid, segments[4].base_offset)
    assert to_clean.clean_bytes == sum(s.size for s in segments[:3])
    assert to_clean.cleanable_bytes == sum(s.size for s in segments[2:4])


# ----- the bounds of the dirty range --------------------------------------------------------------------------------


def test_active_segment_bounds_the_dirty_range(manager):
    manager.create_topic("t", config=COMPACT)
    fill(manager, "t", 3)
    log = manager.get_log("t")
    for _ in range(3):  # duplicates inside the active segment
        manager.produce("t", b"again", key=b"key-0", partition=0)
    active = log.active_segment
    offsets = cleanable_offsets(log, None, START)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (0, active.base_offset)
    in_active = [r.offset for r in log.records(active.base_offset)]
    manager.clean_once()
    assert [r.offset for r in log.records(active.base_offset)] == in_active  # untouched


def test_cleanable_offsets_with_no_checkpoint_start_at_the_log_start(tmp_path, clock):
    # Kafka's testCleanableOffsetsForNone.
    log = Log.open(tmp_path / "t-0", COMPACT, clock)
    while len(log.segments) < 5:
        log.append([(b"%d" % log.log_end_offset, b"v", START)])
    log.maybe_increment_log_start_offset(log.segments.base_offsets[2])
    offsets = cleanable_offsets(log, None, clock.milliseconds())
    assert offsets.first_dirty_offset == log.segments.base_offsets[2]
    assert offsets.first_uncleanable_dirty_offset == log.active_segment.base_offset
    assert offsets.force_update_checkpoint is False


def test_min_compaction_lag_holds_back_recent_segments(tmp_path, clock):
    # Kafka's testCleanableOffsetsForTime and testCleanableOffsetsForShortTime.
    lag = 60 * 60 * 1000
    log = Log.open(tmp_path / "t-0", {**COMPACT, "min.compaction.lag.ms": str(lag)}, clock)
    t0 = clock.milliseconds()
    while len(log.segments) < 4:
        log.append([(b"%d" % log.log_end_offset, b"v", t0)])
    active_at_t0 = log.active_segment.base_offset
    offsets = cleanable_offsets(log, 0, clock.milliseconds())
    assert offsets.first_uncleanable_dirty_offset == 0  # every segment is younger than the lag
    clock.advance(lag + 1)
    t1 = clock.milliseconds()
    while len(log.segments) < 8:
        log.append([(b"%d" % log.log_end_offset, b"v", t1)])
    offsets = cleanable_offsets(log, 0, clock.milliseconds())
    assert offsets.first_dirty_offset == 0
    assert offsets.first_uncleanable_dirty_offset == active_at_t0  # the first segment written at t1
    clock.advance(lag + 1)
    offsets = cleanable_offsets(log, 0, clock.milliseconds())
    assert offsets.first_uncleanable_dirty_offset == log.active_segment.base_offset


def test_min_compaction_lag_in_a_cleaning_pass(manager, tmp_path, clock):
    lag = 10_000
    manager.create_topic("t", config={**COMPACT, "min.compaction.lag.ms": str(lag)})
    fill(manager, "t", 3)
    log = manager.get_log("t")
    clock.advance(lag + 1)
    recent = log.active_segment.base_offset  # the segments from here on are younger than the lag
    fill(manager, "t", 5)
    (cleaned,) = manager.clean_once().cleaned
    assert cleaned.end_offset == recent
    assert checkpoint_entries(tmp_path) == {("t", 0): recent}


def test_undecided_transaction_is_not_cleanable(tmp_path, clock):
    # Kafka's testUndecidedTransactionalDataNotCleanable: the last stable offset bounds the dirty range.
    lag = 60 * 60 * 1000
    config = {**COMPACT, "min.compaction.lag.ms": str(lag)}
    log = Log.open(tmp_path / "t-0", config, clock, auto_high_watermark=False)
    builder = RecordBatchBuilder(producer_id=15, producer_epoch=0, base_sequence=0, is_transactional=True)
    builder.append(b"1", b"a", clock.milliseconds())
    builder.append(b"2", b"b", clock.milliseconds())
    log.append(builder.build())  # 0, 1
    log.roll()
    log.update_high_watermark(3)
    clock.advance(lag + 1)
    offsets = cleanable_offsets(log, 0, clock.milliseconds())
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (0, 0)
    log.append_end_txn_marker(ControlRecordType.ABORT, 15, 0, 15)  # 2
    log.roll()
    log.update_high_watermark(4)
    offsets = cleanable_offsets(log, 0, clock.milliseconds())
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (0, 2)  # the marker's segment
    clock.advance(lag + 1)
    offsets = cleanable_offsets(log, 0, clock.milliseconds())
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (0, 3)


def test_open_transaction_bounds_a_cleaning_pass(manager, tmp_path):
    manager.create_topic("t", config=COMPACT)
    fill(manager, "t", 3)
    log = manager.get_log("t")
    builder = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    builder.append(b"key-1", b"in-txn", START)
    txn_offset = log.append(builder.build()).first_offset
    txn_segment = log.active_segment.base_offset
    fill(manager, "t", 5)
    assert log.last_stable_offset == txn_offset
    (cleaned,) = manager.clean_once().cleaned
    assert cleaned.end_offset == txn_segment  # the base of the segment holding the first unstable offset
    assert checkpoint_entries(tmp_path) == {("t", 0): txn_segment}
    log.append_end_txn_marker(ControlRecordType.COMMIT, 7, 0, 0)
    log.roll()
    manager.alter_topic_config("t", {"min.cleanable.dirty.ratio": "0.01"})
    (cleaned,) = manager.clean_once().cleaned
    assert cleaned.end_offset == log.active_segment.base_offset


def test_max_compaction_lag_forces_a_clean_below_the_ratio(manager, tmp_path, clock):
    manager.create_topic("t", config={**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    fill(manager, "t", 6)
    manager.clean_once()
    log = manager.get_log("t")
    first_dirty = checkpoint_entries(tmp_path)[("t", 0)]
    written_at = clock.milliseconds()
    manager.produce("t", b"late", key=b"key-1", partition=0)
    log.roll()
    lag = 10_000
    manager.alter_topic_config("t", {"min.cleanable.dirty.ratio": "0.9", "max.compaction.lag.ms": str(lag)})
    ratio = (sizes_below(log, log.active_segment.base_offset) - sizes_below(log, first_dirty)) / sizes_below(
        log, log.active_segment.base_offset
    )
    assert ratio < 0.9
    assert max_compaction_delay(log, first_dirty, clock.milliseconds()) == 0
    assert manager.clean_once().cleaned == []
    clock.advance(lag + 5)
    now = clock.milliseconds()
    assert max_compaction_delay(log, first_dirty, now) == (now - lag) - written_at == 5
    (cleaned,) = manager.clean_once().cleaned
    assert cleaned.cleanable_ratio == pytest.approx(ratio)
    assert checkpoint_entries(tmp_path) == {("t", 0): log.active_segment.base_offset}


# ----- choosing between logs ---------------------------------------------------------------------------------------


def test_empty_logs_are_skipped(manager, tmp_path):
    manager.create_topic("empty", config=COMPACT)
    manager.create_topic("rolled-empty", config=COMPACT)
    manager.get_log("rolled-empty").roll()
    manager.create_topic("deleted-only", config={"segment.bytes": "1024"})  # not compacted
    fill(manager, "deleted-only", 3)
    assert manager.cleaner.grab_filthiest_compacted_log() is None
    assert manager.clean_once().cleaned == []
    assert checkpoint_entries(tmp_path) == {}


def test_dirtiest_log_is_cleaned_first(manager, tmp_path):
    for topic in ("a", "b", "c"):
        manager.create_topic(topic, config={**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
        fill(manager, topic, 4)
    manager.clean_once()
    checkpoints = checkpoint_entries(tmp_path)
    ratios = {}
    for topic, extra in (("a", 1), ("b", 4), ("c", 2)):
        log = manager.get_log(topic)
        fill(manager, topic, len(log.segments) + extra)
        first_dirty = checkpoints[(topic, 0)]
        total = sizes_below(log, log.active_segment.base_offset)
        ratios[topic] = (total - sizes_below(log, first_dirty)) / total
    expected = sorted(ratios, key=ratios.get, reverse=True)
    assert expected == ["b", "c", "a"]
    result = manager.clean_once()
    assert cleaned_topics(result) == expected
    assert [r.cleanable_ratio for r in result.cleaned] == pytest.approx([ratios[t] for t in expected])
    assert result.logs_cleaned == 3


# ----- checkpoints ------------------------------------------------------------------------------------------------


def test_checkpoint_below_the_log_start_is_reset_and_rewritten(manager, tmp_path):
    manager.create_topic("t", config={**COMPACT, "min.cleanable.dirty.ratio": "1.0"})  # never dirty enough
    fill(manager, "t", 5)
    log = manager.get_log("t")
    new_start = log.segments.base_offsets[2]
    log.delete_records(new_start)
    write_checkpoint(tmp_path, {("t", 0): 1})
    offsets = cleanable_offsets(log, 1, START)
    assert (offsets.first_dirty_offset, offsets.force_update_checkpoint) == (new_start, True)
    assert manager.clean_once().cleaned == []  # ratio 1.0 is never exceeded, but the checkpoint is still fixed
    assert checkpoint_entries(tmp_path) == {("t", 0): new_start}


def test_checkpoint_above_the_log_end_is_reset_to_the_log_start(manager, tmp_path):
    manager.create_topic("t", config={**COMPACT, "min.cleanable.dirty.ratio": "1.0"})
    fill(manager, "t", 3)
    log = manager.get_log("t")
    write_checkpoint(tmp_path, {("t", 0): log.log_end_offset + 100})
    offsets = cleanable_offsets(log, log.log_end_offset + 100, START)
    assert (offsets.first_dirty_offset, offsets.force_update_checkpoint) == (0, True)
    manager.clean_once()
    assert checkpoint_entries(tmp_path) == {("t", 0): 0}


def test_checkpoint_within_the_log_is_the_first_dirty_offset(manager, tmp_path):
    manager.create_topic("t", config={**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    fill(manager, "t", 5)
    log = manager.get_log("t")
    checkpoint = log.segments.base_offsets[2]
    write_checkpoint(tmp_path, {("t", 0): checkpoint})
    (cleaned,) = manager.clean_once().cleaned
    assert cleaned.first_dirty_offset == checkpoint
    assert cleaned.stats.map_messages_read == log.active_segment.base_offset - checkpoint


def test_checkpoints_go_to_each_partitions_own_log_dir(tmp_path, clock):
    dirs = [tmp_path / "a", tmp_path / "b"]
    with LogManager(dirs, NO_THREAD, clock=clock) as manager:
        manager.create_topic("x", config=COMPACT)
        manager.create_topic("y", config=COMPACT)
        assert manager.describe_topic("x").partitions[0].log_dir == str(dirs[0].resolve())
        assert manager.describe_topic("y").partitions[0].log_dir == str(dirs[1].resolve())
        for directory in dirs:
            assert checkpoint_text(directory) == ""
        fill(manager, "x", 3)
        fill(manager, "y", 4)
        x_end = manager.get_log("x").active_segment.base_offset
        y_end = manager.get_log("y").active_segment.base_offset
        manager.clean_once()
        assert checkpoint_text(dirs[0]) == f"0\n1\nx 0 {x_end}\n"
        assert checkpoint_text(dirs[1]) == f"0\n1\ny 0 {y_end}\n"


def test_delete_topic_removes_its_checkpoint_entry(manager, tmp_path):
    for topic in ("keep", "drop"):
        manager.create_topic(topic, config=COMPACT)
        fill(manager, topic, 3)
    manager.clean_once()
    assert set(checkpoint_entries(tmp_path)) == {("keep", 0), ("drop", 0)}
    keep = checkpoint_entries(tmp_path)[("keep", 0)]
    manager.delete_topic("drop")
    assert checkpoint_entries(tmp_path) == {("keep", 0): keep}


# ----- failures ---------------------------------------------------------------------------------------------------


def test_failing_partition_is_marked_uncleanable_while_others_still_clean(manager, tmp_path):
    for topic in ("good", "bad"):
        manager.create_topic(topic, config=COMPACT)
        fill(manager, topic, 3)
    bad = manager.get_log("bad")
    bad_dirty_bytes = sizes_below(bad, bad.active_segment.base_offset)
    first = bad.segments.first()
    with open(first.log.path, "r+b") as f:  # the first batch claims 100000 records
        f.seek(57)
        f.write(struct.pack(">i", 100_000))
    result = manager.clean_once()
    outcome = {r.topic: r for r in result.cleaned}
    assert outcome["good"].error is None and outcome["bad"].error is not None
    tp = TopicPartition("bad", 0)
    assert manager.cleaner.is_uncleanable(tp)
    assert manager.cleaner.uncleanable_partitions() == {tmp_path.resolve(): {tp}}
    metrics = manager.cleaner.metrics()
    assert metrics["uncleanable-partitions-count"] == {str(tmp_path.resolve()): 1}
    assert metrics["uncleanable-bytes"] == {str(tmp_path.resolve()): bad_dirty_bytes}
    assert set(checkpoint_entries(tmp_path)) == {("good", 0)}
    assert not any(p.name.endswith(".cleaned") for p in bad.directory.iterdir())
    # Later passes leave it alone, and the good log keeps being cleaned.
    fill(manager, "good", len(manager.get_log("good").segments) + 3)
    fill(manager, "bad", len(bad.segments) + 3)
    assert cleaned_topics(manager.clean_once()) == ["good"]


def test_a_log_whose_stats_fail_is_marked_uncleanable(manager, tmp_path, monkeypatch):
    for topic in ("good", "bad"):
        manager.create_topic(topic, config=COMPACT)
        fill(manager, topic, 3)
    bad = manager.get_log("bad")

    def broken(offset):
        raise OSError("disk gone")

    monkeypatch.setattr(bad, "non_active_segments_from", broken)
    assert cleaned_topics(manager.clean_once()) == ["good"]
    assert manager.cleaner.uncleanable_partitions() == {tmp_path.resolve(): {TopicPartition("bad", 0)}}


def test_deleting_an_uncleanable_topic_forgets_it(manager, tmp_path):
    manager.create_topic("bad", config=COMPACT)
    fill(manager, "bad", 3)
    manager.cleaner.mark_uncleanable(TopicPartition("bad", 0))
    assert manager.clean_once().cleaned == []
    manager.delete_topic("bad")
    assert manager.cleaner.uncleanable_partitions() == {}
    assert manager.cleaner.metrics()["uncleanable-partitions-count"] == {}


def test_paused_partitions_are_skipped_until_resumed(manager, tmp_path):
    manager.create_topic("t", config=COMPACT)
    fill(manager, "t", 3)
    tp = TopicPartition("t", 0)
    manager.cleaner.abort_and_pause_cleaning(tp)
    manager.cleaner.abort_and_pause_cleaning(tp)  # pauses nest
    assert manager.clean_once().cleaned == []
    manager.cleaner.resume_cleaning(tp)
    assert manager.clean_once().cleaned == []
    manager.cleaner.resume_cleaning(tp)
    assert cleaned_topics(manager.clean_once()) == ["t"]


def test_truncation_lowers_a_checkpoint_above_the_new_end(manager, tmp_path):
    manager.create_topic("t", config=COMPACT)
    fill(manager, "t", 3)
    manager.clean_once()
    tp = TopicPartition("t", 0)
    end = checkpoint_entries(tmp_path)[("t", 0)]
    manager.cleaner.maybe_truncate_checkpoint(tp, tmp_path.resolve(), end + 5)  # above: unchanged
    assert checkpoint_entries(tmp_path) == {("t", 0): end}
    manager.cleaner.maybe_truncate_checkpoint(tp, tmp_path.resolve(), end - 3)
    assert checkpoint_entries(tmp_path) == {("t", 0): end - 3}


# ----- retention of compacted logs --------------------------------------------------------------------------------


def test_compact_delete_topics_get_retention_from_the_cleaner_pass(manager, clock):
    old = START - 10 * 60 * 1000
    retention = {"retention.ms": "60000", "segment.bytes": "1024"}
    manager.create_topic(
        "cd", config={**retention, "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "1.0"}
    )
    manager.create_topic("d", config={**retention, "cleanup.policy": "delete"})
    for topic in ("cd", "d"):
        log = manager.get_log(topic)
        for i in range(3):
            manager.produce(topic, b"v%d" % i, key=b"k", partition=0, timestamp=old)
            log.roll()
    assert [len(manager.get_log(t).segments) for t in ("cd", "d")] == [4, 4]
    # The retention pass handles only logs that are not compacted...
    assert manager.cleanup_logs() == 3
    assert [len(manager.get_log(t).segments) for t in ("cd", "d")] == [4, 1]
    # ...and the cleaner pass applies retention to the compacted ones (cd's ratio keeps it from being cleaned).
    result = manager.clean_once()
    assert result.cleaned == []
    assert result.segments_deleted == 3
    assert len(manager.get_log("cd").segments) == 1
    assert manager.get_log("cd").log_start_offset == 3


def test_compact_only_topics_keep_old_segments(manager):
    manager.create_topic("c", config={**COMPACT, "retention.ms": "60000", "min.cleanable.dirty.ratio": "1.0"})
    log = manager.get_log("c")
    for i in range(3):
        manager.produce("c", b"v%d" % i, key=b"k%d" % i, partition=0, timestamp=START - 10 * 60 * 1000)
        log.roll()
    assert manager.cleanup_logs() == 0
    assert manager.clean_once().segments_deleted == 0
    assert len(log.segments) == 4


# ----- a full dedupe buffer through the manager --------------------------------------------------------------------


def test_full_dedupe_buffer_checkpoints_where_the_map_stopped(tmp_path, clock):
    # 1 MiB + 1 byte for one thread: 43690 slots, at most int(43690 * 0.9) = 39321 keys. The keys are all unique, so
    # the map fills at offset 39321, in the batch holding 39000..39999; the last offset put (each put moves the
    # map's latest offset, as SkimpyOffsetMap.put does) is 39320, so the next checkpoint is 39321.
    config = {**NO_THREAD, "log.cleaner.dedupe.buffer.size": str(1024 * 1024 + 1)}
    with LogManager(tmp_path, config, clock=clock) as manager:
        manager.create_topic("t", config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
        log = manager.get_log("t")
        for b in range(50):
            log.append([(b"key-%06d" % (b * 1000 + i), b"v") for i in range(1000)])
        log.roll()
        (cleaned,) = manager.clean_once().cleaned
        assert cleaned.end_offset == 39_321 < log.active_segment.base_offset == 50_000
        assert checkpoint_entries(tmp_path) == {("t", 0): 39_321}
        assert cleaned.stats.buffer_utilization == pytest.approx(39_321 / 43_690)
        (cleaned,) = manager.clean_once().cleaned
        assert (cleaned.first_dirty_offset, cleaned.end_offset) == (39_321, 50_000)
        assert checkpoint_entries(tmp_path) == {("t", 0): 50_000}
        assert sum(1 for _ in log.records()) == 50_000  # every key was unique


# ----- throttling -------------------------------------------------------------------------------------------------


def test_throttler_sleeps_to_hold_the_rate(clock):
    throttler = Throttler(1000, clock)  # 1000 bytes/s, checked every 300 ms
    start = clock.milliseconds()
    throttler.maybe_throttle(1000)  # inside the first 300 ms: never a sleep
    assert clock.milliseconds() == start
    clock.advance(301)
    throttler.maybe_throttle(0)  # 1000 bytes in 301 ms = 3322 B/s: sleep 1000 / (1000 / 1000) - 301 = 699 ms
    assert clock.milliseconds() - start == 301 + 699
    assert throttler.slept_ms == 699
    # A new period starts after the sleep: 200 bytes over 301 ms (664 B/s) is under the rate.
    throttler.maybe_throttle(200)
    clock.advance(301)
    throttler.maybe_throttle(0)
    assert throttler.slept_ms == 699


def test_throttler_keeps_the_average_rate_over_periods(clock):
    # Kafka's ThrottlerTest.testThrottleDesiredRate with its 100 ms interval: 4 × 100 units stay under 1000/s.
    throttler = Throttler(1000, clock, check_interval_ms=100)
    t1 = clock.milliseconds()
    throttler.maybe_throttle(100)
    clock.sleep(101)
    throttler.maybe_throttle(100)
    t2 = clock.milliseconds()
    throttler.maybe_throttle(100)
    assert clock.milliseconds() == t2
    clock.sleep(101)
    throttler.maybe_throttle(100)
    t3 = clock.milliseconds()
    assert 4 * 100 * 1000 / (t3 - t1) <= 1000


# ----- metrics and the scheduled task -----------------------------------------------------------------------------


def test_metrics_after_a_pass(tmp_path, clock):
    config = {**NO_THREAD, "log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024)}
    with LogManager(tmp_path, config, clock=clock) as manager:
        metrics = manager.cleaner.metrics()
        assert set(metrics) == {
            "max-buffer-utilization-percent",
            "cleaner-recopy-percent",
            "max-clean-time-secs",
            "max-compaction-delay-secs",
            "DeadThreadCount",
            "uncleanable-partitions-count",
            "uncleanable-bytes",
            "max-dirty-percent",
            "time-since-last-run-ms",
        }
        manager.create_topic("t", config=COMPACT)
        fill(manager, "t", 4, keys=10)
        log = manager.get_log("t")
        active = log.active_segment.base_offset
        read = sizes_below(log, active)
        manager.clean_once()
        written = sizes_below(log, active)
        assert written < read
        clock.advance(500)
        metrics = manager.cleaner.metrics()
        slots = 2 * 1024 * 1024 // 24
        assert metrics["max-buffer-utilization-percent"] == pytest.approx(100 * 10 / slots)
        assert metrics["cleaner-recopy-percent"] == pytest.approx(100 * written / read)
        assert metrics["max-clean-time-secs"] == 0.0  # the MockTime did not move during the clean
        assert metrics["max-compaction-delay-secs"] == 0.0
        assert metrics["DeadThreadCount"] == 0
        assert metrics["uncleanable-partitions-count"] == {}
        assert metrics["uncleanable-bytes"] == {}
        assert metrics["max-dirty-percent"] == 0
        assert metrics["time-since-last-run-ms"] == 500
        # A log that is dirty but under its ratio shows in max-dirty-percent.
        manager.create_topic("lazy", config={**COMPACT, "min.cleanable.dirty.ratio": "1.0"})
        fill(manager, "lazy", 3)
        manager.clean_once()
        assert manager.cleaner.metrics()["max-dirty-percent"] == 100


def test_scheduled_cleaner_runs_after_the_backoff(tmp_path, clock):
    config = {"log.cleaner.enable": "true", "log.cleaner.backoff.ms": "5000"}
    with LogManager(tmp_path, config, clock=clock) as manager:
        manager.create_topic("t", config=COMPACT)
        fill(manager, "t", 3)
        log = manager.get_log("t")
        active = log.active_segment.base_offset
        before = [r.offset for r in log.records()]
        clock.advance(4999)
        assert checkpoint_entries(tmp_path) == {}
        assert [r.offset for r in log.records()] == before
        clock.advance(1)
        assert checkpoint_entries(tmp_path) == {("t", 0): active}
        kept = [r.offset for r in log.records()]
        assert len(kept) < len(before)
        # Nothing left to clean: the next runs, one backoff apart, change nothing until there is new dirt.
        fill(manager, "t", len(log.segments) + 2)
        next_active = log.active_segment.base_offset
        clock.advance(4999)
        assert checkpoint_entries(tmp_path) == {("t", 0): active}
        clock.advance(1)
        assert checkpoint_entries(tmp_path) == {("t", 0): next_active}
