"""``kafkalog dump --transaction-log-decoder``: ``__transaction_state`` records as Kafka's DumpLogSegments prints them.

Kafka 3.x (core/src/main/scala/kafka/tools/DumpLogSegments.scala, TransactionLogMessageParser, which calls
core/src/main/scala/kafka/coordinator/transaction/TransactionLog.scala ``formatRecordKeyAndValue``) prints

* key: ``transaction_metadata::transactionalId=<id>``, or ``unknown::version=<n>`` (and no payload) for a key
  whose int16 prefix is not the transaction log's record type;
* payload: ``producerId:<id>,producerEpoch:<epoch>,state=<State>,partitions=[<t-p>,...],``
  ``txnLastUpdateTimestamp=<ms>,txnTimeoutMs=<ms>``, or ``<DELETE>`` for a tombstone.

``partitions`` is the TransactionMetadata's ``topicPartitions``, a Scala ``mutable.HashSet``: its order is the
set's iteration order, which depends only on the partitions' hash codes and the table size, so it is computed
here as Scala 2.13 computes it (``jvm_order.scala_hash_set_order``) and the line matches Kafka's with several partitions
too. In state Empty the partitions are not read (as TransactionLog.readTxnRecordValue), so they print ``[]``.

Where Kafka's tool dies on a value it cannot read (an unknown value version, an unknown state id, truncated
bytes), this prints ``Error at offset N, skipping. <reason>`` as the payload and goes on, as Kafka's later
JSON decoder does; a record without a key stops the dump with a clear error (Kafka: a NullPointerException).
``--json`` gives the key and value as Kafka 4.1's JSON decoder names them (``{"transactionalId": ...}`` and
``{"version": "0", "data": {...}}``).
"""

from __future__ import annotations

import struct
from typing import Any

from ..coordinator.transaction.records import UnknownKeyVersion, decode_key, decode_value, key_json, value_json
from ..coordinator.transaction.state import TransactionState
from ..record.types import Record
from .decoders import DumpError, MessageParser
from .jvm_order import scala_hash_set_order


def format_value(value_bytes: bytes) -> str:
    """The payload text of a non-null value (ValueError / UnknownValueVersion when it cannot be read)."""
    _, value = decode_value(value_bytes)
    state = TransactionState.from_id(value.transaction_status)
    partitions: list[tuple[str, int]] = []
    if state != TransactionState.EMPTY and value.partitions is not None:
        partitions = scala_hash_set_order([(topic, p) for p in ids] for topic, ids in value.partitions)
    return (
        f"producerId:{value.producer_id},producerEpoch:{value.producer_epoch},state={state.state_name},"
        f"partitions=[{','.join(f'{t}-{p}' for t, p in partitions)}],"
        f"txnLastUpdateTimestamp={value.transaction_last_update_timestamp_ms},"
        f"txnTimeoutMs={value.transaction_timeout_ms}"
    )


def parse_transaction_record(record: Record, as_objects: bool = False) -> tuple[Any, Any]:
    """(key, payload) of one ``__transaction_state`` record as the dump prints them (each None when absent).

    DumpError for a record without a key: nothing says whose state it is."""
    if record.key is None:
        raise DumpError(
            f"Failed to decode message at offset {record.offset} using transaction log decoder "
            "(message had a missing key)"
        )
    try:
        transactional_id = decode_key(record.key)
    except UnknownKeyVersion as e:
        return (f"unknown::version={e.version}", None)
    except (ValueError, struct.error) as e:
        return (f"Error at offset {record.offset}, skipping. {e}", None)
    if as_objects:
        key_obj: Any = key_json(transactional_id)
        if record.value is None:
            return key_obj, "<DELETE>"
        try:
            version, value = decode_value(record.value)
        except (ValueError, struct.error) as e:
            return key_obj, f"Error at offset {record.offset}, skipping. {e}"
        return key_obj, {"version": str(version), "data": value_json(version, value)}
    key = f"transaction_metadata::transactionalId={transactional_id}"
    if record.value is None:
        return key, "<DELETE>"
    try:
        return key, format_value(record.value)
    except (ValueError, struct.error) as e:
        return key, f"Error at offset {record.offset}, skipping. {e}"


class TransactionLogParser(MessageParser):
    """Kafka's TransactionLogMessageParser; ``as_objects`` keeps the JSON as dicts (for ``--json``)."""

    def __init__(self, as_objects: bool = False) -> None:
        self.as_objects = as_objects

    def parse(self, record: Record) -> tuple[Any, Any]:
        return parse_transaction_record(record, self.as_objects)
