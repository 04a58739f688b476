"""The Prometheus endpoint on a ZooKeeper cluster of three ``kafkalog serve`` brokers: the partition gauges Kafka
dashboards alert on must follow what happens to the cluster -- one active controller, a partition
under-replicated on its leader while a follower is down (and not once it is back), a partition without any live
replica offline at the controller, and replication traffic counted as FetchFollower requests and replication
bytes."""

from __future__ import annotations

import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tools.cluster import zookeeper

missing = zookeeper.available()
pytestmark = pytest.mark.skipif(missing is not None, reason=f"no ZooKeeper: {missing}")
_ENDPOINT = re.compile(r"Prometheus metrics endpoint on http://[^:]+:(\d+)/metrics")


def scrape(broker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    port = [int(m.group(1)) for line in broker.lines if (m := _ENDPOINT.search(line))][-1]  # since its last start
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def gauge(broker, name: str, **labels: str) -> float:
    return scrape(broker).get((name, tuple(sorted(labels.items()))), -1.0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tools.cluster.brokers import LocalCluster

    overrides = {"metrics.port": "0", "metrics.host": "127.0.0.1"}
    with LocalCluster(tmp_path_factory.mktemp("metrics-cluster"), overrides=overrides) as c:
        yield c


@pytest.mark.slow
def test_cluster_gauges_follow_a_failed_follower_and_an_offline_partition(cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("watched", 1, 3, config={"min.insync.replicas": "2"})])["watched"].result(30)
    cluster.wait_for(lambda: len(cluster.metadata("watched")[0]["isr"]) == 3, 30, "a full ISR")
    cluster.wait_for(
        lambda: (
            sum(gauge(b, "kafka_controller_kafkacontroller_activecontrollercount") for b in cluster.brokers.values())
            == 1
        ),
        30,
        "exactly one active controller",
    )
    leader_id = cluster.metadata("watched")[0]["leader"]
    leader = cluster.brokers[leader_id]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce("watched", b"v%d" % i)
    assert producer.flush(30) == 0
    labels = {"topic": "watched", "partition": "0"}
    cluster.wait_for(lambda: gauge(leader, "kafka_log_log_logendoffset", **labels) == 20, 30, "the log end offset")
    samples = scrape(leader)
    assert samples[("kafka_server_brokertopicmetrics_replicationbytesout_total", ())] > 0
    assert any(
        k[0] == "kafka_network_requestmetrics_requests_total" and ("request", "FetchFollower") in k[1] for k in samples
    )
    assert gauge(leader, "kafka_cluster_partition_underreplicated", **labels) == 0
    assert gauge(leader, "kafka_server_replicamanager_underreplicatedpartitions") == 0

    follower_id = next(b for b in cluster.brokers if b != leader_id)
    cluster.brokers[follower_id].kill()
    try:
        cluster.wait_for(
            lambda: gauge(leader, "kafka_cluster_partition_underreplicated", **labels) == 1, 60, "under-replicated"
        )
        assert gauge(leader, "kafka_server_replicamanager_underreplicatedpartitions") >= 1
    finally:
        cluster.brokers[follower_id].start()
    cluster.wait_for(
        lambda: gauge(leader, "kafka_cluster_partition_underreplicated", **labels) == 0, 60, "the ISR whole again"
    )

    # a single-replica partition on a broker that is not the controller: offline at the controller once it dies
    controller = next(
        b
        for b in cluster.brokers
        if gauge(cluster.brokers[b], "kafka_controller_kafkacontroller_activecontrollercount") == 1
    )
    host = controller
    for attempt in range(12):  # RF 1 lands on a broker Kafka's assignment picks at random: one that is not it
        topic = f"lonely-{attempt}"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        cluster.wait_for(lambda t=topic: cluster.metadata(t)[0]["leader"] >= 0, 30, "a leader for a lonely topic")
        host = cluster.metadata(topic)[0]["leader"]
        if host != controller:
            break
    assert host != controller
    assert gauge(cluster.brokers[controller], "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    cluster.brokers[host].kill()
    try:
        cluster.wait_for(
            lambda: gauge(cluster.brokers[controller], "kafka_controller_kafkacontroller_offlinepartitionscount") == 1,
            60,
            "the partition offline at the controller",
        )
    finally:
        cluster.brokers[host].start()
    cluster.wait_for(
        lambda: gauge(cluster.brokers[controller], "kafka_controller_kafkacontroller_offlinepartitionscount") == 0,
        60,
        "the partition back online",
    )
