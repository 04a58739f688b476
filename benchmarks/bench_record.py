"""Record layer: records/s to build and to decode v2 batches, ours against kafka-python and aiokafka.

Every codec (none, gzip, snappy, lz4, zstd) goes through every implementation on the same data in the
same process. Build: append each record, then build the batch. Decode: from the bytes of a run of
batches to every record's fields (theirs: a record object per record, with the consumer's CRC check;
ours: one Arrow table, CRC checked). Each path is warmed up once (numba compiles on first call), then
timed ``repeats`` times with ``time.perf_counter``; the figure is the best (fastest) run, the median is
kept beside it. Goals, from the issue: build at least 3x kafka-python; columnar decode at least as fast
as aiokafka's Cython decoder.
"""

from __future__ import annotations

import gc
import platform
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from unittest import mock

from rich.console import Console
from rich.table import Table

from . import common

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

BUILD_GOAL = 3.0  # ours / kafka-python
DECODE_GOAL = 1.0  # ours (columnar, whole run) / aiokafka Cython

# Values are words drawn from a seeded vocabulary, like text or log lines: repeats within and across
# records let the LZ codecs (snappy, lz4) find matches too, not only the entropy coders (gzip, zstd).
VOCABULARY_WORDS = 512
WORD_LETTERS = b"abcdefghijklmnopqrstuvwxyz"
BASE_TIMESTAMP = 1_700_000_000_000
THEIR_BATCH_SIZE = 1 << 20  # kafka-python / aiokafka builders refuse records past batch_size: never here

# Codec levels each library uses by default (not tunable through the builders' constructors, except ours).
CODEC_LEVELS = {
    "kafkalog": {"gzip": 6, "snappy": None, "lz4": 9, "zstd": 3},
    "kafka-python": {"gzip": 9, "snappy": None, "lz4": "lz4.frame default (0, fast)", "zstd": 3},
    "aiokafka": {"gzip": 9, "snappy": None, "lz4": 9, "zstd": 3},
}


@dataclass(frozen=True)
class Params:
    batches: int = 20
    records_per_batch: int = 1000
    key_bytes: int = 16
    value_bytes: int = 100
    repeats: int = 7
    seed: int = 20240601

    @property
    def records(self) -> int:
        return self.batches * self.records_per_batch


FULL = Params()
QUICK = Params(batches=3, repeats=2)

Record = tuple[bytes, bytes, int]
Check = tuple[int, bytes, bytes]  # (record count, first value, last value)


# ----- data -------------------------------------------------------------------------------------


def make_data(p: Params) -> list[list[Record]]:
    """Seeded records: random keys, values of vocabulary words, timestamps 1 ms apart, no headers."""
    rng = random.Random(p.seed)
    vocabulary = [
        bytes(rng.choice(WORD_LETTERS) for _ in range(rng.randint(3, 9))) + b" " for _ in range(VOCABULARY_WORDS)
    ]
    out, ts = [], BASE_TIMESTAMP
    for _ in range(p.batches):
        batch = []
        for _ in range(p.records_per_batch):
            key = rng.randbytes(p.key_bytes)
            value = bytearray()
            while len(value) < p.value_bytes:
                value += rng.choice(vocabulary)
            batch.append((key, bytes(value[: p.value_bytes]), ts))
            ts += 1
        out.append(batch)
    return out


# ----- build paths: each returns the list of built batches -----------------------------------------


def build_ours(data: list[list[Record]], codec: str) -> list[bytes]:
    from kafkalog.record import RecordBatchBuilder

    out = []
    base = 0
    for records in data:
        builder = RecordBatchBuilder(compression=codec, base_offset=base)
        append = builder.append
        for key, value, ts in records:
            append(key, value, timestamp=ts)
        out.append(builder.build())
        base += len(records)
    return out


def build_ours_bulk(columns: list[tuple[list, list, list]], codec: str) -> list[bytes]:
    """The whole-batch path: records already in columns (as a columnar writer has them), no per-record call."""
    from kafkalog.record import build_batch

    out = []
    base = 0
    for keys, values, timestamps in columns:
        out.append(build_batch(keys, values, timestamps, compression=codec, base_offset=base))
        base += len(values)
    return out


def to_columns(data: list[list[Record]]) -> list[tuple[list, list, list]]:
    """Each batch's records as (keys, values, timestamps) lists."""
    return [tuple(map(list, zip(*records, strict=True))) for records in data]


def _build_theirs(builder_cls, data: list[list[Record]], codec: str) -> list[bytes]:
    cid = CODEC_IDS[codec]
    out = []
    for records in data:
        builder = builder_cls(
            magic=2,
            compression_type=cid,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=THEIR_BATCH_SIZE,
        )
        append = builder.append
        for offset, (key, value, ts) in enumerate(records):
            append(offset, ts, key, value, headers=[])
        out.append(bytes(builder.build()))
    return out


def build_kafka_python(data, codec):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    return _build_theirs(DefaultRecordBatchBuilder, data, codec)


def build_aiokafka_cython(data, codec):
    from aiokafka.record._crecords import DefaultRecordBatchBuilder

    return _build_theirs(DefaultRecordBatchBuilder, data, codec)


def build_aiokafka_python(data, codec):
    from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy

    return _build_theirs(_DefaultRecordBatchBuilderPy, data, codec)


BUILDERS: dict[str, Callable[[Any, str], list[bytes]]] = {
    "kafkalog": build_ours,
    "kafkalog-bulk": build_ours_bulk,
    "kafka-python": build_kafka_python,
    "aiokafka-cython": build_aiokafka_cython,
    "aiokafka-python": build_aiokafka_python,
}


# ----- decode paths: each returns (count, first value, last value) ---------------------------------


def decode_ours_columnar(buf: bytes) -> Check:
    from kafkalog.record import to_arrow

    table = to_arrow(buf)  # verify_crc=True (default)
    values = table.column("value")
    return table.num_rows, values[0].as_py(), values[-1].as_py()


def decode_ours_per_batch(buf: bytes) -> Check:
    from kafkalog.record import iter_batches, to_arrow

    tables = [to_arrow(batch.buffer) for batch in iter_batches(buf)]
    return sum(t.num_rows for t in tables), tables[0]["value"][0].as_py(), tables[-1]["value"][-1].as_py()


def _walk_records(batches) -> Check:
    """Touch every field of every record, as a consumer does; check each batch's CRC first."""
    n, first, value = 0, None, None
    for batch in batches:
        if not batch.validate_crc():
            raise AssertionError("CRC mismatch")
        for r in batch:
            _fields = (r.offset, r.timestamp, r.key, r.headers)
            value = r.value
            if first is None:
                first = value
            n += 1
    return n, first, value


def decode_ours_reference(buf: bytes) -> Check:
    from kafkalog.record import iter_batches

    n, first, value = 0, None, None
    for batch in iter_batches(buf):
        batch.ensure_valid()
        for r in batch:
            _fields = (r.offset, r.timestamp, r.key, r.headers)
            value = r.value
            if first is None:
                first = value
            n += 1
    return n, first, value


def decode_kafka_python(buf: bytes) -> Check:
    from kafka.record.memory_records import MemoryRecords

    return _walk_records(MemoryRecords(buf))


def _aiokafka_batches(records):
    while records.has_next():
        yield records.next_batch()


def decode_aiokafka_cython(buf: bytes) -> Check:
    from aiokafka.record._crecords import MemoryRecords

    return _walk_records(_aiokafka_batches(MemoryRecords(buf)))


def decode_aiokafka_python(buf: bytes) -> Check:
    # _MemoryRecordsPy looks DefaultRecordBatch up in its module, which holds the Cython class when the
    # extension is built; swap in the pure-Python batch, as AIOKAFKA_NO_EXTENSIONS=1 would.
    from aiokafka.record import memory_records
    from aiokafka.record.default_records import _DefaultRecordBatchPy

    with mock.patch.object(memory_records, "DefaultRecordBatch", _DefaultRecordBatchPy):
        return _walk_records(_aiokafka_batches(memory_records._MemoryRecordsPy(buf)))


DECODERS: dict[str, Callable[[bytes], Check]] = {
    "kafkalog-columnar": decode_ours_columnar,
    "kafkalog-columnar-per-batch": decode_ours_per_batch,
    "kafkalog-reference": decode_ours_reference,
    "kafka-python": decode_kafka_python,
    "aiokafka-cython": decode_aiokafka_cython,
    "aiokafka-python": decode_aiokafka_python,
}


# ----- timing ------------------------------------------------------------------------------------


def time_runs(fn: Callable[[], Any], repeats: int) -> list[float]:
    """Wall time of ``repeats`` calls (GC left on, as a real producer/consumer has it; collected between)."""
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def figures(times: list[float], records: int, payload_bytes: int) -> dict[str, Any]:
    best = min(times)
    return {
        "records_per_s": records / best,
        "mb_per_s": payload_bytes / best / 1e6,
        "best_s": best,
        "median_s": statistics.median(times),
        "records_per_s_median": records / statistics.median(times),
        "times_s": times,
    }


def _check_equal(what: str, got: Check, expected: Check) -> None:
    if got != expected:
        raise AssertionError(
            f"{what}: got {got[0]} records (first/last value {got[1]!r:.30}/{got[2]!r:.30}), expected "
            f"{expected[0]} ({expected[1]!r:.30}/{expected[2]!r:.30})"
        )


def records_sections(data: list[list[Record]]) -> list[bytes]:
    """Each batch's uncompressed records section, as our builder encodes it."""
    from kafkalog.record import RecordBatchBuilder

    out = []
    for records in data:
        builder = RecordBatchBuilder()
        for key, value, ts in records:
            builder.append(key, value, timestamp=ts)
        out.append(builder.records_section())
    return out


def codec_only(codec: str, sections: list[bytes], p: Params, kafka_python_s: float) -> dict[str, Any] | None:
    """Time our codec alone on the run's sections: the floor of any build with it (no record work)."""
    if codec == "none":
        return None
    from kafkalog.record import compression

    best = min(time_runs(lambda: [compression.compress(codec, s) for s in sections], p.repeats))
    return {
        "best_s": best,
        "records_per_s": p.records / best,
        # kafka-python's build time over our codec time alone: the ratio ours would reach if everything
        # but compression cost nothing.
        "build_ceiling_vs_kafka_python": kafka_python_s / best,
    }


def bench_codec(
    codec: str, data: list[list[Record]], p: Params, expected: Check, sections: list[bytes]
) -> dict[str, Any]:
    from kafkalog.record import to_arrow

    payload = p.records * (p.key_bytes + p.value_bytes)
    build: dict[str, Any] = {}
    ours_batches: list[bytes] = []
    columns = to_columns(data)
    for name, fn in BUILDERS.items():
        inputs = columns if name == "kafkalog-bulk" else data
        # Warm-up, and the correctness guard: our decoder reads every builder's output.
        built = fn(inputs, codec)
        table = to_arrow(b"".join(built))
        values = table.column("value")
        got = (table.num_rows, values[0].as_py(), values[-1].as_py())
        _check_equal(f"build {name} {codec}", got, expected)
        if name == "kafkalog":
            ours_batches = built
        build[name] = figures(time_runs(lambda fn=fn, i=inputs: fn(i, codec), p.repeats), p.records, payload)
        build[name]["encoded_bytes"] = sum(map(len, built))

    raw_size = sum(map(len, sections)) + len(sections) * 61  # the uncompressed run: sections + headers
    buf = b"".join(ours_batches)  # every decoder reads the same bytes: ours, byte-compatible with Kafka
    decode: dict[str, Any] = {}
    for name, fn in DECODERS.items():
        _check_equal(f"decode {name} {codec}", fn(buf), expected)  # warm-up and guard
        decode[name] = figures(time_runs(lambda fn=fn: fn(buf), p.repeats), p.records, payload)

    def ratio(table: dict[str, Any], ours: str, theirs: str) -> float:
        return table[ours]["records_per_s"] / table[theirs]["records_per_s"]

    ratios = {
        "build_vs_kafka_python": ratio(build, "kafkalog", "kafka-python"),
        "build_bulk_vs_kafka_python": ratio(build, "kafkalog-bulk", "kafka-python"),
        "build_vs_aiokafka_cython": ratio(build, "kafkalog", "aiokafka-cython"),
        "build_vs_aiokafka_python": ratio(build, "kafkalog", "aiokafka-python"),
        "decode_vs_kafka_python": ratio(decode, "kafkalog-columnar", "kafka-python"),
        "decode_vs_aiokafka_cython": ratio(decode, "kafkalog-columnar", "aiokafka-cython"),
        "decode_vs_aiokafka_python": ratio(decode, "kafkalog-columnar", "aiokafka-python"),
    }
    return {
        "encoded_bytes": len(buf),
        "compression_ratio": raw_size / len(buf),  # uncompressed run size / this codec's run size
        "codec_levels": {lib: levels.get(codec) for lib, levels in CODEC_LEVELS.items()},
        "build": build,
        "codec_only": codec_only(codec, sections, p, build["kafka-python"]["best_s"]),
        "decode": decode,
        "ratios": ratios,
        "goals_met": {
            "build_3x_kafka_python": ratios["build_vs_kafka_python"] >= BUILD_GOAL,
            "build_bulk_3x_kafka_python": ratios["build_bulk_vs_kafka_python"] >= BUILD_GOAL,
            "decode_columnar_ge_aiokafka_cython": ratios["decode_vs_aiokafka_cython"] >= DECODE_GOAL,
        },
    }


# ----- report ------------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return common.platform_info() | {
        "processor": platform.processor() or None,
        "packages": {
            d: version(d)
            for d in (
                "kafkalog",
                "kafka-python",
                "aiokafka",
                "numba",
                "numpy",
                "pyarrow",
                "cramjam",
                "lz4",
                "python-snappy",
                "zstandard",
                "crc32c",
            )
        },
    }


def _rate(x: float) -> str:
    return f"{x / 1e3:,.0f}"


def _ratio(x: float, goal: float | None = None) -> str:
    text = f"{x:.2f}x"
    if goal is None:
        return text
    return f"[green]{text}[/]" if x >= goal else f"[bold red]{text}[/]"


def _table(title: str, caption: str, columns: list[str]) -> Table:
    table = Table(title=title, caption=caption)
    table.add_column("codec")
    for col in columns:
        table.add_column(col, justify="right")
    return table


def print_tables(result: dict[str, Any], console: Console) -> None:
    p = result["parameters"]
    caption = (
        f"thousand records/s, best of {p['repeats']}; {p['records_per_run']:,} records per run "
        f"({p['batches']} batches x {p['records_per_batch']}), {p['key_bytes']} B keys, "
        f"{p['value_bytes']} B values"
    )
    build = _table(
        "Build (ours: append per record + build, and bulk build_batch from columns)",
        caption,
        [
            "ours append",
            "ours bulk",
            "kafka-py",
            "aiokafka C",
            "aiokafka py",
            f"append/kafka-py (goal {BUILD_GOAL:g}x)",
            f"bulk/kafka-py (goal {BUILD_GOAL:g}x)",
            "ours/aiokafka C",
            "ours/aiokafka py",
            "codec-only ceiling /kafka-py",
        ],
    )
    for codec, r in result["codecs"].items():
        b, q = r["build"], r["ratios"]
        build.add_row(
            codec,
            *(_rate(b[k]["records_per_s"]) for k in BUILDERS),
            _ratio(q["build_vs_kafka_python"], BUILD_GOAL),
            _ratio(q["build_bulk_vs_kafka_python"], BUILD_GOAL),
            _ratio(q["build_vs_aiokafka_cython"]),
            _ratio(q["build_vs_aiokafka_python"]),
            _ratio(r["codec_only"]["build_ceiling_vs_kafka_python"]) if r["codec_only"] else "-",
        )
    console.print(build)
    console.print(
        "[dim]codec-only ceiling: kafka-python's build time / the time our codec alone takes on the same "
        "records; no build with that codec can beat it.[/]"
    )

    decode = _table(
        "Decode (bytes -> every record's fields; ours -> one Arrow table)",
        caption,
        [
            "ours columnar",
            "ours per-batch",
            "ours reference",
            "kafka-py",
            "aiokafka C",
            "aiokafka py",
            f"ours/aiokafka C (goal {DECODE_GOAL:g}x)",
            "ours/kafka-py",
            "ours/aiokafka py",
        ],
    )
    for codec, r in result["codecs"].items():
        d, q = r["decode"], r["ratios"]
        decode.add_row(
            codec,
            *(_rate(d[k]["records_per_s"]) for k in DECODERS),
            _ratio(q["decode_vs_aiokafka_cython"], DECODE_GOAL),
            _ratio(q["decode_vs_kafka_python"]),
            _ratio(q["decode_vs_aiokafka_python"]),
        )
    console.print(decode)

    missed = [
        f"{codec}: {goal}" for codec, r in result["codecs"].items() for goal, ok in r["goals_met"].items() if not ok
    ]
    if missed:
        console.print("[bold red]Goals missed:[/] " + "; ".join(missed))
    else:
        console.print("[green]All goals met.[/]")


def run(*, quick: bool = False, results_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run the record benchmark, write ``results_dir/record.json``, print the tables; return the result."""
    console = console or Console()
    p = QUICK if quick else FULL
    started = time.perf_counter()
    data = make_data(p)
    expected: Check = (p.records, data[0][0][1], data[-1][-1][1])
    sections = records_sections(data)
    codecs: dict[str, Any] = {}
    for codec in CODECS:
        console.print(f"[dim]record: {codec}...[/]")
        codecs[codec] = bench_codec(codec, data, p, expected, sections)
    result = {
        "benchmark": "record",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine_info(),
        "parameters": {
            **asdict(p),
            "records_per_run": p.records,
            "value_content": (
                f"space-separated words (3-9 lowercase letters) drawn at random from a seeded vocabulary of "
                f"{VOCABULARY_WORDS}, cut at {p.value_bytes} bytes: compressible (see each codec's "
                f"compression_ratio), so every codec does real work"
            ),
            "key_content": "seeded random bytes",
            "timestamps": f"increasing by 1 ms per record from {BASE_TIMESTAMP}",
            "headers": "none",
            "statistic": "best (minimum wall time) of `repeats` timed runs with time.perf_counter, after one "
            "untimed warm-up run; the median is kept too",
            "mb_per_s": "payload (key + value) bytes per second, 1 MB = 1e6 bytes",
            "gc": "enabled while timing (collected before each run)",
            "build": "per record append(key, value, timestamp), then build(); kafkalog RecordBatchBuilder, "
            "kafka-python and aiokafka DefaultRecordBatchBuilder (Cython and pure Python)",
            "decode": "all read the same bytes (built by kafkalog). kafkalog-columnar: to_arrow(all batches) "
            "in one call; -per-batch: to_arrow per batch; -reference: per-record iteration. "
            "kafka-python/aiokafka: MemoryRecords -> batches -> records, touching offset, "
            "timestamp, key, value, headers. Every path checks each batch's CRC (the consumers' "
            "check_crcs default); every path must give the same count and first/last value",
            "codec_levels": CODEC_LEVELS,
        },
        "goals": {
            "build_vs_kafka_python": BUILD_GOAL,
            "decode_columnar_vs_aiokafka_cython": DECODE_GOAL,
        },
        "codecs": codecs,
        "all_goals_met": all(all(r["goals_met"].values()) for r in codecs.values()),
        "elapsed_s": time.perf_counter() - started,
    }
    return common.finish(results_dir, "record", result, console, print_tables)
