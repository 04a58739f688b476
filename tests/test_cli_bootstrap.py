"""``kafkalog topics``, ``produce`` and ``consume`` with ``--bootstrap-server``, against a ``kafkalog serve``
subprocess (one per module), and the same commands' output offline (``--log-dir``) over the log dir that broker
wrote, once it is stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from brokertools import BrokerProcess
from kafkalog.cli import main


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(tmp_path_factory.mktemp("broker-cli"), {"num.partitions": "2"}).start()
    yield server
    assert server.stop() == 0, server.log


def test_topics_online_create_list_describe_alter_delete(broker) -> None:
    b = broker.bootstrap
    created = run(
        "topics", "--bootstrap-server", b, "--create", "--topic", "orders", "--partitions", "3",
        "--replication-factor", "1", "--config", "retention.ms=60000",
    )  # fmt: skip
    assert (created.exit_code, created.output) == (0, "Created topic orders.\n")
    assert run("topics", "--bootstrap-server", b, "--create", "--topic", "defaults").exit_code == 0
    assert run("topics", "--bootstrap-server", b, "--list").stdout.splitlines() == ["defaults", "orders"]
    described = run("topics", "--bootstrap-server", b, "--describe", "--topic", "orders").stdout.splitlines()
    assert described[0].startswith("Topic: orders\tTopicId: ")
    assert described[0].endswith("\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000")
    assert described[1:] == [
        f"\tTopic: orders\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(3)
    ]  # the offline lines' prefix; the log-dir facts (LogDir, offsets, segments) are offline only
    # no --partitions: the broker's num.partitions (2), as kafka-topics.sh
    assert "PartitionCount: 2\t" in run("topics", "--bootstrap-server", b, "--describe", "--topic", "defaults").stdout

    altered = run(
        "topics", "--bootstrap-server", b, "--alter", "--topic", "orders", "--partitions", "5",
        "--config", "segment.bytes=4096", "--delete-config", "retention.ms",
    )  # fmt: skip
    assert altered.exit_code == 0, altered.output
    described = run("topics", "--bootstrap-server", b, "--describe", "--topic", "orders").stdout.splitlines()
    assert described[0].endswith("\tPartitionCount: 5\tReplicationFactor: 1\tConfigs: segment.bytes=4096")
    assert len(described) == 6

    # the broker's refusals, one line each with Kafka's error name
    again = run("topics", "--bootstrap-server", b, "--create", "--topic", "orders")
    assert again.exit_code == 1 and "TopicAlreadyExistsError" in again.output and "Traceback" not in again.output
    three = run("topics", "--bootstrap-server", b, "--create", "--topic", "rf3", "--replication-factor", "3")
    assert three.exit_code == 1 and "InvalidReplicationFactorError" in three.output
    shrink = run("topics", "--bootstrap-server", b, "--alter", "--topic", "orders", "--partitions", "2")
    assert shrink.exit_code == 1 and "InvalidPartitionsError" in shrink.output
    bad_config = run("topics", "--bootstrap-server", b, "--alter", "--topic", "orders", "--config", "segment.bytes=13")
    assert bad_config.exit_code == 1 and "segment.bytes" in bad_config.output

    assert run("topics", "--bootstrap-server", b, "--delete", "--topic", "orders").output == (
        "Topic orders is marked for deletion.\n"
    )
    assert run("topics", "--bootstrap-server", b, "--delete", "--topic", "defaults").exit_code == 0
    missing = run("topics", "--bootstrap-server", b, "--delete", "--topic", "orders")
    # TopicCommand.java lists the topics first (ensureTopicExists): "Topic 'orders' does not exist as expected"
    assert missing.exit_code == 1 and missing.output == "Error: Topic 'orders' does not exist as expected\n"
    assert "orders" not in run("topics", "--bootstrap-server", b, "--list").stdout.split()


def test_consume_online_from_an_offset_and_a_timestamp(broker) -> None:
    b = broker.bootstrap
    assert run("topics", "--bootstrap-server", b, "--create", "--topic", "times", "--partitions", "2").exit_code == 0
    lines = "".join(json.dumps({"value": f"v{i}", "partition": 1, "timestamp": 1000 + i}) + "\n" for i in range(5))
    produced = run("produce", "--bootstrap-server", b, "--topic", "times", "--json", input=lines)
    assert produced.exit_code == 0 and "Produced 5 records to times." in produced.output
    common = ("consume", "--bootstrap-server", b, "--topic", "times", "--partition", "1")
    by_time = run(*common, "--timestamp", "1003", "--max-messages", "3", "--timeout-ms", "3000")
    assert by_time.stdout == "v3\nv4\n" and "Processed a total of 2 messages" in by_time.output
    by_offset = run(*common, "--offset", "1", "--max-messages", "2", "--print-key", "--timeout-ms", "20000")
    assert by_offset.stdout == "null\tv1\nnull\tv2\n"
    # a timestamp after every record starts at the end, as offline: nothing to print
    assert run(*common, "--timestamp", "99999", "--timeout-ms", "500").stdout == ""
    # and the default start is the end
    assert run(*common, "--timeout-ms", "500").stdout == ""


def test_produce_online_reports_what_the_broker_refused(broker) -> None:
    b = broker.bootstrap
    create = ("topics", "--bootstrap-server", b, "--create", "--topic", "small", "--partitions", "1")
    assert run(*create, "--config", "max.message.bytes=200").exit_code == 0
    result = run(
        "produce", "--bootstrap-server", b, "--topic", "small", "--request-required-acks", "1",
        input="short\n" + "x" * 600 + "\nshort again\n",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "Produced 2 records to small (partition 0 offsets 0-1)" in result.output
    assert "Not produced: 1 of the 3 lines read: line 2" in result.output
    assert "MessageSizeTooLargeError" in result.output
    consumed = run(
        "consume",
        "--bootstrap-server",
        b,
        "--topic",
        "small",
        "--from-beginning",
        "--max-messages",
        "2",
        "--timeout-ms",
        "20000",
    )
    # Both short lines, in either order: at acks=1 the producer is not idempotent, so the batch that the broker refused
    # as too large is split and retried while the next batch may already be in flight (as with Kafka's producer when
    # max.in.flight.requests.per.connection > 1 and idempotence is off).
    assert sorted(consumed.stdout.splitlines()) == ["short", "short again"]
    # a bad line stops the reading; what was sent before it is produced
    bad = run("produce", "--bootstrap-server", b, "--topic", "small", "--json", input='{"value": "ok"}\nnot json\n')
    assert bad.exit_code == 1 and "line 2 is not JSON" in bad.output
    assert "Produced 1 record to small before the error" in bad.output and "Not produced: 1 of the 2" in bad.output


@pytest.mark.parametrize(
    "args",
    [
        ("topics", "--list"),
        ("topics", "--list", "--log-dir", "{dir}", "--bootstrap-server", "127.0.0.1:1"),
        ("produce", "--topic", "t"),
        ("produce", "--topic", "t", "--log-dir", "{dir}", "--bootstrap-server", "127.0.0.1:1"),
        ("consume", "--topic", "t"),
        ("consume", "--topic", "t", "--log-dir", "{dir}", "--bootstrap-server", "127.0.0.1:1"),
        ("consume", "--topic", "t", "--log-dir", "{dir}", "--command-config", "{props}"),
        ("consume", "--topic", "t", "--log-dir", "{dir}", "--group", "g"),
    ],
)
def test_log_dir_or_bootstrap_server_exactly_one(tmp_path: Path, args: tuple[str, ...]) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=PLAINTEXT\n")
    result = run(*(a.format(dir=tmp_path, props=props) for a in args), input="")
    assert result.exit_code == 2, result.output
    assert "--bootstrap-server" in result.output and "Traceback" not in result.output


def test_topics_offline_alter_partitions_and_replication_factor(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t", "--replication-factor", "1").exit_code == 0
    three = run("topics", "--log-dir", d, "--create", "--topic", "u", "--replication-factor", "3")
    assert three.exit_code == 2 and "one replica" in three.output
    grown = run("topics", "--log-dir", d, "--alter", "--topic", "t", "--partitions", "3")
    assert (grown.exit_code, grown.output) == (0, "Topic t now has 3 partitions.\n")
    assert "PartitionCount: 3\t" in run("topics", "--log-dir", d, "--describe", "--topic", "t").stdout
    shrink = run("topics", "--log-dir", d, "--alter", "--topic", "t", "--partitions", "2")
    assert shrink.exit_code == 1 and "higher than the requested 2" in shrink.output


def test_command_config_client_properties_online(broker, tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=PLAINTEXT\n")
    listed = run("topics", "--bootstrap-server", broker.bootstrap, "--command-config", str(props), "--list")
    assert listed.exit_code == 0, listed.output
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n")
    refused = run("topics", "--bootstrap-server", broker.bootstrap, "--command-config", str(props), "--list")
    assert refused.exit_code == 1 and "sasl.jaas.config" in refused.output


def test_consume_online_with_a_group_commits_and_acks_zero_produces(broker) -> None:
    b = broker.bootstrap
    assert run("topics", "--bootstrap-server", b, "--create", "--topic", "grouped", "--partitions", "2").exit_code == 0
    lines = "".join(f"r{i}\n" for i in range(6))
    sent = run("produce", "--bootstrap-server", b, "--topic", "grouped", "--request-required-acks", "0", input=lines)
    assert sent.exit_code == 0 and "Produced 6 records to grouped." in sent.output, sent.output
    group = ("consume", "--bootstrap-server", b, "--topic", "grouped", "--group", "readers")
    first = run(*group, "--from-beginning", "--max-messages", "6", "--timeout-ms", "20000")
    assert first.exit_code == 0, first.output
    assert sorted(first.stdout.splitlines()) == [f"r{i}" for i in range(6)]
    # the group's offsets were committed: a second member of it starts after them
    again = run(*group, "--from-beginning", "--timeout-ms", "1500")
    assert again.exit_code == 0 and again.stdout == "", again.output
    described = run("consumer-groups", "--bootstrap-server", b, "--describe", "--group", "readers")
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith("readers ")]
    assert sorted((r[2], r[3], r[5]) for r in rows) == [("0", "3", "0"), ("1", "3", "0")], described.output
    both = run(*group, "--partition", "0")
    assert both.exit_code == 2 and "--group cannot be used with --partition" in both.output


def test_produce_online_then_consume_online_and_offline_alike(broker) -> None:
    """Runs last: it stops the module's broker to read its log dir offline."""
    b = broker.bootstrap
    assert run("topics", "--bootstrap-server", b, "--create", "--topic", "t", "--partitions", "1").exit_code == 0
    assert run("topics", "--bootstrap-server", b, "--create", "--topic", "spread", "--partitions", "3").exit_code == 0
    lines = "".join(f"user-{i}:event {i}\n" for i in range(40))
    for topic in ("t", "spread"):
        produced = run(
            "produce", "--bootstrap-server", b, "--topic", topic, "--key-separator", ":", "--header", "source=cli",
            "--compression-codec", "lz4", input=lines,
        )  # fmt: skip
        assert produced.exit_code == 0, produced.output
        assert f"Produced 40 records to {topic}." in produced.output
    options = [("--print-key",), ("--json",), ("--json", "--isolation-level", "read_committed")]
    online = {}
    for extra in options:
        for topic in ("t", "spread"):
            got = run("consume", "--bootstrap-server", b, "--topic", topic, "--from-beginning",
                      "--max-messages", "40", "--timeout-ms", "20000", *extra)  # fmt: skip
            assert got.exit_code == 0, got.output
            online[topic, extra] = got.stdout
    described_online = run("topics", "--bootstrap-server", b, "--describe", "--topic", "spread").stdout.splitlines()
    assert broker.stop() == 0, broker.log

    d = str(broker.log_dir)
    for extra in options:
        for topic in ("t", "spread"):
            got = run("consume", "--log-dir", d, "--topic", topic, "--from-beginning", *extra)
            assert got.exit_code == 0, got.output
            if topic == "t":  # one partition: the same lines in the same order
                assert got.stdout == online[topic, extra]
            else:  # several: offline reads them one after another, a consumer interleaves them
                assert sorted(got.stdout.splitlines()) == sorted(online[topic, extra].splitlines())
    assert online["t", ("--print-key",)].splitlines() == [f"user-{i}\tevent {i}" for i in range(40)]
    first = json.loads(online["t", ("--json",)].splitlines()[0])
    assert first["headers"] == [{"key": "source", "value": "cli"}] and first["offset"] == 0
    described = run("topics", "--log-dir", d, "--describe", "--topic", "spread").stdout.splitlines()
    assert described[0] == described_online[0]  # the same TopicId, counts and configs
    assert [line.split("\tLogDir: ")[0] for line in described[1:]] == described_online[1:]
