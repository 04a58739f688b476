"""How a broker connects to another (replica fetchers, ControlledShutdown, StopReplica): over the inter-broker
listener (Kafka's ``inter.broker.listener.name`` / ``security.inter.broker.protocol``) with its security protocol.

- SSL and SASL_SSL: TLS with the listener's truststore (``ssl.truststore.*``, listener-prefixed first) and, when
  the listener has a keystore, the broker's certificate (mutual TLS); the peer's host name is checked unless
  ``ssl.endpoint.identification.algorithm`` is empty, as Kafka's clients do.
- SASL_PLAINTEXT and SASL_SSL: ``sasl.mechanism.inter.broker.protocol`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512;
  Kafka's default GSSAPI needs Kerberos), authenticated with the ``username`` and ``password`` of the listener's
  JAAS entry for that mechanism (``listener.name.<l>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config``),
  as a Kafka broker uses the same JAAS entry as a client. SaslHandshake v1, then SaslAuthenticate v1 frames.
  OAUTHBEARER logs in with Kafka's default unsecured login: a token built from the entry's ``unsecuredLogin*``
  options (see ..security.oauthbearer.unsecured_login_token), fresh for each connection.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import secrets
import ssl
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidConfigurationError, KafkaLogError
from ..security.scram import MECHANISMS, salted_password

SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36
CLIENT_MECHANISMS = ("PLAIN", *MECHANISMS, "OAUTHBEARER")


class InterBrokerAuthenticationError(KafkaLogError):
    """Another broker refused this broker's SASL authentication."""


@dataclass(frozen=True)
class InterBrokerSecurity:
    """The security of this broker's connections to the others. Invariant: ``mechanism`` is set exactly when the
    inter-broker listener is a SASL one, with ``username`` and ``password`` (PLAIN, SCRAM) or with the login
    module's options that make a token (OAUTHBEARER)."""

    listener: str
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""
    oauth_options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(cls, config: Any) -> InterBrokerSecurity:
        from ..security.sasl import jaas_config, parse_jaas
        from ..security.tls import _get, _load_keystore, _load_truststore

        name = config.inter_broker_listener
        endpoint = next((e for e in config.advertised if e.name == name), None)
        if endpoint is None or endpoint.security_protocol == "PLAINTEXT":
            return cls(name)
        props = config.props
        context = None
        if endpoint.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            if not _load_truststore(context, props, endpoint):
                context.load_default_certs()
            if _get(props, endpoint, "ssl.keystore.location") or _get(props, endpoint, "ssl.keystore.key"):
                _load_keystore(context, props, endpoint)
            algorithm = props.get("ssl.endpoint.identification.algorithm", "https")
            context.check_hostname = bool(str(algorithm).strip())
        if not endpoint.sasl:
            return cls(name, endpoint.security_protocol, context)
        mechanism = props.get("sasl.mechanism.inter.broker.protocol", "GSSAPI").strip().upper()
        if mechanism not in CLIENT_MECHANISMS:
            raise InvalidConfigurationError(
                f"sasl.mechanism.inter.broker.protocol {mechanism}: kafkalog's brokers authenticate to each other "
                f"with {', '.join(CLIENT_MECHANISMS)}"
            )
        key, text = jaas_config(props, name, mechanism)
        if text is None:
            raise InvalidConfigurationError(
                f"The inter-broker listener {name} uses SASL {mechanism}: set {key} with the broker's username and "
                "password"
            )
        _, options = parse_jaas(text, key)
        if mechanism == "OAUTHBEARER":
            from ..security.oauthbearer import unsecured_login_token

            unsecured_login_token(options)  # the principal claim must be there: refused at startup, not per fetch
            return cls(name, endpoint.security_protocol, context, mechanism, oauth_options=tuple(options.items()))
        if "username" not in options or "password" not in options:
            raise InvalidConfigurationError(f"{key}: the broker's own username and password are missing")
        return cls(name, endpoint.security_protocol, context, mechanism, options["username"], options["password"])

    async def authenticate(self, send: Any, timeout: float) -> None:
        """The SASL exchange on a fresh connection; ``send(api_key, version, body, timeout)`` sends one request
        with a v1 (non-flexible) header and returns its response body."""
        from kafka.protocol.sasl import (
            SaslAuthenticateRequest,
            SaslAuthenticateResponse,
            SaslHandshakeRequest,
            SaslHandshakeResponse,
        )

        assert self.mechanism is not None
        body = await send(
            SASL_HANDSHAKE_KEY, 1, SaslHandshakeRequest(mechanism=self.mechanism).encode(version=1), timeout
        )
        handshake = SaslHandshakeResponse[1].decode(body)
        if handshake.error_code != 0:
            raise InterBrokerAuthenticationError(
                f"SASL mechanism {self.mechanism} refused (error {handshake.error_code}); the broker offers "
                f"{list(handshake.mechanisms)}"
            )

        async def exchange(token: bytes) -> bytes:
            request = SaslAuthenticateRequest(auth_bytes=token).encode(version=1)
            answer = SaslAuthenticateResponse[1].decode(await send(SASL_AUTHENTICATE_KEY, 1, request, timeout))
            if answer.error_code != 0:
                raise InterBrokerAuthenticationError(
                    f"Authentication as {self.username or 'the OAUTHBEARER token principal'} failed: "
                    f"{answer.error_message or answer.error_code}"
                )
            return bytes(answer.auth_bytes or b"")

        if self.mechanism == "PLAIN":
            await exchange(b"\0" + self.username.encode() + b"\0" + self.password.encode())
            return
        if self.mechanism == "OAUTHBEARER":
            from ..security.oauthbearer import unsecured_login_token

            token, extensions = unsecured_login_token(dict(self.oauth_options))
            pairs = "".join(f"\x01{k}={v}" for k, v in extensions.items())
            challenge = await exchange(f"n,,\x01auth=Bearer {token}{pairs}\x01\x01".encode())
            if challenge:  # the server's JSON error (RFC 7628): acknowledged with \x01, which ends the login
                with contextlib.suppress(InterBrokerAuthenticationError):
                    await exchange(b"\x01")
                raise InterBrokerAuthenticationError(f"OAUTHBEARER token refused: {challenge.decode(errors='replace')}")
            return
        client = ScramClient(self.mechanism, self.username, self.password)
        server_first = await exchange(client.first())
        server_final = await exchange(client.final(server_first))
        client.verify(server_final)


class ScramClient:
    """The client side of SCRAM-SHA-256/512 (RFC 5802): first message, proof, and the server's signature checked."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.hash = MECHANISMS[mechanism]
        self.mechanism = mechanism
        self.password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self.nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        self.first_bare = f"n={name},r={self.nonce}"
        self.server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8")
        fields = dict(item.split("=", 1) for item in text.split(","))
        nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        if not nonce.startswith(self.nonce):
            raise InterBrokerAuthenticationError("The server's SCRAM nonce does not extend the client's")
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.first_bare},{text},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self.server_signature = hmac.new(server_key, auth_message, self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8")
        if not text.startswith("v=") or base64.b64decode(text[2:]) != self.server_signature:
            raise InterBrokerAuthenticationError("The server's SCRAM signature does not verify")
