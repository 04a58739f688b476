"""The error codes the group coordinator answers with (Kafka's org.apache.kafka.common.protocol.Errors).

The coordinator decides which error a request gets; the broker only puts the number on the wire.
"""

from __future__ import annotations

import enum


class Errors(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    INVALID_REQUEST = 42
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128


def append_error(error: BaseException, for_offsets: bool) -> Errors:
    """What a failed write to ``__consumer_offsets`` tells the client (Kafka's GroupMetadataManager mapping)."""
    names = {klass.__name__ for klass in type(error).__mro__}
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
