"""The SASL protocol fuzzer in CI: every seed plan, a thousand seeded mutated cases, the oracle itself, and one
regression test per difference from Kafka the fuzzer found (fuzz/README.md, "Fuzzing SASL").

The target is ``kafkalog.testing.sasl_fuzz``: sequences of SaslHandshake/SaslAuthenticate/bare-token/other frames
on one SASL_PLAINTEXT connection of an in-process broker, each compared with ``KafkaSaslModel`` (what Kafka's
SaslServerAuthenticator answers, and which principal the connection then has). Cases come from a fixed seed.
"""

from __future__ import annotations

import base64
import dataclasses
import struct

import pytest

from kafkalog.broker.network import CLOSE
from kafkalog.broker.protocol import APIS, InvalidRequestError
from kafkalog.testing.fuzz import UnexpectedOutcome
from kafkalog.testing.protocol_fuzz import decode_response
from kafkalog.testing.protocol_messages import encode_frame, valid_request
from kafkalog.testing.sasl_fuzz import TEMPLATES, SaslFuzzer, corpus, run_cases
from kafkalog.testing.sasl_model import ANONYMOUS, scram_proof, wall_ms

pytestmark = pytest.mark.timeout(300)

CI_CASES = 1000
TLS_CASES = 300


@pytest.fixture(scope="module")
def fuzz():
    with SaslFuzzer(reset_every=100_000) as f:
        yield f


def test_every_seed_plan_keeps_the_oracle_and_the_honest_ones_log_in(fuzz) -> None:
    for control in corpus().values():
        fuzz.check(control)  # raises UnexpectedOutcome on any difference from Kafka
    expected = ["User:admin", "User:alice", "User:alice", "User:admin", "User:alice"]  # PLAIN and SCRAM
    expected += ["User:alice", ANONYMOUS, "User:alice", "User:alice"]  # OAUTHBEARER: the 2nd acknowledges an error
    assert [fuzz.run_plan(bytes([0, i])) for i in range(len(TEMPLATES))] == expected
    assert fuzz.run_plan(bytes([1, 3])) == "User:admin"  # re-authenticated after 61 s of a 60 s session
    assert fuzz.run_plan(bytes([1, 8])) == "User:alice"  # the same with a fresh token


def test_a_thousand_seeded_mutated_cases_keep_the_oracle() -> None:
    outcomes, failures = run_cases(CI_CASES, seed=0)
    assert failures == []
    assert sum(outcomes.values()) == CI_CASES
    assert outcomes["authenticated"] > CI_CASES // 20 and outcomes["refused"] > CI_CASES // 2


def test_the_same_cases_over_sasl_ssl_sockets_keep_the_oracle() -> None:
    """Every seed plan and 300 seeded cases written to TLS sockets of a SASL_SSL listener (SaslTlsFuzzer): the
    TLS-wrapped path answers, closes and authenticates exactly as the model says."""
    outcomes, failures = run_cases(TLS_CASES, seed=1, tls=True)
    assert failures == []
    assert sum(outcomes.values()) == TLS_CASES
    assert outcomes["authenticated"] > TLS_CASES // 20 and outcomes["refused"] > TLS_CASES // 2


# ----- the oracle itself ------------------------------------------------------------------------------------


def test_a_password_that_does_not_match_authenticating_is_reported(fuzz, monkeypatch) -> None:
    """The principal check: a broker that let any PLAIN password in would be reported (SECURITY)."""
    import kafkalog.broker.security.sasl as sasl

    monkeypatch.setattr(sasl.hmac, "compare_digest", lambda a, b: True)
    wrong_password = bytes([0, 0, 0, 0, 0, 2, 1])  # no re-auth; handshake v1 as is; user admin, password "wrong"
    plan = ["handshake:PLAIN", "plain"]
    with pytest.raises(UnexpectedOutcome, match="SECURITY: the connection's principal is User:admin"):
        fuzz.run_plan(wrong_password, plan=plan)
    monkeypatch.undo()
    assert fuzz.run_plan(wrong_password, plan=plan) == ANONYMOUS
    assert fuzz.run_plan(b"", plan=plan) == "User:admin"


def test_an_exchange_closed_where_kafka_answers_is_reported(fuzz, monkeypatch) -> None:
    from kafkalog.broker import apis

    def closing(*args):
        raise InvalidRequestError("closed unanswered")

    monkeypatch.setattr(apis, "illegal_sasl_state_response", closing)
    with pytest.raises(UnexpectedOutcome, match="closed unanswered where Kafka's would be answer-close"):
        fuzz.run_plan(b"", plan=["handshake:PLAIN", "other", "plain"])


# ----- regressions: differences from Kafka the fuzzer found -------------------------------------------------


class Conn:
    """One SASL connection of the fuzz broker, driven frame by frame."""

    def __init__(self, fuzz: SaslFuzzer, reauth_ms: int = 0) -> None:
        self.fuzz, self.now = fuzz, 1000.0
        self.conn = fuzz.connection(reauth_ms, lambda: self.now)
        self.correlation = 0

    def send(self, frame: bytes):
        try:
            return self.fuzz.loop.run_until_complete(self.fuzz.router(self.conn, memoryview(frame)))
        except InvalidRequestError:
            return CLOSE

    def request(self, key: int, version: int, **values):
        message = valid_request(APIS[key], version)
        for name, value in values.items():
            setattr(message, name, value)
        self.correlation += 1
        result = self.send(encode_frame(APIS[key], version, message, self.correlation))
        if result is CLOSE:
            return CLOSE
        return decode_response(key, version, b"".join(result[1].parts))

    def handshake(self, mechanism: str, version: int = 1):
        return self.request(17, version, mechanism=mechanism)

    def token(self, token: bytes, version: int = 2):
        return self.request(36, version, auth_bytes=token)

    def scram(self, mechanism: str, user: str, password: str, first_extra: str = "", final_extra: str = ""):
        bare = f"n={user},r=clientnonce{first_extra}"
        server_first = self.token(f"n,,{bare}".encode()).auth_bytes.decode()
        nonce = dict(i.split("=", 1) for i in server_first.split(","))["r"]
        proof = scram_proof(mechanism, password, server_first, f"{bare},{server_first},c=biws,r={nonce}")
        return self.token(f"c=biws,r={nonce}{final_extra},p={base64.b64encode(proof).decode()}".encode())

    @property
    def closes_after_answer(self) -> bool:
        return self.conn.close_after_send


def test_a_request_during_the_exchange_is_answered_illegal_sasl_state_then_closed(fuzz) -> None:
    """Kafka's IllegalSaslStateException: the request's error response, then the close (was: closed unanswered)."""
    c = Conn(fuzz)
    assert c.handshake("PLAIN").error_code == 0
    response = c.request(60, 1)  # DescribeCluster
    assert (response.error_code, c.closes_after_answer) == (34, True)
    assert response.error_message == "Unexpected Kafka request of type DescribeCluster during SASL authentication."
    c = Conn(fuzz)
    c.handshake("SCRAM-SHA-256")
    assert (c.handshake("SCRAM-SHA-256").error_code, c.closes_after_answer) == (34, True)  # a second handshake


def test_api_versions_twice_before_the_handshake_closes_the_connection(fuzz) -> None:
    """Kafka takes one ApiVersions before SaslHandshake (IllegalStateException otherwise; was: answered)."""
    c = Conn(fuzz)
    assert c.request(18, 3).error_code == 0
    assert c.request(18, 3) is CLOSE
    c = Conn(fuzz)  # an unsupported version is answered UNSUPPORTED_VERSION and does not count
    c.correlation += 1
    answer = c.send(struct.pack(">hhih", 18, 9, 1, 0))
    assert decode_response(18, 0, b"".join(answer[1].parts)).error_code == 35
    assert c.request(18, 3).error_code == 0 and c.handshake("PLAIN").error_code == 0


def test_a_frame_over_sasl_server_max_receive_size_before_login_closes_the_connection(fuzz) -> None:
    c = Conn(fuzz)
    c.handshake("PLAIN")
    assert c.token(b"\x00admin\x00admin-secret" + b"x" * 524288) is CLOSE
    assert c.conn.principal == ANONYMOUS
    c = Conn(fuzz)
    c.handshake("PLAIN", version=0)
    assert c.send(b"\x00admin\x00" + b"x" * 524289) is CLOSE


def test_plain_splits_the_token_as_kafka_does(fuzz) -> None:
    """PlainSaslServer reads three fields, each up to the next NUL: a fourth is ignored (was: refused)."""
    c = Conn(fuzz)
    c.handshake("PLAIN")
    assert c.token(b"\x00bob\x00bob-secret\x00ignored").error_code == 0
    assert c.conn.principal == "User:bob"
    for token in (b"\x00bob\x00bob-secre\x00t", b"bob\x00bob-secret", b"\x00bob\x00\x00bob-secret", b"\x00bob"):
        c = Conn(fuzz)
        c.handshake("PLAIN")
        assert (c.token(token).error_code, c.closes_after_answer, c.conn.principal) == (58, True, ANONYMOUS)


@pytest.mark.parametrize(
    "first",
    ["y,,n=alice,r=abc", "p=tls-unique,,n=alice,r=abc", "n,,n=alice,r=a,b", "n,,r=abc,n=alice", "n,,n=al=ice,r=x"],
)
def test_scram_client_first_messages_kafka_refuses_are_refused(fuzz, first) -> None:
    """Kafka's ClientFirstMessage grammar: gs2-header "n" only, n= before r=, a printable nonce without ',', '='
    in a name only as =2C/=3D (was: accepted, or a different message)."""
    c = Conn(fuzz)
    c.handshake("SCRAM-SHA-256")
    response = c.token(first.encode())
    assert (response.error_code, c.closes_after_answer) == (58, True)
    assert response.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    )


def test_scram_reserved_mext_and_extensions_are_taken_as_kafka_takes_them(fuzz) -> None:
    """Kafka accepts "m=..." and extensions in client-first (kept in the AuthMessage) and extensions in
    client-final (dropped from it): a client signing what Kafka signs logs in (was: refused)."""
    c = Conn(fuzz)
    c.handshake("SCRAM-SHA-512")
    assert c.scram("SCRAM-SHA-512", "alice", "alice-secret", ",ext=1", ",x=y").error_code == 0
    assert c.conn.principal == "User:alice"
    c = Conn(fuzz)
    c.handshake("SCRAM-SHA-256")
    assert c.scram("SCRAM-SHA-256", "c=2Ca=3Dr", "comma-secret").error_code == 0  # saslname escapes
    assert c.conn.principal == "User:c,a=r"
    c = Conn(fuzz)
    c.handshake("SCRAM-SHA-256")
    assert (c.scram("SCRAM-SHA-256", "alice", "wrong").error_code, c.conn.principal) == (58, ANONYMOUS)


def _logged_in(fuzz, reauth_ms: int = 60_000) -> Conn:
    c = Conn(fuzz, reauth_ms)
    c.handshake("PLAIN")
    assert c.token(b"\x00admin\x00admin-secret").session_lifetime_ms == reauth_ms
    return c


def test_reauthentication_with_another_enabled_mechanism_fails_on_the_next_frame(fuzz) -> None:
    """Kafka answers the handshake NONE, then closes on the next frame (REAUTH_BAD_MECHANISM); the principal
    never changes (was: UNSUPPORTED_SASL_MECHANISM and the connection kept)."""
    c = _logged_in(fuzz)
    response = c.handshake("SCRAM-SHA-256")
    assert (response.error_code, c.closes_after_answer) == (0, False)
    assert c.token(b"n,,n=alice,r=x") is CLOSE
    assert c.conn.principal == "User:admin"
    c = _logged_in(fuzz)  # a mechanism the listener does not enable: answered, then closed
    assert (c.handshake("GSSAPI").error_code, c.closes_after_answer) == (33, True)


def test_reauthentication_at_most_once_a_second_and_after_expiry_only_by_handshake(fuzz) -> None:
    """KafkaChannel: a second re-authentication within a second is answered ILLEGAL_SASL_STATE by KafkaApis; a
    session past its end closes on any request but a SaslHandshake that may re-authenticate."""
    c = _logged_in(fuzz)
    assert c.handshake("PLAIN").error_code == 0
    assert c.token(b"\x00admin\x00admin-secret").error_code == 0
    response = c.handshake("PLAIN")
    assert (response.error_code, response.mechanisms, c.closes_after_answer) == (34, [], False)
    c.now += 61
    assert c.token(b"\x00admin\x00admin-secret") is CLOSE  # expired: SaslAuthenticate closes (was: answered 34)
    c = _logged_in(fuzz)
    c.now += 61
    assert c.handshake("PLAIN").error_code == 0  # a re-authentication begins after the end, as Kafka's
    response = c.token(b"\x00bob\x00bob-secret")
    assert (response.error_code, c.closes_after_answer, c.conn.principal) == (58, True, "User:admin")
    assert response.error_message == "Cannot change principals during re-authentication from User.admin: User.bob"
    c = _logged_in(fuzz)
    c.handshake("PLAIN")
    response = c.token(b"\x00admin\x00")
    assert response.error_message == (
        "Authentication failed during re-authentication due to invalid credentials with SASL mechanism PLAIN"
    )


def test_sasl_requests_after_login_get_kafka_apis_answers(fuzz) -> None:
    c = _logged_in(fuzz, reauth_ms=0)
    response = c.handshake("PLAIN")  # no session end: no re-authentication
    assert (response.error_code, response.mechanisms, c.closes_after_answer) == (34, [], False)
    response = c.token(b"\x00admin\x00admin-secret")
    assert (response.error_code, response.error_message) == (
        34,
        "SaslAuthenticate request received after successful authentication",
    )
    assert c.request(3, 12).brokers  # still served


# ----- OAUTHBEARER (Kafka's unsecured validator): the oracle, and the differences the fuzzer found -------------

NOW_MS = wall_ms(1000.0)  # the wall clock of a Conn (its connection clock stands at 1000 s)


def _part(json_text: str | bytes) -> str:
    """A JWS part: base64url without padding (RFC 7515), written here from the bytes."""
    data = json_text.encode() if isinstance(json_text, str) else json_text
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _token(claims: str, header: str = '{"alg":"none"}') -> str:
    return f"{_part(header)}.{_part(claims)}."


def _good(sub: str = "alice", exp_ms: int = NOW_MS + 3_600_000) -> str:
    return f'{{"sub":"{sub}","exp":{exp_ms / 1000},"iat":{NOW_MS / 1000}}}'


def _first(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def _oauth(fuzz, token: str, authzid: str = "", reauth_ms: int = 0):
    c = Conn(fuzz, reauth_ms)
    assert c.handshake("OAUTHBEARER").error_code == 0
    return c, c.token(_first(token, authzid))


INVALID = b'{"status":"invalid_token"}'


def test_an_invalid_token_is_challenged_then_refused_and_a_good_one_logs_in(fuzz) -> None:
    c, response = _oauth(fuzz, _token(_good(exp_ms=NOW_MS - 1)))  # expired a millisecond ago
    assert (response.error_code, response.auth_bytes, c.closes_after_answer) == (0, INVALID, False)
    response = c.token(b"\x01")
    assert (response.error_code, response.error_message, c.closes_after_answer) == (58, INVALID.decode(), True)
    assert c.conn.principal == ANONYMOUS
    c, response = _oauth(fuzz, _token(_good()), reauth_ms=60_000)
    assert (response.error_code, response.auth_bytes, c.conn.principal) == (0, b"", "User:alice")
    assert response.session_lifetime_ms == 60_000  # connections.max.reauth.ms is shorter than the token's hour


@pytest.mark.parametrize("token", ["a~b.c.", "a+b.c/d.", "e30.e30.e30="])
def test_the_token_grammar_is_kafka_3_8s(fuzz, token) -> None:
    """KAFKA-15878: '~', '+', '/' and final '=' are token characters, so such a token reaches the validator and is
    challenged (was: refused as a malformed first message, with the standard failure message)."""
    _, response = _oauth(fuzz, token)
    assert (response.error_code, response.auth_bytes) == (0, INVALID)


def test_jws_parts_are_base64url_only(fuzz) -> None:
    """Base64.getUrlDecoder (KAFKA-17089): '+' and '/' are not in its alphabet. (Python's urlsafe_b64decode
    read them as '-' and '_': a token Kafka refuses logged in.)"""
    claims = _part('{"sub":"alice","exp":' + str(NOW_MS // 1000 + 3600) + ',"x":"??>"}')
    assert "_" in claims  # so the standard alphabet spells it with '/'
    header = _part('{"alg":"none"}')
    _, response = _oauth(fuzz, f"{header}.{claims}.")
    assert response.error_code == 0 and response.auth_bytes == b""
    c, response = _oauth(fuzz, f"{header}.{claims.replace('_', '/')}.")
    assert (response.auth_bytes, c.conn.principal) == (INVALID, ANONYMOUS)


def test_json_is_read_as_jacksons_read_tree(fuzz) -> None:
    """Jackson reads the first JSON value and never what follows (was: refused), refuses NaN/Infinity (was: a
    ValueError out of the broker) and numbers over 1,000 characters (was: taken, then OverflowError), and deep
    nesting is refused, not a RecursionError."""
    c, response = _oauth(fuzz, _token(_good() + "}garbage", header='{"alg":"none"}}x'))
    assert (response.auth_bytes, c.conn.principal) == (b"", "User:alice")
    # bytes after the value are never decoded either: UTF-16 claims and a stray byte (was: malformed)
    header, claims = _part('{"alg":"none"}'), _part(_good().encode("utf-16-le") + b"1")
    c, response = _oauth(fuzz, f"{header}.{claims}.")
    assert (response.auth_bytes, c.conn.principal) == (b"", "User:alice")
    c, response = _oauth(fuzz, _token(_good()[:-1] + ',"n":' + "7" * 1001 + "}"))
    assert (response.auth_bytes, c.conn.principal) == (INVALID, ANONYMOUS)
    for exp in ("NaN", "Infinity", "1" * 1500):
        c, response = _oauth(fuzz, _token(f'{{"sub":"alice","exp":{exp}}}'))
        assert (response.auth_bytes, c.conn.principal) == (INVALID, ANONYMOUS)
    c, response = _oauth(fuzz, _token(_good()[:-1] + ',"x":' + "[" * 3000 + "]" * 3000 + "}"))
    assert (response.auth_bytes, c.conn.principal) == (INVALID, ANONYMOUS)


def test_an_expiry_beyond_a_java_long_ends_the_session_at_long_max(fuzz) -> None:
    """Math.round(exp * 1000) clamps to Long.MAX_VALUE (1e400 is an infinite double): the session lifetime is
    Long.MAX_VALUE - now (was: OverflowError, or a lifetime the int64 field cannot hold)."""
    for exp in ("1e400", str(10**30), "9300000000000000"):
        c, response = _oauth(fuzz, _token(f'{{"sub":"alice","exp":{exp}}}'))
        assert (response.error_code, c.conn.principal) == (0, "User:alice")
        assert response.session_lifetime_ms == 2**63 - 1 - NOW_MS


def test_blank_is_javas_trim(fuzz) -> None:
    """String.trim() strips every character up to U+0020 and nothing else: a principal "\\u0001" is blank (was:
    User:\\x01 logged in), "\\u00a0x" is not (was: refused)."""
    c, response = _oauth(fuzz, _token('{"sub":"\\u0001","exp":' + str(NOW_MS // 1000 + 60) + "}"))
    assert (response.auth_bytes, c.conn.principal) == (INVALID, ANONYMOUS)
    c, response = _oauth(fuzz, _token('{"sub":"\\u00a0x","exp":' + str(NOW_MS // 1000 + 60) + "}"))
    assert (response.auth_bytes, c.conn.principal) == (b"", "User:\xa0x")


def test_a_lone_surrogate_principal_is_sent_as_java_sends_it(fuzz) -> None:
    """A principal from the JSON escape "\\ud800" named in the authzid failure: '?' on the wire, as Java's
    getBytes(UTF_8) writes it (was: UnicodeEncodeError encoding the response)."""
    c, response = _oauth(fuzz, _token(_good(sub="\\ud800")), authzid="alice")
    assert (response.error_code, c.closes_after_answer) == (58, True)
    assert response.error_message == (
        "Authentication failed: Client requested an authorization id (alice) that is different from the token's "
        "principal name (?)"
    )
    c, response = _oauth(fuzz, _token(_good(sub="\\ud800")), reauth_ms=60_000)  # logs in as that principal
    assert (response.error_code, c.conn.principal) == (0, "User:\ud800")
    c.now += 61
    assert c.handshake("OAUTHBEARER").error_code == 0
    response = c.token(_first(_token(_good())))  # (the long run found the model expecting the lone surrogate)
    assert response.error_message == "Cannot change principals during re-authentication from User.?: User.alice"


def test_a_login_on_a_token_the_client_made_invalid_is_reported_even_if_the_model_agrees(fuzz, monkeypatch) -> None:
    """The harness's own check, independent of the model: a broker (and a model) taking expired tokens are caught
    by what the client knows of its token; with only the broker wrong, the principal check fires first."""
    import kafkalog.broker.security.oauthbearer as oauthbearer
    import kafkalog.testing.sasl_model as sasl_model

    validate, verdict = oauthbearer.validate_unsecured_token, sasl_model.unsecured_verdict

    def forgiving(token, options, now_ms):  # ten years of clock skew: any expiry passes
        return validate(token, dataclasses.replace(options, allowable_clock_skew_ms=10**13), now_ms)

    monkeypatch.setattr(oauthbearer, "validate_unsecured_token", forgiving)
    with pytest.raises(UnexpectedOutcome, match=r"SECURITY: the connection's principal is User:alice"):
        fuzz.run_plan(bytes([0, 6]))  # the template with an expired token
    monkeypatch.setattr(
        sasl_model, "unsecured_verdict", lambda t, o, now: verdict(t, dataclasses.replace(o, skew_ms=10**13), now)
    )
    with pytest.raises(UnexpectedOutcome, match=r"SECURITY: a login completed with an invalid OAUTHBEARER token \(exp"):
        fuzz.run_plan(bytes([0, 6]))
    monkeypatch.undo()
    assert fuzz.run_plan(bytes([0, 6])) == ANONYMOUS


def test_the_brokers_json_and_base64url_readers_agree_with_the_models() -> None:
    """A differential check below the protocol: 20,000 byte-mutated JSON texts (BOMs, UTF-16, NaN, bad UTF-8,
    trailing bytes, scalars) read by the broker's Jackson-like reader and the model's, and 20,000 strings by both
    base64url decoders. (It found the broker failing UTF-16 claims followed by an odd byte.)"""
    import random

    from kafkalog.broker.security import oauthbearer as broker
    from kafkalog.testing import sasl_model as model

    def broker_members(raw: bytes):
        try:
            value = broker.jackson_read_tree(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        return {k: broker._convert(v) for k, v in value.items()} if isinstance(value, dict) else {}

    rng = random.Random(7)
    seeds = [
        b'{"alg":"none"}',
        b'{"sub":"a","exp":1e400,"scope":[1e10,true,null,{}],"n":-0.0,"m":123456789012345678901234567890}',
        b' {"a":[[1]]} x',
        b'\xef\xbb\xbf{"a":1}',
        '{"a":"\u00e9"}'.encode("utf-16-be"),
        '{"a":1}'.encode("utf-16-le"),
        b'{"a":NaN}',
        b"[1,2]",
        b'{"a":1}\xff',
        b"  ",
    ]
    for _ in range(20_000):
        raw = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(4)):
            at = rng.randrange(len(raw) + 1)
            if rng.randrange(2):
                raw[at:at] = bytes([rng.choice(b'{}[]",:09eE.-+ \\nul\x00\xff\xc3')])
            else:
                del raw[at : at + 1]
        assert repr(broker_members(bytes(raw))) == repr(model.jackson_members(bytes(raw))), bytes(raw)
    for _ in range(20_000):
        text = "".join(rng.choice("AZaz09-_+/=~") for _ in range(rng.randrange(9)))
        try:
            decoded: bytes | None = broker.java_base64url_decode(text)
        except ValueError:
            decoded = None
        assert decoded == model.java_url_decode(text), text
