"""The ``__transaction_state`` codec against bytes laid out by hand from Kafka's JSON schemas, and against records
a real Kafka 3.7 broker wrote (ksqlDB's transactional id in the cp77 KRaft fixture)."""

from __future__ import annotations

import pytest

from conftest import fixture_path
from kafkalog.coordinator.transaction.records import (
    TransactionLogValue,
    UnknownKeyVersion,
    UnknownValueVersion,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    value_from_state,
    value_json,
)
from kafkalog.coordinator.transaction.state import TransactionState
from kafkalog.record.scan import iter_batches

# TransactionLogKey v0 behind the record-type prefix 0: int16 0, int16 length 5, "txn-1".
KEY = bytes.fromhex("00000005") + b"txn-1"

LAST_UPDATE = 1_700_000_000_000  # 0x0000018bcfe56800
START = 1_699_999_999_000  # 0x0000018bcfe56418
COMMON = "00000000000003e800030000ea6001"  # producer id 1000, epoch 3, timeout 60000, status Ongoing

# v0: int32 array length, int16-length topic, int32 partition count, int32 partitions, two int64 timestamps.
ONGOING_V0 = bytes.fromhex("0000" + COMMON + "000000010001740000000200000000000000020000018bcfe568000000018bcfe56418")
# v1 (flexible): compact array 1+1, compact string 1+1 "t", compact int32 array 2+1, the struct's empty tag section,
# the timestamps, then 2 tagged fields: tag 0 (8 bytes, previous producer id 999) and tag 2 (2 bytes, version 2).
ONGOING_V1 = bytes.fromhex(
    "0001"
    + COMMON
    + "02"
    + "0274"
    + "03"
    + "00000000"
    + "00000002"
    + "00"
    + "0000018bcfe56800"
    + "0000018bcfe56418"
    + "02"
    + "0008"
    + "00000000000003e7"
    + "0202"
    + "0002"
)


def ongoing(**extra: int) -> TransactionLogValue:
    return TransactionLogValue(
        producer_id=1000,
        producer_epoch=3,
        transaction_timeout_ms=60000,
        transaction_status=TransactionState.ONGOING,
        partitions=(("t", (0, 2)),),
        transaction_last_update_timestamp_ms=LAST_UPDATE,
        transaction_start_timestamp_ms=START,
        **extra,
    )


def test_key_bytes() -> None:
    assert encode_key("txn-1") == KEY
    assert decode_key(KEY) == "txn-1"
    assert encode_key("é") == bytes.fromhex("00000002c3a9")


def test_value_v0_bytes() -> None:
    assert encode_value(ongoing(), version=0) == ONGOING_V0
    version, value = decode_value(ONGOING_V0)
    assert version == 0
    assert value == ongoing()
    assert value.state is TransactionState.ONGOING
    assert value.topic_partitions() == {("t", 0), ("t", 2)}


def test_value_v0_drops_tagged_fields() -> None:
    # v0 has no tagged-field section: Kafka's writer leaves the v1-only fields out
    assert encode_value(ongoing(previous_producer_id=999, client_transaction_version=2), version=0) == ONGOING_V0


def test_value_v1_bytes_with_tagged_fields() -> None:
    value = ongoing(previous_producer_id=999, client_transaction_version=2)
    assert encode_value(value, version=1) == ONGOING_V1
    assert decode_value(ONGOING_V1) == (1, value)


def test_value_v1_all_tags_and_unknown_tag_kept() -> None:
    # tags 1 (next producer id 1001) and 3 (next epoch 0), plus an unknown tag 9 with 1 byte: kept and rewritten
    raw = ONGOING_V1[:-15] + bytes.fromhex("03010800000000000003e9030200000901ff")
    version, value = decode_value(raw)
    assert (value.next_producer_id, value.next_producer_epoch, value.previous_producer_id) == (1001, 0, -1)
    assert value.client_transaction_version == 0
    assert value.unknown_tags == ((9, b"\xff"),)
    assert encode_value(value, version) == raw


def test_empty_state_has_null_partitions() -> None:
    value = value_from_state(5, 0, 1000, TransactionState.EMPTY, [], 7, -1)
    # v0: int32 -1 for the null array; v1: compact length 0 and an empty tag section
    assert encode_value(value, 0) == bytes.fromhex(
        "000000000000000000050000000003e800ffffffff0000000000000007ffffffffffffffff"
    )
    assert encode_value(value, 1) == bytes.fromhex(
        "000100000000000000050000000003e800000000000000000007ffffffffffffffff00"
    )
    assert decode_value(encode_value(value, 1))[1].partitions is None
    with pytest.raises(ValueError, match="Empty"):
        value_from_state(5, 0, 1000, TransactionState.EMPTY, [("t", 0)], 7, -1)


def test_partitions_grouped_by_topic() -> None:
    value = value_from_state(1, 0, 1, TransactionState.ONGOING, [("b", 1), ("a", 3), ("b", 0)], 0, 0)
    assert value.partitions == (("a", (3,)), ("b", (0, 1)))


def test_bad_versions_and_truncation() -> None:
    with pytest.raises(UnknownKeyVersion):
        decode_key(bytes.fromhex("00010001") + b"x")
    with pytest.raises(UnknownValueVersion):
        decode_value(bytes.fromhex("0002") + ONGOING_V1[2:])
    with pytest.raises(UnknownValueVersion):
        encode_value(ongoing(), version=2)
    for cut in (1, 5, len(ONGOING_V1) - 1):
        with pytest.raises(ValueError):
            decode_value(ONGOING_V1[:cut])
    with pytest.raises(ValueError, match="Unknown transaction state id 9"):
        _ = decode_value(bytes.fromhex("000000000000000003e800030000ea6009") + ONGOING_V0[17:])[1].state


def test_json_view_uses_kafka_names() -> None:
    assert value_json(1, ongoing(previous_producer_id=999)) == {
        "producerId": 1000,
        "previousProducerId": 999,
        "nextProducerId": -1,
        "producerEpoch": 3,
        "transactionTimeoutMs": 60000,
        "transactionStatus": 1,
        "transactionPartitions": [{"topic": "t", "partitionIds": [0, 2]}],
        "transactionLastUpdateTimestampMs": LAST_UPDATE,
        "transactionStartTimestampMs": START,
        "clientTransactionVersion": 0,
    }
    assert "previousProducerId" not in value_json(0, ongoing())


def test_states_and_transitions() -> None:
    assert [s.state_name for s in TransactionState] == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ]
    assert TransactionState.from_name("PrepareEpochFence") is TransactionState.PREPARE_EPOCH_FENCE
    assert TransactionState.PREPARE_COMMIT.valid_previous_states == {TransactionState.ONGOING}
    assert TransactionState.COMPLETE_ABORT.expiration_allowed and not TransactionState.ONGOING.expiration_allowed


def test_records_a_kafka_37_broker_wrote() -> None:
    """ksqlDB's transactional id ``default_`` in __transaction_state-44: Empty, Ongoing, PrepareCommit,
    CompleteCommit, all value v0 (transaction.version 0), read back and rewritten to the same bytes."""
    log = fixture_path(
        "broker-logs", "itumelengmogase-cp77-kraft", "kafka-data", "__transaction_state-44", "00000000000000000000.log"
    )
    records = [r for batch in iter_batches(log.read_bytes()) for r in batch]
    states = []
    for record in records:
        assert record.key is not None and record.value is not None
        assert decode_key(record.key) == "default_"
        version, value = decode_value(record.value)
        assert version == 0
        assert encode_value(value, 0) == bytes(record.value)
        states.append(value.state)
    assert states == [
        TransactionState.EMPTY,
        TransactionState.ONGOING,
        TransactionState.PREPARE_COMMIT,
        TransactionState.COMPLETE_COMMIT,
    ]
    ongoing_value = decode_value(records[1].value)[1]
    assert ongoing_value.topic_partitions() == {("_confluent-ksql-default__command_topic", 0)}
    assert ongoing_value.transaction_timeout_ms == 60000
