"""SASL listeners: PLAIN and SCRAM-SHA-256/512 with real clients over SASL_SSL and SASL_PLAINTEXT, SCRAM users
managed with ``kafkalog configs``, failed logins (Kafka's errors, the delay, the log line), the requests an
unauthenticated client may send, v0 handshakes, re-authentication, and the stored credentials."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("cryptography")

from brokertools import REPO, BrokerProcess, RawClient, frame, wait_until
from securitytools import make_pki

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_bob="bob-secret";'
)
DELAY_MS = 300


def _settings(pki, **extra) -> dict[str, str]:
    settings = {
        "listeners": "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore),
        "connection.failed.authentication.delay.ms": str(DELAY_MS),
    }
    settings.update(extra)
    return settings


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _kafkalog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from kafkalog.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    with BrokerProcess(tmp_path_factory.mktemp("sasl-logs"), _settings(pki)) as b:
        result = _kafkalog(
            "configs",
            "--bootstrap-server",
            b.bootstrap_of("PLAINTEXT"),
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--add-config",
            "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]",
        )
        assert result.returncode == 0, result.stderr
        assert "Completed updating config for user alice." in result.stdout
        yield b


def _confluent(pki, bootstrap, mechanism, user, password, **extra) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    conf.update(extra)
    return conf


def test_kafkalog_configs_describes_the_scram_users(broker):
    result = _kafkalog(
        "configs", "--bootstrap-server", broker.bootstrap_of("PLAINTEXT"), "--describe", "--entity-type", "users"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192,"
        "SCRAM-SHA-512=iterations=4096"
    )


def test_scram_sha_512_and_256_and_plain_over_sasl_ssl_with_three_clients(broker, pki):
    from confluent_kafka import Producer
    from kafka import KafkaConsumer

    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    values = [f"v{i}".encode() for i in range(100)]
    producer = Producer(_confluent(pki, broker.bootstrap_of("SASL_SSL"), "SCRAM-SHA-512", "alice", "alice-secret"))
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(30) == 0

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap_of("SASL_SSL"),
        security_protocol="SASL_SSL",
        ssl_cafile=str(pki.ca),
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
        group_id=None,
    )
    assert [m.value for m in consumer] == values
    consumer.close()

    if KCAT is not None:
        out = subprocess.run(
            [
                KCAT,
                "-b",
                broker.bootstrap_of("SASL_SSL"),
                "-X",
                "security.protocol=SASL_SSL",
                "-X",
                f"ssl.ca.location={pki.ca}",
                "-X",
                "sasl.mechanisms=PLAIN",
                "-X",
                "sasl.username=bob",
                "-X",
                "sasl.password=bob-secret",
                "-C",
                "-t",
                topic,
                "-e",
                "-q",
                "-f",
                "%s\\n",
            ],
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert out.stdout.split(b"\n")[:-1] == values


@pytest.mark.parametrize(
    "mechanism, user, password, message",
    [
        (
            "SCRAM-SHA-512",
            "alice",
            "wrong",
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
        ),
        (
            "SCRAM-SHA-256",
            "nobody",
            "alice-secret",
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256",
        ),
        ("PLAIN", "bob", "wrong", "Authentication failed: Invalid username or password"),
        ("PLAIN", "nobody", "x", "Authentication failed: Invalid username or password"),
    ],
)
def test_failed_logins_get_kafkas_error_and_nothing_else(broker, pki, mechanism, user, password, message):
    from confluent_kafka import KafkaError, Producer

    seen = []
    producer = Producer(
        _confluent(pki, broker.bootstrap_of("SASL_SSL"), mechanism, user, password, error_cb=seen.append)
    )
    producer.produce("never-written", b"x")
    assert wait_until(lambda: producer.poll(0.1) >= 0 and any(e.code() == KafkaError._AUTHENTICATION for e in seen), 20)
    assert any(message in e.str() for e in seen if e.code() == KafkaError._AUTHENTICATION), seen
    assert producer.flush(1) == 1
    assert "Failed authentication with /127.0.0.1" in broker.log
    assert not (broker.log_dir / "never-written-0").exists()


# ----- raw protocol --------------------------------------------------------------------------------------------
def _handshake(client: RawClient, mechanism: str, version: int = 1):
    from kafka.protocol.sasl import SaslHandshakeRequest

    return client.call(SaslHandshakeRequest(version=version, mechanism=mechanism), version)


def _authenticate(client: RawClient, token: bytes, version: int = 2):
    from kafka.protocol.sasl import SaslAuthenticateRequest

    return client.call(SaslAuthenticateRequest(version=version, auth_bytes=token), version)


def test_a_failed_login_is_delayed_then_the_connection_closed(broker):
    with RawClient(broker.bootstrap_of("SASL_PLAINTEXT")) as client:
        assert _handshake(client, "PLAIN").error_code == 0
        start = time.monotonic()
        response = _authenticate(client, b"\x00bob\x00not-it")
        elapsed = time.monotonic() - start
        assert response.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert response.error_message == "Authentication failed: Invalid username or password"
        assert elapsed >= DELAY_MS / 1000.0
        assert client.closed_by_peer()


def test_an_unauthenticated_client_may_send_only_api_versions_and_sasl(broker):
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

    bootstrap = broker.bootstrap_of("SASL_PLAINTEXT")
    with RawClient(bootstrap) as client:
        assert client.call(ApiVersionsRequest(version=0), 0).error_code == 0
        client.send(frame(3, 1, MetadataRequest(version=1, topics=None).encode(version=1)))
        assert client.closed_by_peer()
    with RawClient(bootstrap) as client:  # SaslAuthenticate before SaslHandshake
        client.send(frame(36, 1, b"\x00\x00\x00\x00"))
        assert client.closed_by_peer()
    with RawClient(bootstrap) as client:
        response = _handshake(client, "GSSAPI")
        assert response.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert client.closed_by_peer()
    # the broker's log reaches broker.log through a thread reading its stderr: it can lag the closed connection
    refused = "Unexpected Kafka request of type Metadata during SASL handshake."
    assert wait_until(lambda: refused in broker.log), broker.log
    with RawClient(bootstrap) as client:  # after a login, everything
        assert _handshake(client, "PLAIN").error_code == 0
        response = _authenticate(client, b"\x00bob\x00bob-secret")
        assert response.error_code == 0 and response.session_lifetime_ms == 0
        assert client.call(MetadataRequest(version=1, topics=None), 1).brokers


def test_requests_out_of_turn_are_refused_as_kafka_refuses_them(broker):
    """Over a real socket: during the exchange another request is answered ILLEGAL_SASL_STATE and the connection
    closed; a second ApiVersions before the handshake, or a frame over sasl.server.max.receive.size before login,
    closes it unanswered (Kafka's SaslServerAuthenticator; the SASL protocol fuzzer's regressions)."""
    from kafka.protocol.metadata import ApiVersionsRequest

    bootstrap = broker.bootstrap_of("SASL_PLAINTEXT")
    with RawClient(bootstrap) as client:
        assert _handshake(client, "SCRAM-SHA-256").error_code == 0
        assert client.call(ApiVersionsRequest(version=0), 0).error_code == 34  # ILLEGAL_SASL_STATE
        assert client.closed_by_peer()
    with RawClient(bootstrap) as client:
        assert client.call(ApiVersionsRequest(version=0), 0).error_code == 0
        client.send(frame(18, 0, b""))
        assert client.closed_by_peer()
    with RawClient(bootstrap) as client:
        assert _handshake(client, "PLAIN", version=0).error_code == 0
        token = b"\x00admin\x00admin-secret" + b"x" * 524288
        with contextlib.suppress(ConnectionError):  # closed before the frame was all read: the same refusal
            client.send(struct.pack(">i", len(token)) + token)
        assert client.closed_by_peer()
    with RawClient(bootstrap) as client:  # refused at its size, before any of its body is read
        client.send(struct.pack(">i", 50 << 20))
        assert client.closed_by_peer()
    assert wait_until(lambda: "(sasl.server.max.receive.size=524288)" in broker.log), broker.log
    with RawClient(bootstrap) as client:  # the listener still takes a valid login
        assert _handshake(client, "PLAIN").error_code == 0
        assert _authenticate(client, b"\x00admin\x00admin-secret").error_code == 0


def test_a_v0_handshake_takes_bare_tokens(broker):
    from kafka.protocol.metadata import MetadataRequest

    with RawClient(broker.bootstrap_of("SASL_PLAINTEXT")) as client:
        assert _handshake(client, "PLAIN", version=0).error_code == 0
        token = b"\x00admin\x00admin-secret"
        client.send(struct.pack(">i", len(token)) + token)
        assert client.receive() == b""
        assert client.call(MetadataRequest(version=1, topics=None), 1).brokers


def test_scram_by_hand_checks_the_server_signature(broker):
    """A SCRAM-SHA-256 exchange computed here from RFC 5802, so the broker's answers are checked independently."""
    import hmac

    with RawClient(broker.bootstrap_of("SASL_PLAINTEXT")) as client:
        assert _handshake(client, "SCRAM-SHA-256").error_code == 0
        first_bare = "n=alice,r=clientnonce123"
        server_first = _authenticate(client, b"n,," + first_bare.encode()).auth_bytes.decode()
        attrs = dict(item.split("=", 1) for item in server_first.split(","))
        assert attrs["r"].startswith("clientnonce123") and int(attrs["i"]) == 8192
        salted = hashlib.pbkdf2_hmac("sha256", b"alice-secret", base64.b64decode(attrs["s"]), int(attrs["i"]))
        final_bare = f"c=biws,r={attrs['r']}"
        auth_message = f"{first_bare},{server_first},{final_bare}".encode()
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
        response = _authenticate(client, f"{final_bare},p={proof}".encode())
        assert response.error_code == 0
        server_key = hmac.new(salted, b"Server Key", "sha256").digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, "sha256").digest())
        assert response.auth_bytes == b"v=" + expected


def test_stored_scram_credentials_hold_no_password(broker):
    password = b"alice-secret"
    forms = [password, base64.b64encode(password), password.hex().encode(), password.decode().encode("utf-16-le")]
    stored = json.loads((broker.log_dir / "scram-credentials.json").read_text())
    for mechanism, name in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
        fields = dict(item.split("=", 1) for item in stored["alice"][mechanism].split(","))
        salted = hashlib.pbkdf2_hmac(name, password, base64.b64decode(fields["salt"]), int(fields["iterations"]))
        forms += [salted, base64.b64encode(salted), salted.hex().encode()]
    for path in broker.log_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for form in forms:
                assert form not in data, f"{path} holds the password in a recoverable form"


def test_reauthentication_keeps_a_client_working(tmp_path, pki):
    from confluent_kafka import Producer

    with BrokerProcess(tmp_path, _settings(pki, **{"connections.max.reauth.ms": "1500"})) as b:
        with RawClient(b.bootstrap_of("SASL_PLAINTEXT")) as client:
            assert _handshake(client, "PLAIN").error_code == 0
            assert _authenticate(client, b"\x00bob\x00bob-secret").session_lifetime_ms == 1500
        producer = Producer(_confluent(pki, b.bootstrap_of("SASL_SSL"), "PLAIN", "bob", "bob-secret"))
        delivered = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            producer.produce("reauth", b"x", on_delivery=lambda err, msg: delivered.append(err))
            producer.poll(0.25)
        assert producer.flush(20) == 0
        assert delivered and all(err is None for err in delivered)
        assert "SASL session has expired" not in b.log, "the client re-authenticated before its session ended"
