"""Smoke test of the benchmarks: ``python -m benchmarks.run --quick`` runs and writes well-formed JSON.

Only the shape of the results is checked, never a timing: performance goals are reported by the
benchmark itself (``make bench``), not enforced by tests.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BUILDERS = ("kafkalog", "kafkalog-bulk", "kafka-python", "aiokafka-cython", "aiokafka-python")
DECODERS = (
    "kafkalog-columnar",
    "kafkalog-columnar-per-batch",
    "kafkalog-reference",
    "kafka-python",
    "aiokafka-cython",
    "aiokafka-python",
)
RATIOS = (
    "build_vs_kafka_python",
    "build_bulk_vs_kafka_python",
    "build_vs_aiokafka_cython",
    "build_vs_aiokafka_python",
    "decode_vs_kafka_python",
    "decode_vs_aiokafka_cython",
    "decode_vs_aiokafka_python",
)


def _positive(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _quick_bench(tmp_path_factory, only: str, timeout: int = 300) -> tuple[subprocess.CompletedProcess, Path]:
    """Run one benchmark's quick form into a fresh results dir; (the finished process, that dir)."""
    results = tmp_path_factory.mktemp(f"bench-{only}-results")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--only", only, "--results-dir", str(results)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, results


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    return _quick_bench(tmp_path_factory, "record")


def test_quick_run_exits_zero(quick_run):
    proc, _ = quick_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Build" in proc.stdout and "Decode" in proc.stdout  # the tables were printed


def test_record_json_shape(quick_run):
    proc, results = quick_run
    assert proc.returncode == 0, proc.stderr
    data = json.loads((results / "record.json").read_text())

    assert data["benchmark"] == "record"
    assert data["quick"] is True
    for key in ("python", "platform", "cpu_count"):
        assert data["machine"][key]
    params = data["parameters"]
    assert params["records_per_batch"] == 1000
    assert params["key_bytes"] == 16 and params["value_bytes"] == 100
    assert params["records_per_run"] == params["batches"] * params["records_per_batch"]
    assert params["repeats"] >= 1
    assert "statistic" in params and "value_content" in params
    assert set(data["goals"]) == {"build_vs_kafka_python", "decode_columnar_vs_aiokafka_cython"}
    assert isinstance(data["all_goals_met"], bool)

    assert tuple(data["codecs"]) == CODECS
    for codec, r in data["codecs"].items():
        assert set(r["build"]) == set(BUILDERS), codec
        assert set(r["decode"]) == set(DECODERS), codec
        for section in ("build", "decode"):
            for name, fig in r[section].items():
                assert _positive(fig["records_per_s"]), (codec, section, name)
                assert _positive(fig["mb_per_s"]), (codec, section, name)
                assert len(fig["times_s"]) == params["repeats"], (codec, section, name)
        assert set(r["ratios"]) == set(RATIOS), codec
        assert all(_positive(x) for x in r["ratios"].values()), codec
        assert set(r["goals_met"]) == {
            "build_3x_kafka_python",
            "build_bulk_3x_kafka_python",
            "decode_columnar_ge_aiokafka_cython",
        }
        assert all(isinstance(x, bool) for x in r["goals_met"].values())
        assert _positive(r["encoded_bytes"])
        if codec == "none":
            assert r["codec_only"] is None
        else:
            assert _positive(r["codec_only"]["build_ceiling_vs_kafka_python"]), codec
            assert r["compression_ratio"] > 1, codec  # the values are compressible, so codecs do real work


@pytest.fixture(scope="module")
def quick_storage_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    return _quick_bench(tmp_path_factory, "storage")


def test_storage_json_shape(quick_storage_run):
    proc, results = quick_storage_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Append" in proc.stdout and "Goals" in proc.stdout
    data = json.loads((results / "storage.json").read_text())

    assert data["benchmark"] == "storage" and data["quick"] is True
    assert isinstance(data["machine"]["scratch_same_device_as_repo"], bool)
    assert set(data["goals"]) == set(data["goals_met"]) == {"append_1mib_vs_raw", "append_single_record_per_s"}
    assert isinstance(data["all_goals_met"], bool)
    assert tuple(data["append"]) == ("1 record", "100 records", "1 MiB")
    for name, r in data["append"].items():
        for path in ("client", "follower", "raw"):
            assert _positive(r[path]["mb_per_s"]) and _positive(r[path]["batches_per_s"]), (name, path)
            assert len(r[path]["times_s"]) == data["parameters"]["repeats"], (name, path)
        assert _positive(r["client_vs_raw"]) and _positive(r["follower_vs_raw"]), name
    assert data["append"]["1 MiB"]["batch_bytes"] <= 1 << 20
    big = data["big_log"]
    for key in ("position", "position_and_bytes"):
        assert 0 < big["lookup"][key]["p50_us"] <= big["lookup"][key]["p99_us"]
    assert _positive(big["sequential_read"]["log_vs_raw"])
    assert _positive(big["recovery"]["s_per_gb"]) and _positive(big["recovery"]["crc32c_s_per_gb"])
    assert data["profile_single_record_append"] and all(
        _positive(row["tottime_s"]) or row["tottime_s"] == 0 for row in data["profile_single_record_append"]
    )


@pytest.fixture(scope="module")
def quick_manager_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    return _quick_bench(tmp_path_factory, "manager")


@pytest.mark.bench_smoke
def test_manager_json_shape(quick_manager_run):
    proc, results = quick_manager_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Retention pass" in proc.stdout and "LogManager startup" in proc.stdout
    data = json.loads((results / "manager.json").read_text())

    assert data["benchmark"] == "manager" and data["quick"] is True
    assert _positive(data["machine"]["fd_limit"])
    params = data["parameters"]
    ret = data["retention"]
    layout = ret["layout"]
    assert layout["segments"] == params["retention_partitions"] * params["retention_segments_per_partition"]
    assert sum(layout["partitions_per_log_dir"]) == layout["partitions"] == params["retention_partitions"]
    assert ret["steady_pass"]["segments_deleted"] == 0
    assert ret["delete_pass"]["segments_deleted"] == ret["file_deletion"]["segments"] == layout["segments"] // 2
    for section in ("steady_pass", "delete_pass"):
        assert _positive(ret[section]["ms_per_pass"]) and _positive(ret[section]["segments_per_s"]), section
        assert len(ret[section]["times_s"]) == params["retention_repeats"], section
    assert _positive(ret["file_deletion"]["segments_per_s"])

    startup = data["startup"]
    assert startup["layout"]["partitions"] == params["startup_topics"] * params["startup_partitions_per_topic"]
    assert startup["layout"]["segments"] >= startup["layout"]["partitions"]
    for kind in ("clean", "unclean"):
        assert set(startup[kind]) == {str(t) for t in params["recovery_threads"]}, kind
        for threads, fig in startup[kind].items():
            for key in ("best_s", "partitions_per_s", "segments_per_s", "s_per_gb", "mb_per_s"):
                assert _positive(fig[key]), (kind, threads, key)
            assert len(fig["times_s"]) == params["startup_repeats"], (kind, threads)
    assert _positive(startup["unclean_vs_clean_time"])

    for prof in (ret["profile_delete_pass"], startup["profile_unclean_startup"]):
        assert prof["by_own_time"] and prof["kafkalog_by_cumulative_time"]
        assert all(row["tottime_s"] >= 0 and row["calls"] > 0 for row in prof["by_own_time"])


@pytest.fixture(scope="module")
def quick_dump_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    return _quick_bench(tmp_path_factory, "dump")


def test_dump_json_shape(quick_dump_run):
    proc, results = quick_dump_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "kafkalog dump" in proc.stdout and "Goals" in proc.stdout
    data = json.loads((results / "dump.json").read_text())

    assert data["benchmark"] == "dump" and data["quick"] is True
    assert set(data["goals"]) == set(data["goals_met"]) == {"speedup_vs_kafka_python", "constant_memory"}
    assert isinstance(data["goals_met"]["speedup_vs_kafka_python"], bool)
    assert data["goals_met"]["constant_memory"] is None and data["goals_not_assessed"] == ["constant_memory"]
    assert isinstance(data["all_goals_met"], bool)
    assert set(data["startup"]) == {"kafkalog", "kafka-python"} and _positive(data["rss_floor_mb"])
    params = data["parameters"]
    assert len(data["segments"]) == len(params["sizes"]) == 1
    pool = params["pool"]
    assert pool["batches_by_codec"]["lz4"] > 0 and pool["batches_by_codec"]["zstd"] > 0
    assert pool["batches_with_headers"] > 0
    for label, seg in data["segments"].items():
        assert seg["bytes"] <= params["sizes"][0] and _positive(seg["records"]), label
        for name in ("kafkalog", "kafka-python"):
            fig = seg[name]
            for key in ("best_s", "mb_per_s", "records_per_s", "peak_rss_mb", "net_of_startup_s"):
                assert _positive(fig[key]), (label, name, key)
            assert len(fig["times_s"]) == params["repeats"][0], (label, name)
        assert _positive(seg["speedup_vs_kafka_python"]), label
        check = seg["correctness"]
        assert check["identical"] and check["mismatched_lines"] == 0, label
        assert check["record_lines"] == {"kafkalog": seg["records"], "kafka-python": seg["records"]}, label
    assert data["profile"]["by_own_time"] and all(row["calls"] > 0 for row in data["profile"]["by_own_time"])


@pytest.fixture(scope="module")
def quick_cleaner_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    return _quick_bench(tmp_path_factory, "cleaner")


@pytest.mark.bench_smoke
def test_cleaner_json_shape(quick_cleaner_run):
    proc, results = quick_cleaner_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Log compaction" in proc.stdout and "Goals" in proc.stdout and "cProfile" in proc.stdout
    data = json.loads((results / "cleaner.json").read_text())

    assert data["benchmark"] == "cleaner" and data["quick"] is True
    for key in ("python", "platform", "cpu_count"):
        assert data["machine"][key]
    params = data["parameters"]
    assert set(data["goals"]) == set(data["goals_met"]) == {"clean_vs_copyfile", "map_within_budget"}
    assert isinstance(data["goals_met"]["clean_vs_copyfile"], bool)
    assert data["goals_met"]["map_within_budget"] is True  # a budget overrun is a bug, not a slow machine
    assert isinstance(data["all_goals_met"], bool)
    assert tuple(data["logs"]) == ("none", *params["codecs"])
    for codec, r in data["logs"].items():
        info, clean = r["log"], r["clean"]
        assert info["codec"] == codec and info["segments"] >= 3, codec
        assert info["active_records"] > 0 and info["records"] > info["keys"], codec
        runs = params["repeats"] if codec == "none" else params["codec_repeats"]
        assert clean["runs"] == len(clean["wall_times_s"]) == runs, codec
        for key in ("mb_per_s_read", "mb_per_s_written", "median_map_s", "median_copy_phase_s"):
            assert _positive(clean[key]), (codec, key)
        assert clean["bytes_read"] == clean["map_bytes_read"] == info["cleanable_bytes"], codec
        assert 0 < clean["bytes_written"] < clean["bytes_read"], codec
        assert clean["messages_written"] == info["distinct_keys_cleanable_range"], codec
        check = clean["correctness"]
        assert check["ok"] and check["records_in_log"] == clean["messages_written"] + info["active_records"], codec
        assert check["keys_checked"] == info["distinct_keys_written"], codec
        mem = clean["memory"]
        assert mem["within_budget"] and 0 < mem["map_memory_bytes"] <= mem["budget_bytes"] == params["budget"]
        assert mem["entries"] == clean["messages_written"] and 0 < mem["utilization"] < 1, codec
        assert _positive(mem["rss_before_mb"]) and _positive(mem["peak_anon_sampled_mb"]), codec
        for how in ("copyfile", "read_write_loop"):
            assert _positive(r["copy"][how]["mb_per_s"]), (codec, how)
            assert len(r["copy"][how]["times_s"]) == params["copy_repeats"], (codec, how)
        assert _positive(r["clean_vs_copyfile"]) and _positive(r["clean_vs_read_write_loop"]), codec

    steady = data["logs"]["none"]["steady_state"]  # a second clean by the same cleaner, in the same child
    assert steady["runs"] == params["repeats"] == len(steady["first_clean_in_process_s"]) and steady["correctness_ok"]
    assert _positive(steady["median_wall_s"]) and _positive(steady["clean_vs_copyfile"])
    assert all(_positive(t) for t in steady["first_clean_in_process_s"])
    assert data["goals_measured"]["clean_vs_copyfile_steady_state"] == steady["clean_vs_copyfile"]
    assert "steady state" in proc.stdout

    partial = data["partial"]
    assert partial["memory"]["budget_bytes"] == params["small_budget"] and partial["memory"]["within_budget"]
    assert partial["memory"]["entries"] == partial["memory"]["max_entries"]  # the map filled up
    assert 0 < partial["dirty_range_covered"] < 1 and partial["segments_cleaned"] >= 1
    assert partial["correctness"]["ok"]
    prof = data["profile"]
    assert prof["by_own_time"] and prof["kafkalog_by_cumulative_time"]
    assert all(row["tottime_s"] >= 0 and row["calls"] > 0 for row in prof["by_own_time"])


@pytest.fixture(scope="module")
def quick_spark_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    pytest.importorskip("pyspark")
    # a SparkSession, ~60 small Spark jobs; slow on a loaded 2-core machine
    return _quick_bench(tmp_path_factory, "spark", timeout=900)


SPARK_WRITE_PATHS = (
    "kafkalog sink (Spark)",
    "noop sink (Spark, reads the input only)",
    "parquet sink (Spark)",
    "kafkalog sink task, no Spark (write_arrow)",
    "embedded bulk: build_batch + Log.append",
    "embedded per record: manager.produce",
)


@pytest.mark.bench_smoke
def test_spark_json_shape(quick_spark_run):
    proc, results = quick_spark_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Batch read" in proc.stdout and "Writes" in proc.stdout and "Goals" in proc.stdout
    data = json.loads((results / "spark.json").read_text())

    assert data["benchmark"] == "spark" and data["quick"] is True
    for key in ("python", "platform", "cpu_count", "pyspark", "java"):
        assert data["machine"][key]
    params = data["parameters"]
    assert set(data["goals"]) == set(data["goals_met"]) == {"read_vs_parquet"}
    assert isinstance(data["goals_met"]["read_vs_parquet"], bool) and isinstance(data["all_goals_met"], bool)
    assert _positive(data["goals_measured"]["read_vs_parquet"])

    topic = data["topic"]
    assert topic["partitions"] == params["partitions"] == len(topic["records_per_partition"]) == 8
    assert topic["records"] == sum(topic["records_per_partition"]) == topic["expected"]["rows"]
    assert set(topic["logs"]) == {"none", *params["codecs"]}
    assert topic["logs"]["none"]["bytes"] >= params["log_bytes"]
    for codec in params["codecs"]:
        assert 0 < topic["logs"][codec]["bytes"] < topic["logs"]["none"]["bytes"], codec  # the values compress
    assert set(data["parquet"]) == set(params["parquet_codecs"])
    assert all(_positive(info["bytes"]) and info["files"] >= 1 for info in data["parquet"].values())
    check = data["checksum"]
    assert check["ok"] and check["rows"] == topic["records"]
    assert len(check["sources"]) == 1 + len(params["codecs"]) + len(params["parquet_codecs"])

    sources = {"kafkalog", f"kafkalog minPartitions={params['min_partitions']}", "arrow passthrough"}
    sources |= {f"kafkalog {c}" for c in params["codecs"]} | {f"parquet {c}" for c in params["parquet_codecs"]}
    assert set(data["scans"]) == {"aggregate", "noop"}
    assert set(data["scans"]["aggregate"]) == sources
    assert set(data["scans"]["noop"]) < sources and "kafkalog" in data["scans"]["noop"]
    for query, figs in data["scans"].items():
        for name, fig in figs.items():
            for key in ("rows_per_s", "mb_per_s", "median_s", "vs_parquet", "vs_parquet_by_run_median"):
                assert _positive(fig[key]), (query, name, key)
            assert len(fig["times_s"]) == len(fig["vs_parquet_by_run"]) == params["scan_repeats"], (query, name)
            assert set(fig["cpu_s"]) == {"jvm", "python", "driver"}, (query, name)
            assert fig["tasks"] >= 1, (query, name)
        assert figs[f"parquet {params['parquet_codecs'][0]}"]["vs_parquet"] == 1
        assert figs[f"kafkalog minPartitions={params['min_partitions']}"]["tasks"] > figs["kafkalog"]["tasks"]

    inproc = data["inprocess_read"]
    assert inproc["rows"] == topic["records_per_partition"][0]
    for name in ("reader_read", "read_range"):
        assert _positive(inproc[name]["rows_per_s"]) and _positive(inproc[name]["mb_per_s"]), name
        assert len(inproc[name]["times_s"]) == params["inprocess_repeats"], name
    assert inproc["profile"]["by_own_time"] and all(row["calls"] > 0 for row in inproc["profile"]["by_own_time"])

    writes = data["writes"]
    assert writes["checked"] is True
    assert writes["records"] == params["write_records"] and writes["produce_records"] == params["produce_records"]
    assert tuple(writes["paths"]) == SPARK_WRITE_PATHS
    for name, fig in writes["paths"].items():
        for key in ("records_per_s", "mb_per_s", "median_s", "sink_vs_this"):
            assert _positive(fig[key]), (name, key)
        assert len(fig["times_s"]) == params["write_repeats"], name
        if name.startswith("noop"):
            assert fig["log_bytes"] == 0
        else:
            assert _positive(fig["log_bytes"]), name
    assert writes["paths"]["embedded per record: manager.produce"]["records"] == params["produce_records"]


@pytest.fixture(scope="module")
def quick_recovery_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    return _quick_bench(tmp_path_factory, "recovery")


@pytest.mark.bench_smoke
def test_recovery_json_shape(quick_recovery_run):
    """The killed build is recovered (the benchmark verifies every partition itself) with each thread count."""
    proc, results = quick_recovery_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "LogManager startup/shutdown" in proc.stdout
    data = json.loads((results / "recovery.json").read_text())
    assert data["benchmark"] == "recovery" and data["quick"] is True
    params = data["parameters"]
    assert set(data["figures"]) == {str(t) for t in params["threads"]}
    for threads, fig in data["figures"].items():
        for key in ("unclean_start_s", "shutdown_s", "clean_start_s"):
            assert _positive(fig[key]), (threads, key)
        assert len(fig["rounds"]) == params["rounds"], threads
    prof = data["profile_unclean_start"]
    assert _positive(prof["total_s"]) and all(row["calls"] > 0 for row in prof["by_own_time"])


def test_every_benchmark_has_a_smoke_test():
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "benchmarks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # each tested above, the broker's in test_broker_bench.py, the scale row's quick form in test_broker_scale.py
    expected = {"record", "storage", "manager", "dump", "cleaner", "spark", "broker", "scale", "recovery"}
    assert set(module.BENCHMARKS) == expected
