"""Where ``kafkalog serve`` spends its time under one load: py-spy samples the broker process.

Run: ``python -m benchmarks.profile_broker {produce,consume} [--mib N] [--partitions P] [--acks A] [--codec C]``
(needs ``pip install py-spy``, a sampling profiler that attaches to the broker's pid; not a kafkalog
dependency). The client runs in its own process (benchmarks.broker_load), as in the benchmark; the report
is the top functions by own samples and by samples under them (inclusive), from py-spy's collapsed stacks.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _stacks(path: Path) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """(total samples, own samples per frame, inclusive samples per frame) from py-spy's raw format."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[_short(frames[-1])] += count
        for frame in {_short(f) for f in frames}:
            inclusive[frame] += count
    return total, own, inclusive


def _short(frame: str) -> str:
    """``function (path/to/kafkalog/x.py:12)`` -> ``function (kafkalog/x.py)``: one row per function."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    if "/src/" in where:
        where = where.split("/src/", 1)[1]
    elif "/" in where:
        where = where.rsplit("/", 1)[1]
    return f"{name} ({where})"


def main(argv: list[str] | None = None) -> int:
    from benchmarks.bench_broker import _create_topic, _load_consume, _load_produce
    from tests.brokertools import BrokerProcess

    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_broker")
    parser.add_argument("load", choices=("produce", "consume"))
    parser.add_argument("--mib", type=int, default=256, help="payload MiB")
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--acks", default="1")
    parser.add_argument("--codec", default="none")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--keep", type=Path, help="copy py-spy's collapsed stacks here")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--idle", action="store_true", help="count idle samples too (where the loop waits)")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    records = (args.mib << 20) // args.value_bytes
    root = Path(tempfile.mkdtemp(prefix="kafkalog-profile-"))
    try:
        with BrokerProcess(root / "logs", {"num.partitions": "1"}) as server:
            assert server.proc is not None
            _create_topic(server.bootstrap, "profiled", args.partitions)
            if args.load == "consume":
                _load_produce(server.bootstrap, "profiled", records, 1024, "1", "none")
            out = root / "stacks.txt"
            command = [py_spy, "record", "--pid", str(server.proc.pid), "--format", "raw", "--rate", str(args.rate)]
            spy = subprocess.Popen(
                [*command, "--output", str(out), "--nonblocking", *(["--idle"] if args.idle else [])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            time.sleep(1.0)  # attached before the load starts
            if args.load == "produce":
                answer = _load_produce(server.bootstrap, "profiled", records, args.value_bytes, args.acks, args.codec)
            else:
                answer = _load_consume(server.bootstrap, "profiled", records, args.partitions)
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(30)
        seconds = answer["seconds"]
        print(f"{args.load}: {records * args.value_bytes / seconds / 1e6:.1f} MB/s over {seconds:.2f} s")
        if args.keep:
            shutil.copy(out, args.keep)
        total, own, inclusive = _stacks(out)
        print(f"{total} samples")
        print("\nby own samples:")
        for frame, count in own.most_common(args.top):
            print(f"  {count / total:6.1%}  {frame}")
        print("\nby inclusive samples:")
        for frame, count in inclusive.most_common(args.top):
            print(f"  {count / total:6.1%}  {frame}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
