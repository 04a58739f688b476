"""Kafka's transaction coordinator over the ``__transaction_state`` topic.

``state`` holds the transaction states, ``records`` the topic's key and value schemas (written and decoded in one
place: ``kafkalog dump --transaction-log-decoder`` uses them too).
"""

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
    "TransactionLogValue",
    "TransactionState",
    "UnknownKeyVersion",
    "UnknownValueVersion",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]
