"""The error codes the transaction coordinator answers with (Kafka's org.apache.kafka.common.protocol.Errors).

The coordinator decides which error a request gets; the broker only puts the number on the wire (and, for old
request versions, turns PRODUCER_FENCED into INVALID_PRODUCER_EPOCH as Kafka's KafkaApis does).
"""

from __future__ import annotations

import enum


class Errors(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_REQUEST = 42
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    OPERATION_NOT_ATTEMPTED = 55
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105


def append_error(error: BaseException) -> Errors:
    """What a failed write to ``__transaction_state`` tells the client (Kafka's TransactionStateManager mapping)."""
    names = {klass.__name__ for klass in type(error).__mro__}
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
