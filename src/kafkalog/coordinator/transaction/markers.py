"""Kafka's TransactionMarkerChannelManager, in process: the COMMIT/ABORT markers of a transaction written to
each of its partitions, then its Complete state, with retries; on a cluster the markers go to a marker channel
(``broker/cluster/txn.py``) and come back through ``marker_written``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import UnknownTopicOrPartitionError
from ...manager import TopicPartition
from ...record.builder import control_batch
from ...record.types import ControlRecordType
from ...storage.producer_state import AppendOrigin
from .errors import Errors
from .metadata import TopicPartitionKey, TransactionMetadata, TxnTransit
from .state_manager import TRANSACTION_STATE_TOPIC_NAME, MarkerListener, S, TransactionStateManager, log

MARKER_RETRY_BACKOFF_MS = 100  # Kafka resends markers after the channel's retry backoff


@dataclass(frozen=True)
class MarkerSend:
    """The markers of one transaction for a marker channel (Kafka's TxnIdAndMarkerEntry): written once the state
    partition's high watermark reached ``state_end_offset`` (the Prepare record is replicated), each answer
    reported with ``TransactionCoordinator.marker_written``."""

    transactional_id: str
    state_partition: int
    state_end_offset: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[TopicPartitionKey]


def append_marker(
    replica_manager,
    tp: TopicPartition,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    now: int,
):
    """Write one COMMIT/ABORT marker to ``tp`` through the replica manager as the coordinator does (origin
    coordinator, acks=all); the partition's AppendResult. Used for the coordinator's own markers and for
    WriteTxnMarkers requests."""
    control = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    batch = control_batch(control, producer_id, producer_epoch, coordinator_epoch, now)
    return replica_manager.append_records({tp: batch}, -1, AppendOrigin.COORDINATOR)[tp]


class TransactionMarkerManager(TransactionStateManager):
    """The markers of the transactions being completed. Invariant: an id is in ``_unsent`` (its Complete transition,
    the partitions still without a marker, the coordinator epoch they are written at) from its Prepare write until
    its Complete state is written."""

    def add_marker_listener(self, listener: MarkerListener) -> None:
        """Call ``listener(tp, producer_id, committed)`` after each COMMIT/ABORT marker this coordinator writes."""
        self._marker_listeners.append(listener)

    def _send_markers(self, metadata: TransactionMetadata, complete: TxnTransit) -> None:
        """Write the transaction's markers, then its Complete state (Kafka's addTxnMarkersToSend and what the
        marker channel does with the answers). ``complete`` is already the pending transition."""
        commit = complete.state == S.COMPLETE_COMMIT
        txn_id = metadata.transactional_id
        remaining = set(metadata.topic_partitions)
        coordinator_epoch = self.coordinator_epoch(txn_id)
        self._unsent[txn_id] = (complete, remaining, coordinator_epoch)
        if self.marker_channel is None or not remaining:
            self._retry_markers(txn_id, commit)
            return
        state_partition = self.partition_for(txn_id)
        self.marker_channel.send(
            MarkerSend(
                txn_id,
                state_partition,
                self._state_log_end(state_partition),
                metadata.producer_id,
                metadata.producer_epoch,
                coordinator_epoch,
                commit,
                frozenset(remaining),
            )
        )

    def _state_log_end(self, partition: int) -> int:
        """The log end offset of a state partition: right after a Prepare write, the offset its replicas must reach
        before the markers go out (Kafka sends them from the append's callback, once the ISR has it)."""
        try:
            return int(self.replica_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME, partition).log_end_offset)
        except UnknownTopicOrPartitionError:
            return 0

    def marker_written(self, txn_id: str, coordinator_epoch: int, tp: TopicPartitionKey) -> None:
        """The marker channel wrote (or gave up, for a partition that is gone) the marker of ``txn_id`` to ``tp``;
        after the last one the transaction's Complete state is written."""
        entry = self._unsent.get(txn_id)
        if entry is None or entry[2] != coordinator_epoch:
            return  # a resigned or superseded coordinator's answer
        complete, remaining, _ = entry
        remaining.discard(tp)
        if not remaining:
            self._retry_markers(txn_id, complete.state == S.COMPLETE_COMMIT)

    def _retry_markers(self, txn_id: str, commit: bool) -> None:
        entry = self._unsent.get(txn_id)
        metadata = self.transactions.get(txn_id)
        if entry is None or metadata is None:
            return
        complete, remaining, coordinator_epoch = entry
        control = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        for topic, partition in sorted(remaining):
            tp = TopicPartition(topic, partition)
            error = append_marker(
                self.replica_manager,
                tp,
                metadata.producer_id,
                metadata.producer_epoch,
                coordinator_epoch,
                commit,
                self.now(),
            ).error
            if error is None:
                remaining.discard((topic, partition))
                self._tell_listeners(tp, metadata.producer_id, commit)
            elif isinstance(error, UnknownTopicOrPartitionError):
                log.info("Not writing the %s marker of %s to %s: the partition is gone", control.name, txn_id, tp)
                remaining.discard((topic, partition))
            elif type(error).__name__ in ("InvalidProducerEpochError", "TransactionCoordinatorFencedError"):
                # The partition has seen a newer producer epoch or coordinator: this marker can never be written
                # and nothing waits on it there (Kafka drops the marker too).
                log.warning("Dropping the %s marker of %s for %s: %s", control.name, txn_id, tp, error)
                remaining.discard((topic, partition))
            else:
                log.warning(
                    "Failed to write the %s marker of %s to %s, will retry: %s", control.name, txn_id, tp, error
                )
        if remaining:
            self.scheduler.schedule_once(
                f"txn-markers-{txn_id}", lambda: self._retry_if_active(txn_id, commit), MARKER_RETRY_BACKOFF_MS
            )
            return
        if self._append_transit(metadata, complete) is Errors.NONE:
            del self._unsent[txn_id]
            log.debug("Completed %s of %s", complete.state.state_name, txn_id)
            return
        # The Complete state could not be written: prepare it again and retry (Kafka's tryAppendToLog retries).
        self._unsent[txn_id] = (metadata.prepare_complete(self.now()), remaining, coordinator_epoch)
        self.scheduler.schedule_once(
            f"txn-complete-{txn_id}", lambda: self._retry_if_active(txn_id, commit), MARKER_RETRY_BACKOFF_MS
        )

    def _retry_if_active(self, txn_id: str, commit: bool) -> None:
        """A scheduled retry: nothing once shut down (the next start loads the Prepare state and completes it)."""
        if self._active:
            self._retry_markers(txn_id, commit)

    def _tell_listeners(self, tp: TopicPartition, producer_id: int, commit: bool) -> None:
        for listener in self._marker_listeners:
            try:
                listener(tp, producer_id, commit)
            except Exception:
                log.exception("Transaction marker listener failed for %s", tp)

    def _complete_loaded(self, partition: int | None) -> None:
        """Send the markers of the loaded transactions (of ``partition``, or all) in PrepareCommit/PrepareAbort."""
        for metadata in list(self.transactions.values()):
            if partition is not None and self.partition_for(metadata.transactional_id) != partition:
                continue
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info(
                    "Completing %s of transactional id %s (producer %d, epoch %d) after loading it",
                    metadata.state.state_name,
                    metadata.transactional_id,
                    metadata.producer_id,
                    metadata.producer_epoch,
                )
                self._send_markers(metadata, metadata.prepare_complete(self.now()))
