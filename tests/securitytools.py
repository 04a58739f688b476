"""Test certificates for the TLS tests, made with ``cryptography``: a CA, a server certificate for 127.0.0.1,
client certificates (trusted, expired, signed by an untrusted CA), as PEM files and a PKCS12 keystore.

Keys are EC P-256 so that generating a set takes milliseconds; nothing is stored in the repository.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLIENT_SUBJECT = [("C", "US"), ("O", "kafkalog"), ("OU", "eng"), ("CN", "alice")]
# What Kafka's DEFAULT principal mapping makes of CLIENT_SUBJECT: User: + the RFC 2253 name, most specific first.
CLIENT_PRINCIPAL = "User:CN=alice,OU=eng,O=kafkalog,C=US"
_OIDS = {
    "C": NameOID.COUNTRY_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "CN": NameOID.COMMON_NAME,
}


def _name(parts) -> x509.Name:
    return x509.Name([x509.NameAttribute(_OIDS[k], v) for k, v in parts])


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _certificate(subject, key, issuer_name, issuer_key, *, ca=False, server=False, expired=False):
    now = datetime.datetime.now(datetime.UTC)
    start, end = (
        (now - datetime.timedelta(days=30), now - datetime.timedelta(days=1))
        if expired
        else (
            now - datetime.timedelta(minutes=5),
            now + datetime.timedelta(days=2),
        )
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@dataclass
class Pki:
    """Paths of the generated files."""

    ca: Path  # the trusted CA certificate (the broker's and the clients' truststore)
    server_keystore: Path  # PEM: server key + certificate
    server_p12: Path  # the same in PKCS12, password "changeit"
    client_cert: Path
    client_key: Path
    client_keystore: Path  # PEM: client key + certificate
    expired_cert: Path
    expired_key: Path
    untrusted_cert: Path
    untrusted_key: Path


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name([("O", "kafkalog"), ("CN", "kafkalog test CA")])
    ca = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True)
    other_key = _key()
    other_name = _name([("CN", "someone else's CA")])

    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        return path

    server_key = _key()
    server = _certificate(_name([("CN", "localhost")]), server_key, ca_name, ca_key, server=True)
    client_key = _key()
    client = _certificate(_name(CLIENT_SUBJECT), client_key, ca_name, ca_key)
    expired_key = _key()
    expired = _certificate(_name([("CN", "expired")]), expired_key, ca_name, ca_key, expired=True)
    untrusted_key = _key()
    untrusted = _certificate(_name([("CN", "mallory")]), untrusted_key, other_name, other_key)
    p12 = pkcs12.serialize_key_and_certificates(
        b"server", server_key, server, [ca], serialization.BestAvailableEncryption(b"changeit")
    )
    return Pki(
        ca=write("ca.pem", _pem_cert(ca)),
        server_keystore=write("server.pem", _pem_key(server_key) + _pem_cert(server)),
        server_p12=write("server.p12", p12),
        client_cert=write("client.crt", _pem_cert(client)),
        client_key=write("client.key", _pem_key(client_key)),
        client_keystore=write("client.pem", _pem_key(client_key) + _pem_cert(client)),
        expired_cert=write("expired.crt", _pem_cert(expired)),
        expired_key=write("expired.key", _pem_key(expired_key)),
        untrusted_cert=write("untrusted.crt", _pem_cert(untrusted)),
        untrusted_key=write("untrusted.key", _pem_key(untrusted_key)),
    )
