"""The ``__transaction_state`` records: Kafka's key and value schemas, written and read in one place.

Schemas (Kafka's ``transaction-coordinator/src/main/resources/common/message``), each prefixed by an int16:

* key: int16 ``0`` (the coordinator record type TRANSACTION_LOG, also TransactionLogKey's only version), then
  TransactionLogKey v0 (not flexible): ``TransactionalId`` as an int16-length string.
* value: int16 version, then TransactionLogValue v0 (not flexible) or v1 (flexible: compact strings and arrays,
  tagged-field sections on the value and on every PartitionsSchema):
  ``ProducerId`` int64, ``ProducerEpoch`` int16, ``TransactionTimeoutMs`` int32, ``TransactionStatus`` int8,
  ``TransactionPartitions`` nullable []{``Topic`` string, ``PartitionIds`` []int32},
  ``TransactionLastUpdateTimestampMs`` int64, ``TransactionStartTimestampMs`` int64, and, v1 only, the tagged
  fields 0 ``PreviousProducerId`` int64 (default -1), 1 ``NextProducerId`` int64 (default -1),
  2 ``ClientTransactionVersion`` int16 (default 0), 3 ``NextProducerEpoch`` int16 (default -1, Kafka 4.1+).
  A tagged field is written only when it differs from its default, in ascending tag order.
* a tombstone (null value) removes a transactional id (its state went Dead).

Which value version Kafka writes follows the ``transaction.version`` feature: v0 at level 0, v1 from level 1
(TransactionVersion.transactionLogValueVersion). Partitions are null in state Empty and grouped by topic otherwise.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..messages import MessageReader, encode_unsigned_varint
from .state import TransactionState

TRANSACTION_LOG_KEY_TYPE = 0
"""The key's int16 prefix: CoordinatorRecordType.TRANSACTION_LOG (= TransactionLogKey version 0)."""
LOWEST_VALUE_VERSION = 0
HIGHEST_VALUE_VERSION = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2
TAG_NEXT_PRODUCER_EPOCH = 3


class UnknownKeyVersion(ValueError):
    """A key whose int16 prefix is not the transaction log's record type (Kafka: ReadResult UnknownKeyVersion)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"Unknown version {version} from the transaction log message key")
        self.version = version


class UnknownValueVersion(ValueError):
    """A value whose version is outside 0-1 (Kafka: ReadResult UnknownValueVersion)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"Unknown version {version} from the transaction log message value")
        self.version = version


@dataclass(frozen=True)
class TransactionLogValue:
    """One TransactionLogValue. ``partitions`` is topic -> partition ids in the record's order (None = null).

    Invariant: ``unknown_tags`` holds tagged fields this codec does not know, kept so a rewrite loses nothing.
    """

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    unknown_tags: tuple[tuple[int, bytes], ...] = field(default=())

    @property
    def state(self) -> TransactionState:
        """The status as a TransactionState; ValueError for an id Kafka does not define."""
        return TransactionState.from_id(self.transaction_status)

    def topic_partitions(self) -> set[tuple[str, int]]:
        """The (topic, partition) pairs of the transaction (none in Empty, as Kafka reads them)."""
        if self.partitions is None or self.transaction_status == TransactionState.EMPTY:
            return set()
        return {(topic, p) for topic, ids in self.partitions for p in ids}


def group_partitions(topic_partitions: Iterable[tuple[str, int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(topic, partition) pairs grouped by topic, as TransactionLog.valueToBytes groups them (sorted here)."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(topic_partitions):
        grouped.setdefault(topic, []).append(partition)
    return tuple((topic, tuple(ids)) for topic, ids in grouped.items())


# ----------------------------------------------------------------------------------------------- writing
def _string(text: str, flexible: bool) -> bytes:
    raw = text.encode("utf-8")
    if flexible:
        return encode_unsigned_varint(len(raw) + 1) + raw
    if len(raw) > 0x7FFF:
        raise ValueError(f"String of {len(raw)} bytes is longer than the int16 length allows")
    return struct.pack(">h", len(raw)) + raw


def _array_length(n: int | None, flexible: bool) -> bytes:
    if flexible:
        return encode_unsigned_varint(0 if n is None else n + 1)
    return struct.pack(">i", -1 if n is None else n)


def encode_key(transactional_id: str) -> bytes:
    """The record key of ``transactional_id`` (TransactionLog.keyToBytes)."""
    return struct.pack(">h", TRANSACTION_LOG_KEY_TYPE) + _string(transactional_id, flexible=False)


def encode_value(value: TransactionLogValue, version: int = HIGHEST_VALUE_VERSION) -> bytes:
    """The record value (TransactionLog.valueToBytes): the int16 version, then TransactionLogValue ``version``.

    Version 0 has no tagged fields: the previous/next producer ids, the client transaction version and the next
    epoch are not written there (as Kafka's generated writer drops them). ValueError for another version, or for
    partitions in state Empty (Kafka: IllegalStateException).
    """
    if not LOWEST_VALUE_VERSION <= version <= HIGHEST_VALUE_VERSION:
        raise UnknownValueVersion(version)
    if value.transaction_status == TransactionState.EMPTY and value.partitions:
        raise ValueError("Transaction is not expected to have any partitions since its state is Empty")
    flexible = version >= 1
    parts = [
        struct.pack(
            ">hqhib",
            version,
            value.producer_id,
            value.producer_epoch,
            value.transaction_timeout_ms,
            value.transaction_status,
        )
    ]
    partitions = value.partitions
    parts.append(_array_length(None if partitions is None else len(partitions), flexible))
    for topic, ids in partitions or ():
        parts.append(_string(topic, flexible))
        parts.append(_array_length(len(ids), flexible))
        parts.append(struct.pack(f">{len(ids)}i", *ids))
        if flexible:
            parts.append(b"\x00")  # PartitionsSchema's (empty) tagged fields
    parts.append(struct.pack(">qq", value.transaction_last_update_timestamp_ms, value.transaction_start_timestamp_ms))
    if flexible:
        parts.append(_tagged_fields(value))
    return b"".join(parts)


def _tagged_fields(value: TransactionLogValue) -> bytes:
    tags: dict[int, bytes] = dict(value.unknown_tags)
    if value.previous_producer_id != NO_PRODUCER_ID:
        tags[TAG_PREVIOUS_PRODUCER_ID] = struct.pack(">q", value.previous_producer_id)
    if value.next_producer_id != NO_PRODUCER_ID:
        tags[TAG_NEXT_PRODUCER_ID] = struct.pack(">q", value.next_producer_id)
    if value.client_transaction_version != 0:
        tags[TAG_CLIENT_TRANSACTION_VERSION] = struct.pack(">h", value.client_transaction_version)
    if value.next_producer_epoch != NO_PRODUCER_EPOCH:
        tags[TAG_NEXT_PRODUCER_EPOCH] = struct.pack(">h", value.next_producer_epoch)
    out = [encode_unsigned_varint(len(tags))]
    for tag in sorted(tags):
        out += [encode_unsigned_varint(tag), encode_unsigned_varint(len(tags[tag])), tags[tag]]
    return b"".join(out)


# ----------------------------------------------------------------------------------------------- reading
class _Reader(MessageReader):
    """Kafka's generated-message reader for the transaction log's schemas (non-nullable strings)."""

    def string(self, flexible: bool) -> str:
        n = self.uvarint() - 1 if flexible else self.unpack(">h")
        if n < 0:
            raise ValueError("non-nullable field was serialized as null")
        return self.take(n).decode("utf-8")

    def array_length(self, flexible: bool) -> int:
        return int(self.uvarint() - 1 if flexible else self.unpack(">i"))

    def tagged_fields(self) -> dict[int, bytes]:
        return self.raw_tagged_fields()


def decode_key(key: bytes) -> str:
    """The transactional id of a record key; UnknownKeyVersion for another prefix, ValueError when truncated."""
    r = _Reader(key)
    version = r.unpack(">h")
    if version != TRANSACTION_LOG_KEY_TYPE:
        raise UnknownKeyVersion(version)
    return r.string(flexible=False)


def decode_value(value: bytes) -> tuple[int, TransactionLogValue]:
    """(version, value) of a record value; UnknownValueVersion outside 0-1, ValueError when it does not parse."""
    r = _Reader(value)
    version = r.unpack(">h")
    if not LOWEST_VALUE_VERSION <= version <= HIGHEST_VALUE_VERSION:
        raise UnknownValueVersion(version)
    flexible = version >= 1
    producer_id, producer_epoch, timeout_ms, status = r.unpack(">qhib")
    n = r.array_length(flexible)
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if n >= 0:
        entries = []
        for _ in range(n):
            topic = r.string(flexible)
            count = r.array_length(flexible)
            if count < 0:
                raise ValueError("non-nullable field partitionIds was serialized as null")
            ids = struct.unpack(f">{count}i", r.take(4 * count))
            if flexible:
                r.tagged_fields()
            entries.append((topic, tuple(ids)))
        partitions = tuple(entries)
    last_update, start = r.unpack(">qq")
    tags = r.tagged_fields() if flexible else {}

    def tag(number: int, fmt: str, default: int) -> int:
        raw = tags.pop(number, None)
        if raw is None:
            return default
        if len(raw) != struct.calcsize(fmt):
            raise ValueError(f"Tagged field {number} has {len(raw)} bytes, expected {struct.calcsize(fmt)}")
        return int(struct.unpack(fmt, raw)[0])

    return version, TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout_ms,
        transaction_status=status,
        partitions=partitions,
        transaction_last_update_timestamp_ms=last_update,
        transaction_start_timestamp_ms=start,
        previous_producer_id=tag(TAG_PREVIOUS_PRODUCER_ID, ">q", NO_PRODUCER_ID),
        next_producer_id=tag(TAG_NEXT_PRODUCER_ID, ">q", NO_PRODUCER_ID),
        client_transaction_version=tag(TAG_CLIENT_TRANSACTION_VERSION, ">h", 0),
        next_producer_epoch=tag(TAG_NEXT_PRODUCER_EPOCH, ">h", NO_PRODUCER_EPOCH),
        unknown_tags=tuple(sorted(tags.items())),
    )


# ----------------------------------------------------------------------------------------------- JSON views
def key_json(transactional_id: str) -> dict[str, Any]:
    """The key as Kafka's generated JSON converter names it (``transactionalId``)."""
    return {"transactionalId": transactional_id}


def value_json(version: int, value: TransactionLogValue) -> dict[str, Any]:
    """The value with Kafka's JSON field names in schema order; v1 adds the tagged fields it carries."""
    out: dict[str, Any] = {"producerId": value.producer_id}
    if version >= 1:
        out["previousProducerId"] = value.previous_producer_id
        out["nextProducerId"] = value.next_producer_id
    out["producerEpoch"] = value.producer_epoch
    out["transactionTimeoutMs"] = value.transaction_timeout_ms
    out["transactionStatus"] = value.transaction_status
    out["transactionPartitions"] = (
        None
        if value.partitions is None
        else [{"topic": topic, "partitionIds": list(ids)} for topic, ids in value.partitions]
    )
    out["transactionLastUpdateTimestampMs"] = value.transaction_last_update_timestamp_ms
    out["transactionStartTimestampMs"] = value.transaction_start_timestamp_ms
    if version >= 1:
        out["clientTransactionVersion"] = value.client_transaction_version
        if value.next_producer_epoch != NO_PRODUCER_EPOCH:  # tag 3, only in Kafka 4.1+'s schema
            out["nextProducerEpoch"] = value.next_producer_epoch
    return out


def value_from_state(
    producer_id: int,
    producer_epoch: int,
    timeout_ms: int,
    state: TransactionState,
    topic_partitions: Iterable[tuple[str, int]],
    last_update_ms: int,
    start_ms: int,
    *,
    previous_producer_id: int = NO_PRODUCER_ID,
    next_producer_id: int = NO_PRODUCER_ID,
    client_transaction_version: int = 0,
    next_producer_epoch: int = NO_PRODUCER_EPOCH,
) -> TransactionLogValue:
    """A value for the coordinator's state: partitions null in Empty, grouped by topic otherwise (as Kafka)."""
    tps = list(topic_partitions)
    if state == TransactionState.EMPTY and tps:
        raise ValueError("Transaction is not expected to have any partitions since its state is Empty")
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout_ms,
        transaction_status=int(state),
        partitions=None if state == TransactionState.EMPTY else group_partitions(tps),
        transaction_last_update_timestamp_ms=last_update_ms,
        transaction_start_timestamp_ms=start_ms,
        previous_producer_id=previous_producer_id,
        next_producer_id=next_producer_id,
        client_transaction_version=client_transaction_version,
        next_producer_epoch=next_producer_epoch,
    )
