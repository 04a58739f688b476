"""What a restart over many EMPTY partitions costs, and how many leader-epoch-checkpoint files it rewrites.

Creates ``--partitions`` empty partitions (topics of 100) with a LogManager of this tree, then restarts them
``--rounds`` times, each time through a LogManager (startup wall and CPU seconds, renames onto a
leader-epoch-checkpoint counted with a patched os.replace; the start is clean, or unclean with ``--unclean``)
and through ``kafkalog serve`` (seconds until the listener is up, then SIGTERM; files whose inode or mtime
changed). ``--src DIR`` runs the restarts on another source tree (e.g. ``git archive <commit> src | tar -x -C
/tmp/old``) to compare. Prints one JSON line per restart.

    PYTHONPATH=src:. nice -n 10 python -m tools.restart_epoch_writes --partitions 2000 [--src /tmp/old/src]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Run in a child with the tree under test first on sys.path: one LogManager restart of the dir in argv[1].
_MANAGER_CHILD = """
import json, os, sys, time
from pathlib import Path
from kafkalog import LogManager

root, unclean = Path(sys.argv[1]), sys.argv[2] == "unclean"
renames = 0
real_replace = os.replace

def replace(src, dst, *args, **kwargs):
    global renames
    renames += str(dst).endswith("leader-epoch-checkpoint")
    return real_replace(src, dst, *args, **kwargs)

os.replace = replace
if unclean:
    (root / ".kafka_cleanshutdown").unlink(missing_ok=True)
w0, c0 = time.perf_counter(), time.process_time()
manager = LogManager([root])
manager.startup()
figures = {"startup_s": time.perf_counter() - w0, "startup_cpu_s": time.process_time() - c0, "renames": renames}
manager.shutdown()
figures["renames_by_shutdown"] = renames - figures["renames"]
print(json.dumps(figures))
"""


def create(root: Path, partitions: int) -> None:
    from kafkalog import LogManager

    with LogManager([root]) as manager:
        for t in range(0, partitions, 100):
            manager.create_topic(f"empty-{t // 100:04d}", min(100, partitions - t))


def manager_restart(root: Path, src: Path, unclean: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    args = [sys.executable, "-c", _MANAGER_CHILD, str(root), "unclean" if unclean else "clean"]
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True, timeout=3600).stdout
    return json.loads(out.strip().splitlines()[-1])


def serve_restart(root: Path, src: Path, settle: float) -> dict:
    files = sorted(root.glob("*/leader-epoch-checkpoint"))

    def stats() -> list[tuple[int, int]]:
        return [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]

    before = stats()
    env = dict(os.environ, PYTHONPATH=str(src))
    overrides = ["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={root}"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from kafkalog.cli import main; main()", "serve", *overrides],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "Awaiting socket connections" in line:
            break
    listening = time.perf_counter() - t0
    started = stats()
    time.sleep(settle)  # a SIGTERM before the broker installed its handlers would kill it uncleanly
    proc.send_signal(signal.SIGTERM)
    for _ in proc.stderr:
        pass
    code = proc.wait()
    return {
        "listening_s": listening,
        "exit": code,
        "rewritten_by_start": sum(a != b for a, b in zip(before, started, strict=True)),
        "rewritten_by_stop": sum(a != b for a, b in zip(started, stats(), strict=True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--unclean", action="store_true", help="LogManager restarts without the clean-shutdown marker")
    parser.add_argument("--src", type=Path, default=REPO / "src", help="the source tree the restarts run")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between listening and SIGTERM")
    args = parser.parse_args()
    args.src = args.src.resolve()
    with tempfile.TemporaryDirectory(prefix="restart-epoch-") as scratch:
        root = Path(scratch) / "logs"
        create(root, args.partitions)
        for n in range(args.rounds):
            common = {"round": n + 1, "partitions": args.partitions, "src": str(args.src)}
            print(json.dumps({"via": "LogManager", **common, **manager_restart(root, args.src, args.unclean)}))
            print(json.dumps({"via": "kafkalog serve", **common, **serve_restart(root, args.src, args.settle)}))


if __name__ == "__main__":
    main()
