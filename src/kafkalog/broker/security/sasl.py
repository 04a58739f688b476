"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: Kafka's SaslServerAuthenticator, with PLAIN and SCRAM-SHA-*.

A connection on a SASL listener starts unauthenticated: it may send ApiVersions, then SaslHandshake (naming a
mechanism the listener enables), then the mechanism's tokens -- in SaslAuthenticate requests after a v1
handshake, or as bare size-prefixed frames after a v0 handshake, as Kafka accepts both. Any other request
before the exchange completes closes the connection (Kafka's IllegalSaslStateException). A failed exchange is
answered SASL_AUTHENTICATION_FAILED after ``connection.failed.authentication.delay.ms``, logged, and the
connection closed. With ``connections.max.reauth.ms`` > 0 the session lifetime is told to the client (KIP-368),
which re-authenticates on the same connection before it ends; a request after the end closes the connection.

PLAIN users come from a JAAS-style ``sasl.jaas.config`` (``listener.name.<listener>.plain.sasl.jaas.config``
first), with Kafka's PlainLoginModule options ``user_<name>="<password>"``. SCRAM credentials come from the
:class:`~kafkalog.broker.security.scram.CredentialStore`. OAUTHBEARER tokens are checked by Kafka's default
unsecured JWS validator (:mod:`.oauthbearer`), configured by the options of
``listener.name.<listener>.oauthbearer.sasl.jaas.config``; a token's expiry also ends the session (KIP-368), so
a client re-authenticates with a fresh token before then.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ...errors import InvalidConfigurationError
from ..config import Endpoint, listener_property
from .oauthbearer import (
    MECHANISM as OAUTHBEARER,
)
from .oauthbearer import (
    OAuthBearerPublicError,
    OAuthBearerSaslError,
    OAuthBearerServer,
    UnsecuredValidatorOptions,
)
from .scram import MECHANISMS, CredentialStore, ScramError, ScramServer

SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", OAUTHBEARER)
SASL_HANDSHAKE_KEY = 17
API_VERSIONS_KEY = 18
SASL_AUTHENTICATE_KEY = 36
# Kafka's error codes for SASL
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
DEFAULT_MAX_RECEIVE_SIZE = 524288  # Kafka's BrokerSecurityConfigs.DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE

_JAAS_ENTRY = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)(?:\s+(.*?))?\s*;\s*", re.S)
_JAAS_OPTION = re.compile(r'\s*([^\s=]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;]+)')


def parse_jaas(text: str, key: str) -> tuple[str, dict[str, str]]:
    """A ``sasl.jaas.config`` value: (login module class, options). One entry, as Kafka requires."""
    match = _JAAS_ENTRY.fullmatch(text)
    if not match:
        raise InvalidConfigurationError(
            f"Invalid value for configuration {key}: expected '<LoginModule> required key=\"value\" ...;'"
        )
    options: dict[str, str] = {}
    rest = match.group(3) or ""  # "<LoginModule> required;" has no options
    pos = 0
    while pos < len(rest):
        option = _JAAS_OPTION.match(rest, pos)
        if not option:
            raise InvalidConfigurationError(f"Invalid value for configuration {key}: cannot parse {rest[pos:]!r}")
        value = option.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[option.group(1)] = value
        pos = option.end()
        while pos < len(rest) and rest[pos].isspace():
            pos += 1
    return match.group(1), options


@dataclass(frozen=True)
class ListenerSasl:
    """The SASL settings of one listener."""

    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)
    oauthbearer: UnsecuredValidatorOptions | None = None
    max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE  # sasl.server.max.receive.size: largest frame before login


def listener_sasl(props: Mapping[str, str], endpoint: Endpoint) -> ListenerSasl:
    raw = listener_property(props, endpoint.name, "sasl.enabled.mechanisms")
    if raw is None:
        raise InvalidConfigurationError(
            f"listener {endpoint.name} ({endpoint.security_protocol}): set sasl.enabled.mechanisms (Kafka's default "
            f"GSSAPI needs Kerberos, which this broker does not offer; supported: {', '.join(SUPPORTED)})"
        )
    mechanisms = tuple(m.strip().upper() for m in raw.split(",") if m.strip())
    unsupported = [m for m in mechanisms if m not in SUPPORTED]
    if unsupported or not mechanisms:
        raise InvalidConfigurationError(
            f"listener {endpoint.name}: sasl.enabled.mechanisms {list(mechanisms)}: "
            f"supported mechanisms are {', '.join(SUPPORTED)}"
        )
    users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        key, options = _jaas_options(
            props,
            endpoint,
            "PLAIN",
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>="<password>";',
        )
        users = {k[len("user_") :]: v for k, v in options.items() if k.startswith("user_")}
    oauth = None
    if OAUTHBEARER in mechanisms:
        key, options = _jaas_options(
            props,
            endpoint,
            OAUTHBEARER,
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        )
        oauth = UnsecuredValidatorOptions.from_jaas(options, key)
    return ListenerSasl(mechanisms, users, oauth, _max_receive_size(props, endpoint))


def _max_receive_size(props: Mapping[str, str], endpoint: Endpoint) -> int:
    """``sasl.server.max.receive.size`` of a listener (Kafka's default 524288): the largest frame a client may
    send before it has logged in."""
    raw = listener_property(props, endpoint.name, "sasl.server.max.receive.size")
    if raw is None:
        return DEFAULT_MAX_RECEIVE_SIZE
    try:
        return int(str(raw).strip())
    except ValueError:
        raise InvalidConfigurationError(
            f"Invalid value {raw} for configuration sasl.server.max.receive.size: Not a number of type INT"
        ) from None


def jaas_config(props: Mapping[str, str], listener: str, mechanism: str) -> tuple[str, str | None]:
    """(property, text) of the JAAS configuration of ``mechanism`` on ``listener``, as Kafka looks it up:
    ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` first, then ``sasl.jaas.config``; text None when
    neither is set (the property named is then the general one)."""
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = props.get(key)
    if text is None:
        key, text = "sasl.jaas.config", props.get("sasl.jaas.config")
    return key, text


def _jaas_options(
    props: Mapping[str, str], endpoint: Endpoint, mechanism: str, example: str
) -> tuple[str, dict[str, str]]:
    """The JAAS options of ``mechanism`` on a listener: ``listener.name.<l>.<mechanism>.sasl.jaas.config`` first,
    then ``sasl.jaas.config``; a listener enabling the mechanism without either is refused (as Kafka refuses to
    start without a JAAS entry)."""
    key, text = jaas_config(props, endpoint.name, mechanism)
    if text is None:
        raise InvalidConfigurationError(
            f"listener {endpoint.name} enables {mechanism} but no JAAS configuration is set: set "
            f"listener.name.{endpoint.name.lower()}.{mechanism.lower()}.sasl.jaas.config to {example}"
        )
    return key, parse_jaas(text, key)[1]


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class SaslFailure(Exception):
    """A failed login. ``client_message`` is what the client is told (Kafka hides the cause of a SaslException
    behind a standard message); ``str(self)`` is the cause, for the broker's log."""

    def __init__(self, cause: str, client_message: str) -> None:
        super().__init__(cause)
        # as Java's String.getBytes(UTF_8) sends it: a lone surrogate (an OAUTHBEARER principal may hold one, from a
        # JSON escape) becomes '?', where Python's encoder would fail the response
        self.client_message = client_message.encode("utf-8", "replace").decode("utf-8")


class IllegalSaslState(Exception):
    """A request the SASL state does not allow: the connection is closed."""


class _PlainServer:
    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.user: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        # RFC 4616 message [authzid] NUL authcid NUL passwd, split as Kafka's PlainSaslServer splits it: into at
        # most three fields, each ending at the next NUL (so a fourth field is ignored; a missing one is empty).
        text = token.decode("utf-8", errors="replace")
        authzid, user, password = [*text.split("\x00", 3)[:3], "", ""][:3]
        if not user:
            raise ScramError("Authentication failed: username not specified")
        if not password:
            raise ScramError("Authentication failed: password not specified")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise _Public("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise _Public("Authentication failed: Client requested an authorization id that is different from username")
        self.user = user
        self.complete = True
        return b""


class _Public(ScramError):
    """A failure whose message Kafka sends to the client as it is (SaslAuthenticationException)."""


_PUBLIC_SCRAM = ("Authentication failed: Client requested an authorization id",)


# What the router does with a request (not a bare token) in a connection's SASL state (SaslAuthenticator.gate).
SERVE = "serve"  # dispatch it as usual
CLOSE_UNANSWERED = "close"  # close the connection without an answer
REFUSE = "refuse"  # answer it with ILLEGAL_SASL_STATE, then close the connection
MIN_REAUTH_INTERVAL = 1.0  # Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS, in seconds


class SaslAuthenticator:
    """The SASL state of one connection, as Kafka's SaslServerAuthenticator (and KafkaChannel for KIP-368).

    States: ``handshake`` (one ApiVersions, then SaslHandshake), ``authenticate`` (the mechanism's tokens),
    ``complete`` (requests are served as ``principal``), ``reauthenticate`` (tokens of a re-authentication; the
    old principal stays until it completes), ``reauth_bad_mechanism`` (a re-authentication handshake named
    another enabled mechanism: the next frame closes the connection), ``failed``. Invariant: ``principal`` is
    set only by a completed exchange, and a re-authentication that would change it fails.
    """

    def __init__(
        self,
        settings: ListenerSasl,
        store: CredentialStore | None,
        reauth_ms: int,
        clock=time.monotonic,
    ):
        self.settings = settings
        self.store = store
        self.reauth_ms = reauth_ms
        self.clock = clock
        self.state = "handshake"
        self.mechanism: str | None = None
        self.raw_tokens = False  # after a v0 handshake the tokens come as bare frames
        self.api_versions_seen = False  # Kafka takes one ApiVersions before the handshake
        self.principal: str | None = None
        self.session_end: float | None = None
        self.lifetime_ms = 0  # the session lifetime told to the client (0: none)
        self.reauth_started: float | None = None  # when the last re-authentication began
        # the wall clock (epoch ms) OAUTHBEARER tokens are checked and sessions bounded by (tests move it)
        self.wall_clock_ms: Callable[[], int] = _wall_clock_ms
        self._server: _PlainServer | ScramServer | OAuthBearerServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.state == "complete"

    def session_expired(self) -> bool:
        return self.session_end is not None and self.clock() >= self.session_end

    def gate(self, api_key: int) -> str:
        """What the router does with a request of ``api_key`` now: SERVE, CLOSE_UNANSWERED or REFUSE.

        As Kafka: before the handshake only ApiVersions (once) and SaslHandshake, anything else closes the
        connection unanswered (InvalidRequestException); during the exchange (v1 handshake) only SaslAuthenticate,
        anything else is answered ILLEGAL_SASL_STATE and the connection closed (IllegalSaslStateException); once
        authenticated everything, except that a session past its end closes the connection on any request but a
        SaslHandshake (which may start a re-authentication, see ``handshake``)."""
        state = self.state
        if state == "complete":
            expired = api_key != SASL_HANDSHAKE_KEY and self.session_expired()
            return CLOSE_UNANSWERED if expired else SERVE
        if state == "handshake":
            allowed = api_key == SASL_HANDSHAKE_KEY or (api_key == API_VERSIONS_KEY and not self.api_versions_seen)
            return SERVE if allowed else CLOSE_UNANSWERED
        if state in ("authenticate", "reauthenticate") and not self.raw_tokens:
            return SERVE if api_key == SASL_AUTHENTICATE_KEY else REFUSE
        return CLOSE_UNANSWERED  # failed, reauth_bad_mechanism

    def handshake(self, version: int, mechanism: str) -> int:
        """Start an exchange with ``mechanism``: NONE; UNSUPPORTED_SASL_MECHANISM (the connection then closes);
        ILLEGAL_SASL_STATE for an authenticated connection that may not re-authenticate now (it stays open).
        Raises IllegalSaslState when the connection must close unanswered (a session past its end that may not
        re-authenticate)."""
        if self.state == "complete" and not self._begin_reauthentication():
            if self.session_expired():
                raise IllegalSaslState("its SASL session has expired (connections.max.reauth.ms)")
            return ILLEGAL_SASL_STATE  # Kafka's KafkaApis answers a handshake after authentication so
        if mechanism not in self.settings.mechanisms:
            self.state = "failed"
            return UNSUPPORTED_SASL_MECHANISM
        if self.state == "complete" and mechanism != self.mechanism:
            # Kafka answers NONE, then fails the re-authentication on the next frame (REAUTH_BAD_MECHANISM)
            self.state, self.raw_tokens, self._server = "reauth_bad_mechanism", False, None
            return 0
        self.mechanism = mechanism
        if mechanism == "PLAIN":
            self._server = _PlainServer(self.settings.plain_users)
        elif mechanism == OAUTHBEARER:
            assert self.settings.oauthbearer is not None
            self._server = OAuthBearerServer(self.settings.oauthbearer, self.wall_clock_ms)
        else:
            assert self.store is not None and mechanism in MECHANISMS
            self._server = ScramServer(mechanism, self.store)
        self.raw_tokens = version == 0
        self.state = "authenticate" if self.state != "complete" else "reauthenticate"
        return 0

    def _begin_reauthentication(self) -> bool:
        """Whether a SaslHandshake on an authenticated connection starts a re-authentication (Kafka's
        KafkaChannel.maybeBeginServerReauthentication): only for a session that ends, at most once a second."""
        if self.session_end is None:
            return False
        now = self.clock()
        if self.reauth_started is not None and now - self.reauth_started < MIN_REAUTH_INTERVAL:
            return False
        self.reauth_started = now
        return True

    def authenticate(self, token: bytes) -> bytes:
        """One token of the exchange; SaslFailure when the login fails."""
        if self.state not in ("authenticate", "reauthenticate") or self._server is None:
            raise IllegalSaslState(f"Unexpected SASL token in SASL state {self.state}")
        during = "re-authentication" if self.state == "reauthenticate" else "authentication"
        generic = (
            f"Authentication failed during {during} due to invalid credentials with SASL mechanism {self.mechanism}"
        )
        try:
            answer = self._server.evaluate(token)
        except (_Public, OAuthBearerPublicError) as e:
            self.state = "failed"
            cause = str(e)
            reason = getattr(self._server, "failure_reason", None)
            raise SaslFailure(f"{cause}: {reason}" if reason else cause, str(e)) from None
        except OAuthBearerSaslError as e:
            self.state = "failed"
            raise SaslFailure(str(e), generic) from None
        except ScramError as e:
            self.state = "failed"
            public = str(e).startswith(_PUBLIC_SCRAM)
            raise SaslFailure(str(e), str(e) if public else generic) from None
        if self._server.complete:
            principal = f"User:{self._server.user}"
            if self.state == "reauthenticate" and principal != self.principal:
                self.state = "failed"
                old, new = ((p or "").replace(":", ".", 1) for p in (self.principal, principal))
                message = f"Cannot change principals during re-authentication from {old}: {new}"  # <type>.<name>
                raise SaslFailure(message, message)
            self.principal = principal
            self.state = "complete"
            self.raw_tokens = False
            self._start_session(getattr(self._server, "credential_expiry_ms", None))
        return answer

    def _start_session(self, credential_expiry_ms: int | None) -> None:
        """The session's lifetime (Kafka's calcCompletionTimesAndReturnSessionLifetimeMs): connections.max.reauth.ms,
        or the time left until the credential expires (an OAUTHBEARER token), whichever is less; none without
        either."""
        lifetime: int | None = self.reauth_ms if self.reauth_ms > 0 else None
        if credential_expiry_ms is not None:
            left = credential_expiry_ms - self.wall_clock_ms()  # at most Long.MAX_VALUE: expiry is a long
            lifetime = left if lifetime is None else min(left, lifetime)
        if lifetime is None:
            self.lifetime_ms, self.session_end = 0, None
        else:
            self.lifetime_ms = max(0, lifetime)
            self.session_end = self.clock() + self.lifetime_ms / 1000.0

    @property
    def session_lifetime_ms(self) -> int:
        return self.lifetime_ms if self.state == "complete" else 0
