"""DescribeProducers on a replicated cluster (ZooKeeper, two ``kafkalog serve`` brokers): ``kafkalog transactions
describe-producers --broker-id`` asks a chosen replica, and a follower answers from the producer state its
replica fetcher rebuilt, as Kafka's Partition.activeProducerState does on any replica holding the log; a broker
holding no replica of a known topic's partition answers NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import time

import pytest

from test_cli_transactions import kafkalog, rows
from tools.cluster import zookeeper
from tools.cluster.brokers import LocalCluster

missing = zookeeper.available()
pytestmark = pytest.mark.skipif(missing is not None, reason=f"no ZooKeeper: {missing}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("producers-cluster"), size=2) as c:
        yield c


def test_describe_producers_on_the_leader_and_on_a_follower(cluster) -> None:
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics(
            {
                "both": {"num_partitions": 1, "replication_factor": 2},
                "only-one": {"num_partitions": 1, "replication_factor": 1},
            }
        )
    finally:
        admin.close()
    cluster.wait_for(lambda: sorted(cluster.metadata("both")[0]["isr"]) == [1, 2], what="both replicas in sync")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(4):
        producer.produce("both", b"v%d" % i, partition=0, timestamp=1_700_000_000_000 + i)
        producer.flush(30)
    header = [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    answers = {}
    deadline = time.monotonic() + 30
    leader = cluster.metadata("both")[0]["leader"]
    follower = 3 - leader
    for broker_id in (leader, follower):  # the follower is asked until its fetcher has the records
        while True:
            result = kafkalog(
                "transactions",
                "--bootstrap-server",
                cluster.bootstrap,
                "describe-producers",
                "--topic",
                "both",
                "--partition",
                "0",
                "--broker-id",
                str(broker_id),
            )
            assert result.returncode == 0, result.stderr
            table = rows(result.stdout)
            if (len(table) == 2 and table[1][3] == "3") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        answers[broker_id] = table
    assert answers[leader][0] == header
    (producer_row,) = answers[leader][1:]
    assert producer_row[1:] == ["0", "-1", "3", "1700000000003", "None"]  # four records: sequences 0..3
    assert (
        answers[follower] == answers[leader]
    )  # the follower knows the same producer, rebuilt from the fetched batches

    (other,) = {1, 2} - set(cluster.metadata("only-one")[0]["replicas"])
    elsewhere = kafkalog(
        "transactions",
        "--bootstrap-server",
        cluster.bootstrap,
        "describe-producers",
        "--topic",
        "only-one",
        "--partition",
        "0",
        "--broker-id",
        str(other),
    )
    assert elsewhere.returncode == 1
    assert elsewhere.stderr.startswith(f"Failed to describe producers for partition only-one-0 on broker {other}: ")
    assert "NotLeaderForPartition" in elsewhere.stderr or "NotLeaderOrFollower" in elsewhere.stderr
