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

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .config import TransactionCoordinatorConfig
from .errors import Errors
from .markers import MARKER_RETRY_BACKOFF_MS, MarkerSend, TransactionMarkerManager, append_marker
from .metadata import IllegalTransitionError, TopicPartitionKey, TransactionMetadata, TxnTransit
from .state import TransactionState
from .state_manager import TRANSACTION_STATE_TOPIC_NAME, MarkerListener, log

__all__ = [
    "MARKER_RETRY_BACKOFF_MS",
    "TRANSACTION_STATE_TOPIC_NAME",
    "InitProducerIdResult",
    "MarkerListener",
    "MarkerSend",
    "TransactionCoordinator",
    "TransactionCoordinatorConfig",
    "TransactionDescription",
    "TransactionListing",
    "append_marker",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
S = TransactionState


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


class TransactionCoordinator(TransactionMarkerManager):
    """The transaction coordinator of one broker (it leads every __transaction_state partition): the requests'
    rules over the state manager's ids (``state_manager.py``) and the markers (``markers.py``)."""

    def __init__(
        self,
        log_manager,
        config: TransactionCoordinatorConfig,
        clock,
        scheduler,
        generate_producer_id: Callable[[], int],
    ) -> None:
        super().__init__(log_manager, config, clock, scheduler)
        self.generate_producer_id = generate_producer_id
        self._tasks: dict[str, Any] = {}  # name -> the scheduler's handle (has cancel())

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

    # ================================================================ partitions coordinated here (a cluster)
    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        """Kafka's TransactionCoordinator.onElection: load the ids of state ``partition`` (this broker leads it at
        leader epoch ``coordinator_epoch``), coordinate them from now on, and complete the transactions found in
        PrepareCommit/PrepareAbort by sending their markers again."""
        if self.owned is None:
            return
        log.info("Elected as the txn coordinator for partition %d at epoch %d", partition, coordinator_epoch)
        self.coordinator_epochs[partition] = coordinator_epoch
        self._take_over(partition)
        self._complete_loaded(partition)

    # ================================================================ loading
    def load(self) -> None:
        """Replay every state partition (the last record of an id wins, a tombstone removes it), then complete
        the transactions found in PrepareCommit/PrepareAbort by writing their markers again."""
        self.transactions.clear()
        self._unsent.clear()
        for partition in sorted(self.state_topic_partitions() or []):
            self._load_partition(partition)
        self._complete_loaded(None)

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
    def _producer_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int | None,
        stale_epoch: Errors = Errors.PRODUCER_FENCED,
        *,
        may_add: bool = False,
        require_id: bool = True,
    ) -> TransactionMetadata | Errors:
        """The checks every request of a producer's transaction starts with, in Kafka's order: the id (an empty one
        is INVALID_REQUEST, unless not ``require_id``: the produce path's verification), its coordination here
        (NOT_COORDINATOR, ...), the producer id it is mapped to, then, with ``producer_epoch``, the epoch
        (``stale_epoch`` when it differs); with ``may_add``, that no transaction is completing
        (CONCURRENT_TRANSACTIONS, before partitions are added or verified). The id's metadata, else the error."""
        if require_id and not transactional_id:
            return Errors.INVALID_REQUEST
        status = self.status(transactional_id)
        if status is not Errors.NONE:
            return status
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch is not None and metadata.producer_epoch != producer_epoch:
            return stale_epoch
        if may_add and (
            metadata.pending_transition_in_progress or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
        ):
            return Errors.CONCURRENT_TRANSACTIONS
        return metadata

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartitionKey]
    ) -> Errors:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's __consumer_offsets partition)."""
        added = set(partitions)
        metadata = self._producer_transaction(transactional_id, producer_id, producer_epoch, may_add=True)
        if isinstance(metadata, Errors):
            return metadata
        if metadata.state == S.ONGOING and added <= metadata.topic_partitions:
            return Errors.NONE
        return self._append_transit(metadata, metadata.prepare_add_partitions(added, self.now()))

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartitionKey
    ) -> Errors:
        """Is ``partition`` part of this producer's ongoing transaction? (Kafka's verification before a
        transactional write: the produce path and TxnOffsetCommit.)"""
        metadata = self._producer_transaction(
            transactional_id, producer_id, producer_epoch, Errors.INVALID_PRODUCER_EPOCH, require_id=False
        )
        if isinstance(metadata, Errors):
            return metadata
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
        metadata = self._producer_transaction(transactional_id, producer_id, producer_epoch, may_add=True)
        if isinstance(metadata, Errors):
            return dict.fromkeys(wanted, metadata)
        return {tp: Errors.NONE if tp in metadata.topic_partitions else Errors.INVALID_TXN_STATE for tp in wanted}

    # ================================================================ EndTxn
    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> Errors:
        """EndTxn from a client: commit or abort the ongoing transaction."""
        return self._end_transaction(transactional_id, producer_id, producer_epoch, commit, True)

    def _end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, from_client: bool
    ) -> Errors:
        metadata = self._producer_transaction(transactional_id, producer_id, None)
        if isinstance(metadata, Errors):
            return metadata
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
