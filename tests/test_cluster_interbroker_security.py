"""Inter-broker security on a ZooKeeper cluster: the brokers' only inter-broker listener is SASL_SSL (TLS with the
test CA, SASL/PLAIN as each broker's JAAS user). Three ``kafkalog serve`` brokers and a real ZooKeeper: every
listener is registered in /brokers/ids/N with its security protocol, acks=all writes replicate over the secured
listener, and a broker holding a wrong inter-broker password cannot fetch, so it never rejoins the ISR -- and its
log says why."""

from __future__ import annotations

import json

import pytest

from tools.cluster import zookeeper
from tools.cluster.zookeeper import free_port

pytest.importorskip("cryptography")
missing = zookeeper.available()
pytestmark = pytest.mark.skipif(missing is not None, reason=f"no ZooKeeper: {missing}")


def _jaas(password: str) -> str:
    # the broker's own login (username/password) and the users its SASL listener accepts (user_<name>)
    return (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        f'password="{password}" user_broker="broker-secret";'
    )


def _znode(cluster, path: str) -> dict:
    from kazoo.client import KazooClient

    zk = KazooClient(cluster.zookeeper.connect)
    zk.start(15)
    try:
        data, _ = zk.get(path)
        return json.loads(data)
    finally:
        zk.stop()
        zk.close()


def test_a_sasl_ssl_inter_broker_listener_replicates_and_refuses_a_wrong_broker_password(tmp_path_factory):
    from confluent_kafka.admin import AdminClient, NewTopic

    from securitytools import make_pki
    from tools.cluster.brokers import LocalCluster
    from tools.cluster.load import produce

    pki = make_pki(tmp_path_factory.mktemp("pki"))
    overrides = {
        "listener.security.protocol.map": "BROKER:SASL_SSL,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.broker.plain.sasl.jaas.config": _jaas("broker-secret"),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "replica.lag.time.max.ms": "3000",
    }
    cluster = LocalCluster(tmp_path_factory.mktemp("sasl-ssl-brokers"), overrides=overrides)
    for broker in cluster.brokers.values():
        broker.settings["listeners"] += f",BROKER://127.0.0.1:{free_port()}"
    cluster.brokers[3].settings["listener.name.broker.plain.sasl.jaas.config"] = _jaas("not-the-password")
    with cluster:
        stored = _znode(cluster, "/brokers/ids/1")
        assert stored["endpoints"][0].startswith("BROKER://"), "the inter-broker listener is registered first"
        assert len(stored["endpoints"]) == 2
        assert stored["listener_security_protocol_map"] == {"BROKER": "SASL_SSL", "PLAINTEXT": "PLAINTEXT"}

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = NewTopic(
            "secured",
            num_partitions=1,
            replication_factor=-1,
            replica_assignment=[[1, 2, 3]],
            config={"min.insync.replicas": "2"},
        )
        admin.create_topics([topic])["secured"].result(30)
        # broker 3 cannot authenticate to the leader: it falls out of the ISR (or never gets in) and stays out
        cluster.wait_for(lambda: sorted(cluster.metadata("secured")[0]["isr"]) == [1, 2], 40, "ISR [1, 2]")
        sent = produce(cluster.bootstrap, "secured", "s", 30)  # acks=all: both replicas of the ISR have each
        assert len(sent.acked) == 30, sent.failed[:3]
        why = "Connection to node 1 failed authentication due to: Authentication as broker failed: "
        assert any(why in line and "Invalid username or password" in line for line in cluster.brokers[3].lines)
        assert not any("failed authentication" in line for line in cluster.brokers[2].lines)
        assert sorted(cluster.metadata("secured")[0]["isr"]) == [1, 2]
