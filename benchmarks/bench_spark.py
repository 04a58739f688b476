"""The ``kafkalog`` Spark data source: a batch read of a 1 GiB, 8-partition topic against Parquet, and writes.

The issue: "``make bench`` reports rows/s and MB/s for a batch read of a 1 GiB, 8-partition topic through the
data source, against Spark reading the same records from Parquet in the same run. Goal: at least 0.5 of the
Parquet rate. Write throughput is reported against the embedded ``manager.produce`` path."

The topic (8 partitions, segment.bytes 64 MiB): a LogManager creates it and each partition is filled with
``Log.append(build_batch(...))`` of uncompressed v2 batches of 100-500 records (uniform), built column-wise
from numpy/Arrow buffers. Keys are 16 bytes (``user-`` and 11 digits, uniform over 1M keys); values are
200-500 bytes (uniform): the record's sequence number (8 bytes, big-endian), then a slice of a 1 MiB pool of
word text; timestamps are CreateTime, 1 ms apart. A second log dir holds the same topic with the very same
batches compressed with lz4 (same offsets, keys, values and timestamps), so every query has the same answer
on both. The manager is shut down cleanly (checkpoints written) before Spark reads. Files go to
$KAFKALOG_BENCH_DIR or the system temp dir and are removed at the end.

The baseline: the topic read once through the data source and written by Spark as Parquet (Spark's default
codec, snappy; and uncompressed as a second reference): the same rows and columns (key, value, topic,
partition, offset, timestamp, timestampType), one file per topic-partition.

The scans, in one local SparkSession (``kafkalog.spark.local_session``, ``local[*]``, driver heap 4g), page
cache warm: ``aggregate`` is ``df.selectExpr(count(*), sum(length(key)), sum(length(value)), max(offset),
max(unix_millis(timestamp)), max(topic), sum(partition), sum(timestampType)).collect()``, which makes both
sources produce every column of every row (a Python data source cannot prune columns, Parquet can: every
column is referenced so that it does not); ``noop`` is ``df.write.format("noop").mode("overwrite").save()``.
Each DataFrame is loaded once; each (source, query) runs once to warm up, then the timed runs of every source
are interleaved (round r starts r sources further on), and the figures are medians. rows/s counts the
topic's records, MB/s its log bytes (the ``.log`` files, 1 MB = 1e6 bytes) for every source, so the Parquet
and data-source MB/s compare like rows/s.
The goal compares the data source's aggregate scan with Parquet's (snappy), by median rows/s; the median of
the runs' own ratios (each round runs every source back to back) is reported beside it. Beside each wall
time, the CPU seconds the scan cost the JVM and the Python workers (utime + stime of the session's process
tree, from /proc) show where the work goes, and give the same ratio by CPU time, which other processes' load
on a shared machine inflates much less than wall time.

Diagnostics: ``minPartitions=16`` (the source splits each partition in two, at batch boundaries); an
``arrow passthrough`` Python data source, defined here, that plans the same input partitions but yields one
pre-decoded 65,536-row Arrow batch of the topic over and over (the same row count): the cost of Spark's
Python data source path itself (Python worker, Arrow to the JVM, rows), with no decoding; and
``KafkaLogBatchReader.read`` of one input partition called in this process (no Spark), single-threaded,
beside ``logfiles.read_range`` alone (the decoder, before the conversion to the source's Arrow schema), and
under cProfile.

Writes: N records (key, value) taken from the topic (its first N / 8 offsets of each partition), stored as
Parquet, and written as new records with ``df.write.format("kafkalog").option("path", dir).option("topic",
t).mode("append").save()`` into a fresh 8-partition topic (created by a LogManager that is then shut down;
the sink's defaults: idempotent, uncompressed, batch.size 16384, keyed records partitioned by murmur2). Same
run, references: the same DataFrame written to ``noop`` (what reading the input costs) and as Parquet
(Spark's own file sink); the sink's task code without Spark (``kafkalog.spark.writer.write_arrow`` in this
process, one task, single-threaded, Arrow batches of 10,000 rows as Spark hands them over); the embedded bulk
path (a running LogManager; murmur2 partitioning, ``build_batch`` of up to 16 KiB of records, ``Log.append``)
and the embedded per-record path, ``manager.produce(topic, value, key=key)`` for a sample of the records.
Every path's time includes making the appended data durable (the sink fsyncs when it closes each
partition; the embedded paths end with ``Log.flush`` of every partition). MB/s counts key and value bytes.

Correctness (the benchmark fails when wrong): every scan of the topic through the data source (main and lz4,
any minPartitions) and of Parquet returns the same aggregates, equal to those computed while building the
topic, and an untimed checksum (count and ``bit_xor(xxhash64(...))`` of all seven columns) agrees between the
data source and Parquet; the passthrough source returns the topic's row count; every written topic holds
exactly the rows written (count, key and value bytes, ``bit_xor(xxhash64(key, value))`` read back through the
data source), and the in-process read returns every record of its partition.

``--quick``: a 32 MiB topic (1 MiB segments), one timed run of everything and no warm-up, 16,000 records
written (2,000 produced): a smoke run of every path and check, its figures mostly Spark's fixed costs.
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql.datasource import DataSource, DataSourceReader

from . import common
from .bench_cleaner import key_table, value_data, word_pool

if TYPE_CHECKING:
    from rich.console import Console

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
GIB = 1 << 30
TOPIC = "bench"
KEY_BYTES = 16  # "user-" and 11 digits
VALUE_BYTES = (200, 500)  # inclusive range
BATCH_RECORDS = (100, 500)  # inclusive range
PREFIX_BYTES = 8  # each value starts with its record's sequence number, big-endian
POOL_BYTES = 1 << 20
BATCHES_PER_CHUNK = 100  # batches drawn and encoded per numpy pass while building
SINK_BATCH_BYTES = 16384  # the sink's batch.size default (Kafka's producer); the bulk reference uses it too
SPARK_ARROW_ROWS = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch default: rows per batch a sink task gets
RATE_GOAL = 0.5  # data source aggregate scan rows/s >= this x the Parquet (snappy) scan's
PASSTHROUGH_FORMAT = "kafkalog-bench-passthrough"
DRIVER_MEMORY = "4g"
MANAGER_CONFIG = {"log.initial.task.delay.ms": 3_600_000, "log.retention.check.interval.ms": 3_600_000}

AGGREGATE = (
    "count(*) AS rows",
    "sum(length(key)) AS key_bytes",
    "sum(length(value)) AS value_bytes",
    "max(offset) AS max_offset",
    "max(unix_millis(timestamp)) AS max_timestamp_ms",
    "max(topic) AS max_topic",
    "sum(partition) AS partition_sum",
    "sum(timestampType) AS timestamp_type_sum",
)
CHECKSUM = (
    "count(*) AS rows",
    "bit_xor(xxhash64(key, value, topic, partition, offset, timestamp, timestampType)) AS xor_hash",
)
WRITE_CHECK = (
    "count(*) AS rows",
    "sum(length(key)) AS key_bytes",
    "sum(length(value)) AS value_bytes",
    "bit_xor(xxhash64(key, value)) AS xor_hash",
)


@dataclass(frozen=True)
class Params:
    log_bytes: int = GIB
    partitions: int = 8
    segment_bytes: int = 64 * MIB
    keys: int = 1_000_000
    codecs: tuple[str, ...] = ("lz4",)  # the same records in a second log dir, compressed
    parquet_codecs: tuple[str, ...] = ("snappy", "none")  # the first is the goal's baseline (Spark's default)
    scan_repeats: int = 5
    min_partitions: int = 16
    inprocess_repeats: int = 5
    write_records: int = 2_000_000
    write_repeats: int = 3
    produce_records: int = 50_000
    warm_up: bool = True  # one untimed run of every scan and write first
    seed: int = 20240601


FULL = Params()
QUICK = Params(
    log_bytes=32 * MIB,
    segment_bytes=1 * MIB,
    keys=16_384,
    scan_repeats=1,
    inprocess_repeats=1,
    write_records=16_000,
    write_repeats=1,
    produce_records=2_000,
    warm_up=False,
)


# ----- the topic -----------------------------------------------------------------------------------


class Records:
    """The records of the topic, drawn chunk by chunk with a seeded generator."""

    def __init__(self, keys: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.keys = keys
        self.keytab = key_table(keys)
        self.pool = word_pool(self.rng)
        self.drawn = 0

    def draw(self):
        """The next chunk: (batch record counts, keys, values, sequence numbers) as numpy and Arrow arrays."""
        import pyarrow as pa

        counts = self.rng.integers(BATCH_RECORDS[0], BATCH_RECORDS[1] + 1, BATCHES_PER_CHUNK)
        n = int(counts.sum())
        ids = self.rng.integers(0, self.keys, n, dtype=np.int32)
        lens = self.rng.integers(VALUE_BYTES[0], VALUE_BYTES[1] + 1, n).astype(np.int16)
        starts = self.rng.integers(PREFIX_BYTES, POOL_BYTES - VALUE_BYTES[1], n).astype(np.int32)
        seq = np.arange(self.drawn, self.drawn + n, dtype=np.int64)
        self.drawn += n
        key_bounds = np.arange(n + 1, dtype=np.int64) * KEY_BYTES
        keys = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(key_bounds), pa.py_buffer(self.keytab[ids].reshape(-1))]
        )
        bounds, data = value_data(seq, lens, starts, self.pool)
        values = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(bounds), pa.py_buffer(data)]
        )
        return counts, keys, values, lens, seq


def build_topics(root: Path, p: Params) -> dict[str, Any]:
    """The topic in ``root/none`` (uncompressed) and, batch for batch, in ``root/<codec>`` for each of
    ``p.codecs``: every partition filled to ``log_bytes / partitions`` of uncompressed batches."""
    from kafkalog.manager import LogManager
    from kafkalog.record import build_batch

    t0 = time.perf_counter()
    codecs = ("none", *p.codecs)
    managers = {c: LogManager([root / c], config=MANAGER_CONFIG) for c in codecs}
    for m in managers.values():
        m.startup()
    try:
        for m in managers.values():
            m.create_topic(TOPIC, p.partitions, config={"segment.bytes": str(p.segment_bytes)})
        records = Records(p.keys, p.seed)
        base_ts = (time.time_ns() // 1_000_000 - 86_400_000) // 1000 * 1000
        per_partition = p.log_bytes // p.partitions
        counts = np.zeros(p.partitions, np.int64)
        value_bytes = batches = 0
        max_ts = 0
        for part in range(p.partitions):
            logs = {c: m.get_log(TOPIC, part) for c, m in managers.items()}
            size = 0
            while size < per_partition:
                batch_counts, keys, values, lens, seq = records.draw()
                timestamps = base_ts + seq
                pos = 0
                for c in batch_counts.tolist():
                    args = (keys.slice(pos, c), values.slice(pos, c), timestamps[pos : pos + c])
                    for codec, lg in logs.items():
                        payload = build_batch(*args, compression=codec)
                        lg.append(payload)
                        if codec == "none":
                            size += len(payload)
                    batches += 1
                    pos += c
                    if size >= per_partition:
                        break
                counts[part] += pos
                value_bytes += int(lens[:pos].sum(dtype=np.int64))
                max_ts = max(max_ts, int(timestamps[pos - 1]))
        leos = {c: [m.get_log(TOPIC, i).log_end_offset for i in range(p.partitions)] for c, m in managers.items()}
    finally:
        for m in managers.values():
            m.shutdown()
    for codec, ends in leos.items():
        if ends != counts.tolist():
            raise AssertionError(f"{codec} topic: log end offsets {ends}, expected {counts.tolist()}")
    rows = int(counts.sum())
    expected = {
        "rows": rows,
        "key_bytes": rows * KEY_BYTES,
        "value_bytes": value_bytes,
        "max_offset": int(counts.max()) - 1,
        "max_timestamp_ms": max_ts,
        "max_topic": TOPIC,
        "partition_sum": int((counts * np.arange(p.partitions)).sum()),
        "timestamp_type_sum": 0,  # CreateTime
    }
    logs = {}
    for codec in codecs:
        files = sorted((root / codec).glob(f"{TOPIC}-*/*.log"))
        logs[codec] = {
            "path": str(root / codec),
            "bytes": sum(f.stat().st_size for f in files),
            "segments": len(files),
        }
    return {
        "records": rows,
        "batches": batches,
        "records_per_partition": counts.tolist(),
        "partitions": p.partitions,
        "target_bytes": p.log_bytes,
        "logs": logs,
        "expected": expected,
        "build_s": time.perf_counter() - t0,
    }


def read_files(paths: list[Path]) -> None:
    """Read files once (page cache warm)."""
    buf = bytearray(MIB)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


# ----- the passthrough data source (a diagnostic) ------------------------------------------------------------

_PASSTHROUGH_BATCHES: dict[str, Any] = {}


class PassthroughDataSource(DataSource):
    """Plans the kafkalog source's input partitions; each yields one cached 65,536-row Arrow batch of the
    topic (decoded once per Python worker) until it has produced as many rows as its offset range holds."""

    @classmethod
    def name(cls) -> str:
        return PASSTHROUGH_FORMAT

    def schema(self):
        from kafkalog.spark import KAFKA_SCHEMA

        return KAFKA_SCHEMA

    def reader(self, schema) -> PassthroughReader:
        return PassthroughReader(dict(self.options), schema)


class PassthroughReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema) -> None:
        from kafkalog.spark import KafkaLogBatchReader, parse_options

        self.inner = KafkaLogBatchReader(parse_options(options), schema)

    def partitions(self):
        return self.inner.partitions()

    def read(self, partition) -> Iterator[Any]:
        batch = _PASSTHROUGH_BATCHES.get(partition.directory)
        if batch is None:
            batch = _PASSTHROUGH_BATCHES[partition.directory] = next(iter(self.inner.read(partition)))
        left = partition.end - partition.start
        while left > 0:
            n = min(left, batch.num_rows)
            yield batch if n == batch.num_rows else batch.slice(0, n)
            left -= n


# ----- CPU time of the session's processes -------------------------------------------------------------------


def _process_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (ppid, kind, CPU seconds: utime + stime + reaped children's) of every readable process."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, str, float]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: CPU times are reported as 0
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = sum(int(x) for x in fields[11:15]) / tick
        kind = "jvm" if b"java" in cmdline.split(b"\0", 1)[0] else "python"
        out[int(entry)] = (int(fields[1]), kind, cpu)
    return out


def tree_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's descendants (the JVM, the Python workers) by kind, and of this
    process itself as 'driver'."""
    table = _process_table()
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out = {"jvm": 0.0, "python": 0.0}
    stack = list(children.get(me, []))
    while stack:
        pid = stack.pop()
        _, kind, cpu = table[pid]
        out[kind] += cpu
        stack += children.get(pid, [])
    times = os.times()
    out["driver"] = times.user + times.system
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: max(0.0, after[k] - before[k]) for k in before}


# ----- Spark ---------------------------------------------------------------------------------------------------


def start_spark():
    from kafkalog.spark import local_session

    # The Python workers import this module for the passthrough source.
    paths = [str(REPO), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    spark = local_session("kafkalog-bench", config={"spark.driver.memory": DRIVER_MEMORY})
    spark.dataSource.register(PassthroughDataSource)
    return spark


def kafkalog_df(spark, log_dir: str, topic: str = TOPIC, **options):
    reader = spark.read.format("kafkalog").option("path", log_dir).option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


def _row(row) -> dict[str, Any]:
    return {k: (int(v) if isinstance(v, np.integer) else v) for k, v in row.asDict().items()}


def run_query(df, query: str) -> tuple[float, dict[str, float], dict[str, Any] | None]:
    """(wall seconds, CPU seconds by process kind, the aggregate row or None) of one scan."""
    gc.collect()
    cpu0 = tree_cpu()
    t0 = time.perf_counter()
    if query == "aggregate":
        result = _row(df.selectExpr(*AGGREGATE).collect()[0])
    else:
        df.write.format("noop").mode("overwrite").save()
        result = None
    elapsed = time.perf_counter() - t0
    return elapsed, cpu_delta(cpu0, tree_cpu()), result


def _rotated(names: list[str], r: int) -> list[str]:
    """The round's order: round r starts r places further on, so no source always runs first or last."""
    k = r % len(names)
    return names[k:] + names[:k]


def scan_figures(times: list[float], cpus: list[dict[str, float]], rows: int, nbytes: int) -> dict[str, Any]:
    median = statistics.median(times)
    cpu = {k: statistics.median(c[k] for c in cpus) for k in cpus[0]}
    return {
        "rows_per_s": rows / median,
        "mb_per_s": nbytes / median / 1e6,
        "median_s": median,
        "best_s": min(times),
        "times_s": times,
        "cpu_s": cpu,
        "cpu_s_total": sum(cpu.values()),
        "rows_per_cpu_s": rows / sum(cpu.values()) if sum(cpu.values()) else None,
    }


def bench_scans(spark, topic: dict[str, Any], parquet: dict[str, str], p: Params, console: Console) -> dict[str, Any]:
    """Every source x query: one warm-up, then ``scan_repeats`` interleaved timed runs."""
    main_dir = topic["logs"]["none"]["path"]
    sources: dict[str, Any] = {"kafkalog": kafkalog_df(spark, main_dir)}
    sources[f"kafkalog minPartitions={p.min_partitions}"] = kafkalog_df(spark, main_dir, minPartitions=p.min_partitions)
    for codec in p.codecs:
        sources[f"kafkalog {codec}"] = kafkalog_df(spark, topic["logs"][codec]["path"])
    for codec, path in parquet.items():
        sources[f"parquet {codec}"] = spark.read.parquet(path)
    sources["arrow passthrough"] = (
        spark.read.format(PASSTHROUGH_FORMAT).option("path", main_dir).option("subscribe", TOPIC).load()
    )
    plan = {
        "aggregate": list(sources),
        "noop": ["kafkalog", f"kafkalog minPartitions={p.min_partitions}", f"parquet {p.parquet_codecs[0]}",
                 "arrow passthrough"],
    }  # fmt: skip
    expected = topic["expected"]
    rows = topic["records"]
    main_bytes = topic["logs"]["none"]["bytes"]
    out: dict[str, Any] = {}
    for query, names in plan.items():
        times: dict[str, list[float]] = {n: [] for n in names}
        cpus: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        for r in range(0 if p.warm_up else 1, p.scan_repeats + 1):
            label = "warm-up" if r == 0 else f"run {r} of {p.scan_repeats}"
            console.print(f"[dim]spark: {query} scans, {label}...[/]")
            for name in _rotated(names, r):
                elapsed, cpu, result = run_query(sources[name], query)
                if result is not None:
                    want = expected if name != "arrow passthrough" else None
                    if want is not None and result != want:
                        raise AssertionError(f"{name}: aggregate {result}, expected {want}")
                    if want is None and result["rows"] != rows:
                        raise AssertionError(f"{name}: {result['rows']} rows, expected {rows}")
                if r:
                    times[name].append(elapsed)
                    cpus[name].append(cpu)
        out[query] = {}
        for name in names:
            fig = scan_figures(times[name], cpus[name], rows, main_bytes)
            codec = name.split()[-1] if name.startswith("kafkalog ") and name.split()[-1] in p.codecs else None
            if codec is not None:  # its own (compressed) log bytes
                fig["log_mb_per_s"] = topic["logs"][codec]["bytes"] / fig["median_s"] / 1e6
            fig["tasks"] = sources[name].rdd.getNumPartitions()
            out[query][name] = fig
        base_name = f"parquet {p.parquet_codecs[0]}"
        base = out[query][base_name]
        for name, fig in out[query].items():
            fig["vs_parquet"] = fig["rows_per_s"] / base["rows_per_s"]
            # The same ratio run by run (each round times every source once, back to back), then the median.
            fig["vs_parquet_by_run"] = [b / t for b, t in zip(times[base_name], times[name], strict=True)]
            fig["vs_parquet_by_run_median"] = statistics.median(fig["vs_parquet_by_run"])
            fig["vs_parquet_cpu"] = (
                fig["rows_per_cpu_s"] / base["rows_per_cpu_s"]
                if fig["rows_per_cpu_s"] and base["rows_per_cpu_s"]
                else None
            )
    return out


def checksums(spark, topic: dict[str, Any], parquet: dict[str, str]) -> dict[str, Any]:
    """Untimed: count and bit_xor(xxhash64) of every column, equal across the data source and Parquet."""
    found = {}
    for codec, info in topic["logs"].items():
        found[f"kafkalog {codec}"] = _row(kafkalog_df(spark, info["path"]).selectExpr(*CHECKSUM).collect()[0])
    for codec, path in parquet.items():
        found[f"parquet {codec}"] = _row(spark.read.parquet(path).selectExpr(*CHECKSUM).collect()[0])
    first = next(iter(found.values()))
    if any(v != first for v in found.values()) or first["rows"] != topic["records"]:
        raise AssertionError(f"checksums differ: {found}")
    return {"ok": True, "sources": list(found), **first}


# ----- in-process read of one partition -------------------------------------------------------------------------


def bench_inprocess(topic: dict[str, Any], p: Params) -> dict[str, Any]:
    """KafkaLogBatchReader.read of input partition 0 in this process, and logfiles.read_range alone."""
    from kafkalog.spark import KafkaLogDataSource, logfiles

    directory = topic["logs"]["none"]["path"]
    source = KafkaLogDataSource({"path": directory, "subscribe": TOPIC})
    reader = source.reader(source.schema())
    partition = next(part for part in reader.partitions() if part.partition == 0)
    rows = partition.end - partition.start
    nbytes = sum(f.stat().st_size for f in Path(partition.directory).glob("*.log"))

    def via_reader() -> int:
        return sum(b.num_rows for b in reader.read(partition))

    def via_read_range() -> int:
        tables = logfiles.read_range(
            partition.directory, f"{TOPIC}-0", partition.start, partition.end, fail_on_data_loss=True
        )
        return sum(t.num_rows for t in tables)

    out: dict[str, Any] = {"partition": f"{TOPIC}-0", "rows": rows, "log_bytes": nbytes}
    for name, fn in (("reader_read", via_reader), ("read_range", via_read_range)):
        fn()  # warm-up
        times, cpus = [], []
        for _ in range(p.inprocess_repeats):
            gc.collect()
            t0, c0 = time.perf_counter(), time.thread_time()
            got = fn()
            times.append(time.perf_counter() - t0)
            cpus.append(time.thread_time() - c0)
            if got != rows:
                raise AssertionError(f"in-process {name}: {got} rows, expected {rows}")
        median = statistics.median(times)
        out[name] = {
            "rows_per_s": rows / median,
            "mb_per_s": nbytes / median / 1e6,
            "median_s": median,
            "times_s": times,
            "cpu_s": statistics.median(cpus),
        }
    profiler = cProfile.Profile()
    profiler.enable()
    via_reader()
    profiler.disable()
    total, prof_rows = common.profile_rows(profiler)
    out["profile"] = {"total_s": total, "by_own_time": prof_rows[:15]}
    return out


# ----- writes ---------------------------------------------------------------------------------------------------


def _new_topic(log_dir: Path, partitions: int):
    """A LogManager on ``log_dir`` with an empty topic 'w' of ``partitions`` partitions (started)."""
    from kafkalog.manager import LogManager

    manager = LogManager([log_dir], config=MANAGER_CONFIG)
    manager.startup()
    manager.create_topic("w", partitions)
    return manager


def _log_bytes(log_dir: Path) -> int:
    return sum(f.stat().st_size for f in log_dir.glob("w-*/*.log"))


def _check_written(spark, log_dir: Path, expected: dict[str, Any], what: str) -> None:
    found = _row(kafkalog_df(spark, str(log_dir), "w").selectExpr(*WRITE_CHECK).collect()[0])
    if found != expected:
        raise AssertionError(f"{what}: the written topic holds {found}, expected {expected}")


def write_bulk(manager, keys, values, partitions: int) -> None:
    """The embedded bulk path: murmur2 partitions, build_batch of up to SINK_BATCH_BYTES of records per batch,
    Log.append, then Log.flush of every partition."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kafkalog.record import build_batch
    from kafkalog.record.partitioner import murmur2_partitions

    now = time.time_ns() // 1_000_000
    assigned = murmur2_partitions(keys, partitions)
    sizes = pc.binary_length(keys).to_numpy() + pc.binary_length(values).to_numpy() + 10
    for part in range(partitions):
        rows = np.flatnonzero(assigned == part)
        if not len(rows):
            continue
        index = pa.array(rows)
        k, v = keys.take(index), values.take(index)
        cumulative = np.cumsum(sizes[rows])
        cuts = np.searchsorted(cumulative, np.arange(SINK_BATCH_BYTES, int(cumulative[-1]), SINK_BATCH_BYTES))
        bounds = np.unique(np.concatenate([[0], cuts, [len(rows)]]))
        lg = manager.get_log("w", part)
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            lg.append(build_batch(k.slice(a, b - a), v.slice(a, b - a), np.full(b - a, now, np.int64)))
        lg.flush(include_active=True)


def write_produce(manager, keys: list[bytes], values: list[bytes], partitions: int) -> None:
    """The embedded per-record path: manager.produce per record, then Log.flush of every partition."""
    produce = manager.produce
    for key, value in zip(keys, values, strict=True):
        produce("w", value, key=key)
    for part in range(partitions):
        manager.get_log("w", part).flush(include_active=True)


def write_figures(times: list[float], records: int, payload: int, log_bytes: list[int]) -> dict[str, Any]:
    median = statistics.median(times)
    return {
        "records": records,
        "records_per_s": records / median,
        "mb_per_s": payload / median / 1e6,
        "log_mb_per_s": statistics.median(log_bytes) / median / 1e6,
        "median_s": median,
        "best_s": min(times),
        "times_s": times,
        "log_bytes": statistics.median(log_bytes),
    }


def bench_writes(spark, topic: dict[str, Any], root: Path, p: Params, console: Console) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from pyspark.sql.types import BinaryType, StructField, StructType

    from kafkalog.spark.writer import WriterIdentity, write_arrow

    per = [p.write_records // p.partitions] * p.partitions
    per[0] += p.write_records - sum(per)
    ending = json.dumps({TOPIC: {str(i): n for i, n in enumerate(per)}})
    source_dir = root / "write-source.parquet"
    kafkalog_df(spark, topic["logs"]["none"]["path"], endingOffsets=ending).select("key", "value").write.mode(
        "overwrite"
    ).parquet(str(source_dir))
    src = spark.read.parquet(str(source_dir))
    expected = _row(src.selectExpr(*WRITE_CHECK).collect()[0])
    if expected["rows"] != p.write_records:
        raise AssertionError(f"write source: {expected['rows']} rows, expected {p.write_records}")
    payload = expected["key_bytes"] + expected["value_bytes"]
    table = pq.read_table(source_dir).combine_chunks()
    keys, values = table.column("key").chunk(0), table.column("value").chunk(0)
    sample = table.slice(0, p.produce_records)
    sample_expected = _row(spark.createDataFrame(sample).selectExpr(*WRITE_CHECK).collect()[0])
    sample_payload = sample_expected["key_bytes"] + sample_expected["value_bytes"]
    sample_keys, sample_values = sample.column("key").to_pylist(), sample.column("value").to_pylist()
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    batches = table.to_batches(max_chunksize=SPARK_ARROW_ROWS)
    counter = iter(range(1 << 30))

    def fresh() -> Path:
        return root / f"write-{next(counter)}"

    def spark_sink() -> tuple[float, int]:
        log_dir = fresh()
        _new_topic(log_dir, p.partitions).shutdown()
        t0 = time.perf_counter()
        src.write.format("kafkalog").option("path", str(log_dir)).option("topic", "w").mode("append").save()
        elapsed = time.perf_counter() - t0
        _check_written(spark, log_dir, expected, "kafkalog sink")
        nbytes = _log_bytes(log_dir)
        shutil.rmtree(log_dir)
        return elapsed, nbytes

    def spark_noop() -> tuple[float, int]:
        t0 = time.perf_counter()
        src.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0, 0

    def spark_parquet() -> tuple[float, int]:
        out_dir = fresh()
        t0 = time.perf_counter()
        src.write.parquet(str(out_dir))
        elapsed = time.perf_counter() - t0
        nbytes = sum(f.stat().st_size for f in out_dir.glob("*.parquet"))
        shutil.rmtree(out_dir)
        return elapsed, nbytes

    def inprocess_sink() -> tuple[float, int]:
        log_dir = fresh()
        _new_topic(log_dir, p.partitions).shutdown()
        identity = WriterIdentity(f"bench:{log_dir.name}", 0)
        t0 = time.perf_counter()
        message = write_arrow({"path": str(log_dir), "topic": "w"}, schema, batches, identity)
        elapsed = time.perf_counter() - t0
        if message.appended != p.write_records:
            raise AssertionError(f"write_arrow appended {message.appended}, expected {p.write_records}")
        _check_written(spark, log_dir, expected, "write_arrow")
        nbytes = _log_bytes(log_dir)
        shutil.rmtree(log_dir)
        return elapsed, nbytes

    def embedded(kind: str) -> tuple[float, int]:
        log_dir = fresh()
        manager = _new_topic(log_dir, p.partitions)
        try:
            t0 = time.perf_counter()
            if kind == "bulk":
                write_bulk(manager, keys, values, p.partitions)
            else:
                write_produce(manager, sample_keys, sample_values, p.partitions)
            elapsed = time.perf_counter() - t0
        finally:
            manager.shutdown()
        _check_written(spark, log_dir, expected if kind == "bulk" else sample_expected, f"embedded {kind}")
        nbytes = _log_bytes(log_dir)
        shutil.rmtree(log_dir)
        return elapsed, nbytes

    paths: dict[str, tuple[Callable[[], tuple[float, int]], int, int]] = {
        "kafkalog sink (Spark)": (spark_sink, p.write_records, payload),
        "noop sink (Spark, reads the input only)": (spark_noop, p.write_records, payload),
        "parquet sink (Spark)": (spark_parquet, p.write_records, payload),
        "kafkalog sink task, no Spark (write_arrow)": (inprocess_sink, p.write_records, payload),
        "embedded bulk: build_batch + Log.append": (lambda: embedded("bulk"), p.write_records, payload),
        "embedded per record: manager.produce": (lambda: embedded("produce"), p.produce_records, sample_payload),
    }
    results: dict[str, tuple[list[float], list[int]]] = {name: ([], []) for name in paths}
    for r in range(0 if p.warm_up else 1, p.write_repeats + 1):
        label = "warm-up" if r == 0 else f"run {r} of {p.write_repeats}"
        console.print(f"[dim]spark: writes, {label}...[/]")
        for name in _rotated(list(paths), r):
            gc.collect()
            elapsed, nbytes = paths[name][0]()
            if r:
                results[name][0].append(elapsed)
                results[name][1].append(nbytes)
    out = {
        name: write_figures(results[name][0], records, nbytes, results[name][1])
        for name, (_, records, nbytes) in paths.items()
    }
    sink = out["kafkalog sink (Spark)"]
    for fig in out.values():
        fig["sink_vs_this"] = sink["records_per_s"] / fig["records_per_s"]
    out["kafkalog sink (Spark)"]["log_bytes_per_record"] = sink["log_bytes"] / p.write_records
    shutil.rmtree(source_dir, ignore_errors=True)
    return {
        "records": p.write_records,
        "payload_bytes": payload,
        "produce_records": p.produce_records,
        "produce_payload_bytes": sample_payload,
        "paths": out,
        "checked": True,
    }


# ----- report ---------------------------------------------------------------------------------------------------


def _size_label(nbytes: int) -> str:
    unit, name = (GIB, "GiB") if nbytes >= GIB else (MIB, "MiB") if nbytes >= MIB else (1024, "KiB")
    value = nbytes / unit
    return f"{value:.0f} {name}" if value.is_integer() else f"{value:.2f} {name}"


_ok = common.ok_mark


def _java_version() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        proc = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30, check=False)
        lines = (proc.stderr or proc.stdout).splitlines()
        return lines[0] if lines else None
    return None


def machine_info(spark, scratch: Path) -> dict[str, Any]:
    from importlib import metadata

    conf = spark.sparkContext.getConf()
    return common.platform_info() | {
        "scratch_dir": str(scratch.parent),
        "java": _java_version(),
        "pyspark": metadata.version("pyspark"),
        "pyarrow": metadata.version("pyarrow"),
        "numpy": np.__version__,
        "spark_master": spark.sparkContext.master,
        "spark_default_parallelism": spark.sparkContext.defaultParallelism,
        "spark_driver_memory": conf.get("spark.driver.memory"),
        "jvm_max_heap_bytes": int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()),
    }


def print_tables(result: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    p = result["parameters"]
    t = result["topic"]
    warm = " after a warm-up" if p["warm_up"] else ""
    table = Table(
        title=f"Batch read: a full scan of the {_size_label(t['target_bytes'])}, {t['partitions']}-partition topic "
        "through the kafkalog data source vs Parquet, same records, same session",
        caption=f"medians of {p['scan_repeats']} runs{warm}, interleaved; {t['records']:,} rows, "
        f"{t['logs']['none']['bytes'] / 1e6:,.0f} MB of log (uncompressed) for every source's MB/s; "
        "CPU s: JVM / Python workers per scan (process tree, /proc); vs parquet: rows/s over Parquet's "
        f"({p['parquet_codecs'][0]}); run by run: median of the runs' own ratios; by CPU: rows per CPU second "
        "over Parquet's; aggregate = every column reduced, noop = df.write.format('noop'); arrow passthrough = "
        "a Python data source yielding pre-decoded Arrow batches (no decoding): Spark's Python data source path",
    )
    for col in ("source", "query", "tasks", "rows/s", "MB/s", "median s", "CPU s JVM / Py", "vs parquet",
                "run by run", "by CPU"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("source", "query") else "right")
    for query, figs in result["scans"].items():
        for name, fig in figs.items():
            cpu = fig["cpu_s"]
            table.add_row(
                name,
                query,
                str(fig["tasks"]),
                f"{fig['rows_per_s']:,.0f}",
                f"{fig['mb_per_s']:,.1f}",
                f"{fig['median_s']:.2f}",
                f"{cpu['jvm']:.1f} / {cpu['python']:.1f}",
                f"{fig['vs_parquet']:.3f}x",
                f"{fig['vs_parquet_by_run_median']:.3f}x",
                f"{fig['vs_parquet_cpu']:.3f}x" if fig["vs_parquet_cpu"] else "n/a",
            )
        table.add_section()
    console.print(table)

    ip = result["inprocess_read"]
    table = Table(
        title=f"In-process read of one input partition ({ip['partition']}, {ip['rows']:,} rows, "
        f"{ip['log_bytes'] / 1e6:,.0f} MB), no Spark, one thread",
        caption="reader_read = KafkaLogBatchReader.read (decode + conversion to the source's Arrow schema), "
        "read_range = logfiles.read_range (decode only); x cores = the rate if every core did this",
    )
    for col in ("path", "rows/s", "MB/s", "median s", "CPU s", f"rows/s x {result['machine']['cpu_count']} cores",
                "Spark scan / that"):  # fmt: skip
        table.add_column(col, justify="left" if col == "path" else "right")
    spark_rate = result["scans"]["aggregate"]["kafkalog"]["rows_per_s"]
    cores = result["machine"]["cpu_count"] or 1
    for name in ("reader_read", "read_range"):
        fig = ip[name]
        table.add_row(
            name,
            f"{fig['rows_per_s']:,.0f}",
            f"{fig['mb_per_s']:,.1f}",
            f"{fig['median_s']:.3f}",
            f"{fig['cpu_s']:.3f}",
            f"{fig['rows_per_s'] * cores:,.0f}",
            f"{spark_rate / (fig['rows_per_s'] * cores):.3f}",
        )
    console.print(table)

    w = result["writes"]
    table = Table(
        title=f"Writes: {w['records']:,} records (key + value {w['payload_bytes'] / 1e6:,.0f} MB) into a fresh "
        f"{t['partitions']}-partition topic; manager.produce: a sample of {w['produce_records']:,}",
        caption=f"medians of {p['write_repeats']} runs{warm}; every kafkalog path ends durable (fsync); "
        "MB/s = key + value bytes; log MB/s = bytes appended to the .log files; sink vs = the Spark sink's "
        "records/s over this path's",
    )
    for col in ("path", "records", "records/s", "MB/s", "log MB/s", "median s", "sink vs"):
        table.add_column(col, justify="left" if col == "path" else "right")
    for name, fig in w["paths"].items():
        table.add_row(
            name,
            f"{fig['records']:,}",
            f"{fig['records_per_s']:,.0f}",
            f"{fig['mb_per_s']:,.1f}",
            f"{fig['log_mb_per_s']:,.1f}" if fig["log_bytes"] else "-",
            f"{fig['median_s']:.2f}",
            f"{fig['sink_vs_this']:.3f}x",
        )
    console.print(table)

    goals = common.goals_table()
    g = result["goals_measured"]
    goals.add_row(
        f"data source scan (aggregate, rows/s) >= {RATE_GOAL:g}x Parquet ({p['parquet_codecs'][0]}), same records",
        f"{g['read_vs_parquet']:.3f}x (run by run {g['read_vs_parquet_by_run_median']:.3f}x; "
        f"noop {g['read_vs_parquet_noop']:.3f}x; "
        f"minPartitions={p['min_partitions']} {g['read_min_partitions_vs_parquet']:.3f}x; "
        f"by CPU {g['read_vs_parquet_cpu']:.3f}x)",
        _ok(result["goals_met"]["read_vs_parquet"]),
    )
    console.print(goals)

    prof = ip["profile"]
    title = f"cProfile: KafkaLogBatchReader.read of {ip['partition']} in this process, top by own time"
    console.print(
        common.profile_table(title, prof["by_own_time"], caption=f"total {prof['total_s']:.2f} s under cProfile")
    )


def run(*, quick: bool = False, results_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the Spark benchmark, write ``results_dir/spark.json``, print the tables; return the result."""
    from rich.console import Console

    console = console or Console()
    p = QUICK if quick else FULL
    started = time.perf_counter()
    parent = os.environ.get("KAFKALOG_BENCH_DIR") or tempfile.gettempdir()
    root = Path(tempfile.mkdtemp(prefix="kafkalog-bench-spark-", dir=parent))
    spark = None
    try:
        codecs = " + ".join(("none", *p.codecs))
        console.print(f"[dim]spark: building the {_size_label(p.log_bytes)} topic ({codecs})...[/]")
        topic = build_topics(root / "logs", p)
        read_files(sorted((root / "logs").glob(f"*/{TOPIC}-*/*.log")))
        console.print("[dim]spark: starting the session...[/]")
        t0 = time.perf_counter()
        spark = start_spark()
        session_s = time.perf_counter() - t0
        parquet: dict[str, str] = {}
        parquet_info: dict[str, Any] = {}
        for codec in p.parquet_codecs:
            console.print(f"[dim]spark: writing the Parquet baseline ({codec})...[/]")
            path = root / f"parquet-{codec}"
            t0 = time.perf_counter()
            kafkalog_df(spark, topic["logs"]["none"]["path"]).write.option("compression", codec).parquet(str(path))
            files = sorted(path.glob("*.parquet"))
            parquet[codec] = str(path)
            parquet_info[codec] = {
                "bytes": sum(f.stat().st_size for f in files),
                "files": len(files),
                "write_s": time.perf_counter() - t0,
            }
            read_files(files)
        console.print("[dim]spark: checksums...[/]")
        check = checksums(spark, topic, parquet)
        scans = bench_scans(spark, topic, parquet, p, console)
        console.print("[dim]spark: in-process read of one partition...[/]")
        inprocess = bench_inprocess(topic, p)
        writes = bench_writes(spark, topic, root, p, console)
        machine = machine_info(spark, root)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    agg, noop = scans["aggregate"], scans["noop"]
    base = f"parquet {p.parquet_codecs[0]}"
    measured = {
        "read_vs_parquet": agg["kafkalog"]["vs_parquet"],
        "read_vs_parquet_by_run_median": agg["kafkalog"]["vs_parquet_by_run_median"],
        "read_vs_parquet_noop": noop["kafkalog"]["vs_parquet"],
        "read_min_partitions_vs_parquet": agg[f"kafkalog minPartitions={p.min_partitions}"]["vs_parquet"],
        "read_vs_parquet_cpu": agg["kafkalog"]["vs_parquet_cpu"],
        "read_rows_per_s": agg["kafkalog"]["rows_per_s"],
        "read_mb_per_s": agg["kafkalog"]["mb_per_s"],
        "parquet_rows_per_s": agg[base]["rows_per_s"],
        "parquet_mb_per_s": agg[base]["mb_per_s"],
        "passthrough_vs_parquet": agg["arrow passthrough"]["vs_parquet"],
        "sink_records_per_s": writes["paths"]["kafkalog sink (Spark)"]["records_per_s"],
        "sink_vs_produce": writes["paths"]["embedded per record: manager.produce"]["sink_vs_this"],
        "sink_vs_bulk": writes["paths"]["embedded bulk: build_batch + Log.append"]["sink_vs_this"],
    }
    goals_met = {"read_vs_parquet": measured["read_vs_parquet"] >= RATE_GOAL}
    result = {
        "benchmark": "spark",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine,
        "parameters": {
            **asdict(p),
            "key_bytes": KEY_BYTES,
            "value_bytes": list(VALUE_BYTES),
            "batch_records": list(BATCH_RECORDS),
            "sink_batch_bytes": SINK_BATCH_BYTES,
            "aggregate_query": list(AGGREGATE),
            "checksum_query": list(CHECKSUM),
            "write_check_query": list(WRITE_CHECK),
            "statistic": "medians of the timed runs after one warm-up, runs of the sources interleaved; wall "
            "time with time.perf_counter around the action; CPU seconds from /proc of this process's descendants "
            "(the JVM and its Python workers)",
            "workload": "keys 16 bytes uniform over `keys` distinct keys; values 200-500 bytes (sequence number, "
            "then word text); batches of 100-500 records via build_batch, Log.append into a LogManager topic; "
            "CreateTime timestamps 1 ms apart; the codec topics hold the same batches compressed",
            "baseline": "the topic read through the data source and written with df.write.parquet (one file per "
            "topic-partition), compression as named",
            "mb": "1 MB = 1e6 bytes; read MB/s counts the uncompressed topic's .log bytes for every source; "
            "write MB/s counts key + value bytes",
        },
        "session_start_s": session_s,
        "topic": topic,
        "parquet": parquet_info,
        "checksum": check,
        "scans": scans,
        "inprocess_read": inprocess,
        "writes": writes,
        "goals": {"read_vs_parquet": RATE_GOAL},
        "goals_measured": measured,
        "goals_met": goals_met,
        "all_goals_met": all(goals_met.values()),
        "elapsed_s": time.perf_counter() - started,
    }
    return common.finish(results_dir, "spark", result, console, print_tables, machine["scratch_dir"])
