"""The main job, at this stage of the project: the record layer and the storage engine end to end.

It produces a realistic event stream into one partition log per codec (``Log.append``: validation,
offset assignment, 1 MiB segments rolling as Kafka rolls them), reopens each log as after a crash
(re-validating every segment and rebuilding producer state), reads everything back through the log and
through the columnar decoder over the segment files, and checks it against what was produced. Later
issues grow it into the full Spark pipeline.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .record import CODEC_NAMES, build_batch, to_arrow
from .record.scan import map_file
from .storage import Log

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


def run(out_dir: Path, records: int, batch_size: int, seed: int) -> int:
    console = Console() if sys.stdout.isatty() else Console(width=140)
    events = make_events(records, seed, start_ms=1_700_000_000_000)
    raw_bytes = sum(len(k) + len(v) for k, v, _, _ in events)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    table = Table(title=f"kafkalog: {records:,} events, {batch_size} per batch, into one partition log per codec")
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
        partition_dir = out_dir / f"events-{codec}-0"
        t0 = time.perf_counter()
        segments = write_log(partition_dir, events, codec, batch_size)
        t1 = time.perf_counter()
        count, size = verify_log(partition_dir, events)
        t2 = time.perf_counter()
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
    console.print(f"Partition directories are in {out_dir}/ (Kafka's layout: segments, indexes, snapshots).")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalog.demo", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("demo-output"), help="where the log directories go")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    return run(args.out, args.records, args.batch_size, args.seed)


if __name__ == "__main__":
    sys.exit(main())
