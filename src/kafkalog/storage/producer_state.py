"""Producer state: idempotent/transactional producer bookkeeping and ``.snapshot`` files, as Kafka keeps them.

Kafka classes mirrored here (``storage/.../internals/log``): BatchMetadata, ProducerStateEntry, TxnMetadata,
CompletedTxn, ProducerAppendInfo and ProducerStateManager. The snapshot file layout is that of
``ProducerSnapshot.json`` version 1 (spec 4.2)::

    int16 version (= 1) | uint32 crc32c(bytes[6:]) | int32 count | count x 46-byte entries
    entry = int64 producerId, int16 epoch, int32 lastSequence, int64 lastOffset, int32 offsetDelta,
            int64 timestamp, int32 coordinatorEpoch, int64 currentTxnFirstOffset (-1 = none)

Sequence and epoch validation follows ProducerAppendInfo; duplicate detection follows
ProducerStateEntry.findDuplicateBatch (the last 5 batches of a producer, same epoch, exact sequence range).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..clock import SYSTEM_TIME, Time
from ..errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from ..layout import DELETED_SUFFIX, INT32_MAX, SNAPSHOT_SUFFIX, segment_file
from ..record.checksums import crc32c
from ..record.types import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    ControlRecordType,
    end_transaction_marker,
)
from .fileio import file_io

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
"""ProducerStateEntry.NUM_BATCHES_TO_RETAIN: batches kept per producer for duplicate detection."""

PRODUCER_SNAPSHOT_VERSION = 1
LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000

VERSION_OFFSET = 0
CRC_OFFSET = 2
PRODUCER_ENTRIES_OFFSET = 6
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
SNAPSHOT_HEADER_SIZE = _HEADER.size  # 10
SNAPSHOT_ENTRY_SIZE = _ENTRY.size  # 46
assert SNAPSHOT_HEADER_SIZE == 10 and SNAPSHOT_ENTRY_SIZE == 46


class AppendOrigin(StrEnum):
    """Kafka's AppendOrigin: how much validation an append gets."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"
    RAFT_LEADER = "raft_leader"


def _origin(origin: AppendOrigin | str) -> AppendOrigin:
    return origin if isinstance(origin, AppendOrigin) else AppendOrigin(str(origin).lower())


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence: the inverse of incrementSequence's wrap past Int32.MAX."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


# ----- plain values ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer: last sequence and offset, offset delta, max timestamp."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        """The batch's first sequence (wrapping back past 0 as Kafka does)."""
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


def _metadata_deque(items: Iterable[BatchMetadata] = ()) -> deque[BatchMetadata]:
    return deque(items, maxlen=NUM_BATCHES_TO_RETAIN)


@dataclass(slots=True)
class ProducerStateEntry:
    """The state of one producer id: epoch, coordinator epoch, last timestamp, ongoing txn, last 5 batches."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batch_metadata: deque[BatchMetadata] = field(default_factory=_metadata_deque)

    def __post_init__(self) -> None:
        if not (isinstance(self.batch_metadata, deque) and self.batch_metadata.maxlen == NUM_BATCHES_TO_RETAIN):
            self.batch_metadata = _metadata_deque(self.batch_metadata)

    @classmethod
    def empty(cls, producer_id: int) -> ProducerStateEntry:
        """ProducerStateEntry.empty: no epoch, no batches."""
        return cls(producer_id)

    # ----- derived -----
    def is_empty(self) -> bool:
        """True when no batch metadata is held (e.g. only a marker was seen)."""
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    # ----- mutation (as ProducerStateEntry) -----
    def with_producer_id_and_batch_metadata(
        self, producer_id: int, batch_metadata: BatchMetadata | None = None
    ) -> ProducerStateEntry:
        """A copy with another producer id and at most one batch (Kafka builds the append's scratch entry so)."""
        return ProducerStateEntry(
            producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            _metadata_deque([batch_metadata] if batch_metadata is not None else []),
        )

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            _metadata_deque(self.batch_metadata),
        )

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """A new epoch forgets the batches of the old one."""
        if self.producer_epoch != producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch
            return True
        return False

    def add_batch(
        self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update(self, next_entry: ProducerStateEntry) -> None:
        """Merge an append's resulting entry into this one (ProducerStateEntry.update(nextEntry))."""
        self._update(
            next_entry.producer_epoch,
            next_entry.coordinator_epoch,
            next_entry.last_timestamp,
            next_entry.batch_metadata,
            next_entry.current_txn_first_offset,
        )

    def update_after_marker(self, producer_epoch: int, coordinator_epoch: int, last_timestamp: int) -> None:
        """ProducerStateEntry.update(epoch, coordinatorEpoch, lastTimestamp): ends the transaction."""
        self._update(producer_epoch, coordinator_epoch, last_timestamp, (), None)

    def _update(
        self,
        producer_epoch: int,
        coordinator_epoch: int,
        last_timestamp: int,
        batch_metadata: Iterable[BatchMetadata],
        current_txn_first_offset: int | None,
    ) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.extend(batch_metadata)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset
        self.last_timestamp = last_timestamp

    # ----- duplicates -----
    def find_duplicate_batch(self, batch: Any) -> BatchMetadata | None:
        """The retained batch with the same epoch and exact sequence range as ``batch``, if any."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        return self.batch_with_sequence_range(batch.base_sequence, batch.last_sequence)

    def batch_with_sequence_range(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for metadata in self.batch_metadata:
            if metadata.first_seq == first_seq and metadata.last_seq == last_seq:
                return metadata
        return None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker: its first data offset, the marker's offset, and whether it aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class TxnMetadata:
    """An ongoing (last_offset None) or completed-but-unreplicated transaction."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None
    first_offset_metadata: Any = field(default=None, compare=False, repr=False)
    """Whatever the caller passed as the first offset's metadata (e.g. a LogOffsetMetadata), if anything."""


# ----- snapshot files -------------------------------------------------------------------------------------------


def snapshot_path(directory: str | os.PathLike[str], offset: int) -> Path:
    """``<dir>/<20-digit offset>.snapshot`` (LogFileUtils.producerSnapshotFile)."""
    return segment_file(directory, offset, SNAPSHOT_SUFFIX)


def _offset_from_name(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def list_snapshots(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Every regular ``*.snapshot`` file in ``directory`` as (offset, path), sorted by offset.

    Kafka would fail on a ``.snapshot`` name whose prefix is not a number; those are skipped here.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        if not path.name.endswith(SNAPSHOT_SUFFIX) or not path.is_file():
            continue
        offset = _offset_from_name(path.name)
        if offset is not None:
            found.append((offset, path))
    found.sort()
    return found


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a version-1 snapshot holding ``entries`` (in the order given)."""
    body = bytearray()
    count = 0
    for entry in entries:
        body += _ENTRY.pack(
            entry.producer_id,
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
        )
        count += 1
    tail = struct.pack(">i", count) + bytes(body)
    return struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc32c(tail)) + tail


def decode_snapshot(data: bytes | bytearray | memoryview, path: str | None = None) -> list[ProducerStateEntry]:
    """Parse snapshot bytes as ProducerStateManager.readSnapshot does: schema, then version, then CRC.

    Bytes after the last entry are ignored (as Kafka's schema reader does) but covered by the CRC.
    """
    data = bytes(data)
    size = len(data)
    if size < SNAPSHOT_HEADER_SIZE:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: {size} bytes is shorter than the {SNAPSHOT_HEADER_SIZE}-byte header",
            path=path,
        )
    version, crc, count = _HEADER.unpack_from(data, 0)
    remaining = size - SNAPSHOT_HEADER_SIZE
    if count < 0:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: Error reading field 'producer_entries': "
            f"Array size {count} cannot be negative",
            path=path,
        )
    if count * SNAPSHOT_ENTRY_SIZE > remaining:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: Error reading field 'producer_entries': {count} entries need "
            f"{count * SNAPSHOT_ENTRY_SIZE} bytes, only {remaining} bytes available",
            path=path,
        )
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}", path=path)
    computed = crc32c(data[PRODUCER_ENTRIES_OFFSET:])
    if crc != computed:
        raise CorruptSnapshotError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}", path=path
        )
    entries = []
    for producer_id, epoch, seq, offset, offset_delta, timestamp, coordinator_epoch, txn_first in _ENTRY.iter_unpack(
        data[SNAPSHOT_HEADER_SIZE : SNAPSHOT_HEADER_SIZE + count * SNAPSHOT_ENTRY_SIZE]
    ):
        batches = [BatchMetadata(seq, offset, offset_delta, timestamp)] if offset >= 0 else []
        entries.append(
            ProducerStateEntry(
                producer_id,
                epoch,
                coordinator_epoch,
                timestamp,
                txn_first if txn_first >= 0 else None,
                _metadata_deque(batches),
            )
        )
    return entries


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerStateEntry]:
    """Read a producer snapshot file; CorruptSnapshotError (naming the file) when it cannot be trusted."""
    path = Path(path)
    return decode_snapshot(path.read_bytes(), str(path))


def write_snapshot(path: str | os.PathLike[str], entries: Iterable[ProducerStateEntry], sync: bool = True) -> None:
    """Write a producer snapshot file (in place, as Kafka's writeSnapshot does); fsync it when ``sync``.

    The write and the fsync go through the file-operations layer. When either fails, the partial file is
    removed (best effort) and the OSError is raised for the log to take its dir offline; a partial file
    that could not be removed is never loaded either: its schema or CRC check fails, and loading deletes
    it and rebuilds the state from the log (ProducerStateManager.loadFromSnapshot on CorruptSnapshotException).
    """
    data = memoryview(encode_snapshot(entries))
    io = file_io()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        while written < len(data):
            written += io.pwrite(fd, data[written:], written, path)
        if sync:
            io.fsync(fd, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        os.close(fd)


def sync_snapshot_if_exists(path: str | os.PathLike[str]) -> None:
    """fsync a snapshot written without sync, unless it is gone (Kafka's Utils.flushFileIfExists)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        file_io().fsync(fd, path)
    finally:
        os.close(fd)


# ----- validating one append ------------------------------------------------------------------------------------


def _first_offset(first_offset_metadata: Any, default: int) -> int:
    if first_offset_metadata is None:
        return default
    if isinstance(first_offset_metadata, int):
        return first_offset_metadata
    offset: int = first_offset_metadata.message_offset  # a LogOffsetMetadata
    return offset


class ProducerAppendInfo:
    """Validates the batches one producer appends in one request and collects the resulting state.

    Obtain it from ``ProducerStateManager.prepare_update``; feed every batch of the producer to ``append``;
    apply it with ``ProducerStateManager.update``. The manager's state is untouched until then.
    """

    def __init__(self, producer_id: int, current_entry: ProducerStateEntry, origin: AppendOrigin | str) -> None:
        self.producer_id = producer_id
        self.current_entry = current_entry
        self.origin = _origin(origin)
        self.updated_entry = current_entry.with_producer_id_and_batch_metadata(producer_id)
        self.started_transactions: list[TxnMetadata] = []

    def to_entry(self) -> ProducerStateEntry:
        """The producer's state as this append leaves it (batches of this append only)."""
        return self.updated_entry

    # ----- checks -----
    def _check_producer_epoch(self, producer_epoch: int, offset: int, transaction_version: int = 0) -> None:
        current = self.updated_entry.producer_epoch
        invalid = producer_epoch <= current if transaction_version >= 2 else producer_epoch < current
        if not invalid:
            return
        if (
            transaction_version >= 2
            and producer_epoch == current
            and self.updated_entry.current_txn_first_offset is None
        ):
            # TV2: a retried marker for a transaction that already ended is written again, not refused.
            log.info("Idempotent transaction marker retry for producer %d epoch %d", self.producer_id, producer_epoch)
            return
        comparison = "<=" if transaction_version >= 2 else "<"
        message = (
            f"Epoch of producer {self.producer_id} at offset {offset} is {producer_epoch}, "
            f"which is {comparison} the last seen epoch {current}"
        )
        if self.origin == AppendOrigin.REPLICATION:
            log.warning(message)
        else:
            raise InvalidProducerEpochError(message, offset=offset)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self.updated_entry, self.current_entry
        if producer_epoch != updated.producer_epoch:
            # A new epoch must start at sequence 0, unless the producer had no epoch at all.
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at offset {offset}: "
                    f"{producer_epoch} (request epoch), {first_seq} (seq. number), "
                    f"{updated.producer_epoch} (current producer epoch)",
                    offset=offset,
                )
            return
        if not updated.is_empty():
            current_last_seq = updated.last_seq
        elif producer_epoch == current.producer_epoch:
            current_last_seq = current.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        # With no current epoch (e.g. every record of the producer was deleted) any sequence is accepted.
        if not (current.producer_epoch == NO_PRODUCER_EPOCH or _in_sequence(current_last_seq, first_seq)):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {self.producer_id} at offset {offset}: "
                f"{first_seq} (incoming seq. number), {current_last_seq} (current end sequence number)",
                offset=offset,
            )

    def _check_coordinator_epoch(self, coordinator_epoch: int, offset: int) -> None:
        if self.updated_entry.coordinator_epoch > coordinator_epoch:
            message = (
                f"Invalid coordinator epoch for producerId {self.producer_id} at offset {offset}: "
                f"{coordinator_epoch} (zombie), {self.updated_entry.coordinator_epoch} (current)"
            )
            if self.origin == AppendOrigin.REPLICATION:
                log.info(message)
            else:
                raise TransactionCoordinatorFencedError(message, offset=offset)

    # ----- appends -----
    def append(
        self, batch: Any, first_offset_metadata: Any = None, *, transaction_version: int = 0
    ) -> CompletedTxn | None:
        """Validate and record one v2 batch of this producer; a COMMIT/ABORT marker returns its CompletedTxn.

        ``first_offset_metadata``: the batch's first offset (an int, or an object with ``message_offset``);
        the batch's base offset by default. ``transaction_version`` applies to markers only: 2 (TV2) needs
        a marker epoch above the current one, lower versions accept an equal one.
        """
        if batch.is_control:
            record = next(iter(batch), None)
            if record is None:
                # An empty control batch: the cleaner removed the whole transaction.
                return None
            marker = end_transaction_marker(record)
            return self.append_end_txn_marker(
                marker.type,
                marker.coordinator_epoch,
                batch.producer_epoch,
                batch.base_offset,
                record.timestamp,
                transaction_version=transaction_version,
            )
        first_offset = _first_offset(first_offset_metadata, batch.base_offset)
        self.append_data_batch(
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_sequence,
            batch.max_timestamp,
            first_offset,
            batch.last_offset,
            batch.is_transactional,
            first_offset_metadata=first_offset_metadata,
        )
        return None

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
        *,
        first_offset_metadata: Any = None,
    ) -> None:
        """ProducerAppendInfo.appendDataBatch: epoch check, sequence check (client origin), txn state."""
        self._check_producer_epoch(epoch, first_offset)
        if self.origin == AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        txn_first = self.updated_entry.current_txn_first_offset
        if txn_first is not None and not is_transactional:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {self.producer_id} at offset {first_offset}",
                offset=first_offset,
            )
        self.updated_entry.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        if txn_first is None and is_transactional:
            self.updated_entry.current_txn_first_offset = first_offset
            self.started_transactions.append(TxnMetadata(self.producer_id, first_offset, None, first_offset_metadata))

    def append_end_txn_marker(
        self,
        control_type: ControlRecordType | int,
        coordinator_epoch: int,
        producer_epoch: int,
        offset: int,
        timestamp: int,
        *,
        transaction_version: int = 0,
    ) -> CompletedTxn | None:
        """ProducerAppendInfo.appendEndTxnMarker: a CompletedTxn only when a transaction was ongoing."""
        self._check_producer_epoch(producer_epoch, offset, transaction_version)
        self._check_coordinator_epoch(coordinator_epoch, offset)
        txn_first = self.updated_entry.current_txn_first_offset
        completed = None
        if txn_first is not None:
            completed = CompletedTxn(self.producer_id, txn_first, offset, control_type == ControlRecordType.ABORT)
        self.updated_entry.update_after_marker(producer_epoch, coordinator_epoch, timestamp)
        return completed

    def __repr__(self) -> str:
        e = self.updated_entry
        return (
            f"ProducerAppendInfo(producer_id={self.producer_id}, producer_epoch={e.producer_epoch}, "
            f"first_sequence={e.first_seq}, last_sequence={e.last_seq}, "
            f"current_txn_first_offset={e.current_txn_first_offset}, coordinator_epoch={e.coordinator_epoch}, "
            f"last_timestamp={e.last_timestamp}, started_transactions={self.started_transactions})"
        )


# ----- the manager ----------------------------------------------------------------------------------------------


class ProducerStateManager:
    """Producer ids → state for one partition, its ongoing/unreplicated transactions and its snapshot files.

    Methods take the manager's (reentrant) lock. Snapshot files are tracked by offset; only those the
    manager knows of (found at construction, taken, or kept by ``remove_stray_snapshots``) are deleted.
    """

    def __init__(
        self,
        partition_dir: str | os.PathLike[str],
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        clock: Time = SYSTEM_TIME,
        *,
        max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    ) -> None:
        self.partition_dir = Path(partition_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.max_transaction_timeout_ms = max_transaction_timeout_ms
        self.clock = clock
        self._lock = threading.RLock()
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing_txns: dict[int, TxnMetadata] = {}  # by first offset
        self._unreplicated_txns: dict[int, TxnMetadata] = {}  # by first offset
        self._oldest_txn_last_timestamp = -1
        self._last_map_offset = 0
        self._last_snap_offset = 0
        self._snapshots: dict[int, Path] = dict(list_snapshots(self.partition_dir))

    # ----- views -----
    @property
    def map_end_offset(self) -> int:
        """The offset after the last append the state covers."""
        return self._last_map_offset

    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """A copy of the producer id → entry map (the entries themselves are live)."""
        with self._lock:
            return dict(self._producers)

    @property
    def producer_id_count(self) -> int:
        return len(self._producers)

    @property
    def ongoing_txns(self) -> dict[int, TxnMetadata]:
        """Undecided transactions by first offset, in offset order."""
        with self._lock:
            return dict(sorted(self._ongoing_txns.items()))

    @property
    def unreplicated_txns(self) -> dict[int, TxnMetadata]:
        """Decided transactions whose marker is not yet below the high watermark, by first offset."""
        with self._lock:
            return dict(sorted(self._unreplicated_txns.items()))

    def is_empty(self) -> bool:
        with self._lock:
            return not self._producers and not self._unreplicated_txns

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The producer's current entry, None when unknown."""
        with self._lock:
            return self._producers.get(producer_id)

    def find_duplicate_batch(self, batch: Any) -> BatchMetadata | None:
        """The metadata of the earlier append ``batch`` repeats (one of the producer's last 5), or None.

        Kafka checks this for client appends before validating sequences; a hit is answered with the
        original batch's offsets and nothing is written.
        """
        if batch.producer_id == NO_PRODUCER_ID:
            return None
        with self._lock:
            entry = self._producers.get(batch.producer_id)
            return entry.find_duplicate_batch(batch) if entry is not None else None

    # ----- appends -----
    def prepare_update(self, producer_id: int, origin: AppendOrigin | str = AppendOrigin.CLIENT) -> ProducerAppendInfo:
        """Start validating appends of ``producer_id``; 'client' origin checks sequences, 'replication' nothing."""
        with self._lock:
            current = self._producers.get(producer_id) or ProducerStateEntry.empty(producer_id)
            return ProducerAppendInfo(producer_id, current, origin)

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Apply a validated append: merge the entry and register the transactions it started."""
        if append_info.producer_id == NO_PRODUCER_ID:
            raise ValueError(f"Invalid producer id {append_info.producer_id} passed to update")
        with self._lock:
            updated = append_info.to_entry()
            current = self._producers.get(append_info.producer_id)
            if current is not None:
                current.update(updated)
            else:
                self._producers[append_info.producer_id] = updated
            for txn in append_info.started_transactions:
                self._ongoing_txns[txn.first_offset] = txn
            self._update_oldest_txn_timestamp()

    def update_map_end_offset(self, offset: int) -> None:
        """Record that the state now covers the log up to ``offset`` (exclusive).

        One attribute store (atomic under the GIL), called on every append with the log's lock held, so it
        takes no lock of its own.
        """
        self._last_map_offset = offset

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        """Install an entry as read from a snapshot, with its ongoing transaction."""
        with self._lock:
            self._producers[entry.producer_id] = entry
            if entry.current_txn_first_offset is not None:
                self._ongoing_txns[entry.current_txn_first_offset] = TxnMetadata(
                    entry.producer_id, entry.current_txn_first_offset
                )

    def _is_producer_expired(self, current_time_ms: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset is None
            and current_time_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, current_time_ms: int) -> None:
        """Forget producers with no ongoing transaction idle for producer_id_expiration_ms or more."""
        with self._lock:
            for pid in [p for p, e in self._producers.items() if self._is_producer_expired(current_time_ms, e)]:
                del self._producers[pid]

    # ----- transactions -----
    def _update_oldest_txn_timestamp(self) -> None:
        if not self._ongoing_txns:
            self._oldest_txn_last_timestamp = -1
            return
        oldest = self._ongoing_txns[min(self._ongoing_txns)]
        entry = self._producers.get(oldest.producer_id)
        self._oldest_txn_last_timestamp = entry.last_timestamp if entry is not None else -1

    def has_late_transaction(self, current_time_ms: int) -> bool:
        """True when the oldest ongoing transaction has been idle past its timeout plus 5 minutes."""
        last = self._oldest_txn_last_timestamp
        return last > 0 and current_time_ms - last > self.max_transaction_timeout_ms + LATE_TRANSACTION_BUFFER_MS

    def first_undecided_offset(self) -> int | None:
        """The first offset of the earliest transaction with no marker yet."""
        with self._lock:
            return min(self._ongoing_txns) if self._ongoing_txns else None

    def first_unstable_offset(self) -> int | None:
        """The earliest first offset of an undecided transaction or of a decided one whose marker is not yet
        below the high watermark (see ``on_high_watermark_updated``); None when there is none."""
        with self._lock:
            candidates = []
            if self._ongoing_txns:
                candidates.append(min(self._ongoing_txns))
            if self._unreplicated_txns:
                candidates.append(min(self._unreplicated_txns))
            return min(candidates) if candidates else None

    def first_unstable_offset_txn(self) -> TxnMetadata | None:
        """The transaction ``first_unstable_offset`` points at (its first_offset_metadata included)."""
        with self._lock:
            offset = self.first_unstable_offset()
            if offset is None:
                return None
            return self._ongoing_txns.get(offset) or self._unreplicated_txns.get(offset)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO to store with ``completed`` in the transaction index (before ``complete_txn`` is called):
        the first offset of the earliest ongoing transaction of another producer, else the marker offset + 1."""
        with self._lock:
            for first in sorted(self._ongoing_txns):
                if self._ongoing_txns[first].producer_id != completed.producer_id:
                    return first
            return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Mark a transaction decided; it stays unstable until the high watermark passes its marker."""
        with self._lock:
            txn = self._ongoing_txns.pop(completed.first_offset, None)
            if txn is None:
                raise ValueError(f"Attempted to complete transaction {completed} which was not started")
            txn.last_offset = completed.last_offset
            self._unreplicated_txns[completed.first_offset] = txn
            self._update_oldest_txn_timestamp()

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Release decided transactions whose marker lies below ``high_watermark``."""
        if not self._unreplicated_txns:  # the common case, checked without the lock
            return
        with self._lock:
            self._remove_unreplicated_transactions(high_watermark)

    def _remove_unreplicated_transactions(self, offset: int) -> None:
        for first, txn in list(self._unreplicated_txns.items()):
            if txn.last_offset is not None and txn.last_offset < offset:
                del self._unreplicated_txns[first]

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Drop decided transactions below the new log start and move the map end offset up to it."""
        with self._lock:
            self._remove_unreplicated_transactions(log_start_offset)
            if self._last_map_offset < log_start_offset:
                self._last_map_offset = log_start_offset
            latest = self._latest_snapshot_offset()
            self._last_snap_offset = latest if latest is not None else log_start_offset

    # ----- snapshots -----
    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write a snapshot at ``map_end_offset`` unless it has not advanced since the last one."""
        with self._lock:
            if self._last_map_offset <= self._last_snap_offset:
                return None
            path = snapshot_path(self.partition_dir, self._last_map_offset)
            write_snapshot(path, list(self._producers.values()), sync)
            log.info(
                "Wrote producer snapshot at offset %d with %d producer ids", self._last_map_offset, len(self._producers)
            )
            self._snapshots[self._last_map_offset] = path
            self._last_snap_offset = self._last_map_offset
            return path

    def _latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots) if self._snapshots else None

    def latest_snapshot_offset(self) -> int | None:
        with self._lock:
            return self._latest_snapshot_offset()

    def oldest_snapshot_offset(self) -> int | None:
        with self._lock:
            return min(self._snapshots) if self._snapshots else None

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshots the manager tracks, ascending."""
        with self._lock:
            return sorted(self._snapshots)

    def fetch_snapshot(self, offset: int) -> Path | None:
        """The snapshot file at exactly ``offset``, if tracked."""
        with self._lock:
            return self._snapshots.get(offset)

    def delete_snapshot(self, offset: int) -> None:
        """Forget and delete the snapshot at ``offset`` (removeAndDeleteSnapshot)."""
        with self._lock:
            path = self._snapshots.pop(offset, None)
            if path is not None:
                path.unlink(missing_ok=True)

    def delete_snapshots_below(self, offset: int) -> None:
        """Delete every snapshot at an offset < ``offset`` (deleteSnapshotsBefore)."""
        with self._lock:
            for snap in [o for o in self._snapshots if o < offset]:
                self.delete_snapshot(snap)

    def rename_snapshot_to_deleted(self, offset: int) -> Path | None:
        """Forget the snapshot at ``offset`` and rename it ``*.snapshot.deleted`` for a delayed delete.

        None when untracked or already gone from disk (removeAndMarkSnapshotForDeletion).
        """
        with self._lock:
            path = self._snapshots.pop(offset, None)
            if path is None:
                return None
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                path.rename(target)
            except FileNotFoundError:
                log.info("Failed to rename producer state snapshot %s: it was already deleted", path)
                return None
            return target

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Rescan the directory; delete snapshots not at a segment base offset, except the newest such stray
        one when it lies at or above the largest segment base offset (the clean-shutdown snapshot)."""
        with self._lock:
            bases = set(segment_base_offsets)
            max_base = max(bases) if bases else None
            snapshots = dict(list_snapshots(self.partition_dir))
            latest_stray: int | None = None
            for offset in sorted(snapshots):
                if offset in bases:
                    continue
                if latest_stray is not None:
                    snapshots.pop(latest_stray).unlink(missing_ok=True)
                latest_stray = offset
            if latest_stray is not None and max_base is not None and latest_stray < max_base:
                snapshots.pop(latest_stray).unlink(missing_ok=True)
            self._snapshots = snapshots

    def load_from_snapshot(self, log_start_offset: int, current_time_ms: int) -> None:
        """Load the newest tracked snapshot, dropping expired producers; a corrupt one is deleted and the
        next older tried. With none left the state starts at ``log_start_offset``."""
        with self._lock:
            while self._snapshots:
                offset = self._latest_snapshot_offset()
                assert offset is not None
                path = self._snapshots[offset]
                try:
                    log.info("Loading producer state from snapshot file '%s'", path)
                    entries = read_snapshot(path)
                except CorruptSnapshotError as e:
                    log.warning("Failed to load producer snapshot from '%s': %s", path, e)
                    self.delete_snapshot(offset)
                    continue
                for entry in entries:
                    if not self._is_producer_expired(current_time_ms, entry):
                        self.load_producer_entry(entry)
                self._last_snap_offset = offset
                self._last_map_offset = offset
                self._update_oldest_txn_timestamp()
                return
            self._last_snap_offset = log_start_offset
            self._last_map_offset = log_start_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, current_time_ms: int) -> None:
        """Delete snapshots above ``log_end_offset`` or at/below ``log_start_offset``; unless the state already
        ends at ``log_end_offset``, clear it and reload the newest remaining snapshot."""
        with self._lock:
            for offset in list(self._snapshots):
                if offset > log_end_offset or offset <= log_start_offset:
                    self.delete_snapshot(offset)
            if log_end_offset != self._last_map_offset:
                self._producers.clear()
                self._ongoing_txns.clear()
                self._update_oldest_txn_timestamp()
                self._unreplicated_txns.clear()
                self.load_from_snapshot(log_start_offset, current_time_ms)
            else:
                self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and transaction, delete every snapshot, and start the map at ``offset``."""
        with self._lock:
            self._producers.clear()
            self._ongoing_txns.clear()
            self._unreplicated_txns.clear()
            for snap in list(self._snapshots):
                self.delete_snapshot(snap)
            self._last_snap_offset = 0
            self._last_map_offset = offset
            self._update_oldest_txn_timestamp()

    def update_parent_dir(self, parent_dir: str | os.PathLike[str]) -> None:
        """The partition directory was renamed: point the manager and its snapshot paths at the new one."""
        with self._lock:
            self.partition_dir = Path(parent_dir)
            self._snapshots = {o: self.partition_dir / p.name for o, p in self._snapshots.items()}

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager(dir={self.partition_dir}, producers={len(self._producers)}, "
            f"map_end_offset={self._last_map_offset}, snapshots={sorted(self._snapshots)})"
        )
