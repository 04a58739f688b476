"""The SASL protocol fuzz target: sequences of frames on one SASL connection through a real broker.

``SaslFuzzer`` runs a ``KafkaServer`` in process with a SASL_PLAINTEXT listener enabling PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512 and OAUTHBEARER (PLAIN users in the listener's JAAS entry, SCRAM users in the credential store, one
of them named with ',' and '=' to exercise saslname escapes; OAUTHBEARER with Kafka's default unsecured JWS
validator, its options drawn per connection), ``connection.failed.authentication.delay.ms=0``. A case is a plan
of actions on ONE connection (``plan_for``): ApiVersions, SaslHandshake v0/v1 (mechanism names mutated),
mechanism tokens as SaslAuthenticate v0-v2 or, after a v0 handshake, as bare frames (PLAIN's authzid/user/password,
SCRAM client-first and client-final with mutated gs2 headers, names, nonces, extensions, channel bindings and
proofs; OAUTHBEARER first messages with every part of the GS2 header, key/value pairs, scheme and unsecured JWS
mutated -- header, claims, their JSON and base64, signature, layout -- and the %x01 acknowledgement of an error
challenge), other requests before and after login, time passing (KIP-368 re-authentication and session expiry
with ``connections.max.reauth.ms`` of 0, 1 s or 60 s, token expiry on the connection's wall clock), oversized
frames; the plan's order is mutated too, and any frame may be mutated byte-wise. Each frame goes through the
broker's ``RequestRouter`` as the socket server hands it over; ``SaslTlsFuzzer`` writes the same frames to TLS
sockets of a SASL_SSL listener instead.

The oracle (``KafkaSaslModel`` predicts every frame as Kafka would handle it):

- the broker does what Kafka does: answers (header echoing the correlation id, body decoding to its last byte,
  the predicted error code and message, session lifetime, SCRAM server messages that extend the client nonce and
  sign the exchange, OAUTHBEARER's JSON error challenge byte for byte), answers then closes (a failed login), or
  closes unanswered;
- after every frame the connection's principal is the model's: a login the password did not make never
  authenticates, a re-authentication never changes the principal, a failed one never leaves one behind;
- independently of the model, a login never completes on an OAUTHBEARER token the client made invalid (expired,
  issued in the future, signed, alg other than none, no principal, missing scope, malformed...);
- no exception escapes, no error is logged, no UNKNOWN_SERVER_ERROR, no frame holds the loop for long;
- after every case a fresh connection still logs in (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER in
  turn) and gets Metadata.

The atheris harness is ``fuzz/fuzz_protocol.py --sasl`` (``--sasl-tls`` over TLS); the CI form
``tests/test_protocol_fuzz_sasl.py``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import json
import struct
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..broker.network import CLOSE, Connection
from ..broker.protocol import APIS, InvalidRequestError
from ..broker.security.oauthbearer import (
    ALLOWABLE_CLOCK_SKEW_MS_OPTION,
    PRINCIPAL_CLAIM_NAME_OPTION,
    REQUIRED_SCOPE_OPTION,
    SCOPE_CLAIM_NAME_OPTION,
    UnsecuredValidatorOptions,
)
from ..broker.security.scram import new_credential
from ..broker.server import KafkaServer
from .fuzz import UnexpectedOutcome, mutate
from .protocol_fuzz import FuzzBroker, _response_bytes, decode_response, judge
from .protocol_messages import Choices, encode_frame, mutate_message, seed_message, try_encode
from .sasl_model import ANONYMOUS, OAUTHBEARER, Expect, KafkaSaslModel, OAuthOptions, Users, scram_proof, wall_ms

HANG_SECONDS = 10.0  # one frame holding the event loop this long is a hang
PLAIN_USERS = {"admin": "admin-secret", "bob": "bob-secret"}
SCRAM_USERS = {
    "alice": {"SCRAM-SHA-256": "alice-secret", "SCRAM-SHA-512": "alice-secret"},
    "bob": {"SCRAM-SHA-512": "bob-scram"},
    "c,a=r": {"SCRAM-SHA-256": "comma-secret"},
}
USERS = Users(PLAIN_USERS, SCRAM_USERS)
ENABLED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", OAUTHBEARER)
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{user}="{password}"' for user, password in PLAIN_USERS.items())
    + ";"
)
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
# The unsecured validator's options of a connection (drawn at its first OAUTHBEARER handshake): Kafka's defaults;
# a required scope; another principal and scope claim, two required scope values (one as Java prints the number
# 1e10 in a list) and 30 s of allowed clock skew.
OAUTH_OPTIONS = (
    OAuthOptions(),
    OAuthOptions(required_scope=("kafka",)),
    OAuthOptions("client_id", "scp", ("read", "1.0E10"), 30_000),
)
BROKER_CONFIG = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": ",".join(ENABLED),
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
    "connection.failed.authentication.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "log.segment.bytes": "1048576",
}
REAUTH_MS = (0, 60_000, 1_000)  # connections.max.reauth.ms of a case (0: no re-authentication)
# plans of honest PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER logins (templates 0, 1, 2 and 5)
FOLLOW_UP_LOGINS = (b"\x00\x00", b"\x00\x01", b"\x00\x02", b"\x00\x05")
# Requests other than the SASL ones a case sends (read-only, answered at once): (API key, version).
OTHER_REQUESTS = ((3, 12), (18, 3), (3, 1), (60, 1), (16, 4), (18, 0), (3, 0), (32, 4), (18, 9), (3, 13), (10, 4))


# ------------------------------------------------------------------------------------------------ inputs

TEMPLATES: tuple[tuple[str, ...], ...] = (
    ("handshake:PLAIN", "plain", "other"),
    ("handshake:SCRAM-SHA-256", "scram-first", "scram-final", "other"),
    ("versions", "handshake:SCRAM-SHA-512", "scram-first", "scram-final", "other"),
    ("handshake:PLAIN", "plain", "tick", "handshake:PLAIN", "plain", "other"),
    (
        "handshake:SCRAM-SHA-512",
        "scram-first",
        "scram-final",
        "tick",
        "handshake:SCRAM-SHA-512",
        "scram-first",
        "scram-final",
        "other",
    ),
    ("handshake:OAUTHBEARER", "oauth", "other"),
    ("handshake:OAUTHBEARER", "oauth:bad", "oauth-ack", "other"),
    ("versions", "handshake:OAUTHBEARER", "oauth:bad", "oauth", "other"),
    ("handshake:OAUTHBEARER", "oauth", "tick", "handshake:OAUTHBEARER", "oauth", "other"),
)
POOL = (
    "versions",
    "handshake",
    "plain",
    "scram-first",
    "scram-final",
    "token",
    "other",
    "tick",
    "huge",
    "oauth",
    "oauth-ack",
)


def plan_for(choices: Choices) -> list[str]:
    """The actions of one case: a login template (index 0: an honest PLAIN login), or random actions; then
    0-3 order mutations (swap, drop, duplicate, insert)."""
    kind = choices.below(len(TEMPLATES) + 2)
    random_plan = kind >= len(TEMPLATES)
    plan = [choices.pick(POOL) for _ in range(1 + choices.below(8))] if random_plan else list(TEMPLATES[kind])
    for _ in range(choices.pick((0, 0, 0, 1, 2, 3))):
        op, i, j = choices.below(4), choices.below(len(plan) or 1), choices.below(len(plan) or 1)
        if op == 0 and plan:
            plan[i], plan[j] = plan[j], plan[i]
        elif op == 1 and len(plan) > 1:
            del plan[i]
        elif op == 2 and plan:
            plan.insert(i, plan[i])
        else:
            plan.insert(i, choices.pick(POOL))
    return plan


def _sasl_name(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


class Client:
    """Renders a plan's actions into frames, as a client would (honest at choice 0 of every decision), from
    what the broker answered so far."""

    def __init__(self, choices: Choices, wall: Callable[[], int] = lambda: wall_ms(1000.0)) -> None:
        self.c = choices
        self.wall = wall  # the wall clock tokens are minted by (epoch ms)
        self.correlation = 0
        self.mechanism = "PLAIN"
        self.raw = False  # the client's belief: the last handshake was v0
        self.last_token = b""
        self.scram: dict[str, Any] = {}
        self.oauth_options: OAuthOptions | None = None  # drawn at the first OAUTHBEARER handshake
        # why the last OAUTHBEARER token sent is invalid by construction (expired, signed, no principal...), or
        # None when it may be valid: a login on a token with a reason is a SECURITY failure, whatever the model says
        self.invalid_because: str | None = None

    def _pick(self, options: Any) -> Any:
        """The first (honest) option two times in three, else any: so that most decisions of a case keep the
        exchange going and the mutations that matter reach its later steps."""
        return options[0] if self.c.below(3) != 2 else self.c.pick(options)

    def frame(self, action: str) -> bytes | None:
        """The frame of ``action`` (None for "tick"), maybe byte-mutated."""
        name, _, argument = action.partition(":")
        render: Callable[[str], bytes] = getattr(self, "_" + name.replace("-", "_"))
        self.invalid_because = None
        frame = render(argument)
        if self.c.below(10) == 9:
            frame = mutate(frame, bytes(self.c.below(256) for _ in range(4)))
            self.invalid_because = None  # the mutation may have made it anything
        return frame

    def _request(self, key: int, version: int, **values: Any) -> bytes:
        if not APIS[key].min_version <= version <= APIS[key].max_version:
            return self._unsupported(key, version)
        self.correlation += 1
        message = copy.copy(seed_message(key, version))
        for name, value in values.items():
            setattr(message, name, value)
        return encode_frame(APIS[key], version, message, self.correlation)

    def _versions(self, _: str) -> bytes:
        return self._request(18, self.c.pick((3, 0, 4, 9)))

    def _handshake(self, mechanism: str) -> bytes:
        names = (
            mechanism or "PLAIN",
            "SCRAM-SHA-256",
            "SCRAM-SHA-512",
            "PLAIN",
            "plain",
            "GSSAPI",
            "OAUTHBEARER",
            "",
            "SCRAM-SHA-1",
            "PLAIN\x00",
            "SCRAM-SHA-256 ",
            "P" * 300,
        )
        name = names[self.c.below(len(names))] if self.c.below(3) == 2 or not mechanism else names[0]
        version = self._pick((1, 0, 2))
        self.mechanism, self.raw = name, version == 0
        self.scram = {}
        if name == OAUTHBEARER and self.oauth_options is None:
            self.oauth_options = self.c.pick(OAUTH_OPTIONS)
        return self._request(17, version, mechanism=name)

    def _token_frame(self, token: bytes) -> bytes:
        raw = self.raw if self.c.below(12) != 11 else not self.raw
        if raw:
            return token
        return self._request(36, self._pick((2, 1, 0, 3)), auth_bytes=token)

    def _token(self, _: str) -> bytes:
        return self._token_frame(bytes(self.c.below(256) for _ in range(self.c.below(64))))

    def _huge(self, _: str) -> bytes:
        return self._token_frame(b"\x00admin\x00" + b"x" * (524288 + self.c.below(3) - 1))

    def _other(self, _: str) -> bytes:
        key, version = self.c.pick(OTHER_REQUESTS)
        if version > APIS[key].max_version or self.c.below(4) != 3:
            return self._request(key, version)
        mutated = mutate_message(seed_message(key, version), version, self.c)
        self.correlation += 1
        return try_encode(lambda: encode_frame(APIS[key], version, mutated, self.correlation)) or self._request(
            key, version
        )

    def _unsupported(self, key: int, version: int) -> bytes:
        self.correlation += 1
        return struct.pack(">hhih", key, version, self.correlation, 4) + b"fuzz"

    # ----- PLAIN -----------------------------------------------------------------------------------------------
    def _plain(self, _: str) -> bytes:
        c = self.c
        user = self._pick(("admin", "bob", "alice", "nobody", "", "ADMIN", "admin ", "a" * 300))
        right = PLAIN_USERS.get(user, "admin-secret")
        password = self._pick(
            (right, "wrong", "", right[:-1], right + "x", right.upper(), right + "\x00junk", "bob-secret", "é" + right)
        )
        authzid = self._pick(("", user, "admin", "bob", "\xff"))
        token = f"{authzid}\x00{user}\x00{password}".encode()
        shape = 0 if self.c.below(3) != 2 else self.c.below(8)
        if shape == 5:
            token = token.replace(b"\x00", b"", 1)
        elif shape == 6:
            token = token + b"\x00" * c.below(3)
        elif shape == 7:
            token = token.replace(password.encode(), password.encode("latin-1", "replace") + b"\xc3")
        return self._token_frame(token)

    # ----- SCRAM -----------------------------------------------------------------------------------------------
    def _scram_first(self, _: str) -> bytes:
        mechanism = self.mechanism if self.mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512") else "SCRAM-SHA-256"
        users = ("alice", "c,a=r" if mechanism == "SCRAM-SHA-256" else "bob", "bob", "nobody", "", "ALICE")
        user = self._pick(users)
        name = self._pick((_sasl_name(user), user, _sasl_name(user) + "=41", "=" + user, user + "=2"))
        gs2 = self._pick(("n,,", "y,,", "p=tls-unique,,", f"n,a={name},", "n,a=admin,", "n,a=,", "", "n,"))
        nonce = self._pick(("fyko+d2lbbFgONRv9qkxdawL", "", "a,b", "é", "sp ace", "x" * 5000, "=", "\x7f", "r"))
        reserved = self._pick(("", "", "m=ext,"))
        extensions = self._pick(("", ",tokenauth=true", ",a=b,a=c", ",1=2", ",", ",ext=x,y"))
        bare = f"n={name},r={nonce}{extensions}"
        self.scram = {"mechanism": mechanism, "user": user, "bare": bare, "nonce": nonce}
        return self._token_frame(f"{gs2}{reserved}{bare}".encode())

    def _scram_final(self, _: str) -> bytes:
        scram = self.scram or {"mechanism": "SCRAM-SHA-256", "user": "alice", "bare": "n=alice,r=x", "nonce": "x"}
        server_first = self.last_token.decode("utf-8", "replace")
        fields = dict(item.split("=", 1) for item in server_first.split(",") if "=" in item)
        if not {"r", "s", "i"} <= fields.keys() or not fields["i"].isdigit():
            server_first, fields = "r=xfake,s=c2FsdA==,i=4096", {"r": "xfake", "s": "c2FsdA==", "i": "4096"}
        server_nonce = fields["r"]
        nonce = self._pick(
            (server_nonce, scram["nonce"], server_nonce + "x", server_nonce[:-1], "", "z" + server_nonce)
        )
        channel = self._pick(("biws", "eSws", "", "bg==", "biws==", "!!!!", "bh=="))
        extensions = self._pick(("", "", ",x=y"))
        right = SCRAM_USERS.get(scram["user"], {}).get(scram["mechanism"], "alice-secret")
        password = self._pick((right, "wrong", "alice-secret", right + " "))
        try:
            auth = f"{scram['bare']},{server_first},c={channel},r={nonce}"
            proof = scram_proof(scram["mechanism"], password, server_first, auth)
        except (ValueError, KeyError):
            proof = bytes(32)
        shape = 0 if self.c.below(3) != 2 else self.c.below(9)
        proof_text = base64.b64encode(proof).decode()
        if shape == 4:
            proof_text = base64.b64encode(bytes([proof[0] ^ 1]) + proof[1:]).decode()
        elif shape == 5:
            proof_text = base64.b64encode(proof[:-1]).decode()
        elif shape == 6:
            proof_text = base64.b64encode(proof + b"\x00").decode()
        elif shape == 7:
            proof_text = self._pick(("", "!!!!", proof_text.rstrip("="), proof_text + "=", "AAAA"))
        elif shape == 8:
            proof_text = base64.b64encode(bytes(len(proof))).decode()
        return self._token_frame(f"c={channel},r={nonce}{extensions},p={proof_text}".encode())

    # ----- OAUTHBEARER -----------------------------------------------------------------------------------------
    def _oauth_ack(self, _: str) -> bytes:
        """The client's reply to an error challenge: %x01 (RFC 7628 3.2.3)."""
        return self._token_frame(self._pick((b"\x01", b"\x01\x01", b"", b"\x02", b"\x01 ")))

    def _oauth(self, argument: str) -> bytes:
        """A client's first OAUTHBEARER message: ``n,[a=authzid],^Aauth=Bearer <unsecured JWS>[^Akey=value]^A^A``,
        honest at choice 0 (an expired token for ``oauth:bad``), every part mutated otherwise."""
        options = self.oauth_options or OAuthOptions()
        now = self.wall()
        why: list[str] = []
        header = self._jws_header(why)
        claims = self._claims(options, now, argument == "bad", why)
        token = self._jws(header, claims, why)
        principal = claims.get(options.principal_claim)
        authzid = self._pick(("", principal if isinstance(principal, str) else "alice", "bob", "al=3Dice", "=2C"))
        if authzid and authzid != principal:
            why.append(f"authzid {authzid} is not the principal")
        gs2 = self._pick((f"n,a={authzid}," if authzid else "n,,", "y,,", "n,a=,", "n,a=alice", "p=x,,", "n,"))
        scheme = self._pick(("Bearer", "bearer", "BEARER", "Basic", "Bearer ", "Bearer\t", "Bearer_1"))
        auth = f"auth={scheme} {token}"
        extension = self._pick(
            ("", "traceId=42", "auth=Bearer e30.e30.", "bad_key=1", "k=v w", "k=", "k=\x7f", "=v", "k=a=b")
        )
        pairs = [auth, extension] if not extension or self.c.below(2) == 0 else [extension, auth]
        body = "".join(f"{pair}\x01" for pair in pairs if pair)
        end = self._pick(("\x01", "", "\x01\x01"))
        if why:
            self.invalid_because = ", ".join(why)
        return self._token_frame(f"{gs2}\x01{body}{end}".encode("utf-8", "surrogatepass"))

    def _jws_header(self, why: list[str]) -> str:
        options = (
            ('{"alg":"none"}', None),
            ('{"alg":"HS256"}', "alg HS256"),
            ('{"alg":"None"}', "alg None"),
            ("{}", "no alg"),
            ('{"alg":null}', "alg null"),
            ('{"typ":"JWT","alg":"none"}', None),
            ("[]", "header not an object"),
            ('{"alg":["none"]}', "alg a list"),
            ('{"alg":"none","alg":"RS256"}', "alg RS256 (the last one)"),
            ('{"alg":"RS256","alg":"none"}', None),
            ('{"alg":"none"}}x', None),
        )
        text, reason = self._pick(options)
        if reason:
            why.append(reason)
        return str(text)

    def _claims(self, options: OAuthOptions, now: int, expired: bool, why: list[str]) -> dict[str, Any]:
        """The claims (values are Python objects, or ``Raw`` JSON text), and why they are invalid if they are."""
        skew, claims = options.skew_ms, {}
        principal = self._pick(
            (
                "alice",
                "bob",
                "",
                " ",
                "\x01",
                "\xa0x",
                "\ud800",
                7,
                None,
                True,
                ["alice"],
                {},
                _ABSENT,
                "a" * 300,
                " alice ",
            )
        )
        if principal in ("", " ", "\x01", 7, ["alice"], {}) or principal is _ABSENT:
            why.append(f"principal {principal!r}")
        if principal is not _ABSENT:
            claims[options.principal_claim] = principal
        exp_ms = now - skew - 1 if expired else now + 3_600_000
        exp_choices: tuple[Any, ...] = (
            exp_ms,
            now - skew - 1,
            now - skew,
            now - skew + 1,
            now + 500,
            -1000,
            "soon",
            _ABSENT,
            Raw("1e400"),
            Raw("NaN"),
            10**30 * 1000,
            9_300_000_000_000_000_000,
            Raw("1" * 1500),
            now + 3_600_000,
        )
        exp = self._pick(exp_choices)
        if isinstance(exp, int):
            if now - skew > exp:  # (at the boundary itself, the double arithmetic decides: left to the model)
                why.append(f"expired ({exp} ms at {now} ms, skew {skew})")
            claims["exp"] = exp // 1000 if exp % 1000 == 0 and self.c.below(2) else exp / 1000
        elif exp is not _ABSENT:
            claims["exp"] = exp
            if exp in ("soon", Raw("NaN"), Raw("1" * 1500)):
                why.append(f"exp {exp}")
        else:
            why.append("no exp")
        issued = exp_ms - 3_600_000 if expired else now  # an expired token was issued an hour before its expiry
        iat = self._pick((issued, _ABSENT, now + skew + 1, now + skew, "exp", "x", now - 1000))
        if iat == "exp" and isinstance(exp, int):
            iat = exp
            why.append("exp not after iat")
        if iat == now + skew + 1:
            why.append("iat in the future")
        if iat == "x":
            why.append("iat a string")
        if isinstance(iat, int):
            claims["iat"] = iat / 1000
        elif iat not in (_ABSENT, "exp"):
            claims["iat"] = iat
        scope = self._pick(
            (
                list(options.required_scope) or ["kafka"],
                [],
                _ABSENT,
                " ".join(options.required_scope) or "kafka",
                5,
                [Raw("1e10"), "read"],
                [" "],
                ["\xa0kafka"],
                ["kafka", None],
                " kafka ",
            )
        )
        if scope is not _ABSENT:
            claims[options.scope_claim] = scope
        if scope == 5:
            why.append("scope a number")
        elif options.required_scope and (scope is _ABSENT or scope in ([], [" "])):
            why.append(f"no scope of {options.required_scope}")
        extra = self._pick((None, "depth50", "depth3000", "long-number"))
        if extra == "depth50":
            claims["x"] = Raw("[" * 50 + "]" * 50)
        elif extra == "depth3000":
            claims["x"] = Raw("[" * 3000 + "]" * 3000)
            why.append("JSON nested 3,000 deep")
        elif extra == "long-number":
            claims["n"] = Raw("7" * 1500)
            why.append("a 1,500-digit number")
        return claims

    def _jws(self, header: str, claims: dict[str, Any], why: list[str]) -> str:
        body = "{" + ",".join(f"{json.dumps(k)}:{_json(v)}" for k, v in claims.items()) + "}"
        layout = self._pick(("compact", "spaced", "trailing", "bom", "utf16", "trailing-bytes"))
        if layout == "spaced":
            body = " " + body.replace(",", " , ").replace(":", " : ") + "\n"
        elif layout == "trailing":
            body += "}garbage"
        data = body.encode("utf-8", "surrogatepass")
        if layout == "bom":
            data = b"\xef\xbb\xbf" + data
        elif layout == "utf16":
            data = body.encode("utf-16-be", "surrogatepass")
        elif layout == "trailing-bytes":
            data += b"\xff\xfe"
        encoding = self._pick(("url", "padded", "standard", "tilde", "short"))
        parts = [_b64(header.encode(), encoding), _b64(data, encoding)]
        if encoding == "standard" and any(c in part for part in parts for c in "+/"):
            why.append("standard base64 alphabet")
        elif encoding == "padded" and any("=" in part for part in parts):
            why.append("padding inside the token")
        elif encoding in ("tilde", "short"):
            why.append(f"base64 {encoding}")
        signature = self._pick(("", "c2ln", "=", "AAAA"))
        if signature:
            why.append("signed")
        shape = self._pick(("{h}.{c}.{s}", "{h}.{c}", "{h}.{c}.{s}.x", ".{c}.{s}", "{h}..{c}.", "{h}.{c}.{s}."))
        if shape != "{h}.{c}.{s}":
            why.append(f"shape {shape}")
        return str(shape).format(h=parts[0], c=parts[1], s=signature)


class Raw(str):
    """JSON text put into a claim as it is (NaN, 1e400, deep nesting...)."""


_ABSENT: Any = Raw("<absent>")


def _json(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, list):
        return "[" + ",".join(_json(v) for v in value) + "]"
    return json.dumps(value)


def _b64(data: bytes, encoding: str) -> str:
    """Base64 of a JWS part: URL-safe without padding (RFC 7515), or as a careless client writes it."""
    if encoding == "standard":
        return base64.b64encode(data).decode().rstrip("=")
    text = base64.urlsafe_b64encode(data).decode()
    if encoding == "padded":
        return text
    text = text.rstrip("=")
    if encoding == "tilde":
        return text[:1] + "~" + text[1:]
    if encoding == "short":
        return text + "A" * ((1 - len(text) % 4) % 4)  # a length of 1 mod 4: a lone final character
    return text


# ------------------------------------------------------------------------------------------------ the broker


def broker_options(options: OAuthOptions) -> UnsecuredValidatorOptions:
    """The broker's validator options for ``options``, read from the JAAS options that set them."""
    return UnsecuredValidatorOptions.from_jaas(
        {
            PRINCIPAL_CLAIM_NAME_OPTION: options.principal_claim,
            SCOPE_CLAIM_NAME_OPTION: options.scope_claim,
            REQUIRED_SCOPE_OPTION: " ".join(options.required_scope),
            ALLOWABLE_CLOCK_SKEW_MS_OPTION: str(options.skew_ms),
        }
    )


Send = Callable[[bytes, Expect], Any]  # a frame and its prediction -> CLOSE or (header, response)


def _on_clocks(sasl: Any, reauth_ms: int, clock: Callable[[], float]) -> None:
    """Put a connection's authenticator on the case's clock: its sessions, and the wall clock of its tokens."""
    sasl.reauth_ms, sasl.clock = reauth_ms, clock
    sasl.wall_clock_ms = lambda: wall_ms(clock())


class _Clock:
    """The connections' clock (seconds): the cases move it to end sessions and space re-authentications."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SaslFuzzer(FuzzBroker):
    """One in-process broker with a SASL listener, and the oracle around its router. A context manager."""

    config = BROKER_CONFIG
    prefix = "kafkalog-sasl-fuzz-"

    def __init__(self, reset_every: int = 5000) -> None:
        super().__init__(reset_every)

    def _prepare(self, server: KafkaServer) -> None:
        assert server.log_manager is not None and server.credential_store is not None
        assert server.socket_server is not None and server.socket_server.security.sasl_factory is not None
        server.log_manager.create_topic("fuzz", 1)
        server.credential_store.apply(
            {
                (user, mechanism): new_credential(mechanism, password, 8192 if user == "alice" else 4096)
                for user, passwords in SCRAM_USERS.items()
                for mechanism, password in passwords.items()
            },
            set(),
        )
        self.endpoint = next(e for e in server.config.listeners if e.sasl)
        self.factory = server.socket_server.security.sasl_factory

    def connection(self, reauth_ms: int, clock: Callable[[], float]) -> Connection:
        """A fresh SASL_PLAINTEXT connection (its socket ends are never used), on the fuzz clocks."""
        self._index += 1
        stream = SimpleNamespace(get_extra_info=lambda name: None)
        conn = Connection(stream, self._index, self.endpoint)  # type: ignore[arg-type]
        conn.sasl = self.factory(self.endpoint)
        _on_clocks(conn.sasl, reauth_ms, clock)
        return conn

    def open(self, reauth_ms: int, clock: Callable[[], float]) -> tuple[Connection, Send]:
        """(the broker's connection, how a frame is sent on it and answered): here, straight to the router."""
        conn = self.connection(reauth_ms, clock)
        return conn, lambda frame, expect: self._run(conn, frame)

    def close(self, conn: Connection) -> None:
        """The client is done with the connection."""

    # ----- one case --------------------------------------------------------------------------------------------
    def check(self, control: bytes) -> str:
        """Run one case (``control`` drives ``plan_for`` and ``Client``); its outcome: "authenticated" or
        "refused"; UnexpectedOutcome when the broker breaks the oracle."""
        if self.cases and self.cases % self.reset_every == 0:
            self.reset()
        self.cases += 1

        def run() -> str:
            principal = self.run_plan(control)
            self.run_plan(FOLLOW_UP_LOGINS[self.cases % len(FOLLOW_UP_LOGINS)], expect_login=True)
            self._raise_logged(control)
            return "refused" if principal == ANONYMOUS else "authenticated"

        return self._case(run)

    def run_plan(self, control: bytes, expect_login: bool = False, plan: list[str] | None = None) -> str:
        """One connection through the plan of ``control`` (or ``plan``, its details still drawn from
        ``control``); the principal it ended with."""
        choices = Choices(control)
        reauth_ms = REAUTH_MS[choices.below(len(REAUTH_MS))]
        model = KafkaSaslModel(USERS, ENABLED, reauth_ms)
        clock = _Clock()
        conn, send = self.open(reauth_ms, clock)
        sasl = conn.sasl
        assert sasl is not None
        client = Client(choices, sasl.wall_clock_ms)
        steps: list[str] = []
        for action in plan if plan is not None else plan_for(choices):
            if action == "tick":
                seconds = choices.pick((61.0, 0.5, 1.5, 3600.0))
                clock.now += seconds
                model.now = clock.now
                steps.append(f"tick {seconds}")
                continue
            frame = client.frame(action)
            assert frame is not None
            if client.oauth_options is not None and model.oauth is not client.oauth_options:
                model.oauth = client.oauth_options  # this connection's validator options, for both
                sasl.settings = dataclasses.replace(sasl.settings, oauthbearer=broker_options(client.oauth_options))
            steps.append(f"{action} {frame[:80]!r}")
            exchanging = sasl.state in ("authenticate", "reauthenticate")
            expect = model.step(frame)
            result = send(frame, expect)
            if conn.principal != model.principal:  # checked first: the property that matters most
                raise UnexpectedOutcome(
                    f"SECURITY: the connection's principal is {conn.principal}, Kafka's would be {model.principal}"
                    f" after {steps}"
                )
            if exchanging and sasl.state == "complete" and client.invalid_because:
                raise UnexpectedOutcome(  # whatever the model says: the client made this token invalid
                    f"SECURITY: a login completed with an invalid OAUTHBEARER token ({client.invalid_because}) after "
                    f"{steps}"
                )
            client.last_token = self._compare(frame, expect, result, conn, steps)
            if model.state == "closed":
                break
        self.close(conn)
        if expect_login and conn.principal == ANONYMOUS:
            raise UnexpectedOutcome(f"a valid login on a fresh connection failed: {steps}")
        return conn.principal

    def _run(self, conn: Connection, frame: bytes) -> Any:
        """The router's answer to one frame: its result, or CLOSE when it refused the frame while decoding."""
        conn.close_after_send = False
        task = self.loop.create_task(self.router(conn, memoryview(frame)))
        started = time.monotonic()
        self.loop.run_until_complete(asyncio.wait({task}, timeout=HANG_SECONDS))
        if not task.done():
            task.cancel()
            raise UnexpectedOutcome(f"one frame held the connection {time.monotonic() - started:.1f} s: {frame[:96]!r}")
        error = task.exception()
        if isinstance(error, InvalidRequestError):
            return CLOSE
        if error is not None:
            raise UnexpectedOutcome(f"{type(error).__name__}: {error} on {frame[:96]!r}") from error
        return task.result()

    def _compare(self, frame: bytes, expect: Expect, result: Any, conn: Connection, steps: list[str]) -> bytes:
        """Raise UnexpectedOutcome unless ``result`` is what ``expect`` predicts; the token the broker answered."""
        closed = result is CLOSE or result is None
        if expect.kind == "close" or closed:
            if expect.kind != "close" or not closed:
                got = "closed unanswered" if closed else "an answer"
                raise UnexpectedOutcome(f"{got} where Kafka's would be {expect.kind} after {steps}")
            return b""
        if conn.close_after_send != (expect.kind == "answer-close"):
            raise UnexpectedOutcome(f"close after the answer: {conn.close_after_send}, Kafka: {expect.kind}: {steps}")
        if expect.kind == "served":
            judge(frame, result)
            return b""
        header, response = result
        if expect.kind == "token":
            try:
                token = _response_bytes(response)
            finally:
                response.close()
            if header != b"":
                raise UnexpectedOutcome(f"a bare token answered with a header {header!r}: {steps}")
            return self._checked_token(expect, token, steps)
        return self._checked_answer(frame, expect, result, steps)

    def _checked_answer(self, frame: bytes, expect: Expect, result: Any, steps: list[str]) -> bytes:
        _, response = result
        body = _response_bytes(response)  # judge() reads and closes the response; the parts stay readable
        judge(frame, result)
        key, version = struct.unpack_from(">hh", frame)
        answered = version if APIS[key].min_version <= version <= APIS[key].max_version else 0
        message = decode_response(key, answered, body)
        # ILLEGAL_SASL_STATE of a refused request is in the top-level error code of APIs that have one
        field = APIS[key].response._struct.fields.get("error_code")  # type: ignore[attr-defined]
        code = message.error_code if field is not None and field.for_version_q(answered) else expect.code
        if code != expect.code:
            raise UnexpectedOutcome(f"{APIS[key].name} v{version} answered {code}, Kafka's {expect.code}: {steps}")
        if key != 36:
            return b""
        if expect.message is not None and message.error_message != expect.message:
            raise UnexpectedOutcome(f"message {message.error_message!r}, Kafka's {expect.message!r}: {steps}")
        if version >= 1 and expect.lifetime_ms is not None and message.session_lifetime_ms != expect.lifetime_ms:
            raise UnexpectedOutcome(f"session lifetime {message.session_lifetime_ms}, expected {expect.lifetime_ms}")
        return self._checked_token(expect, bytes(message.auth_bytes or b""), steps) if code == 0 else b""

    @staticmethod
    def _checked_token(expect: Expect, token: bytes, steps: list[str]) -> bytes:
        complaint = expect.check(token) if expect.check is not None else None
        if complaint:
            raise UnexpectedOutcome(f"{complaint}: {steps}")
        return token

    def _raise_logged(self, control: bytes) -> None:
        if self.errors.records:
            records, self.errors.records = self.errors.records, []
            text = "; ".join(f"{r.name}: {r.getMessage()}" for r in records[:3])
            raise UnexpectedOutcome(f"the broker logged an error: {text} on case {control[:64]!r}")


# ------------------------------------------------------------------------------------------------ over TLS

READ_SECONDS = 10.0  # an answer (or the close) that takes longer over the socket is a hang


def tls_material() -> tuple[str, str, str]:
    """(server key PEM, server certificate chain PEM, CA certificate PEM) for 127.0.0.1, made now with
    ``cryptography`` (EC P-256: milliseconds); nothing is written to disk."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject: str, key: Any, issuer: str, issuer_key: Any, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            address = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
            builder = builder.add_extension(x509.SubjectAlternativeName([address]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("Kafkalog SASL fuzz CA", ca_key, "Kafkalog SASL fuzz CA", ca_key, ca=True)
    server = certificate("127.0.0.1", server_key, "Kafkalog SASL fuzz CA", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    key = server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    ca_pem = ca.public_bytes(pem).decode()
    return key.decode(), server.public_bytes(pem).decode() + ca_pem, ca_pem


class SaslTlsFuzzer(SaslFuzzer):
    """The same cases over real SASL_SSL connections: each frame is written to a TLS socket of the broker's
    SASL_SSL listener and the answer (or the close) read back, so that the TLS-wrapped path -- handshake, framing
    over the TLS stream, the pre-login size limit, close after a failed login -- is judged by the same model. The
    broker's connection (found by the client's port) is put on the case's clocks as it is accepted."""

    prefix = "kafkalog-sasl-tls-fuzz-"

    def __init__(self, reset_every: int = 5000) -> None:
        super().__init__(reset_every)
        key, chain, self.ca = tls_material()
        self.config = {
            **BROKER_CONFIG,
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": key,
            "ssl.keystore.certificate.chain": chain,
        }
        self._pending: tuple[int, Callable[[], float]] | None = None

    def _prepare(self, server: KafkaServer) -> None:
        super()._prepare(server)
        assert server.socket_server is not None
        self.socket_server = server.socket_server
        self.address = server.socket_server.bound_by_listener[self.endpoint.name]
        security, make = server.socket_server.security, self.factory

        def on_clocks(endpoint: Any) -> Any:  # the socket server creates each connection's authenticator here
            sasl = make(endpoint)
            if self._pending is not None:
                _on_clocks(sasl, *self._pending)
            return sasl

        security.sasl_factory = on_clocks

    def open(self, reauth_ms: int, clock: Callable[[], float]) -> tuple[Connection, Send]:
        import ssl

        context = ssl.create_default_context(cadata=self.ca)
        self._pending = (reauth_ms, clock)
        reader, writer = self.loop.run_until_complete(
            asyncio.wait_for(asyncio.open_connection(*self.address, ssl=context), READ_SECONDS)
        )
        port = writer.get_extra_info("sockname")[1]
        conn = self.loop.run_until_complete(asyncio.wait_for(self._accepted(port), READ_SECONDS))
        self._streams = (reader, writer)

        def send(frame: bytes, expect: Expect) -> Any:
            return self.loop.run_until_complete(self._exchange(reader, writer, frame, expect))

        return conn, send

    async def _accepted(self, port: int) -> Connection:
        """The broker's side of the client connection from ``port``, once its authenticator is in place."""
        while True:
            for conn in self.socket_server.connections():
                if conn.id.split("-")[1].endswith(f":{port}") and conn.sasl is not None:
                    return conn
            await asyncio.sleep(0.001)

    async def _exchange(self, reader: Any, writer: Any, frame: bytes, expect: Expect) -> Any:
        try:
            writer.write(struct.pack(">i", len(frame)) + frame)
            await writer.drain()
        except (ConnectionError, OSError):
            return CLOSE  # closed while the frame was written (a frame over the pre-login limit)
        try:
            async with asyncio.timeout(READ_SECONDS):
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                answer = await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            return CLOSE
        except TimeoutError:
            raise UnexpectedOutcome(
                f"no answer and no close within {READ_SECONDS} s over TLS: {frame[:96]!r}"
            ) from None
        if expect.kind == "token":  # a bare token answers a bare token
            return b"", SimpleNamespace(parts=[answer], close=lambda: None)
        key, version = struct.unpack_from(">hh", frame)
        spec = APIS.get(key)
        flexible = spec is not None and spec.min_version <= version <= spec.max_version and spec.flexible(version)
        split = 4 + (1 if flexible and key != 18 else 0)
        return answer[:split], SimpleNamespace(parts=[answer[split:]], close=lambda: None)

    def close(self, conn: Connection) -> None:
        _, writer = self._streams
        writer.close()
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(asyncio.wait_for(writer.wait_closed(), READ_SECONDS))
        self._pending = None


# ------------------------------------------------------------------------------------------------ runners


def corpus() -> dict[str, bytes]:
    """Starting inputs for the atheris harness: each template with honest choices, and with a few mutations."""
    out = {}
    for i in range(len(TEMPLATES) + 2):
        for reauth in range(len(REAUTH_MS)):
            out[f"sasl-template{i}-reauth{reauth}"] = bytes([reauth, i])
            out[f"sasl-template{i}-reauth{reauth}-mutated"] = bytes([reauth, i, 3, 1, 2, 9, 4, 2, 7, 1, 5, 3, 8])
    return out


def seed_controls() -> list[bytes]:
    return list(corpus().values())


def run_cases(
    cases: int, seed: int = 0, reset_every: int = 5000, tls: bool = False
) -> tuple[dict[str, int], list[str]]:
    """``cases`` inputs (every seed first, then seeded random controls), on the router or (``tls``) over SASL_SSL
    sockets: (outcome counts, failures)."""
    import random

    rng = random.Random(f"sasl-{seed}")
    seeds = seed_controls()
    failures: list[str] = []
    with (SaslTlsFuzzer if tls else SaslFuzzer)(reset_every) as f:
        for n in range(cases):
            control = seeds[n] if n < len(seeds) else rng.randbytes(rng.randrange(1, 120))
            try:
                f.check(control)
            except UnexpectedOutcome as e:
                failures.append(str(e))
        return dict(f.outcomes), failures


def check_one(control: bytes, tls: bool = False) -> str:
    """One case on a fresh broker: how a failure input is reproduced."""
    with (SaslTlsFuzzer if tls else SaslFuzzer)() as f:
        outcome: str = f.check(control)
        return outcome


def atheris_entry(
    reset_every: int = 5000, keep_going: Path | None = None, tls: bool = False
) -> Callable[[bytes], None]:
    """The function to hand to ``atheris.Setup`` (see ``protocol_fuzz.atheris_entry`` for ``keep_going``); ``tls``:
    the cases go over SASL_SSL sockets."""
    from .protocol_fuzz import _save_failure

    state = (SaslTlsFuzzer if tls else SaslFuzzer)(reset_every).__enter__()
    seen: set[str] = set()

    def one_input(data: bytes) -> None:
        if keep_going is None:
            state.check(data)
            return
        try:
            state.check(data)
        except UnexpectedOutcome as e:
            _save_failure(keep_going, data, str(e), seen)

    one_input.fuzzer = state  # type: ignore[attr-defined]
    return one_input
