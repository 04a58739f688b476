"""Smoke test: the main job (what `make demo` runs) completes and reads back every record it wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_demo_job_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "logs"
    result = subprocess.run(
        [sys.executable, "-m", "kafkalog.demo", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        segment = out / "codecs" / f"events-{codec}-0" / "00000000000000000000.log"
        assert segment.stat().st_size > 0
        assert codec in result.stdout
    assert result.stdout.count("ok") >= 5
    for partition in range(4):  # part 2: the log manager's topic, restarted cleanly and uncleanly
        assert any((out / "kafka-logs" / f"clicks-{partition}").glob("*.log"))
    assert (out / "kafka-logs" / ".kafka_cleanshutdown").exists()
    assert "every retained record is back" in result.stdout
    assert "Part 3: Spark reads the retained clicks" in result.stdout  # the Spark stage ran and agreed
    assert "Part 4: kafka-python against kafkalog serve" in result.stdout  # a real client over the wire
    assert "shut down cleanly" in result.stdout
    assert "WARN NativeCodeLoader" not in result.stderr  # Spark's start-up warnings are not the demo's output
    for part in (1, 2, 3, 4):  # one line per part saying what it proved
        assert len([line for line in result.stdout.splitlines() if line.startswith(f"Part {part} proved")]) == 1


def test_demo_shows_progress_from_its_first_second(tmp_path: Path) -> None:
    """Part 1 alone, with a short configuration: the first line comes before the heavy imports, each codec's
    check is a progress line as it finishes, and the part ends with one line saying what it proved."""
    import time

    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "kafkalog.demo", "--out", str(tmp_path / "out"), "--parts", "1",
         "--records", "1500"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    arrivals = [(time.monotonic() - started, line.rstrip("\n")) for line in proc.stdout]
    assert proc.wait(timeout=300) == 0, arrivals
    first_at, first = arrivals[0]
    assert first.startswith("kafkalog demo: loading kafkalog") and first_at < 5, arrivals[:3]
    lines = [line for _, line in arrivals]
    assert lines[1] == f"kafkalog demo: parts 1; output in {tmp_path / 'out'}/"
    assert lines[2].startswith("Part 1: the record layer and the storage engine")
    progress = [line for line in lines if line.startswith("  ") and line.endswith("s)") and ": 1,500 records" in line]
    assert [line.split(":")[0].strip() for line in progress] == ["none", "gzip", "snappy", "lz4", "zstd"]
    proved = [line for line in lines if line.startswith("Part 1 proved")]
    assert len(proved) == 1 and "recovered after a simulated crash" in proved[0]
    assert not any(line.startswith("Part 2") for line in lines)


def test_demo_refuses_parts_that_need_part_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kafkalog.demo", "--out", str(tmp_path), "--parts", "1,4"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "include part 2" in result.stderr
