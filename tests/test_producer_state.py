"""Producer state (kafkalog.storage.producer_state): snapshot files, sequence/epoch validation, transactions.

Gold values:
- ``kafka-written/{idempotent,transactional-commit}``: ``expected-snapshot.txt`` was printed by Kafka's
  ProducerStateManager from the ``.snapshot`` next to it; replaying the segment must also reproduce the
  snapshot's bytes exactly (Kafka wrote both).
- ``broker-logs``: every ``.snapshot`` a broker left must read (CRC valid); the 3-producer one is checked
  field by field against values read off its hex dump.
- Scenario tests spell out Kafka's rules (ProducerAppendInfo.checkProducerEpoch / checkSequence /
  appendDataBatch / appendEndTxnMarker, ProducerStateEntry.findDuplicateBatch, ProducerStateManager).
"""

from __future__ import annotations

import re
import struct
import threading
from pathlib import Path

import pytest

from conftest import fixture_path
from kafkalog.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from kafkalog.record import ControlRecordType, RecordBatch, RecordBatchBuilder, control_batch, iter_file_batches
from kafkalog.record.builder import assemble_batch
from kafkalog.record.checksums import crc32c
from kafkalog.storage.producer_state import (
    BatchMetadata,
    CompletedTxn,
    ProducerStateEntry,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    TxnMetadata,
    decrement_sequence,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from kafkalog.testing import MockTime

INT32_MAX = 2**31 - 1
PID = 1000
ENTRY = struct.Struct(">qhiqiqiq")


# ----- helpers ----------------------------------------------------------------------------------------------------


def data_batch(
    pid: int = PID, epoch: int = 0, seq: int = 0, n: int = 1, *, offset: int = 0, txn: bool = False, ts: int = 1_000
) -> RecordBatch:
    """A v2 data batch of ``n`` records at ``offset`` with base sequence ``seq``; max timestamp ts + n - 1."""
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn, base_offset=offset
    )
    for i in range(n):
        builder.append(b"k", b"v", ts + i)
    return RecordBatch(builder.build())


def marker(
    kind: ControlRecordType, pid: int = PID, epoch: int = 0, *, offset: int, coordinator_epoch: int = 0, ts: int = 5_000
) -> RecordBatch:
    return RecordBatch(control_batch(kind, pid, epoch, coordinator_epoch, ts, base_offset=offset))


def commit(pid: int = PID, epoch: int = 0, *, offset: int, **kw) -> RecordBatch:
    return marker(ControlRecordType.COMMIT, pid, epoch, offset=offset, **kw)


def abort(pid: int = PID, epoch: int = 0, *, offset: int, **kw) -> RecordBatch:
    return marker(ControlRecordType.ABORT, pid, epoch, offset=offset, **kw)


def append(manager: ProducerStateManager, batch: RecordBatch, origin: str = "client", **kw):
    """What the log does per batch: prepare, append, update, then complete a finished transaction.

    Returns (completed txn or None, the LSO recorded for it or None).
    """
    info = manager.prepare_update(batch.producer_id, origin)
    completed = info.append(batch, **kw)
    manager.update(info)
    lso = None
    if completed is not None:
        lso = manager.last_stable_offset(completed)
        manager.complete_txn(completed)
    manager.update_map_end_offset(batch.last_offset + 1)
    return completed, lso


@pytest.fixture
def manager(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, clock=MockTime())


def entry_bytes(pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first) -> bytes:
    return ENTRY.pack(pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first)


def snapshot_bytes(*entries: bytes, version: int = 1) -> bytes:
    tail = struct.pack(">i", len(entries)) + b"".join(entries)
    return struct.pack(">hI", version, crc32c(tail)) + tail


# ----- snapshot files written by Kafka ----------------------------------------------------------------------------

_EXPECTED_LINE = re.compile(
    r"producer id=(-?\d+) epoch=(-?\d+) lastSeq=(-?\d+) lastDataOffset=(-?\d+) coordinatorEpoch=(-?\d+) "
    r"currentTxnFirstOffset=OptionalLong(?:\.empty|\[(\d+)\])$"
)

KAFKA_WRITTEN = [("idempotent", 480), ("transactional-commit", 500)]


def _expected_snapshot(folder: str) -> tuple[list[tuple], int]:
    lines = fixture_path("kafka-written", folder, "expected-snapshot.txt").read_text().splitlines()
    producers = []
    summary = None
    for line in lines:
        if line.startswith("producer "):
            m = _EXPECTED_LINE.match(line)
            assert m, line
            txn = int(m.group(6)) if m.group(6) is not None else None
            producers.append((*(int(g) for g in m.groups()[:5]), txn))
        elif line.startswith("summary "):
            summary = re.match(r"summary producers=(\d+) -> VALID$", line)
    assert summary is not None
    return producers, int(summary.group(1))


@pytest.mark.parametrize(("folder", "offset"), KAFKA_WRITTEN)
def test_kafka_written_snapshot_reads_as_kafka_printed_it(folder: str, offset: int) -> None:
    expected, count = _expected_snapshot(folder)
    entries = read_snapshot(fixture_path("kafka-written", folder, f"{offset:020d}.snapshot"))
    assert len(entries) == count == len(expected)
    got = sorted(
        (
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in entries
    )
    assert got == sorted(expected)


def test_kafka_written_snapshot_fields_not_printed() -> None:
    """The fields expected-snapshot.txt leaves out, read off the files' bytes and the segments' batch lines."""
    (idem,) = read_snapshot(fixture_path("kafka-written", "idempotent", "00000000000000000480.snapshot"))
    # Last batch: offsets 474..479, maxTimestamp 1700000008418.
    assert idem.batch_metadata[-1] == BatchMetadata(479, 479, 5, 1_700_000_008_418)
    assert idem.last_timestamp == 1_700_000_008_418
    (txn,) = read_snapshot(fixture_path("kafka-written", "transactional-commit", "00000000000000000500.snapshot"))
    # Last data batch 491..498; the COMMIT marker at 499 (timestamp 1700000006380) set lastTimestamp, which the
    # snapshot's single timestamp field carries (not the data batch's max timestamp 1700000006412).
    assert txn.batch_metadata[-1] == BatchMetadata(479, 498, 7, 1_700_000_006_380)
    assert txn.last_timestamp == 1_700_000_006_380
    assert txn.batch_metadata[-1].first_seq == 472 and txn.batch_metadata[-1].first_offset == 491


@pytest.mark.parametrize(("folder", "offset"), KAFKA_WRITTEN)
def test_replaying_kafka_written_segment_reproduces_kafkas_snapshot_bytes(
    tmp_path: Path, folder: str, offset: int
) -> None:
    manager = ProducerStateManager(tmp_path, clock=MockTime())
    completed = []
    for batch in iter_file_batches(fixture_path("kafka-written", folder, "00000000000000000000.log")):
        assert manager.find_duplicate_batch(batch) is None
        txn, _ = append(manager, batch, "coordinator" if batch.is_control else "client")
        if txn is not None:
            completed.append(txn)
    assert manager.map_end_offset == offset
    path = manager.take_snapshot()
    assert path == tmp_path / f"{offset:020d}.snapshot"
    assert path.read_bytes() == fixture_path("kafka-written", folder, f"{offset:020d}.snapshot").read_bytes()
    if folder == "transactional-commit":
        # 20 transactions of 25 offsets each (24 data records + the COMMIT marker).
        assert completed == [CompletedTxn(PID, 25 * i, 25 * i + 24, False) for i in range(20)]
        assert manager.first_undecided_offset() is None


def test_every_broker_log_snapshot_reads() -> None:
    paths = sorted(fixture_path("broker-logs").rglob("*.snapshot"))
    assert len(paths) >= 80
    for path in paths:
        entries = read_snapshot(path)
        assert len(entries) == (path.stat().st_size - 10) // 46, path


def test_three_producer_broker_snapshot_field_by_field() -> None:
    path = fixture_path("broker-logs", "donaldy-kafka271", "kafka-logs", "myTopic-0", "00000000000000000038.snapshot")
    entries = {e.producer_id: e for e in read_snapshot(path)}
    # (epoch, lastSeq, lastOffset, offsetDelta, timestamp) from the hex dump; coordinatorEpoch and txn are -1.
    expected = {
        4001: (0, 11, 11, 2, 0x184D7D15005),
        4002: (0, 11, 23, 11, 0x184D7DA9D7C),
        4003: (0, 13, 37, 13, 0x184D8011C10),
    }
    assert set(entries) == set(expected)
    for pid, (epoch, seq, off, delta, ts) in expected.items():
        e = entries[pid]
        assert (e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset, e.last_timestamp) == (
            epoch,
            -1,
            None,
            ts,
        )
        assert list(e.batch_metadata) == [BatchMetadata(seq, off, delta, ts)]


def test_three_producer_broker_snapshot_rewrites_identically(tmp_path: Path) -> None:
    path = fixture_path("broker-logs", "donaldy-kafka271", "kafka-logs", "myTopic-0", "00000000000000000038.snapshot")
    write_snapshot(tmp_path / "x.snapshot", read_snapshot(path), sync=False)
    assert (tmp_path / "x.snapshot").read_bytes() == path.read_bytes()


def test_empty_broker_snapshot() -> None:
    path = fixture_path(
        "broker-logs", "yuanliubei-kafka-src", "kafka-logs", "topic1-0", "00000000000002722402.snapshot"
    )
    assert path.read_bytes()[:2] == b"\x00\x01" and path.stat().st_size == 10
    assert read_snapshot(path) == []


# ----- writing and reading snapshots --------------------------------------------------------------------------------


def test_write_layout_is_kafkas_byte_for_byte(tmp_path: Path) -> None:
    entries = [
        ProducerStateEntry(7, 3, 12, 1_234, None, [BatchMetadata(41, 100, 4, 1_234)]),
        ProducerStateEntry(8, 0, 2, 5_555, 200, [BatchMetadata(0, 200, 0, 999), BatchMetadata(9, 210, 9, 5_555)]),
        ProducerStateEntry(9, 1, 4, 777, None),  # only a marker seen: no batch metadata
    ]
    path = tmp_path / "00000000000000000211.snapshot"
    write_snapshot(path, entries)
    body = b"".join(
        [
            entry_bytes(7, 3, 41, 100, 4, 1_234, 12, -1),
            entry_bytes(8, 0, 9, 210, 9, 5_555, 2, 200),  # only the last batch is stored
            entry_bytes(9, 1, -1, -1, 0, 777, 4, -1),  # lastSeq -1, lastOffset -1, offsetDelta 0
        ]
    )
    tail = struct.pack(">i", 3) + body
    assert path.read_bytes() == struct.pack(">hI", 1, crc32c(tail)) + tail
    assert len(path.read_bytes()) == 10 + 3 * 46


def test_round_trip(tmp_path: Path) -> None:
    entries = [
        ProducerStateEntry(1, 0, -1, 10, None, [BatchMetadata(4, 4, 4, 10)]),
        ProducerStateEntry(2**62, 32767, 2**31 - 1, 2**62, 2**40, [BatchMetadata(INT32_MAX, 2**50, 5, 2**62)]),
        ProducerStateEntry(3, 2, 9, 33, None),
    ]
    path = tmp_path / "s.snapshot"
    write_snapshot(path, entries, sync=False)
    back = read_snapshot(path)
    # Only the last batch survives, with the entry's lastTimestamp as its timestamp.
    assert back == entries
    assert back[2].is_empty() and back[2].last_data_offset == -1
    write_snapshot(path, [])
    assert read_snapshot(path) == []
    assert path.stat().st_size == 10


def test_write_replaces_a_longer_existing_file(tmp_path: Path) -> None:
    """Kafka opens with CREATE+WRITE (no truncation), which would leave stale bytes after a shorter rewrite
    and break the CRC; kafkalog truncates."""
    path = tmp_path / "s.snapshot"
    write_snapshot(path, [ProducerStateEntry(i, 0, -1, 0) for i in range(3)])
    write_snapshot(path, [ProducerStateEntry(5, 0, -1, 0)])
    assert [e.producer_id for e in read_snapshot(path)] == [5]


def test_snapshot_names(tmp_path: Path) -> None:
    assert snapshot_path(tmp_path, 480) == tmp_path / "00000000000000000480.snapshot"
    for offset in (30, 4, 1_000_000_000_000):
        snapshot_path(tmp_path, offset).write_bytes(snapshot_bytes())
    (tmp_path / "00000000000000000007.snapshot.deleted").write_bytes(b"")
    (tmp_path / "00000000000000000008.log").write_bytes(b"")
    (tmp_path / "00000000000000000009.snapshot").mkdir()
    (tmp_path / "junk.snapshot").write_bytes(b"")
    assert list_snapshots(tmp_path) == [(o, snapshot_path(tmp_path, o)) for o in (4, 30, 1_000_000_000_000)]
    assert list_snapshots(tmp_path / "missing") == []


def _corrupt(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "00000000000000000042.snapshot"
    path.write_bytes(data)
    return path


GOOD = snapshot_bytes(entry_bytes(1, 0, 5, 5, 5, 100, -1, -1), entry_bytes(2, 0, 1, 7, 1, 101, -1, -1))


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("crc-field", GOOD[:2] + bytes([GOOD[2] ^ 1]) + GOOD[3:], "CRC is no longer valid"),
        ("body-byte", GOOD[:30] + bytes([GOOD[30] ^ 0x80]) + GOOD[31:], "CRC is no longer valid"),
        ("count-byte", GOOD[:9] + b"\x01" + GOOD[10:], "CRC is no longer valid"),
        ("trailing-junk", GOOD + b"\x00", "CRC is no longer valid"),
        ("version-0", b"\x00\x00" + GOOD[2:], "unknown file version 0"),
        ("version-2", b"\x00\x02" + GOOD[2:], "unknown file version 2"),
        ("truncated-entry", GOOD[:-1], "schema validation"),
        ("truncated-header", GOOD[:9], "schema validation"),
        ("empty-file", b"", "schema validation"),
        ("negative-count", GOOD[:6] + struct.pack(">i", -1) + GOOD[10:], "cannot be negative"),
        ("count-too-big", GOOD[:6] + struct.pack(">i", 3) + GOOD[10:], "schema validation"),
    ],
)
def test_corrupt_snapshots_raise(tmp_path: Path, name: str, data: bytes, reason: str) -> None:
    path = _corrupt(tmp_path, data)
    with pytest.raises(CorruptSnapshotError) as info:
        read_snapshot(path)
    assert reason in str(info.value)
    assert info.value.path == str(path) and str(path) in str(info.value)


def test_trailing_bytes_covered_by_the_crc_are_ignored(tmp_path: Path) -> None:
    """Kafka's schema reader stops after the array; the CRC is over everything from byte 6."""
    tail = GOOD[6:] + b"\xde\xad"
    path = _corrupt(tmp_path, struct.pack(">hI", 1, crc32c(tail)) + tail)
    assert [e.producer_id for e in read_snapshot(path)] == [1, 2]


def test_missing_file_is_not_corruption(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_snapshot(tmp_path / "00000000000000000001.snapshot")


# ----- sequences, epochs and duplicates -----------------------------------------------------------------------------


def test_batch_metadata_first_seq_wraps_back() -> None:
    assert BatchMetadata(9, 19, 4, 0).first_seq == 5 and BatchMetadata(9, 19, 4, 0).first_offset == 15
    # A batch of 4 records from MAX-1: sequences MAX-1, MAX, 0, 1.
    assert BatchMetadata(1, 10, 3, 0).first_seq == INT32_MAX - 1
    assert decrement_sequence(0, 1) == INT32_MAX
    # Kafka's decrementSequence is only meant for real sequences: NO_SEQUENCE (-1) with delta 0 gives MAX.
    assert decrement_sequence(-1, 0) == INT32_MAX


@pytest.mark.parametrize("first_seq", [0, 42])
def test_unknown_producer_may_start_at_any_sequence(manager: ProducerStateManager, first_seq: int) -> None:
    """No state (current epoch NO_PRODUCER_EPOCH): Kafka accepts any first sequence."""
    append(manager, data_batch(seq=first_seq, n=3, offset=0))
    entry = manager.last_entry(PID)
    assert entry is not None
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq, entry.last_data_offset) == (
        0,
        first_seq,
        first_seq + 2,
        2,
    )
    append(manager, data_batch(seq=first_seq + 3, n=1, offset=3))
    assert manager.last_entry(PID).last_seq == first_seq + 3


@pytest.mark.parametrize("next_seq", [6, 4, 2, 0, 100])
def test_gap_or_going_back_is_out_of_order(manager: ProducerStateManager, next_seq: int) -> None:
    append(manager, data_batch(seq=0, n=5, offset=0))  # sequences 0..4
    with pytest.raises(OutOfOrderSequenceError) as info:
        append(manager, data_batch(seq=next_seq, n=1, offset=5))
    assert "Out of order sequence number" in str(info.value) and info.value.offset == 5
    assert manager.last_entry(PID).last_seq == 4  # nothing applied
    assert manager.map_end_offset == 5


def test_several_batches_in_one_append_are_checked_against_each_other(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=0, n=1, offset=0))
    info = manager.prepare_update(PID)
    info.append(data_batch(seq=1, n=2, offset=1))
    info.append(data_batch(seq=3, n=2, offset=3))
    with pytest.raises(OutOfOrderSequenceError):
        info.append(data_batch(seq=6, n=1, offset=5))
    assert manager.last_entry(PID).last_seq == 0  # the manager is untouched until update()
    manager.update(info)
    assert [b.last_seq for b in manager.last_entry(PID).batch_metadata] == [0, 2, 4]


def test_first_append_of_an_unknown_producer_accepts_any_sequences(manager: ProducerStateManager) -> None:
    """Kafka tests the gap rule only when the manager's own entry has an epoch; within the first append of an
    unknown producer that entry is empty, so even a gap between its batches is accepted."""
    info = manager.prepare_update(PID)
    info.append(data_batch(seq=0, n=2, offset=0))
    info.append(data_batch(seq=9, n=1, offset=2))
    manager.update(info)
    assert manager.last_entry(PID).last_seq == 9


def _five_batches(manager: ProducerStateManager, start_offset: int = 0) -> list[RecordBatch]:
    """Six batches of 2 records (sequences 0..11); the producer retains the last 5."""
    batches = [data_batch(seq=2 * i, n=2, offset=start_offset + 2 * i, ts=100 * i) for i in range(6)]
    for b in batches:
        append(manager, b)
    return batches


@pytest.mark.parametrize("index", range(1, 6))
def test_each_of_the_last_five_batches_is_found_as_duplicate(manager: ProducerStateManager, index: int) -> None:
    batches = _five_batches(manager)
    original = batches[index]
    # The retry arrives with whatever offset the log would give it; only epoch and sequences matter.
    retry = data_batch(seq=original.base_sequence, n=2, offset=50, ts=9_999)
    dup = manager.find_duplicate_batch(retry)
    assert dup == BatchMetadata(original.last_sequence, original.last_offset, 1, original.max_timestamp)
    assert (dup.first_seq, dup.first_offset) == (original.base_sequence, original.base_offset)


def test_sixth_oldest_batch_is_no_longer_a_duplicate(manager: ProducerStateManager) -> None:
    _five_batches(manager)
    retry = data_batch(seq=0, n=2, offset=12)
    assert manager.find_duplicate_batch(retry) is None
    with pytest.raises(OutOfOrderSequenceError):
        append(manager, retry)
    assert len(manager.last_entry(PID).batch_metadata) == 5


def test_duplicate_needs_same_epoch_and_exact_range(manager: ProducerStateManager) -> None:
    _five_batches(manager)
    assert manager.find_duplicate_batch(data_batch(seq=10, n=2, offset=12)) is not None
    assert manager.find_duplicate_batch(data_batch(seq=10, n=1, offset=12)) is None  # partial overlap
    assert manager.find_duplicate_batch(data_batch(seq=9, n=2, offset=12)) is None
    assert manager.find_duplicate_batch(data_batch(epoch=1, seq=10, n=2, offset=12)) is None
    assert manager.find_duplicate_batch(data_batch(pid=PID + 1, seq=10, n=2, offset=12)) is None


def test_epoch_bump_resets_sequence_to_zero(manager: ProducerStateManager) -> None:
    _five_batches(manager)
    append(manager, data_batch(epoch=1, seq=0, n=1, offset=12))
    entry = manager.last_entry(PID)
    assert entry.producer_epoch == 1 and list(entry.batch_metadata) == [BatchMetadata(0, 12, 0, 1_000)]
    # The old epoch's batches are forgotten: no duplicate, and the old epoch is now fenced.
    assert manager.find_duplicate_batch(data_batch(epoch=0, seq=10, n=2, offset=13)) is None
    with pytest.raises(InvalidProducerEpochError):
        append(manager, data_batch(epoch=0, seq=12, n=1, offset=13))


def test_epoch_bump_with_nonzero_sequence_is_out_of_order(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=0, n=3, offset=0))
    with pytest.raises(OutOfOrderSequenceError) as info:
        append(manager, data_batch(epoch=1, seq=3, n=1, offset=3))
    assert "new epoch" in str(info.value)


@pytest.mark.parametrize("origin", ["client", "coordinator"])
def test_fenced_epoch(manager: ProducerStateManager, origin: str) -> None:
    append(manager, data_batch(epoch=5, seq=0, n=1, offset=0))
    with pytest.raises(InvalidProducerEpochError) as info:
        append(manager, data_batch(epoch=4, seq=1, n=1, offset=1), origin)
    assert "is 4, which is < the last seen epoch 5" in str(info.value)


def test_replication_skips_sequence_and_epoch_checks(manager: ProducerStateManager) -> None:
    append(manager, data_batch(epoch=5, seq=0, n=1, offset=0))
    append(manager, data_batch(epoch=5, seq=77, n=1, offset=1), "replication")  # a gap
    append(manager, data_batch(epoch=4, seq=3, n=1, offset=2), "replication")  # an older epoch: only logged
    entry = manager.last_entry(PID)
    assert entry.producer_epoch == 4 and entry.last_seq == 3 and len(entry.batch_metadata) == 1


def test_coordinator_origin_skips_sequence_checks(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=0, n=1, offset=0))
    append(manager, data_batch(seq=50, n=1, offset=1), "coordinator")
    assert manager.last_entry(PID).last_seq == 50


def test_sequence_wraps_past_int32_max(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=INT32_MAX - 2, n=3, offset=0))  # ..., MAX
    assert manager.last_entry(PID).last_seq == INT32_MAX
    with pytest.raises(OutOfOrderSequenceError):
        append(manager, data_batch(seq=1, n=1, offset=3))
    append(manager, data_batch(seq=0, n=1, offset=3))  # MAX is followed by 0
    assert manager.last_entry(PID).last_seq == 0


def test_batch_crossing_the_wrap(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=INT32_MAX - 3, n=2, offset=0))  # MAX-3, MAX-2
    crossing = data_batch(seq=INT32_MAX - 1, n=4, offset=2)  # MAX-1, MAX, 0, 1
    assert crossing.last_sequence == 1
    append(manager, crossing)
    entry = manager.last_entry(PID)
    assert entry.last_seq == 1 and entry.batch_metadata[-1].first_seq == INT32_MAX - 1
    assert manager.find_duplicate_batch(data_batch(seq=INT32_MAX - 1, n=4, offset=9)) == BatchMetadata(1, 5, 3, 1_003)
    with pytest.raises(OutOfOrderSequenceError):
        append(manager, data_batch(seq=0, n=1, offset=6))
    append(manager, data_batch(seq=2, n=1, offset=6))


def test_producer_known_only_from_a_marker_must_start_at_zero(manager: ProducerStateManager) -> None:
    """A marker for an unknown producer: no CompletedTxn, the producer becomes known with no batches;
    its epoch is then set, so the next data batch must be in sequence after -1, i.e. start at 0."""
    completed, _ = append(manager, commit(epoch=2, offset=0, coordinator_epoch=3, ts=777), "coordinator")
    assert completed is None
    entry = manager.last_entry(PID)
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.last_timestamp) == (2, 3, 777)
    assert entry.is_empty() and entry.current_txn_first_offset is None
    assert manager.first_unstable_offset() is None
    with pytest.raises(OutOfOrderSequenceError):
        append(manager, data_batch(epoch=2, seq=5, n=1, offset=1))
    append(manager, data_batch(epoch=2, seq=0, n=1, offset=1))


# ----- transactions ----------------------------------------------------------------------------------------------


def test_transaction_commit(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=0, n=3, offset=0, txn=True))
    append(manager, data_batch(seq=3, n=2, offset=3, txn=True))
    entry = manager.last_entry(PID)
    assert entry.current_txn_first_offset == 0
    assert list(manager.ongoing_txns) == [0] and manager.ongoing_txns[0] == TxnMetadata(PID, 0, None)
    assert manager.first_unstable_offset() == 0 and manager.first_undecided_offset() == 0
    completed, lso = append(manager, commit(offset=5, coordinator_epoch=1, ts=4_242), "coordinator")
    assert completed == CompletedTxn(PID, 0, 5, is_aborted=False)
    assert lso == 6
    entry = manager.last_entry(PID)
    assert entry.current_txn_first_offset is None and entry.coordinator_epoch == 1
    assert entry.last_timestamp == 4_242 and entry.last_seq == 4  # batches kept: same epoch
    # Decided, but unstable until the high watermark passes the marker.
    assert manager.first_undecided_offset() is None
    assert manager.first_unstable_offset() == 0
    assert manager.unreplicated_txns == {0: TxnMetadata(PID, 0, 5)}
    manager.on_high_watermark_updated(5)
    assert manager.first_unstable_offset() == 0
    manager.on_high_watermark_updated(6)
    assert manager.first_unstable_offset() is None
    # The next transaction may start in sequence.
    append(manager, data_batch(seq=5, n=1, offset=6, txn=True))
    assert manager.first_unstable_offset() == 6


def test_transaction_abort(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=0, n=2, offset=10, txn=True))
    completed, lso = append(manager, abort(offset=12), "coordinator")
    assert completed == CompletedTxn(PID, 10, 12, is_aborted=True) and lso == 13


def test_marker_without_ongoing_transaction_completes_nothing(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=0, n=2, offset=0))
    completed, _ = append(manager, abort(offset=2), "coordinator")
    assert completed is None
    assert manager.last_entry(PID).last_seq == 1


def test_non_transactional_write_inside_a_transaction(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=0, n=2, offset=0, txn=True))
    with pytest.raises(InvalidTxnStateError) as info:
        append(manager, data_batch(seq=2, n=1, offset=2, txn=False))
    assert "Expected transactional write" in str(info.value)
    assert type(info.value) is InvalidTxnStateError


def test_lso_with_interleaved_transactions(manager: ProducerStateManager) -> None:
    a, b = 1, 2
    append(manager, data_batch(pid=a, seq=0, n=3, offset=10, txn=True))  # A: 10..12
    append(manager, data_batch(pid=b, seq=0, n=1, offset=13, txn=True))  # B: 13
    append(manager, data_batch(pid=a, seq=3, n=1, offset=14, txn=True))  # A continues
    assert manager.first_unstable_offset() == 10
    completed, lso = append(manager, commit(pid=a, offset=15), "coordinator")
    assert completed == CompletedTxn(a, 10, 15, False)
    assert lso == 13  # B's transaction is still open
    assert manager.first_unstable_offset() == 10  # A's marker is above the high watermark
    manager.on_high_watermark_updated(16)
    assert manager.first_unstable_offset() == 13
    completed, lso = append(manager, abort(pid=b, offset=16), "coordinator")
    assert completed == CompletedTxn(b, 13, 16, True) and lso == 17
    manager.on_high_watermark_updated(17)
    assert manager.first_unstable_offset() is None and manager.ongoing_txns == {}


def test_lso_ignores_the_completing_producers_own_transaction(manager: ProducerStateManager) -> None:
    append(manager, data_batch(pid=1, seq=0, n=1, offset=0, txn=True))
    info = manager.prepare_update(1, "coordinator")
    completed = info.append(commit(pid=1, offset=1))
    # last_stable_offset is asked before complete_txn: the producer's own txn is still in ongoing_txns.
    assert manager.ongoing_txns and manager.last_stable_offset(completed) == 2


def test_complete_unknown_txn_is_an_error(manager: ProducerStateManager) -> None:
    with pytest.raises(ValueError, match="not started"):
        manager.complete_txn(CompletedTxn(PID, 3, 4, False))


def test_first_offset_metadata_gives_the_txn_first_offset(manager: ProducerStateManager) -> None:
    class Meta:
        message_offset = 20

    info = manager.prepare_update(PID)
    info.append(data_batch(seq=0, n=2, offset=20, txn=True), Meta())
    manager.update(info)
    assert manager.first_unstable_offset() == 20
    assert isinstance(manager.first_unstable_offset_txn().first_offset_metadata, Meta)


def test_marker_epoch_rules_legacy(manager: ProducerStateManager) -> None:
    """TV0/TV1: a marker may carry the current epoch or a higher one, never a lower one."""
    append(manager, data_batch(epoch=3, seq=0, n=1, offset=0, txn=True))
    with pytest.raises(InvalidProducerEpochError):
        append(manager, commit(epoch=2, offset=1), "coordinator")
    completed, _ = append(manager, abort(epoch=4, offset=1), "coordinator")  # coordinator bumped the epoch
    assert completed == CompletedTxn(PID, 0, 1, True)
    entry = manager.last_entry(PID)
    assert entry.producer_epoch == 4 and entry.is_empty()  # a new epoch forgets the batches
    # Replication accepts a stale marker (only logged).
    append(manager, commit(epoch=3, offset=2), "replication")


def test_marker_epoch_rules_tv2(manager: ProducerStateManager) -> None:
    """TV2: the coordinator bumps the epoch before every marker, so the marker epoch must be higher;
    an equal epoch is accepted only as a retry of a marker for a transaction that already ended."""
    append(manager, data_batch(epoch=3, seq=0, n=1, offset=0, txn=True))
    info = manager.prepare_update(PID, "coordinator")
    with pytest.raises(InvalidProducerEpochError, match="<= the last seen epoch 3"):
        info.append(commit(epoch=3, offset=1), transaction_version=2)
    info = manager.prepare_update(PID, "coordinator")
    assert info.append(commit(epoch=4, offset=1), transaction_version=2) == CompletedTxn(PID, 0, 1, False)
    manager.update(info)
    manager.complete_txn(CompletedTxn(PID, 0, 1, False))
    retry = manager.prepare_update(PID, "coordinator")
    assert retry.append(commit(epoch=4, offset=2), transaction_version=2) is None
    with pytest.raises(InvalidProducerEpochError):
        manager.prepare_update(PID, "coordinator").append(commit(epoch=3, offset=2), transaction_version=2)


def test_coordinator_epoch_fencing(manager: ProducerStateManager) -> None:
    append(manager, data_batch(seq=0, n=1, offset=0, txn=True))
    append(manager, commit(offset=1, coordinator_epoch=5), "coordinator")
    append(manager, data_batch(seq=1, n=1, offset=2, txn=True))
    with pytest.raises(TransactionCoordinatorFencedError) as info:
        append(manager, commit(offset=3, coordinator_epoch=4), "coordinator")
    assert isinstance(info.value, InvalidTxnStateError)
    completed, _ = append(manager, commit(offset=3, coordinator_epoch=4), "replication")
    assert completed == CompletedTxn(PID, 2, 3, False)


def test_empty_control_batch_is_ignored(manager: ProducerStateManager) -> None:
    """A control batch emptied by the cleaner: nothing to apply."""
    append(manager, data_batch(seq=0, n=1, offset=0, txn=True))
    empty = RecordBatch(
        assemble_batch(
            b"",
            record_count=0,
            last_offset_delta=0,
            base_offset=1,
            base_timestamp=-1,
            max_timestamp=5,
            producer_id=PID,
            producer_epoch=0,
            is_transactional=True,
            is_control=True,
        )
    )
    completed, _ = append(manager, empty, "replication")
    assert completed is None and manager.last_entry(PID).current_txn_first_offset == 0


def test_has_late_transaction(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path, max_transaction_timeout_ms=60_000)
    append(manager, data_batch(seq=0, n=1, offset=0, txn=True, ts=1_000_000))
    assert not manager.has_late_transaction(1_000_000 + 60_000 + 300_000)
    assert manager.has_late_transaction(1_000_000 + 60_000 + 300_001)
    append(manager, commit(offset=1, ts=1_000_001), "coordinator")
    assert not manager.has_late_transaction(10**12)


def test_invalid_producer_id_update(manager: ProducerStateManager) -> None:
    with pytest.raises(ValueError):
        manager.update(manager.prepare_update(-1))


# ----- expiration --------------------------------------------------------------------------------------------------


def test_remove_expired_producers(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path, producer_id_expiration_ms=1_000)
    append(manager, data_batch(pid=1, seq=0, n=1, offset=0, ts=10_000))
    append(manager, data_batch(pid=2, seq=0, n=1, offset=1, ts=10_500))
    append(manager, data_batch(pid=3, seq=0, n=1, offset=2, ts=10_000, txn=True))  # ongoing txn: kept
    manager.remove_expired_producers(10_999)
    assert set(manager.active_producers) == {1, 2, 3}
    manager.remove_expired_producers(11_000)  # idle >= expiration
    assert set(manager.active_producers) == {2, 3}
    manager.remove_expired_producers(10**9)
    assert set(manager.active_producers) == {3}
    assert manager.producer_id_count == 1


# ----- snapshot management ----------------------------------------------------------------------------------------


def _advance(manager: ProducerStateManager, pid: int, seq: int, offset: int, ts: int = 1_000) -> None:
    append(manager, data_batch(pid=pid, seq=seq, n=1, offset=offset, ts=ts))


def test_take_snapshot_only_when_offset_advanced(tmp_path: Path, manager: ProducerStateManager) -> None:
    assert manager.take_snapshot() is None  # map end offset 0 = last snapshot offset 0
    _advance(manager, PID, 0, 0)
    path = manager.take_snapshot(sync=False)
    assert path == tmp_path / "00000000000000000001.snapshot" and path.exists()
    assert manager.take_snapshot() is None
    _advance(manager, PID, 1, 1)
    _advance(manager, PID, 2, 2)
    assert manager.take_snapshot() == tmp_path / "00000000000000000003.snapshot"
    assert manager.snapshot_offsets() == [1, 3]
    assert (manager.oldest_snapshot_offset(), manager.latest_snapshot_offset()) == (1, 3)
    assert manager.fetch_snapshot(3) == path.with_name("00000000000000000003.snapshot")
    assert [e.last_seq for e in read_snapshot(manager.fetch_snapshot(3))] == [2]


def test_snapshot_keeps_ongoing_transactions(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    append(manager, data_batch(pid=1, seq=0, n=2, offset=0, txn=True, ts=100))
    append(manager, data_batch(pid=2, seq=0, n=1, offset=2, ts=100))
    manager.take_snapshot()
    other = ProducerStateManager(tmp_path, producer_id_expiration_ms=10**12)
    assert other.snapshot_offsets() == [3]
    other.truncate_and_reload(0, 3, 200)
    assert other.map_end_offset == 3
    assert other.ongoing_txns == {0: TxnMetadata(1, 0, None)} and other.first_unstable_offset() == 0
    # Sequences continue from the snapshot's last batch.
    append(other, data_batch(pid=1, seq=2, n=1, offset=3, txn=True))
    with pytest.raises(OutOfOrderSequenceError):
        append(other, data_batch(pid=2, seq=5, n=1, offset=4))


def test_delete_and_rename_snapshots(tmp_path: Path) -> None:
    for offset in (5, 10, 15, 20):
        write_snapshot(snapshot_path(tmp_path, offset), [])
    manager = ProducerStateManager(tmp_path)
    assert manager.snapshot_offsets() == [5, 10, 15, 20]
    manager.delete_snapshots_below(15)  # exclusive
    assert manager.snapshot_offsets() == [15, 20]
    assert [o for o, _ in list_snapshots(tmp_path)] == [15, 20]
    renamed = manager.rename_snapshot_to_deleted(15)
    assert renamed == tmp_path / "00000000000000000015.snapshot.deleted" and renamed.exists()
    assert manager.snapshot_offsets() == [20]
    assert manager.rename_snapshot_to_deleted(15) is None  # no longer tracked
    snapshot_path(tmp_path, 20).unlink()
    assert manager.rename_snapshot_to_deleted(20) is None  # already gone from disk
    manager.delete_snapshot(99)  # untracked: nothing happens
    assert manager.snapshot_offsets() == []


@pytest.mark.parametrize(
    ("snapshots", "bases", "kept"),
    [
        # Strays 5 and 15 lie below the last segment base 20; stray 25 is above it (clean shutdown): kept.
        ([5, 10, 15, 20, 25], [0, 10, 20], [10, 20, 25]),
        ([5, 10, 15, 20], [0, 10, 20], [10, 20]),
        # Only the newest stray survives, and only if it is above the largest base.
        ([30, 40, 50], [0, 10], [50]),
        ([3, 4], [0, 10], []),
        # No segments at all: every stray but the newest goes.
        ([3, 4, 7], [], [7]),
        ([0, 10], [0, 10], [0, 10]),
    ],
)
def test_remove_stray_snapshots(tmp_path: Path, snapshots: list[int], bases: list[int], kept: list[int]) -> None:
    manager = ProducerStateManager(tmp_path)
    for offset in snapshots:  # written after construction: remove_stray_snapshots rescans the directory
        write_snapshot(snapshot_path(tmp_path, offset), [])
    manager.remove_stray_snapshots(bases)
    assert manager.snapshot_offsets() == kept
    assert [o for o, _ in list_snapshots(tmp_path)] == kept


def test_truncate_and_reload(tmp_path: Path) -> None:
    clock = MockTime(start_ms=0)
    manager = ProducerStateManager(tmp_path, producer_id_expiration_ms=10_000, clock=clock)
    _advance(manager, 1, 0, 0, ts=1_000)
    _advance(manager, 1, 1, 1, ts=1_000)
    manager.take_snapshot()  # at 2
    _advance(manager, 2, 0, 2, ts=50_000)
    manager.take_snapshot()  # at 3
    _advance(manager, 1, 2, 3, ts=50_000)
    _advance(manager, 1, 3, 4, ts=50_000)
    manager.take_snapshot()  # at 5
    assert manager.snapshot_offsets() == [2, 3, 5]
    # LEO 4: snapshot 5 is above it; log start 2: snapshot 2 is at/below it; 3 is loaded.
    manager.truncate_and_reload(2, 4, current_time_ms=20_000)
    assert manager.snapshot_offsets() == [3]
    assert [o for o, _ in list_snapshots(tmp_path)] == [3]
    assert manager.map_end_offset == 3
    # Producer 1 (last timestamp 1000) has been idle for 19 s > 10 s: dropped on load.
    assert set(manager.active_producers) == {2}
    assert manager.last_entry(2).last_data_offset == 2


def test_truncate_and_reload_without_snapshot_starts_at_log_start(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    _advance(manager, 1, 0, 0)
    manager.take_snapshot()  # at 1
    manager.truncate_and_reload(1, 7, 0)  # snapshot 1 <= log start: deleted
    assert manager.snapshot_offsets() == [] and manager.map_end_offset == 1
    assert manager.active_producers == {}


def test_truncate_and_reload_at_map_end_keeps_state(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    for i in range(4):
        _advance(manager, 1, i, i)
    manager.take_snapshot()  # at 4
    manager.truncate_and_reload(0, 4, 10**9)  # LEO = map end offset: no reload, nothing expires
    assert set(manager.active_producers) == {1} and manager.map_end_offset == 4
    manager.truncate_and_reload(6, 6, 0)  # log start moved past everything: snapshot 4 removed
    assert manager.snapshot_offsets() == [] and manager.map_end_offset == 6


def test_load_from_snapshot_skips_corrupt_ones(tmp_path: Path) -> None:
    write_snapshot(snapshot_path(tmp_path, 4), [ProducerStateEntry(1, 0, -1, 100, None, [BatchMetadata(3, 3, 3, 100)])])
    snapshot_path(tmp_path, 9).write_bytes(b"\x00\x01garbage")
    manager = ProducerStateManager(tmp_path, producer_id_expiration_ms=10**12)
    manager.load_from_snapshot(0, 200)
    assert manager.map_end_offset == 4 and set(manager.active_producers) == {1}
    assert manager.snapshot_offsets() == [4] and not snapshot_path(tmp_path, 9).exists()
    # With nothing loadable the state starts at the log start offset.
    snapshot_path(tmp_path, 4).write_bytes(b"")
    fresh = ProducerStateManager(tmp_path)
    fresh.load_from_snapshot(2, 0)
    assert fresh.map_end_offset == 2 and fresh.snapshot_offsets() == []


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    append(manager, data_batch(seq=0, n=2, offset=0, txn=True))
    manager.take_snapshot()
    manager.truncate_fully_and_start_at(100)
    assert manager.active_producers == {} and manager.ongoing_txns == {} and manager.is_empty()
    assert manager.map_end_offset == 100 and manager.snapshot_offsets() == [] and list_snapshots(tmp_path) == []
    assert manager.first_unstable_offset() is None
    assert manager.take_snapshot() == snapshot_path(tmp_path, 100)


def test_on_log_start_offset_incremented(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    append(manager, data_batch(seq=0, n=1, offset=0, txn=True))
    append(manager, commit(offset=1), "coordinator")
    assert manager.first_unstable_offset() == 0
    manager.on_log_start_offset_incremented(2)
    assert manager.first_unstable_offset() is None
    manager.on_log_start_offset_incremented(10)
    assert manager.map_end_offset == 10


def test_update_parent_dir(tmp_path: Path) -> None:
    old, new = tmp_path / "t-0", tmp_path / "t-0.abc-delete"
    old.mkdir()
    manager = ProducerStateManager(old)
    _advance(manager, 1, 0, 0)
    manager.take_snapshot()
    old.rename(new)
    manager.update_parent_dir(new)
    assert manager.fetch_snapshot(1) == snapshot_path(new, 1)
    assert manager.rename_snapshot_to_deleted(1) == new / "00000000000000000001.snapshot.deleted"


def test_concurrent_producers(tmp_path: Path) -> None:
    """Appends of different producers from several threads, snapshots taken meanwhile: no state is lost."""
    manager = ProducerStateManager(tmp_path)
    offsets = iter(range(10**6))
    offset_lock = threading.Lock()

    def produce(pid: int) -> None:
        for seq in range(40):
            with offset_lock:  # the log's lock: offsets are assigned and applied in order
                append(manager, data_batch(pid=pid, seq=seq, n=1, offset=next(offsets)))
            manager.take_snapshot(sync=False)

    threads = [threading.Thread(target=produce, args=(pid,)) for pid in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {pid: e.last_seq for pid, e in manager.active_producers.items()} == dict.fromkeys(range(1, 7), 39)
    manager.take_snapshot()
    assert {e.producer_id for e in read_snapshot(snapshot_path(tmp_path, 240))} == set(range(1, 7))
