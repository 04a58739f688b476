"""Smoke test of the broker benchmark: ``python -m benchmarks.run --quick --only broker`` runs and writes its JSON."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.bench_smoke
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
    # The load shapes (separate processes): every ratio finite, every goal judged.
    load = data["load"]
    assert {(r["partitions"], r["value_bytes"], r["acks"], r["codec"]) for r in load["produce"]} == {
        (1, 1024, "1", "none"),
        (16, 100, "all", "lz4"),
    }
    for row in load["produce"]:
        assert row["records"] * row["value_bytes"] == row["payload_bytes"]
        for key in ("kafkalog_mb_per_s", "mock_mb_per_s", "limit_mb_per_s", "broker_cpu_s_per_gb"):
            assert math.isfinite(row[key]) and row[key] >= 0, (key, row)
        # every process's first touches of memory: a client that sent its bytes touched some pages
        assert row["client_faults_per_gb"] > 0 and row["mock_client_faults_per_gb"] > 0, row
        assert row["broker_faults_per_gb"] >= 0 and row["mock_faults_per_gb"] >= 0, row
    assert data["ratios"] and all(math.isfinite(v) and v > 0 for v in data["ratios"].values()), data["ratios"]
    assert "consume_vs_sendfile" in data["ratios"] and "consume_vs_mock" in data["ratios"]
    at_10k = load["latency"]["at_10k"]
    assert at_10k["records"] == at_10k["sent"] == 10_000
    assert 0 < at_10k["p50_ms"] <= at_10k["p99_ms"] <= at_10k["p999_ms"] <= at_10k["max_ms"]
    assert len(data["goals"]) == 5 and all(isinstance(g["met"], bool) for g in data["goals"])
    machine = load["machine"]
    assert len(machine["page_cache_append_us_per_mib"]) == 2  # 64 MiB in 32 MiB chunks
    assert 0 < machine["page_cache_append_us_per_mib_min"] <= machine["page_cache_append_us_per_mib_max"]
    assert machine["anonymous_page_fault_us"] > 0
    for shape in ("on_disk", "versus_mock"):
        assert load["consume"][shape]["client_faults_per_gb"] > 0
    assert load["cost"]["broker_rss_bytes"] > 0 and load["cost"]["consume_cpu_s_per_gb"] >= 0
