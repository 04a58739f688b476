"""Crash behaviour of Log.open: what loading and recovery (spec section 9) make of a damaged partition directory.

Every case builds a real log through ``Log.append``, closes it cleanly, then damages a copy of the directory
the way a crash (or a disk) would: a torn tail, a flipped bit, a missing or corrupt index, a preallocated
file longer than its data, leftover temp files of an interrupted cleaner or segment split, stray snapshots.
The expected outcome of each is reasoned from the spec, not read off the implementation:

- section 9 step 4: after an unclean shutdown only the segments from floor(recovery point) on are
  re-validated; a segment is cut at its first invalid batch, and every later segment is deleted;
- section 3.4: recovery rebuilds the indexes batch by batch, an entry whenever more than
  ``index.interval.bytes`` lie between the batch and the last entry, plus the final time entry;
- section 9 steps 1-3: ``.deleted``/``.cleaned`` files go, swaps are finished or rolled back, orphan
  indexes go, a missing ``.index`` is rebuilt, a missing ``.timeindex`` starts empty;
- section 9 steps 5-9: a checkpointed log start above the log end empties the log; the recovery point;
  stray producer snapshots.
"""

from __future__ import annotations

import itertools
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from batchtools import CRC, RECORDS
from kafkalog.record import RecordBatchBuilder, iter_batches
from kafkalog.storage.log import Log
from kafkalog.storage.segment import LogSegment
from kafkalog.testing import MockTime

BASE_TS = 1_700_000_000_000
PRODUCER_ID = 4242
INTERVAL = 150  # index.interval.bytes: small, so every segment has several index entries
CONFIG = {
    "segment.bytes": 2048,
    "index.interval.bytes": INTERVAL,
    "segment.index.bytes": 1024,  # small preallocated index files
}

# (records, value bytes, codec) per batch: one record and many, tiny and large, compressed and not.
RECIPE = [
    (1, 10, "none"),
    (12, 60, "gzip"),
    (1, 900, "none"),
    (30, 20, "lz4"),
    (3, 120, "zstd"),
    (1, 40, "snappy"),
    (8, 200, "none"),
    (1, 1500, "gzip"),
    (5, 10, "none"),
    (2, 700, "zstd"),
    (40, 15, "none"),
    (1, 5, "none"),
    (6, 90, "lz4"),
    (1, 300, "none"),
    (4, 25, "gzip"),
    (2, 30, "none"),
    (1, 80, "zstd"),
    (3, 20, "none"),
]


# ----- building and inspecting logs ---------------------------------------------------------------


def make_batch(i: int, records: int, value_bytes: int, codec: str, sequence: int | None = None) -> bytes:
    """A batch as a client sends it (base offset 0); with ``sequence``, from an idempotent producer.
    Timestamps go back and forth, to exercise the time index."""
    if sequence is None:
        builder = RecordBatchBuilder(compression=codec)
    else:
        builder = RecordBatchBuilder(
            compression=codec, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=sequence
        )
    for j in range(records):
        ts = BASE_TS - 60_000 + (i * 7919 + j * 13) % 50_000
        builder.append(f"key-{i}-{j}".encode(), bytes([97 + (i + j) % 26]) * value_bytes, timestamp=ts)
    return builder.build()


def recipe_batches(recipe=RECIPE, first_sequence: int = 0) -> list[bytes]:
    out, seq = [], first_sequence
    for i, (n, size, codec) in enumerate(recipe):
        out.append(make_batch(i, n, size, codec, seq))
        seq += n
    return out


def open_log(directory: Path, config=None, **kwargs) -> Log:
    return Log.open(directory, {**CONFIG, **(config or {})}, clock=MockTime(), **kwargs)


def build_log(directory: Path, batches: list[bytes], config=None) -> None:
    """Append every batch through the client path, then close cleanly."""
    log = open_log(directory, config)
    try:
        for batch in batches:
            info = log.append(batch)
            assert not info.is_duplicate
    finally:
        log.close()


@dataclass(frozen=True)
class BatchAt:
    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int

    @property
    def end(self) -> int:
        return self.position + self.size

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def scan(data: bytes) -> list[BatchAt]:
    out, pos = [], 0
    for batch in iter_batches(data):
        out.append(BatchAt(pos, batch.size_in_bytes, batch.base_offset, batch.last_offset, batch.max_timestamp))
        pos += batch.size_in_bytes
    return out


def seg_path(directory: Path, base: int, suffix: str) -> Path:
    return directory / f"{base:020d}{suffix}"


def layout(directory: Path) -> dict[int, list[BatchAt]]:
    """The batches of every segment on disk, by base offset."""
    return {
        int(p.name.split(".")[0]): scan(p.read_bytes()) for p in sorted(directory.iterdir()) if p.name.endswith(".log")
    }


def expected_indexes(batches: list[BatchAt]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Offset and time index entries as recovery rebuilds them (spec 3.4), from a segment's batches."""
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    max_ts, max_off, last_entry = -1, -1, 0

    def maybe_time() -> None:
        if max_ts > (times[-1][0] if times else -1):
            times.append((max_ts, max_off))

    for b in batches:
        if b.max_timestamp > max_ts:
            max_ts, max_off = b.max_timestamp, b.last_offset
        if b.position - last_entry > INTERVAL:
            offsets.append((b.last_offset, b.position))
            maybe_time()
            last_entry = b.position
    maybe_time()  # the final entry written when recovery ends
    return offsets, times


def read_offset_index(path: Path, base: int) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [(base + rel, pos) for rel, pos in struct.iter_unpack(">ii", data[: len(data) // 8 * 8])]


def read_time_index(path: Path, base: int) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [(ts, base + rel) for ts, rel in struct.iter_unpack(">qi", data[: len(data) // 12 * 12])]


def live_indexes(segment: LogSegment) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    oi, ti = segment.offset_index, segment.time_index
    return (
        [tuple(oi.entry(n)) for n in range(oi.entries)],
        [tuple(ti.entry(n)) for n in range(ti.entries)],
    )


def assert_indexes_consistent(segment: LogSegment, next_offset: int) -> None:
    """Every offset entry points at a batch start whose last offset >= the entry; the time index only grows."""
    batches = {pos: b for pos, b in segment.log.batches()}
    offsets, times = live_indexes(segment)
    for offset, position in offsets:
        assert position in batches, f"index entry {offset}->{position} is not a batch start in {segment}"
        assert batches[position].last_offset >= offset, (offset, position)
        assert segment.base_offset <= offset < next_offset
    for (offset, position), (later_offset, later_position) in itertools.pairwise(offsets):
        assert later_offset > offset and later_position > position
    for ts, offset in times:
        assert segment.base_offset <= offset < next_offset, (ts, offset)
    for (ts, offset), (later_ts, later_offset) in itertools.pairwise(times):
        assert later_ts >= ts and later_offset >= offset


def assert_log_consistent(log: Log) -> None:
    bases = [s.base_offset for s in log.segments]
    for segment, following in zip(log.segments, [*bases[1:], log.log_end_offset], strict=True):
        assert_indexes_consistent(segment, following)


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def flip_bit(path: Path, position: int, bit: int = 0) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ (1 << bit)]))


def records_of(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.records(isolation="log_end")]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A cleanly closed log of RECIPE, several segments; tests copy it, never change it."""
    directory = tmp_path_factory.mktemp("pristine") / "topic-0"
    build_log(directory, recipe_batches())
    segments = layout(directory)
    assert len(segments) >= 3, "the recipe must span at least three segments"
    assert len(segments[max(segments)]) >= 3, "the last segment must hold several batches"
    return directory


# ----- torn tail -----------------------------------------------------------------------------------

# The last batch of the log, chosen per case: one uncompressed record, and a compressed multi-record one.
TORN_LAST = {
    "one-record": (1, 60, "none"),
    "compressed": (7, 30, "gzip"),
}


@pytest.mark.parametrize("last", sorted(TORN_LAST))
def test_torn_tail_every_byte(tmp_path, last):
    """Cut the .log at every byte inside the last batch: recovery keeps exactly the complete batches.

    Every cut from the batch's first byte to its last (file length - 1) is tried, so both the quiet
    "fewer than 17 bytes left" stop and the "size runs past the end" stop are covered. The re-append of the
    lost sequence checks that the producer state was cut back too (a stale one calls it a duplicate or out
    of order).
    """
    recipe = [*RECIPE[:9], TORN_LAST[last]]
    batches = recipe_batches(recipe)
    source = tmp_path / "src" / "topic-0"
    build_log(source, batches)
    segments = layout(source)
    last_base = max(segments)
    kept = segments[last_base][:-1]
    torn = segments[last_base][-1]
    assert kept, "the last segment needs complete batches before the torn one"
    expected_offsets, expected_times = expected_indexes(kept)
    lost_sequence = sum(n for n, _, _ in recipe[:-1])

    for cut in range(torn.position, torn.end):
        case = copy_dir(source, tmp_path / f"cut{cut}" / "topic-0")
        os.truncate(seg_path(case, last_base, ".log"), cut)
        log = open_log(case, recovery_point=last_base, had_clean_shutdown=False)
        try:
            assert log.log_end_offset == torn.base_offset, cut
            assert [s.base_offset for s in log.segments] == sorted(segments), cut
            active = log.active_segment
            assert active.size == torn.position, cut
            assert os.path.getsize(active.log.path) == torn.position, cut
            assert live_indexes(active) == (expected_offsets, expected_times), cut
            assert_log_consistent(log)
            assert log.recovery_point == last_base  # min(checkpoint, LEO): not advanced before a flush

            # The producer state was cut too: the lost batch (same sequence) is new, not a duplicate.
            info = log.append(make_batch(99, 2, 33, "none", lost_sequence))
            assert not info.is_duplicate, cut
            assert (info.first_offset, info.last_offset) == (torn.base_offset, torn.base_offset + 1), cut
            assert log.log_end_offset == torn.base_offset + 2
            assert active.size == torn.position + len(make_batch(99, 2, 33, "none", lost_sequence))
            assert_log_consistent(log)
        finally:
            log.close()
        shutil.rmtree(case.parent)


@pytest.mark.parametrize("cut", [0, 1, 11, 12, 16, 17, 61, -1])
def test_torn_first_batch_leaves_the_active_segment_empty(pristine, tmp_path, cut):
    """A tear inside the active segment's first batch: the segment is kept, empty, and the log ends at its base."""
    case = copy_dir(pristine, tmp_path / "topic-0")
    segments = layout(case)
    last_base = max(segments)
    first = segments[last_base][0]
    os.truncate(seg_path(case, last_base, ".log"), cut % first.size)
    with open_log(case, recovery_point=last_base, had_clean_shutdown=False) as log:
        assert [s.base_offset for s in log.segments] == sorted(segments)
        assert log.log_end_offset == last_base
        assert log.active_segment.size == 0
        assert live_indexes(log.active_segment) == ([], [])
        assert_log_consistent(log)
        info = log.append(make_batch(90, 2, 10, "none"))
        assert (info.first_offset, info.last_offset) == (last_base, last_base + 1)
    with open_log(case, had_clean_shutdown=True) as log:
        assert log.log_end_offset == last_base + 2


# ----- corrupted bytes -----------------------------------------------------------------------------

# Where the flipped bit lands inside the damaged batch: the CRC field, the attributes, the records.
FLIPS = {"crc": lambda b: CRC + 1, "attributes": lambda b: RECORDS - 40, "records": lambda b: b.size - 3}


@pytest.mark.parametrize("where", sorted(FLIPS))
def test_bit_flip_in_last_segment_truncates_at_that_batch(pristine, tmp_path, where):
    case = copy_dir(pristine, tmp_path / "topic-0")
    segments = layout(case)
    last_base = max(segments)
    bad = segments[last_base][1]  # a middle batch: one before it, at least one after
    assert bad is not segments[last_base][-1]
    flip_bit(seg_path(case, last_base, ".log"), bad.position + FLIPS[where](bad), bit=3)

    with open_log(case, recovery_point=last_base, had_clean_shutdown=False) as log:
        assert log.log_end_offset == bad.base_offset
        assert log.active_segment.size == bad.position
        assert os.path.getsize(seg_path(case, last_base, ".log")) == bad.position
        assert [s.base_offset for s in log.segments] == sorted(segments)
        assert_log_consistent(log)
        assert live_indexes(log.active_segment) == expected_indexes(segments[last_base][:1])
        assert log.append(make_batch(50, 1, 10, "none")).first_offset == bad.base_offset


@pytest.fixture
def corrupt_earlier(pristine, tmp_path):
    """A copy with one bit flipped in a middle batch of the second-to-last segment."""
    case = copy_dir(pristine, tmp_path / "topic-0")
    segments = layout(case)
    bases = sorted(segments)
    victim = bases[-2]
    bad = segments[victim][len(segments[victim]) // 2]
    assert 0 < segments[victim].index(bad) < len(segments[victim]) - 1
    flip_bit(seg_path(case, victim, ".log"), bad.end - 2)
    return case, segments, victim, bad


def test_bit_flip_below_recovery_point_is_not_revalidated(corrupt_earlier):
    """Only segments from floor(recovery point) are recovered: the damaged earlier segment stays as is."""
    case, segments, victim, _bad = corrupt_earlier
    bases = sorted(segments)
    before = {p.name: p.read_bytes() for p in case.iterdir() if p.suffix == ".log"}
    with open_log(case, recovery_point=bases[-1], had_clean_shutdown=False) as log:
        assert [s.base_offset for s in log.segments] == bases
        assert log.log_end_offset == segments[bases[-1]][-1].next_offset
        assert log.segments.get(victim).size == segments[victim][-1].end
    after = {p.name: p.read_bytes() for p in case.iterdir() if p.suffix == ".log"}
    assert after == before  # the bad batch is still there


@pytest.mark.parametrize("recovery_point", ["zero", "inside-victim"])
def test_bit_flip_in_recovered_earlier_segment_truncates_and_deletes_later(corrupt_earlier, recovery_point):
    """With the damaged segment in the recovery range: cut at the bad batch, every later segment deleted."""
    case, segments, victim, bad = corrupt_earlier
    point = 0 if recovery_point == "zero" else victim + 1  # floor(victim + 1) is still the victim
    later = [b for b in segments if b > victim]
    with open_log(case, recovery_point=point, had_clean_shutdown=False) as log:
        assert [s.base_offset for s in log.segments] == [b for b in sorted(segments) if b <= victim]
        assert log.log_end_offset == bad.base_offset
        assert log.active_segment.base_offset == victim
        assert log.active_segment.size == bad.position
        assert log.recovery_point == min(point, bad.base_offset)
        assert_log_consistent(log)
        for base in later:
            for suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"):
                assert not seg_path(case, base, suffix).exists(), (base, suffix)
        info = log.append(make_batch(60, 3, 10, "none"))
        assert info.first_offset == bad.base_offset
    assert os.path.getsize(seg_path(case, victim, ".log")) == bad.position + len(make_batch(60, 3, 10, "none"))


# ----- indexes: missing, corrupt -------------------------------------------------------------------


def _index_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in (".index", ".timeindex")}


@pytest.mark.parametrize("which", ["first", "middle", "last"])
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_missing_offset_index_is_rebuilt_identically(pristine, tmp_path, which, clean):
    """A missing .index makes the loader recover the segment (spec 9 step 3), whatever the shutdown."""
    case = copy_dir(pristine, tmp_path / "topic-0")
    original = _index_bytes(case)
    bases = sorted(layout(case))
    base = {"first": bases[0], "middle": bases[1], "last": bases[-1]}[which]
    seg_path(case, base, ".index").unlink()
    with open_log(case, recovery_point=bases[-1], had_clean_shutdown=clean) as log:
        assert_log_consistent(log)
        assert log.log_end_offset == layout(pristine)[bases[-1]][-1].next_offset
    assert _index_bytes(case) == original


@pytest.mark.parametrize("which", ["middle", "last"])
def test_missing_time_index_in_recovery_range_is_rebuilt_identically(pristine, tmp_path, which):
    case = copy_dir(pristine, tmp_path / "topic-0")
    original = _index_bytes(case)
    bases = sorted(layout(case))
    base = {"middle": bases[1], "last": bases[-1]}[which]
    seg_path(case, base, ".timeindex").unlink()
    with open_log(case, recovery_point=base, had_clean_shutdown=False) as log:
        assert_log_consistent(log)
    assert _index_bytes(case) == original


def test_missing_time_index_after_clean_shutdown_starts_empty(pristine, tmp_path):
    """Spec 9 step 3: a .timeindex that did not exist is created and resized to 0, and (the offset index being
    there) the segment is not recovered, so the time index stays empty; everything else is untouched."""
    case = copy_dir(pristine, tmp_path / "topic-0")
    original = _index_bytes(case)
    bases = sorted(layout(case))
    seg_path(case, bases[1], ".timeindex").unlink()
    with open_log(case, had_clean_shutdown=True) as log:
        assert log.segments.get(bases[1]).time_index.entries == 0
    after = _index_bytes(case)
    assert after.pop(seg_path(case, bases[1], ".timeindex").name) == b""
    original.pop(seg_path(case, bases[1], ".timeindex").name)
    assert after == original


def _corrupt_length(path: Path, base: int) -> None:
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")  # no longer a multiple of 8


def _corrupt_last_offset(path: Path, base: int) -> None:
    data = bytearray(path.read_bytes())
    assert len(data) >= 8, "the segment needs an index entry to corrupt"
    struct.pack_into(">i", data, len(data) - 8, -1)  # last relative offset -1: last offset < base offset
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("corruption", [_corrupt_length, _corrupt_last_offset], ids=["length", "last-offset"])
@pytest.mark.parametrize("which", ["middle", "last"])
def test_corrupt_offset_index_in_recovery_range_is_rebuilt_identically(pristine, tmp_path, corruption, which):
    """A corrupt .index of a segment at or above the recovery point is rebuilt, byte for byte the original.

    (Spec 9 step 3: Kafka's loader itself only checks that the .index exists; the rebuild comes from step 4,
    which recovers every segment from floor(recovery point).)
    """
    case = copy_dir(pristine, tmp_path / "topic-0")
    original = _index_bytes(case)
    bases = sorted(layout(case))
    base = {"middle": bases[1], "last": bases[-1]}[which]
    corruption(seg_path(case, base, ".index"), base)
    with open_log(case, recovery_point=base, had_clean_shutdown=False) as log:
        assert_log_consistent(log)
        for segment in log.segments:
            assert live_indexes(segment)[0] == read_offset_index(
                seg_path(pristine, segment.base_offset, ".index"), segment.base_offset
            )
    assert _index_bytes(case) == original


def test_rebuilt_index_matches_what_append_wrote(pristine):
    """The premise of the 'identical' checks: indexes written by appends equal recovery's rebuild rule."""
    for base, batches in layout(pristine).items():
        offsets, times = expected_indexes(batches)
        assert read_offset_index(seg_path(pristine, base, ".index"), base) == offsets, base
        assert read_time_index(seg_path(pristine, base, ".timeindex"), base) == times, base


# ----- preallocated files ---------------------------------------------------------------------------


def test_zero_filled_preallocated_tail_is_cut(tmp_path):
    """log.preallocate and a crash: the active .log is segment.bytes long, zeros after the data. Recovery reads
    the zeros as a size below the minimum (corruption), cuts them, and appends continue at the right place."""
    config = {"preallocate": True, "segment.bytes": 64 * 1024}
    directory = tmp_path / "live" / "topic-0"
    log = open_log(directory, config)
    try:
        for batch in recipe_batches():
            log.append(batch)
        end = log.log_end_offset
        data_size = log.active_segment.size
        active = log.active_segment.base_offset
        log.flush()
        crashed = copy_dir(directory, tmp_path / "crashed" / "topic-0")  # the files as they are while running
    finally:
        log.close()
    active_log = seg_path(crashed, active, ".log")
    assert os.path.getsize(active_log) == 64 * 1024 > data_size  # the premise: zeros after the data
    assert not any(active_log.read_bytes()[data_size:])

    with open_log(crashed, config, recovery_point=active, had_clean_shutdown=False) as log:
        assert log.log_end_offset == end
        assert log.active_segment.size == data_size
        assert os.path.getsize(active_log) == data_size
        assert_log_consistent(log)
        assert log.append(make_batch(70, 2, 10, "none")).first_offset == end
        assert len(records_of(log)) == end + 2
    assert os.path.getsize(active_log) == data_size + len(make_batch(70, 2, 10, "none"))


# ----- leftover files ------------------------------------------------------------------------------


def test_deleted_files_are_removed(pristine, tmp_path):
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    expected = records_of_dir(pristine)
    leftovers = []
    for suffix in (".log", ".index", ".timeindex", ".snapshot"):
        src = seg_path(case, bases[1], suffix)
        dst = seg_path(case, 7, suffix + ".deleted")  # e.g. a retention victim awaiting its async delete
        if src.exists():
            shutil.copy(src, dst)
            leftovers.append(dst)
    kraft = case / "00000000000000000100-0000000001.checkpoint.deleted"  # KRaft snapshots are kept
    kraft.write_bytes(b"x")
    with open_log(case, recovery_point=bases[-1], had_clean_shutdown=False) as log:
        assert records_of(log) == expected
    assert leftovers and not any(p.exists() for p in leftovers)
    assert kraft.exists()


def test_cleaned_files_are_removed(pristine, tmp_path):
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    expected = records_of_dir(pristine)
    cleaned = []
    for suffix in (".log", ".index", ".timeindex"):
        dst = seg_path(case, bases[0], suffix + ".cleaned")  # the cleaner's unfinished output
        shutil.copy(seg_path(case, bases[0], suffix), dst)
        cleaned.append(dst)
    with open_log(case, had_clean_shutdown=True) as log:
        assert records_of(log) == expected
        assert [s.base_offset for s in log.segments] == bases
    assert not any(p.exists() for p in cleaned)


def records_of_dir(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """The records of a log directory, read from a throwaway copy (the original stays untouched)."""
    copy = directory.parent / (directory.name + "-read")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(directory, copy)
    try:
        with open_log(copy, had_clean_shutdown=True) as log:
            return records_of(log)
    finally:
        shutil.rmtree(copy)


def write_swap(tmp_path: Path, directory: Path, base: int, batches: list[bytes], suffix: str = ".swap") -> None:
    """Write a segment holding ``batches`` (with their own offsets) into ``directory`` as <base>.*<suffix>,
    as the cleaner does: a complete segment (log and indexes) under the temporary suffix."""
    scratch = tmp_path / f"scratch-{base}" / "topic-0"
    log = open_log(scratch, {"segment.bytes": 1 << 20})
    try:
        log.truncate_fully_and_start_at(base)
        for batch in batches:
            log.append_as_follower(batch)
    finally:
        log.close()
    for ext in (".log", ".index", ".timeindex"):
        shutil.copy(seg_path(scratch, base, ext), seg_path(directory, base, ext + suffix))


def batch_bytes(directory: Path, base: int) -> list[bytes]:
    data = seg_path(directory, base, ".log").read_bytes()
    return [data[b.position : b.end] for b in scan(data)]


def test_complete_swap_replacing_two_segments_is_finished(pristine, tmp_path):
    """A crash after the .cleaned -> .swap renames (spec 9, swap protocol step 2): the loader deletes the old
    files in [min swap base, max swap next offset) and renames the swap into place."""
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    merged = batch_bytes(case, bases[0]) + batch_bytes(case, bases[1])
    kept = [b for i, b in enumerate(merged) if i % 3 != 1]  # the "compacted" result: some batches dropped
    write_swap(tmp_path, case, bases[0], kept)
    swap_content = seg_path(case, bases[0], ".log.swap").read_bytes()
    kept_offsets = {b.base_offset for batch in kept for b in scan(batch)}
    full = records_of_dir(pristine)
    with open_log(case, had_clean_shutdown=True) as log:
        assert [s.base_offset for s in log.segments] == [bases[0], *bases[2:]]
        assert log.log_end_offset == layout(pristine)[bases[-1]][-1].next_offset
        got = records_of(log)
        assert_log_consistent(log)
    assert not list(case.glob("*.swap"))
    for suffix in (".log", ".index", ".timeindex"):
        assert not seg_path(case, bases[1], suffix).exists(), suffix
    assert seg_path(case, bases[0], ".log").read_bytes() == swap_content
    # Records: those of the kept batches in the swapped range, then everything from the third segment on.
    dropped = {b.base_offset for batch in merged for b in scan(batch)} - kept_offsets
    dropped_batches = [b for batch in merged for b in scan(batch) if b.base_offset in dropped]
    assert got == [r for r in full if not any(b.base_offset <= r[0] <= b.last_offset for b in dropped_batches)]


def test_swap_at_or_above_min_cleaned_is_deleted(pristine, tmp_path):
    """An incomplete split (spec 9 step 1): swaps at or above the smallest .cleaned offset are deleted with the
    .cleaned files, a swap below it is completed."""
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    full = records_of_dir(pristine)
    first = batch_bytes(case, bases[0])
    write_swap(tmp_path, case, bases[0], first[1:])  # below min cleaned: completed (drops batch 0)
    write_swap(tmp_path, case, bases[1], batch_bytes(case, bases[1])[:1], suffix=".cleaned")
    write_swap(tmp_path, case, bases[1], batch_bytes(case, bases[1])[:2])  # == min cleaned: deleted
    write_swap(tmp_path, case, bases[2], batch_bytes(case, bases[2])[:1])  # above: deleted
    originals = {b: seg_path(case, b, ".log").read_bytes() for b in bases[1:]}
    first_dropped = scan(first[0])[0]
    with open_log(case, had_clean_shutdown=True) as log:
        assert [s.base_offset for s in log.segments] == bases
        assert records_of(log) == [r for r in full if r[0] > first_dropped.last_offset]
        assert_log_consistent(log)
    assert not list(case.glob("*.swap")) and not list(case.glob("*.cleaned"))
    assert {b: seg_path(case, b, ".log").read_bytes() for b in bases[1:]} == originals


def test_orphan_index_files_are_deleted(pristine, tmp_path):
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    orphans = [seg_path(case, 123_456, s) for s in (".index", ".timeindex", ".txnindex")]
    for orphan, src in zip(orphans, (".index", ".timeindex", ".index"), strict=True):
        shutil.copy(seg_path(case, bases[1], src), orphan)
    with open_log(case, had_clean_shutdown=True) as log:
        assert [s.base_offset for s in log.segments] == bases
    assert not any(p.exists() for p in orphans)


def test_stray_snapshots_are_removed(pristine, tmp_path):
    """Spec 4.2/9 step 9: snapshots not at a segment base go, except the newest stray one when it is at or above
    the last segment base (the clean-shutdown snapshot at the log end)."""
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    end = layout(case)[bases[-1]][-1].next_offset
    clean_snapshot = seg_path(case, end, ".snapshot")
    assert clean_snapshot.exists()
    content = clean_snapshot.read_bytes()
    strays = [bases[0] + 1, bases[1] + 1, bases[-1] + 1]
    for offset in strays:
        seg_path(case, offset, ".snapshot").write_bytes(content)
    base_snapshots = {b for b in bases[1:] if seg_path(case, b, ".snapshot").exists()}
    assert base_snapshots == set(bases[1:])  # taken on each roll
    with open_log(case, had_clean_shutdown=True) as log:
        assert log.log_end_offset == end
    remaining = {int(p.name.split(".")[0]) for p in case.glob("*.snapshot")}
    assert remaining == base_snapshots | {end}


# ----- what gets re-validated ----------------------------------------------------------------------


@pytest.fixture
def recover_spy(monkeypatch):
    """Record the base offset of every segment LogSegment.recover runs on (behaviour unchanged)."""
    calls: list[int] = []
    original = LogSegment.recover

    def spy(self, *args, **kwargs):
        calls.append(self.base_offset)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", spy)
    return calls


@pytest.mark.parametrize("point", ["last-base", "inside-second-last", "zero", "above-end"])
def test_unclean_shutdown_recovers_from_floor_of_recovery_point(pristine, tmp_path, recover_spy, point):
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    end = layout(case)[bases[-1]][-1].next_offset
    recovery_point, expected = {
        "last-base": (bases[-1], bases[-1:]),
        "inside-second-last": (bases[-2] + 1, bases[-2:]),
        "zero": (0, bases),
        "above-end": (end + 100, bases[-1:]),
    }[point]
    with open_log(case, recovery_point=recovery_point, had_clean_shutdown=False) as log:
        assert recover_spy == expected
        assert log.log_end_offset == end
        assert log.recovery_point == min(recovery_point, end)


def test_clean_shutdown_recovers_nothing(pristine, tmp_path, recover_spy):
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    end = layout(case)[bases[-1]][-1].next_offset
    flip_bit(seg_path(case, bases[-1], ".log"), layout(case)[bases[-1]][0].end - 2)  # would be cut if scanned
    with open_log(case, recovery_point=0, had_clean_shutdown=True) as log:
        assert recover_spy == []
        assert log.log_end_offset == end
        assert log.recovery_point == end


# ----- log start offset ----------------------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_log_start_checkpoint_above_log_end_empties_the_log(pristine, tmp_path, clean):
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    end = layout(case)[bases[-1]][-1].next_offset
    start = end + 1000
    with open_log(case, log_start_offset=start, recovery_point=bases[-1], had_clean_shutdown=clean) as log:
        assert (log.log_start_offset, log.log_end_offset) == (start, start)
        assert [s.base_offset for s in log.segments] == [start]
        assert log.active_segment.size == 0
        assert records_of(log) == []
        info = log.append(make_batch(80, 2, 10, "none"))
        assert (info.first_offset, info.last_offset) == (start, start + 1)
    for base in bases:
        for suffix in (".log", ".index", ".timeindex"):
            assert not seg_path(case, base, suffix).exists(), (base, suffix)


def test_log_start_checkpoint_inside_the_log(pristine, tmp_path):
    """Step 9: log start = max(checkpoint, first segment base); nothing is deleted on load."""
    case = copy_dir(pristine, tmp_path / "topic-0")
    bases = sorted(layout(case))
    with open_log(case, log_start_offset=bases[1] + 2, had_clean_shutdown=True) as log:
        assert log.log_start_offset == bases[1] + 2
        assert [s.base_offset for s in log.segments] == bases
