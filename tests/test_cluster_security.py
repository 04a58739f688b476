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
