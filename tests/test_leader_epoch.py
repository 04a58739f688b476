"""The leader epoch cache (Kafka's LeaderEpochFileCache) and its leader-epoch-checkpoint file.

Expected answers come from Kafka's LeaderEpochFileCacheTest and the method contracts in
storage/internals/epoch/LeaderEpochFileCache.java; file bytes from Kafka's CheckpointFile writer and from
the leader-epoch-checkpoint files real brokers wrote (../shared/fixtures/broker-logs).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog.record import RecordBatchBuilder
from kafkalog.storage.checkpoints import EpochEntry, LeaderEpochCheckpointFile
from kafkalog.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochFileCache
from kafkalog.storage.log import Log
from kafkalog.testing import MockTime

FILE = "leader-epoch-checkpoint"


def cache_with(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(tmp_path / FILE)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_assign_writes_kafkas_bytes(tmp_path: Path) -> None:
    # CheckpointFile.write: the version, the entry count, then "<epoch> <startOffset>", each line ended by "\n".
    cache = cache_with(tmp_path, (0, 0), (2, 150), (5, 3000))
    assert (tmp_path / FILE).read_bytes() == b"0\n3\n0 0\n2 150\n5 3000\n"
    assert LeaderEpochFileCache(tmp_path / FILE).entries == [(0, 0), (2, 150), (5, 3000)]
    cache.assign(5, 3100)  # the latest epoch again, later: nothing to write (isUpdateNeeded)
    assert (tmp_path / FILE).read_bytes() == b"0\n3\n0 0\n2 150\n5 3000\n"


def test_no_file_until_the_first_entry(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(tmp_path / FILE)
    assert not (tmp_path / FILE).exists() and cache.latest_epoch is None
    with pytest.raises(ValueError, match="invalid partition leader epoch entry"):
        cache.assign(-1, 0)


def test_assign_removes_non_monotonic_entries(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 10))
    cache.assign(3, 9)  # an epoch reassigned: it and everything after it go (maybeTruncateNonMonotonicEntries)
    assert cache.entries == [(2, 6), (3, 9)]
    cache.assign(5, 7)  # a start offset at or below later entries' removes them too
    assert cache.entries == [(2, 6), (5, 7)]
    cache.assign(5, 6)  # the latest epoch at a smaller offset replaces its entry
    assert cache.entries == [(5, 6)]


def test_end_offset_for(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 6), (4, 11), (6, 15))
    leo = 20
    assert cache.end_offset_for(UNDEFINED_EPOCH, leo) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.end_offset_for(6, leo) == (6, leo)  # the latest epoch ends at the log end
    assert cache.end_offset_for(2, leo) == (2, 11)
    assert cache.end_offset_for(3, leo) == (2, 11)  # an unknown epoch: the largest one below it
    assert cache.end_offset_for(5, leo) == (4, 15)
    assert cache.end_offset_for(1, leo) == (1, 6)  # older than all: the first known epoch's start
    assert cache.end_offset_for(7, leo) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert LeaderEpochFileCache(tmp_path / "empty").end_offset_for(0, leo) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert [cache.epoch_for_offset(o) for o in (5, 6, 10, 11, 19)] == [None, 2, 2, 4, 6]


def test_truncate_from_end_and_start(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    assert cache.truncate_from_end(9) == [(4, 11)]
    assert cache.entries == [(2, 6), (3, 8)]
    assert cache.truncate_from_end(8) == [(3, 8)]  # an entry starting at the end offset goes
    assert cache.latest_epoch == 2
    cache.assign(3, 8)
    cache.assign(4, 11)
    assert cache.truncate_from_start(9) == [(2, 6), (3, 8)]  # the last epoch before moves up to the start
    assert cache.entries == [(3, 9), (4, 11)]
    assert cache.truncate_from_start(11) == [(3, 9), (4, 11)]  # exclusive: an entry at the offset stays
    assert cache.entries == [(4, 11)]
    assert LeaderEpochCheckpointFile(tmp_path / FILE).read() == [(4, 11)]
    cache.clear_and_flush()
    assert (tmp_path / FILE).read_bytes() == b"0\n0\n"


def _epoch_files() -> list[Path]:
    return sorted(fixture_path("broker-logs").glob("*/*/*/" + FILE))


def test_every_fixture_checkpoint_loads_and_is_rewritten_byte_for_byte(tmp_path: Path) -> None:
    files = _epoch_files()
    assert len(files) >= 165
    for i, path in enumerate(files):
        cache = LeaderEpochFileCache(path)
        assert cache.entries == LeaderEpochCheckpointFile(path, create=False).read()
        copy = LeaderEpochFileCache(tmp_path / f"{i}" / FILE, entries=[])
        (tmp_path / f"{i}").mkdir()
        for entry in cache.entries:
            copy.assign(*entry)
        if not len(cache):
            copy.clear_and_flush()
        assert (tmp_path / f"{i}" / FILE).read_bytes() == path.read_bytes(), path


def _partition_copies(tmp_path: Path, count: int) -> list[Path]:
    """Copies of fixture partitions that hold a leader-epoch-checkpoint and data."""
    chosen = []
    for path in _epoch_files():
        part = path.parent
        if any(p.stat().st_size for p in part.glob("*.log")) and len(chosen) < count:
            target = tmp_path / part.parent.parent.name / part.name
            shutil.copytree(part, target)
            chosen.append(target)
    return chosen


def test_fixture_partitions_load_their_epochs(tmp_path: Path) -> None:
    for part in _partition_copies(tmp_path, 6):
        kafka_entries = LeaderEpochCheckpointFile(part / FILE, create=False).read()
        with Log.open(part, clock=MockTime(), had_clean_shutdown=True) as lg:
            expected = [e for e in kafka_entries if e.start_offset < lg.log_end_offset]
            assert lg.leader_epoch_cache.entries == expected, part
            if expected:
                assert lg.leader_epoch_cache.end_offset_for(expected[-1].epoch, lg.log_end_offset) == (
                    expected[-1].epoch,
                    lg.log_end_offset,
                )


def _batch(value: bytes = b"v") -> bytes:
    builder = RecordBatchBuilder(clock=MockTime())
    builder.append(None, value)
    return builder.build()


def test_log_assigns_epochs_on_leader_appends_and_keeps_them_across_restarts(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    with Log.open(d, clock=MockTime()) as lg:
        lg.append(_batch(), leader_epoch=0)
        lg.append(_batch(), leader_epoch=0)
        lg.append([(None, b"x")] * 3, leader_epoch=3)
        lg.append(_batch(b"y" * 20000), leader_epoch=5)  # the large-batch path
        assert lg.leader_epoch_cache.entries == [(0, 0), (3, 2), (5, 5)]
        assert (d / FILE).read_bytes() == b"0\n3\n0 0\n3 2\n5 5\n"
        assert [b.partition_leader_epoch for b in lg.read(0, 1 << 20, "log_end").records.batches()] == [0, 0, 3, 5]
    with Log.open(d, clock=MockTime(), had_clean_shutdown=True) as lg:
        assert lg.leader_epoch_cache.entries == [(0, 0), (3, 2), (5, 5)]
        lg.truncate_to(4)
        assert (d / FILE).read_bytes() == b"0\n2\n0 0\n3 2\n"
        lg.update_high_watermark(4)
        lg.maybe_increment_log_start_offset(3)
        assert lg.leader_epoch_cache.entries == [(3, 3)]
        lg.truncate_fully_and_start_at(10)
        assert lg.leader_epoch_cache.entries == [] and (d / FILE).read_bytes() == b"0\n0\n"


def test_follower_appends_take_each_batchs_epoch(tmp_path: Path) -> None:
    with Log.open(tmp_path / "src-0", clock=MockTime()) as source:
        for epoch in (1, 1, 4, 7):
            source.append(_batch(), leader_epoch=epoch)
        raw = source.read(0, 1 << 20, "log_end").records.tobytes()
    with Log.open(tmp_path / "dst-0", clock=MockTime()) as follower:
        follower.append_as_follower(raw)
        assert follower.leader_epoch_cache.entries == [(1, 0), (4, 2), (7, 3)]


def test_entries_past_the_log_end_are_truncated_at_load(tmp_path: Path) -> None:
    """Issue 25: Kafka's LogLoader truncates the cache to the loaded log's end (truncateFromEnd)."""
    d = tmp_path / "t-0"
    with Log.open(d, clock=MockTime()) as lg:
        for _ in range(4):
            lg.append(_batch(), leader_epoch=2)
    LeaderEpochCheckpointFile(d / FILE).write([(1, 0), (2, 2), (6, 4), (9, 40)])
    with Log.open(d, clock=MockTime(), had_clean_shutdown=True) as lg:
        assert lg.log_end_offset == 4
        assert lg.leader_epoch_cache.entries == [(1, 0), (2, 2)]
    assert LeaderEpochCheckpointFile(d / FILE).read() == [(1, 0), (2, 2)]


def test_recovery_rebuilds_a_lost_checkpoint_from_the_batches(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    with Log.open(d, clock=MockTime()) as lg:
        for epoch in (0, 0, 2, 2, 5):
            lg.append(_batch(), leader_epoch=epoch)
    (d / FILE).unlink()
    with Log.open(d, clock=MockTime(), had_clean_shutdown=False, recovery_point=0) as lg:
        assert lg.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(2, 2), EpochEntry(5, 4)]
