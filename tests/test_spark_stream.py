"""The ``kafkalog`` Spark source, streaming reads: offsets, triggers, rate limits, restarts, data loss.

Streaming queries run on the one SparkSession of the test run (tests/conftest.py) against log dirs a live
LogManager writes in this process; they use Trigger.AvailableNow and a Parquet file sink whose metadata log
gives each micro-batch, so each run ends by itself with a known set of micro-batches. A few checks call the
stream reader directly, without Spark, where the engine would only add time (rate limits,
minOffsetsPerTrigger, startingOffsets JSON).
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from kafkalog.errors import InvalidConfigurationError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from kafkalog.manager import LogManager
from kafkalog.record import ControlRecordType, RecordBatchBuilder
from sparkrows import expected_rows

pyspark = pytest.importorskip("pyspark")
from pyspark.errors import StreamingQueryException  # noqa: E402
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402

from kafkalog.spark import kafka_schema  # noqa: E402
from kafkalog.spark.stream import (  # noqa: E402
    KafkaLogStreamReader,
    parse_stream_options,
    rate_limit,
    time_string_ms,
)

T0 = 1_700_000_000_000
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """A live LogManager over two log dirs; every test makes its own topics in it."""
    root = tmp_path_factory.mktemp("stream-logs")
    # Records carry 2023 timestamps: no time retention, or the first retention pass (30 s after startup)
    # would delete them while a slow run still reads.
    config = {"log.retention.ms": -1, "log.retention.check.interval.ms": 3_600_000}
    manager = LogManager([root / "d1", root / "d2"], config=config)
    manager.startup()
    yield manager
    manager.shutdown()


def paths(logs) -> str:
    return ",".join(str(d) for d in logs.log_dirs)


def produce(logs, topic, partition, count, tag="v", headers=False):
    """``count`` records, one batch each, values '<tag>-<partition>-<i>'; the last key is null."""
    log = logs.get_log(topic, partition)
    for i in range(count):
        builder = RecordBatchBuilder()
        key = None if i == count - 1 else b"k%d" % i
        builder.append(key, b"%s-%d-%d" % (tag.encode(), partition, i), T0 + i, [("h", b"%d" % i)] if headers else ())
        log.append(builder)


oracle = functools.partial(expected_rows, headers=False)


def as_rows(table: pa.Table) -> list[dict]:
    out = []
    for row in table.to_pylist():
        row["timestamp"] = (row["timestamp"] - EPOCH) // dt.timedelta(milliseconds=1)
        out.append(row)
    return out


def ordered(rows):
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def stream(spark, logs, *, explicit_schema=False, **options):
    """``spark.readStream.format('kafkalog')`` over the fixture's log dirs."""
    reader = spark.readStream.format("kafkalog").option("path", paths(logs))
    if explicit_schema:
        # KafkaLogDataSource.schema() checks every option with the batch parse_options, which refuses the
        # stream-only ones (maxOffsetsPerTrigger, startingOffsets=latest...); a given schema skips that call.
        # See test_stream_only_options_without_a_schema.
        reader = reader.schema(kafka_schema(options.get("includeHeaders") == "true"))
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def micro_batches(out: Path) -> list[tuple[int, list[dict]]]:
    """The micro-batches a Parquet file sink wrote to ``out``, as (batch id, rows), from its metadata log.

    The tests collect micro-batches through the file sink rather than foreachBatch: a foreachBatch callback is
    a py4j call from the JVM back into this process, and the sink keeps the check free of that machinery.
    """
    import pyarrow.parquet as pq

    batches = []
    metadata = out / "_spark_metadata"
    if not metadata.is_dir():
        return batches
    for entry in sorted((e for e in metadata.iterdir() if e.name.isdigit()), key=lambda e: int(e.name)):
        lines = entry.read_text().splitlines()
        assert lines[0] == "v1"
        rows: list[dict] = []
        for line in lines[1:]:
            path = json.loads(line)["path"].removeprefix("file://")
            rows.extend(as_rows(pq.read_table(path)))
        batches.append((int(entry.name), rows))
    return batches


def file_sink(df, out: Path, checkpoint: Path):
    """``df.writeStream`` into Parquet files (microsecond timestamps, which pyarrow reads without pandas)."""
    df.sparkSession.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    return df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))


def run_available_now(df, checkpoint: Path) -> list[tuple[int, list[dict]]]:
    """Run ``df`` with Trigger.AvailableNow to the end; the micro-batches this run made, as (batch id, rows)."""
    out = checkpoint.parent / f"{checkpoint.name}-out"
    before = {b for b, _ in micro_batches(out)}
    query = file_sink(df, out, checkpoint).trigger(availableNow=True).start()
    try:
        query.awaitTermination(timeout=120)
    finally:
        query.stop()
    return [(b, rows) for b, rows in micro_batches(out) if b not in before]


def offset_log(checkpoint: Path) -> dict[int, dict]:
    """The source offsets Spark wrote in ``offsets/<batch>`` (one source: its JSON is the third line)."""
    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            assert lines[0] == "v1"
            out[int(path.name)] = json.loads(lines[2])
    return out


def reader(logs, **options) -> KafkaLogStreamReader:
    """The stream reader as Spark's driver process makes it, to call directly."""
    opts = {"path": paths(logs), **options}
    return KafkaLogStreamReader(opts, kafka_schema(options.get("includeHeaders") == "true"))


# ----- through Spark --------------------------------------------------------------------------------------


def test_available_now_reads_exactly_the_records_appended(spark, logs, tmp_path):
    logs.create_topic("s_all", 3, config={"segment.bytes": 500})
    produce(logs, "s_all", 0, 12, headers=True)
    produce(logs, "s_all", 1, 3, headers=True)
    # s_all-2 stays empty.
    assert len(logs.get_log("s_all", 0).segments) > 1
    df = stream(spark, logs, subscribe="s_all", startingOffsets="earliest", includeHeaders="true")
    assert df.isStreaming
    batches = run_available_now(df, tmp_path / "cp")
    assert [b for b, _ in batches] == [0]  # no read limit: the whole backlog is one micro-batch
    assert ordered(batches[0][1]) == oracle(logs, "s_all", headers=True)
    first = ordered(batches[0][1])[0]
    assert first["key"] == b"k0" and first["value"] == b"v-0-0" and first["timestamp"] == T0
    assert first["headers"] == [{"key": "h", "value": b"0"}]
    # The checkpoint holds the Kafka source's offset JSON: topic -> partition (a string) -> next offset.
    assert offset_log(tmp_path / "cp") == {0: {"s_all": {"0": 12, "1": 3, "2": 0}}}


def test_restart_from_the_checkpoint_neither_loses_nor_duplicates(spark, logs, tmp_path):
    logs.create_topic("s_restart", 2)
    produce(logs, "s_restart", 0, 5, tag="a")
    produce(logs, "s_restart", 1, 2, tag="a")
    cp = tmp_path / "cp"
    df = stream(spark, logs, subscribe="s_restart", startingOffsets="earliest")
    first = run_available_now(df, cp)
    assert ordered(r for _, rows in first for r in rows) == oracle(logs, "s_restart")

    # Appended between two runs: the second run reads those and only those.
    produce(logs, "s_restart", 1, 3, tag="b")
    second = run_available_now(df, cp)
    assert [(r["partition"], r["offset"], r["value"]) for _, rows in second for r in ordered(rows)] == [
        (1, 2, b"b-1-0"),
        (1, 3, b"b-1-1"),
        (1, 4, b"b-1-2"),
    ]
    assert second[0][0] == first[-1][0] + 1

    # A crash after the offsets of the last micro-batch were logged but before it was committed: the
    # restarted query runs that micro-batch again with the same id and the same offset range (although more
    # records are there now), which the file sink recognises and skips; the new records come in a
    # micro-batch of their own.
    last = second[-1][0]
    logged = offset_log(cp)[last]
    (cp / "commits" / str(last)).unlink()
    (cp / "commits" / f".{last}.crc").unlink(missing_ok=True)
    produce(logs, "s_restart", 0, 2, tag="c")
    third = run_available_now(df, cp)
    assert (cp / "commits" / str(last)).exists() and offset_log(cp)[last] == logged
    assert [b for b, _ in third] == [last + 1]
    assert [(r["partition"], r["value"]) for _, rows in third for r in ordered(rows)] == [
        (0, b"c-0-0"),
        (0, b"c-0-1"),
    ]
    # Every record once across the three runs.
    union = [r for _, rows in [*first, *second, *third] for r in rows]
    assert ordered(union) == oracle(logs, "s_restart")
    assert len({(r["partition"], r["offset"]) for r in union}) == len(union)
    assert offset_log(cp)[max(offset_log(cp))] == {"s_restart": {"0": 7, "1": 5}}


def test_max_offsets_per_trigger_splits_an_available_now_backlog(spark, logs, tmp_path):
    logs.create_topic("s_rate", 2)
    produce(logs, "s_rate", 0, 30)
    produce(logs, "s_rate", 1, 10)
    df = stream(
        spark, logs, explicit_schema=True, subscribe="s_rate", startingOffsets="earliest", maxOffsetsPerTrigger="10"
    )
    cp = tmp_path / "cp"
    batches = run_available_now(df, cp)
    # Kafka's rateLimit: 10 offsets per trigger shared in proportion to each partition's backlog, rounded
    # down (30:10 -> 7 + 2, then 23:8 -> 7 + 2, 16:6 -> 7 + 2, 9:4 -> 6 + 3, and the rest 3 + 1).
    per_partition = [
        (sum(r["partition"] == 0 for r in rows), sum(r["partition"] == 1 for r in rows)) for _, rows in batches
    ]
    assert per_partition == [(7, 2), (7, 2), (7, 2), (6, 3), (3, 1)]
    assert [b for b, _ in batches] == [0, 1, 2, 3, 4]
    # Every record once, each partition's offsets contiguous from one micro-batch to the next.
    assert ordered(r for _, rows in batches for r in rows) == oracle(logs, "s_rate")
    assert offset_log(cp)[0] == {"s_rate": {"0": 7, "1": 2}}
    assert offset_log(cp)[4] == {"s_rate": {"0": 30, "1": 10}}


def test_starting_offsets_latest_and_earliest(spark, logs, tmp_path):
    logs.create_topic("s_latest", 1)
    produce(logs, "s_latest", 0, 4, tag="old")
    # latest (the default, as Kafka's): the first micro-batch is empty and logs where the query started, so
    # the next run of the query reads what was appended in between, and nothing from before.
    cp = tmp_path / "latest"
    df = stream(spark, logs, subscribe="s_latest")
    assert [(b, rows) for b, rows in run_available_now(df, cp)] == [(0, [])]
    assert offset_log(cp) == {0: {"s_latest": {"0": 4}}}
    produce(logs, "s_latest", 0, 2, tag="new")
    batches = run_available_now(df, cp)
    assert [(r["offset"], r["value"]) for _, rows in batches for r in rows] == [(4, b"new-0-0"), (5, b"new-0-1")]
    # earliest: everything there is.
    batches = run_available_now(stream(spark, logs, subscribe="s_latest", startingOffsets="earliest"), tmp_path / "e")
    assert ordered(r for _, rows in batches for r in rows) == oracle(logs, "s_latest")
    assert len(oracle(logs, "s_latest")) == 6


def test_a_running_query_sees_records_appended_between_triggers(spark, logs, tmp_path):
    logs.create_topic("s_live", 2)
    produce(logs, "s_live", 0, 3, tag="old")
    out = tmp_path / "out"
    query = (
        file_sink(stream(spark, logs, subscribe="s_live"), out, tmp_path / "cp")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()  # the first micro-batch: where the query starts (latest)
        assert micro_batches(out) == [(0, [])]
        for round_ in range(2):  # the LogManager appends while the query runs; each round is read
            before = len(micro_batches(out))
            produce(logs, "s_live", round_, 2, tag=f"r{round_}")
            query.processAllAvailable()
            seen = micro_batches(out)
            assert [(r["partition"], r["value"]) for _, rows in seen[before:] for r in ordered(rows)] == [
                (round_, b"r%d-%d-0" % (round_, round_)),
                (round_, b"r%d-%d-1" % (round_, round_)),
            ]
        assert query.isActive
    finally:
        query.stop()
    seen = micro_batches(out)
    assert [b for b, _ in seen] == list(range(len(seen)))
    assert ordered(r for _, rows in seen for r in rows) == oracle(logs, "s_live", start={0: 3})


def test_a_new_topic_under_subscribe_pattern_is_read_from_earliest(spark, logs, tmp_path):
    logs.create_topic("np_a", 1)
    produce(logs, "np_a", 0, 3, tag="a")
    cp = tmp_path / "cp"
    df = stream(spark, logs, subscribePattern="np_.*", startingOffsets="earliest")
    first = run_available_now(df, cp)
    assert ordered(r for _, rows in first for r in rows) == oracle(logs, "np_a")
    logs.create_topic("np_b", 2)
    produce(logs, "np_b", 0, 4, tag="b")
    produce(logs, "np_b", 1, 2, tag="b")
    produce(logs, "np_a", 0, 1, tag="a2")
    logs.create_topic("other", 1)  # does not match the pattern
    produce(logs, "other", 0, 2)
    second = run_available_now(df, cp)
    got = ordered(r for _, rows in second for r in rows)
    # np_b from offset 0 in both partitions, np_a from where the first run stopped.
    assert got == oracle(logs, "np_a", start={0: 3}) + oracle(logs, "np_b")
    assert [r["offset"] for r in got if r["topic"] == "np_b" and r["partition"] == 0] == [0, 1, 2, 3]
    assert offset_log(cp)[max(offset_log(cp))] == {"np_a": {"0": 4}, "np_b": {"0": 4, "1": 2}}


def test_fail_on_data_loss_after_retention_removed_unread_offsets(spark, logs, tmp_path):
    logs.create_topic("s_loss", 1, config={"segment.bytes": 300, "index.interval.bytes": 50, "retention.ms": -1})
    produce(logs, "s_loss", 0, 10)
    cp = tmp_path / "cp"
    df = stream(spark, logs, subscribe="s_loss", startingOffsets="earliest")
    assert len([r for _, rows in run_available_now(df, cp) for r in rows]) == 10
    produce(logs, "s_loss", 0, 20, tag="w")  # offsets 10..29, over several segments
    log = logs.get_log("s_loss")
    log.delete_records(25)  # offsets 10..24 go before the query read them
    logs.checkpoint_log_start_offsets()
    assert log.delete_old_segments() > 0
    assert log.segments.first().base_offset > 10
    with pytest.raises(
        StreamingQueryException, match=r"Cannot fetch offset 10 of s_loss-0: the log now starts at offset 25"
    ):
        run_available_now(df, cp)
    # failOnDataLoss=false: the same query goes on from the log start.
    lenient = stream(spark, logs, subscribe="s_loss", startingOffsets="earliest", failOnDataLoss="false")
    batches = run_available_now(lenient, cp)
    assert [r["offset"] for _, rows in batches for r in ordered(rows)] == [25, 26, 27, 28, 29]
    assert ordered(r for _, rows in batches for r in rows) == oracle(logs, "s_loss", start={0: 25})


def test_stream_only_options_without_a_schema(spark, logs):
    df = stream(spark, logs, subscribePattern="np_.*", startingOffsets="latest", maxOffsetsPerTrigger="5")
    assert df.isStreaming


# ----- the reader without Spark -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endingOffsets": "latest"}, "ending offset not valid in streaming queries"),
        ({"maxOffsetsPerTrigger": "0"}, "Option 'maxOffsetsPerTrigger' must be a positive integer"),
        ({"minOffsetsPerTrigger": "x"}, "Option 'minOffsetsPerTrigger' must be a positive integer"),
        ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"}, r"minOffsetPerTrigger\(9\) is higher"),
        ({"maxTriggerDelay": "5 parsecs"}, "Option 'maxTriggerDelay' is not a time"),
        ({"kafka.isolation.level": "serializable"}, "kafka.isolation.level"),
        ({"endingOffsetsByTimestamp": '{"a":{"0":1}}'}, "ending timestamp not valid in streaming queries"),
        ({"startingOffsets": "{bad"}, "option 'startingOffsets'"),
        ({"failOnDataLoss": "maybe"}, "Option 'failOnDataLoss' must be 'true' or 'false'"),
    ],
)
def test_stream_options_are_validated(options, message):
    with pytest.raises(InvalidConfigurationError, match=message):
        parse_stream_options({"path": "/nowhere", "subscribe": "a", **options})
    with pytest.raises(InvalidConfigurationError, match="One of the following options must be specified"):
        parse_stream_options({"path": "/nowhere"})


def test_stream_option_defaults_and_read_limits():
    base = {"path": "/x", "subscribe": "a"}
    so = parse_stream_options(base)
    assert so.starting == "latest" and so.read.fail_on_data_loss and not so.read.include_headers
    assert so.max_trigger_delay_ms == 15 * 60_000
    assert [time_string_ms(t) for t in ("15m", "30s", "250ms", "2h", "1d", "42", "10min")] == [
        900_000,
        30_000,
        250,
        7_200_000,
        86_400_000,
        42,
        600_000,
    ]
    schema = kafka_schema()
    assert KafkaLogStreamReader(base, schema).getDefaultReadLimit() == ReadAllAvailable()
    assert KafkaLogStreamReader({**base, "maxOffsetsPerTrigger": "7"}, schema).getDefaultReadLimit() == ReadMaxRows(7)
    assert KafkaLogStreamReader({**base, "minOffsetsPerTrigger": "3"}, schema).getDefaultReadLimit() == ReadMinRows(3)
    both = {**base, "minOffsetsPerTrigger": "3", "maxOffsetsPerTrigger": "7"}
    assert KafkaLogStreamReader(both, schema).getDefaultReadLimit() == ReadMaxRows(7)
    with pytest.raises(InvalidConfigurationError, match="fixed schema"):
        KafkaLogStreamReader({**base, "includeHeaders": "true"}, schema)


def test_rate_limit_is_kafkas():
    a0, a1, b0 = ("a", 0), ("a", 1), ("b", 0)
    fetched = []

    def earliest():
        fetched.append(1)
        return {b0: 100}

    # Proportional shares, rounded down; a share under one offset is rounded up so nothing starves.
    assert rate_limit(10, {a0: 0, a1: 0}, {a0: 1000, a1: 1}, earliest) == {a0: 9, a1: 1}
    assert fetched == []  # the earliest offsets of new partitions are looked up only when there is one
    # A new partition's backlog counts from its earliest offset.
    assert rate_limit(10, {a0: 0}, {a0: 10, b0: 110}, earliest) == {a0: 5, b0: 105}
    assert fetched == [1]
    # Nothing new: the latest offsets as they are, also a partition whose offsets went backwards.
    assert rate_limit(10, {a0: 10, a1: 5}, {a0: 10, a1: 3}, earliest) == {a0: 10, a1: 3}
    # Never past the latest offset.
    assert rate_limit(1000, {a0: 0, a1: 0}, {a0: 3, a1: 1}, earliest) == {a0: 3, a1: 1}


def test_reader_offsets_planning_and_available_now_target(logs):
    logs.create_topic("r_plan", 2, config={"segment.bytes": 400, "retention.ms": -1})
    produce(logs, "r_plan", 0, 8)
    produce(logs, "r_plan", 1, 2)
    assert reader(logs, subscribe="r_plan").initialOffset() == {"r_plan": {"0": 8, "1": 2}}
    assert reader(logs, subscribe="r_plan", startingOffsets="earliest").initialOffset() == {"r_plan": {"0": 0, "1": 0}}
    specific = json.dumps({"r_plan": {"0": 3, "1": -1}})
    r = reader(logs, subscribe="r_plan", startingOffsets=specific)
    start = r.initialOffset()
    assert start == {"r_plan": {"0": 3, "1": 2}}
    with pytest.raises(InvalidConfigurationError, match="you must specify all TopicPartitions"):
        reader(logs, subscribe="r_plan", startingOffsets=json.dumps({"r_plan": {"0": 3}})).initialOffset()
    with pytest.raises(InvalidConfigurationError, match="startingOffsets for r_plan-0 is 99, beyond its latest"):
        reader(logs, subscribe="r_plan", startingOffsets=json.dumps({"r_plan": {"0": 99, "1": 0}})).initialOffset()
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        reader(logs, subscribe="r_plan,nope").initialOffset()

    # Trigger.AvailableNow: the latest offsets when the query started are as far as it goes.
    r.prepareForTriggerAvailableNow()
    produce(logs, "r_plan", 1, 3, tag="late")
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"r_plan": {"0": 8, "1": 2}}
    assert r.reportLatestOffset() == end
    assert r.partitions(end, end) == []
    planned = r.partitions(start, end)
    assert [(p.topic, p.partition, p.start, p.end) for p in planned] == [("r_plan", 0, 3, 8)]
    batches = list(r.read(planned[0]))
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert batches[0].schema == to_arrow_schema(kafka_schema(), timezone="UTC")
    assert pa.Table.from_batches(batches).column("offset").to_pylist() == [3, 4, 5, 6, 7]
    # Without AvailableNow each call looks at the files again.
    assert reader(logs, subscribe="r_plan").latestOffset(end, ReadAllAvailable()) == {"r_plan": {"0": 8, "1": 5}}

    # Data loss found when planning: raised naming the offsets, or skipped with failOnDataLoss=false.
    produce(logs, "r_plan", 0, 10, tag="more")
    log = logs.get_log("r_plan", 0)
    log.delete_records(12)
    logs.checkpoint_log_start_offsets()
    log.delete_old_segments()
    now = reader(logs, subscribe="r_plan").latestOffset(end, ReadAllAvailable())
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 8 of r_plan-0: the log now starts at offset 12") as e:
        r.partitions(end, now)
    assert "Offsets 8 to 11 of r_plan-0 were not read" in str(e.value)
    lenient = reader(logs, subscribe="r_plan", failOnDataLoss="false").partitions(end, now)
    assert [(p.partition, p.start, p.end) for p in lenient] == [(0, 12, 18), (1, 2, 5)]


def test_min_offsets_per_trigger_waits_for_records_or_max_trigger_delay(logs):
    logs.create_topic("r_min", 1)
    produce(logs, "r_min", 0, 2)
    r = reader(logs, subscribe="r_min", minOffsetsPerTrigger="3", maxTriggerDelay="1s")
    limit = r.getDefaultReadLimit()
    start = {"r_min": {"0": 0}}
    # The first trigger goes ahead (no micro-batch yet to wait after), as Kafka's delayBatch.
    assert r.latestOffset(start, limit) == {"r_min": {"0": 2}}
    start = {"r_min": {"0": 2}}
    produce(logs, "r_min", 0, 2)
    assert r.latestOffset(start, limit) == start  # 2 new records < 3: wait
    produce(logs, "r_min", 0, 1)
    assert r.latestOffset(start, limit) == {"r_min": {"0": 5}}  # 3 new records
    start = {"r_min": {"0": 5}}
    produce(logs, "r_min", 0, 1)
    assert r.latestOffset(start, limit) == start
    time.sleep(1.1)
    assert r.latestOffset(start, limit) == {"r_min": {"0": 6}}  # maxTriggerDelay passed
    # ReadAllAvailable (Trigger.Once) ignores the options; with both options the maximum applies too.
    produce(logs, "r_min", 0, 1)
    assert r.latestOffset({"r_min": {"0": 6}}, ReadAllAvailable()) == {"r_min": {"0": 7}}
    both = reader(logs, subscribe="r_min", minOffsetsPerTrigger="2", maxOffsetsPerTrigger="4")
    assert both.latestOffset({"r_min": {"0": 0}}, both.getDefaultReadLimit()) == {"r_min": {"0": 4}}
    assert both.latestOffset({"r_min": {"0": 6}}, both.getDefaultReadLimit()) == {"r_min": {"0": 6}}
    # Trigger.AvailableNow never waits: it must end.
    r.prepareForTriggerAvailableNow()
    assert r.latestOffset({"r_min": {"0": 6}}, limit) == {"r_min": {"0": 7}}


def test_read_committed_stops_at_the_last_stable_offset(logs):
    logs.create_topic("r_txn", 1)
    log = logs.get_log("r_txn")
    produce(logs, "r_txn", 0, 2)  # offsets 0, 1
    txn = RecordBatchBuilder(producer_id=7000, producer_epoch=0, base_sequence=0, is_transactional=True)
    txn.append(b"t", b"aborted-0", T0)
    txn.append(b"t", b"aborted-1", T0)
    log.append(txn)  # offsets 2, 3: a transaction still open
    r = reader(logs, subscribe="r_txn", startingOffsets="earliest", **{"kafka.isolation.level": "read_committed"})
    start = r.initialOffset()
    assert r.latestOffset(start, ReadAllAvailable()) == {"r_txn": {"0": 2}}  # the LSO, not the log end (4)
    log.append_end_txn_marker(ControlRecordType.ABORT, 7000, 0, coordinator_epoch=1)  # offset 4
    produce(logs, "r_txn", 0, 1, tag="after")  # offset 5
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"r_txn": {"0": 6}}
    (planned,) = r.partitions(start, end)
    table = pa.Table.from_batches(list(r.read(planned)))
    assert list(zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True)) == [
        (0, b"v-0-0"),
        (1, b"v-0-1"),
        (5, b"after-0-0"),
    ]
    # read_uncommitted (the default) has the aborted records and reads up to the log end.
    plain = reader(logs, subscribe="r_txn", startingOffsets="earliest")
    (planned,) = plain.partitions(start, end)
    assert pa.Table.from_batches(list(plain.read(planned))).column("offset").to_pylist() == [0, 1, 2, 3, 5]


def test_starting_timestamps_and_min_partitions(logs):
    logs.create_topic("r_ts", 2)
    produce(logs, "r_ts", 0, 20)  # timestamps T0 + offset
    produce(logs, "r_ts", 1, 3)
    by_time = reader(logs, subscribe="r_ts", startingTimestamp=str(T0 + 1), startingOffsets="earliest")
    assert by_time.initialOffset() == {"r_ts": {"0": 1, "1": 1}}  # precedence over startingOffsets
    by_partition = json.dumps({"r_ts": {"0": T0 + 2, "1": T0}})
    assert reader(logs, subscribe="r_ts", startingOffsetsByTimestamp=by_partition).initialOffset() == {
        "r_ts": {"0": 2, "1": 0}
    }
    with pytest.raises(InvalidConfigurationError, match=r"No offset matched .* r_ts-1 and timestamp"):
        reader(logs, subscribe="r_ts", startingTimestamp=str(T0 + 10)).initialOffset()
    later = reader(logs, subscribe="r_ts", startingTimestamp=str(T0 + 10), startingOffsetsByTimestampStrategy="latest")
    assert later.initialOffset() == {"r_ts": {"0": 10, "1": 3}}
    # minPartitions splits a micro-batch's ranges as in a batch read: contiguous pieces covering each range.
    split = reader(logs, subscribe="r_ts", minPartitions="6")
    planned = split.partitions({"r_ts": {"0": 0, "1": 0}}, {"r_ts": {"0": 20, "1": 3}})
    pieces = {p: [(x.start, x.end) for x in planned if x.partition == p] for p in (0, 1)}
    assert len(planned) >= 4 and len(pieces[0]) > 1
    for p, end in ((0, 20), (1, 3)):
        bounds = pieces[p]
        assert bounds[0][0] == 0 and bounds[-1][1] == end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    rows = [o for x in planned for b in split.read(x) for o in b.column("offset").to_pylist()]
    assert sorted(rows) == sorted([*range(20), *range(3)])
