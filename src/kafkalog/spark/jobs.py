"""Pipeline jobs on Spark: ``export`` (topic → Parquet, incremental), ``ingest`` (files → topic), ``report``.

Each is an importable function taking a SparkSession; ``kafkalog spark export|ingest|report`` runs them on a
local session. They read and write through the ``kafkalog`` data source, so they follow its rules: readers
take no lock, writers take per-partition locks and refuse a log dir a running LogManager holds.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..cleaner.policy import segment_dirty_ratio
from ..layout import CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, LOG_SUFFIX, REPLICATION_OFFSET_CHECKPOINT
from ..partition import readonly as logfiles
from ..record.batch import HEADER_SIZE_UP_TO_MAGIC
from ..record.scan import batch_size_at
from ..storage.config import LogConfig
from ..storage.retention import plan_topic_retention
from ..topic_store import TopicConfigStore

EXPORT_STATE_FILE = "_kafkalog_offsets.json"


# ----- export ------------------------------------------------------------------------------------------
@dataclass
class ExportResult:
    """One export run: the offset range per partition it wrote (start inclusive, end exclusive) and rows."""

    topic: str
    output: str
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    rows: int = 0
    run_dir: str | None = None

    @property
    def up_to_date(self) -> bool:
        return self.rows == 0


def _latest_offsets(log_dirs: list[str], topic: str) -> dict[int, tuple[int, int]]:
    """partition → (log start, latest offset) of ``topic`` from the files, as the source resolves them."""
    found = {key: part for key, part in logfiles.discover(log_dirs).items() if key[0] == topic}
    if not found:
        raise ValueError(f"Topic '{topic}' has no partition in {', '.join(log_dirs)}")
    out = {}
    for (_, partition), part in sorted(found.items()):
        offsets = _partition_offsets(part)
        out[partition] = (offsets.log_start, offsets.latest)
    return out


def _partition_offsets(part: logfiles.PartitionDir) -> logfiles.PartitionOffsets:
    """A partition's log start, log end and latest offset, as the source resolves them."""
    starts = logfiles.read_checkpoint(part.log_dir, LOG_START_OFFSET_CHECKPOINT)
    hws = logfiles.read_checkpoint(part.log_dir, REPLICATION_OFFSET_CHECKPOINT)
    mtime = logfiles.checkpoint_mtime_ns(part.log_dir, REPLICATION_OFFSET_CHECKPOINT)
    return logfiles.partition_offsets(part, starts, hws, mtime)


def _read_state(output: Path, topic: str) -> dict[int, int]:
    path = output / EXPORT_STATE_FILE
    if not path.exists():
        return {}
    state = json.loads(path.read_text(encoding="utf-8"))
    return {int(p): int(o) for p, o in state.get(topic, {}).items()}


def _write_state(output: Path, topic: str, next_offsets: dict[int, int]) -> None:
    path = output / EXPORT_STATE_FILE
    state = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    state[topic] = {str(p): o for p, o in sorted(next_offsets.items())}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def export(
    spark,
    log_dirs: list[str],
    topic: str,
    output: str,
    *,
    fmt: str = "parquet",
    include_headers: bool = True,
    progress: bool = False,
) -> ExportResult:
    """Append the records of ``topic`` not exported yet to ``output`` (incremental by offsets).

    The next offset per partition is kept in ``<output>/_kafkalog_offsets.json``, in the Kafka source's
    JSON shape. Each run writes one sub-directory ``offsets=<first>-<end>`` in overwrite mode, so a run
    repeated after a crash between the write and the state update replaces its own files instead of
    duplicating them. Offsets removed by retention since the last run are skipped (the gap is reported).
    """
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    state = _read_state(out, topic)
    latest = _latest_offsets(log_dirs, topic)
    start = {p: max(state.get(p, log_start), log_start) for p, (log_start, _) in latest.items()}
    end = {p: hw for p, (_, hw) in latest.items()}
    ranges = {p: (start[p], end[p]) for p in latest if end[p] > start[p]}
    result = ExportResult(topic, output, ranges)
    if not ranges:
        return result
    starting = json.dumps({topic: {str(p): o for p, o in start.items()}})
    ending = json.dumps({topic: {str(p): o for p, o in end.items()}})
    df = (
        spark.read.format("kafkalog")
        .option("path", ",".join(log_dirs))
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("failOnDataLoss", "false")
        .option("includeHeaders", "true" if include_headers else "false")
        .load()
    )
    first = min(r[0] for r in ranges.values())
    last = max(r[1] for r in ranges.values())
    run_dir = out / f"offsets={first:020d}-{last:020d}"
    with _SparkProgress(spark, f"export {topic}", enabled=progress):
        df.write.mode("overwrite").format(fmt).save(str(run_dir))
    result.rows = spark.read.format(fmt).load(str(run_dir)).count()
    result.run_dir = str(run_dir)
    _write_state(out, topic, {**state, **end})
    return result


class _SparkProgress:
    """A rich progress bar of the tasks of the Spark jobs started while it is open (polls the status tracker)."""

    def __init__(self, spark, description: str, *, enabled: bool) -> None:
        self.spark = spark
        self.description = description
        self.enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _SparkProgress:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        tracker = self.spark.sparkContext.statusTracker()
        stages: dict[int, tuple[int, int]] = {}  # stage id → (tasks, completed), as last seen
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False
        ) as bar:
            task = bar.add_task(self.description, total=None)
            while not self._stop.wait(0.2):
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        stages[stage_id] = (info.numTasks, info.numCompletedTasks)
                total = sum(t for t, _ in stages.values())
                bar.update(task, total=total or None, completed=sum(c for _, c in stages.values()))
            total = max(sum(t for t, _ in stages.values()), 1)
            bar.update(task, total=total, completed=total)


# ----- ingest ------------------------------------------------------------------------------------------
def ingest(
    spark,
    source: str,
    log_dirs: list[str],
    topic: str,
    *,
    fmt: str = "json",
    key_column: str | None = None,
    value_column: str | None = None,
    read_options: dict[str, str] | None = None,
    write_options: dict[str, str] | None = None,
) -> int:
    """Write the rows of files (JSON, CSV, Parquet, any Spark format) to ``topic``; return the rows written.

    The key is ``key_column`` (as UTF-8 bytes) when given, else null (round-robin partitioning); the value
    is ``value_column``, or the whole row as JSON.
    """
    from pyspark.sql import functions as F

    df = spark.read.format(fmt).options(**(read_options or {})).load(source)
    if key_column is not None and key_column not in df.columns:
        raise ValueError(f"Key column '{key_column}' is not in the input ({', '.join(df.columns)})")
    if value_column is not None:
        if value_column not in df.columns:
            raise ValueError(f"Value column '{value_column}' is not in the input ({', '.join(df.columns)})")
        value = F.col(value_column).cast("string").cast("binary")
    else:
        value = F.to_json(F.struct(*[F.col(c) for c in df.columns])).cast("binary")
    key = F.col(key_column).cast("string").cast("binary") if key_column else F.lit(None).cast("binary")
    out = df.select(key.alias("key"), value.alias("value"))
    rows = out.count()
    writer = out.write.format("kafkalog").option("path", ",".join(log_dirs)).option("topic", topic)
    writer.options(**(write_options or {})).mode("append").save()
    return rows


# ----- report ------------------------------------------------------------------------------------------
SEGMENT_REPORT_SCHEMA = pa.schema(
    [
        ("log_dir", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("base_offset", pa.int64()),
        ("next_offset", pa.int64()),
        ("bytes", pa.int64()),
        ("batches", pa.int64()),
        ("records", pa.int64()),
        ("min_timestamp", pa.int64()),
        ("max_timestamp", pa.int64()),
        ("active", pa.bool_()),
    ]
)


def _segment_rows(log_dir: str, directory: str, topic: str, partition: int) -> list[dict]:
    """One row per segment of a partition directory, from its batch headers (read-only, no lock)."""
    bases = logfiles.segment_bases(directory)
    rows = []
    for i, base in enumerate(bases):
        records = logfiles.open_segment(directory, base)
        if records is None:
            continue  # deleted under us
        try:
            size = records.size
            batches, records_count, next_offset, min_ts, max_ts = _scan_headers(records, base)
        finally:
            records.close()
        rows.append(
            {
                "log_dir": log_dir,
                "topic": topic,
                "partition": partition,
                "base_offset": base,
                "next_offset": next_offset,
                "bytes": size,
                "batches": batches,
                "records": records_count,
                "min_timestamp": min_ts,
                "max_timestamp": max_ts,
                "active": i == len(bases) - 1,
            }
        )
    return rows


def _scan_headers(records, base: int) -> tuple[int, int, int, int | None, int | None]:
    """(batches, records, next offset, min first timestamp, max timestamp) of a segment, from its batch
    headers read with ``pread`` (61 bytes per batch; a memory map of a file truncated under it would SIGBUS).
    A partial batch at the end ends the walk, as it ends a scan of the log."""
    batches = count = 0
    next_offset = base
    min_ts: int | None = None
    max_ts: int | None = None
    end = records.size
    pos = 0
    while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
        head = records.read(pos, 61)
        total = batch_size_at(head, 0, end - pos)
        if total is None:
            break
        magic = head[16]
        base_offset = int.from_bytes(head[0:8], "big", signed=True)
        if magic == 2:
            next_offset = base_offset + int.from_bytes(head[23:27], "big", signed=True) + 1
            batch_first = int.from_bytes(head[27:35], "big", signed=True)
            batch_max = int.from_bytes(head[35:43], "big", signed=True)
            count += int.from_bytes(head[57:61], "big", signed=True)
        else:
            next_offset = base_offset + 1
            batch_max = batch_first = -1
            count += 1
        batches += 1
        if batch_max >= 0:
            max_ts = batch_max if max_ts is None else max(max_ts, batch_max)
        if batch_first >= 0:
            min_ts = batch_first if min_ts is None else min(min_ts, batch_first)
        pos += total
    return batches, count, next_offset, min_ts, max_ts


def _scan_partition(item: dict) -> list[tuple]:
    """Spark task body: one partition directory in, its segment rows out (as tuples in schema order)."""
    rows = _segment_rows(item["log_dir"], item["directory"], item["topic"], item["partition"])
    return [tuple(row[f.name] for f in SEGMENT_REPORT_SCHEMA) for row in rows]


@dataclass
class PartitionReport:
    """One partition's totals, what retention would delete at a check now, and its compaction dirty ratio."""

    topic: str
    partition: int
    log_dir: str
    segments: int
    bytes: int
    records: int
    min_timestamp: int | None
    max_timestamp: int | None
    cleanup_policy: str
    retention_deletes_segments: int
    retention_deletes_bytes: int
    dirty_ratio: float | None


def _topic_configs(log_dirs: list[str]) -> dict[str, dict]:
    """Each topic's config overrides from kafkalog-topics.json (read only; Kafka's defaults otherwise)."""
    store = TopicConfigStore([Path(d) for d in log_dirs]).load()
    return {name: dict(store.get(name).config) for name in store.topics()}


def report(spark, log_dirs: list[str], *, output: str | None = None, now_ms: int | None = None):
    """Segment analytics over many log dirs: Spark tasks scan the partitions' segment headers in parallel.

    Returns (segment rows as a Spark DataFrame, one PartitionReport per partition). With ``output`` the
    segment rows are also written as Parquet. Retention uses each topic's configs (kafkalog-topics.json,
    else Kafka's defaults) at a check run ``now_ms``; the dirty ratio follows the cleaner-offset-checkpoint.
    """
    parts = logfiles.discover(log_dirs)
    items = [
        {"log_dir": p.log_dir, "directory": p.directory, "topic": p.topic, "partition": p.partition}
        for p in parts.values()
    ]
    slices = max(1, min(len(items), spark.sparkContext.defaultParallelism * 2))
    scanned = spark.sparkContext.parallelize(items, slices).flatMap(_scan_partition)
    segments = spark.createDataFrame(scanned, _spark_schema())
    rows = segments.collect()
    if output is not None:
        spark.createDataFrame(rows, _spark_schema()).write.mode("overwrite").parquet(output)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return segments, _partition_reports(rows, parts, _topic_configs(log_dirs), now)


def _spark_schema():
    from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

    types = {pa.string(): StringType(), pa.int32(): IntegerType(), pa.int64(): LongType(), pa.bool_(): BooleanType()}
    return StructType([StructField(f.name, types[f.type]) for f in SEGMENT_REPORT_SCHEMA])


def _partition_reports(rows, parts, configs: dict[str, dict], now: int) -> list[PartitionReport]:
    by_partition: dict[tuple[str, int], list] = {}
    for row in rows:
        by_partition.setdefault((row["topic"], row["partition"]), []).append(row)
    reports = []
    for key, segs in sorted(by_partition.items()):
        segs.sort(key=lambda r: r["base_offset"])
        config = LogConfig(configs.get(key[0], {}))
        part = parts[key]
        doomed = _retention_doomed(segs, part, config, now)
        checkpoint = logfiles.read_checkpoint(part.log_dir, CLEANER_OFFSET_CHECKPOINT).get(key)
        bases, sizes = [r["base_offset"] for r in segs], [r["bytes"] for r in segs]
        reports.append(
            PartitionReport(
                topic=key[0],
                partition=key[1],
                log_dir=part.log_dir,
                segments=len(segs),
                bytes=sum(r["bytes"] for r in segs),
                records=sum(r["records"] for r in segs),
                min_timestamp=min((r["min_timestamp"] for r in segs if r["min_timestamp"] is not None), default=None),
                max_timestamp=max((r["max_timestamp"] for r in segs if r["max_timestamp"] is not None), default=None),
                cleanup_policy=",".join(config.cleanup_policy),
                retention_deletes_segments=len(doomed),
                retention_deletes_bytes=sum(r["bytes"] for r in doomed),
                dirty_ratio=segment_dirty_ratio(bases, sizes, checkpoint, bases[-1]) if config.compact else None,
            )
        )
    return reports


@dataclass(frozen=True)
class _ReportSegment:
    """A segment row as the retention planner reads it (a ``storage.retention.RetentionSegment``)."""

    row: Any
    directory: str

    @property
    def base_offset(self) -> int:
        return int(self.row["base_offset"])

    @property
    def size(self) -> int:
        return int(self.row["bytes"])

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the ``.log`` file's mtime when no record has one (as Kafka)."""
        if self.row["max_timestamp"] is not None:
            return int(self.row["max_timestamp"])
        try:
            return int(os.stat(logfiles.segment_path(self.directory, self.base_offset, LOG_SUFFIX)).st_mtime * 1000)
        except FileNotFoundError:
            return -1


def _retention_doomed(segs: list, part: logfiles.PartitionDir, config: LogConfig, now: int) -> list:
    """The segments a retention check at ``now`` deletes (``storage.retention.plan_topic_retention``: the log
    start, size and time rules, the active segment included when every segment goes)."""
    offsets = _partition_offsets(part)
    plan = plan_topic_retention(
        [_ReportSegment(r, part.directory) for r in segs],
        config,
        log_start_offset=offsets.log_start,
        log_end_offset=offsets.log_end,
        high_watermark=offsets.latest,
        now_ms=now,
    )
    return [segs[d.index] for d in plan.deletions]
