"""The error codes the group coordinator answers with (the coordinators' table, ``coordinator/errors.py``) and
what a failed write to ``__consumer_offsets`` tells the client."""

from __future__ import annotations

from ..errors import Errors, error_names

__all__ = ["Errors", "append_error"]


def append_error(error: BaseException, for_offsets: bool) -> Errors:
    """What a failed write to ``__consumer_offsets`` tells the client (Kafka's GroupMetadataManager mapping)."""
    names = error_names(error)
    if names & {"UnknownTopicOrPartitionError", "NotEnoughReplicasError", "NotEnoughReplicasAfterAppendError"}:
        return Errors.COORDINATOR_NOT_AVAILABLE
    if names & {"NotLeaderOrFollowerError", "KafkaStorageError"}:
        return Errors.NOT_COORDINATOR
    if "InvalidProducerEpochError" in names:  # a transactional commit of a fenced producer
        return Errors.INVALID_PRODUCER_EPOCH
    if "InvalidTxnStateError" in names:
        return Errors.INVALID_TXN_STATE
    if names & {"RecordTooLargeError", "RecordBatchTooLargeError"}:
        return Errors.INVALID_COMMIT_OFFSET_SIZE if for_offsets else Errors.UNKNOWN_SERVER_ERROR
    return Errors.UNKNOWN_SERVER_ERROR
