"""Smoke test of the broker benchmark: ``python -m benchmarks.run --quick --only broker`` runs and writes its JSON."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_quick_broker_bench_writes_well_formed_results(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--only", "broker", "--results-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads((tmp_path / "broker.json").read_text())
    assert data["benchmark"] == "broker" and data["quick"] is True
    assert [row["codec"] for row in data["throughput"]] == ["none", "lz4"]
    for row in data["throughput"]:
        for key in ("produce_records_per_s", "produce_mb_per_s", "consume_records_per_s", "consume_mb_per_s"):
            assert math.isfinite(row[key]) and row[key] > 0, (key, row)
    for figures in data["latency"].values():
        assert 0 < figures["p50_ms"] <= figures["p99_ms"]
