"""The authorizer: Kafka's ACL semantics (unit), and through ``kafkalog acls`` with real clients on SASL and
mutual-TLS listeners: WRITE needed to produce (nothing appended without it), DENY beats ALLOW, PREFIXED
patterns, Metadata hiding topics without DESCRIBE, group READ, ACLs persisted across a restart."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

pytest.importorskip("cryptography")

from brokertools import REPO, BrokerProcess, RawClient, knows_its_topic
from kafkalog.broker.security.acl import AclBinding, AclFilter, AclStore, Authorizer
from securitytools import CLIENT_PRINCIPAL, make_pki

USERS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "carol": "carol-secret",
    "dave": "dave-secret",
}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    + ";"
)


# ----- the rules, in process --------------------------------------------------------------------------------------
def _authorizer(tmp_path, bindings, super_users=(), allow_if_none=False) -> Authorizer:
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = AclStore(tmp_path)
    store.add(AclBinding(*b) for b in bindings)
    return Authorizer(store, super_users, allow_if_none)


def test_acl_rules(tmp_path):
    a = _authorizer(
        tmp_path,
        [
            ("TOPIC", "orders", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"),
            ("TOPIC", "orders", "LITERAL", "User:*", "10.0.0.9", "ALL", "DENY"),
            ("TOPIC", "logs-", "PREFIXED", "User:bob", "*", "READ", "ALLOW"),
            ("TOPIC", "*", "LITERAL", "User:carol", "*", "ALTER_CONFIGS", "ALLOW"),
            ("TOPIC", "logs-secret", "LITERAL", "User:bob", "*", "READ", "DENY"),
        ],
        super_users=["User:root"],
    )
    ok = a.authorize
    assert ok("User:alice", "127.0.0.1", "WRITE", "TOPIC", "orders")
    assert ok("User:alice", "127.0.0.1", "DESCRIBE", "TOPIC", "orders")  # WRITE implies DESCRIBE
    assert not ok("User:alice", "127.0.0.1", "READ", "TOPIC", "orders")
    assert not ok("User:alice", "10.0.0.9", "WRITE", "TOPIC", "orders")  # DENY ALL from that host wins
    assert ok("User:bob", "h", "READ", "TOPIC", "logs-app") and ok("User:bob", "h", "DESCRIBE", "TOPIC", "logs-")
    assert not ok("User:bob", "h", "READ", "TOPIC", "log-app")
    assert not ok("User:bob", "h", "READ", "TOPIC", "logs-secret")  # a literal DENY beats a prefixed ALLOW
    assert ok("User:bob", "h", "DESCRIBE", "TOPIC", "logs-secret")  # a DENY of READ does not deny DESCRIBE
    assert ok("User:carol", "h", "DESCRIBE_CONFIGS", "TOPIC", "anything")  # ALTER_CONFIGS implies it, via '*'
    assert not ok("User:carol", "h", "DESCRIBE", "TOPIC", "anything")
    assert ok("User:root", "10.0.0.9", "WRITE", "TOPIC", "orders")  # super user
    assert not ok("User:alice", "h", "READ", "GROUP", "g")  # no ACL on the group: allow.everyone... is false
    assert _authorizer(tmp_path / "b", [], allow_if_none=True).authorize("User:x", "h", "READ", "GROUP", "g")


def test_acl_store_is_persisted_and_filters_delete(tmp_path):
    store = AclStore(tmp_path)
    store.add(
        [
            AclBinding("TOPIC", "t", "LITERAL", "User:a", "*", "READ", "ALLOW"),
            AclBinding("TOPIC", "t-", "PREFIXED", "User:a", "*", "READ", "ALLOW"),
            AclBinding("GROUP", "g", "LITERAL", "User:a", "*", "READ", "ALLOW"),
        ]
    )
    assert len(AclStore(tmp_path).bindings) == 3
    deleted = store.remove([AclFilter(resource_type="TOPIC", resource_name="t-x", pattern_type="MATCH")])
    assert [b.resource_name for b in deleted[0]] == ["t-"]
    assert sorted(b.resource_name for b in AclStore(tmp_path).bindings) == ["g", "t"]
    assert AclBinding("CLUSTER", "other", "LITERAL", "User:a", "*", "ALTER", "ALLOW").validate()
    assert AclBinding("TOPIC", "*", "PREFIXED", "User:a", "*", "READ", "ALLOW").validate()
    assert AclBinding("TOPIC", "t", "LITERAL", "alice", "*", "READ", "ALLOW").validate()


# ----- a broker with an authorizer -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _settings(pki) -> dict[str, str]:
    return {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0,MAPPED://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,MTLS:SSL,MAPPED:SSL",
        "listener.name.mapped.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "auto.create.topics.enable": "false",
    }


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    with BrokerProcess(tmp_path_factory.mktemp("acl-logs"), _settings(pki)) as b:
        yield b


@pytest.fixture(scope="module")
def admin_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret";\n'
    )
    return path


def acls(broker, admin_config, *args: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kafkalog.cli import main; main()",
            "acls",
            "--bootstrap-server",
            broker.bootstrap_of("SASL_PLAINTEXT"),
            "--command-config",
            str(admin_config),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def _conf(broker, user: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }
    conf.update(extra)
    return conf


def _create_topic(broker, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(_conf(broker, "admin"))  # kept referenced until the result is in
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def _produce(broker, user: str, topic: str, values) -> list:
    from confluent_kafka import Producer

    errors: list = []
    producer = Producer(_conf(broker, user, **{"message.timeout.ms": 8000}))
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    return errors


def _log_size(broker, topic: str) -> int:
    return sum(p.stat().st_size for p in (broker.log_dir / f"{topic}-0").glob("*.log"))


def test_produce_needs_write_and_nothing_is_appended_without_it(broker, admin_config):
    from confluent_kafka import KafkaError

    topic = f"orders-{uuid.uuid4().hex[:6]}"
    _create_topic(broker, topic)
    acls(broker, admin_config, "--add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", topic)
    errors = _produce(broker, "bob", topic, [b"a", b"b"])
    assert errors and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors
    assert _log_size(broker, topic) == 0, "a denied produce appended nothing"
    acls(broker, admin_config, "--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", topic)
    assert _produce(broker, "bob", topic, [b"c"]) == [None]
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(_conf(broker, "admin", **{"group.id": "check", "enable.auto.commit": False}))
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.close()
    assert (low, high) == (0, 1), "only the allowed record is in the log"


def test_deny_beats_allow(broker, admin_config):
    from confluent_kafka import KafkaError

    topic = f"deny-{uuid.uuid4().hex[:6]}"
    _create_topic(broker, topic)
    acls(broker, admin_config, "--add", "--allow-principal", "User:alice", "--operation", "All", "--topic", topic)
    acls(broker, admin_config, "--add", "--deny-principal", "User:alice", "--operation", "Write", "--topic", topic)
    errors = _produce(broker, "alice", topic, [b"x"])
    assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _log_size(broker, topic) == 0


def test_prefixed_acls_match_by_prefix(broker, admin_config):
    from confluent_kafka import KafkaError

    prefix = f"app{uuid.uuid4().hex[:6]}-"
    for name in (prefix + "events", "x" + prefix + "events"):
        _create_topic(broker, name)
    acls(
        broker,
        admin_config,
        "--add",
        "--allow-principal",
        "User:carol",
        "--operation",
        "Write",
        "--topic",
        prefix,
        "--resource-pattern-type",
        "prefixed",
    )
    assert _produce(broker, "carol", prefix + "events", [b"ok"]) == [None]
    errors = _produce(broker, "carol", "x" + prefix + "events", [b"no"])
    assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_hides_topics_without_describe(broker, admin_config):
    from confluent_kafka.admin import AdminClient

    seen, hidden = f"seen-{uuid.uuid4().hex[:6]}", f"hidden-{uuid.uuid4().hex[:6]}"
    _create_topic(broker, seen)
    _create_topic(broker, hidden)
    acls(broker, admin_config, "--add", "--allow-principal", "User:carol", "--operation", "Describe", "--topic", seen)
    topics = AdminClient(_conf(broker, "carol")).list_topics(timeout=10).topics
    assert seen in topics and hidden not in topics
    everything = AdminClient(_conf(broker, "admin")).list_topics(timeout=10).topics
    assert seen in everything and hidden in everything


def test_a_consumer_needs_read_on_its_group(broker, admin_config):
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    topic = f"grp-{uuid.uuid4().hex[:6]}"
    _create_topic(broker, topic)
    acls(broker, admin_config, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    kwargs = dict(
        bootstrap_servers=broker.bootstrap_of("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
        group_id="alices-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    consumer = KafkaConsumer(topic, **kwargs)
    with pytest.raises(GroupAuthorizationFailedError):
        list(consumer)
    consumer.close()
    acls(
        broker,
        admin_config,
        "--add",
        "--allow-principal",
        "User:alice",
        "--consumer",
        "--topic",
        topic,
        "--group",
        "alices-group",
    )
    assert _produce(broker, "admin", topic, [b"m"]) == [None]
    consumer = KafkaConsumer(topic, **kwargs)
    knows_its_topic(consumer, topic)
    assert [m.value for m in consumer] == [b"m"]
    consumer.close()


def test_the_principal_of_a_client_certificate_is_authorized(broker, admin_config, pki, caplog):
    from kafka import KafkaConsumer

    topic = f"tls-{uuid.uuid4().hex[:6]}"
    _create_topic(broker, topic)
    assert _produce(broker, "admin", topic, [b"for-alice-cert"]) == [None]

    def consume(listener="MTLS"):
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap_of(listener),
            security_protocol="SSL",
            ssl_cafile=str(pki.ca),
            ssl_certfile=str(pki.client_cert),
            ssl_keyfile=str(pki.client_key),
            auto_offset_reset="earliest",
            consumer_timeout_ms=5000,
            group_id=None,
        )
        try:
            return [m.value for m in consumer]
        finally:
            consumer.close()

    assert consume() == []  # kafka-python logs the TOPIC_AUTHORIZATION_FAILED of its metadata and reads nothing
    assert f"Topic {topic} is not authorized for this client" in caplog.text
    acls(broker, admin_config, "--add", "--allow-principal", CLIENT_PRINCIPAL, "--operation", "Read", "--topic", topic)
    assert consume() == [b"for-alice-cert"]
    # On the listener with ssl.principal.mapping.rules the same certificate is User:alice, who may not read yet.
    assert consume("MAPPED") == []
    acls(broker, admin_config, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    assert consume("MAPPED") == [b"for-alice-cert"]


def test_acls_list_remove_and_survive_a_restart(tmp_path, pki, admin_config):
    b = BrokerProcess(tmp_path, _settings(pki)).start()
    try:
        out = acls(
            b,
            admin_config,
            "--add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Read",
            "--operation",
            "Describe",
            "--topic",
            "t1",
            "--group",
            "g1",
        )
        assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t1, patternType=LITERAL)`" in out
    finally:
        b.stop()
    b = BrokerProcess(tmp_path, _settings(pki)).start()
    try:
        listing = acls(b, admin_config, "--list", "--topic", "t1")
        assert listing.splitlines()[:3] == [
            "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t1, patternType=LITERAL)`: ",
            " \t(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW) ",
            " \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW) ",
        ]
        acls(
            b,
            admin_config,
            "--remove",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Read",
            "--topic",
            "t1",
            "--force",
        )
        listing = acls(b, admin_config, "--list")
        assert "operation=READ, permissionType=ALLOW) " in listing  # the group's READ stays
        assert "name=t1" in listing and listing.count("operation=") == 3
    finally:
        b.stop()


def test_a_principal_without_alter_on_the_cluster_cannot_change_acls(broker, tmp_path):
    config = tmp_path / "bob.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" '
        'password="bob-secret";\n'
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kafkalog.cli import main; main()",
            "acls",
            "--bootstrap-server",
            broker.bootstrap_of("SASL_PLAINTEXT"),
            "--command-config",
            str(config),
            "--add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "All",
            "--cluster",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1 and "ClusterAuthorizationFailedError" in result.stderr, result.stderr


def test_acl_apis_without_an_authorizer_say_security_is_disabled(tmp_path):
    from kafka.protocol.admin import DescribeAclsRequest

    with BrokerProcess(tmp_path) as b, RawClient(b.bootstrap) as client:
        response = client.call(
            DescribeAclsRequest(
                version=1,
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            ),
            1,
        )
        assert response.error_code == 54 and response.error_message == "No Authorizer is configured on the broker"


def _init_producer_id(broker, user: str) -> int:
    """InitProducerId (no transactional id) as ``user`` over a raw SASL/PLAIN connection: its error code."""
    from kafka.protocol.producer import InitProducerIdRequest
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    with RawClient(broker.bootstrap_of("SASL_PLAINTEXT")) as client:
        assert client.call(SaslHandshakeRequest(version=1, mechanism="PLAIN"), 1).error_code == 0
        token = f"\x00{user}\x00{USERS[user]}".encode()
        assert client.call(SaslAuthenticateRequest(version=2, auth_bytes=token), 2).error_code == 0
        request = InitProducerIdRequest(
            version=4, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
        )
        return client.call(request, 4).error_code


def test_an_idempotent_producer_needs_idempotent_write_or_write(broker, admin_config):
    from confluent_kafka import Producer

    topic = f"idem-{uuid.uuid4().hex[:6]}"
    _create_topic(broker, topic)
    assert _init_producer_id(broker, "dave") == 31  # CLUSTER_AUTHORIZATION_FAILED
    # KIP-679: WRITE on a topic is enough for InitProducerId.
    acls(broker, admin_config, "--add", "--allow-principal", "User:dave", "--producer", "--topic", topic)
    assert _init_producer_id(broker, "dave") == 0
    producer = Producer(_conf(broker, "dave", **{"enable.idempotence": True}))
    delivered = []
    producer.produce(topic, b"y", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(20) == 0 and delivered == [None]


def test_an_unreadable_acl_file_stops_the_start_and_is_left_as_it_is(tmp_path, pki):
    (tmp_path / "acls.json").write_text('[{"resource_type": "TOPIC"')
    with pytest.raises(RuntimeError, match=r"Cannot read the ACLs in .*acls\.json"):
        BrokerProcess(tmp_path, _settings(pki)).start(timeout=30)
    assert (tmp_path / "acls.json").read_text() == '[{"resource_type": "TOPIC"'
