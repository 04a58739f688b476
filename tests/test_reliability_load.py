"""The load test of ``make reliability`` (quick form), and focused tests for the leaks it found.

- an index's memory map kept a duplicate of its file descriptor (CPython's mmap), three descriptors per segment;
- a segment renamed ``.deleted`` over the ``.deleted`` files of an earlier segment with the same base offset (the
  cleaner replacing a log's first segment twice within file.delete.delay.ms) left that earlier segment's
  descriptor and maps on unlinked files, and its delete then unlinked the newer segment's files;
- segments waiting for their delayed delete kept their descriptor and maps after the log was closed;
- deleting a topic took its logs out of the manager after aborting their clean, so the cleaner could pick one up
  again and fail on a vanished directory; a retention pass could rename files of a closed log.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from kafkalog import LogManager
from kafkalog.storage.index import OffsetIndex, TimeIndex
from kafkalog.storage.log import Log
from kafkalog.testing import MockTime
from tools.reliability.load import (
    QUICK,
    Child,
    fd_targets,
    mapped_files,
    predict,
    run_load,
    segment_files_per_partition,
    stale,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd and maps")


def _refs(root: Path) -> list[str]:
    """Descriptor and mapping targets inside ``root``."""
    return [p for p in fd_targets() + mapped_files() if p.startswith(os.path.join(root, ""))]


# ----- the quick load run ----------------------------------------------------------------------------------------
def test_quick_load_run_stays_within_its_bounds_and_loses_nothing(tmp_path):
    result = run_load(QUICK, tmp_path)
    f = result.figures
    assert result.ok, result.failures
    peaks, bounds = f["peaks"], f["bounds"]
    assert 0 < peaks["fds"] <= bounds["fds"] <= f["rlimit_nofile"]
    assert 0 < peaks["maps"] <= bounds["maps"] <= f["max_map_count"]
    assert 0 < max(peaks["rss_kib"], f["peak_rss_hwm_kib"]) * 1024 <= bounds["rss_bytes"]
    # every partition was open with its segment: at least one descriptor and two maps each
    partitions = QUICK.partitions + QUICK.expiring_partitions + QUICK.compacted_partitions
    assert peaks["fds"] >= f["base"]["fds"] + partitions
    assert peaks["maps"] >= f["base"]["maps"] + 2 * partitions
    assert peaks["threads"] >= 1 + QUICK.appenders + QUICK.readers
    assert peaks["unlinked"] == 0  # no sample saw a descriptor or a map on an unlinked file
    after = f["after_delayed_delete"]
    assert after["fds_on_unlinked"] == after["maps_on_unlinked"] == after["still_open_one_delay_later"] == 0
    assert f["peaks_outside"]["samples"] > 0 and f["peaks_outside"]["fds"] <= peaks["fds"]
    assert f["after_shutdown"]["fds_in_log_dirs"] == f["after_shutdown"]["maps_in_log_dirs"] == 0
    assert f["after_shutdown"]["fds"] <= f["base"]["fds"]
    verified = f["verify"]
    assert verified["lost"] == verified["corrupt"] == 0
    assert verified["acked_records"] == f["counters"]["records"] > 0
    assert verified["below_log_start"] > 0 and verified["compacted_away"] > 0  # retention and cleaner both ran
    assert f["counting"]["segments_deleted"] > 0 and f["counting"]["cleans"] > 0
    assert f["counters"]["reads"] > 0 and f["errors"] == [] and f["log_problems"] == []
    assert "deadlock" not in f
    assert "peak fds" in result.summary()


def test_the_watchdog_reports_a_hang_with_every_stack(tmp_path, capfd):
    child = Child(replace(QUICK, watchdog_s=0.3), tmp_path)
    release = threading.Event()
    try:
        assert not child._with_watchdog(release.wait, "a stuck task")
    finally:
        release.set()
    assert child.result["deadlock"] and "deadlock: a stuck task" in child.result["failures"][0]
    assert any("release.wait" in stack or "wait" in stack for stack in child.result["stacks"])
    assert "Thread" in capfd.readouterr().err  # faulthandler's dump of every thread


def test_the_bounds_follow_from_the_configuration():
    per_class = segment_files_per_partition(QUICK)
    assert per_class["cold"] == (QUICK.partitions - QUICK.hot_partitions, 1)  # never reaches a roll
    assert all(n >= 2 for name, (_, n) in per_class.items() if name != "cold")
    base = {"fds": 10, "maps": 500, "rss": 200 << 20}
    small = predict(QUICK, base, 10_000, 4_000)
    segments = sum(count * n for count, n in per_class.values())
    assert small.segment_files == segments and small.fds == 10 + segments + 2 * QUICK.threads
    more = predict(replace(QUICK, max_bytes_per_s=2 * QUICK.max_bytes_per_s), base, 10_000, 4_000)
    assert more.fds > small.fds and more.rss_bytes > small.rss_bytes  # more bytes a second, more segments
    assert predict(QUICK, base, 20_000, 4_000).rss_bytes > small.rss_bytes


# ----- indexes keep no descriptor --------------------------------------------------------------------------------
def _fds_on(path) -> int:
    """Descriptors of this process open on ``path`` (other threads' files do not count)."""
    target = str(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}") == target
    return count


def _maps_of(path) -> int:
    """Memory maps of this process backed by ``path``."""
    with open("/proc/self/maps", "rb") as f:
        return sum(line.rstrip().endswith(str(path).encode()) for line in f)


@pytest.mark.parametrize("cls", [OffsetIndex, TimeIndex])
def test_a_mapped_index_keeps_no_file_descriptor(tmp_path, cls):
    # Counted on the index file itself, so that maps and descriptors other threads open or close meanwhile
    # (a background task of an earlier test) cannot move the count.
    path = (tmp_path / "00000000000000000000.index").resolve()
    index = cls(path, 0, max_index_size=4096)
    assert _fds_on(path) == 0 and _maps_of(path) == 1
    index.append(5, 100) if cls is OffsetIndex else index.maybe_append(1000, 5)
    index.flush()
    index.close()
    assert _fds_on(path) == 0 and _maps_of(path) == 0
    with pytest.raises(ValueError):
        index.lookup(5)
    # A read-only index (the tools') reads a private copy with pread (issue 16: no map a full tmpfs or a
    # shrinking file could fault): no descriptor and no mapping kept, and the copy refuses writes.
    readonly = cls(path, 0, writable=False)
    assert readonly.entries == 1 and _fds_on(path) == 0 and _maps_of(path) == 0
    with pytest.raises(TypeError):
        struct.pack_into(">q", readonly._buffer(), 0, 1)
    del readonly
    assert _fds_on(path) == 0 and _maps_of(path) == 0


# ----- maps and descriptors of deleted segments ---------------------------------------------------------------------
def test_retention_releases_the_maps_and_descriptors_of_deleted_segments(tmp_path):
    clock = MockTime()
    lg = Log.open(tmp_path / "t-0", {"segment.bytes": 1024, "retention.bytes": 2048, "file.delete.delay.ms": 1000},
                  clock)  # fmt: skip
    for i in range(200):
        lg.append([(None, b"v%03d" % i * 20)])
        lg.read(lg.log_start_offset)  # opens the indexes of the oldest segment too
    before = len(lg.segments)
    assert lg.delete_old_segments() > 0
    unlinked, deleted = stale(_refs(tmp_path), str(tmp_path))
    assert not unlinked and deleted  # renamed .deleted, still open until the delay has passed
    clock.advance(1000)
    assert stale(_refs(tmp_path), str(tmp_path)) == ([], [])
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    # each segment's .log, and the .index and .timeindex of those whose indexes were opened (lazily)
    assert len(lg.segments) <= len(_refs(tmp_path)) <= 3 * len(lg.segments) < 3 * before
    lg.close()
    assert _refs(tmp_path) == []


def test_cleaning_the_first_segment_twice_within_the_delete_delay_leaves_nothing_on_unlinked_files(tmp_path):
    clock = MockTime()
    broker = {"log.segment.delete.delay.ms": 60_000, "log.cleaner.backoff.ms": 10**9}
    with LogManager(tmp_path / "logs", broker, clock=clock) as manager:
        manager.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 2048,
                                      "min.cleanable.dirty.ratio": 0.01})  # fmt: skip
        lg = manager.get_log("c")
        for clean in range(3):
            for i in range(60):
                lg.append([(b"k%d" % (i % 4), b"value-%d-%d" % (clean, i) + b"x" * 50)])
            lg.roll()
            assert manager.clean_once().logs_cleaned == 1
            first = lg.segments.first().base_offset
            assert first == 0
            unlinked, _ = stale(_refs(tmp_path), str(tmp_path))
            assert unlinked == [], f"clean {clean}: {unlinked}"
            # the .deleted files of the segment replaced last are still there, for its own delayed delete
            assert (lg.directory / "00000000000000000000.log.deleted").exists()
        clock.advance(60_000)
        assert stale(_refs(tmp_path), str(tmp_path)) == ([], [])
        assert not list(lg.directory.glob("*.deleted"))
        assert [r.key for r in lg.records()][-4:]  # still readable
    assert _refs(tmp_path) == []


def test_closing_a_log_releases_segments_waiting_for_their_delayed_delete(tmp_path):
    clock = MockTime()
    lg = Log.open(tmp_path / "t-0", {"segment.bytes": 1024, "retention.bytes": 1024}, clock)
    for _ in range(100):
        lg.append([(None, b"w" * 60)])
    lg.read(lg.log_start_offset)
    assert lg.delete_old_segments() > 0
    assert stale(_refs(tmp_path), str(tmp_path))[1]  # waiting: file.delete.delay.ms is a minute
    lg.close()
    assert _refs(tmp_path) == []
    assert list((tmp_path / "t-0").glob("*.log.deleted"))  # left for the next startup to remove, as Kafka does
    clock.advance(60_000)  # the dropped delete finds nothing to do
    with Log.open(tmp_path / "t-0", {"segment.bytes": 1024}, clock) as again:
        assert again.log_start_offset == lg.log_start_offset
    assert not list((tmp_path / "t-0").glob("*.deleted"))


# ----- topic deletion against the cleaner and retention -----------------------------------------------------------
def test_delete_topic_takes_the_logs_out_before_aborting_their_clean(tmp_path):
    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        manager.create_topic("c", 2, {"cleanup.policy": "compact"})
        seen = []
        original = manager.cleaner.remove_partition

        def remove_partition(tp, directory):
            seen.append((tp, tp in manager._logs, tp in manager._online_logs()))
            original(tp, directory)

        manager.cleaner.remove_partition = remove_partition
        manager.delete_topic("c")
        assert [s[1:] for s in seen] == [(False, False), (False, False)]  # the cleaner could no longer pick them


def test_a_retention_pass_leaves_a_closed_log_alone(tmp_path):
    lg = Log.open(tmp_path / "t-0", {"segment.bytes": 1024, "retention.bytes": 1024}, MockTime())
    for _ in range(100):
        lg.append([(None, b"z" * 60)])
    lg.close()
    files = sorted(os.listdir(lg.directory))
    assert lg.delete_old_segments() == 0
    assert sorted(os.listdir(lg.directory)) == files
