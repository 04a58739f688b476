"""The main job: record layer, storage engine, log manager, compaction and the Spark pipeline end to end.

Part 1 produces a realistic event stream into one partition log per codec (``Log.append``: validation,
offset assignment, 1 MiB segments rolling as Kafka rolls them), reopens each log as after a crash, reads
everything back through the log and through the columnar decoder, and checks it.

Part 2 runs a ``LogManager`` on a simulated clock: a 4-partition topic keyed by user, two hours of
traffic with one hour of retention, Kafka's retention check every minute deleting expired segments; it
prints the retention explanation, verifies every retained record, and restarts cleanly and uncleanly.
Beside it, a compacted topic of user profiles (updates and tombstones) is cleaned by the log cleaner's
scheduled task as the clock runs; the job checks that the latest profile of every user survives and
prints the compaction explanation.

Part 3 reads the retained clicks back on local Spark through the ``kafkalog`` source, as a batch query and
as a streaming query with Trigger.AvailableNow, aggregates them, and writes the aggregates to a compacted
topic through the ``kafkalog`` sink and to Parquet.

Part 4 starts ``kafkalog serve`` on the same log dir and lets a real Kafka client (kafka-python) read every
retained click back over Kafka's protocol, then produce a new lz4 topic with an idempotent producer and
consume it; the broker then shuts down cleanly on SIGTERM.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # python -m kafkalog.demo: say what is coming before the imports (numba, pyarrow)
    print("kafkalog demo: loading kafkalog (a few seconds)...", flush=True)

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .layout import CLEAN_SHUTDOWN_FILE
from .manager import LogManager, TopicPartition
from .record import CODEC_NAMES, build_batch, default_partition, to_arrow
from .record.scan import map_file
from .spark._require import PySparkMissingError, require_pyspark
from .storage import Log
from .testing import MockTime

QUIET_LOG4J2 = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""
EVENT_TYPES = ("page_view", "click", "add_to_cart", "checkout", "search")
SEGMENT_BYTES = 1024 * 1024


def make_events(count: int, seed: int, start_ms: int) -> list[tuple[bytes, bytes, int, tuple]]:
    """A seeded stream of JSON click events keyed by user, with a trace header on some of them."""
    rng = random.Random(seed)
    events = []
    ts = start_ms
    for i in range(count):
        ts += rng.randint(0, 40)
        user = f"user-{rng.randint(1, 500):04d}"
        body = {
            "event": rng.choice(EVENT_TYPES),
            "user": user,
            "page": f"/p/{rng.randint(1, 2000)}",
            "amount": round(rng.uniform(1, 300), 2),
            "seq": i,
        }
        headers = (("trace-id", f"{rng.getrandbits(64):016x}".encode()),) if i % 4 == 0 else ()
        events.append((user.encode(), json.dumps(body).encode(), ts, headers))
    return events


def write_log(directory: Path, events, codec: str, batch_size: int) -> int:
    """Append the events through a partition log in batches of ``batch_size``; return the segment count."""
    with Log.open(directory, {"segment.bytes": SEGMENT_BYTES, "compression.type": "producer"}) as log:
        for start in range(0, len(events), batch_size):
            chunk = events[start : start + batch_size]
            keys, values, timestamps, headers = (list(column) for column in zip(*chunk, strict=True))
            log.append(build_batch(keys, values, timestamps, headers, compression=codec))
        return len(log.segments)


def verify_log(directory: Path, events) -> tuple[int, int]:
    """Reopen as after a crash, read back two ways, compare with the events; return (records, bytes)."""
    with Log.open(directory, {"segment.bytes": SEGMENT_BYTES}, had_clean_shutdown=False, recovery_point=0) as log:
        if log.log_end_offset != len(events):
            raise SystemExit(f"{directory}: log end {log.log_end_offset}, produced {len(events)}")
        tables = [to_arrow(map_file(segment.log.path)) for segment in log.segments]
        offsets, keys, values = [], [], []
        for table in tables:
            offsets += table.column("offset").to_pylist()
            keys += table.column("key").to_pylist()
            values += table.column("value").to_pylist()
        for i, (key, value, _, _) in enumerate(events):
            if offsets[i] != i or keys[i] != key or values[i] != value:
                raise SystemExit(f"{directory}: record {i} does not read back as it was written")
        middle = events[len(events) // 2][2]
        expected = next(i for i, event in enumerate(events) if event[2] >= middle)
        found = log.offset_for_timestamp(middle)
        if found is None or found.offset != expected:
            raise SystemExit(f"{directory}: ListOffsets({middle}) gave {found}, expected offset {expected}")
        streamed = sum(1 for _ in log.records())
        if streamed != len(events):
            raise SystemExit(f"{directory}: log.records() gave {streamed} records, expected {len(events)}")
        return len(events), log.size


def run_codecs(console: Console, out_dir: Path, records: int, batch_size: int, seed: int) -> None:
    events = make_events(records, seed, start_ms=1_700_000_000_000)
    raw_bytes = sum(len(k) + len(v) for k, v, _, _ in events)
    table = Table(title=f"Part 1: {records:,} events, {batch_size} per batch, into one partition log per codec")
    for column in (
        "topic-partition",
        "codec",
        "segments",
        "records",
        "log bytes",
        "ratio",
        "append rec/s",
        "recover+read rec/s",
        "check",
    ):
        table.add_column(column, justify="left" if column in ("topic-partition", "codec") else "right")
    for codec in CODEC_NAMES:
        partition_dir = out_dir / "codecs" / f"events-{codec}-0"
        t0 = time.perf_counter()
        segments = write_log(partition_dir, events, codec, batch_size)
        t1 = time.perf_counter()
        count, size = verify_log(partition_dir, events)
        t2 = time.perf_counter()
        console.print(
            f"  {codec}: {count:,} records appended in {segments} segment{'s' if segments != 1 else ''}, reopened as "
            "after a crash and read "
            f"back: ok ({t2 - t0:.1f} s)"
        )
        table.add_row(
            partition_dir.name,
            codec,
            f"{segments:,}",
            f"{count:,}",
            f"{size:,}",
            f"{raw_bytes / size:.2f}x",
            f"{count / (t1 - t0):,.0f}",
            f"{count / (t2 - t1):,.0f}",
            "[green]ok[/green]",
        )
    console.print(table)


def run_manager(console: Console, log_dir: Path, seed: int) -> int:
    """Two simulated hours of keyed traffic on a 4-partition topic with one hour of retention."""
    start = 1_700_000_000_000
    clock = MockTime(start_ms=start)
    broker = {
        "log.retention.check.interval.ms": 60_000,
        "log.segment.delete.delay.ms": 30_000,
        "log.initial.task.delay.ms": 60_000,
    }
    topic_config = {"segment.bytes": 64 * 1024, "retention.ms": 3_600_000, "compression.type": "producer"}
    produced: dict[tuple[int, int], bytes] = {}
    profiles = ProfileStream(seed)
    with LogManager(log_dir, broker, clock=clock) as manager:
        manager.create_topic("clicks", partitions=4, config=topic_config)
        manager.create_topic("profiles", partitions=1, config=PROFILE_TOPIC_CONFIG)
        events = make_events(48_000, seed + 1, start_ms=start)
        for minute in range(120):  # 400 events a minute, appended as one lz4 batch per partition
            chunk = events[minute * 400 : (minute + 1) * 400]
            by_partition: dict[int, list] = {}
            for key, value, _, headers in chunk:
                by_partition.setdefault(default_partition(key, 4), []).append(
                    (key, value, clock.milliseconds(), headers)
                )
            for partition, rows in sorted(by_partition.items()):
                keys, values, stamps, headers = (list(c) for c in zip(*rows, strict=True))
                info = manager.get_log("clicks", partition).append(
                    build_batch(keys, values, stamps, headers, compression="lz4")
                )
                for i, value in enumerate(values):
                    produced[(partition, info.first_offset + i)] = value
            manager.get_log("profiles").append(profiles.minute_of_updates(clock.milliseconds()))
            clock.advance(60_000)
            if (minute + 1) % 30 == 0:
                console.print(
                    f"  simulated minute {minute + 1}/120: {len(produced):,} clicks appended, "
                    f"{sum(len(manager.get_log('clicks', p).segments) for p in range(4))} segments on disk"
                )
        retained = {(r.partition, r.offset): r.value for r in manager.consume("clicks")}
        lost = [k for k in produced if k not in retained]
        if any(retained.get(k) != v for k, v in produced.items() if k in retained) or len(retained) + len(lost) != len(
            produced
        ):
            raise SystemExit("clicks: a retained record does not read back as it was written")
        for explanation in manager.explain_retention("clicks"):  # nothing still here is overdue for deletion
            for seg in explanation.segments:
                if seg.deleted_at_ms is not None and seg.deleted_at_ms < clock.milliseconds():
                    raise SystemExit(f"clicks: segment {seg.base_offset} outlived its retention check")
        print_topic(console, manager, len(produced), len(retained))
        print_retention(console, manager.explain_retention("clicks", 0)[0], start)
        profiles.check_and_print(console, manager)
    for clean in (True, False):  # restart after a clean shutdown, then as after a crash
        if not clean:
            (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
        with LogManager(log_dir, broker, clock=clock) as manager:
            again = {(r.partition, r.offset): r.value for r in manager.consume("clicks")}
            if again != retained:
                raise SystemExit(f"clicks: the {'clean' if clean else 'unclean'} restart lost records")
    console.print("Restarted after a clean shutdown and after a simulated crash: every retained record is back.")
    return len(retained)


PROFILE_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": 32 * 1024,
    "delete.retention.ms": 600_000,
    "min.cleanable.dirty.ratio": 0.3,
}


class ProfileStream:
    """Profile updates for 2,000 users (2% tombstones), and the latest profile of each as the model."""

    USERS = 2_000

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed + 2)
        self.latest: dict[bytes, bytes | None] = {}
        self.written = 0

    def minute_of_updates(self, now_ms: int, count: int = 170) -> bytes:
        keys, values = [], []
        for _ in range(count):
            key = f"user-{self.rng.randrange(self.USERS):05d}".encode()
            value = None if self.rng.random() < 0.02 else json.dumps({"plan": self.rng.choice(("free", "pro")),
                                                                       "seen": now_ms}).encode()  # fmt: skip
            keys.append(key)
            values.append(value)
            self.latest[key] = value
        self.written += count
        return build_batch(keys, values, [now_ms] * count, compression="zstd")

    def check_and_print(self, console: Console, manager: LogManager) -> None:
        """The compacted log must still give every user's latest profile; print what the cleaner did."""
        on_disk: dict[bytes, bytes | None] = {}
        records = 0
        for record in manager.consume("profiles"):
            on_disk[record.key] = record.value
            records += 1
        live = {k: v for k, v in self.latest.items() if v is not None}
        if {k: v for k, v in on_disk.items() if v is not None} != live:
            raise SystemExit("profiles: compaction lost or resurrected a profile")
        status = manager.cleaner.status.get(TopicPartition("profiles", 0))
        if status is None:
            raise SystemExit("profiles: the log cleaner never cleaned the compacted topic")
        explanation = manager.explain_compaction("profiles", 0)
        table = Table(title="Compacted topic 'profiles' (cleaned by the scheduled log cleaner)")
        for column in ("updates written", "records left", "users with a profile", "bytes on disk",
                       "cleaner read", "cleaner wrote", "dirty ratio now"):  # fmt: skip
            table.add_column(column, justify="right")
        size = manager.get_log("profiles").size
        table.add_row(f"{self.written:,}", f"{records:,}", f"{len(live):,}", f"{size:,}", f"{status.bytes_read:,}",
                      f"{status.bytes_written:,}", f"{explanation.dirty_ratio:.2f}")  # fmt: skip
        console.print(table)
        console.print(explanation.summary)


def print_topic(console: Console, manager: LogManager, produced: int, retained: int) -> None:
    description = manager.describe_topic("clicks")
    table = Table(
        title=f"Part 2: topic clicks after 2 simulated hours ({produced:,} events, "
        f"{produced - retained:,} expired by retention.ms=1h)"
    )
    for column in ("partition", "log start", "log end", "segments", "bytes"):
        table.add_column(column, justify="right")
    for p in description.partitions:
        table.add_row(
            str(p.partition), f"{p.log_start_offset:,}", f"{p.log_end_offset:,}", str(p.segments), f"{p.size_bytes:,}"
        )
    console.print(table)


def print_retention(console: Console, explanation, start: int) -> None:
    def minutes(ms: int | None) -> str:
        return "-" if ms is None else f"+{(ms - start) / 60_000:.1f} min"

    table = Table(title="Why is this data still here? explain_retention('clicks', 0), first 6 segments")
    for column in ("base offset", "largest timestamp", "bytes", "rule", "deleted at", "files gone", "reason"):
        table.add_column(column, justify="left" if column == "reason" else "right")
    for seg in explanation.segments[:6]:
        table.add_row(
            f"{seg.base_offset:,}",
            minutes(seg.largest_timestamp),
            f"{seg.size_bytes:,}",
            seg.rule or "-",
            minutes(seg.deleted_at_ms),
            minutes(seg.files_gone_at_ms),
            seg.reason[:70],
        )
    console.print(table)


def run_spark(console: Console, log_dir: Path, expected_records: int, out_dir: Path) -> None:
    """Part 3: read the topic back with Spark (batch, and a stream with AvailableNow), aggregate it, and write
    the aggregates to a compacted topic through the ``kafkalog`` sink and to Parquet."""
    from pyspark.sql import functions as F

    from .spark import local_session

    with LogManager(log_dir, {"log.cleaner.enable": "false"}) as manager:  # the sink's topic must exist
        manager.create_topic("click-stats", partitions=1, config={"cleanup.policy": "compact"})
    console.print("  starting a local Spark session (the JVM takes a while to start)...")
    # Spark's start-up warnings (hostname, native Hadoop) say nothing about the demo: its JVM logs errors only.
    quiet = out_dir / "log4j2-demo.properties"
    quiet.write_text(QUIET_LOG4J2, encoding="utf-8")
    spark = local_session(
        "kafkalog-demo", config={"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={quiet.as_uri()}"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        console.print("  batch query: reading every retained click through the kafkalog source...")
        source = spark.read.format("kafkalog").option("path", str(log_dir)).option("subscribe", "clicks")
        clicks = source.option("startingOffsets", "earliest").option("includeHeaders", "true").load()
        count = clicks.count()
        if count != expected_records:
            raise SystemExit(f"Spark read {count} records of clicks, the log holds {expected_records}")
        console.print(f"  batch query: {count:,} records, as many as the log holds; now the same as a stream...")
        streamed = stream_count(spark, log_dir, out_dir / "stream-checkpoint")
        console.print(f"  streaming query (Trigger.AvailableNow): {streamed:,} records; aggregating and writing...")
        if streamed != expected_records:
            raise SystemExit(
                f"The AvailableNow stream read {streamed} records of clicks, the log holds {expected_records}"
            )
        events = clicks.select(
            "partition",
            "offset",
            "timestamp",
            F.from_json(F.col("value").cast("string"), "event string, user string, amount double").alias("e"),
        )
        aggregates = events.groupBy(F.col("e.event").alias("event")).agg(
            F.count("*").alias("events"),
            F.countDistinct("e.user").alias("users"),
            F.round(F.sum("e.amount"), 2).alias("amount"),
            F.min("timestamp").alias("first"),
            F.max("timestamp").alias("last"),
        )
        summary = aggregates.orderBy(F.desc("events")).collect()
        aggregates.write.mode("overwrite").parquet(str(out_dir / "click-stats.parquet"))
        aggregates.select(
            F.col("event").cast("binary").alias("key"), F.to_json(F.struct("*")).cast("binary").alias("value")
        ).write.format("kafkalog").option("path", str(log_dir)).option("topic", "click-stats").mode("append").save()
        stats_topic = (
            spark.read.format("kafkalog").option("path", str(log_dir)).option("subscribe", "click-stats").load()
        )
        written = {bytes(r.key): json.loads(bytes(r.value)) for r in stats_topic.collect()}
    finally:
        spark.stop()
    if {k.decode(): v["events"] for k, v in written.items()} != {r["event"]: r["events"] for r in summary}:
        raise SystemExit("click-stats: the compacted topic does not hold the aggregates Spark computed")
    # The dir goes back to a LogManager, which serves what the Spark tasks appended and shuts down cleanly.
    with LogManager(log_dir, {"log.cleaner.enable": "false"}) as manager:
        if {r.key: json.loads(r.value) for r in manager.consume("click-stats")} != written:
            raise SystemExit("click-stats: the log manager does not serve what the Spark sink wrote")
    table = Table(title=f"Part 3: Spark reads the retained clicks ({count:,} records) through the kafkalog source")
    for column in ("event", "events", "users", "amount", "first (UTC)", "last (UTC)"):
        table.add_column(column, justify="left" if column == "event" else "right")
    for row in summary:
        table.add_row(
            row["event"],
            f"{row['events']:,}",
            f"{row['users']:,}",
            f"{row['amount']:,.2f}",
            str(row["first"])[:19],
            str(row["last"])[:19],
        )
    console.print(table)
    console.print(
        f"A streaming query (Trigger.AvailableNow) read the same {streamed:,} records. The aggregates went to the "
        f"compacted topic 'click-stats' ({len(written)} keys, through the kafkalog sink) and to "
        f"{out_dir / 'click-stats.parquet'}."
    )


def stream_count(spark, log_dir: Path, checkpoint: Path) -> int:
    """Read the whole topic with a streaming query (Trigger.AvailableNow, at most 15,000 offsets per
    micro-batch) into a memory sink, and count what it holds."""
    query = (
        spark.readStream.format("kafkalog")
        .option("path", str(log_dir))
        .option("subscribe", "clicks")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 15_000)
        .load()
        .writeStream.format("memory")
        .queryName("clicks_stream")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = sum(1 for progress in query.recentProgress if progress["numInputRows"] > 0)
    if batches < 2:
        raise SystemExit(f"maxOffsetsPerTrigger should have split the backlog, the stream made {batches} batch")
    return spark.table("clicks_stream").count()


def start_broker(log_dir: Path) -> tuple[subprocess.Popen, str, list[str]]:
    """``kafkalog serve`` on ``log_dir`` and a free loopback port; (process, bootstrap, its log lines)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from kafkalog.cli import main; main()",
            "serve",
            "--log-dirs",
            str(log_dir),
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            # The clicks carry part 2's simulated timestamps, hours old by the real clock this broker runs on:
            # its retention task would rightly delete them, so it is held off for the demo's minute.
            "--override",
            "log.initial.task.delay.ms=600000",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ),
    )
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        for line in proc.stderr:
            lines.append(line)
            m = re.search(r"Awaiting socket connections on (\S+:\d+)", line)
            if m and not found:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(60) or not found:
        proc.kill()
        raise SystemExit("kafkalog serve did not start:\n" + "".join(lines))
    return proc, found[0], lines


def run_broker(console: Console, log_dir: Path, expected_records: int) -> None:
    """Part 4: a real Kafka client against ``kafkalog serve`` on the log dir parts 2 and 3 wrote."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    console.print("  starting kafkalog serve on a free port...")
    proc, bootstrap, lines = start_broker(log_dir)
    console.print(f"  kafkalog serve is listening on {bootstrap}; kafka-python connects...")
    table = Table(title=f"Part 4: kafka-python against kafkalog serve on {bootstrap}")
    for column in ("step", "records", "seconds", "check"):
        table.add_column(column, justify="left" if column in ("step", "check") else "right")
    try:
        t0 = time.perf_counter()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        partitions = [KafkaTopicPartition("clicks", p) for p in range(4)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        read = 0
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            read += sum(len(records) for records in consumer.poll(timeout_ms=1000).values())
        consumer.close()
        if read != expected_records:
            raise SystemExit(f"the client read {read} clicks over the wire, the log holds {expected_records}")
        table.add_row("consume every retained click (Fetch)", f"{read:,}", f"{time.perf_counter() - t0:.2f}", "ok")

        t0 = time.perf_counter()
        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4", enable_idempotence=True)
        sent = [(b"order-%d" % i, json.dumps({"order": i, "amount": i % 97}).encode()) for i in range(1000)]
        futures = [producer.send("orders", key=k, value=v, headers=[("source", b"demo")]) for k, v in sent]
        offsets = [f.get(timeout=30).offset for f in futures]
        producer.close()
        table.add_row(
            "produce 1,000 orders (lz4, idempotent)", f"{len(offsets):,}", f"{time.perf_counter() - t0:.2f}", "ok"
        )
        t0 = time.perf_counter()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        orders = KafkaTopicPartition("orders", 0)
        consumer.assign([orders])
        consumer.seek_to_beginning(orders)
        back = []
        while len(back) < len(sent):
            back.extend((r.key, r.value) for records in consumer.poll(timeout_ms=1000).values() for r in records)
        consumer.close()
        if back != sent:
            raise SystemExit("the orders read back differ from the orders sent")
        table.add_row("consume the orders back", f"{len(back):,}", f"{time.perf_counter() - t0:.2f}", "ok")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    if code != 0:
        raise SystemExit(f"kafkalog serve exited {code}:\n" + "".join(lines[-20:]))
    console.print(table)
    console.print("kafkalog serve shut down cleanly (SIGTERM): " + lines[-1].strip())


PARTS = {
    1: "the record layer and the storage engine, one partition log per codec",
    2: "the log manager on a simulated clock: retention, compaction, restarts",
    3: "Spark: the kafkalog source (batch and stream) and sink",
    4: "kafkalog serve with a real Kafka client (kafka-python)",
}


def _proved(console: Console, part: int, text: str, started: float) -> None:
    console.print(
        f"[bold green]Part {part} proved[/bold green] ({time.perf_counter() - started:.0f} s): {text}", soft_wrap=True
    )


def run(out_dir: Path, records: int, batch_size: int, seed: int, parts: tuple[int, ...] = (1, 2, 3, 4)) -> int:
    console = Console() if sys.stdout.isatty() else Console(width=160)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    console.print(f"kafkalog demo: parts {', '.join(str(p) for p in parts)}; output in {out_dir}/")
    retained = 0
    if 1 in parts:
        started = time.perf_counter()
        console.print(f"[bold]Part 1[/bold]: {PARTS[1]} ({records:,} events each)...")
        run_codecs(console, out_dir, records, batch_size, seed)
        _proved(console, 1, f"{records:,} events in each of {len(CODEC_NAMES)} codecs were appended as Kafka "
                "appends them, recovered after a simulated crash, and read back identical through the log, the "
                "columnar decoder and a ListOffsets lookup.", started)  # fmt: skip
    if 2 in parts:
        started = time.perf_counter()
        console.print(f"[bold]Part 2[/bold]: {PARTS[2]}...")
        retained = run_manager(console, out_dir / "kafka-logs", seed)
        _proved(console, 2, "Kafka's retention check deleted exactly the expired segments of 'clicks' (each "
                f"of the {retained:,} retained records reads back as written), the log cleaner kept every user's "
                "latest profile, and a clean and an unclean restart lost nothing.", started)  # fmt: skip
    if 3 in parts:
        started = time.perf_counter()
        console.print(f"[bold]Part 3[/bold]: {PARTS[3]}...")
        run_spark(console, out_dir / "kafka-logs", retained, out_dir)
        _proved(console, 3, f"Spark read the same {retained:,} records as a batch and as a stream, and what its "
                "sink wrote is served by the log manager.", started)  # fmt: skip
    if 4 in parts:
        started = time.perf_counter()
        console.print(f"[bold]Part 4[/bold]: {PARTS[4]}...")
        run_broker(console, out_dir / "kafka-logs", retained)
        _proved(console, 4, "a Kafka client read every retained click over Kafka's protocol, produced 1,000 "
                "idempotent lz4 orders and read them back, and the broker shut down cleanly.", started)  # fmt: skip
    console.print(f"Log directories are in {out_dir}/ (Kafka's layout: segments, indexes, snapshots, checkpoints).")
    return 0


def _parts(text: str) -> tuple[int, ...]:
    try:
        chosen = tuple(sorted({int(p) for p in text.split(",") if p.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of part numbers: {text}") from None
    if not chosen or any(p not in PARTS for p in chosen):
        raise argparse.ArgumentTypeError(f"parts are 1 to 4, got {text}")
    if any(p in chosen for p in (3, 4)) and 2 not in chosen:
        raise argparse.ArgumentTypeError("parts 3 and 4 read the log dir part 2 writes: include part 2")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalog.demo", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("demo-output"), help="where the log directories go")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--parts", type=_parts, default=(1, 2, 3, 4), help="which parts to run, e.g. 1 or 1,2")
    args = parser.parse_args(argv)
    if 3 in args.parts:
        try:
            require_pyspark()  # part 3 needs it: say so before parts 1 and 2 run, not after them
        except PySparkMissingError as e:
            raise SystemExit(f"kafkalog demo: {e}") from e
    return run(args.out, args.records, args.batch_size, args.seed, args.parts)


if __name__ == "__main__":
    sys.exit(main())
