"""``kafkalog transactions`` (kafka-transactions.sh) against ``kafkalog serve``, run as a separate process.

Output formats are Kafka's TransactionsCommand.java (tools/src/main/java/org/apache/kafka/tools/): prettyPrintTable
pads each value to its column's width and follows it with a tab; errors are ``<what>: <reason>. Enable debug
logging for additional detail.`` on stderr with exit status 1. Expected values come from what the test's producers
wrote, never from the command's own output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from brokertools import REPO, BrokerProcess
from kafkalog.cli import main
from kafkalog.cli.transactions import table
from kafkalog.manager import LogManager
from kafkalog.record import RecordBatchBuilder


def kafkalog(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run(
        [sys.executable, "-c", "from kafkalog.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def rows(stdout: str) -> list[list[str]]:
    """The table's cells: tab-separated, each padded to its column's width."""
    return [[cell.rstrip() for cell in line.split("\t")[:-1]] for line in stdout.splitlines()]


def test_table_is_kafkas_pretty_print() -> None:
    assert table(["A", "Long"], [["xyz", "1"], ["", "22"]]) == "A  \tLong\t\nxyz\t1   \t\n   \t22  \t\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["find-hanging"],
            "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search",
        ),
        (["find-hanging", "--broker-id", "0", "--partition", "1"], "The --partition argument requires --topic"),
        (
            ["abort", "--topic", "t", "--partition", "0"],
            "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) "
            "or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)",
        ),
        (
            ["abort", "--topic", "t", "--partition", "0", "--producer-id", "5"],
            "Missing required argument --producer-epoch",
        ),
        (
            ["abort", "--topic", "t", "--partition", "0", "--producer-id", "5", "--producer-epoch", "1"],
            "Missing required argument --coordinator-epoch",
        ),
    ],
)
def test_argument_errors(args: list[str], message: str) -> None:
    # checked before connecting: no broker listens on port 1
    result = CliRunner().invoke(main, ["transactions", "--bootstrap-server", "127.0.0.1:1", *args])
    assert result.exit_code == 1
    assert message in result.stderr


def test_bootstrap_server_is_required() -> None:
    result = CliRunner().invoke(main, ["transactions", "list"])
    assert result.exit_code == 2 and "--bootstrap-server" in result.stderr


# ----- against a broker --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(tmp_path_factory.mktemp("cli-transactions"), {"num.partitions": "1"}).start()
    yield server
    assert server.stop() == 0, server.log


def test_describe_producers(broker) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all")
    try:
        for i in range(3):
            producer.send("dp", value=b"v%d" % i, partition=0, timestamp_ms=1_700_000_000_000 + i).get(timeout=30)
        pid = producer._transaction_manager.producer_id_and_epoch
    finally:
        producer.close()
    # options after the command work as well as before it
    result = kafkalog(
        "transactions",
        "describe-producers",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        "dp",
        "--partition",
        "0",
    )
    assert result.returncode == 0, result.stderr
    assert rows(result.stdout) == [
        [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        [str(pid.producer_id), str(pid.epoch), "-1", "2", "1700000000002", "None"],
    ]
    lines = result.stdout.splitlines()
    assert lines[0].index("\t") == len("ProducerId") and lines[1].endswith("None" + " " * 25 + "\t")


def test_describe_producers_of_an_unknown_partition(broker) -> None:
    result = kafkalog(
        "transactions",
        "--bootstrap-server",
        broker.bootstrap,
        "describe-producers",
        "--topic",
        "nope",
        "--partition",
        "0",
    )
    assert result.returncode == 1
    assert result.stderr.startswith("Failed to describe producers for partition nope-0 on leader: ")
    assert result.stderr.rstrip().endswith(". Enable debug logging for additional detail.")


# ----- hanging transactions: found, then aborted ------------------------------------------------------------------
HANGING_PID, HANGING_EPOCH = 4242, 3
OLD_PID = 4343


def _batch(records: int, ts: int, pid: int = -1, epoch: int = -1, transactional: bool = False) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=0 if pid >= 0 else -1, is_transactional=transactional
    )
    for i in range(records):
        builder.append(b"k", b"v%d" % i, timestamp=ts)
    return builder.build()


@pytest.fixture(scope="module")
def hanging(tmp_path_factory):
    """A log dir whose partitions hold transactions no coordinator knows (their producer's coordinator state is
    gone, as after a lost __transaction_state or a bug), written before the broker starts: the records' last
    timestamp is 20 minutes old, past the default 15-minute maximum transaction timeout."""
    log_dir = tmp_path_factory.mktemp("hanging")
    old = int(time.time() * 1000) - 20 * 60_000
    with LogManager([log_dir], {"log.dirs": str(log_dir)}) as manager:
        manager.create_topic("hang", 1)
        manager.create_topic("hang2", 1)
        part = manager.replica_manager.get_partition("hang", 0)
        part.append_records_to_leader(_batch(2, old), -1)  # offsets 0-1
        part.append_records_to_leader(_batch(3, old, HANGING_PID, HANGING_EPOCH, transactional=True), -1)  # 2-4
        part.append_records_to_leader(_batch(1, old), -1)  # offset 5
        manager.replica_manager.get_partition("hang2", 0).append_records_to_leader(
            _batch(1, old, OLD_PID, 0, transactional=True), -1
        )  # offset 0
    server = BrokerProcess(log_dir).start()
    yield server, old
    assert server.stop() == 0, server.log


def _committed_end(bootstrap: str, topic: str) -> int:
    """The last stable offset, as a read_committed consumer's end offset (ListOffsets with isolation level 1)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        return consumer.end_offsets([KTP(topic, 0)])[KTP(topic, 0)]
    finally:
        consumer.close()


FIND_HEADERS = [
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
]


def test_find_hanging_then_abort(hanging) -> None:
    broker, old = hanging
    bootstrap = broker.bootstrap
    assert _committed_end(bootstrap, "hang") == 2  # the open transaction at offset 2 holds the LSO back
    found = kafkalog("transactions", "--bootstrap-server", bootstrap, "find-hanging", "--topic", "hang")
    assert found.returncode == 0, found.stderr
    (header, row) = rows(found.stdout)
    assert header == FIND_HEADERS
    assert row[:7] == ["hang", "0", str(HANGING_PID), str(HANGING_EPOCH), "-1", "2", str(old)]
    assert int(row[7]) in (20, 21)  # minutes since the last record
    # By broker: every partition with a replica on broker 0.
    by_broker = kafkalog("transactions", "--bootstrap-server", bootstrap, "find-hanging", "--broker-id", "0")
    assert by_broker.returncode == 0, by_broker.stderr
    assert sorted(r[:6] for r in rows(by_broker.stdout)[1:]) == [
        ["hang", "0", str(HANGING_PID), str(HANGING_EPOCH), "-1", "2"],
        ["hang2", "0", str(OLD_PID), "0", "-1", "0"],
    ]
    # With a maximum timeout longer than the transaction's age, nothing is suspect yet.
    patient = kafkalog(
        "transactions",
        "--bootstrap-server",
        bootstrap,
        "find-hanging",
        "--topic",
        "hang",
        "--max-transaction-timeout",
        "30",
    )
    assert rows(patient.stdout) == [FIND_HEADERS]

    wrong = kafkalog(
        "transactions",
        "--bootstrap-server",
        bootstrap,
        "abort",
        "--topic",
        "hang",
        "--partition",
        "0",
        "--start-offset",
        "3",
    )
    assert wrong.returncode == 1
    assert wrong.stderr.strip() == "Could not find any open transactions starting at offset 3 on partition hang-0"

    aborted = kafkalog(
        "transactions",
        "--bootstrap-server",
        bootstrap,
        "abort",
        "--topic",
        "hang",
        "--partition",
        "0",
        "--start-offset",
        "2",
    )
    assert aborted.returncode == 0, aborted.stderr
    assert aborted.stdout == ""  # Kafka's tool prints nothing on success
    # The ABORT marker went to offset 6: the LSO moves to the log end, the aborted records stay hidden.
    assert _committed_end(bootstrap, "hang") == 7
    described = kafkalog(
        "transactions", "--bootstrap-server", bootstrap, "describe-producers", "--topic", "hang", "--partition", "0"
    )
    (_, producer) = rows(described.stdout)
    assert producer[0:3] == [str(HANGING_PID), str(HANGING_EPOCH), "0"] and producer[5] == "None"
    again = kafkalog("transactions", "--bootstrap-server", bootstrap, "find-hanging", "--topic", "hang")
    assert rows(again.stdout) == [FIND_HEADERS]

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", consumer_timeout_ms=3000)
    consumer.assign([KTP("hang", 0)])
    consumer.seek_to_beginning()
    assert [m.offset for m in consumer] == [0, 1, 5]
    consumer.close()


def test_abort_by_producer_id_for_older_brokers(hanging) -> None:
    broker, _ = hanging
    assert _committed_end(broker.bootstrap, "hang2") == 0
    # coordinator epoch -1 (as DescribeProducers shows for a producer never given a marker) is sent as 0
    result = kafkalog(
        "transactions",
        "--bootstrap-server",
        broker.bootstrap,
        "abort",
        "--topic",
        "hang2",
        "--partition",
        "0",
        "--producer-id",
        str(OLD_PID),
        "--producer-epoch",
        "0",
        "--coordinator-epoch",
        "-1",
    )
    assert result.returncode == 0, result.stderr
    assert _committed_end(broker.bootstrap, "hang2") == 2


# ----- list and describe ------------------------------------------------------------------------------------------
def test_list_and_describe_an_ongoing_then_committed_transaction(broker) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("ledger", 2, 1)])["ledger"].result(30)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "lister", "transaction.timeout.ms": 50000}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    before = int(time.time() * 1000)
    producer.produce("ledger", b"a", partition=1)
    producer.produce("ledger", b"b", partition=0)
    producer.flush(30)
    listed = kafkalog("transactions", "--bootstrap-server", broker.bootstrap, "list")
    assert listed.returncode == 0, listed.stderr
    table_rows = rows(listed.stdout)
    assert table_rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    (mine,) = [r for r in table_rows[1:] if r[0] == "lister"]
    assert mine[1] == "0" and mine[3] == "Ongoing"
    producer_id = mine[2]

    described = kafkalog(
        "transactions", "--bootstrap-server", broker.bootstrap, "describe", "--transactional-id", "lister"
    )
    assert described.returncode == 0, described.stderr
    header, row = rows(described.stdout)
    assert header == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    assert row[:3] == ["0", "lister", producer_id] and row[4:6] == ["Ongoing", "50000"]
    assert before - 5000 <= int(row[6]) <= int(time.time() * 1000) and int(row[7]) >= 0
    # The Java client's HashSet order, by hand: "ledger".hashCode() = 0xbe09ad69; TopicPartition.hashCode() =
    # 31 * (31 + p) + that = 0xbe09b12a (p=0), 0xbe09b149 (p=1); HashMap spreads h ^ (h >>> 16), whose low 16 bits
    # are 0xb12a ^ 0xbe09 = 0x0f23 (bucket 3 of 16) and 0xb149 ^ 0xbe09 = 0x0f40 (bucket 0): ledger-1 comes first.
    assert row[8] == "ledger-1,ledger-0"
    producer.commit_transaction(30)
    after = kafkalog("transactions", "--bootstrap-server", broker.bootstrap, "describe", "--transactional-id", "lister")
    assert rows(after.stdout)[1][4] == "CompleteCommit"

    missing = kafkalog(
        "transactions", "--bootstrap-server", broker.bootstrap, "describe", "--transactional-id", "nobody"
    )
    assert missing.returncode == 1
    assert missing.stderr.startswith("Failed to describe transaction state of transactional-id `nobody`: ")
