"""What Kafka answers on a SASL connection: the reference the SASL protocol fuzzer compares the broker with.

``KafkaSaslModel`` follows one connection through Kafka's SaslServerAuthenticator (clients/.../authenticator/
SaslServerAuthenticator.java), KafkaChannel's re-authentication rules (KIP-368) and KafkaApis' answers after
login, with PLAIN as PlainSaslServer and SCRAM as ScramSaslServer/ScramMessages. For each frame it predicts an
``Expect``: the connection answers and stays open, answers and then closes, closes unanswered, or serves the
request as any other; the error code of a SASL answer; and the principal the connection has afterwards. SCRAM
proofs are checked from the users' passwords (``Users``), not from the broker's stored keys, so a proof the
broker accepts that the password did not make is a failure of the oracle.

OAUTHBEARER is OAuthBearerSaslServer with Kafka's default OAuthBearerUnsecuredValidatorCallbackHandler
(``unsecured_verdict``): OAuthBearerClientInitialResponse's grammar (Kafka 3.8+ token characters, KAFKA-15878),
OAuthBearerUnsecuredJws with the JWS parts decoded base64url (Kafka 4.1+, KAFKA-17089; the JDK decoder
transliterated) and parsed as Jackson's readTree parses them, claims kept as Jackson's asText prints them, Java's
trim and double arithmetic, the expiry as Math.round(exp * 1000), the session lifetime of
SaslServerAuthenticator; tokens are checked against the connection's wall clock (``wall_ms``).

Where kafkalog deliberately answers differently from Kafka the prediction is kafkalog's, and says so: a SCRAM
proof of the wrong length is answered SASL_AUTHENTICATION_FAILED before the close (Kafka's ScramFormatter.xor
throws IllegalArgumentException there, which closes the connection unanswered); likewise an OAUTHBEARER scheme
other than Bearer (Kafka: IllegalArgumentException from ``matcher.group("scheme")``, a group its pattern lacks) is
answered with the standard failure, and a JWS header without ``alg`` or that is not a JSON object with the
invalid_token challenge (Kafka: NullPointerException); both close Kafka's connection unanswered.

The model uses the broker's header and body decoders (``parse_header``, ``decode_request``): it predicts what is
done with a request, not whether kafka-python's schema decoder takes its bytes.
"""

from __future__ import annotations

import base64
import decimal
import functools
import hashlib
import hmac
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..broker.protocol import ApiSpec, InvalidRequestError, RequestHeader, decode_request, parse_header

ANONYMOUS = "User:ANONYMOUS"
NONE, UNSUPPORTED_VERSION, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = (
    0,
    35,
    33,
    34,
    58,
)
HANDSHAKE, API_VERSIONS, AUTHENTICATE = 17, 18, 36
MAX_RECEIVE_SIZE = 524288  # sasl.server.max.receive.size's default
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
OAUTHBEARER = "OAUTHBEARER"
WALL_EPOCH_MS = 1_764_000_000_000  # the wall clock (epoch ms) at the connections' clock 0: 2025-11-24 16:00 UTC

# ScramMessages' grammar (Java's [a&&[^b]] classes spelt out)
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_BASE64 = "(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
CLIENT_FIRST = re.compile(
    rf"n,(?:a=({_SASLNAME}))?,(?:m={_VALUE},)?n=({_SASLNAME}),r=({_PRINTABLE})({_EXTENSIONS})", re.S
)
CLIENT_FINAL = re.compile(rf"c=({_BASE64}),r=({_PRINTABLE}){_EXTENSIONS},p=({_BASE64})", re.S)


@dataclass(frozen=True)
class Users:
    """The credentials the fuzz broker is configured with: PLAIN users (JAAS) and SCRAM users (the store)."""

    plain: dict[str, str]
    scram: dict[str, dict[str, str]]  # user -> mechanism -> password


@dataclass(frozen=True)
class OAuthOptions:
    """The unsecured validator's JAAS options on a connection (OAuthBearerUnsecuredValidatorCallbackHandler)."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    skew_ms: int = 0


def wall_ms(now: float) -> int:
    """The wall clock (epoch ms) at the connections' clock ``now`` (seconds): what tokens are checked against."""
    return WALL_EPOCH_MS + round(now * 1000)


@dataclass
class Expect:
    """A prediction for one frame.

    kind: "answer" (a response, the connection stays open), "answer-close" (a response, then the close),
    "close" (closed unanswered), "token" (a bare token answer after a v0 handshake), "served" (a request served as
    any other: the generic oracle judges it). ``code``/``message``: of a SASL answer (message None = unchecked).
    ``check``: called with the returned token bytes; returns a complaint, or None."""

    kind: str
    code: int | None = None
    message: str | None = None
    lifetime_ms: int | None = None
    check: Callable[[bytes], str | None] | None = None


@functools.cache
def salted(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def scram_keys(mechanism: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of RFC 5802."""
    name = HASHES[mechanism]
    salted_password = salted(mechanism, password, salt, iterations)
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    server_key = hmac.new(salted_password, b"Server Key", name).digest()
    return client_key, hashlib.new(name, client_key).digest(), server_key


def scram_proof(mechanism: str, password: str, server_first: str, auth_message: str) -> bytes:
    """The ClientProof a client knowing ``password`` sends for ``auth_message``."""
    fields = dict(item.split("=", 1) for item in server_first.split(",") if "=" in item)
    client_key, stored_key, _ = scram_keys(mechanism, password, base64.b64decode(fields["s"]), int(fields["i"]))
    signature = hmac.new(stored_key, auth_message.encode(), HASHES[mechanism]).digest()
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


def _sasl_username(sasl_name: str) -> str | None:
    name = sasl_name.replace("=2C", ",")
    return None if "=" in name.replace("=3D", "") else name.replace("=3D", "=")


def _generic(mechanism: str, reauth: bool) -> str:
    during = "re-authentication" if reauth else "authentication"
    return f"Authentication failed during {during} due to invalid credentials with SASL mechanism {mechanism}"


class _Failed(Exception):
    """A failed exchange: ``message`` is what the client is told (None: closed unanswered)."""

    def __init__(self, message: str | None) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class _Exchange:
    """One mechanism exchange in progress."""

    mechanism: str
    step: int = 0
    user: str | None = None
    bare: str = ""
    server_first: str = ""
    nonce: str = ""
    complete: bool = False
    server_final: bytes = b""
    oauth_error: str | None = None  # the JSON error challenge an OAUTHBEARER client must acknowledge with \x01
    expiry_ms: int | None = None  # the credential's expiry (OAUTHBEARER: the token's), epoch ms


@dataclass
class KafkaSaslModel:
    """One SASL connection as Kafka runs it. ``now`` is the connection's clock in seconds (the fuzzer moves it)."""

    users: Users
    enabled: tuple[str, ...]
    reauth_ms: int
    now: float = 1000.0
    oauth: OAuthOptions = field(default_factory=OAuthOptions)
    lifetime_ms: int = 0  # the session lifetime told at the last completed exchange
    state: str = "initial"  # initial, versions-seen, authenticate, reauth, reauth-bad, complete, closed
    raw: bool = False
    principal: str = ANONYMOUS
    mechanism: str | None = None
    session_end: float | None = None
    last_reauth: float | None = None
    exchange: _Exchange | None = field(default=None, repr=False)

    # ----- frames ----------------------------------------------------------------------------------------------
    def step(self, frame: bytes) -> Expect:
        """The prediction for ``frame``; the model moves to the state Kafka would be in after it."""
        expect = self._step(frame)
        if expect.kind in ("close", "answer-close"):
            self.state = "closed"
        return expect

    def _step(self, frame: bytes) -> Expect:
        if self.state != "complete" and len(frame) > MAX_RECEIVE_SIZE:
            return Expect("close")
        if self.state in ("authenticate", "reauth") and self.raw:
            return self._token(frame, framed=False)
        if self.state == "reauth-bad":
            return Expect("close")
        try:
            header, spec = parse_header(memoryview(frame))
        except InvalidRequestError:
            return Expect("close")
        if spec is None:
            return Expect("close")
        supported = spec.min_version <= header.api_version <= spec.max_version
        if self.state in ("initial", "versions-seen"):
            return self._before_handshake(frame, header, spec, supported)
        if self.state in ("authenticate", "reauth"):
            request = self._request(frame, header, spec) if supported else None
            if request is None:
                return Expect("close")
            if spec.key != AUTHENTICATE:
                return Expect("answer-close", ILLEGAL_SASL_STATE)
            return self._token(bytes(request.auth_bytes), framed=True)
        return self._authenticated(frame, header, spec, supported)

    @staticmethod
    def _request(frame: bytes, header: RequestHeader, spec: ApiSpec) -> Any:
        try:
            return decode_request(spec, header, memoryview(frame))
        except InvalidRequestError:
            return None

    def _before_handshake(self, frame: bytes, header: RequestHeader, spec: ApiSpec, supported: bool) -> Expect:
        if spec.key == API_VERSIONS and self.state == "initial":
            if not supported:
                return Expect("answer", UNSUPPORTED_VERSION)
            if self._request(frame, header, spec) is None:
                return Expect("close")
            self.state = "versions-seen"
            return Expect("answer", NONE)
        if spec.key != HANDSHAKE or not supported:
            return Expect("close")
        request = self._request(frame, header, spec)
        if request is None:
            return Expect("close")
        return self._handshake(request.mechanism, header.api_version)

    def _handshake(self, mechanism: str, version: int) -> Expect:
        if mechanism not in self.enabled:
            return Expect("answer-close", UNSUPPORTED_SASL_MECHANISM)
        reauth = self.state == "complete"
        if reauth and mechanism != self.mechanism:
            self.state = "reauth-bad"
            return Expect("answer", NONE)
        self.state, self.raw, self.mechanism = ("reauth" if reauth else "authenticate"), version == 0, mechanism
        self.exchange = _Exchange(mechanism)
        return Expect("answer", NONE)

    def _authenticated(self, frame: bytes, header: RequestHeader, spec: ApiSpec, supported: bool) -> Expect:
        expired = self.session_end is not None and self.now >= self.session_end
        may_reauthenticate = self.last_reauth is None or self.now - self.last_reauth >= 1.0
        if spec.key == HANDSHAKE and self.session_end is not None and may_reauthenticate:
            self.last_reauth = self.now
            request = self._request(frame, header, spec) if supported else None
            if request is None:
                return Expect("close")
            return self._handshake(request.mechanism, header.api_version)
        if expired:
            return Expect("close")
        if not supported:
            return Expect("answer", UNSUPPORTED_VERSION) if spec.key == API_VERSIONS else Expect("close")
        if self._request(frame, header, spec) is None:
            return Expect("close")
        if spec.key in (HANDSHAKE, AUTHENTICATE):
            return Expect("answer", ILLEGAL_SASL_STATE)
        return Expect("served")

    # ----- tokens ----------------------------------------------------------------------------------------------
    def _token(self, token: bytes, framed: bool) -> Expect:
        exchange = self.exchange
        assert exchange is not None
        reauth = self.state == "reauth"
        try:
            answer_check = self._evaluate(exchange, token)
            if exchange.complete:
                self._complete(exchange, reauth)
        except _Failed as e:
            if not framed:
                return Expect("close")
            return Expect("answer-close", SASL_AUTHENTICATION_FAILED, e.message)
        lifetime = self.lifetime_ms if exchange.complete else 0
        if not framed:
            return Expect("token", check=answer_check)
        return Expect("answer", NONE, lifetime_ms=lifetime, check=answer_check)

    def _complete(self, exchange: _Exchange, reauth: bool) -> None:
        principal = f"User:{exchange.user}"
        if reauth and principal != self.principal:
            old, new = self.principal.replace(":", ".", 1), principal.replace(":", ".", 1)
            raise _Failed(java_utf8(f"Cannot change principals during re-authentication from {old}: {new}"))
        self.principal, self.state, self.raw = principal, "complete", False
        # SaslServerAuthenticator.calcCompletionTimesAndReturnSessionLifetimeMs
        if exchange.expiry_ms is None:
            lifetime = self.reauth_ms if self.reauth_ms > 0 else None
        else:
            left = exchange.expiry_ms - wall_ms(self.now)
            lifetime = max(0, left if self.reauth_ms <= 0 else min(left, self.reauth_ms))
        self.lifetime_ms = lifetime or 0
        # (Kafka keeps the end in nanoseconds: a lifetime over 2^63 ns, ~292 years, wraps there; not here)
        self.session_end = None if lifetime is None else self.now + lifetime / 1000.0

    def _evaluate(self, exchange: _Exchange, token: bytes) -> Callable[[bytes], str | None]:
        if exchange.mechanism == "PLAIN":
            return self._plain(exchange, token)
        if exchange.mechanism == OAUTHBEARER:
            return self._oauthbearer(exchange, token)
        if exchange.step == 0:
            return self._scram_first(exchange, token)
        return self._scram_final(exchange, token)

    def _plain(self, exchange: _Exchange, token: bytes) -> Callable[[bytes], str | None]:
        authzid, user, password = [*token.decode("utf-8", "replace").split("\x00", 3)[:3], "", ""][:3]
        generic = _generic("PLAIN", self.state == "reauth")
        if not user or not password:
            raise _Failed(generic)
        expected = self.users.plain.get(user)
        if expected is None or expected.encode() != password.encode():
            raise _Failed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise _Failed("Authentication failed: Client requested an authorization id that is different from username")
        exchange.user, exchange.complete = user, True
        return lambda answer: None if answer == b"" else f"PLAIN answered {answer!r}"

    def _scram_first(self, exchange: _Exchange, token: bytes) -> Callable[[bytes], str | None]:
        generic = _generic(exchange.mechanism, self.state == "reauth")
        match = CLIENT_FIRST.fullmatch(token.decode("utf-8", "replace"))
        if match is None:
            raise _Failed(generic)
        authzid, sasl_name, nonce, extensions = match.groups()
        user = _sasl_username(sasl_name)
        if user is None or exchange.mechanism not in self.users.scram.get(user, {}):
            raise _Failed(generic)
        if authzid and authzid != user:
            raise _Failed("Authentication failed: Client requested an authorization id that is different from username")
        exchange.user, exchange.step = user, 1
        pairs: dict[str, str] = {}
        for item in extensions[1:].split(",") if extensions else ():
            key, _, value = item.partition("=")
            pairs[key] = value
        exchange.bare = f"n={sasl_name},r={nonce}" + "".join(f",{k}={v}" for k, v in pairs.items())

        def server_first(answer: bytes) -> str | None:
            text = answer.decode("utf-8", "replace")
            fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
            if not fields.get("r", "").startswith(nonce) or len(fields["r"]) <= len(nonce) or "i" not in fields:
                return f"server-first {text!r} does not extend the client nonce {nonce!r}"
            exchange.server_first, exchange.nonce = text, fields["r"]
            return None

        return server_first

    def _scram_final(self, exchange: _Exchange, token: bytes) -> Callable[[bytes], str | None]:
        mechanism, generic = exchange.mechanism, _generic(exchange.mechanism, self.state == "reauth")
        if exchange.step != 1:
            raise _Failed(generic)
        match = CLIENT_FINAL.fullmatch(token.decode("utf-8", "replace"))
        if match is None or match.group(2) != exchange.nonce:
            raise _Failed(generic)
        channel = base64.b64encode(base64.b64decode(match.group(1))).decode()
        auth_message = f"{exchange.bare},{exchange.server_first},c={channel},r={exchange.nonce}"
        assert exchange.user is not None
        password = self.users.scram[exchange.user][mechanism]
        if base64.b64decode(match.group(3)) != scram_proof(mechanism, password, exchange.server_first, auth_message):
            raise _Failed(generic)  # a proof of the wrong length too: see the module docstring
        fields = dict(item.split("=", 1) for item in exchange.server_first.split(","))
        _, _, server_key = scram_keys(mechanism, password, base64.b64decode(fields["s"]), int(fields["i"]))
        signature = hmac.new(server_key, auth_message.encode(), HASHES[mechanism]).digest()
        exchange.step, exchange.complete = 2, True
        expected = b"v=" + base64.b64encode(signature)
        return lambda answer: None if answer == expected else f"server-final {answer!r}, expected {expected!r}"

    # ----- OAUTHBEARER -----------------------------------------------------------------------------------------
    def _oauthbearer(self, exchange: _Exchange, token: bytes) -> Callable[[bytes], str | None]:
        """OAuthBearerSaslServer.evaluateResponse with OAuthBearerUnsecuredValidatorCallbackHandler."""
        if token == b"\x01" and exchange.oauth_error is not None:
            raise _Failed(exchange.oauth_error)  # SaslAuthenticationException(errorMessage)
        exchange.oauth_error = None
        generic = _generic(OAUTHBEARER, self.state == "reauth")
        parsed = oauth_initial_response(token)
        if parsed is None:
            raise _Failed(generic)  # SaslException: the standard message
        authzid, scheme, value = parsed
        if scheme.lower() != "bearer":
            # Kafka: matcher.group("scheme") on a pattern without that group, IllegalArgumentException, the
            # connection closed unanswered. We answer the SaslException Kafka meant (deliberate).
            raise _Failed(generic)
        verdict = unsecured_verdict(value, self.oauth, wall_ms(self.now))
        if isinstance(verdict, str):  # the JSON error challenge; the exchange goes on
            exchange.oauth_error = verdict
            expected = verdict.encode()
            return lambda answer: (
                None if answer == expected else f"OAUTHBEARER challenge {answer!r}, Kafka's {expected!r}"
            )
        principal, expiry_ms = verdict
        if authzid and authzid != principal:
            message = (
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different from the "
                f"token's principal name ({principal})"
            )
            raise _Failed(java_utf8(message))
        exchange.user, exchange.expiry_ms, exchange.complete = principal, expiry_ms, True
        return lambda answer: None if answer == b"" else f"OAUTHBEARER success answered {answer!r}"


# ----- OAUTHBEARER: Kafka's OAuthBearerClientInitialResponse, OAuthBearerUnsecuredJws, OAuthBearerValidationUtils

_OAUTH_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # [\x01-\x7F&&[^=,]] | =2C | =3D
_OAUTH_KVPAIRS = r"(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*"
OAUTH_CLIENT_FIRST = re.compile(rf"n,(?:a=({_OAUTH_SASLNAME}))?,\x01({_OAUTH_KVPAIRS})\x01")
OAUTH_AUTH = re.compile(r"([a-zA-Z_0-9]+) +([-_~+/.a-zA-Z0-9]+=*)")  # Kafka 3.8+ (KAFKA-15878)


def oauth_initial_response(token: bytes) -> tuple[str, str, str] | None:
    """(authzid, scheme, token) of a client's first message, or None where Kafka throws SaslException."""
    match = OAUTH_CLIENT_FIRST.fullmatch(token.decode("utf-8", "replace"))
    if match is None:
        return None
    properties: dict[str, str] = {}
    for pair in match.group(2).split("\x01")[:-1]:  # Utils.parseMap: each "key=value", the last one wins
        key, value = pair.split("=", 1)
        properties[key] = value
    auth = properties.get("auth")
    if auth is None:
        return None
    # the other keys are extensions; the grammar already holds them to Kafka's extension name/value patterns
    auth_match = OAUTH_AUTH.fullmatch(auth)
    if auth_match is None:
        return None
    return match.group(1) or "", auth_match.group(1), auth_match.group(2)


_URL_ALPHABET = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def java_url_decode(text: str) -> bytes | None:
    """Base64.getUrlDecoder().decode(String), transliterated from the JDK's Decoder.decode0: None where it throws
    IllegalArgumentException."""
    out, bits, shift, i = bytearray(), 0, 18, 0
    while i < len(text):
        c = text[i]
        i += 1
        if c == "=":
            if (shift == 6 and (i == len(text) or text[i] != "=")) or shift == 18:
                return None
            if shift == 6:
                i += 1
            break
        value = _URL_ALPHABET.get(c)
        if value is None:
            return None
        bits |= value << shift
        shift -= 6
        if shift < 0:
            out += bits.to_bytes(3, "big")
            bits, shift = 0, 18
    if shift == 6:
        out.append(bits >> 16)
    elif shift == 0:
        out += (bits >> 8).to_bytes(2, "big")
    elif shift == 12:
        return None
    return None if i < len(text) else bytes(out)


class _Malformed(Exception):
    """The model's reader met input Kafka's parser refuses (the caller answers as Kafka does)."""


def _no_constant(name: str) -> Any:
    raise _Malformed(name)


def _bounded(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if len(text) - text.startswith("-") > 1000:  # Jackson 2.15+ StreamReadConstraints: maxNumberLength
            raise _Malformed(text[:20])
        return kind(text)

    return parse


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_int=_bounded(int), parse_float=_bounded(float))


def jackson_members(raw: bytes) -> dict[str, Any] | None:
    """The members of ObjectMapper.readTree(raw) (default features: the first value only, no NaN/Infinity, no
    trailing check), each as OAuthBearerUnsecuredJws.convert keeps it; {} for a value that is not an object or no
    value at all (MissingNode); None for malformed JSON."""
    encoding = json.detect_encoding(raw)
    if encoding == "utf-8-sig":  # the BOM, then UTF-8
        raw, encoding = raw[3:], "utf-8"
    try:
        return _members_of(raw.decode(encoding), complete=True)
    except UnicodeDecodeError as e:
        # Jackson decodes as it parses: bytes that are not text are malformed only if the value reaches them
        return _members_of(raw[: e.start].decode(encoding), complete=False)


def _members_of(text: str, complete: bool) -> dict[str, Any] | None:
    text = text.removeprefix("\ufeff")
    start = len(text) - len(text.lstrip(" \t\r\n"))
    if start == len(text):
        return {} if complete else None
    try:
        value, _ = _DECODER.raw_decode(text, start)
    except (ValueError, _Malformed, RecursionError):
        return None
    if not isinstance(value, dict):
        return {}
    return {key: _kept(member) for key, member in value.items()}


def _kept(value: Any) -> Any:
    if isinstance(value, list):
        return [_text(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return _text(value)


def _text(value: Any) -> str:
    """JsonNode.asText()."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double_string(value)
    return ""  # objects and arrays


def java_double_string(value: float) -> str:
    """Double.toString (JDK 19+: the shortest decimal that round-trips)."""
    if math.isinf(value) or math.isnan(value):
        return {math.inf: "Infinity", -math.inf: "-Infinity"}.get(value, "NaN")
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    prefix = "-" if sign else ""
    if value == 0:
        return prefix + "0.0"
    text = "".join(map(str, digits))
    point = len(text) + exponent  # the decimal exponent of the first digit, plus one
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{prefix}0.{'0' * -point}{text}"
        text = text.ljust(point, "0")
        return f"{prefix}{text[:point]}.{text[point:] or '0'}"
    return f"{prefix}{text[0]}.{text[1:] or '0'}E{point - 1}"


def java_utf8(text: str) -> str:
    """``text`` as the client reads it after Java's String.getBytes(UTF_8): each lone surrogate sent as '?'."""
    return "".join("?" if "\ud800" <= c <= "\udfff" else c for c in text)


def _trim(text: str) -> str:
    """String.trim()."""
    return text.strip("".join(map(chr, range(0x21))))


def _double(value: int | float) -> float:
    """Number.doubleValue()."""
    if isinstance(value, float):
        return value
    try:
        return float(value)
    except OverflowError:
        return math.copysign(math.inf, value)


def _math_round(value: float) -> int:
    """Math.round(double)."""
    if value != value:
        return 0
    if value >= 2.0**63:
        return 2**63 - 1
    if value < -(2.0**63):
        return -(2**63)
    return math.floor(value + 0.5) if abs(value) < 2.0**52 else int(value)


def unsecured_verdict(token: str, options: OAuthOptions, now_ms: int) -> str | tuple[str, int]:
    """What Kafka's default validator makes of ``token`` at ``now_ms``: (principal name, expiry epoch ms), or the
    JSON error challenge (``{"status":"invalid_token"}`` or ``insufficient_scope`` with the required scope)."""
    invalid = '{"status":"invalid_token"}'
    if ".." in token:
        return invalid
    parts = token.split(".")  # String.split drops trailing empty strings, then one "" is added back for a final
    if len(parts) != 3:  # "."; without "..", that is Python's split
        return invalid
    header, claims = (jackson_members(b) if b is not None else None for b in map(java_url_decode, parts[:2]))
    if header is None or claims is None:
        return invalid
    if "alg" not in header:
        # Kafka: Objects.requireNonNull -> NullPointerException, the connection closed unanswered. kafkalog
        # answers invalid_token: the token is invalid (deliberate).
        return invalid
    if header["alg"] != "none" or parts[2]:
        return invalid
    scope_value = claims.get(options.scope_claim)
    if isinstance(scope_value, str):
        scope = {_trim(scope_value)} - {""}
    elif scope_value is None or isinstance(scope_value, list):
        scope = {_trim(item) for item in scope_value or ()} - {""}
    else:
        return invalid  # not a List
    exp, principal, iat = claims.get("exp"), claims.get(options.principal_claim), claims.get("iat")
    numbers = (int, float)
    if not isinstance(exp, numbers) or not isinstance(principal, str) or not _trim(principal):
        return invalid
    if iat is not None and not isinstance(iat, numbers):
        return invalid
    expiry = _double(exp)
    if iat is not None and 1000 * _double(iat) > now_ms + options.skew_ms:
        return invalid
    if now_ms - options.skew_ms >= 1000 * expiry:
        return invalid
    if iat is not None and expiry <= _double(iat):
        return invalid
    if any(required not in scope for required in options.required_scope):
        return f'{{"status":"insufficient_scope", "scope":"[{", ".join(options.required_scope)}]"}}'
    return principal, _math_round(expiry * 1000)
