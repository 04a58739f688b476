"""The transaction states of Kafka's transaction coordinator (TransactionState.java), with their ids on disk.

The id is what ``__transaction_state`` stores in TransactionLogValue's ``TransactionStatus``; the name is what
DescribeTransactions and ListTransactions report (``kafka-transactions.sh`` prints it).
"""

from __future__ import annotations

from enum import IntEnum


class TransactionState(IntEnum):
    """One state of a transactional id. Invariant: ``value`` is Kafka's on-disk status id."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """Kafka's name of the state (``Empty``, ``Ongoing``, ``PrepareCommit`` ...)."""
        return _NAMES[self]

    @property
    def expiration_allowed(self) -> bool:
        """Whether a transactional id in this state may expire (transactional.id.expiration.ms)."""
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        """The states a transactional id may move to this one from (Kafka's validPreviousStates)."""
        return _VALID_PREVIOUS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        """The state of an on-disk id; ValueError (Kafka: IllegalArgumentException) for an unknown one."""
        try:
            return cls(state_id)
        except ValueError:
            raise ValueError(f"Unknown transaction state id {state_id} from the transaction status message") from None

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state called ``name`` (Kafka's names, as ListTransactions' state filters carry them), or None."""
        return _BY_NAME.get(name)


_S = TransactionState
_NAMES = {
    _S.EMPTY: "Empty",
    _S.ONGOING: "Ongoing",
    _S.PREPARE_COMMIT: "PrepareCommit",
    _S.PREPARE_ABORT: "PrepareAbort",
    _S.COMPLETE_COMMIT: "CompleteCommit",
    _S.COMPLETE_ABORT: "CompleteAbort",
    _S.DEAD: "Dead",
    _S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_COMPLETED = {_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, *_COMPLETED}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, *_COMPLETED}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    # Transactions v2 lets a client abort from Empty or a completed state (it may not know the coordinator's state).
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, *_COMPLETED}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, *_COMPLETED}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
