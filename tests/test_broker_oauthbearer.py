"""SASL/OAUTHBEARER with Kafka's default unsecured JWS validator: the validator's rules (unit, fixed clock), the
exchange on the wire (the JSON error challenge, the client's \\x01, the session lifetime from the token's expiry),
and real clients -- confluent-kafka (librdkafka's own unsecured JWT, and tokens from an oauth_cb) and kafka-python
(a token provider) -- producing and consuming with a good token, refused with SASL_AUTHENTICATION_FAILED and
Kafka's message for an expired token, a missing required scope and a bad token, and seen by the ACLs as
User:<sub>."""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
import time
import uuid

import pytest

from brokertools import REPO, BrokerProcess, RawClient, encode_request, wait_until
from kafkalog.broker.security.oauthbearer import (
    IllegalToken,
    OAuthBearerSaslError,
    UnsecuredValidatorOptions,
    parse_client_initial_response,
    validate_unsecured_token,
)

NOW_MS = 1_700_000_000_000
JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredLoginStringClaim_sub="admin" unsecuredValidatorRequiredScope="kafka" '
    'unsecuredValidatorAllowableClockSkewMs="1000";'
)
DELAY_MS = 200


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def jwt(claims: dict, header: dict | None = None, signature: str = "") -> str:
    """An unsecured JWS built here from RFC 7515/7519, independent of the broker's parser."""
    return f"{_b64(header or {'alg': 'none'})}.{_b64(claims)}.{signature}"


def _claims(sub="alice", life_s=3600.0, scope=("kafka",), **extra) -> dict:
    now = time.time()
    # exp on a whole millisecond: the session lifetime the broker derives (exp ms - its now ms) is then at most
    # life_s * 1000, never a rounding millisecond more
    claims = {"sub": sub, "iat": now, "exp": math.floor((now + life_s) * 1000) / 1000, "scope": list(scope)}
    claims.update(extra)
    return claims


# ----- the validator, with a fixed clock ------------------------------------------------------------------------
def _validate(token: str, **options) -> object:
    return validate_unsecured_token(token, UnsecuredValidatorOptions(**options), NOW_MS)


def test_the_unsecured_validator_accepts_a_good_token_and_reads_its_claims():
    token = jwt({"sub": "alice", "iat": NOW_MS / 1000 - 10, "exp": NOW_MS / 1000 + 60, "scope": ["a", " b "]})
    jws = _validate(token, required_scope=("a", "b"))
    assert jws.principal_name == "alice"
    assert jws.scope == {"a", "b"}
    assert jws.lifetime_ms == NOW_MS + 60_000
    assert jws.start_time_ms == NOW_MS - 10_000
    # a custom principal claim and a string scope (one scope value, as Kafka reads a string claim)
    custom = jwt({"client": "svc", "exp": NOW_MS / 1000 + 1, "perm": "write"})
    jws = _validate(custom, principal_claim_name="client", scope_claim_name="perm", required_scope=("write",))
    assert (jws.principal_name, jws.scope) == ("svc", {"write"})


@pytest.mark.parametrize(
    "token, options, reason, scope",
    [
        (
            jwt({"sub": "a", "exp": NOW_MS / 1000}),
            {},
            "minus allowable clock skew (0 ms) was on or after the Expiration",
            None,
        ),
        (jwt({"sub": "a", "exp": NOW_MS / 1000 - 0.5}), {"allowable_clock_skew_ms": 1000}, None, None),
        (jwt({"sub": "a", "exp": NOW_MS / 1000 + 60, "iat": NOW_MS / 1000 + 5}), {}, "The Issued At value", None),
        (
            jwt({"sub": "a", "exp": NOW_MS / 1000 + 60, "iat": NOW_MS / 1000 + 0.5}),
            {"allowable_clock_skew_ms": 1000},
            None,
            None,
        ),
        (jwt({"sub": "a"}), {}, "No expiration time in JWT", None),
        (jwt({"exp": NOW_MS / 1000 + 60}), {}, "No principal name in JWT claim: sub", None),
        (jwt({"sub": " ", "exp": NOW_MS / 1000 + 60}), {}, "No principal name in JWT claim: sub", None),
        (jwt({"sub": 7, "exp": NOW_MS / 1000 + 60}), {}, "The 'sub' claim was not of type String: Integer", None),
        (jwt({"sub": "a", "exp": "soon"}), {}, "The 'exp' claim was not of type Number: String", None),
        (jwt({"sub": "a", "exp": NOW_MS / 1000 + 60}, {"alg": "HS256"}), {}, "must have 'none' for an algorithm", None),
        (
            jwt({"sub": "a", "exp": NOW_MS / 1000 + 60}, signature="c2ln"),
            {},
            "must not contain a digital signature",
            None,
        ),
        ("a.b", {}, "must have 3 dot-separated Base64URL-encoded values", None),
        ("e30..", {}, "contains '..'", None),
        ("!!!.e30.", {}, "malformed", None),
        (
            jwt({"sub": "a", "exp": NOW_MS / 1000 + 60, "scope": ["x"]}),
            {"required_scope": ("x", "y")},
            "missing a required scope (y)",
            "[x, y]",
        ),
    ],
)
def test_the_unsecured_validator_refuses_as_kafka_does(token, options, reason, scope):
    if reason is None:  # within the allowed clock skew
        _validate(token, **options)
        return
    with pytest.raises(IllegalToken) as failure:
        _validate(token, **options)
    assert reason in str(failure.value)
    assert failure.value.scope == scope


def test_client_first_message_grammar():
    parsed = parse_client_initial_response(b"n,a=alice,\x01auth=Bearer abc.def.\x01traceId=42\x01\x01")
    assert (parsed.token, parsed.authorization_id, dict(parsed.extensions)) == ("abc.def.", "alice", {"traceId": "42"})
    assert parse_client_initial_response(b"n,,\x01auth=bearer x\x01\x01").token == "x"
    for bad in (b"n,,auth=Bearer x", b"n,,\x01auth=Basic x\x01\x01", b"n,,\x01\x01", b"y,,\x01auth=Bearer x\x01\x01"):
        with pytest.raises(OAuthBearerSaslError):
            parse_client_initial_response(bad)


def test_kafkas_unsecured_login_token_passes_the_validator():
    from kafkalog.broker.security.oauthbearer import unsecured_login_token

    options = {
        "unsecuredLoginStringClaim_sub": "admin",
        "unsecuredLoginListClaim_scope": "|kafka|other",
        "unsecuredLoginNumberClaim_level": "3",
        "unsecuredLoginLifetimeSeconds": "60",
        "unsecuredLoginExtension_traceId": "42",
    }
    token, extensions = unsecured_login_token(options, now_s=NOW_MS / 1000)
    jws = _validate(token, required_scope=("kafka",))
    assert (jws.principal_name, jws.scope, jws.lifetime_ms) == ("admin", {"kafka", "other"}, NOW_MS + 60_000)
    assert jws.claims["level"] == 3 and extensions == {"traceId": "42"}
    from kafkalog.errors import InvalidConfigurationError

    with pytest.raises(InvalidConfigurationError, match="unsecuredLoginStringClaim_sub"):
        unsecured_login_token({})


def test_listener_configuration():
    from kafkalog.broker.config import Endpoint
    from kafkalog.broker.security.sasl import listener_sasl
    from kafkalog.errors import InvalidConfigurationError

    endpoint = Endpoint("SASL_PLAINTEXT", "127.0.0.1", 0, "SASL_PLAINTEXT")
    props = {"sasl.enabled.mechanisms": "OAUTHBEARER"}
    with pytest.raises(
        InvalidConfigurationError, match=r"listener\.name\.sasl_plaintext\.oauthbearer\.sasl\.jaas\.config"
    ):
        listener_sasl(props, endpoint)
    props["listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"] = JAAS
    options = listener_sasl(props, endpoint).oauthbearer
    assert options == UnsecuredValidatorOptions("sub", "scope", ("kafka",), 1000)
    props["listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"] = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredValidatorAllowableClockSkewMs="-1";'
    )
    with pytest.raises(InvalidConfigurationError, match="Allowable clock skew millis must not be negative"):
        listener_sasl(props, endpoint)


# ----- a broker ------------------------------------------------------------------------------------------------
def _settings(**extra) -> dict[str, str]:
    settings = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": str(DELAY_MS),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # the PLAINTEXT listener is the operator's (its clients are User:ANONYMOUS)
        "super.users": "User:ANONYMOUS;User:admin",
    }
    settings.update(extra)
    return settings


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("oauth-logs"), _settings()) as b:
        yield b


def _kafkalog(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", "from kafkalog.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def _allow(broker, principal: str, operation: str, topic: str) -> None:
    _kafkalog(
        "acls",
        "--bootstrap-server",
        broker.bootstrap_of("PLAINTEXT"),
        "--add",
        "--allow-principal",
        principal,
        "--operation",
        operation,
        "--topic",
        topic,
    )


def _confluent(broker, **extra) -> dict:
    conf = {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
    }
    conf.update(extra)
    return conf


def _unsecured_jwt(principal: str, **extra) -> dict:
    """librdkafka builds and signs nothing: its own unsecured JWT from sasl.oauthbearer.config."""
    return {
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": f"principal={principal} scope=kafka,other",
        **extra,
    }


def test_real_clients_produce_and_consume_with_tokens_and_acls_see_the_subject(broker):
    from confluent_kafka import KafkaError, Producer
    from kafka import KafkaConsumer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    _kafkalog("topics", "--bootstrap-server", broker.bootstrap_of("PLAINTEXT"), "--create", "--topic", topic)
    _allow(broker, "User:alice", "Write", topic)
    _allow(broker, "User:bob", "Read", topic)

    values = [f"v{i}".encode() for i in range(50)]
    delivered: list = []
    producer = Producer(_confluent(broker, **_unsecured_jwt("alice")))
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * len(values)

    class Provider(AbstractTokenProvider):
        def token(self):
            return jwt(_claims(sub="bob"))

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap_of("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=Provider(),
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
        group_id=None,
    )
    assert [m.value for m in consumer] == values
    consumer.close()

    # a good token for a principal without WRITE: the ACLs see User:mallory, not the broker's login identity
    errors: list = []
    other = Producer(_confluent(broker, **_unsecured_jwt("mallory", **{"message.timeout.ms": 8000})))
    other.produce(topic, b"no", on_delivery=lambda err, msg: errors.append(err))
    other.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors


@pytest.mark.parametrize(
    "token, message",
    [
        (jwt(_claims(life_s=-60)), '{"status":"invalid_token"}'),
        (jwt(_claims(scope=["other"])), '{"status":"insufficient_scope", "scope":"[kafka]"}'),
        (jwt(_claims(), {"alg": "HS256"}, signature="c2ln"), '{"status":"invalid_token"}'),
    ],
    ids=["expired", "missing-scope", "signed"],
)
def test_bad_tokens_are_refused_with_kafkas_error(broker, token, message):
    from confluent_kafka import KafkaError, Producer

    seen: list = []

    def oauth_cb(_config):
        return token, time.time() + 3600  # the client's idea of the expiry; the broker judges the claims

    producer = Producer(_confluent(broker, oauth_cb=oauth_cb, error_cb=seen.append))
    producer.produce("never-written", b"x")
    assert wait_until(lambda: producer.poll(0.1) >= 0 and any(e.code() == KafkaError._AUTHENTICATION for e in seen), 20)
    assert any(message in e.str() for e in seen if e.code() == KafkaError._AUTHENTICATION), seen
    assert producer.flush(1) == 1
    assert not (broker.log_dir / "never-written-0").exists()


def test_kafka_python_is_refused_an_expired_token(broker, caplog):
    import logging

    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Expired(AbstractTokenProvider):
        def token(self):
            return jwt(_claims(life_s=-5))

    caplog.set_level(logging.WARNING, logger="kafka")
    with pytest.raises(KafkaTimeoutError):  # kafka-python retries the bootstrap until its timeout, then gives up
        KafkaProducer(
            bootstrap_servers=broker.bootstrap_of("SASL_PLAINTEXT"),
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Expired(),
            max_block_ms=3000,
            bootstrap_timeout_ms=3000,
        )
    # The broker answers SASL_AUTHENTICATION_FAILED '{"status":"invalid_token"}' and closes (as Kafka does);
    # kafka-python 3.0 drops an answer that arrives in the same read as the close ("socket disconnected"), so it
    # reports one or the other, attempt by attempt. The broker's side is certain: every attempt was refused.
    assert 'SaslAuthenticationFailedError: {"status":"invalid_token"}' in caplog.text or (
        "socket disconnected" in caplog.text
    )
    assert wait_until(lambda: '({"status":"invalid_token"}: The indicated time' in broker.log, 10)


def test_kafkalog_commands_log_in_with_kafkas_unsecured_oauthbearer_login(broker, tmp_path):
    config = tmp_path / "oauth.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="admin" unsecuredLoginListClaim_scope=",kafka";\n'
    )
    common = ["--bootstrap-server", broker.bootstrap_of("SASL_PLAINTEXT"), "--command-config", str(config)]
    _kafkalog("acls", *common, "--add", "--allow-principal", "User:carol", "--operation", "Read", "--topic", "cli-t")
    assert "principal=User:carol" in _kafkalog("acls", *common, "--list", "--topic", "cli-t")


def test_a_broker_logs_in_to_another_with_oauthbearer(broker):
    """The client side a broker uses for an OAUTHBEARER inter-broker listener (cluster/interbroker.py), against
    this broker: Kafka's unsecured login token gets in; one without the required scope is refused, with why."""
    import asyncio

    from kafka.protocol.metadata import MetadataResponse

    from kafkalog.broker.cluster.fetcher import BrokerConnection
    from kafkalog.broker.cluster.interbroker import InterBrokerAuthenticationError, InterBrokerSecurity

    host, port = broker.bootstrap_of("SASL_PLAINTEXT").rsplit(":", 1)

    async def login(scope: str) -> bytes:
        options = (("unsecuredLoginStringClaim_sub", "broker-1"), ("unsecuredLoginListClaim_scope", scope))
        security = InterBrokerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", None, "OAUTHBEARER", oauth_options=options)
        conn = BrokerConnection(host, int(port), "broker-1-fetcher", security)
        await conn.connect(10)
        try:
            return await conn.request(3, 1, MetadataRequest(version=1, topics=None).encode(version=1), 10)
        finally:
            conn.close()

    from kafka.protocol.metadata import MetadataRequest

    assert MetadataResponse[1].decode(asyncio.run(login(",kafka"))).brokers
    with pytest.raises(InterBrokerAuthenticationError) as refused:
        asyncio.run(login(",other"))
    assert str(refused.value) == 'OAUTHBEARER token refused: {"status":"insufficient_scope", "scope":"[kafka]"}'

    from kafkalog.broker.config import KafkaConfig
    from kafkalog.errors import InvalidConfigurationError

    props = {
        "listeners": "BROKER://127.0.0.1:0",
        "listener.security.protocol.map": "BROKER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        "listener.name.broker.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker-1";'
        ),
    }
    assert InterBrokerSecurity.from_config(KafkaConfig(props)).mechanism == "OAUTHBEARER"
    props["listener.name.broker.oauthbearer.sasl.jaas.config"] = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    )
    with pytest.raises(InvalidConfigurationError, match="unsecuredLoginStringClaim_sub"):
        InterBrokerSecurity.from_config(KafkaConfig(props))


# ----- on the wire ------------------------------------------------------------------------------------------------
def _handshake(client: RawClient, mechanism: str = "OAUTHBEARER"):
    from kafka.protocol.sasl import SaslHandshakeRequest

    return client.call(SaslHandshakeRequest(version=1, mechanism=mechanism), 1)


def _authenticate(client: RawClient, token: bytes, version: int = 2):
    from kafka.protocol.sasl import SaslAuthenticateRequest

    return client.call(SaslAuthenticateRequest(version=version, auth_bytes=token), version)


def _first(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def test_the_exchange_on_the_wire(broker):
    from kafka.protocol.metadata import MetadataRequest

    bootstrap = broker.bootstrap_of("SASL_PLAINTEXT")
    with RawClient(bootstrap) as client:  # a valid token: the session ends when the token does
        assert _handshake(client).mechanisms == ["OAUTHBEARER"]
        response = _authenticate(client, _first(jwt(_claims(life_s=60))))
        assert response.error_code == 0 and response.auth_bytes == b""
        assert 50_000 < response.session_lifetime_ms <= 60_000
        assert client.call(MetadataRequest(version=1, topics=None), 1).brokers
    with RawClient(bootstrap) as client:  # an invalid token: an error challenge, then the failure after \x01
        _handshake(client)
        response = _authenticate(client, _first(jwt(_claims(life_s=-1))))
        assert (response.error_code, response.auth_bytes) == (0, b'{"status":"invalid_token"}')
        start = time.monotonic()
        response = _authenticate(client, b"\x01")
        assert response.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert response.error_message == '{"status":"invalid_token"}'
        assert time.monotonic() - start >= DELAY_MS / 1000.0
        assert client.closed_by_peer()
    with RawClient(bootstrap) as client:  # a malformed first message: Kafka's standard failure message
        _handshake(client)
        response = _authenticate(client, b"n,,auth=Bearer x")
        assert response.error_code == 58
        assert response.error_message == (
            "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"
        )
    with RawClient(bootstrap) as client:  # an authorization id other than the token's subject
        _handshake(client)
        response = _authenticate(client, _first(jwt(_claims()), authzid="root"))
        assert response.error_code == 58
        assert "Client requested an authorization id (root) that is different from the token's principal name" in (
            response.error_message
        )
    assert "Failed authentication with /127.0.0.1" in broker.log
    assert "was on or after the Expiration Time value" in broker.log, "the broker logs why a token was refused"


def test_sessions_end_with_the_token_and_clients_reauthenticate(tmp_path):
    """The session a token opens ends when the token does (or at connections.max.reauth.ms, if sooner); a client
    logs in again on the same connection (KIP-368) before then, and a request after the end closes the
    connection."""
    from confluent_kafka import Producer
    from kafka.protocol.metadata import MetadataRequest

    settings = _settings(**{"allow.everyone.if.no.acl.found": "true", "connections.max.reauth.ms": "2000"})
    with BrokerProcess(tmp_path, settings) as b:
        with RawClient(b.bootstrap_of("SASL_PLAINTEXT")) as client:  # re-authentication on the same connection
            _handshake(client)
            assert _authenticate(client, _first(jwt(_claims(life_s=30)))).session_lifetime_ms == 2000
            assert _handshake(client).error_code == 0
            response = _authenticate(client, _first(jwt(_claims(life_s=1))))
            authenticated = time.monotonic()
            assert response.error_code == 0 and 0 < response.session_lifetime_ms <= 1000  # the token ends first
            lifetime = response.session_lifetime_ms / 1000.0
            assert wait_until(lambda: time.monotonic() - authenticated > lifetime, 5)
            client.send(encode_request(MetadataRequest(version=1, topics=None), 1))
            assert client.closed_by_peer()
        assert wait_until(lambda: "its SASL session has expired" in b.log, 10)
        with RawClient(b.bootstrap_of("SASL_PLAINTEXT")) as client:
            _handshake(client)
            _authenticate(client, _first(jwt(_claims(life_s=30))))
            _handshake(client)
            response = _authenticate(client, _first(jwt(_claims(sub="eve", life_s=30))))
            assert response.error_code == 58
            assert (
                "Cannot change principals during re-authentication from User.alice: User.eve" in response.error_message
            )

        producer = Producer(_confluent(b, **_unsecured_jwt("alice")))
        delivered: list = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            producer.produce("reauth", b"x", on_delivery=lambda err, msg: delivered.append(err))
            producer.poll(0.25)
        assert producer.flush(20) == 0
        assert delivered and all(err is None for err in delivered)
        expired = [line for line in b.lines if "its SASL session has expired" in line]
        assert len(expired) == 1, "librdkafka re-authenticated before each of its sessions ended"
