"""The controller's administrative work in a ZooKeeper cluster of ``kafkalog serve`` brokers (issue 20): controlled
shutdown (SIGTERM moves leadership away before the broker stops), preferred leader election (the ElectLeaders API
through ``kafkalog leader-election``, and the auto-leader-rebalance task), topic deletion and partition creation
across brokers. Real brokers, a real ZooKeeper (tools/cluster), confluent-kafka and kafka-python clients.
"""

from __future__ import annotations

import threading
import time

import pytest
from click.testing import CliRunner

from kafkalog.cli import main
from tools.cluster import zookeeper
from tools.cluster.checker import ProducerLog, check

missing = zookeeper.available()
pytestmark = pytest.mark.skipif(missing is not None, reason=f"no ZooKeeper: {missing}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tools.cluster.brokers import LocalCluster

    overrides = {"auto.leader.rebalance.enable": "false"}
    with LocalCluster(tmp_path_factory.mktemp("admin-cluster"), overrides=overrides) as c:
        yield c


def _create(cluster, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    cluster.wait_for(lambda: _settled(cluster, topic), 30, "a leader and a full ISR")


def _settled(cluster, topic: str) -> bool:
    return all(len(p["isr"]) == 3 and p["leader"] >= 0 for p in cluster.metadata(topic).values())


def _preferred_everywhere(cluster, topic: str) -> bool:
    return all(p["leader"] == p["replicas"][0] for p in cluster.metadata(topic).values())


def _election(cluster, *args: str):
    live = next(b for b in cluster.brokers.values() if b.alive)
    return CliRunner().invoke(main, ["leader-election", "--bootstrap-server", live.bootstrap, *args])


def test_sigterm_moves_leadership_before_the_broker_stops(cluster):
    """A leader stopped with SIGTERM under acks=all load: the controller moves its leaderships to ISR members first,
    so the producer sees only retriable errors and every record is acknowledged; nothing acknowledged is lost."""
    from tools.cluster.load import produce

    topic = "controlled"
    _create(cluster, topic, 2)
    leader = cluster.metadata(topic)[0]["leader"]
    out: dict[str, ProducerLog] = {}
    runner = threading.Thread(
        target=lambda: out.setdefault("log", produce(cluster.bootstrap, topic, "cs", 1200, rate_per_s=300))
    )
    runner.start()
    try:
        time.sleep(1.5)
        started = time.monotonic()
        cluster.brokers[leader].stop()
        stopped_in = time.monotonic() - started
        # The controller moved every leadership while the broker was still registered, and took it out of every ISR.
        assert any("controlled shutdown succeeded" in line for line in cluster.brokers[leader].lines)
        moved = f"controlled shutdown of broker {leader}: 0 partition(s) still led there"
        assert any(moved in line for b in cluster.brokers.values() for line in b.lines)
        assert stopped_in < 15, stopped_in

        def moved_off() -> bool:  # the other brokers' views follow ZooKeeper's within a watch round trip
            md = cluster.metadata(topic)
            return all(p["leader"] not in (leader, -1) and leader not in p["isr"] for p in md.values())

        cluster.wait_for(moved_off, 10, "the metadata to show the new leaders")
        time.sleep(1.0)
    finally:
        cluster.brokers[leader].start()
        runner.join(120)
    producers = out["log"]
    assert len(producers.acked) == 1200 and not producers.failed, producers.failed[:5]
    cluster.wait_for(lambda: _settled(cluster, topic), 60, "the ISR to be whole again")
    for broker in cluster.brokers.values():
        broker.stop()
    report = check({i: b.log_dir for i, b in cluster.brokers.items()}, topic, producers, [0, 1])
    for broker in cluster.brokers.values():
        broker.start()
    assert report.ok, report.summary()
    assert sum(report.committed.values()) == 1200


def test_leader_election_command_and_auto_rebalance(cluster):
    """kafkalog leader-election (ElectLeaders to the controller) moves leadership back to the preferred replica,
    says when one already leads, and refuses while the preferred replica is down; with auto.leader.rebalance.enable
    the controller does it by itself every leader.imbalance.check.interval.seconds."""
    topic = "preferred"
    _create(cluster, topic, 3)
    assert _preferred_everywhere(cluster, topic)
    first = cluster.metadata(topic)[0]["replicas"][0]
    cluster.brokers[first].stop()  # controlled: its leaderships move to the next ISR member
    try:
        assert cluster.metadata(topic)[0]["leader"] != first
        refused = _election(cluster, "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
        assert refused.exit_code == 1, refused.output
        assert f"for partition: {topic}-0: Failed to elect leader" in refused.output
        assert "1 replica(s) could not be elected" in refused.output
    finally:
        cluster.brokers[first].start()
    cluster.wait_for(lambda: _settled(cluster, topic), 60, "the ISR to be whole again")
    assert cluster.metadata(topic)[0]["leader"] != first  # auto rebalance is off in this cluster

    done = _election(cluster, "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert done.exit_code == 0, done.output
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in done.output
    assert cluster.metadata(topic)[0]["leader"] == first
    again = _election(cluster, "--election-type", "preferred", "--all-topic-partitions")
    assert again.exit_code == 0, again.output
    assert "Valid replica already elected for partitions" in again.output and f"{topic}-0" in again.output
    assert _preferred_everywhere(cluster, topic)
    usage = _election(cluster, "--election-type", "PREFERRED")
    assert usage.exit_code == 2 and "One and only one of" in usage.output

    # The auto-leader-rebalance task: every broker restarted with it on; after the rolling restart the leaders
    # have moved (each stop moved leadership away), and the controller brings each back to its preferred replica.
    for broker in cluster.brokers.values():
        broker.settings.update({"auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": "2"})
        broker.stop()
        broker.start()
    cluster.wait_for(lambda: _settled(cluster, topic), 60, "the ISR to be whole again")
    cluster.wait_for(lambda: _preferred_everywhere(cluster, topic), 30, "preferred leaders everywhere")
    assert any("leader imbalance ratio of broker" in line for b in cluster.brokers.values() for line in b.lines)


def _topics(cluster, *args: str):
    live = next(b for b in cluster.brokers.values() if b.alive)
    return CliRunner().invoke(main, ["topics", "--bootstrap-server", live.bootstrap, *args])


def _replica_dirs(cluster, topic: str) -> dict[int, list[str]]:
    """broker -> the live partition dirs of ``topic`` in its log dir (``-delete`` dirs are not live)."""
    return {
        i: sorted(d.name for d in b.log_dir.glob(f"{topic}-*") if d.name.rsplit("-", 1)[-1].isdigit())
        for i, b in cluster.brokers.items()
    }


def _znodes(cluster, topic: str) -> list[str]:
    from kazoo.client import KazooClient

    client = KazooClient(cluster.zookeeper.connect)
    client.start(10)
    try:
        paths = (f"/brokers/topics/{topic}", f"/config/topics/{topic}", f"/admin/delete_topics/{topic}")
        return [p for p in paths if client.exists(p)]
    finally:
        client.stop()


def test_delete_topic_deletes_every_replica(cluster):
    """topics --delete in a cluster: marked under /admin/delete_topics, the controller has every replica broker
    delete its logs (StopReplica), then removes the topic's znodes. A replica on a stopped broker holds the
    deletion until the broker is back; a topic of the same name created again is a new, empty topic."""
    from tools.cluster.load import produce

    _create(cluster, "doomed", 2)
    assert len(produce(cluster.bootstrap, "doomed", "d", 20).acked) == 20
    assert all(dirs == ["doomed-0", "doomed-1"] for dirs in _replica_dirs(cluster, "doomed").values())
    result = _topics(cluster, "--delete", "--topic", "doomed")
    assert result.exit_code == 0 and "Topic doomed is marked for deletion." in result.output, result.output
    assert _znodes(cluster, "doomed") == []
    assert all(dirs == [] for dirs in _replica_dirs(cluster, "doomed").values()), _replica_dirs(cluster, "doomed")
    assert "doomed" not in _topics(cluster, "--list").output.split()
    missing_topic = _topics(cluster, "--delete", "--topic", "doomed")
    assert missing_topic.exit_code != 0 and "'doomed' does not exist" in missing_topic.output, missing_topic.output

    # One replica broker down: the deletion waits for it (the request times out, the marker stays).
    _create(cluster, "waiting", 1)
    down = cluster.brokers[3]
    down.stop()
    try:
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=cluster.brokers[1].bootstrap, request_timeout_ms=20000)
        try:
            answer = admin.delete_topics(["waiting"], timeout_ms=2000, raise_errors=False)
        finally:
            admin.close()
        assert [t["error_code"] for t in answer["topics"]] == [7]  # REQUEST_TIMED_OUT
        assert _znodes(cluster, "waiting") == [
            "/brokers/topics/waiting",
            "/config/topics/waiting",
            "/admin/delete_topics/waiting",
        ]
        assert _replica_dirs(cluster, "waiting") == {1: [], 2: [], 3: ["waiting-0"]}
    finally:
        down.start()
    cluster.wait_for(lambda: _znodes(cluster, "waiting") == [], 30, "the deletion to complete")
    assert _replica_dirs(cluster, "waiting") == {1: [], 2: [], 3: []}

    # The same name again: a new topic, none of the old records.
    _create(cluster, "doomed", 1)
    assert len(produce(cluster.bootstrap, "doomed", "again", 3).acked) == 3
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-doomed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("doomed", 0, 0)])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < 3 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"again:0", b"again:1", b"again:2"], values


def test_create_partitions_across_brokers(cluster):
    """topics --alter --partitions in a cluster: the new partitions get replicas by Kafka's assignment (continuing
    the topic's), leaders, logs on their replica brokers, and take acks=all writes; shrinking is refused."""
    from tools.cluster.load import produce

    _create(cluster, "grow", 2)
    result = _topics(cluster, "--alter", "--topic", "grow", "--partitions", "5")
    assert result.exit_code == 0 and "Topic grow now has 5 partitions." in result.output, result.output
    cluster.wait_for(lambda: len(cluster.metadata("grow")) == 5 and _settled(cluster, "grow"), 30, "5 partitions")
    md = cluster.metadata("grow")
    assert all(sorted(p["replicas"]) == [1, 2, 3] for p in md.values())
    assert len({p["leader"] for p in md.values()}) == 3  # the new leaders spread too
    # A new partition's ISR starts as all its replicas (as Kafka's does); each follower creates its log when it sees
    # the assignment in ZooKeeper, which can come a moment after the metadata shows the partition.
    everywhere = {f"grow-{p}" for p in range(5)}
    cluster.wait_for(
        lambda: all(set(dirs) == everywhere for dirs in _replica_dirs(cluster, "grow").values()), 30, "replica dirs"
    )
    sent = produce(cluster.bootstrap, "grow", "g", 50)
    assert len(sent.acked) == 50, sent.failed[:5]
    # librdkafka's sticky partitioner may put 50 keyless records in only a few partitions: write to each one
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    delivered: list[tuple[object, int]] = []
    for p in range(5):
        producer.produce("grow", b"p%d" % p, partition=p, on_delivery=lambda e, m: delivered.append((e, m.partition())))
    assert producer.flush(60) == 0
    assert sorted(p for e, p in delivered if e is None) == list(range(5)), delivered
    shrink = _topics(cluster, "--alter", "--topic", "grow", "--partitions", "3")
    assert shrink.exit_code != 0 and "(error code 37)" in shrink.output, shrink.output
    assert "Topic currently has 5 partitions, which is higher than the requested 3." in shrink.output


def _consume(cluster, group: str, topic: str, count: int, commit: bool) -> list[bytes]:
    """``count`` records of ``topic`` read by a member of ``group`` (confluent-kafka), committed synchronously."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
                if commit and len(values) == count:
                    consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()
    return values


def _coordinator(cluster, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    live = ",".join(b.bootstrap for b in cluster.brokers.values() if b.alive)
    admin = AdminClient({"bootstrap.servers": live})  # kept referenced: a collected client never answers
    described = admin.describe_consumer_groups([group])[group].result(30)
    return int(described.coordinator.id)


def test_group_coordinator_fails_over_with_its_committed_offsets(cluster):
    """__consumer_offsets is replicated (offsets.topic.replication.factor 3): the coordinator broker is SIGKILLed,
    the new leader of the group's partition loads the group, and the group resumes at its committed offset."""
    from tools.cluster.load import produce

    _create(cluster, "orders", 1)
    assert len(produce(cluster.bootstrap, "orders", "o", 60).acked) == 60
    first = _consume(cluster, "billing", "orders", 25, commit=True)
    assert first == [f"o:{i}".encode() for i in range(25)]
    offsets = cluster.metadata("__consumer_offsets")
    assert len(offsets) == 3 and all(sorted(p["replicas"]) == [1, 2, 3] for p in offsets.values()), offsets
    coordinator = _coordinator(cluster, "billing")
    cluster.brokers[coordinator].kill()
    try:
        cluster.wait_for(lambda: _coordinator(cluster, "billing") != coordinator, 60, "a new coordinator")
        rest = _consume(cluster, "billing", "orders", 35, commit=True)
        assert rest == [f"o:{i}".encode() for i in range(25, 60)], rest[:5]
        assert _coordinator(cluster, "billing") != coordinator
    finally:
        cluster.brokers[coordinator].start()
    # The restarted broker follows the partition again; the group's offsets are still 60 wherever it is led.
    cluster.wait_for(lambda: _settled(cluster, "__consumer_offsets"), 60, "the offsets topic's ISR to be whole")
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    request = [ConsumerGroupTopicPartitions("billing", [TopicPartition("orders", 0)])]
    listed = admin.list_consumer_group_offsets(request)["billing"].result(30)
    assert [(p.topic, p.partition, p.offset) for p in listed.topic_partitions] == [("orders", 0, 60)]


def test_explicit_replica_assignments(cluster):
    """CreateTopics and CreatePartitions with the replicas given (kafka-topics.sh --replica-assignment): placed as
    asked; a broker twice in a partition or an unknown broker is INVALID_REPLICA_ASSIGNMENT."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("placed", num_partitions=2, replica_assignment=[[2, 3], [3, 1]])])["placed"].result(
        30
    )
    cluster.wait_for(lambda: all(len(p["isr"]) == 2 for p in cluster.metadata("placed").values()), 30, "the ISRs")
    assert {p: m["replicas"] for p, m in cluster.metadata("placed").items()} == {0: [2, 3], 1: [3, 1]}
    admin.create_partitions([NewPartitions("placed", 3, [[1, 2]])])["placed"].result(30)
    cluster.wait_for(lambda: len(cluster.metadata("placed")) == 3, 30, "the new partition")
    assert cluster.metadata("placed")[2]["replicas"] == [1, 2]
    for bad in ([[1, 1]], [[1, 9]]):
        with pytest.raises(KafkaException) as refused:
            admin.create_topics([NewTopic("misplaced", num_partitions=1, replica_assignment=bad)])["misplaced"].result(
                30
            )
        assert refused.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"
