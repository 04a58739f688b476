"""One producer's state, as Kafka keeps it per producer id: ProducerStateEntry and the values it is made of.

Kafka classes mirrored here (``storage/.../internals/log``): AppendOrigin, BatchMetadata, ProducerStateEntry,
CompletedTxn and TxnMetadata. Duplicate detection follows ProducerStateEntry.findDuplicateBatch (the last 5
batches of a producer, same epoch, exact sequence range). The producer state manager
(``storage/producer_state.py``) keeps one entry per producer id; ``storage/producer_append.py`` validates an
append against one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..layout import INT32_MAX
from ..record.types import NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP

NUM_BATCHES_TO_RETAIN = 5
"""ProducerStateEntry.NUM_BATCHES_TO_RETAIN: batches kept per producer for duplicate detection."""


class AppendOrigin(StrEnum):
    """Kafka's AppendOrigin: how much validation an append gets."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"
    RAFT_LEADER = "raft_leader"


def append_origin(origin: AppendOrigin | str) -> AppendOrigin:
    return origin if isinstance(origin, AppendOrigin) else AppendOrigin(str(origin).lower())


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence: the inverse of incrementSequence's wrap past Int32.MAX."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
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


def metadata_deque(items: Iterable[BatchMetadata] = ()) -> deque[BatchMetadata]:
    return deque(items, maxlen=NUM_BATCHES_TO_RETAIN)


@dataclass(slots=True)
class ProducerStateEntry:
    """The state of one producer id: epoch, coordinator epoch, last timestamp, ongoing txn, last 5 batches."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batch_metadata: deque[BatchMetadata] = field(default_factory=metadata_deque)

    def __post_init__(self) -> None:
        if not (isinstance(self.batch_metadata, deque) and self.batch_metadata.maxlen == NUM_BATCHES_TO_RETAIN):
            self.batch_metadata = metadata_deque(self.batch_metadata)

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
            metadata_deque([batch_metadata] if batch_metadata is not None else []),
        )

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            metadata_deque(self.batch_metadata),
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
