"""The error codes the transaction coordinator answers with (the coordinators' table, ``coordinator/errors.py``)
and what a failed write to ``__transaction_state`` tells the client."""

from __future__ import annotations

from ..errors import Errors, error_names

__all__ = ["Errors", "append_error"]


def append_error(error: BaseException) -> Errors:
    """What a failed write to ``__transaction_state`` tells the client (Kafka's TransactionStateManager mapping)."""
    names = error_names(error)
    if names & {
        "UnknownTopicOrPartitionError",
        "NotEnoughReplicasError",
        "NotEnoughReplicasAfterAppendError",
        "RequestTimedOutError",
    }:
        return Errors.COORDINATOR_NOT_AVAILABLE
    if names & {"NotLeaderOrFollowerError", "KafkaStorageError"}:
        return Errors.NOT_COORDINATOR
    return Errors.UNKNOWN_SERVER_ERROR
