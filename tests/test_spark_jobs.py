"""The pipeline jobs: export (incremental, no duplicates), report (sizes, records, retention, dirty ratio)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog.cli import main
from kafkalog.manager import LogManager
from kafkalog.record import build_batch
from kafkalog.testing import MockTime

pytest.importorskip("pyspark")

T0 = 1_700_000_000_000


def _produce(manager: LogManager, topic: str, partition: int, start: int, count: int, ts: int) -> None:
    keys = [b"k%d" % (i % 7) for i in range(start, start + count)]
    values = [b"v%d" % i for i in range(start, start + count)]
    manager.get_log(topic, partition).append(build_batch(keys, values, [ts] * count))


def test_export_is_incremental_and_repeatable(spark, tmp_path: Path) -> None:
    logs, out = tmp_path / "logs", tmp_path / "export"
    from kafkalog.spark.jobs import export

    # The records are years old (T0) and the manager's retention check runs 30 s after it starts: on a loaded
    # machine Spark may still be starting then, so this topic keeps its records forever (the test is about export).
    with LogManager([logs], {"log.cleaner.enable": "false"}) as manager:
        manager.create_topic("events", 2, {"segment.bytes": 2000, "retention.ms": "-1"})
        for p in (0, 1):
            _produce(manager, "events", p, 0, 60, T0)
        first = export(spark, [str(logs)], "events", str(out))
        assert first.rows == 120 and first.ranges == {0: (0, 60), 1: (0, 60)}
        for p in (0, 1):
            _produce(manager, "events", p, 60, 25, T0 + 1)
        second = export(spark, [str(logs)], "events", str(out))
        assert second.rows == 50 and second.ranges == {0: (60, 85), 1: (60, 85)}
        assert export(spark, [str(logs)], "events", str(out)).up_to_date
    state = json.loads((out / "_kafkalog_offsets.json").read_text())
    assert state == {"events": {"0": 85, "1": 85}}  # the Kafka source's offsets JSON
    rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in rows)
    assert got == sorted((p, i, b"v%d" % i) for p in (0, 1) for i in range(85))


def test_export_rerun_after_lost_state_does_not_duplicate(spark, tmp_path: Path) -> None:
    """A crash between writing a run and saving the offsets repeats that run into the same directory."""
    logs, out = tmp_path / "logs", tmp_path / "export"
    from kafkalog.spark.jobs import export

    with LogManager([logs], {"log.cleaner.enable": "false"}) as manager:
        manager.create_topic("events", 1)
        _produce(manager, "events", 0, 0, 40, T0)
    export(spark, [str(logs)], "events", str(out))
    (out / "_kafkalog_offsets.json").unlink()
    again = export(spark, [str(logs)], "events", str(out))
    assert again.rows == 40
    assert spark.read.parquet(str(out)).count() == 40


def test_report_sizes_records_retention_and_dirty_ratio(spark, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    clock = MockTime(start_ms=T0 + 10 * 3_600_000)
    with LogManager([logs], {"log.cleaner.enable": "false"}, clock=clock) as manager:
        manager.create_topic("old", 1, {"segment.bytes": 1500, "retention.ms": 3_600_000})
        manager.create_topic("kv", 1, {"segment.bytes": 1500, "cleanup.policy": "compact"})
        for i in range(10):  # 'old': every batch 10 hours old except the last two
            _produce(manager, "old", 0, i * 20, 20, T0 if i < 8 else clock.milliseconds())
            _produce(manager, "kv", 0, i * 20, 20, T0)
        described = {p.partition: p for p in manager.describe_topic("old").partitions}
        old_log = manager.get_log("old", 0)
        expected_doomed = [
            s for s in list(old_log.segments)[:-1] if clock.milliseconds() - s.largest_timestamp > 3_600_000
        ]
        kv_segments = len(manager.get_log("kv", 0).segments)
    from kafkalog.spark.jobs import report

    segments, partitions = report(spark, [str(logs)], now_ms=clock.milliseconds())
    by_name = {(p.topic, p.partition): p for p in partitions}
    old = by_name[("old", 0)]
    assert old.bytes == described[0].size_bytes and old.records == 200
    assert old.segments == described[0].segments
    assert old.retention_deletes_segments == len(expected_doomed) > 0
    assert old.min_timestamp == T0 and old.max_timestamp == clock.milliseconds()
    kv = by_name[("kv", 0)]
    assert kv.cleanup_policy == "compact" and kv.retention_deletes_segments == 0
    assert kv.dirty_ratio == 1.0 and kv.segments == kv_segments  # never cleaned: every inactive byte is dirty
    assert segments.count() == old.segments + kv.segments


def test_report_command_prints_a_table(spark, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with LogManager([logs], {"log.cleaner.enable": "false"}) as manager:
        manager.create_topic("t", 2)
        _produce(manager, "t", 1, 0, 5, T0)
    result = CliRunner().invoke(main, ["spark", "report", "--log-dir", str(logs), "--output", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "t-0" in result.output and "t-1" in result.output
    assert spark.read.parquet(str(tmp_path / "r")).count() == 2  # one (active) segment per partition


def test_ingest_json_files_keyed_by_a_column(spark, tmp_path: Path) -> None:
    logs, source = tmp_path / "logs", tmp_path / "in"
    source.mkdir()
    people = [{"user": f"u{i % 5}", "n": i} for i in range(30)]
    (source / "part-0.json").write_text("\n".join(json.dumps(p) for p in people) + "\n")
    with LogManager([logs], {"log.cleaner.enable": "false"}) as manager:
        manager.create_topic("people", 3)
    from kafkalog.spark.jobs import ingest

    assert ingest(spark, str(source), [str(logs)], "people", fmt="json", key_column="user") == 30
    with LogManager([logs], {"log.cleaner.enable": "false"}) as manager:
        got = [(r.partition, r.key, json.loads(r.value)) for r in manager.consume("people")]
    assert sorted((k, v["n"]) for _, k, v in got) == sorted((p["user"].encode(), p["n"]) for p in people)
    from kafkalog.record import default_partition

    assert all(p == default_partition(k, 3) for p, k, _ in got)  # keyed: murmur2 placement


def test_report_explain_and_retention_agree_when_the_active_segment_goes_too(spark, tmp_path: Path) -> None:
    """Every segment of the partition, the active one included, is past retention.ms: a retention check rolls a new
    empty segment and deletes them all. `explain retention` and the Spark report count them all too (the report
    used to leave the active segment out: 3 where Kafka deletes 4)."""
    logs = tmp_path / "logs"
    with LogManager([logs], {"log.cleaner.enable": "false"}) as manager:
        manager.create_topic("clicks", 1, {"segment.bytes": 600, "retention.ms": 3_600_000})
        for i in range(8):
            _produce(manager, "clicks", 0, i * 20, 20, T0)  # years old
        segments = len(manager.get_log("clicks", 0).segments)
    assert segments >= 3
    from kafkalog.spark.jobs import report

    _, partitions = report(spark, [str(logs)])
    assert [p.retention_deletes_segments for p in partitions] == [segments]
    explained = CliRunner().invoke(main, ["explain", "retention", str(logs), "--topic", "clicks"])
    assert explained.exit_code == 0, explained.output
    assert f"Deletable now: {segments} segment(s)" in explained.output
    assert "Every segment goes, so it first rolls an empty one." in explained.output
    with LogManager([logs], {"log.cleaner.enable": "false"}) as manager:
        log = manager.get_log("clicks", 0)
        assert log.delete_old_segments() == segments
        assert [s.size for s in log.segments] == [0] and log.log_start_offset == 160
