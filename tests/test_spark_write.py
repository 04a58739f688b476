"""The ``kafkalog`` sink (kafkalog.spark.writer): Spark's Kafka sink appending to log dirs.

Round trips go through the batch source and through LogManager; placement is checked against kafka-python's
DefaultPartitioner and batches against kafka-python's record reader. Concurrency and crashes use real
processes: two writers on one partition, a writer killed with SIGKILL. Exactly once: task retries and
micro-batch replays (a streaming query restarted after its last commit was deleted) append nothing twice.
One SparkSession (tests/conftest.py) serves the whole run.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from kafkalog.errors import InvalidConfigurationError, KafkaStorageError, UnknownTopicOrPartitionError
from kafkalog.logdir import CleanShutdownFile
from kafkalog.manager import LogManager
from kafkalog.record import build_batch, iter_file_batches
from kafkalog.spark import logfiles
from kafkalog.storage.config import LogConfig
from oracles import KAFKA_PYTHON, oracle_read_v2

pyspark = pytest.importorskip("pyspark")
from kafka.partitioner.default import DefaultPartitioner  # noqa: E402  (kafka-python, the oracle)
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafkalog.record.partitioner import murmur2_partitions  # noqa: E402
from kafkalog.spark.locks import DirLocks as _DirLocks  # noqa: E402
from kafkalog.spark.locks import check_log_dirs_free  # noqa: E402
from kafkalog.spark.sink_batches import build_arrow_batch  # noqa: E402
from kafkalog.spark.sink_options import parse_write_options, resolve_columns  # noqa: E402
from kafkalog.spark.writer import (  # noqa: E402
    PRODUCER_ID_BIT,
    PartitionAppender,
    PartitionStats,
    WriterIdentity,
    write_arrow,
)

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
ARROW_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
KV_SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])


# ----- helpers ----------------------------------------------------------------------------------------------


def make_logs(root: Path, **topics: int) -> Path:
    """A log dir with ``topics`` (name -> partitions), created by a LogManager that then shut down."""
    log_dir = root / "logs"
    with LogManager([log_dir], config={"log.retention.check.interval.ms": 3_600_000}) as manager:
        for name, partitions in topics.items():
            manager.create_topic(name.replace("_", "-"), partitions)
    return log_dir


def scan(partition_dir: Path) -> list:
    """Every batch of a partition, checked: valid CRCs, no byte after the last whole batch, contiguous offsets."""
    batches = []
    for segment in sorted(partition_dir.glob("*.log")):
        size = 0
        for batch in iter_file_batches(segment):
            batch.ensure_valid()
            batches.append(batch)
            size += batch.size_in_bytes
        assert size == segment.stat().st_size, f"{segment} has {segment.stat().st_size - size} bytes of a torn batch"
    for before, after in itertools.pairwise(batches):
        assert after.base_offset == before.last_offset + 1
    return batches


def records(partition_dir: Path) -> list[tuple]:
    return [(r.key, r.value, tuple(r.headers)) for b in scan(partition_dir) for r in b]


def by_producer(batches: list) -> dict[int, list]:
    out: dict[int, list] = {}
    for batch in batches:
        out.setdefault(batch.producer_id, []).append(batch)
    return out


def assert_sequences_contiguous(batches: list) -> None:
    """Each producer's batches, per epoch, start at sequence 0 and follow on without gaps or repeats."""
    expected: dict[tuple[int, int], int] = {}
    for batch in batches:
        key = (batch.producer_id, batch.producer_epoch)
        assert batch.base_sequence == expected.get(key, 0), key
        expected[key] = batch.base_sequence + batch.record_count


def read_back(spark, log_dir: Path, topic: str) -> list[dict]:
    df = (
        spark.read.format("kafkalog")
        .option("path", str(log_dir))
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    return sorted(df.toArrow().to_pylist(), key=lambda r: (r["partition"], r["offset"]))


def write(df, log_dir: Path, **options):
    writer = df.write.format("kafkalog").mode("append").option("path", str(log_dir))
    for name, value in options.items():
        writer = writer.option(name.replace("_", "."), value)
    writer.save()


class _Cluster:
    """Just enough ClusterMetadata for kafka-python's DefaultPartitioner."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, set(range(partitions))

    def topics(self):
        return {self.topic}

    def partitions_for_topic(self, topic):
        return self.partitions

    def available_partitions_for_topic(self, topic):
        return self.partitions


def kafka_python_partition(key: bytes, partitions: int) -> int:
    return DefaultPartitioner().partition("t", key, key, None, None, _Cluster("t", partitions))


def kv_batch(start: int, count: int, prefix: str = "v") -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "key": [f"k{i % 17}" for i in range(start, start + count)],
            "value": [f"{prefix}{i:06d}" for i in range(start, start + count)],
        }
    )


# ----- options, columns and encoding (no Spark) --------------------------------------------------------------


def test_options_mirror_the_kafka_producer():
    opts = parse_write_options({"path": "/a,/b, /a", "topic": "t"})
    assert (opts.paths, opts.topic, opts.compression, opts.batch_size) == (("/a", "/b"), "t", "none", 16384)
    assert opts.buffer_memory == 32 * 1024 * 1024 and opts.max_block_ms == 60_000 and opts.idempotent
    opts = parse_write_options(
        {"PATH": "/a", "kafka.compression.type": "ZSTD", "kafka.batch.size": "100", "kafka.acks": "all"}
    )
    assert (opts.compression, opts.batch_size, opts.ignored) == ("zstd", 100, ("kafka.acks",))
    assert not parse_write_options({"path": "/a", "kafka.enable.idempotence": "false"}).idempotent


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "Option 'path' must be specified for the kafkalog sink"),
        ({"kafka.bootstrap.servers": "h:9092"}, "instead of 'kafka.bootstrap.servers'"),
        ({"path": "/a", "compression.type": "brotli"}, "Invalid value brotli for configuration compression.type"),
        ({"path": "/a", "batch.size": "-1"}, "Option 'batch.size' must be a non-negative integer"),
        ({"path": "/a", "batch.size": "1", "kafka.batch.size": "2"}, "disagree"),
        ({"path": "/a", "kafka.transactional.id": "x"}, "'kafka.transactional.id' is not supported"),
        ({"path": "/a", "kafka.enable.idempotence": "maybe"}, "'kafka.enable.idempotence' must be"),
        ({"path": "/a", "topic": " "}, "Option 'topic' is empty"),
    ],
)
def test_invalid_options_are_named(options, message):
    with pytest.raises(InvalidConfigurationError, match=message):
        parse_write_options(options)


@pytest.mark.parametrize(
    ("fields", "topic", "message"),
    [
        ([("key", StringType())], "t", r"Required attribute 'value' not found"),
        (
            [("value", IntegerType())],
            "t",
            r"value attribute unsupported type int. value must be a\(n\) string or binary",
        ),
        ([("value", StringType())], None, r"topic option required when no 'topic' attribute is present"),
        ([("value", StringType()), ("topic", BinaryType())], None, r"topic must be a\(n\) string"),
        ([("value", StringType()), ("partition", StringType())], "t", r"partition must be a\(n\) int"),
        ([("value", StringType()), ("headers", StringType())], "t", r"headers must be a\(n\) array<struct<key:str"),
        ([("value", StringType()), ("timestamp", StringType())], "t", r"timestamp must be a\(n\) double or timest"),
    ],
)
def test_columns_are_checked_with_the_kafka_sinks_messages(fields, topic, message):
    schema = StructType([StructField(name, dtype) for name, dtype in fields])
    with pytest.raises(InvalidConfigurationError, match=message):
        resolve_columns(schema, topic)


def test_topic_option_wins_over_a_topic_column():
    schema = StructType([StructField("value", BinaryType()), StructField("topic", IntegerType())])
    assert resolve_columns(schema, "t").topic is None  # the column is not even looked at, as in KafkaWriter


def test_murmur2_partitions_equal_kafka_pythons_default_partitioner():
    rng = random.Random(7)
    keys = [
        b"",
        b"a",
        b"ab",
        b"abc",
        b"abcd",
        "ünïcödé-ключ".encode(),
        *(rng.randbytes(rng.randrange(64)) for _ in range(500)),
    ]
    for partitions in (1, 3, 7, 100):
        got = murmur2_partitions(pa.array([*keys, None], pa.binary()), partitions)
        assert got.tolist() == [kafka_python_partition(k, partitions) for k in keys] + [-1]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_arrow_built_batches_read_back_with_kafka_python(codec):
    keys = pa.array([b"k0", None, b"", b"k3"], pa.binary())
    values = pa.array(["v0", None, "", "v3"], pa.string())
    headers = pa.array(
        [[{"key": "a", "value": b"1"}, {"key": "é", "value": None}], None, [], [{"key": "b", "value": b""}]],
        ARROW_HEADERS,
    )
    ts = [1_700_000_000_000, 1_700_000_000_005, 1_700_000_000_001, 1_700_000_000_003]
    data = build_arrow_batch(
        keys, values, ts, headers, compression=codec, producer_id=PRODUCER_ID_BIT + 5, producer_epoch=3, base_sequence=7
    )
    header, got, crc_ok, _ = oracle_read_v2(KAFKA_PYTHON, data)
    assert crc_ok
    assert (header["producer_id"], header["producer_epoch"], header["base_sequence"]) == (PRODUCER_ID_BIT + 5, 3, 7)
    assert header["attributes"] & 7 == ["none", "gzip", "snappy", "lz4", "zstd"].index(codec)
    assert got == [
        (0, ts[0], b"k0", b"v0", (("a", b"1"), ("é", None))),
        (1, ts[1], None, None, ()),
        (2, ts[2], b"", b"", ()),
        (3, ts[3], b"k3", b"v3", (("b", b""),)),
    ]
    if codec == "none":  # byte for byte what the record builder makes from Python headers
        python_headers = [[("a", b"1"), ("é", None)], [], [], [("b", b"")]]
        expected = build_batch(
            [b"k0", None, b"", b"k3"],
            [b"v0", None, b"", b"v3"],
            ts,
            python_headers,
            producer_id=PRODUCER_ID_BIT + 5,
            producer_epoch=3,
            base_sequence=7,
        )
        assert data == expected


def test_bad_rows_fail_the_task_with_the_kafka_producers_messages(tmp_path):
    root = tmp_path / "split"
    with LogManager([root / "d1", root / "d2"]) as manager:
        manager.create_topic("t", 2)  # one partition in each log dir
        manager.create_topic("u", 1)
    d1, d2 = manager.log_dirs
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("value", StringType()),
            StructField("partition", IntegerType()),
            StructField("timestamp", TimestampType()),
            StructField("headers", HEADERS),
        ]
    )
    good = {"topic": ["t"], "value": ["v"], "partition": [None], "timestamp": [None], "headers": [None]}

    def attempt(paths, **changes):
        columns = {**good, **changes}
        arrow = pa.RecordBatch.from_pydict(
            columns,
            pa.schema(
                [
                    ("topic", pa.string()),
                    ("value", pa.string()),
                    ("partition", pa.int32()),
                    ("timestamp", pa.timestamp("us", tz="UTC")),
                    ("headers", ARROW_HEADERS),
                ]
            ),
        )
        return write_arrow({"path": ",".join(map(str, paths))}, schema, [arrow], WriterIdentity("bad", 0))

    cases = [
        ({"topic": [None]}, "null topic present in the data. Use the topic option"),
        ({"topic": ["nope"]}, "Topic nope not present in the log dirs"),
        ({"partition": [2]}, r"Invalid partition given with record: 2 is not in the range \[0...2\)"),
        ({"partition": [-1]}, r"Invalid partition given with record: -1 is not in the range \[0...2\)"),
        ({"timestamp": [dt.datetime(1969, 12, 31, tzinfo=dt.UTC)]}, "Invalid timestamp: -86400000"),
        ({"headers": [[{"key": None, "value": b"x"}]]}, "Null header keys are not permitted"),
    ]
    for changes, message in cases:
        with pytest.raises(Exception, match=message):
            attempt([d1, d2], **changes)
    with pytest.raises(UnknownTopicOrPartitionError, match=r"Topic t has 2 partitions but t-1 is not in the log dirs"):
        attempt([d1])
    assert attempt([d1], topic=["u"]).appended == 1  # another topic all of whose partitions are there
    assert attempt([d1, d2], partition=[1]).partitions == {"t-1": PartitionStats(1, 0, 1, 0, 0)}


def test_log_dir_ownership_is_seen_both_ways_and_for_posix_locks(tmp_path):
    log_dir = make_logs(tmp_path, t=1)
    held = _DirLocks()
    held.hold(str(log_dir))  # what a task holds while it writes
    try:
        with pytest.raises(KafkaStorageError, match="A Kafka instance in another process or thread is using"):
            LogManager([log_dir]).startup()
    finally:
        held.release()
    # A Kafka broker's .lock is a Java FileLock: a POSIX lock, which flock does not see.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(120)\n",
            str(log_dir / ".lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(KafkaStorageError, match=rf"held by pid {holder.pid} \(POSIX lock"):
            check_log_dirs_free([str(log_dir)])
    finally:
        holder.kill()
        holder.wait()
    check_log_dirs_free([str(log_dir)])


def test_without_idempotence_batches_are_plain_and_a_retry_appends_again(tmp_path):
    log_dir = make_logs(tmp_path, t=1)
    options = {"path": str(log_dir), "topic": "t", "kafka.enable.idempotence": "false"}
    for _ in range(2):
        message = write_arrow(options, KV_SCHEMA, [kv_batch(0, 10)], WriterIdentity("same", 0))
        assert (message.appended, message.duplicates, message.producer_id) == (10, 0, -1)
    batches = scan(log_dir / "t-0")
    assert {(b.producer_id, b.base_sequence) for b in batches} == {(-1, -1)}
    assert len(records(log_dir / "t-0")) == 20  # at least once


def test_timestamps_and_batch_sizes(tmp_path):
    log_dir = make_logs(tmp_path, t=1)
    schema = StructType([StructField("value", BinaryType()), StructField("timestamp", DoubleType())])
    arrow = pa.RecordBatch.from_pydict({"value": [b"a", b"b"], "timestamp": [1_700_000_000.25, None]})
    before = int(time.time() * 1000)
    write_arrow({"path": str(log_dir), "topic": "t"}, schema, [arrow], WriterIdentity("ts", 0))
    (batch,) = scan(log_dir / "t-0")
    first, second = list(batch)
    assert first.timestamp == 1_700_000_000_250 and before <= second.timestamp <= int(time.time() * 1000)
    # batch.size bounds each batch (a record larger than it goes alone), and so does max.message.bytes.
    big = pa.RecordBatch.from_pydict({"value": [b"x" * 3000] * 4 + [b"y" * 10] * 40})
    write_arrow(
        {"path": str(log_dir), "topic": "t", "batch.size": "5000"},
        StructType([StructField("value", BinaryType())]),
        [big],
        WriterIdentity("big", 0),
    )
    sizes = [b.record_count for b in scan(log_dir / "t-0")[1:]]
    assert sizes == [1, 1, 1, 41]
    huge = pa.RecordBatch.from_pydict({"value": [b"z" * 200_000] * 12})
    options = {"path": str(log_dir), "topic": "t", "batch.size": str(10 << 20), "compression.type": "lz4"}
    write_arrow(options, StructType([StructField("value", BinaryType())]), [huge], WriterIdentity("huge", 0))
    assert [b.record_count for b in scan(log_dir / "t-0")[5:]] == [5, 5, 2]  # under the 1 MiB max.message.bytes


def test_a_topic_column_spreads_rows_over_topics(tmp_path):
    log_dir = make_logs(tmp_path, a=2, b=1)
    schema = StructType([StructField("topic", StringType()), *KV_SCHEMA.fields])
    arrow = pa.RecordBatch.from_pydict(
        {"topic": ["a", "b", "a", "b", "a"], "key": ["x", "y", None, "x", "z"], "value": list("01234")}
    )
    message = write_arrow({"path": str(log_dir)}, schema, [arrow], WriterIdentity("topics", 0))
    assert message.appended == 5
    assert sorted(v for p in range(2) for _, v, _ in records(log_dir / f"a-{p}")) == [b"0", b"2", b"4"]
    assert records(log_dir / "b-0") == [(b"y", b"1", ()), (b"x", b"3", ())]
    assert [v for _, v, _ in records(log_dir / f"a-{kafka_python_partition(b'x', 2)}")][:1] == [b"0"]


# ----- appends, retries and crashes, without Spark -----------------------------------------------------------


def test_a_retried_task_appends_only_what_its_first_attempt_did_not(tmp_path):
    log_dir = make_logs(tmp_path, t=2)
    options = {"path": str(log_dir), "topic": "t", "batch.size": "300", "buffer.memory": "1"}
    identity = WriterIdentity("job-1", spark_partition=0)
    batches = [kv_batch(i * 100, 100) for i in range(3)]

    def killed_after_two():
        yield batches[0]
        yield batches[1]
        raise RuntimeError("task killed")

    with pytest.raises(RuntimeError, match="task killed"):
        write_arrow(options, KV_SCHEMA, killed_after_two(), identity)
    first = sum(len(records(log_dir / f"t-{p}")) for p in range(2))
    assert first == 200  # buffer.memory=1: each Arrow batch was appended before the next came
    retry = write_arrow(options, KV_SCHEMA, batches, identity)
    assert (retry.appended, retry.duplicates) == (100, 200)
    again = write_arrow(options, KV_SCHEMA, batches, identity)
    assert (again.appended, again.duplicates) == (0, 300)
    values = []
    for p in range(2):
        got = [v.decode() for _, v, _ in records(log_dir / f"t-{p}")]
        assert got == sorted(got)  # each partition holds its rows in the task's order
        values += got
        assert_sequences_contiguous(scan(log_dir / f"t-{p}"))
    assert sorted(values) == [f"v{i:06d}" for i in range(300)]
    other = write_arrow(options, KV_SCHEMA, batches, WriterIdentity("job-2", spark_partition=0))
    assert (other.appended, other.duplicates) == (300, 0)  # another job's rows are other rows


def test_micro_batches_are_producer_epochs_and_replays_are_dropped(tmp_path):
    log_dir = make_logs(tmp_path, s=1)
    options = {"path": str(log_dir), "topic": "s"}

    def run(micro_batch: int, start: int):
        return write_arrow(options, KV_SCHEMA, [kv_batch(start, 10)], WriterIdentity("query:q", 0, micro_batch))

    assert run(0, 0).appended == 10
    assert run(1, 10).appended == 10
    assert (run(1, 10).appended, run(0, 0).appended) == (0, 0)  # replays of committed and older micro-batches
    assert run(2, 20).appended == 10
    # The producer epoch is the micro-batch id modulo 32767; the producer id changes with each 32767.
    assert run(32766, 30).appended == 10
    assert run(32767, 40).appended == 10
    assert run(32767, 40).appended == 0
    batches = scan(log_dir / "s-0")
    assert len({b.producer_id for b in batches}) == 2 and all(b.producer_id & PRODUCER_ID_BIT for b in batches)
    assert [b.producer_epoch for b in batches] == [0, 1, 2, 32766, 0]
    assert [v for _, v, _ in records(log_dir / "s-0")] == [b"v%06d" % i for i in range(50)]


def test_a_torn_tail_is_truncated_before_the_next_append(tmp_path):
    log_dir = make_logs(tmp_path, t=1)
    options = {"path": str(log_dir), "topic": "t"}
    write_arrow(options, KV_SCHEMA, [kv_batch(0, 50)], WriterIdentity("a", 0))
    part = logfiles.discover([str(log_dir)])[("t", 0)]
    with PartitionAppender(part, LogConfig()) as appender:
        assert appender.opened_clean  # the files are as the last writer left them
    segment = log_dir / "t-0" / f"{0:020d}.log"
    batch = build_batch([b"x"] * 20, [b"y" * 100] * 20, [1] * 20)
    with open(segment, "ab") as f:  # a writer killed in the middle of a write
        f.write(batch[: len(batch) // 2])
    with PartitionAppender(part, LogConfig()) as appender:
        assert not appender.opened_clean  # the fingerprint no longer matches: recover
        assert appender.log.log_end_offset == 50
    write_arrow(options, KV_SCHEMA, [kv_batch(50, 50)], WriterIdentity("b", 0))
    assert [v for _, v, _ in records(log_dir / "t-0")] == [b"v%06d" % i for i in range(100)]


WRITER_SCRIPT = """
import sys
import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType
from kafkalog.spark.writer import WriterIdentity, write_arrow

log_dir, tag, count, size, forever = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
schema = StructType([StructField("value", StringType())])
options = {"path": log_dir, "topic": "w", "batch.size": str(size), "buffer.memory": "1"}
filler = "x" * size

def batches():
    i = 0
    while forever or i < count:
        yield pa.RecordBatch.from_pydict({"value": [f"{tag}-{i * 50 + j:08d}-{filler}" for j in range(50)]})
        i += 1

print("ready", flush=True)
write_arrow(options, schema, batches(), WriterIdentity(tag, 0))
"""


def spawn_writer(log_dir: Path, tag: str, count: int, size: int, forever: bool = False) -> subprocess.Popen:
    args = [str(log_dir), tag, str(count), str(size), "1" if forever else "0"]
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER_SCRIPT), *args], stdout=subprocess.PIPE, text=True
    )


def test_two_writer_processes_on_one_partition_never_interleave_bytes(tmp_path):
    log_dir = make_logs(tmp_path, w=1)
    writers = [spawn_writer(log_dir, tag, count=20, size=100) for tag in ("a", "b")]
    for proc in writers:
        assert proc.stdout.readline().strip() == "ready"
    for proc in writers:
        assert proc.wait(timeout=120) == 0
    batches = scan(log_dir / "w-0")  # every batch whole and valid, offsets contiguous
    assert_sequences_contiguous(batches)
    producers = by_producer(batches)
    assert len(producers) == 2
    for tag in ("a", "b"):
        mine = [r.value.decode().split("-")[:2] for b in batches for r in b if r.value.startswith(tag.encode())]
        assert mine == [[tag, f"{i:08d}"] for i in range(1000)]
    switches = sum(1 for x, y in itertools.pairwise(batches) if x.producer_id != y.producer_id)
    print(f"{len(batches)} batches, the writer changed {switches} times")


def test_a_killed_writer_leaves_only_whole_batches(tmp_path):
    log_dir = make_logs(tmp_path, w=1)
    segment = log_dir / "w-0" / f"{0:020d}.log"
    proc = spawn_writer(log_dir, "k", count=0, size=20_000, forever=True)
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    while segment.stat().st_size < 20 << 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    complete = list(iter_file_batches(segment))  # a torn tail, if any, is not a batch
    for batch in complete:
        batch.ensure_valid()
    whole = sum(b.record_count for b in complete)
    assert whole > 0
    # The next writer recovers the partition (truncating any torn tail) before it appends.
    write_arrow({"path": str(log_dir), "topic": "w"}, KV_SCHEMA, [kv_batch(0, 5)], WriterIdentity("next", 0))
    got = records(log_dir / "w-0")  # no torn bytes left, offsets contiguous
    assert len(got) == whole + 5
    killed = [v.decode().split("-")[1] for _, v, _ in got if v.startswith(b"k-")]
    assert killed == [f"{i:08d}" for i in range(whole)]  # the killed writer's records, each once, in order
    with LogManager([log_dir]) as manager:  # and a LogManager agrees
        assert manager.get_log("w").log_end_offset == whole + 5
        assert sum(1 for _ in manager.consume("w")) == whole + 5


# ----- through Spark ---------------------------------------------------------------------------------------


def test_write_then_read_round_trips_keys_nulls_headers_and_partitions(spark, tmp_path):
    log_dir = make_logs(tmp_path, rt=3)
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("headers", HEADERS),
            StructField("partition", IntegerType()),
            StructField("timestamp", TimestampType()),
            StructField("extra", StringType()),  # ignored, as by the Kafka sink
        ]
    )
    t0 = dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    rows = []
    for i in range(60):
        key = None if i % 5 == 0 else f"key-{i % 11}"
        value = None if i % 13 == 0 else b"value-%d" % i
        headers = None if i % 3 == 0 else [] if i % 3 == 1 else [("h", b"%d" % i), ("n", None)]
        partition = 2 if i % 7 == 0 else None
        timestamp = t0 + dt.timedelta(seconds=i) if i % 4 else None
        rows.append((key, value, headers, partition, timestamp, "x"))
    df = spark.createDataFrame(rows, schema).coalesce(1)
    before = int(time.time() * 1000)
    write(df, log_dir, topic="rt")
    after = int(time.time() * 1000)

    got = read_back(spark, log_dir, "rt")
    assert len(got) == 60
    remaining = list(got)
    for key, value, headers, partition, timestamp, _ in rows:
        row = next(r for r in remaining if r["value"] == value and r["key"] == (key.encode() if key else None))
        remaining.remove(row)
        if partition is not None:
            assert row["partition"] == partition
        elif key is not None:
            assert row["partition"] == kafka_python_partition(key.encode(), 3)
        assert row["headers"] == [{"key": k, "value": v} for k, v in headers or []]
        ms = (row["timestamp"] - EPOCH) // dt.timedelta(milliseconds=1)
        if timestamp is not None:
            assert ms == (timestamp - EPOCH) // dt.timedelta(milliseconds=1)
        else:
            assert before - 1000 <= ms <= after + 1000  # the producer's "now"
    # One task, so each partition holds its rows in input order (values carry the input index).
    for p in range(3):
        order = [int(r["value"][6:]) for r in got if r["partition"] == p and r["value"] is not None]
        assert order == sorted(order)
    # A LogManager started afterwards sees every record as committed (the sink updated the checkpoints).
    with LogManager([log_dir]) as manager:
        for part in manager.describe_topic("rt").partitions:
            assert part.high_watermark == part.log_end_offset
        assert sum(1 for _ in manager.consume("rt")) == 60
        manager.produce("rt", b"from-the-manager", partition=0)
    assert CleanShutdownFile(log_dir).exists()
    write(df.limit(6), log_dir, topic="rt")  # after the clean shutdown: the marker is taken away first
    assert not CleanShutdownFile(log_dir).exists()
    with LogManager([log_dir]) as manager:
        assert sum(1 for _ in manager.consume("rt")) == 67


def test_keyed_placement_equals_kafka_pythons_and_keyless_rows_are_sticky(spark, tmp_path):
    log_dir = make_logs(tmp_path, keyed=7)
    rng = random.Random(3)
    keys = [rng.randbytes(rng.randrange(1, 24)) for _ in range(400)]
    rows = [(k, b"v%d" % i) for i, k in enumerate(keys)] + [(None, b"n%03d" % i) for i in range(300)]
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    write(spark.createDataFrame(rows, schema).coalesce(1), log_dir, topic="keyed", batch_size="1024")
    got = read_back(spark, log_dir, "keyed")
    keyed = [r for r in got if r["key"] is not None]
    assert len(keyed) == 400
    assert all(r["partition"] == kafka_python_partition(r["key"], 7) for r in keyed)
    keyless = sorted((r["value"], r["partition"]) for r in got if r["key"] is None)
    assert [v for v, _ in keyless] == [b"n%03d" % i for i in range(300)]
    # Kafka's sticky partitioner: runs of about batch.size bytes per partition, then the next partition.
    runs = [p for i, (_, p) in enumerate(keyless) if i == 0 or p != keyless[i - 1][1]]
    assert 3 <= len(runs) <= 15 and all(b == (a + 1) % 7 for a, b in itertools.pairwise(runs))


def test_every_compression_type(spark, tmp_path):
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    log_dir = make_logs(tmp_path, **{f"z_{c}": 1 for c in codecs})
    df = spark.createDataFrame([(f"k{i}", f"value {i} " * 5) for i in range(200)], KV_SCHEMA).coalesce(1)
    for codec in codecs:
        write(df, log_dir, topic=f"z-{codec}", compression_type=codec)
        batches = scan(log_dir / f"z-{codec}-0")
        assert batches and {b.compression for b in batches} == {codec}
        assert [v.decode() for _, v, _ in records(log_dir / f"z-{codec}-0")] == [f"value {i} " * 5 for i in range(200)]


def test_a_log_dir_held_by_a_log_manager_is_not_written(spark, tmp_path):
    log_dir = make_logs(tmp_path, t=1)
    df = spark.createDataFrame([("k", "v")], KV_SCHEMA)
    with LogManager([log_dir]):
        with pytest.raises(Exception, match=r"Log dir .* is owned by a running LogManager") as failure:
            write(df, log_dir, topic="t")
        assert str(log_dir.resolve()) in str(failure.value) and f"pid {os.getpid()} " in str(failure.value)
        with pytest.raises(KafkaStorageError, match="owned by a running LogManager"):  # the tasks check too
            write_arrow({"path": str(log_dir), "topic": "t"}, KV_SCHEMA, [kv_batch(0, 1)], WriterIdentity("x", 0))
    assert records(log_dir / "t-0") == []
    write(df, log_dir, topic="t")  # once the manager is gone the dir is Spark's to write
    assert records(log_dir / "t-0") == [(b"k", b"v", ())]


def test_concurrent_spark_tasks_append_to_one_partition_in_whole_batches(spark, tmp_path):
    log_dir = make_logs(tmp_path, one=1)
    df = spark.range(0, 4000, 1, 4).select(F.format_string("%05d", "id").alias("value"))
    write(df, log_dir, topic="one", batch_size="512", buffer_memory="4096")
    batches = scan(log_dir / "one-0")
    assert_sequences_contiguous(batches)
    producers = by_producer(batches)
    assert len(producers) == 4  # one producer per task
    for mine in producers.values():
        values = [int(r.value) for b in mine for r in b]
        assert values == list(range(values[0], values[0] + 1000))
    assert sorted(int(r.value) for b in batches for r in b) == list(range(4000))


def test_a_replayed_micro_batch_is_not_appended_twice(spark, tmp_path):
    log_dir = make_logs(tmp_path, s=2)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    for i in range(2):
        lines = [json.dumps({"key": f"k{j}", "value": f"v{i}-{j}"}) for j in range(5)]
        (source / f"part-{i}.json").write_text("\n".join(lines) + "\n")

    def run() -> list[tuple[int, int]]:
        query = (
            spark.readStream.format("json")
            .schema("key string, value string")
            .option("maxFilesPerTrigger", 1)
            .load(str(source))
            .writeStream.format("kafkalog")
            .option("path", str(log_dir))
            .option("topic", "s")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(timeout=180)
        assert query.exception() is None
        return [(p["batchId"], p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]

    assert run() == [(0, 5), (1, 5)]
    assert len(read_back(spark, log_dir, "s")) == 10
    # A crash after micro-batch 1 was written but before its commit was recorded: Spark runs it again.
    (checkpoint / "commits" / "1").unlink()
    (checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)
    assert run() == [(1, 5)]
    got = read_back(spark, log_dir, "s")
    assert sorted(r["value"].decode() for r in got) == sorted(f"v{i}-{j}" for i in range(2) for j in range(5))
    for p in range(2):
        assert_sequences_contiguous(scan(log_dir / f"s-{p}"))


def test_bad_writes_fail_with_the_kafka_sinks_messages(spark, tmp_path):
    # Last: a failed task takes its Python worker down, and the next query pays for new ones.
    log_dir = make_logs(tmp_path, t=3)
    df = spark.createDataFrame([("k", "v", "t", 1)], "key string, value string, topic string, partition int")
    cases = [  # the schema and option checks run on the driver, before any task; a bad row fails its task
        (df.drop("value"), {"topic": "t"}, "Required attribute 'value' not found"),
        (df.drop("topic"), {}, "topic option required when no 'topic' attribute is present"),
        (df, {"topic": "nope"}, "Topic nope not present in the log dirs"),
        (
            df.withColumn("partition", F.lit(5)),
            {},
            r"Invalid partition given with record: 5 is not in the range \[0...3\)",
        ),
    ]
    for frame, options, message in cases:
        with pytest.raises(Exception, match=message):
            write(frame, log_dir, **options)
    with pytest.raises(Exception, match="Save mode Overwrite not allowed for kafkalog"):
        df.write.format("kafkalog").mode("overwrite").option("path", str(log_dir)).save()
    with pytest.raises(Exception, match="Option 'path' must be specified for the kafkalog sink"):
        df.write.format("kafkalog").mode("append").option("topic", "t").save()
    assert all(not records(log_dir / f"t-{p}") for p in range(3))  # nothing was written
