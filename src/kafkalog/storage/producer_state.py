"""Producer state of one partition (Kafka's ProducerStateManager): producer ids, transactions, snapshot files.

The manager keeps one ProducerStateEntry per producer id (``storage/producer_entry.py``), applies what a
ProducerAppendInfo validated (``storage/producer_append.py``), tracks the ongoing and unreplicated
transactions that bound the last stable offset, and takes, loads and deletes the partition's snapshot files
(their bytes: ``storage/producer_snapshot.py``). The names of those modules are importable from here too.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..clock import SYSTEM_TIME, Time
from ..errors import CorruptSnapshotError, TransactionCoordinatorFencedError
from ..layout import DELETED_SUFFIX
from ..record.types import NO_PRODUCER_ID
from .producer_append import ProducerAppendInfo
from .producer_entry import (
    NUM_BATCHES_TO_RETAIN,
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerStateEntry,
    TxnMetadata,
    decrement_sequence,
)
from .producer_snapshot import (
    PRODUCER_SNAPSHOT_VERSION,
    SNAPSHOT_ENTRY_SIZE,
    SNAPSHOT_HEADER_SIZE,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    sync_snapshot_if_exists,
    write_snapshot,
)

__all__ = [
    "DEFAULT_MAX_TRANSACTION_TIMEOUT_MS",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "LATE_TRANSACTION_BUFFER_MS",
    "NUM_BATCHES_TO_RETAIN",
    "PRODUCER_SNAPSHOT_VERSION",
    "SNAPSHOT_ENTRY_SIZE",
    "SNAPSHOT_HEADER_SIZE",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TransactionCoordinatorFencedError",
    "TxnMetadata",
    "decode_snapshot",
    "decrement_sequence",
    "encode_snapshot",
    "list_snapshots",
    "read_snapshot",
    "snapshot_path",
    "sync_snapshot_if_exists",
    "write_snapshot",
]

log = logging.getLogger(__name__)

LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000


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
                os.rename(path, target)  # not Path.rename: it builds one more Path, unused
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
