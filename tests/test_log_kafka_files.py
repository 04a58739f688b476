"""Our Log and LogSegment against bytes Kafka wrote: indexes, segments, snapshots, whole broker log dirs.

Part 1, ``fixtures/kafka-written``: each folder is one segment written by Kafka's ``LogSegment.append``, one
batch per append, with ``index.interval.bytes`` 4096 (150 for ``interval-150``) and the default
``segment.index.bytes``, then closed (indexes trimmed). We check that

- recovering a copy of the ``.log`` alone rebuilds Kafka's ``.index`` and ``.timeindex`` byte for byte;
- appending the same batches follower-style (keeping their offsets) into an empty log gives Kafka's
  ``.log``, ``.index`` and ``.timeindex`` after close, and so does appending them as a producer sent them
  (the client path, checked inline and checked while written) where no producer id is involved;
- the producer snapshot written on close equals Kafka's (``idempotent``, ``transactional-commit``).

Part 2, ``fixtures/broker-logs``: every partition directory, copied and opened after a clean and after an
unclean shutdown (recovery from offset 0), must lose no byte and read back exactly what a plain scan of
Kafka's files gives, with offsets and ListOffsets answers following the rules of the spec (sections 3, 7, 9).

Expected values come from the fixture bytes (parsed here with ``struct``), Kafka's own ``expected-*.txt``
dumps, or the spec's rules applied to a plain scan (``iter_file_batches``); never from our own output.
Fixture files are only read in place or copied into ``tmp_path``.
"""

from __future__ import annotations

import re
import shutil
import struct
from bisect import bisect_left
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import crc32c
import pytest

from conftest import FIXTURES, fixture_path
from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.record import iter_file_batches
from kafkalog.storage.log import Log
from kafkalog.storage.segment import LogSegment
from kafkalog.testing import MockTime

INDEX_BYTES = 10 * 1024 * 1024  # Kafka's default segment.index.bytes (log.index.size.max.bytes)
OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position (spec 3.2)
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset (spec 3.3)

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
WITH_SNAPSHOT = ["idempotent", "transactional-commit"]


def _name(offset: int, suffix: str) -> str:
    return f"{offset:020d}{suffix}"


# ----- independent readers of Kafka's files -----------------------------------------------------------
def offset_entries(data: bytes) -> list[tuple[int, int]]:
    """(relative offset, position) of every 8-byte entry of an .index file."""
    assert len(data) % OFFSET_ENTRY.size == 0, f"offset index length {len(data)} is not a multiple of 8"
    return [OFFSET_ENTRY.unpack_from(data, i) for i in range(0, len(data), OFFSET_ENTRY.size)]


def time_entries(data: bytes) -> list[tuple[int, int]]:
    """(timestamp, relative offset) of every 12-byte entry of a .timeindex file."""
    assert len(data) % TIME_ENTRY.size == 0, f"time index length {len(data)} is not a multiple of 12"
    return [TIME_ENTRY.unpack_from(data, i) for i in range(0, len(data), TIME_ENTRY.size)]


@dataclass(frozen=True)
class Batch:
    """What a plain scan says about one batch of a Kafka file."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    is_control: bool
    records: tuple[tuple[int, bytes | None, bytes | None, int], ...]  # (offset, key, value, timestamp)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def _bytes(value) -> bytes | None:
    return None if value is None else bytes(value)


@cache
def scan_log(path: Path) -> tuple[Batch, ...]:
    """Every batch of a Kafka .log file, read in place with the plain scanner."""
    batches = []
    for batch in iter_file_batches(path):
        batch.ensure_valid()
        records = tuple((r.offset, _bytes(r.key), _bytes(r.value), r.timestamp) for r in batch)
        batches.append(
            Batch(
                batch.position,
                batch.size_in_bytes,
                batch.base_offset,
                batch.last_offset,
                batch.max_timestamp,
                bool(batch.is_control),
                records,
            )
        )
    return tuple(batches)


# ----- the spec's index rules (section 3.4), applied to a plain scan ----------------------------------
def _encode_indexes(base: int, offsets: list[tuple[int, int]], times: list[tuple[int, int]]) -> tuple[bytes, bytes]:
    index = b"".join(OFFSET_ENTRY.pack(o - base, pos) for o, pos in offsets)
    timeindex = b"".join(TIME_ENTRY.pack(ts, o - base) for ts, o in times)
    return index, timeindex


def _time_append(times: list[tuple[int, int]], ts: int, offset: int) -> None:
    """TimeIndex.maybeAppend: written only when ts is strictly above the last entry's (-1 when empty)."""
    if ts > (times[-1][0] if times else -1):
        times.append((ts, offset))


def recovery_indexes(batches: tuple[Batch, ...], base: int, interval: int) -> tuple[bytes, bytes]:
    """The trimmed .index and .timeindex LogSegment.recover builds from these batches (spec 3.4)."""
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    valid_bytes = last_index_entry = 0
    max_ts, max_ts_offset = -1, -1
    for batch in batches:
        if batch.max_timestamp > max_ts:
            max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
        if valid_bytes - last_index_entry > interval:
            offsets.append((batch.last_offset, valid_bytes))
            _time_append(times, max_ts, max_ts_offset)
            last_index_entry = valid_bytes
        valid_bytes += batch.size
    _time_append(times, max_ts, max_ts_offset)  # the final entry of recover() / close()
    return _encode_indexes(base, offsets, times)


def append_indexes(batches: tuple[Batch, ...], base: int, interval: int) -> tuple[bytes, bytes]:
    """The trimmed indexes after LogSegment.append of each batch on its own, then close (spec 3.4)."""
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    since_last_entry = 0
    max_ts, max_ts_offset = -1, -1
    for batch in batches:
        if batch.max_timestamp > max_ts:
            max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
        if since_last_entry > interval:
            offsets.append((batch.last_offset, batch.position))
            _time_append(times, max_ts, max_ts_offset)
            since_last_entry = 0
        since_last_entry += batch.size
    _time_append(times, max_ts, max_ts_offset)
    return _encode_indexes(base, offsets, times)


# ----- part 1: segments written by Kafka's LogSegment ------------------------------------------------
def _segment_files(folder: str) -> tuple[Path, int, int]:
    """(Kafka's .log, its base offset, the index.interval.bytes it was written with)."""
    directory = fixture_path("kafka-written", folder)
    logs = sorted(directory.glob("*.log"))
    assert len(logs) == 1, f"{directory} should hold one segment, found {logs}"
    interval = 150 if folder == "interval-150" else 4096
    return logs[0], int(logs[0].name.split(".")[0]), interval


def _config(interval: int) -> dict:
    return {"index.interval.bytes": interval, "segment.index.bytes": INDEX_BYTES}


def _gold_entries(path: Path) -> list[tuple[int, ...]]:
    """Entries printed by Kafka's OffsetIndex/TimeIndex in expected-index.txt / expected-timeindex.txt."""
    text = path.read_text()
    count = int(re.search(r"sanityCheck OK entries=(\d+)", text).group(1))
    if "timeindex" in path.name:
        rows = [(int(t), int(o)) for t, o in re.findall(r"^entry \d+ timestamp=(-?\d+) offset=(\d+)", text, re.M)]
    else:
        rows = [
            (int(o), int(p))
            for o, p in re.findall(r"^entry \d+ offset=(\d+) relativeOffset=\d+ position=(\d+)", text, re.M)
        ]
    assert len(rows) == count, f"{path}: {len(rows)} entries parsed, {count} announced"
    return rows


def _assert_same_index_files(ours: Path, kafka: Path) -> None:
    """Our .index/.timeindex next to ``ours`` (a .log path) equal Kafka's next to ``kafka``: entries, then bytes."""
    for suffix, parse in ((".index", offset_entries), (".timeindex", time_entries)):
        got = ours.with_suffix(suffix).read_bytes()
        want = kafka.with_suffix(suffix).read_bytes()
        assert parse(got) == parse(want), f"{suffix} entries differ from Kafka's {kafka.with_suffix(suffix)}"
        assert got == want, f"{suffix} bytes differ from Kafka's {kafka.with_suffix(suffix)}"


def test_every_kafka_written_folder_is_covered() -> None:
    present = sorted(p.name for p in fixture_path("kafka-written").iterdir() if p.is_dir())
    assert present == sorted(KAFKA_WRITTEN)
    assert sorted(p.parent.name for p in fixture_path("kafka-written").glob("*/*.snapshot")) == sorted(WITH_SNAPSHOT)


@pytest.mark.parametrize("folder", KAFKA_WRITTEN)
def test_spec_index_rules_reproduce_kafka_files(folder: str) -> None:
    """Sanity of the models used below: spec 3.4 applied to a plain scan gives Kafka's index files and dumps."""
    log_path, base, interval = _segment_files(folder)
    batches = scan_log(log_path)
    assert batches[-1].position + batches[-1].size == log_path.stat().st_size
    index, timeindex = log_path.with_suffix(".index").read_bytes(), log_path.with_suffix(".timeindex").read_bytes()
    assert append_indexes(batches, base, interval) == (index, timeindex)
    assert recovery_indexes(batches, base, interval) == (index, timeindex)
    gold_index = _gold_entries(log_path.parent / "expected-index.txt")
    assert [(base + rel, pos) for rel, pos in offset_entries(index)] == gold_index
    gold_time = _gold_entries(log_path.parent / "expected-timeindex.txt")
    assert [(ts, base + rel) for ts, rel in time_entries(timeindex)] == gold_time
    # The point of interval-150: a dense index (more entries than the 4096 folders get).
    if folder == "interval-150":
        assert len(gold_index) > 100


@pytest.mark.parametrize("folder", KAFKA_WRITTEN)
def test_segment_recover_rebuilds_kafka_indexes(folder: str, tmp_path: Path) -> None:
    """(a) LogSegment.recover on a copy of the .log alone, then close: Kafka's .index and .timeindex."""
    log_path, base, interval = _segment_files(folder)
    copy = tmp_path / log_path.name
    shutil.copyfile(log_path, copy)
    segment = LogSegment.open(
        tmp_path,
        base,
        index_interval_bytes=interval,
        max_index_size=INDEX_BYTES,
        clock=MockTime(),
        file_already_exists=True,
    )
    assert segment.recover() == 0, "recovery truncated a valid Kafka segment"
    assert segment.read_next_offset() == scan_log(log_path)[-1].next_offset
    segment.close()
    assert copy.read_bytes() == log_path.read_bytes()
    _assert_same_index_files(copy, log_path)


@pytest.mark.parametrize("folder", KAFKA_WRITTEN)
def test_log_open_without_indexes_rebuilds_kafka_indexes(folder: str, tmp_path: Path) -> None:
    """(a) the same through Log.open: a partition dir holding only Kafka's .log, opened after a crash."""
    log_path, base, interval = _segment_files(folder)
    directory = tmp_path / "kafka-0"
    directory.mkdir()
    shutil.copyfile(log_path, directory / log_path.name)
    log = Log.open(directory, _config(interval), clock=MockTime(), log_start_offset=base, had_clean_shutdown=False)
    batches = scan_log(log_path)
    assert (log.log_start_offset, log.log_end_offset) == (base, batches[-1].next_offset)
    assert [s.base_offset for s in log.segments] == [base]
    log.close()
    assert (directory / log_path.name).read_bytes() == log_path.read_bytes()
    _assert_same_index_files(directory / log_path.name, log_path)


def _append_as_follower(folder: str, directory: Path) -> tuple[Path, int]:
    """Append Kafka's batches one per append, keeping their offsets, into a new log; close it."""
    log_path, base, interval = _segment_files(folder)
    data = log_path.read_bytes()
    clock = MockTime()
    log = Log.open(directory, _config(interval), clock=clock, log_start_offset=base)
    assert (log.log_start_offset, log.log_end_offset) == (base, base)
    for batch in scan_log(log_path):
        info = log.append_as_follower(data[batch.position : batch.position + batch.size])
        assert (info.first_offset, info.last_offset) == (batch.base_offset, batch.last_offset)
        assert log.log_end_offset == batch.next_offset
        clock.advance(1)
    assert [s.base_offset for s in log.segments] == [base], "the follower log rolled a segment Kafka did not"
    log.close()
    return log_path, base


@pytest.mark.parametrize("folder", KAFKA_WRITTEN)
def test_follower_appends_write_kafka_bytes(folder: str, tmp_path: Path) -> None:
    """(b) the same batches appended follower-style: Kafka's .log, .index and .timeindex byte for byte."""
    directory = tmp_path / "follower-0"
    log_path, base = _append_as_follower(folder, directory)
    ours = directory / _name(base, ".log")
    assert ours.read_bytes() == log_path.read_bytes()
    _assert_same_index_files(ours, log_path)
    txn_index = directory / _name(base, ".txnindex")
    assert not txn_index.exists() or txn_index.stat().st_size == 0, "no transaction was aborted"


CLIENT_REPLAYABLE = ["codec-none", "interval-150", "base-offset-1000000"]  # no producer ids, so a replay is exact


@pytest.mark.parametrize("folder", CLIENT_REPLAYABLE)
def test_client_appends_write_kafka_bytes(folder: str, tmp_path: Path) -> None:
    """(b') the same batches as a producer sends them (base offset 0, partition leader epoch -1) through
    Log.append with the leader epoch Kafka stamped: LogValidator's in-place path gives Kafka's .log, .index
    and .timeindex."""
    log_path, base, interval = _segment_files(folder)
    data = log_path.read_bytes()
    batches = scan_log(log_path)
    clock = MockTime(start_ms=max(b.max_timestamp for b in batches) + 1)
    directory = tmp_path / "client-0"
    log = Log.open(directory, _config(interval), clock=clock, log_start_offset=base)
    for batch in batches:
        sent = bytearray(data[batch.position : batch.position + batch.size])
        epoch = int.from_bytes(sent[12:16], "big", signed=True)
        sent[0:8] = bytes(8)  # neither field is under the CRC, so the producer's CRC still holds
        sent[12:16] = (-1).to_bytes(4, "big", signed=True)
        info = log.append(bytes(sent), leader_epoch=epoch)
        assert (info.first_offset, info.last_offset) == (batch.base_offset, batch.last_offset)
    assert [s.base_offset for s in log.segments] == [base]
    log.close()
    ours = directory / _name(base, ".log")
    assert ours.read_bytes() == data
    _assert_same_index_files(ours, log_path)


# ----- part 1 (c): producer snapshots ----------------------------------------------------------------
SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


def parse_snapshot(data: bytes) -> list[tuple[int, ...]]:
    """Spec 4.2: version 1, CRC-32C of bytes [6, end), count, 46-byte entries (sorted by producer id)."""
    version, crc, count = struct.unpack_from(">hIi", data)
    assert version == 1
    assert crc == crc32c.crc32c(data[6:]), "snapshot CRC-32C does not check out"
    assert len(data) == 10 + count * SNAPSHOT_ENTRY.size
    return sorted(SNAPSHOT_ENTRY.unpack_from(data, 10 + i * SNAPSHOT_ENTRY.size) for i in range(count))


def _gold_snapshot(folder: Path) -> list[dict[str, int]]:
    text = (folder / "expected-snapshot.txt").read_text()
    assert "-> VALID" in text
    producers = []
    for line in text.splitlines():
        if line.startswith("producer "):
            fields = dict(re.findall(r"(\w+)=(\S+)", line))
            txn = fields["currentTxnFirstOffset"]
            producers.append(
                {
                    "id": int(fields["id"]),
                    "epoch": int(fields["epoch"]),
                    "lastSeq": int(fields["lastSeq"]),
                    "lastDataOffset": int(fields["lastDataOffset"]),
                    "coordinatorEpoch": int(fields["coordinatorEpoch"]),
                    "currentTxnFirstOffset": -1 if txn == "OptionalLong.empty" else int(re.sub(r"\D", "", txn)),
                }
            )
    return producers


@pytest.mark.parametrize("folder", WITH_SNAPSHOT)
def test_closing_writes_kafka_producer_snapshot(folder: str, tmp_path: Path) -> None:
    """(c) after the follower appends, close() snapshots the producer state: Kafka's file, same name, same bytes."""
    directory = tmp_path / "follower-0"
    log_path, _ = _append_as_follower(folder, directory)
    kafka_snapshots = sorted(log_path.parent.glob("*.snapshot"))
    assert len(kafka_snapshots) == 1
    kafka_snapshot = kafka_snapshots[0]
    # Kafka names the snapshot after the log end offset (spec 4.2): here the offset after the last batch.
    assert kafka_snapshot.name == _name(scan_log(log_path)[-1].next_offset, ".snapshot")
    assert sorted(p.name for p in directory.glob("*.snapshot")) == [kafka_snapshot.name]
    want = parse_snapshot(kafka_snapshot.read_bytes())
    assert [(e[0], e[1], e[2], e[3], e[6], e[7]) for e in want] == [
        tuple(p.values()) for p in sorted(_gold_snapshot(log_path.parent), key=lambda p: p["id"])
    ]
    got = parse_snapshot((directory / kafka_snapshot.name).read_bytes())
    assert got == want
    assert (directory / kafka_snapshot.name).read_bytes() == kafka_snapshot.read_bytes()


# ----- part 2: whole partition directories written by brokers -----------------------------------------
def _partition_dirs() -> list[str]:
    root = FIXTURES / "broker-logs"
    if not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.glob("*/*/*") if p.is_dir() and any(p.glob("*.log")))


PARTITIONS = _partition_dirs()


@dataclass(frozen=True)
class Segment:
    base: int
    path: Path
    batches: tuple[Batch, ...]


@cache
def scan_partition(relative: str) -> tuple[Segment, ...]:
    directory = fixture_path("broker-logs", relative)
    segments = []
    for path in sorted(directory.glob("*.log")):
        batches = scan_log(path)
        end = batches[-1].position + batches[-1].size if batches else 0
        assert end == path.stat().st_size, f"{path}: a plain scan stops at {end}, the file has more"
        segments.append(Segment(int(path.name.split(".")[0]), path, batches))
    return tuple(segments)


def _all_batches(segments: tuple[Segment, ...]) -> list[Batch]:
    return [b for s in segments for b in s.batches]


def _log_end(segments: tuple[Segment, ...]) -> int:
    last = segments[-1]
    return last.batches[-1].next_offset if last.batches else last.base


def expected_offset_for_timestamp(segments: tuple[Segment, ...], target: int) -> tuple[int, int] | None:
    """Spec 7 by brute force: the first segment whose largest timestamp >= target (an empty segment's is its
    file mtime, later than any record here), then its first record with ts >= target."""
    for segment in segments:
        if segment.batches and max(b.max_timestamp for b in segment.batches) < target:
            continue
        for batch in segment.batches:
            if batch.max_timestamp >= target:
                for offset, _key, _value, ts in batch.records:
                    if ts >= target:
                        return ts, offset
        return None
    return None


def expected_max_timestamp(segments: tuple[Segment, ...]) -> tuple[int, int] | None:
    """Spec 7, -3: the first record carrying the largest timestamp, in the first batch whose max it is."""
    batches = _all_batches(segments)
    if not batches:
        return None
    top = max(b.max_timestamp for b in batches)
    if top < 0:
        return None
    batch = next(b for b in batches if b.max_timestamp == top)
    return top, next(offset for offset, _k, _v, ts in batch.records if ts == top)


def _sample_offsets(segments: tuple[Segment, ...]) -> list[int]:
    """Every offset of a small log, a spread plus every batch edge and segment base of a big one."""
    end = _log_end(segments)
    start = segments[0].base
    if end - start <= 300:
        return list(range(start, end))
    picks = set(range(start, end, max(1, (end - start) // 150)))
    for batch in _all_batches(segments)[:: max(1, len(_all_batches(segments)) // 100)]:
        picks.update((batch.base_offset, batch.last_offset))
    picks.update(s.base for s in segments)
    picks.add(end - 1)
    return sorted(picks)


def _open_copy(relative: str, tmp_path: Path, clean: bool) -> tuple[Path, Log]:
    source = fixture_path("broker-logs", relative)
    directory = tmp_path / source.name
    shutil.copytree(source, directory)
    log = Log.open(
        directory,
        _config(4096),
        clock=MockTime(),
        recovery_point=0,
        had_clean_shutdown=clean,
    )
    return directory, log


def test_partition_list_covers_every_broker_log_folder() -> None:
    folders = {p.split("/")[0] for p in PARTITIONS}
    assert folders == {p.name for p in fixture_path("broker-logs").iterdir() if p.is_dir()}
    assert "william0423-kafka/kafka-logs/__consumer_offsets-28" in PARTITIONS


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
@pytest.mark.parametrize("relative", PARTITIONS)
def test_broker_partition_loads_and_reads_back(relative: str, clean: bool, tmp_path: Path) -> None:
    segments = scan_partition(relative)
    batches = _all_batches(segments)
    directory, log = _open_copy(relative, tmp_path, clean)
    try:
        # Nothing truncated or deleted: every .log keeps its size; the segments are the files.
        for segment in segments:
            assert (directory / segment.path.name).stat().st_size == segment.path.stat().st_size
        assert [s.base_offset for s in log.segments] == [s.base for s in segments]
        assert log.log_start_offset == segments[0].base
        assert log.log_end_offset == _log_end(segments)

        # Every record, in offset order, as a plain scan of Kafka's files reads it.
        want = [r for b in batches if not b.is_control for r in b.records]
        got = [(r.offset, _bytes(r.key), _bytes(r.value), r.timestamp) for r in log.records()]
        assert len(got) == len(want)
        assert got == want

        # read(offset) starts at the batch holding the offset: the first batch whose last offset >= it.
        located = [(s.base, b) for s in segments for b in s.batches]
        last_offsets = [b.last_offset for _, b in located]
        for offset in _sample_offsets(segments):
            home_base, holder = located[bisect_left(last_offsets, offset)]
            fetch = log.read(offset, max_bytes=1)
            first = next(iter(fetch.records.batches()), None)
            assert first is not None, f"read({offset}) returned no batch"
            assert (first.base_offset, first.last_offset) == (holder.base_offset, holder.last_offset), offset
            assert fetch.records.size == holder.size, f"read({offset}, max_bytes=1) must return one whole batch"
            meta = fetch.fetch_offset_metadata
            assert (meta.message_offset, meta.segment_base_offset, meta.relative_position_in_segment) == (
                offset,
                home_base,
                holder.position,
            )
        end = _log_end(segments)
        assert log.read(end).records.size == 0
        with pytest.raises(OffsetOutOfRangeError):
            log.read(end + 1)
        if segments[0].base > 0:
            with pytest.raises(OffsetOutOfRangeError):
                log.read(segments[0].base - 1)

        # ListOffsets.
        def answer(target: int) -> tuple[int, int] | None:
            found = log.offset_for_timestamp(target)
            return None if found is None else (found.timestamp, found.offset)

        assert answer(-2) == (-1, segments[0].base)
        assert answer(-1) == (-1, end)
        assert answer(-3) == expected_max_timestamp(segments)
        stamps = sorted({ts for b in batches for _o, _k, _v, ts in b.records})
        targets = {0}
        if stamps:
            picks = [stamps[0], stamps[len(stamps) // 3], stamps[len(stamps) // 2], stamps[-1]]
            targets.update(picks)
            targets.update(ts + 1 for ts in picks)
            targets.update(ts - 1 for ts in picks if ts > 0)
        for target in sorted(targets):
            assert answer(target) == expected_offset_for_timestamp(segments, target), target
    finally:
        log.close()

    # After close: every .log is byte-identical, and the indexes are Kafka's (clean, files present) or what
    # Kafka's recovery builds from the .log (rebuilt: after a crash, or where Kafka's files are absent).
    for segment in segments:
        assert (directory / segment.path.name).read_bytes() == segment.path.read_bytes()
        original_index = segment.path.with_suffix(".index")
        original_time = segment.path.with_suffix(".timeindex")
        ours_index = directory / original_index.name
        ours_time = directory / original_time.name
        rebuilt = recovery_indexes(segment.batches, segment.base, 4096)
        if clean and original_index.exists() and original_time.exists():
            want_index, want_time = original_index.read_bytes(), original_time.read_bytes()
        else:
            want_index, want_time = rebuilt
        assert offset_entries(ours_index.read_bytes()) == offset_entries(want_index), ours_index.name
        assert ours_index.read_bytes() == want_index, ours_index.name
        assert time_entries(ours_time.read_bytes()) == time_entries(want_time), ours_time.name
        assert ours_time.read_bytes() == want_time, ours_time.name


def broker_append_history_indexes(segment: Segment, restarts: set[int], record_offset: bool) -> tuple[bytes, bytes]:
    """The indexes a broker's appends leave when it was restarted (cleanly) before each offset in ``restarts``.

    Per-batch LogSegment.append (spec 3.4); at each restart the segment was closed (final time-index entry,
    spec 3.4) and reopened as a new object, whose ``bytesSinceLastIndexEntry`` starts again at 0. Kafka 2.x
    brokers wrote a clean-shutdown producer snapshot at each restart's log end, so the snapshot file names give
    the restart offsets. With ``record_offset``, a time entry holds the offset of the first record carrying the
    max timestamp (2.x's LogValidator) instead of the batch's last offset (the shallow offset, Kafka 4.0).
    """
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    since_last_entry = 0
    max_ts, max_ts_offset = -1, -1
    for batch in segment.batches:
        assert not any(batch.base_offset < r <= batch.last_offset for r in restarts)
        if batch.base_offset in restarts:
            _time_append(times, max_ts, max_ts_offset)
            since_last_entry = 0
        if batch.max_timestamp > max_ts:
            max_ts = batch.max_timestamp
            if record_offset:
                max_ts_offset = next(o for o, _k, _v, ts in batch.records if ts == max_ts)
            else:
                max_ts_offset = batch.last_offset
        if since_last_entry > 4096:
            offsets.append((batch.last_offset, batch.position))
            _time_append(times, max_ts, max_ts_offset)
            since_last_entry = 0
        since_last_entry += batch.size
    _time_append(times, max_ts, max_ts_offset)
    return _encode_indexes(segment.base, offsets, times)


# Segments whose time index holds the offset of the max-timestamp *record* (written by Kafka ~2.8).
RECORD_LEVEL_TIME_OFFSETS = {("yuanliubei-kafka-src/kafka-logs/__consumer_offsets-17", 58)}


def test_broker_index_files_are_explained_by_their_append_history() -> None:
    """Why a rebuilt index may differ from a broker's own file: the broker built it by appends across restarts.

    Every broker segment that comes with index files is reproduced exactly by ``broker_append_history_indexes``;
    only those without a restart inside (or before any index entry) also equal what recovery rebuilds.
    """
    checked = differs_from_rebuild = 0
    for relative in PARTITIONS:
        directory = fixture_path("broker-logs", relative)
        restarts = {int(p.name.split(".")[0]) for p in directory.glob("*.snapshot")}
        for segment in scan_partition(relative):
            index, timeindex = segment.path.with_suffix(".index"), segment.path.with_suffix(".timeindex")
            if not (index.exists() and timeindex.exists()):
                continue
            kafka = (index.read_bytes(), timeindex.read_bytes())
            record_offset = (relative, segment.base) in RECORD_LEVEL_TIME_OFFSETS
            assert broker_append_history_indexes(segment, restarts, record_offset) == kafka, segment.path
            checked += 1
            differs_from_rebuild += recovery_indexes(segment.batches, segment.base, 4096) != kafka
    # 11 segments of the ZooKeeper-era brokers and 139 of the KRaft broker (itumelengmogase-cp77-kraft), whose
    # four segments with a restart inside (a producer snapshot below their end) differ from a rebuild.
    assert checked == 150
    assert differs_from_rebuild == 9


WILLIAM = "william0423-kafka/kafka-logs/__consumer_offsets-28"
WILLIAM_RESTARTS = (142, 1693, 1715)  # its producer snapshots below the log end 8202


def test_william_rebuild_cannot_equal_kafka_file() -> None:
    """PROVENANCE says rebuilding __consumer_offsets-28's indexes gives Kafka's bytes; Kafka's own rule says no.

    Its .index (254 entries) and .timeindex (258) were built by appends over four broker runs. Spec 3.4's
    recovery rule gives 256 and 257 entries, identical to Kafka's up to the first restart at offset 142.
    """
    source = fixture_path("broker-logs", WILLIAM)
    kafka_index = offset_entries((source / _name(0, ".index")).read_bytes())
    kafka_time = time_entries((source / _name(0, ".timeindex")).read_bytes())
    assert (len(kafka_index), len(kafka_time)) == (254, 258)
    (segment,) = scan_partition(WILLIAM)
    index, timeindex = recovery_indexes(segment.batches, 0, 4096)
    rebuilt_index, rebuilt_time = offset_entries(index), time_entries(timeindex)
    assert (len(rebuilt_index), len(rebuilt_time)) == (256, 257)
    first_restart = WILLIAM_RESTARTS[0]
    assert [e for e in rebuilt_index if e[0] < first_restart] == [e for e in kafka_index if e[0] < first_restart]
    assert [e for e in rebuilt_time if e[1] < first_restart - 1] == [e for e in kafka_time if e[1] < first_restart - 1]
    # Kafka's extra time entry at offset 141 is the close() entry of the run that ended at 142.
    assert (segment.batches[141].max_timestamp, 141) in kafka_time
    assert (segment.batches[141].max_timestamp, 141) not in rebuilt_time
    assert broker_append_history_indexes(segment, set(WILLIAM_RESTARTS), False) == (
        (source / _name(0, ".index")).read_bytes(),
        (source / _name(0, ".timeindex")).read_bytes(),
    )


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_william_deleted_indexes_are_rebuilt(clean: bool, tmp_path: Path) -> None:
    """__consumer_offsets-28: delete the copied indexes, reopen, close: the indexes Kafka's recover() builds,
    at full size (10 MiB) while open, trimmed on close; the .log untouched."""
    source = fixture_path("broker-logs", WILLIAM)
    (segment,) = scan_partition(WILLIAM)
    want_index, want_time = recovery_indexes(segment.batches, 0, 4096)
    directory = tmp_path / source.name
    shutil.copytree(source, directory)
    index_file, time_file = directory / _name(0, ".index"), directory / _name(0, ".timeindex")
    index_file.unlink()
    time_file.unlink()
    log = Log.open(directory, _config(4096), clock=MockTime(), recovery_point=0, had_clean_shutdown=clean)
    assert (log.log_start_offset, log.log_end_offset) == (0, 8202)
    # The active segment's indexes stay at their full size until close (spec 3.1: resized after load).
    assert index_file.stat().st_size == INDEX_BYTES
    assert time_file.stat().st_size == INDEX_BYTES // 12 * 12
    assert index_file.read_bytes()[: len(want_index) + 8] == want_index + bytes(8)
    assert time_file.read_bytes()[: len(want_time) + 12] == want_time + bytes(12)
    # -3 goes through both indexes: the first record with the largest timestamp.
    found = log.offset_for_timestamp(-3)
    assert (found.timestamp, found.offset) == expected_max_timestamp((segment,))
    log.close()
    assert offset_entries(index_file.read_bytes()) == offset_entries(want_index)
    assert index_file.read_bytes() == want_index
    assert time_entries(time_file.read_bytes()) == time_entries(want_time)
    assert time_file.read_bytes() == want_time
    assert (directory / _name(0, ".log")).read_bytes() == (source / _name(0, ".log")).read_bytes()
