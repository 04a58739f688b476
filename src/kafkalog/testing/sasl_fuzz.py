"""The SASL protocol fuzz target: sequences of frames on one SASL_PLAINTEXT connection through a real broker.

``SaslFuzzer`` runs a ``KafkaServer`` in process with a SASL_PLAINTEXT listener enabling PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 (PLAIN users in the listener's JAAS entry, SCRAM users in the credential store, one of them named
with ',' and '=' to exercise saslname escapes), ``connection.failed.authentication.delay.ms=0``. A case is a plan
of actions on ONE connection (``plan_for``): ApiVersions, SaslHandshake v0/v1 (mechanism names mutated),
mechanism tokens as SaslAuthenticate v0-v2 or, after a v0 handshake, as bare frames (PLAIN's authzid/user/password,
SCRAM client-first and client-final with mutated gs2 headers, names, nonces, extensions, channel bindings and
proofs), other requests before and after login, time passing (KIP-368 re-authentication and session expiry with
``connections.max.reauth.ms`` of 0, 1 s or 60 s), oversized frames; the plan's order is mutated too, and any
frame may be mutated byte-wise. Each frame goes through the broker's ``RequestRouter`` as the socket server
hands it over.

The oracle (``KafkaSaslModel`` predicts every frame as Kafka would handle it):

- the broker does what Kafka does: answers (header echoing the correlation id, body decoding to its last byte,
  the predicted error code and message, session lifetime, SCRAM server messages that extend the client nonce and
  sign the exchange), answers then closes (a failed login), or closes unanswered;
- after every frame the connection's principal is the model's: a login the password did not make never
  authenticates, a re-authentication never changes the principal, a failed one never leaves one behind;
- no exception escapes, no error is logged, no UNKNOWN_SERVER_ERROR, no frame holds the loop for long;
- after every case a fresh connection still logs in (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 in turn) and gets
  Metadata.

The atheris harness is ``fuzz/fuzz_protocol.py --sasl``; the CI form ``tests/test_protocol_fuzz_sasl.py``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import struct
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..broker.network import CLOSE, Connection
from ..broker.protocol import APIS, InvalidRequestError
from ..broker.security.scram import new_credential
from ..broker.server import KafkaServer
from .fuzz import UnexpectedOutcome, mutate
from .protocol_fuzz import FuzzBroker, _response_bytes, decode_response, judge
from .protocol_messages import Choices, encode_frame, mutate_message, seed_message, try_encode
from .sasl_model import ANONYMOUS, Expect, KafkaSaslModel, Users, scram_proof

HANG_SECONDS = 10.0  # one frame holding the event loop this long is a hang
PLAIN_USERS = {"admin": "admin-secret", "bob": "bob-secret"}
SCRAM_USERS = {
    "alice": {"SCRAM-SHA-256": "alice-secret", "SCRAM-SHA-512": "alice-secret"},
    "bob": {"SCRAM-SHA-512": "bob-scram"},
    "c,a=r": {"SCRAM-SHA-256": "comma-secret"},
}
USERS = Users(PLAIN_USERS, SCRAM_USERS)
ENABLED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{user}="{password}"' for user, password in PLAIN_USERS.items())
    + ";"
)
BROKER_CONFIG = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": ",".join(ENABLED),
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "connection.failed.authentication.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "log.segment.bytes": "1048576",
}
REAUTH_MS = (0, 60_000, 1_000)  # connections.max.reauth.ms of a case (0: no re-authentication)
FOLLOW_UP_LOGINS = (b"\x00", b"\x01", b"\x02")  # plans of honest PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 logins
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
)
POOL = ("versions", "handshake", "plain", "scram-first", "scram-final", "token", "other", "tick", "huge")


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

    def __init__(self, choices: Choices) -> None:
        self.c = choices
        self.correlation = 0
        self.mechanism = "PLAIN"
        self.raw = False  # the client's belief: the last handshake was v0
        self.last_token = b""
        self.scram: dict[str, Any] = {}

    def _pick(self, options: Any) -> Any:
        """The first (honest) option two times in three, else any: so that most decisions of a case keep the
        exchange going and the mutations that matter reach its later steps."""
        return options[0] if self.c.below(3) != 2 else self.c.pick(options)

    def frame(self, action: str) -> bytes | None:
        """The frame of ``action`` (None for "tick"), maybe byte-mutated."""
        name, _, argument = action.partition(":")
        render: Callable[[str], bytes] = getattr(self, "_" + name.replace("-", "_"))
        frame = render(argument)
        if self.c.below(10) == 9:
            frame = mutate(frame, bytes(self.c.below(256) for _ in range(4)))
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


# ------------------------------------------------------------------------------------------------ the broker


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
        """A fresh SASL_PLAINTEXT connection (its socket ends are never used)."""
        self._index += 1
        stream = SimpleNamespace(get_extra_info=lambda name: None)
        conn = Connection(stream, self._index, self.endpoint)  # type: ignore[arg-type]
        conn.sasl = self.factory(self.endpoint)
        conn.sasl.reauth_ms, conn.sasl.clock = reauth_ms, clock
        return conn

    # ----- one case --------------------------------------------------------------------------------------------
    def check(self, control: bytes) -> str:
        """Run one case (``control`` drives ``plan_for`` and ``Client``); its outcome: "authenticated" or
        "refused"; UnexpectedOutcome when the broker breaks the oracle."""
        if self.cases and self.cases % self.reset_every == 0:
            self.reset()
        self.cases += 1

        def run() -> str:
            principal = self.run_plan(control)
            self.run_plan(FOLLOW_UP_LOGINS[self.cases % 3], expect_login=True)
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
        conn = self.connection(reauth_ms, clock)
        client = Client(choices)
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
            steps.append(f"{action} {frame[:80]!r}")
            expect = model.step(frame)
            result = self._run(conn, frame)
            if conn.principal != model.principal:  # checked first: the property that matters most
                raise UnexpectedOutcome(
                    f"SECURITY: the connection's principal is {conn.principal}, Kafka's would be {model.principal}"
                    f" after {steps}"
                )
            client.last_token = self._compare(frame, expect, result, conn, steps)
            if model.state == "closed":
                break
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


def run_cases(cases: int, seed: int = 0, reset_every: int = 5000) -> tuple[dict[str, int], list[str]]:
    """``cases`` inputs (every seed first, then seeded random controls): (outcome counts, failures)."""
    import random

    rng = random.Random(f"sasl-{seed}")
    seeds = seed_controls()
    failures: list[str] = []
    with SaslFuzzer(reset_every) as f:
        for n in range(cases):
            control = seeds[n] if n < len(seeds) else rng.randbytes(rng.randrange(1, 120))
            try:
                f.check(control)
            except UnexpectedOutcome as e:
                failures.append(str(e))
        return dict(f.outcomes), failures


def check_one(control: bytes) -> str:
    """One case on a fresh broker: how a failure input is reproduced."""
    with SaslFuzzer() as f:
        outcome: str = f.check(control)
        return outcome


def atheris_entry(reset_every: int = 5000, keep_going: Path | None = None) -> Callable[[bytes], None]:
    """The function to hand to ``atheris.Setup`` (see ``protocol_fuzz.atheris_entry`` for ``keep_going``)."""
    from .protocol_fuzz import _save_failure

    state = SaslFuzzer(reset_every).__enter__()
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
