"""I/O faults (FaultInjectingFileIO), log dir failure handling, and the quick reliability run CI relies on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalog.errors import KafkaStorageError
from kafkalog.logdir import CleanShutdownFile
from kafkalog.manager import LogManager
from kafkalog.storage.fileio import FaultInjectingFileIO, file_io, injected
from kafkalog.storage.log import Log
from kafkalog.testing import MockTime

ROOT = Path(__file__).resolve().parent.parent


def _values(lg: Log) -> list[bytes]:
    return [r.value for r in lg.records(isolation="log_end")]


@pytest.mark.parametrize("err", ["ENOSPC", "EIO", "EFBIG"])
def test_failed_append_is_rolled_back_and_the_log_stays_usable(tmp_path, err):
    lg = Log.open(tmp_path / "t-0")
    lg.append([(None, b"a")])
    size = lg.active_segment.size
    fault = FaultInjectingFileIO("write", err, torn=True)
    with injected(fault), pytest.raises(KafkaStorageError, match="Error while appending records to t-0 in dir") as e:
        lg.append([(None, b"b" * 1000)])
    assert file_io() is not fault and fault.injected == 1
    assert e.value.rolled_back and e.value.io_error.errno == fault.errno
    assert lg.active_segment.size == size == os.path.getsize(lg.active_segment.log.path)
    assert lg.log_end_offset == 1 and not lg.is_offline  # standalone: rolled back, still consistent
    lg.append([(None, b"c")])
    lg.close()
    with Log.open(tmp_path / "t-0", had_clean_shutdown=False) as again:
        assert _values(again) == [b"a", b"c"]


def test_failed_rollback_takes_the_log_offline(tmp_path):
    lg = Log.open(tmp_path / "t-0")
    lg.append([(None, b"a")])
    fault = FaultInjectingFileIO("write", "EIO", torn=True, then_fail=("truncate",))
    with injected(fault), pytest.raises(KafkaStorageError):
        lg.append([(None, b"b" * 1000)])
    assert lg.is_offline
    with pytest.raises(KafkaStorageError, match="offline"):
        lg.append([(None, b"c")])
    with pytest.raises(KafkaStorageError, match="offline"):
        lg.read(0)
    lg.close()
    with Log.open(tmp_path / "t-0", had_clean_shutdown=False) as again:  # recovery cuts the torn tail
        assert _values(again) == [b"a"]


def test_failed_fsync_takes_the_log_offline(tmp_path):
    lg = Log.open(tmp_path / "t-0", {"flush.messages": 1})
    lg.append([(None, b"a")])
    fault = FaultInjectingFileIO("fsync", "EIO", suffix=".log")
    with injected(fault), pytest.raises(KafkaStorageError, match="Error while flushing"):
        lg.append([(None, b"b")])
    assert lg.is_offline


def test_a_failed_dir_goes_offline_and_the_others_keep_serving(tmp_path):
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    with LogManager(dirs, clock=MockTime()) as manager:
        manager.create_topic("a", 2)  # one partition per dir
        manager.create_topic("b", 2)
        bad = manager.get_log("a", 0).directory.parent
        for topic in ("a", "b"):
            for p in range(2):
                manager.produce(topic, b"v", partition=p)
        fault = FaultInjectingFileIO("write", "ENOSPC", path_contains=str(bad))
        with injected(fault), pytest.raises(KafkaStorageError, match=str(bad)):
            manager.produce("a", b"w", partition=0)
        assert manager.offline_log_dirs == [bad] and bad not in manager.online_log_dirs
        for tp in [("a", 0), ("a", 1), ("b", 0), ("b", 1)]:
            lg = manager.get_log(*tp)
            if lg.directory.parent == bad:
                with pytest.raises(KafkaStorageError):
                    lg.append([(None, b"x")])
                with pytest.raises(KafkaStorageError):
                    list(manager.consume(*tp))
            else:
                lg.append([(None, b"x")])
                assert [r.value for r in manager.consume(*tp)] == [b"v", b"x"]
        manager.checkpoint_recovery_points()  # skips the offline dir
        manager.flush_dirty_logs()
        manager.create_topic("c", 1)
        assert manager.get_log("c").directory.parent != bad
    assert not CleanShutdownFile(bad).exists()  # the offline dir is recovered at the next start
    with LogManager(dirs, clock=MockTime()) as manager:
        assert manager.offline_log_dirs == []
        for p in range(2):
            assert [r.value for r in manager.consume("a", p)] in ([b"v"], [b"v", b"x"])


def test_checkpoint_write_failure_takes_its_dir_offline(tmp_path):
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    with LogManager(dirs, clock=MockTime()) as manager:
        manager.create_topic("a", 2)
        with injected(FaultInjectingFileIO("fsync", "EIO", path_contains=str(dirs[0].resolve()), suffix=".tmp")):
            manager.checkpoint_recovery_points()
        assert manager.offline_log_dirs == [dirs[0].resolve()]


def test_unknown_operation_is_refused():
    with pytest.raises(ValueError):
        FaultInjectingFileIO("rename")


def test_quick_reliability_run_has_zero_losses_and_zero_corruption(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.reliability", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())
    # 4 kill -9 rows (two flush modes; large batches; the partition layer's HW property), 7 injected-fault rows on
    # appends and flushes, 4 on reads and producer snapshots, 1 RLIMIT_FSIZE row, 1 load row, then one row per
    # fuzzed parser and bad-input entrance.
    assert len([r for r in rows if not r["check"].startswith(("fuzz:", "bad input:"))]) == 17
    assert sum(r["check"].startswith(("injected EIO on read", "injected ENOSPC on producer")) for r in rows) == 2
    assert any(r["check"].startswith("fuzz:") for r in rows) and any(r["check"].startswith("bad input:") for r in rows)
    for row in rows:
        assert row["lost"] == 0 and row["corrupt"] == 0 and row["failures"] == [], row
        assert row["runs"] >= 1
    kill = [r for r in rows if r["check"].startswith("kill -9")]
    assert sum(r["runs"] for r in kill[:2]) == 20 and all(r["acked"] > 0 for r in kill)
    assert kill[2]["check"].endswith("checked while written") and kill[2]["runs"] == 2
    assert kill[3]["check"].startswith("kill -9 at random: HW == LEO") and kill[3]["runs"] == 3
    # the load row (tests/test_reliability_load.py checks its figures): real peaks against their bounds
    (load,) = [r for r in rows if r["check"].startswith("load: 1,000 partitions")]
    assert load["ok"] and load["acked"] > 0 and "peak fds" in load["note"] and "RSS" in load["note"]
    assert "not measured" not in proc.stdout
