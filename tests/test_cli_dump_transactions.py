"""``kafkalog dump --transaction-log-decoder`` on ``__transaction_state`` segments.

The format is Kafka 3.x's kafka-dump-log.sh: core/src/main/scala/kafka/tools/DumpLogSegments.scala's
TransactionLogMessageParser calls core/src/main/scala/kafka/coordinator/transaction/TransactionLog.scala's
``formatRecordKeyAndValue``, which prints

    key: transaction_metadata::transactionalId=<id>
    payload: producerId:<id>,producerEpoch:<e>,state=<State>,partitions=[<t-p>,...],txnLastUpdateTimestamp=<ms>,
             txnTimeoutMs=<ms>     (one line; "<DELETE>" for a tombstone; "unknown::version=<n>" for a foreign key)

Expected values are read off the bytes by hand (xxd of the real Kafka 3.7 segment; struct-packed records here)
and the partition order from Java's and Scala's hash rules worked out by hand, never from the dump's own output.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from click.testing import CliRunner

from conftest import fixture_path
from kafkalog.cli import main
from kafkalog.record import RecordBatchBuilder

KSQL = ("broker-logs", "itumelengmogase-cp77-kraft", "kafka-data", "__transaction_state-44", "00000000000000000000.log")
SEG0 = "00000000000000000000"


def run(*args: str):
    return CliRunner().invoke(main, ["dump", *args])


def record_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("| offset:")]


def test_kafka_37_transaction_state_segment() -> None:
    """A Confluent Platform 7.7 (Kafka 3.7) broker's __transaction_state-44: ksqlDB's transactional id ``default_``
    going Empty -> Ongoing -> PrepareCommit -> CompleteCommit on one partition. Values read from the segment with
    xxd: producer id 0, epoch 0, timeout 0xea60 = 60000, last-update timestamps 0x192764aec98, 0x192764aef33,
    0x192764aefd2 and 0x192764aefdf; create times 0x192764aecaf, 0x192764aef35, 0x192764aefd5, 0x192764af02e."""
    result = run("--transaction-log-decoder", "--files", str(fixture_path(*KSQL)))
    assert result.exit_code == 0, result.output
    topic = "_confluent-ksql-default__command_topic"
    expected = [
        (0, 0x192764AECAF, 37, "Empty", "", 0x192764AEC98),
        (1, 0x192764AEF35, 85, "Ongoing", f"{topic}-0", 0x192764AEF33),
        (2, 0x192764AEFD5, 85, "PrepareCommit", f"{topic}-0", 0x192764AEFD2),
        (3, 0x192764AF02E, 37, "CompleteCommit", "", 0x192764AEFDF),
    ]
    lines = record_lines(result.output)
    assert lines == [
        f"| offset: {offset} CreateTime: {create} keySize: 12 valueSize: {size} sequence: -1 headerKeys: [] "
        f"key: transaction_metadata::transactionalId=default_ payload: producerId:0,producerEpoch:0,"
        f"state={state},partitions=[{parts}],txnLastUpdateTimestamp={update},txnTimeoutMs=60000"
        for offset, create, size, state, parts, update in expected
    ]


# ----- records laid out by hand ---------------------------------------------------------------------------------
def _key(transactional_id: str, version: int = 0) -> bytes:
    raw = transactional_id.encode()
    return struct.pack(">hh", version, len(raw)) + raw


def _value_v0(pid: int, epoch: int, timeout: int, status: int, partitions, last: int, start: int) -> bytes:
    body = struct.pack(">hqhib", 0, pid, epoch, timeout, status)
    if partitions is None:
        body += struct.pack(">i", -1)
    else:
        body += struct.pack(">i", len(partitions))
        for topic, ids in partitions:
            body += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(f">i{len(ids)}i", len(ids), *ids)
    return body + struct.pack(">qq", last, start)


def _segment(tmp_path: Path, records: list[tuple[bytes | None, bytes | None]]) -> Path:
    builder = RecordBatchBuilder()
    for key, value in records:
        builder.append(key, value, timestamp=1_000)
    path = tmp_path / f"{SEG0}.log"
    path.write_bytes(builder.build())
    return path


def test_states_partitions_tombstones_and_unknown_versions(tmp_path: Path) -> None:
    path = _segment(
        tmp_path,
        [
            # topic "a": Java hashCode 97; TopicPartition hashes 31*(31+p)+97 = 1058 (a-0), 1089 (a-1); Scala's
            # 16-bucket HashSet puts them in buckets 1058 & 15 = 2 and 1089 & 15 = 1: it iterates a-1 first.
            (_key("tx-1"), _value_v0(42, 3, 30_000, 1, [("a", [0, 1])], 5_000, 4_000)),
            # topic "t" (hashCode 116): t-0 1077 -> bucket 5, t-1 1108 -> 4, t-2 1139 -> 3: printed t-2, t-1, t-0.
            (_key("tx-2"), _value_v0(43, 0, 60_000, 3, [("t", [0, 1, 2])], 6_000, 5_500)),
            (_key("tx-1"), None),  # tombstone
            (_key("other", version=1), b"\x00\x00whatever"),  # not a transaction log key
            (_key("tx-3"), b"\x00\x05" + b"\x00" * 40),  # a value version this schema does not have
            (_key("tx-4"), _value_v0(44, 1, 60_000, 9, None, 7_000, -1)),  # an unknown state id
            (_key("tx-5"), _value_v0(45, 0, 60_000, 0, [("ignored", [0])], 8_000, -1)),  # Empty: partitions unread
        ],
    )
    result = run("--transaction-log-decoder", "--files", str(path))
    assert result.exit_code == 0, result.output
    tails = [line.split(" headerKeys: [] ", 1)[1] for line in record_lines(result.output)]
    assert tails == [
        "key: transaction_metadata::transactionalId=tx-1 payload: producerId:42,producerEpoch:3,state=Ongoing,"
        "partitions=[a-1,a-0],txnLastUpdateTimestamp=5000,txnTimeoutMs=30000",
        "key: transaction_metadata::transactionalId=tx-2 payload: producerId:43,producerEpoch:0,state=PrepareAbort,"
        "partitions=[t-2,t-1,t-0],txnLastUpdateTimestamp=6000,txnTimeoutMs=60000",
        "key: transaction_metadata::transactionalId=tx-1 payload: <DELETE>",
        "key: unknown::version=1",
        "key: transaction_metadata::transactionalId=tx-3 payload: Error at offset 4, skipping. "
        "Unknown version 5 from the transaction log message value",
        "key: transaction_metadata::transactionalId=tx-4 payload: Error at offset 5, skipping. "
        "Unknown transaction state id 9 from the transaction status message",
        "key: transaction_metadata::transactionalId=tx-5 payload: producerId:45,producerEpoch:0,state=Empty,"
        "partitions=[],txnLastUpdateTimestamp=8000,txnTimeoutMs=60000",
    ]


def test_partition_order_matches_real_kafka_dumps(tmp_path: Path) -> None:
    """Two lines printed by real Kafka 3.x brokers' kafka-dump-log.sh for consume-transform-produce applications
    (published in public write-ups of Kafka transactions): the same two kinds of partitions, in opposite orders,
    ``partitions=[output-topic-0,__consumer_offsets-12]`` and ``partitions=[__consumer_offsets-12,wc-output-0]``.
    The order is the Scala HashSet's, whatever order the record lists the topics in."""
    for output_topic, expected in (
        ("output-topic", "[output-topic-0,__consumer_offsets-12]"),
        ("wc-output", "[__consumer_offsets-12,wc-output-0]"),
    ):
        for topics in (
            [(output_topic, [0]), ("__consumer_offsets", [12])],
            [("__consumer_offsets", [12]), (output_topic, [0])],
        ):
            path = _segment(tmp_path, [(_key("kafka-txn-0"), _value_v0(0, 0, 60_000, 1, topics, 1, 1))])
            (line,) = record_lines(run("--transaction-log-decoder", "--files", str(path)).output)
            assert f",partitions={expected}," in line


def test_json_output(tmp_path: Path) -> None:
    path = _segment(
        tmp_path,
        [(_key("tx-1"), _value_v0(42, 3, 30_000, 1, [("a", [0, 1])], 5_000, 4_000)), (_key("tx-1"), None)],
    )
    result = run("--transaction-log-decoder", "--json", "--files", str(path))
    assert result.exit_code == 0, result.output
    records = [obj for obj in map(json.loads, result.output.splitlines()) if obj["type"] == "record"]
    assert [r["key"] for r in records] == [{"transactionalId": "tx-1"}] * 2
    assert records[0]["payload"] == {
        "version": "0",
        "data": {
            "producerId": 42,
            "producerEpoch": 3,
            "transactionTimeoutMs": 30_000,
            "transactionStatus": 1,
            "transactionPartitions": [{"topic": "a", "partitionIds": [0, 1]}],
            "transactionLastUpdateTimestampMs": 5_000,
            "transactionStartTimestampMs": 4_000,
        },
    }
    assert records[1]["payload"] == "<DELETE>"


def test_a_record_without_a_key_stops_the_dump(tmp_path: Path) -> None:
    path = _segment(tmp_path, [(None, _value_v0(1, 0, 1, 0, None, 1, -1))])
    result = run("--transaction-log-decoder", "--files", str(path))
    assert result.exit_code == 1
    assert "Failed to decode message at offset 0 using transaction log decoder (message had a missing key)" in (
        result.stderr
    )


# ----- files written by kafkalog serve ----------------------------------------------------------------------------
def test_transaction_state_written_by_the_broker(tmp_path: Path) -> None:
    """A confluent-kafka transactional producer commits one transaction and aborts the next against kafkalog serve;
    the broker's __transaction_state segment, dumped, shows the coordinator's state machine as Kafka's would:
    Empty (InitProducerId), Ongoing with the partition (AddPartitionsToTxn), PrepareCommit, CompleteCommit, then
    Ongoing, PrepareAbort, CompleteAbort, all for the producer id and timeout the client used."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from brokertools import BrokerProcess

    log_dir = tmp_path / "logs"
    with BrokerProcess(log_dir, {"transaction.state.log.num.partitions": "1"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(30)
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "transactional.id": "dump-me", "transaction.timeout.ms": 45000}
        )
        producer.init_transactions(30)
        for commit in (True, False):
            producer.begin_transaction()
            producer.produce("orders", b"v", partition=0)
            producer.flush(30)
            (producer.commit_transaction if commit else producer.abort_transaction)(30)
    segment = log_dir / "__transaction_state-0" / f"{SEG0}.log"
    result = run("--transaction-log-decoder", "--files", str(segment))
    assert result.exit_code == 0, result.output
    payloads = []
    for line in record_lines(result.output):
        key, payload = line.split(" key: ", 1)[1].split(" payload: ")
        assert key == "transaction_metadata::transactionalId=dump-me"
        fields = dict(
            part.replace(":", "=", 1).split("=", 1) for part in payload.split(",") if "=" in part or ":" in part
        )
        payloads.append(fields)
    states = [p["state"] for p in payloads]
    assert states == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing", "PrepareAbort", "CompleteAbort"]
    assert {p["txnTimeoutMs"] for p in payloads} == {"45000"}
    assert len({p["producerId"] for p in payloads}) == 1
    assert [p["partitions"] for p in payloads] == [
        "[]",
        "[orders-0]",
        "[orders-0]",
        "[]",
        "[orders-0]",
        "[orders-0]",
        "[]",
    ]
