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

import pytest
from click.testing import CliRunner

from brokertools import REPO, BrokerProcess
from kafkalog.cli import main
from kafkalog.cli.transactions import table


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
