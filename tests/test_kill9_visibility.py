"""Issue 16 item 2 and the partition layer's kill -9 property: after an unclean stop, nothing on disk is hidden.

A single-replica Kafka leader recomputes its high watermark when it becomes leader (maybeIncrementLeaderHW:
the smallest log end offset over an ISR of one), so a high-watermark checkpoint that lagged when the process
died hides nothing after the restart. kafkalog's LogManager makes every partition leader as it loads it.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from click.testing import CliRunner

from kafkalog.cli import main
from kafkalog.manager import LogManager
from kafkalog.storage.checkpoints import OffsetCheckpointFile
from tools.reliability.hw_property import check_run, setup_dir


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def _field(line: str, name: str) -> int:
    return int(next(p for p in line.split("\t") if p.startswith(name + ": ")).split(": ")[1].split()[0])


def test_kill_9_mid_produce_leaves_every_record_visible(tmp_path: Path, spark) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    assert run("topics", "--log-dir", str(d), "--create", "--topic", "t").exit_code == 0
    script = Path(sys.executable).with_name("kafkalog")
    producer = subprocess.Popen(
        [str(script), "produce", "--log-dir", str(d), "--topic", "t"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stop = threading.Event()

    def feed() -> None:  # seq 1 3000000 | kafkalog produce, as in the issue
        try:
            for i in range(1, 3_000_001):
                if stop.is_set():
                    return
                producer.stdin.write(b"%d\n" % i)
        except (BrokenPipeError, ValueError, OSError):
            return

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    segment = d / "t-0" / "00000000000000000000.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not segment.exists() or segment.stat().st_size < 400_000):
        time.sleep(0.02)
    producer.send_signal(signal.SIGKILL)
    producer.wait(timeout=30)
    stop.set()
    feeder.join(timeout=30)
    assert segment.stat().st_size >= 400_000, "the producer wrote too little before the deadline"

    described = run("topics", "--log-dir", str(d), "--describe", "--topic", "t")
    line = described.output.splitlines()[1]
    leo, hw = _field(line, "LogEndOffset"), _field(line, "HighWatermark")
    assert leo >= 20_000 and hw == leo, line

    consumed = run("consume", "--log-dir", str(d), "--topic", "t", "--from-beginning")
    assert consumed.exit_code == 0
    assert consumed.stdout.splitlines() == [str(i) for i in range(1, leo + 1)]
    df = spark.read.format("kafkalog").option("path", str(d)).option("subscribe", "t").load()
    assert df.count() == leo
    # The log manager's restart (an unclean recovery) makes the partition leader: HW = LEO, and it says so
    # in the checkpoint it writes, so no reader has to derive it any more.
    with LogManager([d]) as manager:
        partition = manager.replica_manager.get_partition("t", 0)
        assert (partition.log_end_offset, partition.high_watermark) == (leo, leo)
    assert OffsetCheckpointFile(d / "replication-offset-checkpoint").read() == {("t", 0): leo}
    line = run("topics", "--log-dir", str(d), "--describe", "--topic", "t").output.splitlines()[1]
    assert f"HighWatermark: {leo}\t" in line
    assert df.count() == leo


def test_kill_9_property_a_few_runs(tmp_path: Path) -> None:
    """A few runs of tools.reliability.hw_property (make reliability runs 200): random batch sizes, SIGKILL at a
    random moment; HW == LEO and every valid record on disk below it readable by every reader."""
    rng = random.Random(16)
    log_dir = tmp_path / "hw"
    setup_dir(log_dir)
    acked = 0
    for i in range(4):
        n, problems = check_run(log_dir, i, rng)
        assert problems == [], problems
        acked += n
    assert acked > 0
