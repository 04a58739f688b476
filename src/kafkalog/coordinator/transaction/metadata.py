"""One transactional id's state (Kafka's TransactionMetadata) and the transitions it may take.

A change is made in two steps, as Kafka makes it: ``prepare_*`` computes the target (a ``TxnTransit``) and marks
the transition pending, the coordinator writes the target to ``__transaction_state``, then
``complete_transition`` applies it (or ``abort_transition`` drops it when the write failed). Nothing is applied
before it is on disk, so the state in memory is never ahead of the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from .records import NO_PRODUCER_EPOCH, TransactionLogValue, value_from_state
from .state import TransactionState

TopicPartitionKey = tuple[str, int]
SHORT_MAX = 32767


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: the last two epochs are kept for fencing."""
    return epoch >= SHORT_MAX - 1


class IllegalTransitionError(Exception):
    """A transition Kafka's state machine forbids (Kafka: IllegalStateException): a coordinator bug, not input."""


@dataclass(frozen=True)
class TxnTransit:
    """The target of a pending transition (Kafka's TxnTransitMetadata)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartitionKey]
    txn_start_timestamp: int
    txn_last_update_timestamp: int

    def to_value(self, client_transaction_version: int = 0) -> TransactionLogValue:
        """The record value Kafka writes for this target (partitions null in Empty, grouped by topic)."""
        return value_from_state(
            self.producer_id,
            self.producer_epoch,
            self.txn_timeout_ms,
            self.state,
            sorted(self.topic_partitions),
            self.txn_last_update_timestamp,
            self.txn_start_timestamp,
            previous_producer_id=self.last_producer_id,
            client_transaction_version=client_transaction_version,
        )


@dataclass
class TransactionMetadata:
    """The coordinator's view of one transactional id.

    Invariants: ``pending_state`` is set exactly while a prepared transition awaits its write (or, for
    PrepareCommit/PrepareAbort, its markers); ``topic_partitions`` is empty in Empty, CompleteCommit and
    CompleteAbort; ``producer_epoch`` only grows for one producer id.
    """

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: set[TopicPartitionKey] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    has_failed_epoch_fence: bool = False

    @classmethod
    def from_value(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        """The state a record value holds (TransactionLog.readTxnRecordValue): the last epoch is not stored."""
        return cls(
            transactional_id,
            value.producer_id,
            value.previous_producer_id,
            value.producer_epoch,
            NO_PRODUCER_EPOCH,
            value.transaction_timeout_ms,
            value.state,
            value.topic_partitions(),
            value.transaction_start_timestamp_ms,
            value.transaction_last_update_timestamp_ms,
        )

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # ----- preparing -----------------------------------------------------------------------------------------
    def _prepare(
        self,
        state: TransactionState,
        topic_partitions: frozenset[TopicPartitionKey],
        update_timestamp: int,
        **changes: int,
    ) -> TxnTransit:
        """Mark the transition to ``state`` pending and return its target: the current state with the partitions,
        the update time and ``changes`` (TxnTransit field -> value: a new producer id, epoch, timeout, start)."""
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"Preparing transaction state transition to {state.state_name} while it already has a pending state "
                f"{self.pending_state.state_name}"
            )
        if self.state not in state.valid_previous_states:
            raise IllegalTransitionError(
                f"Preparing transaction state transition to {state.state_name} failed since the target state "
                f"{state.state_name} is not a valid previous state of the current state {self.state.state_name}"
            )
        self.pending_state = state
        producer_id = changes.get("producer_id", self.producer_id)
        target = {name: getattr(self, name) for name in _KEPT_FIELDS}
        target.update(changes)
        target["last_producer_id"] = self.producer_id if producer_id != self.producer_id else self.last_producer_id
        return TxnTransit(
            **target, state=state, topic_partitions=topic_partitions, txn_last_update_timestamp=update_timestamp
        )

    def prepare_fence_producer_epoch(self) -> TxnTransit:
        """Bump the epoch to fence the current producer before aborting its transaction (never told a client)."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransitionError(
                "Cannot fence producer with epoch equal to Short.MaxValue since this would overflow"
            )
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            TransactionState.PREPARE_EPOCH_FENCE,
            frozenset(self.topic_partitions),
            self.txn_last_update_timestamp,
            producer_epoch=bumped,
            last_producer_epoch=NO_PRODUCER_EPOCH,
        )

    def prepare_increment_producer_epoch(
        self, new_timeout_ms: int, expected_epoch: int | None, now: int
    ) -> TxnTransit | None:
        """InitProducerId on an idle id: the bumped epoch; None when ``expected_epoch`` is fenced (PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(f"Cannot allocate any more producer epochs for producerId {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch  # a retry of a bump that worked
        else:
            return None
        return self._prepare(
            TransactionState.EMPTY,
            frozenset(),
            now,
            producer_epoch=next_epoch,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=new_timeout_ms,
            txn_start_timestamp=-1,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_timeout_ms: int, now: int, record_last_epoch: bool
    ) -> TxnTransit:
        """A new producer id at epoch 0 once the epochs of the current one are exhausted."""
        return self._prepare(
            TransactionState.EMPTY,
            frozenset(),
            now,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=new_timeout_ms,
            txn_start_timestamp=-1,
        )

    def prepare_add_partitions(self, added: set[TopicPartitionKey], now: int) -> TxnTransit:
        start = now if self.state in _IDLE else self.txn_start_timestamp
        return self._prepare(
            TransactionState.ONGOING, frozenset(self.topic_partitions | added), now, txn_start_timestamp=start
        )

    def prepare_abort_or_commit(self, state: TransactionState, now: int) -> TxnTransit:
        return self._prepare(state, frozenset(self.topic_partitions), now)

    def prepare_complete(self, now: int) -> TxnTransit:
        state = (
            TransactionState.COMPLETE_COMMIT
            if self.state == TransactionState.PREPARE_COMMIT
            else TransactionState.COMPLETE_ABORT
        )
        self.has_failed_epoch_fence = False
        return self._prepare(state, frozenset(), now)

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(TransactionState.DEAD, frozenset(), self.txn_last_update_timestamp)

    # ----- completing ----------------------------------------------------------------------------------------
    def complete_transition(self, transit: TxnTransit) -> None:
        """Apply a transition once its record is written (Kafka's completeTransitionTo)."""
        if self.pending_state != transit.state:
            raise IllegalTransitionError(
                f"Completing transaction state transition to {transit.state.state_name} while its pending state is "
                f"{self.pending_state.state_name if self.pending_state else None}"
            )
        for f in fields(TxnTransit):
            setattr(self, f.name, getattr(transit, f.name))
        self.topic_partitions = set(transit.topic_partitions)
        self.pending_state = None

    def abort_transition(self) -> None:
        """Drop a prepared transition whose write failed."""
        self.pending_state = None


# The TxnTransit fields a transition keeps unless it changes them (``_prepare``'s ``changes``).
_KEPT_FIELDS = ("producer_id", "producer_epoch", "last_producer_epoch", "txn_timeout_ms", "txn_start_timestamp")
_IDLE = frozenset({TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT})
