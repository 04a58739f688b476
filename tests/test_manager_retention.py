"""Kafka's retention surprises, played through the LogManager and its own schedule under MockTime (spec 8, 13).

tests/test_retention_explain.py drives a bare Log and schedules the check by hand. Here the broker does it:
``LogManager`` schedules ``kafka-log-retention`` at log.initial.task.delay.ms (30000) after startup and then every
log.retention.check.interval.ms, and each deletion removes the ``.deleted`` files file.delete.delay.ms later
(the topic's value falls back to the broker's log.segment.delete.delay.ms). Every expected millisecond below
comes from Kafka's rules, worked out in the comments, not from kafkalog's output. ``manager.explain_retention``
must give those times in advance, and then the files must go at exactly those times.

The record: key b"sensor-042" (10 bytes) and a 75-byte value, each in its own uncompressed v2 batch:
  record body = attributes 1 + timestampDelta varlong(0) 1 + offsetDelta varint(0) 1
              + keyLength varint(10) 1 + key 10 + valueLength varint(75) 2 (zigzag 150 ≥ 128) + value 75
              + headersCount varint(0) 1 = 92 bytes
  record      = length varint(92) 2 (zigzag 184 ≥ 128) + 92 = 94 bytes
  batch       = RECORD_BATCH_OVERHEAD 61 + 94 = 155 bytes
Roll on size: size > segment.bytes − 155. With segment.bytes=16384: 105 batches (16275 bytes) fit, and the
106th rolls (16275 > 16229). With segment.bytes=465 = 3 × 155: 3 fit (310 > 310 is false), and the 4th rolls.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog import LogManager
from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.retention import RetentionExplanation, SegmentRetention
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from kafkalog.storage.retention import RULE_LOG_START, RULE_SIZE, RULE_TIME
from kafkalog.testing import MockTime

T0 = 1_700_000_000_000
KEY = b"sensor-042"
VALUE = b"r" * 75
BATCH = 155
THREE_PER_SEGMENT = 3 * BATCH  # segment.bytes = 465
BROKER = {"log.retention.check.interval.ms": 300_000, "log.segment.delete.delay.ms": 60_000}
SEVEN_DAYS = 604_800_000  # segment.ms default (log.roll.hours = 168)


@pytest.fixture
def clock() -> MockTime:
    return MockTime(start_ms=T0)


def start(tmp_path: Path, clock: MockTime, broker: dict | None = None) -> LogManager:
    """A started manager at T0: its first retention check runs at T0+30000, then every interval."""
    manager = LogManager(tmp_path / "logs", dict(BROKER if broker is None else broker), clock=clock)
    manager.startup()
    return manager


def produce(manager: LogManager, topic: str, timestamp: int) -> int:
    _, offset = manager.produce(topic, VALUE, key=KEY, timestamp=timestamp)
    return offset


def file_state(manager: LogManager, topic: str, base: int) -> str:
    """'live' (.log), 'deleted' (renamed .deleted, waiting for file.delete.delay.ms) or 'gone'."""
    directory = manager.get_log(topic, 0).directory
    prefix = f"{base:020d}."
    log_file = directory / f"{prefix}log"
    if log_file.exists():
        return "live"
    if Path(f"{log_file}.deleted").exists():
        return "deleted"
    leftovers = [p.name for p in directory.iterdir() if p.name.startswith(prefix)]
    assert leftovers == [], leftovers  # every file of the segment, its producer snapshot included, is gone
    return "gone"


def explain(manager: LogManager, topic: str) -> RetentionExplanation:
    (explanation,) = manager.explain_retention(topic, 0)
    return explanation


def by_base(explanation: RetentionExplanation) -> dict[int, SegmentRetention]:
    return {s.base_offset: s for s in explanation.segments}


def first_offset(manager: LogManager, topic: str) -> int:
    return next(iter(manager.consume(topic, 0))).offset


class Producer:
    """One record every ``every_ms`` from ``first_ms``, timestamped with the clock; moving the clock to each
    send time first runs the broker's due tasks (retention checks, file deletes, checkpoints)."""

    def __init__(self, manager: LogManager, clock: MockTime, topic: str, first_ms: int, every_ms: int) -> None:
        self.manager, self.clock, self.topic, self.every_ms = manager, clock, topic, every_ms
        self.next_ms = first_ms

    def run_until(self, target_ms: int) -> None:
        while self.next_ms <= target_ms:
            self.clock.set_ms(self.next_ms)
            produce(self.manager, self.topic, self.next_ms)
            self.next_ms += self.every_ms
        self.clock.set_ms(target_ms)


def test_one_record_is_a_155_byte_batch(tmp_path: Path, clock: MockTime) -> None:
    manager = start(tmp_path, clock)
    manager.create_topic("size", config={"segment.bytes": THREE_PER_SEGMENT})
    for i in range(4):
        produce(manager, "size", T0 + i)
    log = manager.get_log("size", 0)
    assert log.size == 4 * BATCH
    assert log.segments.base_offsets == [0, 3]  # 3 per segment at segment.bytes=465
    manager.shutdown()


def test_oldest_record_lives_its_worst_case_and_the_files_go_when_explained(tmp_path: Path, clock: MockTime) -> None:
    manager = start(tmp_path, clock)
    manager.create_topic("busy", config={"retention.ms": 600_000, "segment.bytes": 16_384})
    log = manager.get_log("busy", 0)
    # file.delete.delay.ms is not set on the topic: it takes the broker's log.segment.delete.delay.ms.
    assert log.config.file_delete_delay_ms == 60_000
    # Checks at T0+30000 + k×300000. The producer starts at T0+110000, one record every 5 s:
    #   segment 0 = offsets 0..104 (105 batches), timestamps T0+110000 .. T0+110000+104×5000 = T0+630000;
    #   offset 105 (timestamp T0+635000) rolls it.
    # Time rule on the segment's LARGEST timestamp: now − (T0+630000) > 600000  ⇔  now ≥ T0+1230001,
    # 1 ms after the check at T0+1230000 (k=4), so the next check, T0+1530000 (k=5), renames it .deleted,
    # and its files go file.delete.delay.ms later, at T0+1590000.
    # Offset 0 (timestamp T0+110000) lives 1480000 ms = 520000 (filling the segment) + 600000 (retention.ms)
    # + 300000 (a whole check interval) + 60000 (delete delay): the worst case for a segment that fills in
    # 520 s, under retention.ms = 10 minutes.
    producer = Producer(manager, clock, "busy", T0 + 110_000, 5_000)
    producer.run_until(T0 + 700_000)  # offsets 0..118; the check at T0+630000 deleted nothing
    assert log.segments.base_offsets == [0, 105]
    explanation = explain(manager, "busy")
    assert explanation.next_check_ms == T0 + 930_000 and explanation.check_interval_ms == 300_000
    assert explanation.file_delete_delay_ms == 60_000
    first = explanation.segments[0]
    assert (first.base_offset, first.next_offset, first.size_bytes) == (0, 105, 105 * BATCH)
    assert (first.largest_timestamp, first.largest_timestamp_source) == (T0 + 630_000, "records")
    assert (first.rule, first.deletable_now, first.is_active) == (RULE_TIME, False, False)
    assert first.eligible_at_ms == T0 + 1_230_001
    assert first.deleted_at_ms == T0 + 1_530_000
    assert first.files_gone_at_ms == T0 + 1_590_000
    assert explanation.next_deletion_ms == T0 + 1_530_000
    # The general bound: segment.ms (7 days, by default) + retention.ms + interval + delay.
    assert explanation.worst_case_lifetime_ms == SEVEN_DAYS + 600_000 + 300_000 + 60_000
    assert explanation.worst_case_lifetime_ms >= 1_480_000  # the general bound holds for this case

    producer.run_until(T0 + 1_529_999)
    assert file_state(manager, "busy", 0) == "live" and first_offset(manager, "busy") == 0
    producer.run_until(T0 + 1_530_000)
    assert file_state(manager, "busy", 0) == "deleted"
    assert log.log_start_offset == 105 and first_offset(manager, "busy") == 105
    producer.run_until(T0 + 1_589_999)
    assert file_state(manager, "busy", 0) == "deleted"
    producer.run_until(T0 + 1_590_000)
    assert file_state(manager, "busy", 0) == "gone"
    assert T0 + 1_590_000 - (T0 + 110_000) == 520_000 + 600_000 + 300_000 + 60_000
    # Segment 105: offsets 105..209, largest T0+110000+209×5000 = T0+1155000 → not before T0+1755001.
    assert log.segments.base_offsets == [105, 210]
    assert by_base(explain(manager, "busy"))[105].eligible_at_ms == T0 + 1_755_001
    manager.shutdown()


def test_slow_topic_outlives_retention_by_nearly_segment_ms(tmp_path: Path, clock: MockTime) -> None:
    # Checks every minute here (first at T0+30000), and the broker's delete delay of 45 s reaches the topic.
    manager = start(tmp_path, clock, {"log.retention.check.interval.ms": 60_000, "log.segment.delete.delay.ms": 45_000})
    manager.create_topic("slow", config={"retention.ms": 600_000, "segment.ms": 1_800_000})
    log = manager.get_log("slow", 0)
    assert log.config.file_delete_delay_ms == 45_000
    # One record every 4 minutes from T0. Segment 0's roll clock starts at its first batch's timestamp T0;
    # an append rolls it when its timestamp − T0 > segment.ms = 1800000. So T0 .. T0+1680000 (offsets 0..7)
    # join segment 0, and offset 8 (T0+1920000) rolls it. Until then every record raises its largest
    # timestamp, which is never more than 240000 old: the check keeps the whole segment, offset 0 included.
    producer = Producer(manager, clock, "slow", T0, 240_000)
    producer.run_until(T0 + 1_000_000)  # offset 0 is 1000000 ms old, well past retention.ms = 600000
    assert first_offset(manager, "slow") == 0
    (active,) = explain(manager, "slow").segments
    assert active.is_active and active.rolls_by_time_at_ms == T0 + 1_800_001
    assert "active segment" in active.reason and "records appended before it rolls" in active.reason
    producer.run_until(T0 + 1_920_000)
    assert log.segments.base_offsets == [0, 8]
    # Closed with largest timestamp T0+1680000: qualifies at T0+2280001; checks at T0+30000+k×60000, the
    # first at or after that is T0+2310000 (k=38); files gone at T0+2355000.
    first = by_base(explain(manager, "slow"))[0]
    assert (first.largest_timestamp, first.rule) == (T0 + 1_680_000, RULE_TIME)
    assert (first.eligible_at_ms, first.deleted_at_ms, first.files_gone_at_ms) == (
        T0 + 2_280_001,
        T0 + 2_310_000,
        T0 + 2_355_000,
    )
    producer.run_until(T0 + 2_309_999)
    assert file_state(manager, "slow", 0) == "live" and first_offset(manager, "slow") == 0
    producer.run_until(T0 + 2_310_000)
    assert file_state(manager, "slow", 0) == "deleted" and log.log_start_offset == 8
    producer.run_until(T0 + 2_354_999)
    assert file_state(manager, "slow", 0) == "deleted"
    producer.run_until(T0 + 2_355_000)
    assert file_state(manager, "slow", 0) == "gone"
    # Offset 0 (timestamp T0) lived 2355000 ms under retention.ms = 600000: it outlived retention by
    # 1755000 ms = 1680000 (its segment's span: the last send before segment.ms = 1800000 ran out)
    # + 1 (strictly older) + 29999 (waiting for the check) + 45000 (delete delay).
    lifetime = 2_355_000
    assert lifetime - 600_000 == 1_680_000 + 1 + 29_999 + 45_000 == 1_755_000
    manager.shutdown()


def test_future_timestamp_pins_its_segment_and_every_later_one(tmp_path: Path, clock: MockTime) -> None:
    manager = start(tmp_path, clock)
    manager.create_topic("future", config={"retention.ms": 600_000, "segment.bytes": THREE_PER_SEGMENT})
    log = manager.get_log("future", 0)
    two_hours = 7_200_000
    # Offsets 0..11 sent at T0 + 10000×i, timestamped with the clock, except offset 4: T0+7200000 (a producer
    # clock two hours fast; message.timestamp.after.max.ms defaults to Long.MAX, so it is accepted).
    # Segments (3 each): 0 = 0..2, largest T0+20000; 3 = 3..5, largest T0+7200000; 6 = 6..8, largest T0+80000;
    # 9 = 9..11 (active), largest T0+110000. Then the topic goes idle.
    for i in range(12):
        clock.set_ms(T0 + 10_000 * i)
        produce(manager, "future", T0 + two_hours if i == 4 else T0 + 10_000 * i)
    assert log.segments.base_offsets == [0, 3, 6, 9]
    # Segment 0: qualifies at T0+620001 → check T0+630000 → files gone T0+690000.
    # Segment 3: qualifies at T0+7200000+600001 = T0+7800001. Segments 6 and 9 qualify on their own at
    # T0+680001 and T0+710001, but the walk stops at segment 3, so they wait for it: the check at or after
    # T0+7800001 is T0+30000+26×300000 = T0+7830000, which deletes 3, 6 and 9 (the check rolls first, since
    # every segment goes); their files go at T0+7890000.
    segs = by_base(explain(manager, "future"))
    assert (segs[0].eligible_at_ms, segs[0].deleted_at_ms, segs[0].files_gone_at_ms) == (
        T0 + 620_001,
        T0 + 630_000,
        T0 + 690_000,
    )
    for base in (3, 6, 9):
        assert segs[base].rule == RULE_TIME
        assert (segs[base].eligible_at_ms, segs[base].deleted_at_ms, segs[base].files_gone_at_ms) == (
            T0 + 7_800_001,
            T0 + 7_830_000,
            T0 + 7_890_000,
        ), base
    assert "in the future" in segs[3].reason
    clock.set_ms(T0 + 630_000)
    assert file_state(manager, "future", 0) == "deleted" and log.segments.base_offsets == [3, 6, 9]
    clock.set_ms(T0 + 800_000)  # now 6 and 9 are past retention.ms on their own; still pinned
    segs = by_base(explain(manager, "future"))
    assert "in the future" in segs[3].reason and "pins it" in segs[3].reason
    for base in (6, 9):
        assert segs[base].reason.startswith("kept: an older segment (offset 3) is kept")
        assert "the walk stops at the first kept segment" in segs[base].reason
        assert "on its own this one is past retention.ms" in segs[base].reason
    clock.set_ms(T0 + 7_829_999)  # 24 more checks, none deletes anything
    assert log.segments.base_offsets == [3, 6, 9]
    assert [file_state(manager, "future", b) for b in (3, 6, 9)] == ["live"] * 3
    clock.set_ms(T0 + 7_830_000)
    assert log.segments.base_offsets == [12] and log.log_start_offset == 12
    assert [file_state(manager, "future", b) for b in (3, 6, 9)] == ["deleted"] * 3
    clock.set_ms(T0 + 7_889_999)
    assert [file_state(manager, "future", b) for b in (3, 6, 9)] == ["deleted"] * 3
    clock.set_ms(T0 + 7_890_000)
    assert [file_state(manager, "future", b) for b in (0, 3, 6, 9)] == ["gone"] * 4
    manager.shutdown()


def test_size_retention_deletes_oldest_first_then_rolls_before_deleting_the_last(
    tmp_path: Path, clock: MockTime
) -> None:
    manager = start(tmp_path, clock)
    config = {"retention.ms": -1, "retention.bytes": 4 * BATCH, "segment.bytes": THREE_PER_SEGMENT}
    manager.create_topic("sized", config=config)
    log = manager.get_log("sized", 0)
    for i in range(10):  # offsets 0..9 at T0 .. T0+9000: segments 0, 3, 6 (465 bytes each) and 9 (155)
        clock.set_ms(T0 + 1_000 * i)
        produce(manager, "sized", T0 + 1_000 * i)
    assert log.segments.base_offsets == [0, 3, 6, 9] and log.size == 1_550
    # retention.bytes = 620: excess 1550 − 620 = 930. Oldest first: segment 0 (465) fits, excess 465;
    # segment 3 (465) fits, excess 0; segment 6 (465) does not → the walk stops. The first check, at
    # T0+30000, deletes 0 and 3; their files go at T0+90000. Segment 6 goes once the log reaches
    # 620 + 465 = 1085 bytes, i.e. 465 more bytes.
    segs = by_base(explain(manager, "sized"))
    for base in (0, 3):
        assert (segs[base].deletable_now, segs[base].rule) == (True, RULE_SIZE)
        assert (segs[base].deleted_at_ms, segs[base].files_gone_at_ms) == (T0 + 30_000, T0 + 90_000)
    assert "930 over retention.bytes=620" in segs[0].reason
    assert not segs[6].deletable_now and "must grow by 465 more bytes" in segs[6].reason
    assert not segs[9].deletable_now and "active segment" in segs[9].reason
    clock.set_ms(T0 + 29_999)
    assert log.segments.base_offsets == [0, 3, 6, 9]
    clock.set_ms(T0 + 30_000)
    assert log.segments.base_offsets == [6, 9] and log.log_start_offset == 6 and log.size == 620
    assert [file_state(manager, "sized", b) for b in (0, 3)] == ["deleted"] * 2
    clock.set_ms(T0 + 89_999)
    assert [file_state(manager, "sized", b) for b in (0, 3)] == ["deleted"] * 2
    clock.set_ms(T0 + 90_000)
    assert [file_state(manager, "sized", b) for b in (0, 3)] == ["gone"] * 2

    # retention.bytes = 0: excess 620; segment 6 (465) fits (155 left), then the ACTIVE segment 9 (155)
    # fits too (0 left). Every segment would go, so the check at T0+330000 first rolls a new empty active
    # segment at the log end offset 10, then deletes 6 and 9; their files go at T0+390000.
    clock.set_ms(T0 + 100_000)
    manager.alter_topic_config("sized", {"retention.bytes": 0})
    explanation = explain(manager, "sized")
    segs = by_base(explanation)
    assert all(s.deletable_now and s.rule == RULE_SIZE for s in explanation.segments)
    assert segs[9].is_active and "first rolls a new empty segment at offset 10" in segs[9].reason
    assert (segs[9].deleted_at_ms, segs[9].files_gone_at_ms) == (T0 + 330_000, T0 + 390_000)
    assert "first rolls an empty one" in explanation.summary
    clock.set_ms(T0 + 329_999)
    assert log.segments.base_offsets == [6, 9]
    clock.set_ms(T0 + 330_000)
    assert log.segments.base_offsets == [10]
    assert (log.log_start_offset, log.log_end_offset, log.size) == (10, 10, 0)
    assert file_state(manager, "sized", 10) == "live"
    assert [file_state(manager, "sized", b) for b in (6, 9)] == ["deleted"] * 2
    clock.set_ms(T0 + 390_000)
    assert [file_state(manager, "sized", b) for b in (6, 9)] == ["gone"] * 2
    # The empty last segment is never deleted, retention.bytes = 0 or not.
    (empty,) = explain(manager, "sized").segments
    assert empty.reason.startswith("kept: the empty active segment") and empty.deleted_at_ms is None
    clock.set_ms(T0 + 630_000)
    assert log.segments.base_offsets == [10]
    manager.shutdown()


def test_delete_records_frees_whole_segments_below_the_log_start_at_the_next_check(
    tmp_path: Path, clock: MockTime
) -> None:
    manager = start(tmp_path, clock)
    manager.create_topic("trimmed", config={"retention.ms": -1, "segment.bytes": THREE_PER_SEGMENT})
    log = manager.get_log("trimmed", 0)
    for i in range(10):  # segments 0, 3, 6, 9
        clock.set_ms(T0 + 1_000 * i)
        produce(manager, "trimmed", T0 + 1_000 * i)
    clock.set_ms(T0 + 40_000)  # after the first check (T0+30000); the next is at T0+330000
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(11)  # beyond the high watermark (10)
    assert log.delete_records(7) == 7
    # The log start moves now (offsets < 7 can no longer be read), but files go only at the next check:
    # a segment goes when the NEXT segment's base ≤ 7, so 0 (next 3) and 3 (next 6) go at T0+330000, and
    # 6 (next 9) stays, holding offset 7 and 8. Files gone at T0+390000.
    assert first_offset(manager, "trimmed") == 7
    segs = by_base(explain(manager, "trimmed"))
    for base in (0, 3):
        assert (segs[base].deletable_now, segs[base].rule) == (True, RULE_LOG_START)
        assert (segs[base].deleted_at_ms, segs[base].files_gone_at_ms) == (T0 + 330_000, T0 + 390_000)
    assert not segs[6].deletable_now and "the log start offset 7 is inside it" in segs[6].reason
    clock.set_ms(T0 + 329_999)
    assert log.segments.base_offsets == [0, 3, 6, 9]
    assert [file_state(manager, "trimmed", b) for b in (0, 3)] == ["live"] * 2
    clock.set_ms(T0 + 330_000)
    assert log.segments.base_offsets == [6, 9] and log.log_start_offset == 7
    assert [file_state(manager, "trimmed", b) for b in (0, 3)] == ["deleted"] * 2
    clock.set_ms(T0 + 389_999)
    assert [file_state(manager, "trimmed", b) for b in (0, 3)] == ["deleted"] * 2
    clock.set_ms(T0 + 390_000)
    assert [file_state(manager, "trimmed", b) for b in (0, 3)] == ["gone"] * 2
    # The log-start-offset checkpoint task (every 60 s from T0+30000) has recorded the moved start.
    checkpoint = OffsetCheckpointFile(tmp_path / "logs" / "log-start-offset-checkpoint").read()
    assert checkpoint == {("trimmed", 0): 7}
    manager.shutdown()


def test_reasons_name_the_rule_that_keeps_each_segment(tmp_path: Path, clock: MockTime) -> None:
    manager = start(tmp_path, clock)
    hour = 3_600_000
    topic_config = {"retention.ms": 600_000, "segment.bytes": THREE_PER_SEGMENT}
    manager.create_topic("forever", config={**topic_config, "retention.ms": -1})
    manager.create_topic("lagging", config=topic_config)
    manager.get_log("lagging", 0).auto_high_watermark = False  # the followers have not caught up
    for i in range(7):
        clock.set_ms(T0 + 1_000 * i)
        produce(manager, "forever", T0 - 30 * 24 * hour)  # a month old
        produce(manager, "lagging", T0 + 1_000 * i)
    manager.get_log("lagging", 0).update_high_watermark(4)
    for topic in ("forever", "lagging"):
        assert manager.get_log(topic, 0).segments.base_offsets == [0, 3, 6], topic

    clock.set_ms(T0 + 700_000)  # checks ran at T0+30000 and T0+330000 and T0+630000
    # forever: retention.ms = -1, nothing goes, however old.
    forever = explain(manager, "forever")
    assert manager.get_log("forever", 0).segments.base_offsets == [0, 3, 6]
    for seg in forever.segments:
        assert "retention.ms=-1 (infinite)" in seg.reason and seg.deleted_at_ms is None
    assert "active segment" in forever.segments[-1].reason
    # lagging: all past retention.ms (largest ≤ T0+6000, so from T0+606001), but a segment goes only when
    # the high watermark (4) ≥ its upper bound: segment 0 (upper 3) went at T0+630000, 3 (upper 6) and
    # 6 (upper log end 7) wait above the high watermark.
    assert manager.get_log("lagging", 0).segments.base_offsets == [3, 6]
    segs = by_base(explain(manager, "lagging"))
    assert segs[3].reason.startswith("kept: above the high watermark (HW 4 < next segment 6)")
    assert segs[6].reason.startswith("kept: above the high watermark (HW 4 < log end 7)")
    assert segs[3].deleted_at_ms is None and segs[6].deleted_at_ms is None
    # (The fourth reason, "pinned by an older kept segment", is the next test's subject.)

    # Once the high watermark reaches the log end, the next check (T0+930000) deletes both (rolling first).
    manager.get_log("lagging", 0).update_high_watermark(7)
    segs = by_base(explain(manager, "lagging"))
    assert all(s.deletable_now and s.deleted_at_ms == T0 + 930_000 for s in segs.values())
    clock.set_ms(T0 + 930_000)
    assert manager.get_log("lagging", 0).segments.base_offsets == [7]
    manager.shutdown()


def test_an_older_kept_segment_pins_later_expired_ones(tmp_path: Path, clock: MockTime) -> None:
    manager = start(tmp_path, clock)
    hour = 3_600_000
    manager.create_topic("backfill", config={"retention.ms": 600_000, "segment.bytes": THREE_PER_SEGMENT})
    # Offsets 0..2 timestamped now (T0..T0+2000); 3..5 late data, timestamped an hour ago; 6 now (T0+6000).
    for i in range(7):
        clock.set_ms(T0 + 1_000 * i)
        produce(manager, "backfill", T0 - hour if 3 <= i <= 5 else T0 + 1_000 * i)
    log = manager.get_log("backfill", 0)
    assert log.segments.base_offsets == [0, 3, 6]
    # At the first check (T0+30000), segment 3 alone would go (T0+30000 − (T0−3600000) > 600000), but
    # segment 0 (largest T0+2000, 28 s old) is kept and the walk stops there: nothing goes.
    clock.set_ms(T0 + 10_000)
    segs = by_base(explain(manager, "backfill"))
    assert segs[0].reason.startswith("kept: retention.ms=600000") and "qualifies at 1700000602001" in segs[0].reason
    assert segs[3].reason.startswith("kept: an older segment (offset 0) is kept")
    assert "the walk stops at the first kept segment" in segs[3].reason
    assert "on its own this one is past retention.ms" in segs[3].reason
    assert "active segment" in segs[6].reason
    # All three wait for segment 0: eligible T0+602001 (0), T0+602001 (3, pinned), T0+606001 (6, active):
    # the check at T0+630000 takes all three (rolling a new segment at 7 first).
    assert [segs[b].eligible_at_ms for b in (0, 3, 6)] == [T0 + 602_001, T0 + 602_001, T0 + 606_001]
    assert {segs[b].deleted_at_ms for b in (0, 3, 6)} == {T0 + 630_000}
    clock.set_ms(T0 + 30_000)
    assert log.segments.base_offsets == [0, 3, 6]
    clock.set_ms(T0 + 629_999)
    assert log.segments.base_offsets == [0, 3, 6]
    clock.set_ms(T0 + 630_000)
    assert log.segments.base_offsets == [7]
    manager.shutdown()
