"""Kafka's transaction coordinator for one node, over the compacted ``__transaction_state`` topic.

What it does, as Kafka's TransactionCoordinator, TransactionStateManager and TransactionMarkerChannelManager:

* A transactional id lives on the ``__transaction_state`` partition ``abs(transactionalId.hashCode) % partitions``
  (Java's String.hashCode, Kafka's Utils.abs). The topic is created compacted on first use with
  ``transaction.state.log.num.partitions`` partitions (default 50).
* InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn drive the state machine (``state.py``) with
  Kafka's checks and error codes: epoch bumps on every InitProducerId, PRODUCER_FENCED for a zombie's epoch,
  CONCURRENT_TRANSACTIONS while a transaction completes, INVALID_TXN_STATE for an EndTxn that has no transaction.
  A second InitProducerId while a transaction is Ongoing fences the epoch and aborts that transaction first.
* Every transition is written to the topic before it is applied (``metadata.py``). Ending a transaction writes
  PrepareCommit/PrepareAbort, then a COMMIT/ABORT marker to every partition of the transaction through the
  replica manager (origin coordinator, coordinator epoch = the state partition's leader epoch), then
  CompleteCommit/CompleteAbort. Markers that fail for a retriable reason are retried on the scheduler; the
  transaction stays pending (CONCURRENT_TRANSACTIONS) until they are all written.
* ``load`` replays the topic at startup: a transaction found in PrepareCommit/PrepareAbort gets its markers
  written again and is completed; an Ongoing one is left for the timeout check, as Kafka does.
* Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` the Ongoing transactions older than
  their timeout are aborted with a fenced epoch; every
  ``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle for ``transactional.id.expiration.ms``
  are removed (a tombstone).

Threading: every method and timer runs on one thread (the broker's event loop, or the test's); nothing locks.
Time is the ``clock``'s, timers are the ``scheduler``'s (``schedule_once(name, fn, delay_ms)``), so unit tests run
under MockTime. Markers reach listeners (``add_marker_listener``): the broker tells the group coordinator, which
makes transactional offset commits visible on a COMMIT marker in ``__consumer_offsets``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ...errors import UnknownTopicOrPartitionError
from ...manager import TopicPartition
from ...partition import LOG_END
from ...record.builder import RecordBatchBuilder, control_batch
from ...record.types import ControlRecordType
from ...storage.producer_state import AppendOrigin
from ..internal_topic import Coordination, InternalTopicMixin
from . import records as rec
from .errors import Errors, append_error
from .metadata import IllegalTransitionError, TopicPartitionKey, TransactionMetadata, TxnTransit
from .state import TransactionState

log = logging.getLogger("kafka.coordinator.transaction.TransactionCoordinator")

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"

_COORDINATION_ERRORS = {
    Coordination.HERE: Errors.NONE,
    Coordination.LOADING: Errors.COORDINATOR_LOAD_IN_PROGRESS,
    Coordination.ELSEWHERE: Errors.NOT_COORDINATOR,
}
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MARKER_RETRY_BACKOFF_MS = 100  # Kafka resends markers after the channel's retry backoff
S = TransactionState


def _int(props, key: str, default: int, minimum: int | None = None) -> int:
    from ...errors import InvalidConfigurationError

    raw = props.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigurationError(f"Invalid value {raw} for configuration {key}: Not a number") from None
    if minimum is not None and value < minimum:
        raise InvalidConfigurationError(
            f"Invalid value {value} for configuration {key}: Value must be at least {minimum}"
        )
    return value


def _bool(props, key: str, default: bool) -> bool:
    from ...errors import InvalidConfigurationError

    raw = props.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigurationError(
            f"Invalid value {raw} for configuration {key}: Expected value to be either true or false"
        )
    return text == "true"


@dataclass(frozen=True)
class TransactionCoordinatorConfig:
    """The transaction coordinator's broker configs, with Kafka's names and defaults.

    transaction.state.log.replication.factor and transaction.state.log.min.isr default to 1 here (Kafka's are 3
    and 2, which its own single-broker sample config lowers to 1): this broker has one node, so larger values
    could never be met and no transaction could ever start.
    """

    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_max_timeout_ms: int = 900_000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 1
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    transaction_state_log_min_isr: int = 1
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    remove_expired_transactional_id_cleanup_interval_ms: int = 3_600_000
    transaction_log_value_version: int = rec.HIGHEST_VALUE_VERSION
    partition_verification_enable: bool = True

    @classmethod
    def from_properties(cls, props) -> TransactionCoordinatorConfig:
        return cls(
            transactional_id_expiration_ms=_int(props, "transactional.id.expiration.ms", 7 * 24 * 3600 * 1000, 1),
            transaction_max_timeout_ms=_int(props, "transaction.max.timeout.ms", 900_000, 1),
            transaction_state_log_num_partitions=_int(props, "transaction.state.log.num.partitions", 50, 1),
            transaction_state_log_replication_factor=_int(props, "transaction.state.log.replication.factor", 1, 1),
            transaction_state_log_segment_bytes=_int(
                props, "transaction.state.log.segment.bytes", 100 * 1024 * 1024, 1
            ),
            transaction_state_log_min_isr=_int(props, "transaction.state.log.min.isr", 1, 1),
            abort_timed_out_transaction_cleanup_interval_ms=_int(
                props, "transaction.abort.timed.out.transaction.cleanup.interval.ms", 10_000, 1
            ),
            remove_expired_transactional_id_cleanup_interval_ms=_int(
                props, "transaction.remove.expired.transaction.cleanup.interval.ms", 3_600_000, 1
            ),
            partition_verification_enable=_bool(props, "transaction.partition.verification.enable", True),
        )


@dataclass(frozen=True)
class InitProducerIdResult:
    error: Errors
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class TransactionDescription:
    """What DescribeTransactions reports of one id."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: list[TopicPartitionKey]


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


MarkerListener = Callable[[TopicPartition, int, bool], None]


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


class TransactionCoordinator(InternalTopicMixin):
    """The transaction coordinator of one broker (it leads every __transaction_state partition).

    Invariants: every id in ``transactions`` maps to a partition of the state topic and its state is the last one
    written there; a Dead id is not in ``transactions``; a transaction whose markers are not all written has
    ``pending_state`` CompleteCommit/CompleteAbort and an entry in ``_unsent``.
    """

    TOPIC = TRANSACTION_STATE_TOPIC_NAME
    TOPIC_DESCRIPTION = "transactions state topic"
    REPLICATION_FACTOR_CONFIG = "transaction.state.log.replication.factor"
    LOG = log

    def __init__(
        self,
        log_manager,
        config: TransactionCoordinatorConfig,
        clock,
        scheduler,
        generate_producer_id: Callable[[], int],
    ) -> None:
        self.log_manager = log_manager
        self.replica_manager = log_manager.replica_manager
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self.generate_producer_id = generate_producer_id
        self.transactions: dict[str, TransactionMetadata] = {}
        self._unsent: dict[str, tuple[TxnTransit, set[TopicPartitionKey], int]] = {}
        self._marker_listeners: list[MarkerListener] = []
        self._tasks: dict[str, Any] = {}  # name -> the scheduler's handle (has cancel())
        self._active = False
        # The state partitions this broker coordinates: None = all of them (a single node); on a ZooKeeper cluster,
        # those it leads (on_election / on_resignation), minus those still loading.
        self.owned: set[int] | None = None
        self.loading: set[int] = set()
        self.coordinator_epochs: dict[int, int] = {}  # on a cluster: the leader epoch each partition was won at
        # On a cluster, the state topic's partition count as ZooKeeper has it (this broker may host few of them).
        self.cluster_partition_count: int | None = None
        # On a cluster, markers go over the wire (Kafka's TransactionMarkerChannelManager): an object with
        # ``send(MarkerSend)`` and ``drop_partition(state_partition)``; None writes them in process (one node).
        self.marker_channel: Any = None

    # ================================================================ lifecycle
    def startup(self, enable_transactional_id_expiration: bool = True, *, clustered: bool = False) -> None:
        """Load every state partition (completing the transactions caught mid-commit), then start the checks. On a
        cluster nothing is loaded here: each partition is loaded when this broker becomes its leader
        (``on_election``)."""
        if clustered:
            self.owned = set()
        else:
            self.load()
        self._active = True
        self._every(
            "transaction-abort",
            self.abort_timed_out_transactions,
            self.config.abort_timed_out_transaction_cleanup_interval_ms,
        )
        if enable_transactional_id_expiration:
            self._every(
                "transactionalId-expiration",
                self.remove_expired_transactional_ids,
                self.config.remove_expired_transactional_id_cleanup_interval_ms,
            )

    def shutdown(self) -> None:
        self._active = False
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    def _every(self, name: str, fn: Callable[[], object], interval_ms: int) -> None:
        """Run ``fn`` every ``interval_ms`` while active (the latest timer of each name is kept, to cancel it)."""

        def run() -> None:
            if not self._active:
                return
            try:
                fn()
            finally:
                if self._active:
                    self._tasks[name] = self.scheduler.schedule_once(name, run, interval_ms)

        self._tasks[name] = self.scheduler.schedule_once(name, run, interval_ms)

    def now(self) -> int:
        return int(self.clock.milliseconds())

    def add_marker_listener(self, listener: MarkerListener) -> None:
        """Call ``listener(tp, producer_id, committed)`` after each COMMIT/ABORT marker this coordinator writes."""
        self._marker_listeners.append(listener)

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

    # ================================================================ partitions coordinated here (a cluster)
    def status(self, transactional_id: str) -> Errors:
        """Kafka's getTransactionState errors: NOT_COORDINATOR when another broker leads the id's state partition,
        COORDINATOR_LOAD_IN_PROGRESS while this one loads it (the client finds the coordinator again / retries)."""
        return _COORDINATION_ERRORS[self.coordination(transactional_id)]

    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        """Kafka's TransactionCoordinator.onElection: load the ids of state ``partition`` (this broker leads it at
        leader epoch ``coordinator_epoch``), coordinate them from now on, and complete the transactions found in
        PrepareCommit/PrepareAbort by sending their markers again."""
        if self.owned is None:
            return
        log.info("Elected as the txn coordinator for partition %d at epoch %d", partition, coordinator_epoch)
        self._drop_partition(partition)
        self.coordinator_epochs[partition] = coordinator_epoch
        try:
            self._load_partition(partition)
        finally:
            self.loading.discard(partition)
        self.owned.add(partition)
        self._complete_loaded(partition)

    def on_resignation(self, partition: int) -> None:
        """Kafka's onResignation: another broker leads state ``partition`` now; its ids leave this coordinator
        (NOT_COORDINATOR from now on) and their unsent markers are dropped (the new coordinator sends them)."""
        if self.owned is None:
            return
        self.loading.discard(partition)
        if partition in self.owned:
            self.owned.discard(partition)
            self._drop_partition(partition)
            log.info("Resigned as the txn coordinator for partition %d", partition)

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
    def load(self) -> None:
        """Replay every state partition (the last record of an id wins, a tombstone removes it), then complete
        the transactions found in PrepareCommit/PrepareAbort by writing their markers again."""
        self.transactions.clear()
        self._unsent.clear()
        for partition in sorted(self.state_topic_partitions() or []):
            self._load_partition(partition)
        self._complete_loaded(None)

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

    # ================================================================ markers
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
            batch = control_batch(control, metadata.producer_id, metadata.producer_epoch, coordinator_epoch, self.now())
            result = self.replica_manager.append_records({tp: batch}, -1, AppendOrigin.COORDINATOR)[tp]
            error = result.error
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

    # ================================================================ InitProducerId
    def validate_transaction_timeout_ms(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.transaction_max_timeout_ms

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> InitProducerIdResult:
        """InitProducerId for a transactional id (``expected``: the producer's (id, epoch), InitProducerId v3+)."""
        if not transactional_id:
            return InitProducerIdResult(Errors.INVALID_REQUEST)
        if not self.validate_transaction_timeout_ms(timeout_ms):
            return InitProducerIdResult(Errors.INVALID_TRANSACTION_TIMEOUT)
        # One node creates the state topic on first use; a cluster's exists (FindCoordinator created it) wherever
        # this broker leads the id's partition.
        error = self.ensure_state_topic() if self.owned is None else self.status(transactional_id)
        if error is not Errors.NONE:
            return InitProducerIdResult(error)
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            metadata = TransactionMetadata(
                transactional_id,
                self.generate_producer_id(),
                NO_PRODUCER_ID,
                NO_PRODUCER_EPOCH,
                NO_PRODUCER_EPOCH,
                timeout_ms,
                S.EMPTY,
                txn_last_update_timestamp=self.now(),
            )
            self.transactions[transactional_id] = metadata
        prepared = self._prepare_init(metadata, timeout_ms, expected)
        if isinstance(prepared, Errors):
            return InitProducerIdResult(prepared)
        if prepared.state == S.PREPARE_EPOCH_FENCE:
            # Abort the ongoing transaction with the fenced epoch; the client retries and gets the next epoch.
            error = self._end_transaction(transactional_id, prepared.producer_id, prepared.producer_epoch, False, False)
            return InitProducerIdResult(error if error is not Errors.NONE else Errors.CONCURRENT_TRANSACTIONS)
        error = self._append_transit(metadata, prepared)
        if error is not Errors.NONE:
            if metadata.state == S.EMPTY and metadata.producer_epoch == NO_PRODUCER_EPOCH:
                self.transactions.pop(transactional_id, None)  # never written: forget it (Kafka keeps it in memory)
            return InitProducerIdResult(error)
        log.info(
            "Initialized transactionalId %s with producerId %d and producer epoch %d on partition %s-%d",
            transactional_id,
            metadata.producer_id,
            metadata.producer_epoch,
            TRANSACTION_STATE_TOPIC_NAME,
            self.partition_for(transactional_id),
        )
        return InitProducerIdResult(Errors.NONE, metadata.producer_id, metadata.producer_epoch)

    def _prepare_init(
        self, metadata: TransactionMetadata, timeout_ms: int, expected: tuple[int, int] | None
    ) -> TxnTransit | Errors:
        if metadata.pending_transition_in_progress:
            return Errors.CONCURRENT_TRANSACTIONS
        if expected is not None and not self._is_valid_producer_id(metadata, expected):
            return Errors.PRODUCER_FENCED
        state = metadata.state
        if state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return Errors.CONCURRENT_TRANSACTIONS
        if state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if metadata.is_producer_epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
                return metadata.prepare_producer_id_rotation(
                    self.generate_producer_id(), timeout_ms, self.now(), expected is not None
                )
            transit = metadata.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], self.now()
            )
            if transit is None:
                log.info(
                    "Expected producer epoch %s does not match current producer epoch %d or previous producer epoch %d",
                    None if expected is None else expected[1],
                    metadata.producer_epoch,
                    metadata.last_producer_epoch,
                )
                return Errors.PRODUCER_FENCED
            return transit
        if state == S.ONGOING:
            return metadata.prepare_fence_producer_epoch()
        raise IllegalTransitionError(
            f"Found transactionalId {metadata.transactional_id} with state {state.state_name}. "
            "This is illegal as we should never have transitioned to this state."
        )

    @staticmethod
    def _is_valid_producer_id(metadata: TransactionMetadata, expected: tuple[int, int]) -> bool:
        producer_id, epoch = expected
        return (
            metadata.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == metadata.producer_id
            or (producer_id == metadata.last_producer_id and epoch >= 32767 - 1)
        )

    # ================================================================ AddPartitionsToTxn / AddOffsetsToTxn
    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartitionKey]
    ) -> Errors:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's __consumer_offsets partition)."""
        if not transactional_id:
            return Errors.INVALID_REQUEST
        added = set(partitions)
        status = self.status(transactional_id)
        if status is not Errors.NONE:
            return status
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return Errors.PRODUCER_FENCED
        if metadata.pending_transition_in_progress or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return Errors.CONCURRENT_TRANSACTIONS
        if metadata.state == S.ONGOING and added <= metadata.topic_partitions:
            return Errors.NONE
        return self._append_transit(metadata, metadata.prepare_add_partitions(added, self.now()))

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartitionKey
    ) -> Errors:
        """Is ``partition`` part of this producer's ongoing transaction? (Kafka's verification before a
        transactional write: the produce path and TxnOffsetCommit.)"""
        status = self.status(transactional_id)
        if status is not Errors.NONE:
            return status
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return Errors.INVALID_PRODUCER_EPOCH
        if metadata.state != S.ONGOING or partition not in metadata.topic_partitions:
            return Errors.INVALID_TXN_STATE
        return Errors.NONE

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, Errors]:
        """AddPartitionsToTxn v4+ with VerifyOnly (Kafka's handleVerifyPartitionsInTransaction): per partition,
        NONE when it is in the producer's transaction, INVALID_TXN_STATE when not; the producer's own errors
        (unknown id, fenced epoch, a transaction completing) for every partition."""
        wanted = list(partitions)
        if not transactional_id:
            return dict.fromkeys(wanted, Errors.INVALID_REQUEST)
        metadata = self.transactions.get(transactional_id)
        error = self.status(transactional_id)  # a coordination error (NOT_COORDINATOR, ...) comes first
        if error is Errors.NONE:
            if metadata is None or metadata.producer_id != producer_id:
                error = Errors.INVALID_PRODUCER_ID_MAPPING
            elif metadata.producer_epoch != producer_epoch:
                error = Errors.PRODUCER_FENCED
            elif metadata.pending_transition_in_progress or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                error = Errors.CONCURRENT_TRANSACTIONS
        if error is not Errors.NONE or metadata is None:
            return dict.fromkeys(wanted, error)
        return {tp: Errors.NONE if tp in metadata.topic_partitions else Errors.INVALID_TXN_STATE for tp in wanted}

    # ================================================================ EndTxn
    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> Errors:
        """EndTxn from a client: commit or abort the ongoing transaction."""
        return self._end_transaction(transactional_id, producer_id, producer_epoch, commit, True)

    def _end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, from_client: bool
    ) -> Errors:
        if not transactional_id:
            return Errors.INVALID_REQUEST
        status = self.status(transactional_id)
        if status is not Errors.NONE:
            return status
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if (from_client and producer_epoch != metadata.producer_epoch) or producer_epoch < metadata.producer_epoch:
            return Errors.PRODUCER_FENCED
        if metadata.pending_transition_in_progress and metadata.pending_state != S.PREPARE_EPOCH_FENCE:
            return Errors.CONCURRENT_TRANSACTIONS
        state = metadata.state
        is_epoch_fence = False
        if state == S.ONGOING:
            next_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            if next_state == S.PREPARE_ABORT and metadata.pending_state == S.PREPARE_EPOCH_FENCE:
                is_epoch_fence = True
                metadata.pending_state = None
                metadata.producer_epoch = producer_epoch
                metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = metadata.prepare_abort_or_commit(next_state, self.now())
        elif state == S.COMPLETE_COMMIT:
            return Errors.NONE if commit else self._invalid_state(metadata, commit)
        elif state == S.COMPLETE_ABORT:
            return Errors.NONE if not commit else self._invalid_state(metadata, commit)
        elif state == S.PREPARE_COMMIT:
            return Errors.CONCURRENT_TRANSACTIONS if commit else self._invalid_state(metadata, commit)
        elif state == S.PREPARE_ABORT:
            return Errors.CONCURRENT_TRANSACTIONS if not commit else self._invalid_state(metadata, commit)
        elif state == S.EMPTY:
            return self._invalid_state(metadata, commit)
        else:
            raise IllegalTransitionError(
                f"Found transactionalId {transactional_id} with state {state.state_name}. "
                "This is illegal as we should never have transitioned to this state."
            )
        error = self._append_transit(metadata, transit)
        if error is not Errors.NONE:
            if is_epoch_fence:
                metadata.has_failed_epoch_fence = True
            return error
        self._send_markers(metadata, metadata.prepare_complete(self.now()))
        return Errors.NONE

    @staticmethod
    def _invalid_state(metadata: TransactionMetadata, commit: bool) -> Errors:
        log.debug(
            "TransactionalId: %s's state is %s, but received transaction marker result to send: %s",
            metadata.transactional_id,
            metadata.state.state_name,
            "COMMIT" if commit else "ABORT",
        )
        return Errors.INVALID_TXN_STATE

    # ================================================================ timeouts and expiry
    def timed_out_transactions(self) -> list[TransactionMetadata]:
        now = self.now()
        return [
            m
            for m in self.transactions.values()
            if not m.pending_transition_in_progress
            and m.state == S.ONGOING
            and m.txn_start_timestamp + m.txn_timeout_ms < now
        ]

    def abort_timed_out_transactions(self) -> int:
        """Abort, with a fenced epoch, every Ongoing transaction older than its timeout; how many were aborted."""
        aborted = 0
        for metadata in self.timed_out_transactions():
            transit = metadata.prepare_fence_producer_epoch()
            error = self._end_transaction(
                metadata.transactional_id, transit.producer_id, transit.producer_epoch, False, False
            )
            if error is Errors.NONE:
                aborted += 1
                log.info(
                    "Completed rollback of ongoing transaction for transactionalId %s due to timeout",
                    metadata.transactional_id,
                )
            else:
                log.warning(
                    "Rollback of ongoing transaction for transactionalId %s failed due to error %s",
                    metadata.transactional_id,
                    error.name,
                )
        return aborted

    def remove_expired_transactional_ids(self) -> int:
        """Write a tombstone for every id idle for transactional.id.expiration.ms; how many were removed."""
        now = self.now()
        removed = 0
        for metadata in list(self.transactions.values()):
            expired = (
                metadata.state.expiration_allowed
                and not metadata.pending_transition_in_progress
                and metadata.txn_last_update_timestamp + self.config.transactional_id_expiration_ms <= now
            )
            if expired and self._append_transit(metadata, metadata.prepare_dead()) is Errors.NONE:
                removed += 1
                log.info("Removed expired transactionalId %s", metadata.transactional_id)
        return removed

    # ================================================================ DescribeTransactions / ListTransactions
    def describe(self, transactional_id: str) -> tuple[Errors, TransactionDescription | None]:
        if not transactional_id:
            return Errors.INVALID_REQUEST, None
        status = self.status(transactional_id)
        if status is not Errors.NONE:
            return status, None
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.state == S.DEAD:
            return Errors.TRANSACTIONAL_ID_NOT_FOUND, None
        return Errors.NONE, TransactionDescription(
            transactional_id,
            metadata.state.state_name,
            metadata.producer_id,
            metadata.producer_epoch,
            metadata.txn_timeout_ms,
            metadata.txn_start_timestamp,
            sorted(metadata.topic_partitions),
        )

    def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int = -1,
        pattern: str | None = None,
    ) -> tuple[Errors, list[str], list[TransactionListing]]:
        """(error, unknown state filters, listings), as Kafka's TransactionStateManager.listTransactionStates."""
        wanted_states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in states:
            found = S.from_name(name)
            if found is None:
                unknown.append(name)
            else:
                wanted_states.add(found)
        if unknown and not wanted_states:
            return Errors.NONE, unknown, []  # only unknown states asked for: nothing matches
        pids = set(producer_ids)
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error:
            return Errors.INVALID_REQUEST, unknown, []
        now = self.now()
        listings = []
        for txn_id, metadata in sorted(self.transactions.items()):
            if metadata.state == S.DEAD:
                continue
            if wanted_states and metadata.state not in wanted_states:
                continue
            if pids and metadata.producer_id not in pids:
                continue
            if duration_ms >= 0 and now - metadata.txn_start_timestamp <= duration_ms:
                continue
            if regex is not None and regex.fullmatch(txn_id) is None:
                continue
            listings.append(TransactionListing(txn_id, metadata.producer_id, metadata.state.state_name))
        return Errors.NONE, unknown, listings
