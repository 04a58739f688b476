"""ACLs and SCRAM users of a ZooKeeper cluster (issue 22 clustered): kept in ZooKeeper as Kafka's ZooKeeper mode
keeps them, so a user or an ACL created through one broker is authenticated and enforced by every other. Three
``kafkalog serve`` brokers with a PLAINTEXT inter-broker listener and a SASL_PLAINTEXT client listener, a real
ZooKeeper, confluent-kafka clients, the ``kafkalog configs`` and ``kafkalog acls`` commands.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kafkalog.cli import main
from tools.cluster import zookeeper
from tools.cluster.zookeeper import free_port

missing = zookeeper.available()
pytestmark = pytest.mark.skipif(missing is not None, reason=f"no ZooKeeper: {missing}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tools.cluster.brokers import LocalCluster

    overrides = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # The brokers' own PLAINTEXT listener is the inter-broker one: its anonymous principal is a super user.
        "super.users": "User:ANONYMOUS",
    }
    c = LocalCluster(tmp_path_factory.mktemp("secure-cluster"), overrides=overrides)
    for broker in c.brokers.values():
        broker.sasl_port = free_port()  # type: ignore[attr-defined]
        broker.settings["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{broker.sasl_port}"  # type: ignore[attr-defined]
    with c:
        yield c


def _sasl(cluster, *ids: int) -> str:
    return ",".join(f"127.0.0.1:{cluster.brokers[i].sasl_port}" for i in ids)


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _znode(cluster, path: str) -> dict | None:
    from kazoo.client import KazooClient

    client = KazooClient(cluster.zookeeper.connect)
    client.start(10)
    try:
        return json.loads(client.get(path)[0]) if client.exists(path) else None
    finally:
        client.stop()


def _produce(cluster, bootstrap: str, user: str, password: str, topic: str) -> str | None:
    """One record as ``user`` over SASL_PLAINTEXT with SCRAM-SHA-512: None when acknowledged, else the error."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
            "message.timeout.ms": 15000,
            "log_level": 0,
        }
    )
    outcome: list[str | None] = []
    producer.produce(topic, b"v", callback=lambda err, _msg: outcome.append(None if err is None else err.name()))
    producer.flush(30)
    return outcome[0] if outcome else "NO_ANSWER"


def test_users_and_acls_made_through_one_broker_hold_on_every_broker(cluster):
    from confluent_kafka.admin import AdminClient, NewTopic

    plain_1 = cluster.brokers[1].bootstrap
    secret = "alice-secret-0123"
    _cli(
        "configs", "--bootstrap-server", plain_1, "--alter", "--entity-type", "users", "--entity-name", "alice",
        "--add-config", f"SCRAM-SHA-512=[password={secret}],SCRAM-SHA-256=[iterations=8192,password={secret}]",
    )  # fmt: skip
    stored = _znode(cluster, "/config/users/alice")
    assert stored is not None and stored["version"] == 1
    assert sorted(stored["config"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert stored["config"]["SCRAM-SHA-256"].endswith(",iterations=8192")
    assert secret not in json.dumps(stored)  # salted and hashed, as Kafka stores it
    plain_3 = cluster.brokers[3].bootstrap
    described = _cli("configs", "--bootstrap-server", plain_3, "--describe", "--entity-type", "users")
    assert "user-principal 'alice' are SCRAM-SHA-256=iterations=8192,SCRAM-SHA-512=iterations=4096" in described

    admin = AdminClient({"bootstrap.servers": plain_1})
    admin.create_topics([NewTopic("ledger", 1, 3)])["ledger"].result(30)
    cluster.wait_for(lambda: cluster.metadata("ledger")[0]["leader"] > 0, 30, "a leader")
    leader = cluster.metadata("ledger")[0]["leader"]
    other = next(i for i in cluster.brokers if i not in (1, leader)) if leader == 1 else leader

    # Authenticated by a broker the user was not created on; no ACL yet: TOPIC_AUTHORIZATION_FAILED.
    assert _produce(cluster, _sasl(cluster, other), "alice", secret, "ledger") == "TOPIC_AUTHORIZATION_FAILED"
    assert _produce(cluster, _sasl(cluster, other), "alice", "wrong", "ledger") is not None

    _cli(
        "acls", "--bootstrap-server", plain_1, "--add", "--allow-principal", "User:alice",
        "--operation", "Write", "--topic", "ledger",
    )  # fmt: skip
    assert _znode(cluster, "/kafka-acl/Topic/ledger") == {
        "version": 1,
        "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}],
    }
    assert _produce(cluster, _sasl(cluster, other), "alice", secret, "ledger") is None
    listed = _cli("acls", "--bootstrap-server", cluster.brokers[2].bootstrap, "--list", "--topic", "ledger")
    assert "principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW" in listed

    # Removed through a third broker: refused again on the leader.
    third = cluster.brokers[3 if other != 3 else 2].bootstrap
    _cli(
        "acls", "--bootstrap-server", third, "--remove", "--force", "--allow-principal", "User:alice",
        "--operation", "Write", "--topic", "ledger",
    )  # fmt: skip
    assert _znode(cluster, "/kafka-acl/Topic/ledger") is None
    cluster.wait_for(
        lambda: _produce(cluster, _sasl(cluster, leader), "alice", secret, "ledger") == "TOPIC_AUTHORIZATION_FAILED",
        20,
        "the removal to be enforced on the leader",
    )


def test_scram_client_of_the_brokers_completes_an_exchange_with_the_scram_server(tmp_path):
    """The client side a broker uses to authenticate to another (inter-broker SCRAM) against kafkalog's SCRAM
    server: the exchange completes for the right password, fails for a wrong one."""
    from kafkalog.broker.cluster.interbroker import ScramClient
    from kafkalog.broker.security.scram import CredentialStore, ScramError, ScramServer, new_credential

    store = CredentialStore(tmp_path)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        store.apply({("broker", mechanism): new_credential(mechanism, "s3cret", 4096)}, set())
        server, client = ScramServer(mechanism, store), ScramClient(mechanism, "broker", "s3cret")
        client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
        assert server.complete and server.user == "broker"
        server, client = ScramServer(mechanism, store), ScramClient(mechanism, "broker", "wrong")
        with pytest.raises(ScramError):
            server.evaluate(client.final(server.evaluate(client.first())))


def test_brokers_replicate_and_shut_down_over_a_sasl_inter_broker_listener(tmp_path_factory):
    """inter.broker.listener.name on a SASL_PLAINTEXT listener (PLAIN): the replica fetchers and the controlled
    shutdown authenticate as the broker's JAAS user, so acks=all writes reach every replica."""
    from tools.cluster.brokers import LocalCluster
    from tools.cluster.load import produce

    jaas = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret";'
    )
    overrides = {
        "listener.security.protocol.map": "BROKER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.broker.plain.sasl.jaas.config": jaas,
    }
    c = LocalCluster(tmp_path_factory.mktemp("sasl-brokers"), overrides=overrides)
    for broker in c.brokers.values():
        broker.settings["listeners"] += f",BROKER://127.0.0.1:{free_port()}"
    with c:
        stored = _znode(c, "/brokers/ids/1")
        assert stored is not None and stored["endpoints"][0].startswith("BROKER://")
        assert stored["listener_security_protocol_map"] == {"BROKER": "SASL_PLAINTEXT", "PLAINTEXT": "PLAINTEXT"}
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic("over-sasl", 1, 3, config={"min.insync.replicas": "3"})])["over-sasl"].result(30)
        c.wait_for(lambda: len(c.metadata("over-sasl")[0]["isr"]) == 3, 30, "a full ISR")
        sent = produce(c.bootstrap, "over-sasl", "s", 30)  # acks=all with min.insync.replicas=3: every replica
        assert len(sent.acked) == 30, sent.failed[:3]
        leader = c.metadata("over-sasl")[0]["leader"]
        c.brokers[leader].stop()
        assert any("controlled shutdown succeeded" in line for line in c.brokers[leader].lines)
