"""Validating the batches one producer appends in one request (Kafka's ProducerAppendInfo).

Sequence and epoch checks follow ProducerAppendInfo: a new epoch starts at sequence 0, sequences follow each
other (wrapping past Int32.MAX), a marker's coordinator epoch never goes back. Appends from replication are
not refused for an old epoch: the leader accepted them, so they are logged instead.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaLogError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from ..record.types import NO_PRODUCER_EPOCH, NO_SEQUENCE, ControlRecordType, end_transaction_marker
from .producer_entry import AppendOrigin, CompletedTxn, ProducerStateEntry, TxnMetadata, append_origin, in_sequence

log = logging.getLogger(__name__)


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
        self.origin = append_origin(origin)
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
        self._refuse(InvalidProducerEpochError, message, offset, logging.WARNING)

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
        if not (current.producer_epoch == NO_PRODUCER_EPOCH or in_sequence(current_last_seq, first_seq)):
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
            self._refuse(TransactionCoordinatorFencedError, message, offset, logging.INFO)

    def _refuse(self, error: type[KafkaLogError], message: str, offset: int, replication_log_level: int) -> None:
        """Raise ``error`` for this append, unless it comes from replication: the leader has already accepted
        what a follower copies, so a follower logs the problem (at Kafka's level for it) and goes on."""
        if self.origin == AppendOrigin.REPLICATION:
            log.log(replication_log_level, message)
        else:
            raise error(message, offset=offset)

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
