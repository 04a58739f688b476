"""The main job, at this stage of the project: the record layer end to end on real files.

It produces a realistic event stream, writes it as Kafka segment files (one partition directory per
codec), scans the files back through a memory map, checks every CRC, decodes the records into Arrow
and compares them with what was produced. Later issues grow it into the full Spark pipeline.
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

from .record import CODEC_NAMES, RecordBatchBuilder, iter_file_batches, to_arrow
from .record.scan import map_file

EVENT_TYPES = ("page_view", "click", "add_to_cart", "checkout", "search")


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


def write_segment(directory: Path, events, codec: str, batch_size: int) -> Path:
    """Write the events as a segment file of batches of ``batch_size`` records (offsets from 0)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{0:020d}.log"
    with open(path, "wb") as f:
        for start in range(0, len(events), batch_size):
            builder = RecordBatchBuilder(compression=codec, base_offset=start)
            for key, value, ts, headers in events[start : start + batch_size]:
                builder.append(key, value, timestamp=ts, headers=headers)
            f.write(builder.build())
    return path


def verify_segment(path: Path, events) -> tuple[int, int]:
    """Scan the file, check every CRC, decode it to Arrow and compare with the events; return counts."""
    batches = 0
    for batch in iter_file_batches(path):
        batch.ensure_valid()
        batches += 1
    table = to_arrow(map_file(path))
    if table.num_rows != len(events):
        raise SystemExit(f"{path}: decoded {table.num_rows} records, produced {len(events)}")
    offsets = table.column("offset").to_pylist()
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    for i, (key, value, _, _) in enumerate(events):
        if offsets[i] != i or keys[i] != key or values[i] != value:
            raise SystemExit(f"{path}: record {i} does not read back as it was written")
    return batches, table.num_rows


def run(out_dir: Path, records: int, batch_size: int, seed: int) -> int:
    console = Console() if sys.stdout.isatty() else Console(width=140)
    events = make_events(records, seed, start_ms=1_700_000_000_000)
    raw_bytes = sum(len(k) + len(v) for k, v, _, _ in events)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    table = Table(title=f"kafkalog record layer: {records:,} events, {batch_size} per batch, written and read back")
    for column in (
        "topic-partition",
        "codec",
        "batches",
        "records",
        "segment bytes",
        "ratio",
        "build rec/s",
        "decode rec/s",
        "check",
    ):
        table.add_column(column, justify="right" if column not in ("topic-partition", "codec") else "left")
    for codec in CODEC_NAMES:
        partition_dir = out_dir / f"events-{codec}-0"
        t0 = time.perf_counter()
        path = write_segment(partition_dir, events, codec, batch_size)
        t1 = time.perf_counter()
        batches, count = verify_segment(path, events)
        t2 = time.perf_counter()
        size = path.stat().st_size
        table.add_row(
            partition_dir.name,
            codec,
            f"{batches:,}",
            f"{count:,}",
            f"{size:,}",
            f"{raw_bytes / size:.2f}x",
            f"{count / (t1 - t0):,.0f}",
            f"{count / (t2 - t1):,.0f}",
            "[green]ok[/green]",
        )
    console.print(table)
    console.print(f"Segments are in {out_dir}/ (one Kafka partition directory per codec).")
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
