"""``kafkalog consumer-groups`` against ``kafkalog serve``: list, describe (lag, members, state), reset, delete.

The expected lag is computed from what the test produced and committed (records per partition minus the offset
the test committed), not read back from the broker.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from brokertools import BrokerProcess, knows_its_topic, wait_until
from kafkalog.cli import main as cli

OVERRIDES = {
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "3",
}
PRODUCED = {0: 10, 1: 20, 2: 30}  # records per partition of "lagged"
COMMITTED = {0: 4, 1: 20}  # what the group commits; partition 2 gets no commit


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(tmp_path_factory.mktemp("consumer-groups"), OVERRIDES).start()
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import OffsetAndMetadata

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic("lagged", 3, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    for partition, count in PRODUCED.items():
        for i in range(count):
            producer.send("lagged", f"{partition}-{i}".encode(), partition=partition)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="lag-group", enable_auto_commit=False)
    consumer.commit({TopicPartition("lagged", p): OffsetAndMetadata(o, "", -1) for p, o in COMMITTED.items()})
    consumer.close()
    yield server
    assert server.stop() == 0, server.log


def run(broker, *args: str):
    result = CliRunner().invoke(cli, ["consumer-groups", "--bootstrap-server", broker.bootstrap, *args])
    return result


def rows(output: str, header_first: str = "GROUP") -> list[list[str]]:
    lines = [line.split() for line in output.splitlines() if line.strip()]
    start = next(i for i, cells in enumerate(lines) if cells and cells[0] == header_first)
    return lines[start + 1 :]


def test_list_and_describe_lag_of_an_inactive_group(broker):
    listed = run(broker, "--list")
    assert listed.exit_code == 0 and "lag-group" in listed.stdout.split()
    described = run(broker, "--describe", "--group", "lag-group")
    assert described.exit_code == 0, described.output
    assert "Consumer group 'lag-group' has no active members." in described.stdout
    header = next(line for line in described.stdout.splitlines() if line.startswith("GROUP"))
    assert header.split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    table = {int(r[2]): r for r in rows(described.stdout)}
    assert set(table) == set(COMMITTED)  # no member: only partitions with a committed offset
    for partition, committed in COMMITTED.items():
        expected_lag = PRODUCED[partition] - committed
        assert table[partition] == [
            "lag-group",
            "lagged",
            str(partition),
            str(committed),
            str(PRODUCED[partition]),
            str(expected_lag),
            "-",
            "-",
            "-",
        ]


def test_describe_members_state_and_reset_refused_while_active(broker, tmp_path):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        "lagged",
        bootstrap_servers=broker.bootstrap,
        group_id="active-group",
        client_id="my-client",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10000,  # the machine may be loaded: no need for a short session here
        heartbeat_interval_ms=1000,
    )
    try:
        knows_its_topic(consumer, "lagged")
        assert wait_until(lambda: bool(consumer.poll(timeout_ms=100) is not None and consumer.assignment()), 30)
        consumer.commit()
        described = run(broker, "--describe", "--group", "active-group")
        table = rows(described.stdout)
        assert sorted(int(r[2]) for r in table) == [0, 1, 2]
        assert all(r[6].startswith("my-client-") and r[7] == "/127.0.0.1" and r[8] == "my-client" for r in table)
        members = run(broker, "--describe", "--group", "active-group", "--members", "--verbose")
        (member,) = rows(members.stdout)
        assert member[2:] == ["/127.0.0.1", "my-client", "3", "lagged(0,1,2)"]
        state = run(broker, "--describe", "--group", "active-group", "--state")
        (row,) = rows(state.stdout)
        assert row[0] == "active-group" and row[-3:] == ["range", "Stable", "1"]
        refused = run(
            broker, "--reset-offsets", "--group", "active-group", "--all-topics", "--to-earliest", "--execute"
        )
        assert refused.exit_code != 0
        assert "can only be reset if the group 'active-group' is inactive, but the current state is Stable" in (
            refused.output
        )
    finally:
        consumer.close()


def committed_offsets(broker, group: str) -> dict[int, int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        return {tp.partition: om.offset for tp, om in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def test_reset_offsets_scenarios_dry_run_and_execute(broker):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.alter_group_offsets(
        "reset-group", {TopicPartition("lagged", p): OffsetAndMetadata(7, "", -1) for p in range(3)}
    )
    admin.close()

    def reset(*args: str) -> dict[int, int]:
        result = run(broker, "--reset-offsets", "--group", "reset-group", "--topic", "lagged", *args)
        assert result.exit_code == 0, result.output
        return {int(r[2]): int(r[3]) for r in rows(result.stdout)}

    dry = run(broker, "--reset-offsets", "--group", "reset-group", "--topic", "lagged", "--to-earliest")
    assert "No action will be performed as the --execute option is missing" in dry.stderr
    assert {int(r[2]): int(r[3]) for r in rows(dry.stdout)} == {0: 0, 1: 0, 2: 0}
    assert committed_offsets(broker, "reset-group") == {0: 7, 1: 7, 2: 7}  # a dry run changes nothing

    assert reset("--to-latest", "--dry-run") == PRODUCED
    assert reset("--shift-by", "-3", "--execute") == {0: 4, 1: 4, 2: 4}
    assert committed_offsets(broker, "reset-group") == {0: 4, 1: 4, 2: 4}
    assert reset("--to-offset", "15", "--execute") == {0: 10, 1: 15, 2: 15}  # clamped to each log end
    assert reset("--shift-by", "100", "--execute") == PRODUCED
    assert reset("--to-datetime", "2999-01-01T00:00:00.000", "--execute") == PRODUCED  # no record that late
    assert reset("--to-datetime", "2000-01-01T00:00:00.000Z", "--execute") == {0: 0, 1: 0, 2: 0}
    assert committed_offsets(broker, "reset-group") == {0: 0, 1: 0, 2: 0}
    only = run(broker, "--reset-offsets", "--group", "reset-group", "--topic", "lagged:1", "--to-latest", "--execute")
    assert {int(r[2]): int(r[3]) for r in rows(only.stdout)} == {1: 20}
    assert committed_offsets(broker, "reset-group") == {0: 0, 1: 20, 2: 0}


def test_delete_groups_and_bad_usage(broker):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.alter_group_offsets("doomed", {TopicPartition("lagged", 0): OffsetAndMetadata(1, "", -1)})
    admin.close()
    deleted = run(broker, "--delete", "--group", "doomed")
    assert (
        deleted.exit_code == 0 and "Deletion of requested consumer groups ('doomed') was successful." in deleted.stdout
    )
    gone = run(broker, "--describe", "--group", "doomed")
    assert "Error: Consumer group 'doomed' does not exist." in gone.stderr
    missing = run(broker, "--delete", "--group", "never-was")
    assert missing.exit_code != 0 and re.search(r"Group 'never-was' could not be deleted due to: \w+", missing.stderr)
    assert run(broker, "--describe").exit_code == 2  # needs --group or --all-groups
    assert run(broker, "--list", "--describe").exit_code == 2
    both = run(broker, "--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest")
    assert both.exit_code == 2 and "exactly one of" in both.output


def test_describe_a_group_a_real_kafka_broker_left_in_its_log_dir(tmp_path):
    """kafkalog serve on a copy of a Kafka 2.0 broker's log dir: the group Kafka stored in __consumer_offsets-28
    (never seen by kafkalog) is described with its member and committed offset. The expected log end offset is
    the high watermark Kafka itself checkpointed for debug_topic-0 (replication-offset-checkpoint: 40)."""
    import shutil

    from conftest import fixture_path

    source = fixture_path("broker-logs", "william0423-kafka", "kafka-logs")
    target = tmp_path / "kafka-logs"
    shutil.copytree(source, target)
    checkpoint = (source / "replication-offset-checkpoint").read_text().split("\n")
    kafka_hw = next(int(line.split()[2]) for line in checkpoint if line.startswith("debug_topic 0 "))
    server = BrokerProcess(target, OVERRIDES).start()
    try:
        assert "debug-consumer-group" in run(server, "--list").stdout.split()
        described = run(server, "--describe", "--group", "debug-consumer-group")
        assert described.exit_code == 0, described.output
        assert rows(described.stdout) == [
            [
                "debug-consumer-group",
                "debug_topic",
                "0",
                "40",
                str(kafka_hw),
                str(kafka_hw - 40),
                "consumer-1-61400dcb-1b93-4b4e-8891-5ae75e419305",
                "/127.0.0.1",
                "consumer-1",
            ]
        ]
    finally:
        assert server.stop() == 0, server.log


def test_describe_a_kip848_group_members_lag_and_state(broker, tmp_path):
    """A consumer-protocol (KIP-848) group, run by librdkafka with group.protocol=consumer, is invisible to the
    classic DescribeGroups (v0-5 answer Dead, as Kafka 4.x does); the command then asks ConsumerGroupDescribe, as
    Kafka's admin client does, and shows its members, assignment, state and lag. The expected offsets and lag are
    the test's own counts of what it produced."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.protocol.admin import DescribeGroupsRequest

    from brokertools import RawClient
    from kafkalog.broker.messages import ConsumerGroupDescribeRequest

    topic, group, produced = "kip848", "kip848-group", {0: 3, 1: 5, 2: 7, 3: 9}
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 4, 1)])
    admin.close()

    def produce(counts: dict[int, int]) -> None:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        for partition, count in counts.items():
            for i in range(count):
                producer.send(topic, f"{partition}-{i}".encode(), partition=partition)
        producer.flush()
        producer.close()

    produce(produced)
    tests = Path(__file__).parent
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tests.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    members = [
        subprocess.Popen(
            [
                sys.executable,
                str(tests / "group_member.py"),
                broker.bootstrap,
                group,
                topic,
                str(tmp_path / n),
                "consumer",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for n in ("m1", "m2")
    ]

    def offsets_table() -> list[list[str]]:
        described = run(broker, "--describe", "--group", group)
        return rows(described.stdout) if described.exit_code == 0 and "GROUP" in described.stdout else []

    def settled() -> bool:
        table = offsets_table()
        return (
            len(table) == 4
            and all(r[3] == str(produced[int(r[2])]) and r[6] != "-" for r in table)
            and len({r[6] for r in table}) == 2
        )

    try:
        assert wait_until(settled, 60), run(broker, "--describe", "--group", group).output
        table = offsets_table()
        assert [(int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in table] == [
            (p, n, n, 0) for p, n in sorted(produced.items())
        ]
        assert group in run(broker, "--list").stdout.split()
        members_out = rows(run(broker, "--describe", "--group", group, "--members", "--verbose").stdout)
        assert len(members_out) == 2 and sum(int(m[4]) for m in members_out) == 4
        assert all(m[2] == "/127.0.0.1" for m in members_out)
        (state,) = rows(run(broker, "--describe", "--group", group, "--state").stdout)
        assert state[0] == group and state[-3:] == ["uniform", "Stable", "2"]
        with RawClient(broker.bootstrap) as client:
            classic = client.call(
                DescribeGroupsRequest(version=5, groups=[group], include_authorized_operations=False), 5
            )
            (g,) = classic.groups
            assert (g.error_code, g.group_state, g.members) == (0, "Dead", [])  # Kafka 4.x's classicGroup lookup
            described = client.call(
                ConsumerGroupDescribeRequest(
                    group_ids=[group, "lag-group", "nobody"], include_authorized_operations=False
                ),
                0,
            )
            mine, classic_group, unknown = described.groups
            assert mine.error_code == 0 and mine.group_state == "Stable" and mine.assignor_name == "uniform"
            assert mine.group_epoch == mine.assignment_epoch and len(mine.members) == 2
            assert sorted(p for m in mine.members for tp in m.assignment.topic_partitions for p in tp.partitions) == [
                0,
                1,
                2,
                3,
            ]
            assert all(m.subscribed_topic_names == [topic] and m.member_epoch == mine.group_epoch for m in mine.members)
            assert (classic_group.error_code, classic_group.error_message) == (
                69,
                "Group lag-group is not a consumer group.",
            )
            assert (unknown.error_code, unknown.error_message) == (69, "Group nobody not found.")
    finally:
        for proc in members:
            proc.send_signal(signal.SIGTERM)
        for proc in members:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
    # Both left: the group is Empty, its offsets stay; new records show as lag.
    more = {0: 2, 3: 4}
    produce(more)
    assert wait_until(lambda: "has no active members" in run(broker, "--describe", "--group", group).stdout, 30)
    table = offsets_table()
    assert [(int(r[2]), int(r[3]), int(r[4]), int(r[5]), r[6]) for r in table] == [
        (p, n, n + more.get(p, 0), more.get(p, 0), "-") for p, n in sorted(produced.items())
    ]
