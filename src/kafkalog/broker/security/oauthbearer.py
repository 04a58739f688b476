"""SASL/OAUTHBEARER (RFC 7628) with Kafka's default token validator, the unsecured JWS one.

Kafka ships OAUTHBEARER with ``OAuthBearerUnsecuredValidatorCallbackHandler`` as the broker's default: it accepts
an *unsecured* JWT (header ``{"alg":"none"}``, empty signature) and checks its claims -- the principal claim
(``sub``, or ``unsecuredValidatorPrincipalClaimName``) must be a non-blank string, ``exp`` must exist and lie in
the future, ``iat`` (when present) must not lie in the future and must precede ``exp``, and the scope claim
(``scope``, or ``unsecuredValidatorScopeClaimName``) must hold every value of ``unsecuredValidatorRequiredScope``.
``unsecuredValidatorAllowableClockSkewMs`` widens both time checks. It is meant for development and tests, as
Kafka says of it: anyone can mint such a token.

The exchange (Kafka's OAuthBearerSaslServer): the client's first message is ``n,[a=<authzid>],\\x01auth=Bearer
<token>[\\x01key=value...]\\x01\\x01``. A valid token completes the login with principal ``User:<principal claim>``
and the token's expiry bounds the session (KIP-368: the client re-authenticates before it). An invalid token is
answered, not refused: the server's challenge is a JSON error (``{"status":"invalid_token"}``, or
``{"status":"insufficient_scope", "scope":"[...]"}``), the client replies with a single ``\\x01``, and only then
does the login fail, with that JSON as the client's error message. A malformed first message fails at once with
Kafka's standard SASL failure message.
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidConfigurationError

MECHANISM = "OAUTHBEARER"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_PREFIX = "unsecuredValidator"
PRINCIPAL_CLAIM_NAME_OPTION = _PREFIX + "PrincipalClaimName"
SCOPE_CLAIM_NAME_OPTION = _PREFIX + "ScopeClaimName"
REQUIRED_SCOPE_OPTION = _PREFIX + "RequiredScope"
ALLOWABLE_CLOCK_SKEW_MS_OPTION = _PREFIX + "AllowableClockSkewMs"

# RFC 7628 / Kafka's OAuthBearerClientInitialResponse grammar
_SEPARATOR = "\x01"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # [\x01-\x7F] but ',' and '=', or their escapes
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_CLIENT_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KEY}={_VALUE}\x01)*)\x01")
# since Kafka 3.8 (KAFKA-15878) the token may hold the standard base64 characters and end in '=' padding
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)", re.ASCII)
_KEY_RE = re.compile(_KEY)
_VALUE_RE = re.compile(_VALUE)


class OAuthBearerSaslError(Exception):
    """A malformed exchange (Kafka's SaslException): the client gets the standard failure message."""


class OAuthBearerPublicError(Exception):
    """A failure whose message the client is told as it is (Kafka's SaslAuthenticationException)."""


class IllegalToken(Exception):
    """A token the unsecured validator refuses (Kafka's OAuthBearerIllegalTokenException); ``scope`` is set for a
    missing required scope (then the status is ``insufficient_scope``)."""

    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope


@dataclass(frozen=True)
class ClientInitialResponse:
    """The parts of a client's first message."""

    token: str
    authorization_id: str
    extensions: Mapping[str, str]


def parse_client_initial_response(data: bytes) -> ClientInitialResponse:
    """Parse ``n,[a=authzid],\\x01auth=Bearer <token>[\\x01k=v]*\\x01\\x01`` (OAuthBearerClientInitialResponse)."""
    text = data.decode("utf-8", errors="replace")
    match = _CLIENT_FIRST.fullmatch(text)
    if not match:
        raise OAuthBearerSaslError("Invalid OAUTHBEARER client first message")
    properties: dict[str, str] = {}
    pairs = match.group("kvpairs")
    for pair in pairs.split(_SEPARATOR) if pairs else ():
        if pair:
            key, _, value = pair.partition("=")
            properties[key] = value
    auth = properties.pop("auth", None)
    if auth is None:
        raise OAuthBearerSaslError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    for key, value in properties.items():
        if not _KEY_RE.fullmatch(key):
            raise OAuthBearerSaslError(f"Extension name {key} is invalid")
        if not _VALUE_RE.fullmatch(value):
            raise OAuthBearerSaslError(f"Extension value ({value}) for extension {key} is invalid")
    auth_match = _AUTH.fullmatch(auth)
    if not auth_match:
        raise OAuthBearerSaslError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if auth_match.group("scheme").lower() != "bearer":
        raise OAuthBearerSaslError(f"Invalid scheme in OAUTHBEARER client first message: {auth_match.group('scheme')}")
    return ClientInitialResponse(auth_match.group("token"), match.group("authzid") or "", properties)


_JSON_WHITESPACE = " \t\n\r"
MAX_JSON_NUMBER_LENGTH = 1000  # Jackson's StreamReadConstraints.DEFAULT_MAX_NUM_LEN
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)


def java_trim(text: str) -> str:
    """Java's String.trim(): every character up to U+0020 goes from both ends (control characters too; Unicode
    spaces such as U+00A0 stay, unlike str.strip())."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def java_double(value: int | float) -> float:
    """Number.doubleValue(): the nearest double; an integer beyond the double range is infinite (Python's
    float() raises there)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def java_round(value: float) -> int:
    """Math.round(double): the nearest long, ties up; NaN is 0 and anything beyond the long range clamps."""
    if math.isnan(value):
        return 0
    if value >= 2.0**63:
        return LONG_MAX
    if value <= -(2.0**63):
        return LONG_MIN
    floor = math.floor(value)
    return floor + 1 if value - floor >= 0.5 else floor


def java_double_text(value: float) -> str:
    """Double.toString(): the shortest digits that round-trip, as d.ddd below 1e7 and from 1e-3, else d.dddE<n>."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits, exponent = _shortest_digits(abs(value))
    if 1e-3 <= abs(value) < 1e7:
        point = exponent + 1  # digits before the decimal point
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        whole, fraction = (digits + "0" * point)[:point], digits[point:]
        return f"{sign}{whole}.{fraction or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def _shortest_digits(value: float) -> tuple[str, int]:
    """(significant digits, decimal exponent of the first digit) of repr(value), trailing zeros dropped."""
    mantissa, _, exp = f"{value!r}".partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    exponent = (int(exp) if exp else 0) + len(whole.lstrip("0")) - 1
    if not whole.lstrip("0"):  # 0.000ddd
        exponent = (int(exp) if exp else 0) - (len(fraction) - len(fraction.lstrip("0"))) - 1
    return digits.rstrip("0") or "0", exponent


def _java_type(value: Any) -> str:
    """The simple name of the Java class Jackson would give a claim (for Kafka's wording of type errors)."""
    if isinstance(value, list):
        return "ArrayList"
    if isinstance(value, str):
        return "String"
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return "Integer"
        return "Long" if LONG_MIN <= value <= LONG_MAX else "BigInteger"
    return "Double"


def _convert(value: Any) -> Any:
    """A JSON member as Kafka keeps it (OAuthBearerUnsecuredJws.convert): a number, a list of the elements'
    texts, or the text of anything else."""
    if isinstance(value, list):
        return [_as_text(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return _as_text(value)


def _as_text(value: Any) -> str:
    """Jackson's JsonNode.asText(): strings as they are, numbers as Java prints them, booleans as text, null as
    "null", objects and arrays as ""."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double_text(value)
    return ""


_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def java_base64url_decode(text: str) -> bytes:
    """java.util.Base64.getUrlDecoder().decode(text): the URL-safe alphabet only ('+' and '/' are illegal, as is
    anything else), padding optional but exact when present, nothing after it, no lone final character.
    ValueError otherwise. (Python's urlsafe_b64decode takes '+' and '/' too, and skips other characters.)"""
    padded = text.find("=")
    data = text if padded < 0 else text[:padded]
    if not _BASE64URL.fullmatch(data):
        raise ValueError("Illegal base64 character")
    rest = len(data) % 4
    if rest == 1:
        raise ValueError("Last unit does not have enough valid bits")
    if padded >= 0:
        padding = text[padded:]
        if padding != {2: "==", 3: "="}.get(rest):
            raise ValueError("Input byte array has wrong 4-byte ending unit")
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


MISSING = object()  # Jackson's MissingNode: readTree of no content


def _reject_constant(name: str) -> Any:
    raise ValueError(f"Non-standard token '{name}'")  # Jackson refuses NaN and Infinity by default


def _number(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if len(text.lstrip("-")) > MAX_JSON_NUMBER_LENGTH:
            raise ValueError(f"Number value length exceeds the maximum allowed ({MAX_JSON_NUMBER_LENGTH})")
        return kind(text)

    return parse


_JACKSON = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_number(int), parse_float=_number(float))


def jackson_read_tree(raw: bytes) -> Any:
    """ObjectMapper.readTree(byte[]) with Jackson's defaults: the first JSON value of ``raw`` (its encoding
    detected from a BOM or the zero bytes, UTF-8 otherwise); whatever follows it is never read, not even decoded;
    MISSING when there is no content; ValueError for malformed JSON (NaN and Infinity are; so are numbers over
    1,000 characters and nesting deeper than the interpreter takes -- Jackson allows 1,000 levels, Python fewer:
    deliberate)."""
    encoding = json.detect_encoding(raw)
    if encoding == "utf-8-sig":
        raw, encoding = raw[3:], "utf-8"
    try:
        text, complete = raw.decode(encoding), True
    except UnicodeDecodeError as e:  # only the text before the bad bytes can hold the value
        text, complete = raw[: e.start].decode(encoding), False
    text = text.removeprefix("\ufeff")
    start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
    if start == len(text):
        if complete:
            return MISSING
        raise ValueError("Invalid byte in the JSON text")
    try:
        return _JACKSON.raw_decode(text, start)[0]
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _to_map(split: str) -> dict[str, Any]:
    """OAuthBearerUnsecuredJws.toMap: the members of a decoded JSON object; any other JSON value has none."""
    try:
        raw = java_base64url_decode(split)
    except ValueError:
        raise IllegalToken("malformed Base64 URL encoded value") from None
    try:
        decoded = jackson_read_tree(raw)
    except (ValueError, UnicodeDecodeError):
        raise IllegalToken("malformed JSON") from None
    if not isinstance(decoded, dict):
        return {}
    return {key: _convert(value) for key, value in decoded.items()}


class UnsecuredJws:
    """An unsecured JWS (RFC 7515 with ``alg`` "none"), as Kafka's OAuthBearerUnsecuredJws parses it.

    Invariant: a constructed instance has a header with ``alg`` "none", an empty signature, a numeric ``exp``, a
    non-blank string principal claim and a (possibly empty) scope; anything else raised IllegalToken.
    """

    def __init__(self, compact: str, principal_claim_name: str = "sub", scope_claim_name: str = "scope") -> None:
        self.value = compact
        if ".." in compact:
            raise IllegalToken("Malformed compact serialization contains '..'")
        splits = compact.split(".")
        if len(splits) != 3:
            raise IllegalToken(
                "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values"
            )
        self.header = _to_map(splits[0])
        self.claims = _to_map(splits[1])
        alg = self.header.get("alg")
        if alg is None:
            raise IllegalToken("JWS header must have an Algorithm value")
        if _as_text(alg) != "none":
            raise IllegalToken("Unsecured JWS must have 'none' for an algorithm")
        if splits[2]:
            raise IllegalToken("Unsecured JWS must not contain a digital signature")
        self.principal_claim_name = java_trim(principal_claim_name)
        self.scope_claim_name = java_trim(scope_claim_name)
        self.scope = self._scope()
        expiration = self.expiration_time
        if expiration is None:
            raise IllegalToken("No expiration time in JWT")
        # the token's expiry, epoch ms (OAuthBearerToken.lifetimeMs: Math.round(exp * 1000), a long)
        self.lifetime_ms = java_round(expiration * 1000)
        principal = self.claim(self.principal_claim_name, str)
        if principal is None or not java_trim(principal):
            raise IllegalToken(f"No principal name in JWT claim: {self.principal_claim_name}")
        self.principal_name: str = principal
        issued_at = self.issued_at
        self.start_time_ms = None if issued_at is None else java_round(issued_at * 1000)

    def claim(self, name: str, kind: type) -> Any:
        """The claim ``name`` if it has type ``kind`` (str, float for a number, list); None if absent."""
        value = self.claims.get(name)
        if value is None:
            return None
        ok = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
        if not ok:
            java = {str: "String", float: "Number", list: "List"}[kind]
            raise IllegalToken(f"The '{name}' claim was not of type {java}: {_java_type(value)}")
        return value

    @property
    def expiration_time(self) -> float | None:
        """``exp`` as Kafka compares it: Number.doubleValue()."""
        value = self.claim("exp", float)
        return None if value is None else java_double(value)

    @property
    def issued_at(self) -> float | None:
        value = self.claim("iat", float)
        return None if value is None else java_double(value)

    def _scope(self) -> frozenset[str]:
        value = self.claims.get(self.scope_claim_name)
        if isinstance(value, str):
            return frozenset([java_trim(value)]) if java_trim(value) else frozenset()
        items = self.claim(self.scope_claim_name, list)
        return frozenset(java_trim(s) for s in items or () if java_trim(s))


def _java_list(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


def _java_set(items: frozenset[str]) -> str:
    return "[" + ", ".join(sorted(items)) + "]"


_SCOPE_ITEM = re.compile(r"[\x23-\x5B\x5D-\x7E\x21]+")  # OAuthBearerScopeUtils: a scope token of RFC 6749
_JAVA_INT = re.compile(r"[-+]?[0-9]+")


@dataclass(frozen=True)
class UnsecuredValidatorOptions:
    """The validator's JAAS options (all optional)."""

    principal_claim_name: str = "sub"
    scope_claim_name: str = "scope"
    required_scope: tuple[str, ...] = ()
    allowable_clock_skew_ms: int = 0

    @classmethod
    def from_jaas(cls, options: Mapping[str, str], key: str = "sasl.jaas.config") -> UnsecuredValidatorOptions:
        principal = java_trim(options.get(PRINCIPAL_CLAIM_NAME_OPTION) or "") or "sub"
        scope = java_trim(options.get(SCOPE_CLAIM_NAME_OPTION) or "") or "scope"
        required = tuple(s for s in java_trim(options.get(REQUIRED_SCOPE_OPTION) or "").split(" ") if s)
        for item in required:  # OAuthBearerScopeUtils.parseScope (Kafka finds it at the first login, not at start)
            if not _SCOPE_ITEM.fullmatch(item):
                raise InvalidConfigurationError(
                    f"Invalid value for configuration {key}: {REQUIRED_SCOPE_OPTION}: Invalid scope value: {item}"
                )
        raw = java_trim(options.get(ALLOWABLE_CLOCK_SKEW_MS_OPTION) or "")
        if raw and not (_JAVA_INT.fullmatch(raw) and -(2**31) <= int(raw) < 2**31):  # Integer.parseInt's rules
            raise InvalidConfigurationError(
                f"Invalid value for configuration {key}: {ALLOWABLE_CLOCK_SKEW_MS_OPTION}={raw!r} is not an integer"
            )
        skew = int(raw) if raw else 0
        if skew < 0:
            raise InvalidConfigurationError(
                f"Invalid value for configuration {key}: Allowable clock skew millis must not be negative: {raw}"
            )
        return cls(principal, scope, required, skew)


def validate_unsecured_token(token: str, options: UnsecuredValidatorOptions, now_ms: int) -> UnsecuredJws:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler: the token, or IllegalToken saying why not."""
    jws = UnsecuredJws(token, options.principal_claim_name, options.scope_claim_name)
    skew = options.allowable_clock_skew_ms
    issued_at = jws.issued_at
    if issued_at is not None and 1000 * issued_at > now_ms + skew:
        raise IllegalToken(
            f"The Issued At value ({issued_at:f} seconds) was after the indicated time ({now_ms} ms) plus allowable "
            f"clock skew ({skew} ms)"
        )
    expiration = jws.expiration_time
    assert expiration is not None  # UnsecuredJws requires it
    if now_ms - skew >= 1000 * expiration:
        raise IllegalToken(
            f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was on or after the Expiration "
            f"Time value ({expiration:f} seconds)"
        )
    if issued_at is not None and expiration <= issued_at:
        raise IllegalToken(
            f"The Expiration Time time ({expiration:f} seconds) was not after the Issued At time "
            f"({issued_at:f} seconds)"
        )
    for required in options.required_scope:
        if required not in jws.scope:
            raise IllegalToken(
                f"The provided scope ({_java_set(jws.scope)}) was missing a required scope ({required}).  All required "
                f"scope elements: {_java_list(list(options.required_scope))}",
                scope=_java_list(list(options.required_scope)),
            )
    return jws


def json_error_response(status: str, scope: str | None = None, openid_configuration: str | None = None) -> str:
    """The server's error challenge, byte for byte as Kafka formats it."""
    text = f'{{"status":"{status}"'
    if scope is not None:
        text += f', "scope":"{scope}"'
    if openid_configuration is not None:
        text += f', "openid-configuration":"{openid_configuration}"'
    return text + "}"


class OAuthBearerServer:
    """The server side of one OAUTHBEARER exchange (Kafka's OAuthBearerSaslServer with the unsecured validator).

    After ``evaluate`` returns, either ``complete`` is set (``user`` and ``credential_expiry_ms`` known), or the
    answer was an error challenge (``error_message`` set) to which the client must reply ``\\x01``.
    """

    def __init__(self, options: UnsecuredValidatorOptions, wall_clock_ms: Callable[[], int] | None = None) -> None:
        self.options = options
        self.wall_clock_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self.complete = False
        self.user: str | None = None
        self.credential_expiry_ms: int | None = None
        self.error_message: str | None = None
        self.failure_reason: str | None = None  # why the token was refused (for the broker's log, not the client)
        self.extensions: Mapping[str, str] = {}

    def evaluate(self, data: bytes) -> bytes:
        if data == b"\x01" and self.error_message is not None:
            raise OAuthBearerPublicError(self.error_message)
        self.error_message = None
        response = parse_client_initial_response(data)
        try:
            token = validate_unsecured_token(response.token, self.options, self.wall_clock_ms())
        except IllegalToken as e:
            self.failure_reason = str(e)
            status = "insufficient_scope" if e.scope is not None else "invalid_token"
            self.error_message = json_error_response(status, e.scope)
            return self.error_message.encode()
        if response.authorization_id and response.authorization_id != token.principal_name:
            raise OAuthBearerPublicError(
                f"Authentication failed: Client requested an authorization id ({response.authorization_id}) that is "
                f"different from the token's principal name ({token.principal_name})"
            )
        self.extensions = dict(response.extensions)  # the unsecured validator accepts every extension
        self.user = token.principal_name
        self.credential_expiry_ms = token.lifetime_ms
        self.complete = True
        return b""


LOGIN_STRING_CLAIM_PREFIX = "unsecuredLoginStringClaim_"
LOGIN_NUMBER_CLAIM_PREFIX = "unsecuredLoginNumberClaim_"
LOGIN_LIST_CLAIM_PREFIX = "unsecuredLoginListClaim_"
LOGIN_EXTENSION_PREFIX = "unsecuredLoginExtension_"


def _b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).rstrip(b"=").decode()


def unsecured_login_token(options: Mapping[str, str], now_s: float | None = None) -> tuple[str, dict[str, str]]:
    """The client side of Kafka's default OAUTHBEARER login (OAuthBearerUnsecuredLoginCallbackHandler): an
    unsecured JWT from the login module's options, and the SASL extensions they name.

    ``unsecuredLoginStringClaim_<name>``, ``unsecuredLoginNumberClaim_<name>`` and ``unsecuredLoginListClaim_<name>``
    (the list's first character is its separator) become claims; ``iat`` is now and ``exp`` now plus
    ``unsecuredLoginLifetimeSeconds`` (3600); the principal claim (``unsecuredLoginPrincipalClaimName``, ``sub``)
    must be given. ``unsecuredLoginExtension_<name>`` become extensions of the first message.
    """
    issued = time.time() if now_s is None else now_s
    lifetime = options.get("unsecuredLoginLifetimeSeconds", "3600").strip() or "3600"
    try:
        seconds = int(lifetime)
    except ValueError:
        raise InvalidConfigurationError(f"unsecuredLoginLifetimeSeconds={lifetime!r} is not an integer") from None
    claims: dict[str, Any] = {"iat": issued, "exp": issued + seconds}
    extensions: dict[str, str] = {}
    for key, value in options.items():
        if key.startswith(LOGIN_STRING_CLAIM_PREFIX):
            claims[key[len(LOGIN_STRING_CLAIM_PREFIX) :]] = value
        elif key.startswith(LOGIN_NUMBER_CLAIM_PREFIX):
            claims[key[len(LOGIN_NUMBER_CLAIM_PREFIX) :]] = float(value) if "." in value else int(value)
        elif key.startswith(LOGIN_LIST_CLAIM_PREFIX):
            separator, items = (value[:1], value[1:]) if value else (",", "")
            claims[key[len(LOGIN_LIST_CLAIM_PREFIX) :]] = [s for s in items.split(separator) if s]
        elif key.startswith(LOGIN_EXTENSION_PREFIX):
            extensions[key[len(LOGIN_EXTENSION_PREFIX) :]] = value
    principal_claim = (options.get("unsecuredLoginPrincipalClaimName") or "").strip() or "sub"
    if not isinstance(claims.get(principal_claim), str):
        raise InvalidConfigurationError(
            f'The OAUTHBEARER login needs its principal: set {LOGIN_STRING_CLAIM_PREFIX}{principal_claim}="<name>"'
        )
    return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}.", extensions
