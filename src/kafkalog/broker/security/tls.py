"""TLS for SSL and SASL_SSL listeners: an ssl.SSLContext from Kafka's ``ssl.*`` settings, and the principal of
a client certificate.

Settings are read per listener (``listener.name.<name>.ssl.keystore.location`` before ``ssl.keystore.location``)
with Kafka's names. Keystores: ``PEM`` (``ssl.keystore.location`` naming a PEM file holding the private key and
the certificate chain, or the PEM text itself in ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``)
and ``PKCS12``; Java's ``JKS`` cannot be read without Java and is refused with a message saying what to use.
Truststores: ``PEM`` (a file, or ``ssl.truststore.certificates``) and ``PKCS12``.

The principal of a TLS client is ``User:`` followed by the certificate subject's distinguished name in RFC 2253
form (as Java's X500Principal.getName()), mapped by ``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper:
``RULE:pattern/replacement/[LU]`` entries and ``DEFAULT``, the first rule whose pattern matches the whole name
wins; a name no rule matches fails the connection); without a client certificate (``ssl.client.auth`` none or
requested) it is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from ...errors import InvalidConfigurationError
from ..config import Endpoint, listener_property
from .context import ANONYMOUS

CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _get(props: Mapping[str, str], endpoint: Endpoint, key: str, default: str | None = None) -> str | None:
    value = listener_property(props, endpoint.name, key)
    return default if value is None or value.strip() == "" else value.strip()


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A 0600 temporary file holding ``data`` (ssl loads keys from files only), removed right after use."""
    fd, path = tempfile.mkstemp(prefix="kafkalog-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        os.unlink(path)


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def normalize_pem(text: str, key: str) -> str:
    """PEM blocks given inline in a config value, as Kafka reads them: line breaks may be lost or written as
    literal ``\\n`` (a one-line property); the base64 body is re-wrapped so OpenSSL can read it."""
    blocks = []
    for label, body in _PEM_BLOCK.findall(text):
        data = re.sub(r"\s+", "", body.replace("\\n", ""))
        lines = [data[i : i + 64] for i in range(0, len(data), 64)]
        blocks.append("\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"]))
    if not blocks:
        raise InvalidConfigurationError(f"{key}: no PEM block (-----BEGIN ...-----) found")
    return "\n".join(blocks) + "\n"


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InvalidConfigurationError(f"Failed to load SSL keystore or truststore from {key}={path}: {e}") from None


def _pkcs12(data: bytes, password: str | None, key: str):
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:  # pragma: no cover - cryptography is a dependency
        raise InvalidConfigurationError(f"{key}: PKCS12 stores need the 'cryptography' package") from None
    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as e:
        raise InvalidConfigurationError(f"Failed to load the PKCS12 store of {key}: {e}") from None


def _load_keystore(context: ssl.SSLContext, props: Mapping[str, str], endpoint: Endpoint) -> None:
    kind = (_get(props, endpoint, "ssl.keystore.type", "JKS") or "JKS").upper()
    location = _get(props, endpoint, "ssl.keystore.location")
    key_password = _get(props, endpoint, "ssl.key.password")
    store_password = _get(props, endpoint, "ssl.keystore.password")
    chain = _get(props, endpoint, "ssl.keystore.certificate.chain")
    key_text = _get(props, endpoint, "ssl.keystore.key")
    where = f"listener {endpoint.name}"
    if kind == "JKS":
        raise InvalidConfigurationError(
            f"{where}: ssl.keystore.type JKS (Kafka's default) needs Java; set ssl.keystore.type=PKCS12 "
            "(keytool -importkeystore -deststoretype PKCS12 converts a JKS store) or PEM"
        )
    if kind == "PEM":
        if chain or key_text:
            if not (chain and key_text):
                raise InvalidConfigurationError(
                    f"{where}: ssl.keystore.key and ssl.keystore.certificate.chain must be set together"
                )
            if location:
                raise InvalidConfigurationError(
                    f"{where}: set either ssl.keystore.location or ssl.keystore.key with ssl.keystore.certificate.chain"
                )
            pem = normalize_pem(key_text, "ssl.keystore.key") + normalize_pem(chain, "ssl.keystore.certificate.chain")
            with _private_file(pem.encode()) as path:
                try:
                    context.load_cert_chain(path, password=key_password)
                except ssl.SSLError as e:
                    raise InvalidConfigurationError(
                        f"{where}: cannot load ssl.keystore.key with ssl.keystore.certificate.chain: {e}"
                    ) from None
            return
        if not location:
            raise InvalidConfigurationError(f"{where}: an SSL listener needs ssl.keystore.location or ssl.keystore.key")
        try:
            context.load_cert_chain(location, password=key_password or store_password)
        except (ssl.SSLError, OSError) as e:
            raise InvalidConfigurationError(f"{where}: cannot load the PEM keystore {location}: {e}") from None
        return
    if kind != "PKCS12":
        raise InvalidConfigurationError(f"{where}: unsupported ssl.keystore.type {kind} (supported: PEM, PKCS12)")
    if not location:
        raise InvalidConfigurationError(f"{where}: an SSL listener needs ssl.keystore.location")
    private_key, certificate, extra = _pkcs12(_read(location, "ssl.keystore.location"), store_password, location)
    if private_key is None or certificate is None:
        raise InvalidConfigurationError(f"{where}: the keystore {location} holds no private key with its certificate")
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    pem = private_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    pem += certificate.public_bytes(Encoding.PEM) + b"".join(c.public_bytes(Encoding.PEM) for c in extra or [])
    with _private_file(pem) as path:
        context.load_cert_chain(path)


def _load_truststore(context: ssl.SSLContext, props: Mapping[str, str], endpoint: Endpoint) -> bool:
    """Load the trusted CAs; False when none are configured."""
    kind = (_get(props, endpoint, "ssl.truststore.type", "JKS") or "JKS").upper()
    location = _get(props, endpoint, "ssl.truststore.location")
    certificates = _get(props, endpoint, "ssl.truststore.certificates")
    where = f"listener {endpoint.name}"
    if certificates:
        try:
            context.load_verify_locations(cadata=normalize_pem(certificates, "ssl.truststore.certificates"))
        except ssl.SSLError as e:
            raise InvalidConfigurationError(f"{where}: cannot load ssl.truststore.certificates: {e}") from None
        return True
    if not location:
        return False
    if kind == "PEM":
        try:
            context.load_verify_locations(cafile=location)
        except (ssl.SSLError, OSError) as e:
            raise InvalidConfigurationError(f"{where}: cannot load the PEM truststore {location}: {e}") from None
        return True
    if kind == "JKS":
        raise InvalidConfigurationError(
            f"{where}: ssl.truststore.type JKS (Kafka's default) needs Java; set ssl.truststore.type=PKCS12 or PEM"
        )
    if kind != "PKCS12":
        raise InvalidConfigurationError(f"{where}: unsupported ssl.truststore.type {kind} (supported: PEM, PKCS12)")
    from cryptography.hazmat.primitives.serialization import Encoding

    _, certificate, extra = _pkcs12(
        _read(location, "ssl.truststore.location"), _get(props, endpoint, "ssl.truststore.password"), location
    )
    certs = ([certificate] if certificate is not None else []) + list(extra or [])
    if not certs:
        raise InvalidConfigurationError(f"{where}: the truststore {location} holds no certificate")
    context.load_verify_locations(cadata="".join(c.public_bytes(Encoding.PEM).decode() for c in certs))
    return True


def client_auth(props: Mapping[str, str], endpoint: Endpoint) -> str:
    """``ssl.client.auth`` of a listener; on SASL_SSL only the listener-prefixed value counts (KIP-684)."""
    if endpoint.security_protocol == "SASL_SSL":
        value = listener_property(props, endpoint.name, "ssl.client.auth", prefixed_only=True)
    else:
        value = listener_property(props, endpoint.name, "ssl.client.auth")
    value = (value or "none").strip().lower()
    if value not in CLIENT_AUTH:
        raise InvalidConfigurationError(
            f"Invalid value {value} for configuration ssl.client.auth: String must be one of: required, requested, none"
        )
    return value


_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(Exception):
    pass


class SslPrincipalMapper:
    """Kafka's ssl.principal.mapping.rules: a list of DEFAULT or (pattern, replacement, case) rules."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.rules: list[tuple[re.Pattern[str], str, str] | None] = []  # None = DEFAULT
        for match in _RULE_SPLITTER.finditer(text.strip()):
            rule = match.group(1)
            parsed = _RULE_PARSER.match(rule)
            if parsed is None or parsed.end() != len(rule):
                raise InvalidConfigurationError(f"Invalid rule: {rule} in ssl.principal.mapping.rules")
            if parsed.group(1):
                self.rules.append(None)
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as e:
                    raise InvalidConfigurationError(f"Invalid rule pattern {parsed.group(2)!r}: {e}") from None
                self.rules.append((pattern, parsed.group(3), parsed.group(4)))
            if match.end() >= len(text.strip()):
                break

    @staticmethod
    def _replacement(text: str, groups: int) -> str:
        """Java's replacement syntax ($n, backslash escapes) as Python's; a $n past the groups stays literal."""
        out, pos = [], 0
        while pos < len(text):
            ch = text[pos]
            if ch == "\\" and pos + 1 < len(text):
                out.append(text[pos + 1].replace("\\", "\\\\"))
                pos += 2
                continue
            m = _BACK_REFERENCE.match(text, pos)
            if m:
                digits = m.group(1)
                while len(digits) > 1 and int(digits) > groups:
                    digits = digits[:-1]
                if int(digits) <= groups:
                    out.append(f"\\g<{int(digits)}>")
                    pos += 1 + len(digits)
                    continue
            out.append(ch.replace("\\", "\\\\"))
            pos += 1
        return "".join(out)

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            if rule is None:
                return distinguished_name
            pattern, replacement, case = rule
            if pattern.fullmatch(distinguished_name):
                result = pattern.sub(self._replacement(replacement, pattern.groups), distinguished_name)
                return result.lower() if case == "L" else result.upper() if case == "U" else result
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self.text}")


def principal_mapper(props: Mapping[str, str], endpoint: Endpoint) -> SslPrincipalMapper:
    return SslPrincipalMapper(_get(props, endpoint, "ssl.principal.mapping.rules", "DEFAULT") or "DEFAULT")


def server_context(props: Mapping[str, str], endpoint: Endpoint) -> ssl.SSLContext:
    """The SSLContext of a TLS listener, or InvalidConfigurationError saying what is missing or unreadable."""
    principal_mapper(props, endpoint)  # the rules are checked with the rest of the listener's settings
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = [v.strip() for v in (_get(props, endpoint, "ssl.enabled.protocols", "TLSv1.2,TLSv1.3") or "").split(",")]
    versions = [_TLS_VERSIONS[v] for v in enabled if v in _TLS_VERSIONS]
    unknown = [v for v in enabled if v and v not in _TLS_VERSIONS]
    if unknown or not versions:
        raise InvalidConfigurationError(
            f"listener {endpoint.name}: ssl.enabled.protocols {enabled} (supported: TLSv1.2, TLSv1.3)"
        )
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    _load_keystore(context, props, endpoint)
    trusted = _load_truststore(context, props, endpoint)
    auth = client_auth(props, endpoint)
    if auth != "none" and not trusted:
        raise InvalidConfigurationError(
            f"listener {endpoint.name}: ssl.client.auth={auth} needs a truststore (ssl.truststore.location)"
        )
    context.verify_mode = CLIENT_AUTH[auth]
    return context


def principal_of(ssl_object: ssl.SSLObject | ssl.SSLSocket | None, mapper: SslPrincipalMapper | None = None) -> str:
    """``User:`` + the (mapped) RFC 2253 subject of the peer's certificate, or ``User:ANONYMOUS`` without one.

    Raises NoMatchingRule when ``mapper`` has no rule for the name."""
    if ssl_object is None:
        return ANONYMOUS
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    from cryptography import x509

    name = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return "User:" + (mapper.name(name) if mapper is not None else name)
