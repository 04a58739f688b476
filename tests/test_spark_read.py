"""The ``kafkalog`` Spark source, batch reads: schema, options, offsets, data loss, and real broker dirs.

One SparkSession (tests/conftest.py) serves the whole run (startup ~5 s, the first Python data source query ~5 s more).
Log dirs are written by a live LogManager, which stays open while Spark reads them: readers take no lock.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import shutil
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog.errors import InvalidConfigurationError
from kafkalog.manager import LogManager
from kafkalog.record import ControlRecordType, RecordBatchBuilder, build_batch, iter_file_batches
from kafkalog.spark import parse_options
from sparkrows import expected_rows

pyspark = pytest.importorskip("pyspark")
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

T0 = 1_700_000_000_000
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# The Kafka source's schema, spelled out independently of kafkalog.spark.
KAFKA_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
HEADERS_FIELD = StructField(
    "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Two log dirs with topics orders (3 partitions), payments (transactions), metrics, and retained."""
    root = tmp_path_factory.mktemp("spark-logs")
    dirs = [root / "d1", root / "d2"]
    # T0 is years old: retention (first run log.initial.task.delay.ms after startup) must not delete it.
    manager = LogManager(
        dirs, config={"log.retention.check.interval.ms": 3_600_000, "log.initial.task.delay.ms": 3_600_000}
    )
    manager.startup()
    manager.create_topic("orders", 3, config={"segment.bytes": 600, "index.interval.bytes": 100})
    manager.create_topic("payments", 1)
    manager.create_topic("metrics", 1, config={"preallocate": "true", "segment.bytes": 1 << 20})
    manager.create_topic("retained", 1, config={"segment.bytes": 400, "index.interval.bytes": 50, "retention.ms": -1})
    orders = manager.get_log("orders", 0)
    for i in range(6):  # several segments, with headers, null keys and every codec
        codec = ["gzip", "snappy", "lz4", "zstd", "none", "gzip"][i]
        keys = [b"k%d" % i, None, b""]
        values = [b"order-%d-%d" % (i, j) for j in range(3)]
        headers = [[("src", b"web"), ("trace", None)], [], [("n", b"%d" % i)]]
        orders.append(build_batch(keys, values, [T0 + i, T0 + i, T0 + i + 1], headers, compression=codec))
    manager.get_log("orders", 1).append(build_batch([None], [None], [T0]))
    # orders-2 stays empty.
    payments = manager.get_log("payments")
    payments.append([(b"p", b"plain-0", T0), (b"p", b"plain-1", T0)])
    txn = RecordBatchBuilder(producer_id=4000, producer_epoch=0, base_sequence=0, is_transactional=True)
    txn.append(b"t", b"aborted-0", T0)
    txn.append(b"t", b"aborted-1", T0)
    payments.append(txn)
    payments.append_end_txn_marker(ControlRecordType.ABORT, 4000, 0, coordinator_epoch=1)  # offset 4
    payments.append([(b"p", b"plain-5", T0, [("h", b"v")])])
    for i in range(3):
        manager.produce("metrics", b"m%d" % i, timestamp=T0)
    retained = manager.get_log("retained")
    for i in range(20):
        retained.append([(b"r", b"retained-%02d" % i, T0 + i)])
    yield manager
    manager.shutdown()


def read(spark, logs, **options):
    """``spark.read.format('kafkalog')`` over the fixture log dirs, as sorted row dicts with ms timestamps."""
    reader = spark.read.format("kafkalog").option("path", ",".join(str(d) for d in logs.log_dirs))
    for name, value in options.items():
        reader = reader.option(name, value)
    return rows(reader.load())


def rows(df):
    out = []
    for row in df.toArrow().to_pylist():
        row["timestamp"] = (row["timestamp"] - EPOCH) // dt.timedelta(milliseconds=1)
        out.append(row)
    return sorted(out, key=lambda r: (r["topic"], r["partition"], r["offset"]))


oracle = functools.partial(expected_rows, headers=True)


# ----- schema and options -------------------------------------------------------------------------------


def test_schema_is_the_kafka_sources(spark, logs):
    reader = spark.read.format("kafkalog").option("path", str(logs.log_dirs[0])).option("subscribe", "orders")
    assert reader.load().schema == StructType(KAFKA_FIELDS)
    with_headers = reader.option("includeHeaders", "true").load().schema
    assert with_headers == StructType([*KAFKA_FIELDS, HEADERS_FIELD])
    assert with_headers.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "One of the following options must be specified"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options"),
        ({"subscribe": " , "}, "No topics to subscribe to as specified value for option 'subscribe'"),
        ({"subscribePattern": " "}, "Pattern to subscribe is empty"),
        ({"subscribePattern": "("}, "'subscribePattern' is not a valid regex"),
        ({"assign": "a"}, "No topicpartitions to assign as specified value for option 'assign'"),
        ({"assign": '{"a":["x"]}'}, r'Expected e.g. \{"topicA":\[0,1\]'),
        ({"subscribe": "a", "startingOffsets": "latest"}, "starting offset can't be latest"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "startingOffsets for a-0 can't be latest"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "ending offset can't be earliest"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "ending offset for a-0 can't be earliest"),
        ({"subscribe": "a", "endingOffsets": "{bad"}, "option 'endingOffsets'"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "Option 'failOnDataLoss' must be 'true' or 'false'"),
        ({"subscribe": "a", "includeHeaders": "yes"}, "Option 'includeHeaders'"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, "Expected a single long value, got soon"),
        ({"subscribe": "a", "endingTimestamp": "-7"}, "Option 'endingTimestamp' is -7"),
        ({"subscribe": "a", "startingOffsetsByTimestamp": '{"a":{"0":"x"}}'}, "startingOffsetsByTimestamp"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "skip"}, "startingOffsetsByTimestampStrategy"),
        (
            {
                "subscribe": "a",
                "startingOffsetsByTimestamp": '{"a":{"0":5,"1":5}}',
                "endingOffsetsByTimestamp": '{"a":{"0":9}}',
            },
            "must be the same",
        ),
        (
            {
                "subscribe": "a",
                "startingOffsetsByTimestamp": '{"a":{"0":9}}',
                "endingOffsetsByTimestamp": '{"a":{"0":5}}',
            },
            "starting timestamp 9 is after the ending timestamp 5 for a-0",
        ),
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be positive"),
        ({"subscribe": "a", "minPartitions": "many"}, "Option 'minPartitions' must be a positive integer"),
        ({"subscribe": "a", "maxRecordsPerPartition": "-10"}, "maxRecordsPerPartition must be positive"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "10"}, "'maxOffsetsPerTrigger' only applies to streaming"),
        ({"subscribe": "a", "kafka.isolation.level": "serializable"}, "kafka.isolation.level"),
        ({"subscribe": "a", "filterPushdown": "on"}, "Option 'filterPushdown'"),
    ],
)
def test_invalid_options_name_the_option(options, message):
    with pytest.raises(InvalidConfigurationError, match=message):
        parse_options({"path": "/nowhere", **options})


def test_path_is_required_and_checked(spark, logs, tmp_path):
    with pytest.raises(InvalidConfigurationError, match=r"Option 'path' must be specified.*kafka.bootstrap.servers"):
        parse_options({"subscribe": "a", "kafka.bootstrap.servers": "host:9092"})
    assert parse_options({"subscribe": "a", "path": "/x, /y,/x"}).paths == ("/x", "/y")
    # Through Spark: the error surfaces at load() and names the option.
    with pytest.raises(Exception, match="Only one of the following options can be specified"):
        spark.read.format("kafkalog").option("path", str(tmp_path)).option("subscribe", "a").option(
            "subscribePattern", "a"
        ).load()
    with pytest.raises(Exception, match="nope given in option 'subscribe' do not exist"):
        read(spark, logs, subscribe="orders,nope")


# ----- reading --------------------------------------------------------------------------------------------


def test_subscribe_reads_every_record_appended(spark, logs):
    got = read(spark, logs, subscribe="orders,payments", includeHeaders="true")
    expected = oracle(logs, "orders") + oracle(logs, "payments")
    assert got == expected
    orders0 = [r for r in got if r["topic"] == "orders" and r["partition"] == 0]
    assert [r["offset"] for r in orders0] == list(range(18))
    assert orders0[0]["headers"] == [{"key": "src", "value": b"web"}, {"key": "trace", "value": None}]
    assert orders0[0]["timestamp"] == T0 and orders0[2]["timestamp"] == T0 + 1
    assert [r["key"] for r in orders0[:3]] == [b"k0", None, b""]
    assert [(r["partition"], r["key"], r["value"]) for r in got if r["topic"] == "orders" and r["partition"] == 1] == [
        (1, None, None)
    ]
    assert len(logs.get_log("orders", 0).segments) > 1  # the range spans segments
    # read_uncommitted, as the Kafka source by default: the aborted records are there, the marker never is.
    payments = [(r["offset"], r["value"]) for r in got if r["topic"] == "payments"]
    assert payments == [(0, b"plain-0"), (1, b"plain-1"), (2, b"aborted-0"), (3, b"aborted-1"), (5, b"plain-5")]


def test_subscribe_pattern_and_without_headers(spark, logs):
    got = read(spark, logs, subscribePattern="ord.*|metr.*")
    assert got == oracle(logs, "metrics", headers=False) + oracle(logs, "orders", headers=False)
    assert read(spark, logs, subscribePattern="ord") == []  # the pattern matches whole topic names


def test_assign_with_json_offsets(spark, logs):
    got = read(
        spark,
        logs,
        assign=json.dumps({"orders": [0, 1]}),
        startingOffsets=json.dumps({"orders": {"0": 4, "1": -2}}),
        endingOffsets=json.dumps({"orders": {"0": 11, "1": -1}}),
        includeHeaders="true",
    )
    assert got == oracle(logs, "orders", start={0: 4}, end={0: 11, 1: 1, 2: 0})
    assert [r["offset"] for r in got if r["partition"] == 0] == list(range(4, 11))


def test_earliest_and_latest_keywords(spark, logs):
    default = read(spark, logs, subscribe="payments")
    assert read(spark, logs, subscribe="payments", startingOffsets="earliest", endingOffsets="latest") == default
    assert (
        read(
            spark,
            logs,
            subscribe="payments",
            startingOffsets=json.dumps({"payments": {"0": -2}}),
            endingOffsets=json.dumps({"payments": {"0": -1}}),
        )
        == default
    )
    # Ending offsets are exclusive; an offset range may fall in the middle of a batch.
    some = read(
        spark,
        logs,
        subscribe="payments",
        startingOffsets=json.dumps({"payments": {"0": 1}}),
        endingOffsets=json.dumps({"payments": {"0": 3}}),
    )
    assert [r["offset"] for r in some] == [1, 2]


def test_offset_errors(spark, logs):
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):
        read(spark, logs, subscribe="orders", startingOffsets=json.dumps({"orders": {"0": 0}}))
    with pytest.raises(Exception, match="beyond its latest offset"):
        read(spark, logs, subscribe="payments", endingOffsets=json.dumps({"payments": {"0": 99}}))
    with pytest.raises(Exception, match="Beginning offset 5 is after the ending offset 2"):
        read(
            spark,
            logs,
            subscribe="payments",
            startingOffsets=json.dumps({"payments": {"0": 5}}),
            endingOffsets=json.dumps({"payments": {"0": 2}}),
        )


def test_fail_on_data_loss_after_the_log_start_moved(spark, logs):
    retained = logs.get_log("retained")
    retained.delete_records(7)  # inside a segment: only the checkpoint tells
    logs.checkpoint_log_start_offsets()
    assert retained.delete_old_segments() > 0
    first_base = retained.segments.first().base_offset
    assert 0 < first_base <= 7
    expected = oracle(logs, "retained", headers=False, start={0: 7})
    assert [r["offset"] for r in expected] == list(range(7, 20))
    assert read(spark, logs, subscribe="retained") == expected  # earliest is the log start
    from_zero = json.dumps({"retained": {"0": 2}})
    with pytest.raises(Exception, match=r"Cannot fetch offset 2 of retained-0: the log now starts at offset 7"):
        read(spark, logs, subscribe="retained", startingOffsets=from_zero)
    assert read(spark, logs, subscribe="retained", startingOffsets=from_zero, failOnDataLoss="false") == expected


def test_live_appends_and_a_partial_tail(spark, logs, tmp_path):
    before = read(spark, logs, subscribe="metrics")
    logs.produce("metrics", b"late", timestamp=T0 + 9)  # visible to the next query, no lock involved
    after = read(spark, logs, subscribe="metrics")
    assert after[: len(before)] == before and [r["value"] for r in after[len(before) :]] == [b"late"]
    # A copy with half a batch appended to the active segment: the incomplete batch is not there yet.
    copy = tmp_path / "copy"
    shutil.copytree(Path(logs.describe_topic("payments").partitions[0].log_dir) / "payments-0", copy / "payments-0")
    segment = max((copy / "payments-0").glob("*.log"))
    segment.write_bytes(segment.read_bytes() + build_batch([b"x"], [b"y" * 100], [T0])[:70])
    df = spark.read.format("kafkalog").option("path", str(copy)).option("subscribe", "payments").load()
    assert rows(df) == read(spark, logs, subscribe="payments")


# ----- real broker log dirs -----------------------------------------------------------------------------


def file_records(partition_dir: Path) -> list[tuple]:
    out = []
    for segment in sorted(partition_dir.glob("*.log")):
        for batch in iter_file_batches(segment):
            if batch.is_control:
                continue
            for r in batch.records():
                out.append((r.offset, r.timestamp, batch.timestamp_type_id, r.key, r.value, list(r.headers)))
    return out


@pytest.mark.parametrize(
    ("fixture", "options"),
    [
        ("bheem6005-kafka/kafka-logs", {"subscribe": "cities"}),
        ("donaldy-kafka271/kafka-logs", {"subscribe": "__consumer_offsets"}),  # two segments, compacted
        ("mscaldas-cp512-lz4/kafka-data", {"subscribePattern": ".*"}),  # lz4, every non-internal topic
    ],
)
def test_broker_log_dirs_read_in_place(spark, fixture, options):
    log_dir = fixture_path("broker-logs", *fixture.split("/"))
    reader = spark.read.format("kafkalog").option("path", str(log_dir)).option("includeHeaders", "true")
    for name, value in options.items():
        reader = reader.option(name, value)
    got = rows(reader.load())
    assert got
    by_partition: dict[tuple[str, int], list[tuple]] = {}
    for r in got:
        by_partition.setdefault((r["topic"], r["partition"]), []).append(
            (
                r["offset"],
                r["timestamp"],
                r["timestampType"],
                r["key"],
                r["value"],
                [(h["key"], h["value"]) for h in r["headers"]],
            )
        )
    for (topic, partition), records in by_partition.items():
        assert records == file_records(log_dir / f"{topic}-{partition}"), (topic, partition)
    if "subscribePattern" in options:
        assert all(not t.startswith("__") for t, _ in by_partition)
        on_disk = {d.name for d in log_dir.iterdir() if d.is_dir() and not d.name.startswith("__")}
        with_data = {d for d in on_disk if file_records(log_dir / d)}
        assert {f"{t}-{p}" for t, p in by_partition} == with_data
