"""The ``kafkalog`` Spark source's batch-read options beyond offsets: timestamps, splits, read_committed, pushdown.

Expectations come from what the fixture appended (kept in ``Appended``), and timestamp lookups are held equal
to ``Log.offset_for_timestamp`` and the LSO to ``Log.last_stable_offset`` (storage/log.py, a separate path).
Spark queries share the session of tests/conftest.py; the pure planning checks call the reader directly.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import json
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafkalog.errors import InvalidConfigurationError
from kafkalog.manager import LogManager
from kafkalog.record import ControlRecordType, RecordBatchBuilder, build_batch

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from kafkalog.spark import logfiles  # noqa: E402
from kafkalog.spark.options import FILTER_PUSHDOWN_CONF, kafka_schema, parse_options  # noqa: E402
from kafkalog.spark.planning import KafkaLogInputPartition, offset_ranges  # noqa: E402
from kafkalog.spark.source import KafkaLogDataSource  # noqa: E402

T0 = 1_700_000_000_000
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass
class Appended:
    """What the fixture wrote: per events partition (offset, timestamp, key, value) and batch first offsets,
    and for the transactional topic each data record's (offset, value, fate)."""

    manager: LogManager
    events: dict[int, list[tuple[int, int, bytes, bytes]]] = field(default_factory=dict)
    batch_starts: dict[int, list[int]] = field(default_factory=dict)
    txn: list[tuple[int, bytes, str]] = field(default_factory=list)  # fate: plain, committed, aborted, open
    open_txn_first: int = -1

    @property
    def dirs(self) -> str:
        return ",".join(str(d) for d in self.manager.log_dirs)

    def directory(self, topic: str, partition: int = 0) -> str:
        return str(self.manager.get_log(topic, partition).directory)


@pytest.fixture(scope="module")
def appended(tmp_path_factory) -> Appended:
    """Topic events (2 partitions, many small segments, timestamps out of order) and txn (transactions)."""
    root = tmp_path_factory.mktemp("spark-read-options")
    manager = LogManager(
        [root / "d1", root / "d2"],
        config={"log.retention.check.interval.ms": 3_600_000, "log.initial.task.delay.ms": 3_600_000},
    )
    manager.startup()
    manager.create_topic("events", 2, config={"segment.bytes": 1500, "index.interval.bytes": 120, "retention.ms": -1})
    manager.create_topic("txn", 1, config={"segment.bytes": 700, "index.interval.bytes": 60, "retention.ms": -1})
    out = Appended(manager)
    rng = random.Random(7)
    codecs = ["none", "gzip", "lz4", "zstd"]
    for p, batches in ((0, 60), (1, 12)):
        log = manager.get_log("events", p)
        records: list[tuple[int, int, bytes, bytes]] = []
        starts = []
        for i in range(batches):
            n = rng.randint(1, 5)
            stamps = [T0 + 10 * i + rng.randint(-25, 25) for _ in range(n)]  # rising, often out of order
            keys = [b"k%d" % rng.randint(0, 9) for _ in range(n)]
            values = [b"e%d-%d-%d" % (p, i, j) for j in range(n)]
            info = log.append(build_batch(keys, values, stamps, compression=codecs[i % 4]))
            assert info.first_offset == len(records)
            starts.append(len(records))
            records += [(len(records) + j, stamps[j], keys[j], values[j]) for j in range(n)]
        out.events[p] = records
        out.batch_starts[p] = starts
    assert len(manager.get_log("events", 0).segments) >= 4

    txn = manager.get_log("txn")
    sequences: dict[int, int] = {}
    pending: dict[int, list[int]] = {}  # producer -> indexes into out.txn of its open transaction

    def data(pid: int, *values: bytes) -> None:
        builder = RecordBatchBuilder(
            producer_id=pid, producer_epoch=0, base_sequence=sequences.get(pid, 0), is_transactional=True
        )
        for v in values:
            builder.append(b"t", v, T0)
        sequences[pid] = sequences.get(pid, 0) + len(values)
        first = txn.append(builder).first_offset
        for j, v in enumerate(values):
            pending.setdefault(pid, []).append(len(out.txn))
            out.txn.append((first + j, v, "open"))

    def plain(*values: bytes) -> None:
        first = txn.append([(b"p", v, T0) for v in values]).first_offset
        out.txn += [(first + j, v, "plain") for j, v in enumerate(values)]

    def end(kind: ControlRecordType, pid: int) -> None:
        txn.append_end_txn_marker(kind, pid, 0, coordinator_epoch=1)
        fate = "committed" if kind == ControlRecordType.COMMIT else "aborted"
        for i in pending.pop(pid):
            offset, value, _ = out.txn[i]
            out.txn[i] = (offset, value, fate)

    plain(b"p0", b"p1")
    data(100, b"a1", b"a2")
    data(200, b"b1")
    data(100, b"a3")
    end(ControlRecordType.COMMIT, 100)
    end(ControlRecordType.ABORT, 200)
    plain(b"p2")
    data(100, b"a4", b"a5")
    for i in range(8):  # rolls: the ABORT below lands in a later segment than the data it aborts
        plain(b"f%d-" % i + b"x" * 60)
    end(ControlRecordType.ABORT, 100)
    data(200, b"b2")
    end(ControlRecordType.COMMIT, 200)
    data(300, b"c1")  # never decided: the last stable offset
    out.open_txn_first = out.txn[-1][0]
    for i in range(8):  # rolls again: a producer snapshot is written with the transaction open
        plain(b"g%d-" % i + b"x" * 60)
    yield out
    manager.shutdown()


def load(spark, appended: Appended, **options):
    reader = spark.read.format("kafkalog").option("path", appended.dirs)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows(df) -> list[tuple]:
    """(topic, partition, offset, timestamp ms, key, value), sorted."""
    return arrow_rows(df.toArrow())


def arrow_rows(table) -> list[tuple]:
    out = []
    for r in table.to_pylist():
        ms = (r["timestamp"] - EPOCH) // dt.timedelta(milliseconds=1)
        out.append((r["topic"], r["partition"], r["offset"], ms, r["key"], r["value"]))
    return sorted(out)


def event_rows(appended: Appended, keep=lambda p, offset, ts: True) -> list[tuple]:
    return sorted(
        ("events", p, o, ts, k, v) for p, recs in appended.events.items() for o, ts, k, v in recs if keep(p, o, ts)
    )


def first_at_or_after(records, ts: int) -> int | None:
    """The first offset whose timestamp is >= ts, from what was appended (no control records in events)."""
    return next((o for o, t, _, _ in records if t >= ts), None)


def reader_for(appended: Appended, **options):
    source = KafkaLogDataSource({"path": appended.dirs, **options})
    return source.reader(kafka_schema(parse_options(source.options).include_headers))


# ----- timestamps ---------------------------------------------------------------------------------------


def test_offset_for_timestamp_matches_the_log(appended):
    """Through the time index, the same answer as Log.offset_for_timestamp and as the appended data."""
    probes = {T0 - 10**6, T0 - 26, 0, 1}
    for recs in appended.events.values():
        for _, ts, _, _ in recs:
            probes |= {ts - 1, ts, ts + 1}
    probes |= {max(ts for recs in appended.events.values() for _, ts, _, _ in recs) + k for k in (1, 10**6)}
    for p, recs in appended.events.items():
        log = appended.manager.get_log("events", p)
        directory = appended.directory("events", p)
        for ts in [*sorted(probes), -1, -2, -3]:
            want = log.offset_for_timestamp(ts)
            got = logfiles.offset_for_timestamp(directory, ts, log.log_start_offset, log.log_end_offset)
            assert got == (want.offset if want is not None else None), (p, ts)
            if ts >= 0:
                assert got == first_at_or_after(recs, ts), (p, ts)
        top = max(ts for _, ts, _, _ in recs)
        assert logfiles.offset_for_timestamp(directory, -3, 0, log.log_end_offset) == first_at_or_after(recs, top)
        # Kafka answers no offset for a match at or past the latest offset it may serve.
        match = first_at_or_after(recs, recs[-1][1])
        assert logfiles.offset_for_timestamp(directory, recs[-1][1], 0, match) is None
        assert logfiles.offset_for_timestamp(directory, recs[-1][1], 0, match + 1) == match
    # The transactional topic: control records count, as in Kafka; still the Log's answer.
    log = appended.manager.get_log("txn")
    for ts in (T0 - 1, T0, T0 + 1, 2 * T0, -3):
        want = log.offset_for_timestamp(ts)
        got = logfiles.offset_for_timestamp(appended.directory("txn"), ts, 0, log.log_end_offset)
        assert got == (want.offset if want is not None else None), ts


def test_timestamp_lower_bound_for_pushdown_is_exact_here(appended):
    """first_offset_at_or_after never passes a matching record (here it is exactly the first one)."""
    for p, recs in appended.events.items():
        directory, end = appended.directory("events", p), len(recs)
        for start in (0, 7, end // 2):
            for ts in range(T0 - 30, T0 + 10 * len(recs) + 30, 7):
                want = next((o for o, t, _, _ in recs if o >= start and t >= ts), end)
                assert logfiles.first_offset_at_or_after(directory, ts, start, end) == want, (p, start, ts)


def test_timestamp_options_through_spark(spark, appended):
    ev = appended.events
    t1, t2 = T0 + 100, T0 + 400
    got = rows(load(spark, appended, subscribe="events", startingTimestamp=str(t1), endingTimestamp=str(t2)))

    def in_range(p, offset, _ts):
        start, end = first_at_or_after(ev[p], t1), first_at_or_after(ev[p], t2)
        return start is not None and offset >= start and (end is None or offset < end)

    assert got == event_rows(appended, in_range)
    assert got and all(r[2] >= first_at_or_after(ev[r[1]], t1) for r in got)
    # By partition; it takes precedence over startingOffsets / endingOffsets (even 'latest', never parsed).
    by_start = {"events": {"0": T0 + 250, "1": T0 + 30}}
    by_end = {"events": {"0": T0 + 500, "1": T0 + 10**7}}
    got = rows(
        load(
            spark,
            appended,
            subscribe="events",
            startingOffsetsByTimestamp=json.dumps(by_start),
            endingOffsetsByTimestamp=json.dumps(by_end),
            startingOffsets="latest",
            endingOffsets=json.dumps({"events": {"0": 3, "1": 3}}),
        )
    )
    starts = {0: first_at_or_after(ev[0], T0 + 250), 1: first_at_or_after(ev[1], T0 + 30)}
    ends = {0: first_at_or_after(ev[0], T0 + 500), 1: len(ev[1])}  # no match at the end: latest
    assert got == event_rows(appended, lambda p, o, ts: starts[p] <= o < ends[p])
    # The global timestamp wins over the one by partition.
    got = rows(
        load(
            spark,
            appended,
            assign=json.dumps({"events": [1]}),
            startingTimestamp=str(T0 + 60),
            startingOffsetsByTimestamp=json.dumps({"events": {"0": 0}}),  # would not even match the assignment
        )
    )
    start = first_at_or_after(ev[1], T0 + 60)
    assert got == event_rows(appended, lambda p, o, ts: p == 1 and o >= start)
    # Nothing at or after the starting timestamp: an error, or the latest offset with strategy 'latest'.
    late = str(T0 + 10**7)
    with pytest.raises(Exception, match=r"No offset matched from request of topic-partition events-\d and timestamp"):
        rows(load(spark, appended, subscribe="events", startingTimestamp=late))
    plan = reader_for(appended, subscribe="events", startingTimestamp=late, startingOffsetsByTimestampStrategy="LATEST")
    assert [(p.start, p.end) for p in plan.partitions()] == [(len(ev[0]), len(ev[0])), (len(ev[1]), len(ev[1]))]
    by_partition = json.dumps({"events": {"0": T0}})
    with pytest.raises(InvalidConfigurationError, match="must match the assigned partitions"):
        reader_for(appended, subscribe="events", startingOffsetsByTimestamp=by_partition).partitions()


def test_timestamp_options_planning_edges(appended):
    ev = appended.events
    # ListOffsets' special timestamps: -2 earliest, -1 latest.
    plan = reader_for(appended, subscribe="events", startingTimestamp="-2", endingTimestamp="-1").partitions()
    assert [(p.partition, p.start, p.end) for p in plan] == [(0, 0, len(ev[0])), (1, 0, len(ev[1]))]
    # A starting timestamp after the ending one's offset: Spark's "Beginning offset ... after the ending offset".
    with pytest.raises(InvalidConfigurationError, match=r"Beginning offset .* is after the ending offset"):
        reader_for(appended, subscribe="events", startingTimestamp=str(T0 + 300), endingTimestamp=str(T0)).partitions()


# ----- splits -------------------------------------------------------------------------------------------


def test_offset_ranges_follow_sparks_calculator():
    def ranges(*sizes):
        return [(i, 0, size) for i, size in enumerate(sizes)]

    def sizes(pieces):
        return [(k, e - s) for k, s, e in pieces]

    assert offset_ranges(ranges(100), None, None) == ranges(100)
    assert offset_ranges(ranges(100, 0), 2, None) == ranges(100, 0)  # enough ranges: untouched
    assert sizes(offset_ranges(ranges(100), 4, None)) == [(0, 25)] * 4
    assert sizes(offset_ranges(ranges(10), 3, None)) == [(0, 3), (0, 3), (0, 4)]  # the last takes the rest
    # A range whose share rounds to one piece stays whole and out of the proportions (SPARK-36576).
    assert sizes(offset_ranges(ranges(90, 10, 0), 4, None)) == [(0, 30), (0, 30), (0, 30), (1, 10)]
    assert sizes(offset_ranges(ranges(3), 5, None)) == [(0, 1)] * 3  # empty pieces go
    assert offset_ranges(ranges(0, 0), 4, None) == []
    assert sizes(offset_ranges(ranges(100, 10), None, 30)) == [(0, 25)] * 4 + [(1, 10)]
    assert sizes(offset_ranges(ranges(30, 10), None, 30)) == sizes(ranges(30, 10))  # no range above the cap
    # Both: cut at the cap first, then toward minPartitions.
    assert sizes(offset_ranges(ranges(100, 10), 8, 30)) == [(0, 12), (0, 13)] * 4 + [(1, 10)]
    pieces = offset_ranges([(0, 5, 105)], 3, None)
    assert [(s, e) for _, s, e in pieces] == [(5, 38), (38, 71), (71, 105)]


def split_rows(df) -> tuple[dict[int, list[tuple[int, int]]], list[tuple]]:
    """(task -> [(partition, offset)], all rows as ``rows`` gives them), from one Spark job."""
    tagged = df.withColumn("task", F.spark_partition_id()).toArrow()
    tasks: dict[int, list[tuple[int, int]]] = {}
    for r in tagged.select(["partition", "offset", "task"]).to_pylist():
        tasks.setdefault(r["task"], []).append((r["partition"], r["offset"]))
    return tasks, arrow_rows(tagged)


def check_split(plan: list[KafkaLogInputPartition], tasks: dict[int, list[tuple[int, int]]]) -> None:
    """Every Spark task read exactly its planned [start, end), and the pieces of a partition tile its range."""
    for task, got in tasks.items():
        piece = plan[task]
        assert all(p == piece.partition and piece.start <= o < piece.end for p, o in got), (task, piece)
    by_partition: dict[tuple[str, int], list[KafkaLogInputPartition]] = {}
    for piece in plan:
        assert piece.start < piece.end
        by_partition.setdefault((piece.topic, piece.partition), []).append(piece)
    for pieces in by_partition.values():
        assert all(a.end == b.start for a, b in itertools.pairwise(pieces))


def test_min_partitions_splits_at_indexed_batches(spark, appended):
    ev = appended.events
    whole = rows(load(spark, appended, subscribe="events"))
    assert whole == event_rows(appended)
    options = {"assign": json.dumps({"events": [0]}), "minPartitions": "4"}
    plan = reader_for(appended, **options).partitions()
    assert len(plan) == 4 and plan[0].start == 0 and plan[-1].end == len(ev[0])
    sizes = [p.end - p.start for p in plan]
    assert max(sizes) - min(sizes) <= len(ev[0]) // 4  # balanced, give or take a batch
    # Each cut moved to a batch boundary (a batch's first offset, from what was appended) near Spark's cut.
    assert all(p.start in appended.batch_starts[0] for p in plan)
    df = load(spark, appended, **options)
    assert df.rdd.getNumPartitions() == 4
    tasks, got = split_rows(df)
    check_split(plan, tasks)
    assert got == [r for r in whole if r[1] == 0]
    # Two partitions of unequal sizes: split in proportion, the small one left whole.
    options = {"subscribe": "events", "minPartitions": "6"}
    plan = reader_for(appended, **options).partitions()
    assert [p.partition for p in plan].count(1) == 1 and len(plan) == 6
    df = load(spark, appended, **options)
    assert df.rdd.getNumPartitions() == 6
    tasks, got = split_rows(df)
    check_split(plan, tasks)
    assert got == whole


def test_max_records_per_partition_caps_every_piece(spark, appended):
    ev = appended.events
    whole = event_rows(appended)
    for options in ({"maxRecordsPerPartition": "7"}, {"maxRecordsPerPartition": "40", "minPartitions": "9"}):
        plan = reader_for(appended, subscribe="events", **options).partitions()
        cap = int(options["maxRecordsPerPartition"])
        assert all(p.end - p.start <= cap for p in plan)
        expected = sum(-(-len(ev[p]) // cap) for p in ev)  # Spark: ceil(size / cap) pieces per partition
        assert len(plan) >= max(expected, int(options.get("minPartitions", 0)))
        df = load(spark, appended, subscribe="events", **options)
        assert df.rdd.getNumPartitions() == len(plan)
        tasks, got = split_rows(df)
        check_split(plan, tasks)
        assert got == whole
    plan = reader_for(appended, subscribe="events", maxRecordsPerPartition="7").partitions()
    assert len(plan) == sum(-(-len(ev[p]) // 7) for p in ev)


# ----- read_committed -----------------------------------------------------------------------------------


def txn_rows(appended: Appended, fates: tuple[str, ...], below: int | None = None) -> list[tuple[int, bytes]]:
    return [(o, v) for o, v, fate in appended.txn if fate in fates and (below is None or o < below)]


def test_last_stable_offset_from_the_files(appended, tmp_path):
    log = appended.manager.get_log("txn")
    directory = appended.directory("txn")
    lso = logfiles.last_stable_offset(directory, log.log_start_offset, log.log_end_offset)
    assert lso == appended.open_txn_first == log.last_stable_offset < log.log_end_offset
    snapshots = sorted(Path(directory).glob("*.snapshot"))
    assert any(int(s.name.split(".")[0]) > appended.open_txn_first for s in snapshots)  # the snapshot path ran
    # With 'latest' at B's COMMIT marker (just before c1), B's transaction is not decided yet: the LSO is b2.
    b2 = next(o for o, v, _ in appended.txn if v == b"b2")
    assert logfiles.last_stable_offset(directory, 0, appended.open_txn_first - 1) == b2
    assert logfiles.last_stable_offset(directory, 0, appended.open_txn_first) == appended.open_txn_first
    # Without snapshots, the scan from the first segment finds the same open transaction.
    copy = tmp_path / "txn-0"
    shutil.copytree(directory, copy)
    for s in copy.glob("*.snapshot"):
        s.unlink()
    assert logfiles.last_stable_offset(str(copy), 0, log.log_end_offset) == appended.open_txn_first
    # Once decided (its marker below the latest offset) the transaction no longer holds the LSO back.
    manager = LogManager([tmp_path / "solo"], config={"log.initial.task.delay.ms": 3_600_000})
    manager.startup()
    try:
        manager.create_topic("t", 1)
        solo = manager.get_log("t")
        solo.append([(b"k", b"v", T0)])
        builder = RecordBatchBuilder(producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
        builder.append(b"k", b"w", T0)
        solo.append(builder)
        solo_dir = str(solo.directory)
        assert logfiles.last_stable_offset(solo_dir, 0, solo.log_end_offset) == 1 == solo.last_stable_offset
        solo.append_end_txn_marker(ControlRecordType.COMMIT, 9, 0, coordinator_epoch=1)
        end = solo.log_end_offset
        assert logfiles.last_stable_offset(solo_dir, 0, end) == end == solo.last_stable_offset
        assert logfiles.last_stable_offset(solo_dir, 0, end - 1) == 1  # the marker is not below 'latest' yet
    finally:
        manager.shutdown()


def test_read_range_read_committed_over_every_subrange(appended):
    """Aborted batches dropped whatever the range's start and end, even with the ABORT in a later segment."""
    directory = appended.directory("txn")
    lso = appended.open_txn_first
    kept = txn_rows(appended, ("plain", "committed"))
    assert len(logfiles.segment_bases(directory)) >= 3
    for start in range(0, lso):
        for end in range(start + 1, lso + 1):
            got = [
                (o, v)
                for table in logfiles.read_range(
                    directory, "txn-0", start, end, fail_on_data_loss=True, read_committed=True
                )
                for o, v in zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True)
            ]
            assert got == [(o, v) for o, v in kept if start <= o < end], (start, end)


def test_read_committed_through_spark(spark, appended):
    lso = appended.open_txn_first
    got = [
        (r[2], r[5])
        for r in rows(load(spark, appended, subscribe="txn", **{"kafka.isolation.level": "read_committed"}))
    ]
    assert got == txn_rows(appended, ("plain", "committed"), below=lso)
    assert [v for _, v in got][:6] == [b"p0", b"p1", b"a1", b"a2", b"a3", b"p2"]
    # read_uncommitted, the default: aborted and undecided records too, up to the high watermark.
    got = [(r[2], r[5]) for r in rows(load(spark, appended, subscribe="txn"))]
    assert got == txn_rows(appended, ("plain", "committed", "aborted", "open"))
    # Split reads start inside aborted transactions: the union is the same.
    committed = {"kafka.isolation.level": "read_committed"}
    df = load(spark, appended, subscribe="txn", minPartitions="5", **committed)
    assert df.rdd.getNumPartitions() == 5
    assert [(r[2], r[5]) for r in rows(df)] == txn_rows(appended, ("plain", "committed"), below=lso)
    with pytest.raises(Exception, match=r"beyond its latest offset .* last stable offset"):
        rows(load(spark, appended, subscribe="txn", endingOffsets=json.dumps({"txn": {"0": lso + 1}}), **committed))
    # The ending timestamp's "latest" is the LSO too.
    plan = reader_for(appended, subscribe="txn", endingTimestamp=str(T0 + 10**12), **committed).partitions()
    assert [(p.start, p.end) for p in plan] == [(0, lso)]


# ----- filter pushdown ----------------------------------------------------------------------------------


def test_push_filters_prunes_and_narrows(appended):
    ev = appended.events
    reader = reader_for(appended, subscribe="events", filterPushdown="true")
    ts_filter = GreaterThanOrEqual(("timestamp",), EPOCH + dt.timedelta(milliseconds=T0 + 200))
    filters = [
        EqualTo(("topic",), "events"),
        In(("partition",), [0, 5]),
        GreaterThan(("offset",), 10),
        LessThanOrEqual(("offset",), 150),
        ts_filter,
        IsNotNull(("offset",)),
    ]
    left = list(reader.pushFilters(filters))
    assert left == [ts_filter, filters[-1]] and left[0] is ts_filter  # by reference, as Spark requires
    plan = reader.partitions()
    first = first_at_or_after(ev[0], T0 + 200)
    assert [(p.partition, p.start, p.end) for p in plan] == [(0, max(11, first), min(151, len(ev[0])))]
    # An offset IN list reads exactly its offsets, as few ranges; partitions by comparison.
    reader = reader_for(appended, subscribe="events", filterPushdown="true")
    assert list(reader.pushFilters([In(("offset",), [4, 5, 6, 30, 9999]), GreaterThanOrEqual(("partition",), 1)])) == []
    assert [(p.partition, p.start, p.end) for p in reader.partitions()] == [(1, 4, 7), (1, 30, 31)]
    # A long IN list only narrows to its hull, and Spark applies it again.
    reader = reader_for(appended, subscribe="events", filterPushdown="true")
    many = In(("offset",), list(range(20, 620, 2)))
    assert list(reader.pushFilters([many, EqualTo(("partition",), 0)])) == [many]
    assert [(p.partition, p.start, p.end) for p in reader.partitions()] == [(0, 20, min(619, len(ev[0])))]
    # Contradictions plan nothing; a naive datetime or an unknown column is not taken.
    reader = reader_for(appended, subscribe="events", filterPushdown="true")
    naive = GreaterThan(("timestamp",), dt.datetime(2030, 1, 1))
    assert list(reader.pushFilters([LessThan(("partition",), 0), naive, EqualTo(("key",), b"k1")])) == [
        naive,
        EqualTo(("key",), b"k1"),
    ]
    assert reader.partitions() == []
    # Outside pyspark's pushdown worker the reader does not implement pushFilters (pyspark's default returns all).
    plain_reader = reader_for(appended, subscribe="events")
    assert list(plain_reader.pushFilters(filters)) == filters
    assert len(plain_reader.partitions()) == 2


@pytest.fixture
def pushdown(spark):
    before = spark.conf.get(FILTER_PUSHDOWN_CONF)
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    yield
    spark.conf.set(FILTER_PUSHDOWN_CONF, before)


def test_pushed_filters_give_the_same_rows(spark, appended, pushdown):
    whole = rows(load(spark, appended, subscribe="events,txn"))
    df = load(spark, appended, subscribe="events,txn")  # pushed because the session enables it
    t_lo = EPOCH + dt.timedelta(milliseconds=T0 + 150)
    t_hi = EPOCH + dt.timedelta(milliseconds=T0 + 320, microseconds=500)
    cases = [
        (F.col("partition") == 1, lambda r: r[1] == 1),
        (
            (F.col("offset") >= 5) & (F.col("offset") < 20) & F.col("partition").isin(0) & (F.col("offset") != 7),
            lambda r: 5 <= r[2] < 20 and r[1] == 0 and r[2] != 7,
        ),
        (F.col("offset").isin(3, 4, 5, 40, 41), lambda r: r[2] in (3, 4, 5, 40, 41)),
        (
            (F.col("timestamp") > F.lit(t_lo)) & (F.col("timestamp") < F.lit(t_hi)),
            lambda r: T0 + 150 < r[3] <= T0 + 320,
        ),
        ((F.col("topic") == "txn") & (F.col("offset") > 3), lambda r: r[0] == "txn" and r[2] > 3),
    ]
    for condition, keep in cases:
        expected = [r for r in whole if keep(r)]
        assert expected and rows(df.where(condition)) == expected, condition
    # Splits apply to the narrowed ranges.
    narrowed = load(spark, appended, subscribe="events", minPartitions="3").where("partition = 0")
    assert narrowed.rdd.getNumPartitions() == 3
    assert rows(narrowed) == [r for r in whole if r[0] == "events" and r[1] == 0]


def test_filters_are_pushed_exactly_when_the_session_enables_it(spark, appended, pushdown):
    """Input partitions show whether a partition filter was pushed: pruned to the one Kafka partition."""
    expected = [r for r in event_rows(appended) if r[1] == 1]
    pushed = load(spark, appended, subscribe="events").where("partition = 1")
    assert pushed.rdd.getNumPartitions() == 1 and rows(pushed) == expected
    declined = load(spark, appended, subscribe="events", filterPushdown="false").where("partition = 1")
    assert declined.rdd.getNumPartitions() == 2 and rows(declined) == expected
    spark.conf.set(FILTER_PUSHDOWN_CONF, "false")  # the fixture restores it
    unpushed = load(spark, appended, subscribe="events").where("partition = 1")
    assert unpushed.rdd.getNumPartitions() == 2 and rows(unpushed) == expected


def test_filter_pushdown_option_needs_the_spark_conf(spark, appended):
    """``filterPushdown=true`` always offers pushFilters, so pyspark names its conf when that is off."""
    assert spark.conf.get(FILTER_PUSHDOWN_CONF) == "false"
    with pytest.raises(Exception, match=FILTER_PUSHDOWN_CONF.replace(".", r"\.")):
        rows(load(spark, appended, subscribe="events", filterPushdown="true").where("partition = 1"))
    expected = [r for r in event_rows(appended) if r[1] == 1]
    assert rows(load(spark, appended, subscribe="events").where("partition = 1")) == expected


def test_batch_boundaries_are_batch_starts(appended):
    """The split points the .index offers are first offsets of appended batches (or the log end)."""
    directory = appended.directory("events", 0)
    bases = logfiles.segment_bases(directory)
    starts = set(appended.batch_starts[0]) | {len(appended.events[0])}
    seen = set()
    for offset in range(len(appended.events[0])):
        boundaries = {int(b) for b in logfiles.batch_boundaries(directory, bases, offset)}
        segment = bases[bisect.bisect_right(bases, offset) - 1]
        assert segment in boundaries and boundaries <= starts
        assert min(boundaries) <= offset
        if segment != bases[-1]:  # the next segment's base bounds it; the active segment ends at its last entry
            assert offset < max(boundaries)
        seen |= boundaries
    assert len(seen) > len(bases) + 10  # the index adds many more than the segment bases


def test_a_kafka_written_partition(tmp_path):
    """A broker's own .index/.timeindex: lookups equal the Log's (opened on a copy), splits tile the range."""
    from conftest import fixture_path
    from kafkalog.record import iter_file_batches
    from kafkalog.storage.log import Log

    log_dir = fixture_path("broker-logs", "william0423-kafka", "kafka-logs")
    directory = log_dir / "__consumer_offsets-28"
    copy = tmp_path / directory.name
    shutil.copytree(directory, copy, copy_function=shutil.copyfile)
    copy.chmod(0o755)
    log = Log.open(copy, had_clean_shutdown=True)
    try:
        batches = [b for segment in sorted(directory.glob("*.log")) for b in iter_file_batches(segment)]
        stamps = sorted({b.max_timestamp for b in batches})
        step = max(1, len(stamps) // 25)
        probes = [*(stamps[i] + d for i in range(0, len(stamps), step) for d in (-1, 0, 1)), stamps[-1] + 1, -3]
        for ts in probes:
            want = log.offset_for_timestamp(ts)
            got = logfiles.offset_for_timestamp(str(directory), ts, log.log_start_offset, log.log_end_offset)
            assert got == (want.offset if want is not None else None), ts
        end = log.log_end_offset
        assert logfiles.last_stable_offset(str(directory), 0, end) == end == log.last_stable_offset
    finally:
        log.close()
    source = KafkaLogDataSource({"path": str(log_dir), "assign": '{"__consumer_offsets":[28]}', "minPartitions": "5"})
    plan = source.reader(kafka_schema()).partitions()
    assert len(plan) == 5 and plan[0].start == 0 and plan[-1].end == end
    assert all(p.start in {b.base_offset for b in batches} for p in plan)  # cut at batches the .index knows

    def read(start, stop):
        tables = logfiles.read_range(str(directory), "__consumer_offsets-28", start, stop, fail_on_data_loss=True)
        return [o for t in tables for o in t.column("offset").to_pylist()]

    assert [o for p in plan for o in read(p.start, p.end)] == read(0, end)
