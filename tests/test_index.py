"""Offset index, time index and transaction index (spec sections 3 and 4.1).

Expected values come from the spec's rules, from Kafka's own printout of the fixture indexes
(``expected-index.txt`` / ``expected-timeindex.txt``), or from decoding the fixture bytes here with ``struct``;
never from this project's own output.
"""

from __future__ import annotations

import bisect
import itertools
import re
import struct
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog.errors import CorruptIndexError, IndexOffsetOverflowError, InvalidOffsetError, KafkaLogError
from kafkalog.storage.index import IndexFullError, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset
from kafkalog.storage.txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

MIB10 = 10 * 1024 * 1024
INT32_MAX = 2**31 - 1

KAFKA_WRITTEN = [
    "codec-none",
    "codec-gzip",
    "codec-snappy",
    "codec-lz4",
    "codec-zstd",
    "mixed-codecs",
    "transactional-commit",
    "idempotent",
    "log-append-time",
    "base-offset-1000000",
    "interval-150",
]

# (index file under broker-logs/, its length in bytes as listed on disk)
BROKER_INDEXES = [
    ("donaldy-kafka271/kafka-logs/__consumer_offsets-17/00000000000000000000.index", 0),
    ("donaldy-kafka271/kafka-logs/__consumer_offsets-17/00000000000000000000.timeindex", 12),
    ("donaldy-kafka271/kafka-logs/__consumer_offsets-28/00000000000000000000.index", 0),
    ("donaldy-kafka271/kafka-logs/__consumer_offsets-28/00000000000000000000.timeindex", 12),
    ("donaldy-kafka271/kafka-logs/__consumer_offsets-39/00000000000000000000.index", 0),
    ("donaldy-kafka271/kafka-logs/__consumer_offsets-39/00000000000000000000.timeindex", 12),
    ("william0423-kafka/kafka-logs/__consumer_offsets-28/00000000000000000000.index", 2032),
    ("william0423-kafka/kafka-logs/__consumer_offsets-28/00000000000000000000.timeindex", 3096),
    ("william0423-kafka/kafka-logs/debug_topic-0/00000000000000000000.index", 0),
    ("william0423-kafka/kafka-logs/debug_topic-0/00000000000000000000.timeindex", 24),
    ("yangxuhao-kafka270/kafka-logs/__consumer_offsets-39/00000000000000000000.index", 0),
    ("yangxuhao-kafka270/kafka-logs/__consumer_offsets-39/00000000000000000000.timeindex", 24),
    ("yangxuhao-kafka270/kafka-logs/__consumer_offsets-41/00000000000000000000.index", 0),
    ("yangxuhao-kafka270/kafka-logs/__consumer_offsets-41/00000000000000000000.timeindex", 12),
    ("yangxuhao-kafka270/kafka-logs/test_topic-0/00000000000000000000.index", 0),
    ("yangxuhao-kafka270/kafka-logs/test_topic-0/00000000000000000000.timeindex", 24),
    ("yuanliubei-kafka-src/kafka-logs/__consumer_offsets-17/00000000000000000000.index", 0),
    ("yuanliubei-kafka-src/kafka-logs/__consumer_offsets-17/00000000000000000000.timeindex", 12),
    ("yuanliubei-kafka-src/kafka-logs/__consumer_offsets-17/00000000000000000058.index", 0),
    ("yuanliubei-kafka-src/kafka-logs/__consumer_offsets-17/00000000000000000058.timeindex", 12),
    ("yuanliubei-kafka-src/kafka-logs/topic1-0/00000000000002722402.index", 0),
    ("yuanliubei-kafka-src/kafka-logs/topic1-0/00000000000002722402.timeindex", 0),
]


# --------------------------------------------------------------------------- helpers


def base_of(path: Path) -> int:
    """Segment base offset from a file name: the digits before the first '.' (spec 5)."""
    return int(path.name.split(".")[0])


def open_index(path: Path, **kwargs) -> OffsetIndex | TimeIndex:
    cls = TimeIndex if path.suffix == ".timeindex" else OffsetIndex
    return cls(path, base_of(path), **kwargs)


def raw_offset_entries(data: bytes, base: int) -> list[tuple[int, int]]:
    """Decode .index bytes independently: (base + int32 relative offset, int32 position)."""
    return [(base + rel, pos) for rel, pos in struct.iter_unpack(">ii", data[: len(data) // 8 * 8])]


def raw_time_entries(data: bytes, base: int) -> list[tuple[int, int]]:
    """Decode .timeindex bytes independently: (int64 timestamp, base + int32 relative offset)."""
    return [(ts, base + rel) for ts, rel in struct.iter_unpack(">qi", data[: len(data) // 12 * 12])]


HEADER = re.compile(r"file (\S+) size=(\d+) baseOffset=(\d+)")
SANITY = re.compile(r"sanityCheck OK entries=(\d+)")
OFFSET_LINE = re.compile(r"entry (\d+) offset=(\d+) relativeOffset=(\d+) position=(\d+)")
TIME_LINE = re.compile(r"entry (\d+) timestamp=(-?\d+) offset=(\d+) relativeOffset=(\d+)")


def parse_expected(path: Path) -> tuple[str, int, int, int, list[tuple[int, int, int]]]:
    """(file name, size, base offset, entry count, [(field1, field2, relativeOffset)]) from Kafka's printout."""
    lines = path.read_text().splitlines()
    name, size, base = HEADER.fullmatch(lines[0]).groups()
    count = int(SANITY.fullmatch(lines[1]).group(1))
    entries = []
    for i, line in enumerate(lines[2 : 2 + count]):
        m = OFFSET_LINE.fullmatch(line) or TIME_LINE.fullmatch(line)
        assert m is not None, line
        assert int(m.group(1)) == i
        if path.name == "expected-index.txt":  # offset, relativeOffset, position
            entries.append((int(m.group(2)), int(m.group(4)), int(m.group(3))))
        else:  # timestamp, offset, relativeOffset
            entries.append((int(m.group(2)), int(m.group(3)), int(m.group(4))))
    assert lines[2 + count].startswith(f"summary entries={count} errors=0")
    return name, int(size), int(base), count, entries


def make_offset_index(tmp_path: Path, entries: list[tuple[int, int]], base: int = 0, size: int = 4096) -> OffsetIndex:
    idx = OffsetIndex(tmp_path / f"{base:020d}.index", base, size)
    for offset, position in entries:
        idx.append(offset, position)
    return idx


def make_time_index(tmp_path: Path, entries: list[tuple[int, int]], base: int = 0, size: int = 4096) -> TimeIndex:
    idx = TimeIndex(tmp_path / f"{base:020d}.timeindex", base, size)
    for timestamp, offset in entries:
        idx.maybe_append(timestamp, offset)
    return idx


def write_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------- fixtures written by Kafka


@pytest.mark.parametrize("folder", KAFKA_WRITTEN)
def test_kafka_written_offset_index_matches_kafka_printout(folder: str) -> None:
    expected = fixture_path("kafka-written", folder, "expected-index.txt")
    name, size, base, count, entries = parse_expected(expected)
    path = fixture_path("kafka-written", folder, name)
    assert base_of(path) == base
    idx = OffsetIndex(path, base, writable=False)
    try:
        idx.sanity_check()
        assert (idx.length, idx.entries, idx.max_entries, idx.base_offset) == (size, count, count, base)
        got = [idx.entry(i) for i in range(idx.entries)]
        assert got == [OffsetPosition(offset, position) for offset, position, _ in entries]
        assert all(offset - base == rel for offset, _, rel in entries)
        assert idx.last_offset == entries[-1][0]
        # every entry is found by an exact lookup, and the offset just below falls back to the previous entry
        for i, (offset, position, _) in enumerate(entries):
            assert idx.lookup(offset) == (offset, position)
            below = (entries[i - 1][0], entries[i - 1][1]) if i else (base, 0)
            assert idx.lookup(offset - 1) == below
    finally:
        idx.close()
    assert path.stat().st_size == size  # a read-only index never rewrites its file


@pytest.mark.parametrize("folder", KAFKA_WRITTEN)
def test_kafka_written_time_index_matches_kafka_printout(folder: str) -> None:
    expected = fixture_path("kafka-written", folder, "expected-timeindex.txt")
    name, size, base, count, entries = parse_expected(expected)
    path = fixture_path("kafka-written", folder, name)
    idx = TimeIndex(path, base, writable=False)
    try:
        idx.sanity_check()
        assert (idx.length, idx.entries, idx.max_entries) == (size, count, count)
        got = [idx.entry(i) for i in range(idx.entries)]
        assert got == [TimestampOffset(ts, offset) for ts, offset, _ in entries]
        assert all(offset - base == rel for _, offset, rel in entries)
        assert idx.last_entry == (entries[-1][0], entries[-1][1])
        assert idx.is_full()  # a trimmed time index keeps no spare slot
        for i, (ts, offset, _) in enumerate(entries):
            assert idx.lookup(ts) == (ts, offset)
            below = (entries[i - 1][0], entries[i - 1][1]) if i else (-1, base)
            assert idx.lookup(ts - 1) == below
        assert idx.lookup(2**63 - 1) == (entries[-1][0], entries[-1][1])
    finally:
        idx.close()
    assert path.stat().st_size == size


@pytest.mark.parametrize(("relative", "length"), BROKER_INDEXES, ids=[r for r, _ in BROKER_INDEXES])
def test_broker_log_indexes_open_read_only_and_pass_sanity_check(relative: str, length: int) -> None:
    path = fixture_path("broker-logs", *relative.split("/"))
    data = path.read_bytes()
    assert len(data) == length
    base = base_of(path)
    idx = open_index(path, writable=False)
    try:
        idx.sanity_check()
        assert idx.length == length
        assert idx.entries == idx.max_entries == length // idx.entry_size
        got = [tuple(idx.entry(i)) for i in range(idx.entries)]
        if isinstance(idx, OffsetIndex):
            expected = raw_offset_entries(data, base)
            # Kafka's append rule: offsets strictly increase; positions grow with them
            assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(expected))
            assert idx.last_offset == (expected[-1][0] if expected else base)
            if not expected:
                assert idx.lookup(base + 5) == (base, 0)
        else:
            expected = raw_time_entries(data, base)
            # maybe_append writes only strictly larger timestamps, with offsets that never go back
            assert all(a[0] < b[0] and a[1] <= b[1] for a, b in itertools.pairwise(expected))
            assert idx.last_entry == (expected[-1] if expected else (-1, base))
        assert got == expected
    finally:
        idx.close()
    assert path.stat().st_size == length


def test_william0423_consumer_offsets_index_sizes() -> None:
    folder = fixture_path("broker-logs", "william0423-kafka", "kafka-logs", "__consumer_offsets-28")
    with OffsetIndex(folder / "00000000000000000000.index", 0, writable=False) as idx:
        assert idx.entries == 254
    with TimeIndex(folder / "00000000000000000000.timeindex", 0, writable=False) as tidx:
        assert tidx.entries == 258


def test_donaldy_trimmed_empty_index_with_one_time_entry() -> None:
    folder = fixture_path("broker-logs", "donaldy-kafka271", "kafka-logs", "__consumer_offsets-17")
    index_path, time_path = folder / "00000000000000000000.index", folder / "00000000000000000000.timeindex"
    with OffsetIndex(index_path, 0, writable=False) as idx:
        idx.sanity_check()
        assert (idx.length, idx.entries, idx.max_entries, idx.last_offset) == (0, 0, 0, 0)
        assert idx.is_full()
        assert idx.lookup(1000) == (0, 0)
        assert idx.fetch_upper_bound_offset(0, 100) is None
    ts, rel = struct.unpack(">qi", time_path.read_bytes())
    with TimeIndex(time_path, 0, writable=False) as tidx:
        tidx.sanity_check()
        assert tidx.entries == 1
        assert tidx.last_entry == (ts, rel)
        assert tidx.lookup(ts) == (ts, rel)
        assert tidx.lookup(ts - 1) == (-1, 0)


def test_read_only_missing_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    with pytest.raises(FileNotFoundError):
        OffsetIndex(path, 0, writable=False)
    assert not path.exists()


# --------------------------------------------------------------------------- creation, reopening, sizes


def test_new_offset_index_is_preallocated_to_default_size(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "00000000000000000000.index", 0, MIB10)
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 10485760
    assert (idx.length, idx.max_entries, idx.entries, idx.entry_size) == (10485760, 1310720, 0, 8)
    assert idx.max_index_size == MIB10
    assert idx.last_offset == 0
    assert not idx.is_full()
    idx.close()
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 0


def test_new_time_index_is_preallocated_to_default_size(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0, MIB10)
    assert (tmp_path / "00000000000000000000.timeindex").stat().st_size == 10485756
    assert (idx.length, idx.max_entries, idx.entries, idx.entry_size) == (10485756, 873813, 0, 12)
    assert idx.last_entry == (-1, 0)
    idx.close()
    assert (tmp_path / "00000000000000000000.timeindex").stat().st_size == 0


@pytest.mark.parametrize(
    ("cls", "size", "expected"), [(OffsetIndex, 100, 96), (TimeIndex, 100, 96), (TimeIndex, 23, 12)]
)
def test_preallocation_rounds_down_to_whole_entries(tmp_path: Path, cls: type, size: int, expected: int) -> None:
    idx = cls(tmp_path / "idx", 0, size)
    assert idx.length == expected == (tmp_path / "idx").stat().st_size
    idx.close_handler()


@pytest.mark.parametrize(("cls", "size"), [(OffsetIndex, 7), (OffsetIndex, -1), (TimeIndex, 11)])
def test_max_index_size_below_entry_size_is_refused_for_a_new_file(tmp_path: Path, cls: type, size: int) -> None:
    with pytest.raises(ValueError, match="max index size"):
        cls(tmp_path / "idx", 0, size)


def test_existing_file_length_counts_as_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = make_offset_index(tmp_path, [(105, 0), (110, 4100)], base=100, size=64)
    idx.close_handler()  # unmap without trimming: the 64-byte preallocated file stays
    assert path.stat().st_size == 64
    reopened = OffsetIndex(path, 100, 64)
    # all 8 slots count as entries; the 6 unwritten ones read as zeros, i.e. (base offset, position 0)
    assert reopened.entries == reopened.max_entries == 8
    assert reopened.entry(1) == (110, 4100)
    assert reopened.entry(7) == (100, 0)
    assert reopened.last_offset == 100
    reopened.sanity_check()  # spec 3.2: a zero-filled tail still passes
    assert reopened.is_full()
    reopened.close_handler()


def test_close_trims_and_reopen_sees_only_valid_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = make_offset_index(tmp_path, [(105, 0), (110, 4100), (190, 8300)], base=100, size=MIB10)
    idx.close()
    assert path.read_bytes() == struct.pack(">iiiiii", 5, 0, 10, 4100, 90, 8300)
    reopened = OffsetIndex(path, 100, MIB10)
    assert (reopened.entries, reopened.max_entries, reopened.length) == (3, 3, 24)
    assert reopened.last_offset == 190
    assert reopened.is_full()
    reopened.resize(MIB10)  # what LogLoader does for the active segment
    assert (reopened.entries, reopened.max_entries, reopened.length) == (3, 1310720, MIB10)
    reopened.append(200, 12000)
    assert reopened.entry(3) == (200, 12000)
    reopened.close()
    assert path.stat().st_size == 32


def test_time_index_bytes_and_trim_on_close(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.timeindex"
    idx = make_time_index(tmp_path, [(1_700_000_000_000, 1003), (1_700_000_000_500, 1010)], base=1000, size=MIB10)
    idx.close()
    assert path.read_bytes() == struct.pack(">qiqi", 1_700_000_000_000, 3, 1_700_000_000_500, 10)
    reopened = TimeIndex(path, 1000, MIB10)
    assert reopened.last_entry == (1_700_000_000_500, 1010)
    assert reopened.entries == 2
    reopened.close()


def test_resize_rounds_down_and_reports_change(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    idx = make_offset_index(tmp_path, [(1, 0), (2, 10)], size=64)
    assert idx.resize(100) is True
    assert (idx.length, idx.max_entries, path.stat().st_size) == (96, 12, 96)
    assert idx.resize(99) is False  # rounds to 96 again
    assert idx.resize(16) is True
    assert (idx.length, idx.max_entries, idx.entries) == (16, 2, 2)
    assert idx.is_full()
    assert [idx.entry(0), idx.entry(1)] == [(1, 0), (2, 10)]
    with pytest.raises(ValueError):
        idx.resize(8)  # would cut off a valid entry
    assert idx.length == 16
    idx.close()


def test_reset_empties_and_restores_max_size(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    idx = make_time_index(tmp_path, [(10, 1), (20, 2)], size=120)
    idx.trim_to_valid_size()
    assert (idx.length, path.stat().st_size) == (24, 24)
    idx.reset()
    assert (idx.entries, idx.length, idx.max_entries) == (0, 120, 10)
    assert idx.last_entry == (-1, 0)
    idx.maybe_append(5, 0)
    assert idx.entry(0) == (5, 0)
    idx.close()


def test_zero_byte_writable_file_is_full_until_reset(tmp_path: Path) -> None:
    path = write_file(tmp_path / "00000000000000000000.index", b"")
    idx = OffsetIndex(path, 0, 80)
    assert (idx.entries, idx.max_entries, idx.length) == (0, 0, 0)
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.append(1, 0)
    idx.reset()
    assert (idx.length, idx.max_entries) == (80, 10)
    idx.append(1, 0)
    idx.close()
    assert path.read_bytes() == struct.pack(">ii", 1, 0)


def test_closed_index_refuses_lookups_and_close_is_idempotent(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [(1, 0)])
    idx.flush()
    idx.close()
    idx.close()
    with pytest.raises(ValueError):
        idx.lookup(1)


def test_rename_keeps_mapping_and_delete_if_exists(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [(1, 0), (5, 100)], size=800)
    target = tmp_path / "00000000000000000000.index.deleted"
    idx.rename_to(target)
    assert idx.path == target and target.exists()
    assert not (tmp_path / "00000000000000000000.index").exists()
    idx.append(9, 200)
    assert idx.lookup(6) == (5, 100)
    idx.trim_to_valid_size()
    assert target.stat().st_size == 24
    assert idx.delete_if_exists() is True
    assert not target.exists()
    assert idx.delete_if_exists() is False


def test_update_parent_dir(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [])
    idx.close()
    idx.update_parent_dir(tmp_path / "other")
    assert idx.path == tmp_path / "other" / "00000000000000000000.index"


# --------------------------------------------------------------------------- offsets and appends


def test_relative_offset_range(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [], base=1000)
    assert idx.relative_offset(1000) == 0
    assert idx.relative_offset(1000 + INT32_MAX) == INT32_MAX
    assert idx.can_append_offset(1000 + INT32_MAX)
    assert not idx.can_append_offset(1000 + INT32_MAX + 1)
    assert not idx.can_append_offset(999)
    for bad in (999, 1000 + INT32_MAX + 1):
        with pytest.raises(IndexOffsetOverflowError) as info:
            idx.relative_offset(bad)
        assert info.value.offset == bad
    idx.close()


def test_offset_index_append_overflow_writes_nothing(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [], base=1000)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(1000 + INT32_MAX + 1, 0)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(999, 0)
    assert idx.entries == 0
    idx.append(1000 + INT32_MAX, 7)
    assert idx.entry(0) == (1000 + INT32_MAX, 7)
    idx.close()


def test_offset_index_append_must_increase_strictly(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [(10, 0)], base=0)
    for bad in (10, 9, 0):
        with pytest.raises(InvalidOffsetError):
            idx.append(bad, 500)
    idx.append(11, 500)
    assert (idx.entries, idx.last_offset) == (2, 11)
    idx.close()


def test_offset_index_full(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [(1, 0), (2, 1), (3, 2)], size=32)
    assert not idx.is_full()
    idx.append(4, 3)
    assert idx.is_full()
    with pytest.raises(InvalidOffsetError, match="full"):
        idx.append(5, 4)
    with pytest.raises(IndexFullError):  # refused as full before the ordering check, like Kafka
        idx.append(1, 4)
    assert idx.entries == 4
    idx.close()


def test_time_index_is_full_one_slot_early(tmp_path: Path) -> None:
    idx = make_time_index(tmp_path, [(10, 1), (20, 2)], size=48)  # 4 slots
    assert idx.max_entries == 4
    assert not idx.is_full()
    idx.maybe_append(30, 3)
    assert idx.is_full()
    with pytest.raises(InvalidOffsetError, match="full"):
        idx.maybe_append(40, 4)
    idx.maybe_append(40, 4, skip_full_check=True)  # the slot kept for roll/close
    assert idx.entries == 4
    with pytest.raises(IndexFullError):
        idx.maybe_append(50, 5, skip_full_check=True)  # no bytes left at all
    idx.maybe_append(40, 4, skip_full_check=True)  # an equal timestamp writes nothing, so it is harmless
    assert idx.last_entry == (40, 4)
    idx.close()


def test_time_index_maybe_append_rules(tmp_path: Path) -> None:
    idx = make_time_index(tmp_path, [], base=100)
    idx.maybe_append(-1, 100)  # NO_TIMESTAMP is not above the empty sentinel -1: dropped
    assert idx.entries == 0
    idx.maybe_append(0, 100)  # the first entry needs ts >= 0
    assert idx.last_entry == (0, 100)
    idx.maybe_append(1000, 105)
    idx.maybe_append(1000, 110)  # equal timestamp: dropped silently even with a larger offset
    assert (idx.entries, idx.last_entry) == (2, (1000, 105))
    idx.maybe_append(1001, 105)  # equal offset is allowed when the timestamp grows
    assert (idx.entries, idx.last_entry) == (3, (1001, 105))
    with pytest.raises(InvalidOffsetError, match="offset"):
        idx.maybe_append(2000, 104)  # offset below the last: Kafka's InvalidOffsetException
    with pytest.raises(InvalidOffsetError, match="timestamp"):
        idx.maybe_append(999, 106)  # timestamp below the last: Kafka's IllegalStateException
    with pytest.raises(IndexOffsetOverflowError):
        idx.maybe_append(3000, 100 + INT32_MAX + 1)
    assert idx.entries == 3
    idx.close()
    assert (tmp_path / "00000000000000000100.timeindex").read_bytes() == struct.pack(">qiqiqi", 0, 0, 1000, 5, 1001, 5)


def test_time_index_empty_drops_negative_timestamps_without_error(tmp_path: Path) -> None:
    idx = make_time_index(tmp_path, [])
    idx.maybe_append(-5, 0)
    assert idx.entries == 0
    idx.close()


# --------------------------------------------------------------------------- lookups


def test_offset_index_lookup_edges(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [], base=50)
    assert idx.lookup(50) == (50, 0)
    assert idx.lookup(10**9) == (50, 0)
    for offset, position in [(60, 100), (70, 200), (80, 300)]:
        idx.append(offset, position)
    assert idx.lookup(49) == (50, 0)  # before the base
    assert idx.lookup(59) == (50, 0)  # before the first entry
    assert idx.lookup(60) == (60, 100)  # exact
    assert idx.lookup(75) == (70, 200)  # between
    assert idx.lookup(80) == (80, 300)  # exact last
    assert idx.lookup(10**12) == (80, 300)  # after the last
    with pytest.raises(IndexError):
        idx.entry(3)
    idx.close()


def test_time_index_lookup_edges(tmp_path: Path) -> None:
    idx = make_time_index(tmp_path, [], base=50)
    assert idx.lookup(0) == (-1, 50)
    for ts, offset in [(1000, 55), (2000, 60), (3000, 60)]:
        idx.maybe_append(ts, offset)
    assert idx.lookup(999) == (-1, 50)
    assert idx.lookup(1000) == (1000, 55)
    assert idx.lookup(2500) == (2000, 60)
    assert idx.lookup(3000) == (3000, 60)
    assert idx.lookup(2**62) == (3000, 60)
    with pytest.raises(IndexError):
        idx.entry(3)
    idx.close()


def lower_bound(keys: list[int], target: int) -> int:
    """Plain binary search: slot of the largest key <= target, or -1."""
    return bisect.bisect_right(keys, target) - 1


def targets_around(keys: list[int], slots: list[int]) -> list[int]:
    out = [keys[0] - 1, keys[-1] + 1]
    for s in slots:
        out += [keys[s] - 1, keys[s], keys[s] + 1]
    return out


def test_offset_index_lookup_across_the_warm_boundary(tmp_path: Path) -> None:
    n, base = 3000, 1000
    offsets = [base + 1 + 3 * i for i in range(n)]
    positions = [100 * i for i in range(n)]
    idx = make_offset_index(tmp_path, list(zip(offsets, positions, strict=True)), base=base, size=n * 8)
    first_hot = n - 1 - 8192 // 8  # 1975: spec 3.1
    slots = [0, 1, 2, 500, 1000, first_hot - 1, first_hot, first_hot + 1, 2500, n - 2, n - 1]
    for target in targets_around(offsets, slots) + list(range(base - 2, base + 3 * n + 5, 7)):
        slot = lower_bound(offsets, target)
        expected = (offsets[slot], positions[slot]) if slot >= 0 else (base, 0)
        assert idx.lookup(target) == expected, target
    idx.close()


def test_time_index_lookup_across_the_warm_boundary(tmp_path: Path) -> None:
    n = 2000
    timestamps = [1_700_000_000_000 + 10 * i for i in range(n)]
    offsets = [5 * i for i in range(n)]
    idx = make_time_index(tmp_path, list(zip(timestamps, offsets, strict=True)), size=(n + 1) * 12)
    first_hot = n - 1 - 8192 // 12  # 1317: spec 3.1
    slots = [0, 1, 400, first_hot - 1, first_hot, first_hot + 1, n - 2, n - 1]
    for target in targets_around(timestamps, slots) + list(range(timestamps[0] - 5, timestamps[-1] + 20, 13)):
        slot = lower_bound(timestamps, target)
        expected = (timestamps[slot], offsets[slot]) if slot >= 0 else (-1, 0)
        assert idx.lookup(target) == expected, target
    idx.close()


# --------------------------------------------------------------------------- fetch upper bound


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [(10, 100), (20, 200), (30, 300)])
    assert idx.fetch_upper_bound_offset(0, 50) == (10, 100)  # below the first position
    assert idx.fetch_upper_bound_offset(50, 100) == (20, 200)  # 150 lies between 100 and 200
    assert idx.fetch_upper_bound_offset(0, 200) == (20, 200)  # an exact position
    assert idx.fetch_upper_bound_offset(0, 300) == (30, 300)  # the exact last position
    assert idx.fetch_upper_bound_offset(250, 100) is None  # beyond the last entry
    assert idx.fetch_upper_bound_offset(OffsetPosition(15, 150), 10) == (20, 200)
    # Kafka's search never compares the first slot of the cold range for equality: a bound equal to the
    # first entry's position gives the second entry (spec 3.1: smallest-upper-bound returns lo + 1)
    assert idx.fetch_upper_bound_offset(0, 100) == (20, 200)
    idx.close()
    empty = make_offset_index(tmp_path, [], base=7)
    assert empty.fetch_upper_bound_offset(0, 1) is None
    empty.close()


def test_fetch_upper_bound_offset_single_entry_exact_match_is_none(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [(10, 100)])
    assert idx.fetch_upper_bound_offset(0, 100) is None  # lo is the last slot → -1
    assert idx.fetch_upper_bound_offset(0, 99) == (10, 100)
    idx.close()


def test_fetch_upper_bound_offset_across_the_warm_boundary(tmp_path: Path) -> None:
    n = 2500
    offsets = list(range(1, n + 1))
    positions = [4096 * i + 17 for i in range(n)]
    idx = make_offset_index(tmp_path, list(zip(offsets, positions, strict=True)), size=n * 8)
    first_hot = n - 1 - 1024
    for bound in targets_around(positions, [1, 2, 700, first_hot - 1, first_hot, first_hot + 1, n - 2, n - 1]):
        slot = bisect.bisect_left(positions, bound)  # smallest position >= bound
        expected = (offsets[slot], positions[slot]) if slot < n else None
        assert idx.fetch_upper_bound_offset(bound - 5, 5) == expected, bound
    idx.close()


# --------------------------------------------------------------------------- truncation


def test_offset_index_truncate_to_three_cases(tmp_path: Path) -> None:
    entries = [(10, 100), (20, 200), (30, 300)]
    idx = make_offset_index(tmp_path, entries)
    idx.truncate_to(100)  # beyond the last entry: no effect
    assert (idx.entries, idx.last_offset) == (3, 30)
    idx.truncate_to(25)  # no exact entry: keep the largest below and everything before
    assert (idx.entries, idx.last_offset) == (2, 20)
    idx.truncate_to(20)  # exact entry: drop it
    assert (idx.entries, idx.last_offset) == (1, 10)
    idx.append(15, 150)  # appends continue from the truncation point
    assert idx.lookup(17) == (15, 150)
    idx.truncate_to(5)  # nothing <= 5: empty
    assert (idx.entries, idx.last_offset) == (0, 0)
    assert idx.lookup(30) == (0, 0)
    idx.close()


def test_time_index_truncate_to_three_cases_by_offset(tmp_path: Path) -> None:
    idx = make_time_index(tmp_path, [(1000, 10), (2000, 20), (3000, 30)], base=0)
    idx.truncate_to(31)
    assert (idx.entries, idx.last_entry) == (3, (3000, 30))
    idx.truncate_to(25)
    assert (idx.entries, idx.last_entry) == (2, (2000, 20))
    idx.truncate_to(20)
    assert (idx.entries, idx.last_entry) == (1, (1000, 10))
    idx.maybe_append(1500, 15)  # the remembered last entry follows the truncation
    assert idx.entries == 2
    idx.truncate_to(10)
    assert (idx.entries, idx.last_entry) == (0, (-1, 0))
    idx.close()


def test_truncate_removes_everything(tmp_path: Path) -> None:
    idx = make_offset_index(tmp_path, [(1, 1), (2, 2)], size=80)
    idx.truncate()
    assert (idx.entries, idx.length, idx.last_offset) == (0, 80, 0)
    idx.close()
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 0


# --------------------------------------------------------------------------- sanity check on crafted files


def test_sanity_check_offset_index_length_not_a_multiple(tmp_path: Path) -> None:
    path = write_file(tmp_path / "00000000000000000000.index", struct.pack(">iiii", 1, 0, 2, 10) + b"\0\0\0\0")
    idx = OffsetIndex(path, 0, writable=False)
    assert idx.entries == 2 and idx.length == 20
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        idx.sanity_check()
    idx.close()
    assert path.stat().st_size == 20


def test_sanity_check_offset_index_last_offset_below_base(tmp_path: Path) -> None:
    path = write_file(tmp_path / "00000000000000000100.index", struct.pack(">iiii", 1, 0, -1, 10))
    idx = OffsetIndex(path, 100, writable=False)
    assert idx.last_offset == 99
    with pytest.raises(CorruptIndexError) as info:
        idx.sanity_check()
    assert info.value.path == str(path)
    idx.close()


def test_sanity_check_time_index_last_timestamp_below_first(tmp_path: Path) -> None:
    path = write_file(tmp_path / "00000000000000000000.timeindex", struct.pack(">qiqi", 2000, 1, 1000, 2))
    with TimeIndex(path, 0, writable=False) as idx, pytest.raises(CorruptIndexError, match="timestamp"):
        idx.sanity_check()


def test_sanity_check_time_index_last_offset_below_base(tmp_path: Path) -> None:
    path = write_file(tmp_path / "00000000000000000050.timeindex", struct.pack(">qiqi", 1000, 1, 2000, -3))
    with TimeIndex(path, 50, writable=False) as idx, pytest.raises(CorruptIndexError, match="offset"):
        idx.sanity_check()


def test_sanity_check_time_index_length_not_a_multiple(tmp_path: Path) -> None:
    path = write_file(tmp_path / "00000000000000000000.timeindex", struct.pack(">qi", 1000, 1) + b"\0" * 6)
    with TimeIndex(path, 0, writable=False) as idx:
        assert idx.entries == 1
        with pytest.raises(CorruptIndexError, match="multiple of 12"):
            idx.sanity_check()


def test_sanity_check_passes_on_zero_filled_files(tmp_path: Path) -> None:
    for name, cls in [("00000000000000000000.index", OffsetIndex), ("00000000000000000000.timeindex", TimeIndex)]:
        path = write_file(tmp_path / name, b"\0" * 96)
        with cls(path, 0, writable=False) as idx:
            idx.sanity_check()
            assert idx.entries == 96 // idx.entry_size


# --------------------------------------------------------------------------- transaction index


def txn_path(tmp_path: Path, base: int = 0) -> Path:
    return tmp_path / f"{base:020d}.txnindex"


def test_aborted_txn_layout_byte_for_byte() -> None:
    txn = AbortedTxn(producer_id=1000, first_offset=5, last_offset=17, last_stable_offset=3)
    data = txn.to_bytes()
    assert len(data) == 34
    assert data == struct.pack(">hqqqq", 0, 1000, 5, 17, 3)
    assert data[0:2] == b"\x00\x00"
    assert data[2:10] == (1000).to_bytes(8, "big")
    assert data[10:18] == (5).to_bytes(8, "big")
    assert data[18:26] == (17).to_bytes(8, "big")
    assert data[26:34] == (3).to_bytes(8, "big")
    assert AbortedTxn.from_bytes(data) == txn
    negative = AbortedTxn(-1, -2, -3, -4).to_bytes()
    assert negative == b"\x00\x00" + b"\xff" * 7 + b"\xff" + b"\xff" * 7 + b"\xfe" + b"\xff" * 7 + b"\xfd" + (
        b"\xff" * 7 + b"\xfc"
    )


def test_aborted_txn_version_reads_only_the_first_byte() -> None:
    body = struct.pack(">qqqq", 1, 2, 3, 4)
    with pytest.raises(KafkaLogError, match="version 1") as info:
        AbortedTxn.from_bytes(b"\x01\x00" + body)
    assert not isinstance(info.value, CorruptIndexError)
    assert AbortedTxn.from_bytes(b"\x00\x07" + body) == AbortedTxn(1, 2, 3, 4)  # second byte ignored
    assert AbortedTxn.from_bytes(b"\xff\xff" + body) == AbortedTxn(1, 2, 3, 4)  # signed byte -1 is not > 0
    with pytest.raises(KafkaLogError):
        AbortedTxn.from_bytes(b"\x7f\x00" + body)
    with pytest.raises(ValueError):
        AbortedTxn.from_bytes(b"\x00" * 33)


def test_txn_index_is_created_lazily(tmp_path: Path) -> None:
    path = txn_path(tmp_path)
    idx = TransactionIndex(path, 0)
    assert idx.all_aborted_txns() == []
    assert idx.is_empty()
    assert idx.collect_aborted_txns(0, 100) == TxnIndexSearchResult([], False)
    idx.sanity_check()
    idx.truncate_to(0)
    idx.reset()
    idx.flush()
    idx.close()
    assert not path.exists()
    idx.append(AbortedTxn(1, 0, 10, 0))
    assert path.stat().st_size == 34
    assert not idx.is_empty()
    idx.close()


def test_txn_index_file_is_concatenated_entries(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 100)
    txns = [AbortedTxn(7, 100, 110, 100), AbortedTxn(8, 105, 120, 111)]
    idx = TransactionIndex(path, 100)
    for t in txns:
        idx.append(t)
    idx.flush()
    idx.close()
    assert path.read_bytes() == struct.pack(">hqqqq", 0, 7, 100, 110, 100) + struct.pack(">hqqqq", 0, 8, 105, 120, 111)
    reopened = TransactionIndex(path, 100)
    assert reopened.all_aborted_txns() == txns
    reopened.sanity_check()
    reopened.close()


def test_txn_index_append_requires_increasing_last_offset(tmp_path: Path) -> None:
    idx = TransactionIndex(txn_path(tmp_path), 0)
    idx.append(AbortedTxn(1, 0, 10, 0))
    for bad in (10, 9):
        with pytest.raises(InvalidOffsetError):
            idx.append(AbortedTxn(2, 0, bad, 0))
    with pytest.raises(ValueError):  # Kafka's IllegalArgumentException
        idx.append(AbortedTxn(2, 0, 10, 0))
    idx.append(AbortedTxn(2, 5, 11, 0))
    assert [t.last_offset for t in idx.all_aborted_txns()] == [10, 11]
    idx.close()


def test_txn_index_reopened_does_not_remember_last_offset(tmp_path: Path) -> None:
    """Kafka's TransactionIndex starts with lastOffset = null whatever the file holds."""
    path = txn_path(tmp_path)
    idx = TransactionIndex(path, 0)
    idx.append(AbortedTxn(1, 0, 10, 0))
    idx.close()
    reopened = TransactionIndex(path, 0)
    reopened.append(AbortedTxn(2, 0, 5, 0))
    assert [t.last_offset for t in reopened.all_aborted_txns()] == [10, 5]
    reopened.close()


def build_txn_index(tmp_path: Path) -> tuple[TransactionIndex, list[AbortedTxn]]:
    txns = [
        AbortedTxn(1, first_offset=0, last_offset=10, last_stable_offset=0),
        AbortedTxn(2, first_offset=5, last_offset=20, last_stable_offset=11),
        AbortedTxn(3, first_offset=25, last_offset=30, last_stable_offset=21),
        AbortedTxn(4, first_offset=40, last_offset=50, last_stable_offset=31),
    ]
    idx = TransactionIndex(txn_path(tmp_path), 0)
    for t in txns:
        idx.append(t)
    return idx, txns


def test_collect_aborted_txns_inclusion_and_completeness(tmp_path: Path) -> None:
    idx, (a, b, c, d) = build_txn_index(tmp_path)
    # a ends before the fetch; b and c overlap; d starts at/after the bound; d's LSO 31 >= 26 completes
    assert idx.collect_aborted_txns(12, 26) == ([b, c], True)
    # nothing has LSO >= 100: every entry overlaps, and the search must go on into the next segment
    assert idx.collect_aborted_txns(0, 100) == ([a, b, c, d], False)
    # b's LSO 11 >= 11 stops the search right after including b; c is never looked at
    assert idx.collect_aborted_txns(0, 11) == ([a, b], True)
    # boundaries: lastOffset == fetchOffset is included, firstOffset == upperBound (d) is not; no LSO >= 40
    assert idx.collect_aborted_txns(30, 40) == ([c], False)
    assert idx.collect_aborted_txns(51, 60) == ([], False)
    idx.close()


def test_txn_index_truncate_to(tmp_path: Path) -> None:
    idx, (a, b, _c, _d) = build_txn_index(tmp_path)
    path = idx.path
    idx.truncate_to(100)  # no entry with lastOffset >= 100: unchanged
    assert len(idx.all_aborted_txns()) == 4
    idx.truncate_to(21)  # cut at c (lastOffset 30 >= 21)
    assert idx.all_aborted_txns() == [a, b]
    assert path.stat().st_size == 68
    with pytest.raises(InvalidOffsetError):
        idx.append(AbortedTxn(9, 0, 20, 0))  # the last offset is now b's
    idx.truncate_to(20)  # b's lastOffset == 20: cut at b
    assert idx.all_aborted_txns() == [a]
    idx.append(AbortedTxn(9, 12, 15, 12))  # remembered last offset is a's 10
    assert [t.last_offset for t in idx.all_aborted_txns()] == [10, 15]
    idx.truncate_to(0)
    assert idx.all_aborted_txns() == [] and path.exists() and path.stat().st_size == 0
    idx.append(AbortedTxn(1, 0, 1, 0))  # nothing remembered after truncating everything
    idx.close()


def test_txn_index_reset(tmp_path: Path) -> None:
    idx, _ = build_txn_index(tmp_path)
    idx.reset()
    assert idx.is_empty() and idx.path.stat().st_size == 0
    idx.append(AbortedTxn(1, 0, 1, 0))
    assert len(idx.all_aborted_txns()) == 1
    idx.close()


def test_txn_index_sanity_check(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 100)
    write_file(path, AbortedTxn(1, 90, 100, 90).to_bytes() + AbortedTxn(2, 80, 99, 80).to_bytes())
    idx = TransactionIndex(path, 100)
    with pytest.raises(CorruptIndexError) as info:
        idx.sanity_check()
    assert info.value.position == 34
    idx.truncate_to(99)  # cut at the first entry with lastOffset >= 99, i.e. the first one
    idx.sanity_check()
    write_file(path, AbortedTxn(1, 90, 100, 90).to_bytes())
    idx.sanity_check()  # lastOffset == base offset is fine
    idx.close()


def test_txn_index_refuses_newer_version_and_ignores_partial_tail(tmp_path: Path) -> None:
    path = txn_path(tmp_path)
    good = AbortedTxn(1, 0, 10, 0).to_bytes()
    write_file(path, good + b"\x01" + good[1:])
    idx = TransactionIndex(path, 0)
    with pytest.raises(KafkaLogError, match="version") as info:
        idx.all_aborted_txns()
    assert info.value.position == 34 and not isinstance(info.value, CorruptIndexError)
    write_file(path, good + good[:20])
    assert idx.all_aborted_txns() == [AbortedTxn(1, 0, 10, 0)]
    idx.close()


def test_txn_index_rename_and_delete(tmp_path: Path) -> None:
    lazy = TransactionIndex(txn_path(tmp_path, 5), 5)
    lazy.rename_to(tmp_path / "moved.txnindex")  # no file yet: only the path changes
    assert lazy.path == tmp_path / "moved.txnindex" and not lazy.path.exists()
    assert lazy.delete_if_exists() is False

    idx, txns = build_txn_index(tmp_path)
    target = tmp_path / "00000000000000000000.txnindex.deleted"
    idx.rename_to(target)
    assert target.exists() and not txn_path(tmp_path).exists()
    assert idx.all_aborted_txns() == txns
    idx.close()
    idx.append(AbortedTxn(5, 50, 60, 50))  # a closed index reopens its file
    assert target.stat().st_size == 5 * 34
    assert idx.delete_if_exists() is True
    assert not target.exists()
    assert idx.delete_if_exists() is False


def _one_by_one_or_all(index, entries, *, all_at_once: bool):
    """Append ``entries`` to a fresh index one call at a time or with the bulk call; (file bytes, error type)."""
    error = None
    try:
        if isinstance(index, OffsetIndex):
            if all_at_once:
                index.append_all(entries)
            else:
                for offset, position in entries:
                    index.append(offset, position)
        elif all_at_once:
            index.maybe_append_all(entries)
        else:
            for timestamp, offset in entries:
                index.maybe_append(timestamp, offset)
    except KafkaLogError as e:
        error = type(e)
    index.flush()
    data = index.path.read_bytes()[: index.size_in_bytes]
    index.close()
    return data, error


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("kind", [OffsetIndex, TimeIndex])
def test_bulk_appends_write_what_one_call_per_entry_writes(tmp_path, seed, kind):
    """append_all and maybe_append_all (the cleaner's one call per run) leave the same entries, and raise the same
    error, as a call per entry: in order or not, with equal timestamps, past a full index, beyond the base."""
    import random

    rng = random.Random(seed)
    base = 1000
    value = base + rng.randrange(-2, 5)
    entries = []
    steps = [1, 2, 7] if seed % 2 else [1, 1, 2, 7, 0, -1, 2**31]  # odd seeds: in order
    timestamp = 1_000
    for _ in range(rng.randrange(0, 14)):
        value += rng.choice(steps)
        timestamp += rng.choice([0, 1, 5] if seed % 2 else [0, 1, 5, -3])  # equal ones are dropped
        entries.append((value, rng.randrange(0, 10_000)) if kind is OffsetIndex else (timestamp, value))
    size = kind.ENTRY_SIZE * rng.choice([3, 8, 20, 20])
    pre = rng.randrange(0, 3)
    results = []
    for all_at_once in (False, True):
        index = kind(tmp_path / f"{all_at_once}-{base:020d}.idx", base, size)
        for k in range(pre):  # entries already there
            if kind is OffsetIndex:
                index.append(base + k, k)
            else:
                index.maybe_append(900 + k, base + k)
        results.append(_one_by_one_or_all(index, entries, all_at_once=all_at_once))
    assert results[0] == results[1]
