"""explain_retention: forecasts stated in advance, then checked against Log.delete_old_segments under MockTime.

Every scenario builds a real log, asks explain_retention what will happen and when, then plays the broker's
part (retention checks every interval on the MockTime scheduler, the log's own delayed file deletes) and
asserts the files vanish exactly when the explanation said. One record = one 150-byte batch (asserted).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from kafkalog.retention import (
    RetentionExplanation,
    SegmentRetention,
    explain_retention,
    worst_case_lifetime_ms,
)
from kafkalog.storage import Log
from kafkalog.storage.retention import RULE_LOG_START, RULE_SIZE, RULE_TIME
from kafkalog.testing import MockTime

T0 = 1_700_000_000_000
KEY = b"key-00000"
VALUE = b"v" * 71
BATCH = 150  # one (KEY, VALUE, ts) record in its own uncompressed v2 batch
MINUTE = 60_000


def open_log(tmp_path: Path, config: dict, clock: MockTime, **kwargs) -> Log:
    return Log.open(tmp_path / "t-0", config, clock=clock, **kwargs)


def put(log: Log, ts: int, n: int = 1) -> None:
    """Append ``n`` one-record batches timestamped ``ts``."""
    for _ in range(n):
        log.append([(KEY, VALUE, ts)])


def segments_of(log: Log, counts: list[int], timestamps: list[int]) -> None:
    """Segments holding ``counts[i]`` records timestamped ``timestamps[i]`` (rolled by hand)."""
    for i, (n, ts) in enumerate(zip(counts, timestamps, strict=True)):
        if i:
            log.roll()
        put(log, ts, n)


def file_state(log_dir: Path, base: int) -> str:
    """'live' (.log), 'deleted' (.log.deleted, waiting for file.delete.delay.ms) or 'gone'."""
    log_file = log_dir / f"{base:020d}.log"
    if log_file.exists():
        return "live"
    if Path(f"{log_file}.deleted").exists():
        return "deleted"
    assert not any(p.name.startswith(f"{base:020d}.") and p.suffix != ".snapshot" for p in log_dir.iterdir())
    return "gone"


def explain(log: Log, clock: MockTime, next_check_ms: int, interval: int = 300_000) -> RetentionExplanation:
    return explain_retention(log, now_ms=clock.milliseconds(), check_interval_ms=interval, next_check_ms=next_check_ms)


def by_base(explanation: RetentionExplanation) -> dict[int, SegmentRetention]:
    return {s.base_offset: s for s in explanation.segments}


class Producer:
    """One record every ``every_ms`` (timestamped with the clock), interleaved with due scheduler tasks."""

    def __init__(self, log: Log, clock: MockTime, every_ms: int) -> None:
        self.log, self.clock, self.every_ms = log, clock, every_ms
        self.next_ms = clock.milliseconds()

    def run_until(self, target_ms: int) -> None:
        while self.next_ms <= target_ms:
            self.clock.set_ms(self.next_ms)  # runs the checks and file deletes due by then, then appends
            put(self.log, self.next_ms)
            self.next_ms += self.every_ms
        self.clock.set_ms(target_ms)


def test_one_record_is_150_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, {}, MockTime(T0))
    put(log, T0)
    assert log.size == BATCH


def test_oldest_record_lives_until_largest_timestamp_expires_plus_check_plus_delay(tmp_path: Path) -> None:
    clock = MockTime(T0)
    config = {"retention.ms": 600_000, "segment.bytes": 16_384, "file.delete.delay.ms": 60_000}
    log = open_log(tmp_path, config, clock)
    log_dir = tmp_path / "t-0"
    # The broker: first retention check after log.initial.task.delay.ms = 30 s, then every 5 minutes.
    clock.scheduler.schedule("kafka-log-retention", log.delete_old_segments, 30_000, 300_000)
    producer = Producer(log, clock, 5_000)
    # By hand: 16384 // 150 = 109 batches fit (16350 bytes); the 110th rolls. Segment 0 = offsets 0..108,
    # timestamps T0 .. T0+108*5000 = T0+540000: its LARGEST timestamp is T0+540000, not T0.
    # Time rule: now − (T0+540000) > 600000  ⇔  now ≥ T0+1140001.
    # Checks at T0+30000+k*300000: …, 930000, 1230000 → the first at or after 1140001 is T0+1230000.
    # Its files disappear file.delete.delay.ms later: T0+1290000. The record at offset 0 (timestamp T0)
    # lives 1290000 ms = 21.5 minutes under retention.ms = 10 minutes.
    producer.run_until(T0 + 600_000)  # offsets 0..120; segment 1 (base 109) is active
    explanation = explain(log, clock, next_check_ms=T0 + 630_000)
    assert [s.base_offset for s in explanation.segments] == [0, 109]
    first = explanation.segments[0]
    assert (first.next_offset, first.size_bytes, first.is_active) == (109, 109 * BATCH, False)
    assert (first.largest_timestamp, first.largest_timestamp_source) == (T0 + 540_000, "records")
    assert (first.rule, first.deletable_now) == (RULE_TIME, False)
    assert first.eligible_at_ms == T0 + 1_140_001
    assert first.deleted_at_ms == T0 + 1_230_000
    assert first.files_gone_at_ms == T0 + 1_290_000
    assert "qualifies at 1700001140001" in first.reason
    active = explanation.segments[1]
    assert active.is_active and "active segment" in active.reason and "postpone" in active.reason
    assert active.rolls_by_time_at_ms == T0 + 545_000 + 604_800_000 + 1  # default segment.ms = 7 days
    assert explanation.next_deletion_ms == T0 + 1_230_000
    assert explanation.total_bytes == log.size and explanation.high_watermark == explanation.log_end_offset == 121
    assert explanation.worst_case_lifetime_ms == 604_800_000 + 600_000 + 300_000 + 60_000

    producer.run_until(T0 + 1_229_999)
    assert file_state(log_dir, 0) == "live"
    late = explain(log, clock, next_check_ms=T0 + 1_230_000)
    assert late.segments[0].deletable_now and late.segments[0].deleted_at_ms == T0 + 1_230_000
    assert late.segments[0].reason.startswith("deletable now: retention.ms")
    producer.run_until(T0 + 1_230_000)
    assert file_state(log_dir, 0) == "deleted"
    assert log.log_start_offset == 109
    producer.run_until(T0 + 1_289_999)
    assert file_state(log_dir, 0) == "deleted"
    producer.run_until(T0 + 1_290_000)
    assert file_state(log_dir, 0) == "gone"
    assert file_state(log_dir, 109) == "live"  # segment 1: largest T0+1085000 → not before T0+1685001


def test_slow_topic_keeps_its_active_segment_alive_until_segment_ms_rolls_it(tmp_path: Path) -> None:
    clock = MockTime(T0)
    config = {"retention.ms": 600_000, "segment.ms": 3_600_000, "file.delete.delay.ms": 60_000}
    log = open_log(tmp_path, config, clock)
    log_dir = tmp_path / "t-0"
    clock.scheduler.schedule("kafka-log-retention", log.delete_old_segments, 300_000, 300_000)
    producer = Producer(log, clock, 300_000)  # one record every 5 minutes
    # By hand: a record joins the segment unless its timestamp − the first batch's (T0) > segment.ms, so the
    # records at T0 .. T0+60min (13 of them) share segment 0 and the one at T0+65min rolls it.
    # While it is active, every new record raises its largest timestamp: it never qualifies.
    producer.run_until(T0 + 30 * MINUTE)
    early = explain(log, clock, next_check_ms=T0 + 30 * MINUTE)
    (active,) = early.segments
    assert active.is_active and active.rolls_by_time_at_ms == T0 + 3_600_001
    # Only if the topic went idle now would it go at largest + retention + 1 (the check rolls first).
    assert active.eligible_at_ms == T0 + 30 * MINUTE + 600_001
    assert "records appended before it rolls" in active.reason
    producer.run_until(T0 + 60 * MINUTE)
    assert file_state(log_dir, 0) == "live" and log.segments.base_offsets == [0]
    producer.run_until(T0 + 65 * MINUTE)
    assert log.segments.base_offsets == [0, 13]
    # Now segment 0 is closed at largest timestamp T0+3600000 → qualifies at T0+4200001; checks every
    # 300000 from T0: the first at or after that is T0+4500000; files gone at T0+4560000.
    # The record at offset 0 lives 4560000 ms = 76 minutes = segment.ms + retention.ms + interval + delay,
    # exactly the worst case (the largest timestamp sits exactly segment.ms after the first one, and it
    # qualifies 1 ms after a check).
    explanation = explain(log, clock, next_check_ms=T0 + 70 * MINUTE)
    first = by_base(explanation)[0]
    assert (first.eligible_at_ms, first.deleted_at_ms, first.files_gone_at_ms) == (
        T0 + 4_200_001,
        T0 + 4_500_000,
        T0 + 4_560_000,
    )
    assert worst_case_lifetime_ms(log.config, 300_000) == 4_560_000
    producer.run_until(T0 + 4_499_999)
    assert file_state(log_dir, 0) == "live"
    producer.run_until(T0 + 4_500_000)
    assert file_state(log_dir, 0) == "deleted"
    producer.run_until(T0 + 4_559_999)
    assert file_state(log_dir, 0) == "deleted"
    producer.run_until(T0 + 4_560_000)
    assert file_state(log_dir, 0) == "gone"


def test_idle_active_segment_goes_without_waiting_for_a_roll(tmp_path: Path) -> None:
    clock = MockTime(T0)
    log = open_log(tmp_path, {"retention.ms": 600_000, "file.delete.delay.ms": 60_000}, clock)
    log_dir = tmp_path / "t-0"
    clock.scheduler.schedule("kafka-log-retention", log.delete_old_segments, 300_000, 300_000)
    for ts in (T0, T0 + 5_000, T0 + 10_000):
        clock.set_ms(ts)
        put(log, ts)
    # Largest timestamp T0+10000 → qualifies at T0+610001; checks at T0+300000k → T0+900000; gone T0+960000.
    # segment.ms (7 days) does not matter: when every segment qualifies, the check rolls an empty one first.
    (seg,) = explain(log, clock, next_check_ms=T0 + 300_000).segments
    assert seg.is_active and not seg.deletable_now and seg.rule == RULE_TIME
    assert (seg.eligible_at_ms, seg.deleted_at_ms, seg.files_gone_at_ms) == (T0 + 610_001, T0 + 900_000, T0 + 960_000)
    assert "rolls a new empty segment" in seg.reason
    clock.set_ms(T0 + 899_999)
    assert log.segments.base_offsets == [0]
    now = explain(log, clock, next_check_ms=T0 + 900_000)
    assert now.segments[0].deletable_now and "first rolls a new empty segment at offset 3" in now.segments[0].reason
    clock.set_ms(T0 + 900_000)
    assert log.segments.base_offsets == [3] and log.log_start_offset == 3
    assert file_state(log_dir, 0) == "deleted"
    clock.set_ms(T0 + 960_000)
    assert file_state(log_dir, 0) == "gone"
    (empty,) = explain(log, clock, next_check_ms=T0 + 1_200_000).segments
    assert empty.reason.startswith("kept: the empty active segment") and empty.eligible_at_ms is None


def test_infinite_retention(tmp_path: Path) -> None:
    clock = MockTime(T0)
    log = open_log(tmp_path, {"retention.ms": -1}, clock)
    segments_of(log, [2, 2, 1], [T0 - 10**10, T0 - 10**9, T0 - 10**8])
    explanation = explain(log, clock, next_check_ms=T0)
    for seg in explanation.segments:
        assert seg.reason.startswith("kept: retention.ms=-1 (infinite)")
        assert "retention.bytes=-1 (unlimited)" in seg.reason
        assert (seg.rule, seg.deletable_now, seg.eligible_at_ms, seg.deleted_at_ms) == (None, False, None, None)
    assert explanation.next_deletion_ms is None and explanation.worst_case_lifetime_ms is None
    assert "No deletion is due" in explanation.summary
    assert log.delete_old_segments() == 0


def test_above_high_watermark(tmp_path: Path) -> None:
    clock = MockTime(T0)
    log = open_log(tmp_path, {"retention.ms": 600_000}, clock, auto_high_watermark=False)
    segments_of(log, [3, 3, 3], [T0 - 3_600_000] * 3)  # bases 0, 3, 6; all an hour old
    log.update_high_watermark(5)
    segs = by_base(explain(log, clock, next_check_ms=T0))
    assert segs[0].deletable_now and segs[0].rule == RULE_TIME and segs[0].deleted_at_ms == T0
    assert segs[3].reason.startswith("kept: above the high watermark (HW 5 < next segment 6)")
    assert segs[6].reason.startswith("kept: above the high watermark (HW 5 < log end 9)")
    assert segs[3].eligible_at_ms is None and segs[6].deleted_at_ms is None and segs[6].rule is None
    assert log.delete_old_segments() == 1
    assert log.segments.base_offsets == [3, 6]
    log.update_high_watermark(9)
    segs = by_base(explain(log, clock, next_check_ms=T0))
    assert segs[3].deletable_now and segs[6].deletable_now
    assert segs[6].eligible_at_ms == segs[3].eligible_at_ms == T0 - 3_600_000 + 600_001
    assert log.delete_old_segments() == 2
    assert log.segments.base_offsets == [9]


def test_future_timestamp_pins_its_segment_and_every_later_one(tmp_path: Path) -> None:
    clock = MockTime(T0)
    log = open_log(tmp_path, {"retention.ms": 600_000}, clock)
    day = 86_400_000
    # Segments 0, 1, 2, 3 (active): an hour old, ONE DAY IN THE FUTURE, an hour old, an hour old.
    segments_of(log, [1, 1, 1, 1], [T0 - 3_600_000, T0 + day, T0 - 3_600_000, T0 - 3_600_000])
    explanation = explain(log, clock, next_check_ms=T0 + 60_000)
    segs = by_base(explanation)
    assert segs[0].deletable_now and segs[0].deleted_at_ms == T0 + 60_000
    pinned_until = T0 + day + 600_001
    assert "in the future" in segs[1].reason and segs[1].eligible_at_ms == pinned_until
    for base in (2, 3):
        assert segs[base].reason.startswith("kept: an older segment (offset 1) is kept (its largest timestamp")
        assert "on its own this one is past retention.ms" in segs[base].reason
        assert "the walk stops at the first kept segment" in segs[base].reason
        assert segs[base].eligible_at_ms == pinned_until
    # Checks every 5 minutes from T0+60000: the first at or after T0+day+600001.
    expected_check = T0 + 60_000 + -(-(day + 600_001 - 60_000) // 300_000) * 300_000
    assert segs[1].deleted_at_ms == segs[3].deleted_at_ms == expected_check == T0 + day + 660_000
    assert explanation.next_deletion_ms == T0 + 60_000
    clock.set_ms(T0 + 60_000)
    assert log.delete_old_segments() == 1
    clock.set_ms(pinned_until - 1)
    assert log.delete_old_segments() == 0
    clock.set_ms(pinned_until)
    assert log.delete_old_segments() == 3  # 1, 2 and the active 3 (after a roll to 4)
    assert log.segments.base_offsets == [4]


def test_size_retention_deletes_oldest_first(tmp_path: Path) -> None:
    clock = MockTime(T0)
    log = open_log(tmp_path, {"retention.ms": -1, "retention.bytes": 450}, clock)
    segments_of(log, [2, 2, 1], [T0, T0, T0])  # 300 + 300 + 150 = 750 bytes
    # excess = 750 − 450 = 300: segment 0 (300) fits → deleted, excess 0; segment 2 (300) does not → stop.
    segs = by_base(explain(log, clock, next_check_ms=T0))
    assert (segs[0].deletable_now, segs[0].rule) == (True, RULE_SIZE)
    assert "300 over retention.bytes=450" in segs[0].reason
    assert not segs[2].deletable_now and segs[2].rule is None
    # After this check the log is 450 bytes; segment 2 goes once it exceeds 450 by 300: 300 more bytes.
    assert "must grow by 300 more bytes" in segs[2].reason
    assert log.delete_old_segments() == 1
    assert log.segments.base_offsets == [2, 4]
    put(log, T0)  # +150: not enough
    assert not by_base(explain(log, clock, next_check_ms=T0))[2].deletable_now
    assert log.delete_old_segments() == 0
    put(log, T0)  # +300
    assert by_base(explain(log, clock, next_check_ms=T0))[2].deletable_now
    assert log.delete_old_segments() == 1
    assert log.segments.base_offsets == [4]


def test_delete_records_frees_whole_segments_below_the_log_start(tmp_path: Path) -> None:
    clock = MockTime(T0)
    log = open_log(tmp_path, {"retention.ms": -1}, clock)
    segments_of(log, [3, 3, 3], [T0, T0, T0])  # bases 0, 3, 6
    log.delete_records(7)
    segs = by_base(explain(log, clock, next_check_ms=T0 + 1_000))
    for seg in (segs[0], segs[3]):
        assert (seg.deletable_now, seg.rule, seg.deleted_at_ms) == (True, RULE_LOG_START, T0 + 1_000)
        assert "the log start offset 7" in seg.reason
    assert not segs[6].deletable_now and "the log start offset 7 is inside it" in segs[6].reason
    assert log.delete_old_segments() == 2
    assert log.segments.base_offsets == [6]


def test_compact_only_policy_deletes_by_log_start_only(tmp_path: Path) -> None:
    clock = MockTime(T0)
    log = open_log(tmp_path, {"cleanup.policy": "compact", "retention.ms": 1_000, "retention.bytes": 0}, clock)
    segments_of(log, [3, 3, 3], [T0 - 3_600_000] * 3)
    explanation = explain(log, clock, next_check_ms=T0)
    assert explanation.policy == "compact"
    for seg in explanation.segments:
        assert seg.reason.startswith("kept: cleanup.policy=compact has no 'delete'")
        assert (seg.deletable_now, seg.eligible_at_ms) == (False, None)
    assert explanation.next_deletion_ms is None
    assert log.delete_old_segments() == 0
    log.delete_records(6)
    segs = by_base(explain(log, clock, next_check_ms=T0))
    assert [segs[b].rule for b in (0, 3, 6)] == [RULE_LOG_START, RULE_LOG_START, None]
    assert "never the last one" in segs[6].reason
    assert log.delete_old_segments() == 2


def test_segment_without_timestamps_uses_file_mtime(tmp_path: Path) -> None:
    clock = MockTime(T0)
    log = open_log(tmp_path, {"retention.ms": 600_000}, clock)
    segments_of(log, [1, 1], [-1, T0])
    mtime = T0 - 500_000
    os.utime(tmp_path / "t-0" / f"{0:020d}.log", ns=(mtime * 1_000_000, mtime * 1_000_000))
    seg = explain(log, clock, next_check_ms=T0).segments[0]
    assert (seg.largest_timestamp, seg.largest_timestamp_source) == (mtime, "mtime")
    assert seg.eligible_at_ms == mtime + 600_001 and seg.deleted_at_ms == T0 + 300_000


def test_explaining_does_not_change_the_log(tmp_path: Path) -> None:
    clock = MockTime(T0)
    log = open_log(tmp_path, {"retention.ms": 1_000, "retention.bytes": 0}, clock)
    segments_of(log, [2, 2], [T0 - 5_000, T0 - 5_000])
    before = (log.segments.base_offsets, log.log_start_offset, log.size, sorted(os.listdir(tmp_path / "t-0")))
    explanation = explain(log, clock, next_check_ms=T0)
    assert all(s.deletable_now for s in explanation.segments)
    assert (log.segments.base_offsets, log.log_start_offset, log.size, sorted(os.listdir(tmp_path / "t-0"))) == before
    with pytest.raises(ValueError):
        explain_retention(log, now_ms=T0, check_interval_ms=0, next_check_ms=T0)
    with pytest.raises(ValueError):
        explain_retention(log, now_ms=T0, check_interval_ms=1, next_check_ms=T0 - 1)


@pytest.mark.parametrize("seed", range(40))
def test_forecast_matches_the_log_check_by_check(tmp_path: Path, seed: int) -> None:
    """Random logs: every segment leaves at exactly the check explain_retention names, or never."""
    rng = random.Random(seed)
    clock = MockTime(T0)
    retention = rng.choice([-1, 60_000, 600_000])
    config = {
        "retention.ms": retention,
        "retention.bytes": rng.choice([-1, 0, 300, 600, 10_000]),
        "cleanup.policy": rng.choice(["delete", "delete", "compact", "compact,delete"]),
        "file.delete.delay.ms": 0,
    }
    log = open_log(tmp_path, config, clock, auto_high_watermark=False)
    n = rng.randint(1, 5)
    for i in range(n):
        if i:
            log.roll()
        for _ in range(rng.randint(0 if i == n - 1 else 1, 3)):
            put(log, T0 + rng.randint(-1_200_000, 900_000))
    log.update_high_watermark(rng.randint(0, log.log_end_offset) if rng.random() < 0.4 else log.log_end_offset)
    if rng.random() < 0.4:
        log.delete_records(rng.randint(0, log.high_watermark))
    interval = rng.choice([60_000, 300_000])
    next_check = T0 + rng.randint(0, interval)
    explanation = explain(log, clock, next_check_ms=next_check, interval=interval)
    expected = {s.base_offset: s.deleted_at_ms for s in explanation.segments}
    assert {s.base_offset for s in explanation.segments if s.deletable_now} <= {
        b for b, at in expected.items() if at == next_check
    }
    seen: dict[int, int | None] = dict.fromkeys(expected)
    check = next_check
    horizon = max((t for t in expected.values() if t is not None), default=next_check) + 3 * interval
    while check <= horizon:
        clock.set_ms(check)
        present = set(log.segments.base_offsets)
        log.delete_old_segments()
        for base in present - set(log.segments.base_offsets):
            if base in seen:
                seen[base] = check
        check += interval
    assert seen == expected, explanation.summary
