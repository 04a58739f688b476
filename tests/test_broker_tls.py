"""TLS listeners: SSL and mutual TLS with real clients (confluent-kafka, kafka-python, kcat), PEM and PKCS12
keystores, the principal of a client certificate, refused certificates, and Fetch bytes over TLS equal to the
zero-copy plaintext ones."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import uuid

import pytest

pytest.importorskip("cryptography")

from brokertools import BrokerProcess, RawClient, wait_until
from securitytools import CLIENT_PRINCIPAL, make_pki

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls_settings(pki) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.client.auth": "required",
    }


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    with BrokerProcess(tmp_path_factory.mktemp("tls-logs"), _tls_settings(pki)) as b:
        yield b


def _context(pki, cert=None, key=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def _confluent(pki, bootstrap: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.endpoint.identification.algorithm": "https",
    }
    conf.update(extra)
    return conf


def test_confluent_kafka_mutual_tls_then_kafka_python_and_kcat_read_over_tls(broker, pki):
    from confluent_kafka import Producer
    from kafka import KafkaConsumer

    topic = f"tls-{uuid.uuid4().hex[:8]}"
    values = [f"secret-{i}".encode() * (i % 7 + 1) for i in range(200)]
    producer = Producer(
        _confluent(
            pki,
            broker.bootstrap_of("MTLS"),
            **{"ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)},
        )
    )
    errors = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and errors == []

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap_of("SSL"),
        security_protocol="SSL",
        ssl_cafile=str(pki.ca),
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
        enable_auto_commit=False,
        group_id=None,
    )
    got = [m.value for m in consumer]
    consumer.close()
    assert got == values

    if KCAT is not None:
        out = subprocess.run(
            [
                KCAT,
                "-b",
                broker.bootstrap_of("MTLS"),
                "-X",
                "security.protocol=SSL",
                "-X",
                f"ssl.ca.location={pki.ca}",
                "-X",
                f"ssl.certificate.location={pki.client_cert}",
                "-X",
                f"ssl.key.location={pki.client_key}",
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


def _fetch_body(client: RawClient, topic: str) -> bytes:
    from kafka.protocol.consumer import FetchRequest

    from brokertools import encode_request

    request = FetchRequest(
        version=11,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    client.send(encode_request(request, 11, correlation_id=7))
    return client.receive()


def test_fetch_over_tls_copies_the_same_bytes_as_zero_copy_plaintext(broker, pki):
    from confluent_kafka import Producer

    topic = f"bytes-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap_of("PLAINTEXT"), "linger.ms": 5})
    for i in range(500):
        producer.produce(topic, f"value-{i}".encode() * 20, key=str(i).encode())
    assert producer.flush(30) == 0
    with RawClient(broker.bootstrap_of("PLAINTEXT")) as plain:
        plain_body = _fetch_body(plain, topic)
    with RawClient(broker.bootstrap_of("SSL"), ssl_context=_context(pki)) as tls:
        tls_body = _fetch_body(tls, topic)
    assert len(plain_body) > 20000, "the fetch carried the records"
    assert tls_body == plain_body


@pytest.mark.parametrize("which", ["untrusted", "expired", "none"])
def test_mutual_tls_refuses_a_bad_or_missing_client_certificate(broker, pki, which):
    from kafka.protocol.metadata import ApiVersionsRequest

    cert, key = {
        "untrusted": (pki.untrusted_cert, pki.untrusted_key),
        "expired": (pki.expired_cert, pki.expired_key),
        "none": (None, None),
    }[which]
    before = broker.log.count("SSL handshake failed")
    # TLS 1.3: the server checks the client certificate after the client's handshake has finished, so the
    # refusal shows on the first request.
    with (
        pytest.raises((ssl.SSLError, ConnectionError)),
        RawClient(broker.bootstrap_of("MTLS"), ssl_context=_context(pki, cert, key)) as client,
    ):
        client.call(ApiVersionsRequest(version=0), 0)
    assert wait_until(lambda: broker.log.count("SSL handshake failed") > before)
    assert "Failed authentication with /127.0.0.1" in broker.log


def test_confluent_kafka_with_an_untrusted_certificate_gets_an_ssl_error(broker, pki):
    from confluent_kafka import KafkaError, Producer

    seen = []
    producer = Producer(
        _confluent(
            pki,
            broker.bootstrap_of("MTLS"),
            **{
                "ssl.certificate.location": str(pki.untrusted_cert),
                "ssl.key.location": str(pki.untrusted_key),
                "error_cb": seen.append,
            },
        )
    )
    producer.produce("never", b"x")
    # librdkafka sees the broker close the TLS session (TLS 1.3 refuses the client certificate after the
    # client's handshake) and reports every broker down, as against Kafka.
    refused = (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    assert wait_until(lambda: producer.poll(0.1) >= 0 and any(e.code() in refused for e in seen), 20), seen
    assert producer.flush(1) == 1, "nothing was delivered"
    assert "certificate verify failed" in broker.log


def test_a_client_that_does_not_trust_the_broker_refuses_it(broker, tmp_path):
    from securitytools import make_pki as other_pki

    stranger = other_pki(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError):
        RawClient(broker.bootstrap_of("SSL"), ssl_context=ssl.create_default_context(cafile=str(stranger.ca)))


def test_pkcs12_keystore_and_the_plaintext_listener_beside_it(tmp_path, pki):
    from kafka.protocol.metadata import ApiVersionsRequest

    settings = {
        "listeners": "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki.server_p12),
        "ssl.keystore.password": "changeit",
    }
    with BrokerProcess(tmp_path, settings) as b:
        with RawClient(b.bootstrap_of("SSL"), ssl_context=_context(pki)) as client:
            assert client.call(ApiVersionsRequest(version=0), 0).error_code == 0
        with RawClient(b.bootstrap_of("PLAINTEXT")) as client:
            assert client.call(ApiVersionsRequest(version=0), 0).error_code == 0


def test_metadata_answers_with_the_endpoint_of_the_listener_asked(broker, pki):
    from kafka.protocol.metadata import MetadataRequest

    with RawClient(broker.bootstrap_of("SSL"), ssl_context=_context(pki)) as client:
        response = client.call(MetadataRequest(version=1, topics=[]), 1)
    assert [(b.host, b.port) for b in response.brokers] == [("127.0.0.1", broker.ports["SSL"])]
    with RawClient(broker.bootstrap_of("PLAINTEXT")) as client:
        response = client.call(MetadataRequest(version=1, topics=[]), 1)
    assert [(b.host, b.port) for b in response.brokers] == [("127.0.0.1", broker.ports["PLAINTEXT"])]


def test_principal_of_a_certificate_is_its_rfc2253_subject(pki):
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from kafkalog.broker.security.tls import principal_of

    class Peer:
        def __init__(self, der):
            self.der = der

        def getpeercert(self, binary_form=False):
            return self.der

    der = x509.load_pem_x509_certificate(pki.client_cert.read_bytes()).public_bytes(Encoding.DER)
    assert principal_of(Peer(der)) == CLIENT_PRINCIPAL
    assert principal_of(Peer(None)) == "User:ANONYMOUS"
    assert principal_of(None) == "User:ANONYMOUS"


def test_ssl_principal_mapping_rules_as_kafkas_examples():
    from kafkalog.broker.security.tls import NoMatchingRule, SslPrincipalMapper
    from kafkalog.errors import InvalidConfigurationError

    # The rules and names of Kafka's documentation (ssl.principal.mapping.rules) and SslPrincipalMapperTest.
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    assert mapper.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US") == "kafka-server1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US") == "duke@javasoft"
    assert mapper.name("cn=duke,ou=JavaSoft,o=Sun Microsystems,c=US") == "duke"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert SslPrincipalMapper("RULE:^CN=(.*),O=x$/$1/U").name("CN=ab,O=x") == "AB"
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=ab"):
        SslPrincipalMapper("RULE:^CN=(.*),O=x$/$1/U").name("CN=ab")
    with pytest.raises(InvalidConfigurationError, match="Invalid rule"):
        SslPrincipalMapper("RULE:^CN=(.*)")


def test_describe_configs_never_shows_key_material_or_passwords(tmp_path, pki):
    from kafka.protocol.admin import DescribeConfigsRequest

    pem = pki.server_keystore.read_text()
    key_text = pem[: pem.index("-----END PRIVATE KEY-----") + len("-----END PRIVATE KEY-----")]
    chain = pem[len(key_text) :].strip()
    settings = {  # PEM given inline on one line, its line breaks written as \n (as in a one-line property)
        "listeners": "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.key": key_text.replace("\n", "\\n"),
        "listener.name.ssl.ssl.keystore.certificate.chain": chain.replace("\n", "\\n"),
        "ssl.truststore.certificates": pki.ca.read_text().replace("\n", "\\n"),
        "ssl.key.password": "not-shown",
    }
    request = DescribeConfigsRequest(
        version=1,
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=4, resource_name="", configuration_keys=None)
        ],
        include_synonyms=False,
    )
    # The TLS handshake succeeding shows the inline keystore was loaded.
    with BrokerProcess(tmp_path, settings) as b, RawClient(b.bootstrap_of("SSL"), ssl_context=_context(pki)) as client:
        configs = {c.name: c for c in client.call(request, 1).results[0].configs}
    for name in (
        "listener.name.ssl.ssl.keystore.key",
        "listener.name.ssl.ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
        "ssl.key.password",
    ):
        assert configs[name].value is None and configs[name].is_sensitive, name
    assert configs["ssl.keystore.type"].value == "PEM"
