"""Kafka's TransactionStateManager for one node: the transactional ids this broker coordinates, their state
partitions of ``__transaction_state``, each transition written there before it is applied, and the replay of those
partitions (at startup on one node, on election in a cluster).

The transaction coordinator (``coordinator.py``) builds on it; the markers (``markers.py``) complete what it
writes. Threading as the coordinator's: one thread, no locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...errors import UnknownTopicOrPartitionError
from ...manager import TopicPartition
from ...partition import LOG_END
from ...record.builder import RecordBatchBuilder
from ...storage.producer_state import AppendOrigin
from ..internal_topic import TRANSACTION_STATE, InternalTopicMixin
from . import records as rec
from .config import TransactionCoordinatorConfig
from .errors import Errors, append_error
from .metadata import TopicPartitionKey, TransactionMetadata, TxnTransit
from .state import TransactionState

log = logging.getLogger("kafka.coordinator.transaction.TransactionCoordinator")

TRANSACTION_STATE_TOPIC_NAME = TRANSACTION_STATE.name
S = TransactionState
MarkerListener = Callable[[TopicPartition, int, bool], None]


class TransactionStateManager(InternalTopicMixin):
    """The ids of the state partitions this broker coordinates, and their log.

    Invariants: every id in ``transactions`` maps to a partition of the state topic and its state is the last one
    written there; a Dead id is not in ``transactions``; a transaction whose markers are not all written has
    ``pending_state`` CompleteCommit/CompleteAbort and an entry in ``_unsent``.
    """

    INTERNAL_TOPIC = TRANSACTION_STATE
    LOG = log

    config: TransactionCoordinatorConfig

    def __init__(self, log_manager, config: TransactionCoordinatorConfig, clock, scheduler) -> None:
        super().__init__(log_manager, config, clock, scheduler)
        self.transactions: dict[str, TransactionMetadata] = {}
        self._unsent: dict[str, tuple[TxnTransit, set[TopicPartitionKey], int]] = {}
        self._marker_listeners: list[MarkerListener] = []
        self.coordinator_epochs: dict[int, int] = {}  # on a cluster: the leader epoch each partition was won at
        # On a cluster, markers go over the wire (Kafka's TransactionMarkerChannelManager): an object with
        # ``send(MarkerSend)`` and ``drop_partition(state_partition)``; None writes them in process (one node).
        self.marker_channel: Any = None

    # ================================================================ the state topic
    def _internal_topic_settings(self) -> tuple[int, int, dict[str, str]]:
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(self.config.transaction_state_log_min_isr),
            "segment.bytes": str(self.config.transaction_state_log_segment_bytes),
            "unclean.leader.election.enable": "false",
        }
        config = self.config
        return config.transaction_state_log_num_partitions, config.transaction_state_log_replication_factor, configs

    def state_topic_partitions(self) -> list[int] | None:
        """The partitions of __transaction_state present here, None when the topic does not exist."""
        return self.internal_topic_partitions()

    def ensure_state_topic(self) -> Errors:
        """Create __transaction_state on first use; COORDINATOR_NOT_AVAILABLE if it cannot be."""
        return Errors.NONE if self.create_internal_topic() else Errors.COORDINATOR_NOT_AVAILABLE

    def status(self, transactional_id: str) -> Errors:
        """Kafka's getTransactionState errors: NOT_COORDINATOR when another broker leads the id's state partition,
        COORDINATOR_LOAD_IN_PROGRESS while this one loads it (the client finds the coordinator again / retries)."""
        return self.coordination_error(transactional_id)

    def _drop_partition(self, partition: int) -> None:
        for txn_id in [t for t in self.transactions if self.partition_for(t) == partition]:
            self.transactions.pop(txn_id, None)
            self._unsent.pop(txn_id, None)
        if self.marker_channel is not None:
            self.marker_channel.drop_partition(partition)

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The coordinator epoch of an id: the leader epoch of its state partition (0 when it has none yet); on a
        cluster, the epoch at which this broker became its leader (Kafka's onElection epoch)."""
        if self.owned is not None:
            return self.coordinator_epochs.get(self.partition_for(transactional_id), 0)
        try:
            partition = self.replica_manager.get_partition(
                TRANSACTION_STATE_TOPIC_NAME, self.partition_for(transactional_id)
            )
        except UnknownTopicOrPartitionError:
            return 0
        return max(int(partition.leader_epoch), 0)

    def _append_transit(self, metadata: TransactionMetadata, transit: TxnTransit) -> Errors:
        """Write ``transit`` to the id's state partition, then apply it (Kafka's appendTransactionToLog)."""
        txn_id = metadata.transactional_id
        value = (
            None
            if transit.state == S.DEAD
            else rec.encode_value(transit.to_value(), self.config.transaction_log_value_version)
        )
        builder = RecordBatchBuilder(compression="none", clock=self.clock)
        builder.append(rec.encode_key(txn_id), value, self.now())
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, self.partition_for(txn_id))
        result = self.replica_manager.append_records({tp: builder.build()}, -1, AppendOrigin.COORDINATOR)[tp]
        if result.error is not None:
            metadata.abort_transition()
            error = append_error(result.error)
            log.warning("Appending %s's new metadata %s to %s failed: %s", txn_id, transit, tp, result.error)
            return error
        if transit.state == S.DEAD:
            self.transactions.pop(txn_id, None)
        else:
            metadata.complete_transition(transit)
        return Errors.NONE

    # ================================================================ loading
    def _load_partition(self, partition: int) -> None:
        replica = self.replica_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME, partition)
        loaded: dict[str, TransactionMetadata | None] = {}
        skipped = 0
        # To the log end, as Kafka loads: a new leader keeps every record it has (its followers truncate to it).
        for record in replica.records(None, LOG_END):
            if record.key is None:
                skipped += 1
                continue
            try:
                txn_id = rec.decode_key(record.key)
                if record.value is None:
                    loaded[txn_id] = None
                    continue
                _, value = rec.decode_value(record.value)
                loaded[txn_id] = TransactionMetadata.from_value(txn_id, value)
            except ValueError as e:
                log.warning(
                    "Skipping unreadable record at offset %d of %s-%d: %s",
                    record.offset,
                    TRANSACTION_STATE_TOPIC_NAME,
                    partition,
                    e,
                )
                skipped += 1
        for txn_id, metadata in loaded.items():
            if metadata is None:
                self.transactions.pop(txn_id, None)
            else:
                self.transactions[txn_id] = metadata
        log.info(
            "Finished loading %d transaction metadata from %s-%d (%d records skipped)",
            sum(1 for m in loaded.values() if m is not None),
            TRANSACTION_STATE_TOPIC_NAME,
            partition,
            skipped,
        )
