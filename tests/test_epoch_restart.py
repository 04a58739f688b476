"""A restart rewrites no leader-epoch-checkpoint that would get the bytes it already holds.

Kafka's loader truncates the epoch cache at the log end (LogLoader: truncateFromEndAsyncFlush), so an empty
partition loses its ``0 0`` entry at every load, and Partition.makeLeader records it again (Kafka writes the file
twice then: the asynchronous flush of the truncation and the assignment). kafkalog truncates in memory at load,
writes the cache only when its bytes differ from the file's, and flushes a truncation that no assignment covered
before the log's first append (or at close). Counted here through the path users take (LogManager, ``kafkalog
serve``), with the bytes of a partition Kafka created and never produced to (../shared/fixtures); the crash cases
run in a child process killed with SIGKILL before any flush.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog import LogManager
from kafkalog.storage.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile
from kafkalog.storage.leader_epoch import LeaderEpochFileCache
from kafkalog.storage.log import Log
from kafkalog.testing import MockTime

REPO = Path(__file__).resolve().parents[1]
FILE = "leader-epoch-checkpoint"
NEVER_PRODUCED = ("broker-logs", "itumelengmogase-cp77-kraft", "kafka-data", "patient_admissions-1")
EMPTY_PARTITIONS = 40


def kafka_empty_partition_bytes() -> bytes:
    """What Kafka's leader-epoch-checkpoint holds for a partition led at epoch 0 that never got a record."""
    return (fixture_path(*NEVER_PRODUCED) / FILE).read_bytes()


class EpochRenames:
    """Every rename onto a leader-epoch-checkpoint (each write of one ends in one: CheckpointFile.write_bytes and
    write_all), by partition dir name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dirs: list[str] = []
        real_replace = os.replace

        def replace(src, dst, *args, **kwargs):
            if Path(dst).name == FILE:
                self.dirs.append(Path(dst).parent.name)
            return real_replace(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "replace", replace)


def stats(files: list[Path]) -> list[tuple[int, int]]:
    return [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]


# ----- the cache ------------------------------------------------------------------------------------------------------
def test_a_write_of_the_bytes_the_file_holds_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / FILE
    path.write_bytes(kafka_empty_partition_bytes())
    renames = EpochRenames(monkeypatch)
    cache = LeaderEpochFileCache(path)
    assert cache.truncate_from_end(0, flush=False) == [(0, 0)]  # the loader's truncation of an empty partition
    assert cache.stale and cache.entries == [] and path.read_bytes() == kafka_empty_partition_bytes()
    cache.assign(0, 0)  # made leader again: the file holds exactly this
    assert not cache.pending and renames.dirs == []
    cache.flush()
    cache.clear_and_flush()  # a real change is written, fsynced
    assert path.read_bytes() == b"0\n0\n" and renames.dirs == [tmp_path.name]
    cache.clear_and_flush()
    cache.assign(0, 0)
    assert path.read_bytes() == kafka_empty_partition_bytes() and renames.dirs == [tmp_path.name] * 2


def test_a_truncation_left_stale_is_written_by_flush_and_by_flush_all(tmp_path: Path) -> None:
    for i, flush in enumerate((LeaderEpochFileCache.flush, lambda c: LeaderEpochFileCache.flush_all([c]))):
        path = tmp_path / f"{i}" / FILE
        path.parent.mkdir()
        LeaderEpochCheckpointFile(path).write([(0, 0), (2, 5), (4, 9)])
        cache = LeaderEpochFileCache(path)
        cache.truncate_from_end(9, flush=False)
        cache.truncate_from_start(3, flush=False)
        assert cache.entries == [(0, 3), (2, 5)] and path.read_bytes() == b"0\n3\n0 0\n2 5\n4 9\n"
        flush(cache)
        assert not cache.pending and path.read_bytes() == b"0\n2\n0 3\n2 5\n"


def test_a_sync_write_after_an_unsynced_one_of_the_same_bytes_writes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Equal bytes skip a write only when they are durable as the write asks: a truncation is written without
    fsync, so an assignment that comes back to the same bytes is written (fsynced) again."""
    cache = LeaderEpochFileCache(tmp_path / FILE)
    cache.assign(0, 0)
    cache.assign(1, 4)
    cache.truncate_from_end(4)  # written at once, without fsync: "0 0"
    renames = EpochRenames(monkeypatch)
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    cache.assign(1, 4)
    cache.truncate_from_end(4)
    cache.clear_and_flush()
    cache.assign(0, 0)
    assert renames.dirs == [tmp_path.name] * 4 and len(fsyncs) >= 3


# ----- LogManager restarts --------------------------------------------------------------------------------------------
def _manager_with_empty_and_written_partitions(root: Path) -> tuple[list[Path], list[Path]]:
    with LogManager([root]) as manager:
        manager.create_topic("empty", EMPTY_PARTITIONS)
        manager.create_topic("full", 2)
        for p in range(2):
            for i in range(3):
                manager.produce("full", b"v%d" % i, partition=p)
    empty = [root / f"empty-{p}" / FILE for p in range(EMPTY_PARTITIONS)]
    full = [root / f"full-{p}" / FILE for p in range(2)]
    assert [f.read_bytes() for f in empty + full] == [kafka_empty_partition_bytes()] * (EMPTY_PARTITIONS + 2)
    return empty, full


@pytest.mark.parametrize("shutdown", ["clean", "unclean"])
def test_a_log_manager_restart_rewrites_no_epoch_checkpoint_and_a_real_epoch_change_still_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shutdown: str
) -> None:
    root = tmp_path / "logs"
    empty, full = _manager_with_empty_and_written_partitions(root)
    if shutdown == "unclean":  # as after a crash, with nothing flushed: every batch is recovered (its epoch relearnt)
        (root / ".kafka_cleanshutdown").unlink()
        recovery = OffsetCheckpointFile(root / "recovery-point-offset-checkpoint")
        recovery.write(dict.fromkeys(recovery.read(), 0))
    before = stats(empty + full)
    renames = EpochRenames(monkeypatch)
    with LogManager([root]) as manager:
        assert renames.dirs == [] and stats(empty + full) == before
        for p in range(EMPTY_PARTITIONS):  # led at epoch 0 from offset 0 again, as Kafka's makeLeader records it
            assert manager.get_log("empty", p).leader_epoch_cache.entries == [(0, 0)]
        manager.produce("empty", b"first", partition=0)  # the file holds epoch 0 at 0 already
        manager.produce("full", b"more", partition=1)
        assert renames.dirs == []
        manager.replica_manager.get_partition("full", 0).make_leader(3)  # a new epoch at log end 3: written at once
        assert renames.dirs == ["full-0"]
        assert (root / "full-0" / FILE).read_bytes() == b"0\n2\n0 0\n3 3\n"
    assert renames.dirs == ["full-0"]  # the shutdown wrote no epoch checkpoint
    assert stats(empty + full[1:]) == before[:EMPTY_PARTITIONS] + before[EMPTY_PARTITIONS + 1 :]
    assert [f.read_bytes() for f in empty] == [kafka_empty_partition_bytes()] * EMPTY_PARTITIONS


def test_a_restart_still_writes_a_truncation_that_changes_the_file(tmp_path: Path, monkeypatch) -> None:
    """An entry past the log end (recorded by a leader that crashed before any record at its epoch) is dropped at
    load in memory; restarted as leader at the epoch its records have, the partition's first append writes the
    truncation first (else the file would name the newer epoch for records appended at the older one)."""
    root = tmp_path / "logs"
    _manager_with_empty_and_written_partitions(root)
    LeaderEpochCheckpointFile(root / "full-0" / FILE).write([(0, 0), (1, 3)])
    LeaderEpochCheckpointFile(root / "empty-0" / FILE).write([(0, 0), (1, 0)])  # truncated to nothing at load
    renames = EpochRenames(monkeypatch)
    with LogManager([root]) as manager:
        assert renames.dirs == []
        assert manager.get_log("full", 0).leader_epoch_cache.entries == [(0, 0)]
        manager.produce("full", b"at epoch 0", partition=0)
        assert renames.dirs == ["full-0"] and (root / "full-0" / FILE).read_bytes() == b"0\n1\n0 0\n"
    assert sorted(renames.dirs) == ["empty-0", "full-0"]  # the other at close
    assert (root / "empty-0" / FILE).read_bytes() == kafka_empty_partition_bytes()


# ----- crashes between the truncation in memory and its flush -----------------------------------------------------
CRASH_CHILD = """
import os, signal, sys
from kafkalog.partition import Partition
from kafkalog.storage.log import Log

directory, step = sys.argv[1], sys.argv[2]
lg = Log.open(directory, had_clean_shutdown=False, recovery_point=3)  # as after the previous step's kill
if step == "lead-at-1":  # a leader at epoch 1 from log end 3, killed before any record
    Partition(lg).make_leader(1)
elif step == "append-at-0":  # restarted as leader at the epoch its records have; two records, flushed
    Partition(lg).make_leader()
    for i in range(2):
        lg.append([(None, b"after-%d" % i)])
    lg.flush()
print(lg.leader_epoch_cache.entries, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _crash(directory: Path, step: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    child = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, str(directory), step], capture_output=True, text=True, env=env, timeout=120
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    return child.stdout.strip()


def test_a_crash_before_the_loaded_truncation_is_flushed_leaves_a_correct_state(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    with Log.open(d, clock=MockTime()) as lg:
        for i in range(3):
            lg.append([(None, b"v%d" % i)], leader_epoch=0)
    assert _crash(d, "lead-at-1") == "[EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=1, start_offset=3)]"
    assert (d / FILE).read_bytes() == b"0\n2\n0 0\n1 3\n"  # makeLeader's entry, written (fsynced) at once
    assert _crash(d, "load-only") == "[EpochEntry(epoch=0, start_offset=0)]"
    assert (d / FILE).read_bytes() == b"0\n2\n0 0\n1 3\n"  # the load's truncation was not written: killed first
    with Log.open(d, clock=MockTime(), recovery_point=3) as lg:  # the next load truncates the same entry again
        assert lg.leader_epoch_cache.entries == [(0, 0)]
    assert (d / FILE).read_bytes() == b"0\n1\n0 0\n"  # written at close


def test_a_crash_after_appends_at_the_older_epoch_keeps_their_epoch(tmp_path: Path) -> None:
    """The stale file names epoch 1 from offset 3; the restarted leader appends records 3-4 at epoch 0 and is killed
    with them flushed: the truncation was written before them, so the next load does not give them epoch 1."""
    d = tmp_path / "t-0"
    with Log.open(d, clock=MockTime()) as lg:
        for i in range(3):
            lg.append([(None, b"v%d" % i)], leader_epoch=0)
    _crash(d, "lead-at-1")
    assert _crash(d, "append-at-0") == "[EpochEntry(epoch=0, start_offset=0)]"
    assert (d / FILE).read_bytes() == b"0\n1\n0 0\n"
    with Log.open(d, clock=MockTime(), recovery_point=5) as lg:  # unclean, nothing left to recover
        assert lg.log_end_offset == 5
        assert lg.leader_epoch_cache.entries == [(0, 0)]
        assert lg.leader_epoch_cache.epoch_for_offset(4) == 0
        epochs, offset = [], 0
        while offset < lg.log_end_offset:  # the child's appends rolled a segment (its clock is not MockTime's)
            for b in lg.read(offset, 1 << 20, "log_end").records.batches():
                epochs.append(b.partition_leader_epoch)
                offset = b.last_offset + 1
        assert epochs == [0] * 5
