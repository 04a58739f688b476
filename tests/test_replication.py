"""Replication across ``kafkalog serve`` brokers with ZooKeeper as the control plane (issue 20).

Unit parts: Kafka's rack-unaware assignment (Kafka's own expected table), the znode JSON shapes (as Kafka
writes them), and the checker (it must catch each kind of fault). Integration: a private ZooKeeper and three
brokers on loopback, a topic with replication factor 3 and min.insync.replicas=2, driven by confluent-kafka:
brokers SIGKILLed and restarted under acks=all, two brokers down, a SIGSTOPped follower. Every run ends with
the checker reading every replica's log. The long forms are in ``make reliability`` (tools/reliability).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from kafkalog.broker.cluster import zkdata
from kafkalog.broker.cluster.assignment import assign_replicas
from kafkalog.errors import InvalidReplicationFactorError
from kafkalog.manager import LogManager
from tools.cluster import zookeeper
from tools.cluster.checker import ProducerLog, check, value_of

# ----- unit -------------------------------------------------------------------------------------------------


def test_rack_unaware_assignment_matches_kafka():
    # Kafka's AdminZkClientTest/AdminTest expectation for 5 brokers, 10 partitions, RF 3, fixed start index 0.
    expected = {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }
    assert assign_replicas([0, 1, 2, 3, 4], 10, 3, fixed_start_index=0) == expected


def test_assignment_refuses_more_replicas_than_brokers():
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 2"):
        assign_replicas([1, 2], 1, 3)


def test_znode_shapes_read_what_kafka_writes():
    # As a Kafka 3.x broker writes them (kafka.zk.ZkData).
    broker = zkdata.BrokerInfo.decode(
        2,
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://kafka-2:9092"],"jmx_port":-1,"port":9092,"host":"kafka-2",'
        b'"version":5,"timestamp":"1700000000000"}',
    )
    assert (broker.broker_id, broker.host, broker.port) == (2, "kafka-2", 9092)
    state = zkdata.LeaderAndIsr.decode(
        b'{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":7,"isr":[1,3]}', 12
    )
    assert (state.leader, state.leader_epoch, state.isr, state.controller_epoch, state.zk_version) == (
        1,
        7,
        [1, 3],
        3,
        12,
    )
    topic = zkdata.TopicAssignment.decode(
        b'{"partitions":{"0":[1,2,3],"1":[2,3,1]},"topic_id":"cLQ9DqgCTbyVwR0nuHE7UQ","adding_replicas":{},'
        b'"removing_replicas":{},"version":3}'
    )
    assert topic.partitions == {0: [1, 2, 3], 1: [2, 3, 1]} and topic.topic_id == "cLQ9DqgCTbyVwR0nuHE7UQ"
    # and what kafkalog writes has Kafka's fields and versions
    written = json.loads(zkdata.BrokerInfo(1, "127.0.0.1", 9092).encode())
    assert written["version"] == 5 and written["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"] and "rack" not in written
    assert json.loads(state.encode()) == {
        "controller_epoch": 3,
        "leader": 1,
        "version": 1,
        "leader_epoch": 7,
        "isr": [1, 3],
    }
    assert json.loads(topic.encode())["version"] == 3
    assert json.loads(zkdata.encode_controller(4)).keys() == {"version", "brokerid", "timestamp"}
    assert zkdata.decode_cluster_id(zkdata.encode_cluster_id("abc")) == "abc"


def _write_replica(directory: Path, values: list[bytes]) -> None:
    with LogManager([directory]) as manager:
        manager.create_topic("t", 1)
        for value in values:
            manager.produce("t", value, partition=0)


def test_checker_reports_every_kind_of_fault(tmp_path):
    good = [value_of("p", i) for i in range(6)]
    _write_replica(tmp_path / "a", good)
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # a faithful replica: the same bytes
    producers = ProducerLog(attempted=set(good), acked=[(0, i, v) for i, v in enumerate(good)])
    report = check({1: tmp_path / "a", 2: tmp_path / "b"}, "t", producers, [0])
    assert report.ok, report.summary()
    assert report.committed == {0: 6} and report.records == 12

    bad = [good[0], good[2], good[1], good[2], b"stranger:0", good[5]]  # reordered, duplicated, phantom; 3, 4 lost
    _write_replica(tmp_path / "c", bad)
    report = check({1: tmp_path / "a", 3: tmp_path / "c"}, "t", producers, [0])
    assert len(report.reordered) == 1 and "seq 1" in report.reordered[0]
    assert len(report.duplicated) == 1 and "p:2" in report.duplicated[0]
    assert len(report.phantom) == 1 and "stranger:0" in report.phantom[0]
    assert any("p:3" in line and "missing" in line for line in report.lost)
    assert len(report.diverged) == 1 and "broker 3" in report.diverged[0]


# ----- integration --------------------------------------------------------------------------------------------

missing = zookeeper.available()
needs_zookeeper = pytest.mark.skipif(missing is not None, reason=f"no ZooKeeper: {missing}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tools.cluster.brokers import LocalCluster

    with LocalCluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


def _create(cluster, topic: str, partitions: int = 2, **config: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = {"min.insync.replicas": "2", **config}
    admin.create_topics([NewTopic(topic, partitions, 3, config=configs)])[topic].result(30)
    cluster.wait_for(lambda: _full_isr(cluster, topic), 30, "a leader and a full ISR")


def _restore(cluster) -> None:
    for broker in cluster.brokers.values():
        if not broker.alive:
            broker.start()


def _full_isr(cluster, topic: str) -> bool:
    """Every partition has a leader and all 3 replicas in its ISR. A topic answered with no partitions (a broker
    that has not yet learned of a new topic's partitions answers it with an error and none) is not: all() of
    nothing would be true."""
    partitions = cluster.metadata(topic).values()
    return bool(partitions) and all(len(p["isr"]) == 3 and p["leader"] >= 0 for p in partitions)


def _check_all(cluster, topic: str, producers: ProducerLog, partitions: list[int]):
    """Stop every broker cleanly (their high watermarks checkpointed), run the checker, start them again."""
    for broker in cluster.brokers.values():
        broker.stop()
    report = check({i: b.log_dir for i, b in cluster.brokers.items()}, topic, producers, partitions)
    for broker in cluster.brokers.values():
        broker.start()
    return report


def _describe_cli(bootstrap: str, topic: str) -> str:
    from click.testing import CliRunner

    from kafkalog.cli import main

    result = CliRunner().invoke(main, ["topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic])
    assert result.exit_code == 0, result.output
    return result.output


@needs_zookeeper
def test_topics_command_creates_with_a_replication_factor_and_describes_the_isr(cluster):
    from click.testing import CliRunner

    from kafkalog.cli import main

    args = ["topics", "--bootstrap-server", cluster.brokers[2].bootstrap, "--create", "--topic", "cli"]
    args += ["--partitions", "3", "--replication-factor", "2", "--config", "min.insync.replicas=2"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0 and "Created topic cli." in result.output, result.output
    cluster.wait_for(lambda: all(len(p["isr"]) == 2 for p in cluster.metadata("cli").values()), 30, "the ISRs")
    lines = _describe_cli(cluster.brokers[3].bootstrap, "cli").splitlines()
    assert "PartitionCount: 3\tReplicationFactor: 2" in lines[0]
    replicas = [line.split("Replicas: ")[1].split()[0] for line in lines[1:]]
    assert len(replicas) == 3 and all(len(r.split(",")) == 2 for r in replicas)
    assert len({r.split(",")[0] for r in replicas}) == 3  # leaders spread over the three brokers
    refused = CliRunner().invoke(main, [*args[:5], "again", "--replication-factor", "4"])
    assert refused.exit_code != 0 and "only 3 broker(s) are registered" in refused.output, refused.output
    assert "(error code 38)" in refused.output  # INVALID_REPLICATION_FACTOR


@needs_zookeeper
def test_metadata_lists_every_broker_leader_replicas_and_isr(cluster):
    _create(cluster, "meta", partitions=3)
    md = cluster.metadata("meta")
    assert sorted(md) == [0, 1, 2]
    for p in md.values():
        assert sorted(p["replicas"]) == [1, 2, 3] and p["leader"] == p["replicas"][0] and sorted(p["isr"]) == [1, 2, 3]
    assert len({p["leader"] for p in md.values()}) == 3  # leaders spread as Kafka's assignment spreads them
    from confluent_kafka.admin import AdminClient

    brokers = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).brokers
    assert sorted(brokers) == [1, 2, 3]


@needs_zookeeper
def test_a_follower_refuses_produce_and_fetch_with_not_leader(cluster):
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    from tools.cluster.raw import request

    _create(cluster, "follow", partitions=1)
    md = cluster.metadata("follow")[0]
    follower = next(r for r in md["replicas"] if r != md["leader"])
    fetch = FetchRequest(
        version=11,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic="follow",
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=0,
                        partition_max_bytes=1000,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    body = request(cluster.brokers[follower].bootstrap, 1, 11, fetch.encode(version=11))
    answer = FetchResponse[11].decode(body).responses[0].partitions[0]
    assert answer.error_code == 6  # NOT_LEADER_OR_FOLLOWER


@needs_zookeeper
def test_acks_all_survives_brokers_killed_and_restarted(cluster):
    """Kills the leader of partition 0 (twice) and a random broker while a producer sends with acks=all; every
    acknowledged record is on every replica once and in order, and the replicas' bytes agree below the HW."""
    from tools.cluster.load import produce

    topic = "kills"
    _create(cluster, topic)
    out: dict[str, ProducerLog] = {}
    runner = threading.Thread(
        target=lambda: out.setdefault("log", produce(cluster.bootstrap, topic, "k", 3000, rate_per_s=300))
    )
    runner.start()
    try:
        for round_ in range(3):
            time.sleep(2.5)
            md = cluster.metadata(topic)
            victim = md[0]["leader"] if round_ < 2 and md[0]["leader"] > 0 else 1 + round_ % 3
            cluster.brokers[victim].kill()
            time.sleep(1.0)
            cluster.brokers[victim].start()
    finally:
        runner.join(180)
        _restore(cluster)
    producers = out["log"]
    assert len(producers.acked) == 3000, f"not acknowledged: {producers.failed[:5]}"
    cluster.wait_for(lambda: _full_isr(cluster, topic), 60, "the ISR to be whole again")
    report = _check_all(cluster, topic, producers, [0, 1])
    assert report.ok, report.summary()
    assert sum(report.committed.values()) >= 3000


@needs_zookeeper
def test_zookeeper_restarted_under_load_loses_nothing_acknowledged(cluster):
    """ZooKeeper stopped for two seconds and started again (same data dir) while a producer sends with acks=all:
    every record is acknowledged once the brokers have their sessions back, and the checker finds every one on
    every replica, once and in order, with the replicas' bytes equal below the high watermark."""
    from tools.cluster.load import produce

    topic = "zk-restart"
    _create(cluster, topic)
    out: dict[str, ProducerLog] = {}
    runner = threading.Thread(
        target=lambda: out.setdefault("log", produce(cluster.bootstrap, topic, "z", 1500, rate_per_s=300))
    )
    runner.start()
    try:
        time.sleep(2.0)
        cluster.zookeeper.stop()
        time.sleep(2.0)
        cluster.zookeeper.start()
    finally:
        runner.join(180)
        _restore(cluster)
    producers = out["log"]
    assert len(producers.acked) == 1500, f"not acknowledged: {producers.failed[:5]}"
    cluster.wait_for(lambda: _full_isr(cluster, topic), 60, "the ISR to be whole again")
    report = _check_all(cluster, topic, producers, [0, 1])
    assert report.ok, report.summary()
    assert sum(report.committed.values()) >= 1500


@needs_zookeeper
def test_two_brokers_down_acks_all_fails_not_enough_replicas_acks_one_succeeds(cluster):
    from tools.cluster.load import produce

    topic = "minisr"
    _create(cluster, topic, partitions=1)
    md = cluster.metadata(topic)[0]
    survivor = md["leader"]
    before = produce(cluster.bootstrap, topic, "before", 20)
    assert len(before.acked) == 20
    down = [b for b in cluster.brokers if b != survivor]
    try:
        for b in down:
            cluster.brokers[b].kill()
        cluster.wait_for(lambda: cluster.metadata(topic)[0]["isr"] == [survivor], 30, "the ISR to shrink to the leader")
        survivor_dir = cluster.brokers[survivor].log_dir / f"{topic}-0"
        size_before = sum(f.stat().st_size for f in survivor_dir.glob("*.log"))
        refused = produce(
            cluster.brokers[survivor].bootstrap,
            topic,
            "all",
            5,
            extra={"message.timeout.ms": 4000, "enable.idempotence": False, "retries": 0},
        )
        assert not refused.acked and {name for _, name in refused.failed} == {"NOT_ENOUGH_REPLICAS"}, refused.failed
        assert sum(f.stat().st_size for f in survivor_dir.glob("*.log")) == size_before  # nothing written
        accepted = produce(cluster.brokers[survivor].bootstrap, topic, "one", 5, acks="1")
        assert len(accepted.acked) == 5, accepted.failed
    finally:
        _restore(cluster)
    cluster.wait_for(lambda: _full_isr(cluster, topic), 60, "the ISR to be whole again")
    producers = ProducerLog()
    for part in (before, refused, accepted):
        producers.merge(part)
    report = _check_all(cluster, topic, producers, [0])
    assert report.ok, report.summary()
    assert report.committed == {0: 25}


@needs_zookeeper
def test_a_paused_follower_leaves_the_isr_and_rejoins(cluster):
    from tools.cluster.load import produce

    topic = "paused"
    _create(cluster, topic, partitions=1)
    md = cluster.metadata(topic)[0]
    follower = next(r for r in md["replicas"] if r != md["leader"])
    cluster.brokers[follower].pause()
    try:
        first = produce(cluster.bootstrap, topic, "while-paused", 50)  # acks=all: 2 of 3 in sync is enough
        assert len(first.acked) == 50, first.failed
        # replica.lag.time.max.ms is 3000 here: the leader drops the paused follower from the ISR.
        cluster.wait_for(lambda: follower not in cluster.metadata(topic)[0]["isr"], 20, "the follower to leave")
        assert cluster.metadata(topic)[0]["leader"] == md["leader"]

        # The CLI's admin client (kafka-python) sends its request to any broker it has learnt of, the paused one
        # included: such an attempt times out, and a later one (the paused broker's ZooKeeper session gone by
        # then, so it is no longer listed) reaches a live broker.
        def described_without_the_follower() -> bool:
            described = _describe_cli(cluster.brokers[md["leader"]].bootstrap, topic)
            isr = described.split("Isr: ")[1].split()[0].split(",")
            assert str(follower) not in isr and str(md["leader"]) in isr, described
            return True

        cluster.wait_for(described_without_the_follower, 60, "topics --describe to show the ISR without the follower")
    finally:
        cluster.brokers[follower].resume()
    cluster.wait_for(lambda: follower in cluster.metadata(topic)[0]["isr"], 60, "the follower to rejoin the ISR")
    second = produce(cluster.bootstrap, topic, "after", 50)
    assert len(second.acked) == 50
    cluster.wait_for(lambda: _full_isr(cluster, topic), 30, "a full ISR")
    first.merge(second)
    report = _check_all(cluster, topic, first, [0])
    assert report.ok, report.summary()


@needs_zookeeper
def test_producer_ids_come_from_zookeeper_blocks_no_two_brokers_share_one(cluster):
    """Idempotent producers of different brokers must never share a producer id (a second producer would see
    its records taken for duplicates of the first's): ids come from /latest_producer_id_block as in Kafka."""
    from kazoo.client import KazooClient

    from kafkalog.broker.cluster.producer_ids import PATH, ZkProducerIdManager

    client = KazooClient(cluster.zookeeper.connect)
    client.start(10)
    try:
        a, b = ZkProducerIdManager(client, 101), ZkProducerIdManager(client, 102)
        ids = [a.generate_producer_id(), b.generate_producer_id(), a.generate_producer_id()]
        assert len(set(ids)) == 3 and ids[2] == ids[0] + 1
        block = json.loads(client.get(PATH)[0])
        assert block["version"] == 1 and block["broker"] == 102
        assert int(block["block_end"]) - int(block["block_start"]) == 999
    finally:
        client.stop()


@needs_zookeeper
@pytest.mark.parametrize("unclean", ["false", "true"])
def test_unclean_leader_election(cluster, unclean):
    """The leader dies while both followers lag (paused out of the ISR, records written with acks=1 meanwhile).
    unclean.leader.election.enable=false: the partition stays offline rather than lose those records, and comes
    back whole with its old leader. true: a lagging follower is elected and exactly the records it lacked are
    lost (the old leader truncates them when it returns), as Kafka loses them."""
    from tools.cluster.load import produce

    topic = f"unclean-{unclean}"
    _create(cluster, topic, partitions=1, **{"unclean.leader.election.enable": unclean})
    md = cluster.metadata(topic)[0]
    leader = md["leader"]
    followers = [r for r in md["replicas"] if r != leader]
    base = produce(cluster.bootstrap, topic, "base", 10)
    assert len(base.acked) == 10
    for f in followers:
        cluster.brokers[f].pause()
    try:
        cluster.wait_for(lambda: cluster.metadata(topic)[0]["isr"] == [leader], 30, "the ISR to shrink to the leader")
        lagging = produce(cluster.brokers[leader].bootstrap, topic, "lagging", 7, acks="1")
        assert len(lagging.acked) == 7
        cluster.brokers[leader].kill()
    finally:
        for f in followers:
            cluster.brokers[f].resume()
    try:
        if unclean == "false":
            cluster.wait_for(lambda: cluster.metadata(topic)[0]["leader"] == -1, 30, "the partition to go offline")
            time.sleep(3)
            assert cluster.metadata(topic)[0]["leader"] == -1  # no lagging follower was elected
        else:
            cluster.wait_for(lambda: cluster.metadata(topic)[0]["leader"] in followers, 30, "an unclean election")
    finally:
        cluster.brokers[leader].start()
    cluster.wait_for(lambda: _full_isr(cluster, topic), 60, "a full ISR")
    if unclean == "false":
        assert cluster.metadata(topic)[0]["leader"] == leader
    producers = ProducerLog()
    producers.merge(base)
    producers.merge(lagging)
    report = _check_all(cluster, topic, producers, [0])
    if unclean == "false":
        assert report.ok, report.summary()
        assert report.committed == {0: 17}
    else:
        # exactly the 7 acks=1 records, on each of the 3 replicas, and nothing else wrong
        assert len(report.lost) == 21 and all("lagging" in line for line in report.lost), report.summary()
        assert not (report.duplicated or report.reordered or report.phantom or report.diverged), report.summary()
        assert report.committed == {0: 10}
