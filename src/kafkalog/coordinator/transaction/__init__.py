"""Kafka's transaction coordinator over the ``__transaction_state`` topic.

``state`` holds the transaction states, ``records`` the topic's key and value schemas (written and decoded in one
place: ``kafkalog dump --transaction-log-decoder`` uses them too), ``metadata`` one transactional id's state and
its transitions; the coordinator is built in layers, as Kafka's: ``state_manager`` (the ids, their writes to the
topic, loading) <- ``markers`` (COMMIT/ABORT markers, then the Complete state) <- ``coordinator`` (InitProducerId,
AddPartitionsToTxn, EndTxn, timeouts, expiry, Describe/ListTransactions); ``config`` holds its broker configs.
"""

from .coordinator import (
    TRANSACTION_STATE_TOPIC_NAME,
    InitProducerIdResult,
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TransactionDescription,
    TransactionListing,
)
from .errors import Errors
from .metadata import TransactionMetadata, TxnTransit
from .records import (
    TransactionLogValue,
    UnknownKeyVersion,
    UnknownValueVersion,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from .state import TransactionState

__all__ = [
    "TRANSACTION_STATE_TOPIC_NAME",
    "Errors",
    "InitProducerIdResult",
    "TransactionCoordinator",
    "TransactionCoordinatorConfig",
    "TransactionDescription",
    "TransactionListing",
    "TransactionLogValue",
    "TransactionMetadata",
    "TransactionState",
    "TxnTransit",
    "UnknownKeyVersion",
    "UnknownValueVersion",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]
