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
