"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677): the server side of the exchange and the credential store.

A credential is what Kafka stores (ScramCredential): a salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")),
ServerKey = HMAC(SaltedPassword, "Server Key") and the iteration count. The password itself, and SaltedPassword
(which would let anyone log in), are never kept: StoredKey only verifies a client's proof, ServerKey only signs
the server's answer. The store is one JSON file in the first log dir (``scram-credentials.json``), each value in
Kafka's own text form ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``; it is replaced atomically
(temporary file, fsync, rename), so a crash leaves the old or the new file, never half of one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from ..file_store import JsonFileStore

STORE_FILE = "scram-credentials.json"
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # AlterUserScramCredentials' ScramMechanism bytes
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Kafka's AlterUserScramCredentials limit


class ScramError(Exception):
    """A SCRAM exchange that cannot succeed; the message is what the client is told."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(item.split("=", 1) for item in text.split(","))
        return cls(
            base64.b64decode(fields["salt"]),
            base64.b64decode(fields["stored_key"]),
            base64.b64decode(fields["server_key"]),
            int(fields["iterations"]),
        )


def _hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode("utf-8"), salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    name = MECHANISMS[mechanism]
    client_key = _hmac(name, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), _hmac(name, salted, b"Server Key"), iterations)


def new_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
    salt = secrets.token_bytes(32)
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def _checked_users(users: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The stored users (user -> mechanism -> credential text), each credential checked to parse."""
    for mechanisms in users.values():
        for text in mechanisms.values():
            ScramCredential.from_text(text)
    return users


class CredentialStore(JsonFileStore):
    """The SCRAM users of this node. Invariant: the file on disk always equals ``_users`` after a change returns."""

    def __init__(self, log_dir: str | Path) -> None:
        super().__init__(log_dir, STORE_FILE, "SCRAM credentials")
        self._users: dict[str, dict[str, str]] = (
            self._load(_checked_users, (ValueError, TypeError, KeyError, AttributeError)) or {}
        )

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self._users.get(user, {}).get(mechanism)
        return None if text is None else ScramCredential.from_text(text)

    def users(self) -> dict[str, dict[str, int]]:
        """user -> mechanism -> iterations (what DescribeUserScramCredentials tells)."""
        return {
            user: {m: ScramCredential.from_text(t).iterations for m, t in mechs.items()}
            for user, mechs in sorted(self._users.items())
        }

    def apply(self, upserts: dict[tuple[str, str], ScramCredential], deletes: set[tuple[str, str]]) -> None:
        with self._lock:
            users = {u: dict(m) for u, m in self._users.items()}
            for user, mechanism in deletes:
                users.get(user, {}).pop(mechanism, None)
                if user in users and not users[user]:
                    del users[user]
            for (user, mechanism), credential in upserts.items():
                users.setdefault(user, {})[mechanism] = credential.to_text()
            self._write(users)
            self._users = users

    def _write(self, users: dict[str, dict[str, str]]) -> None:
        self._save(users, mode=0o600, indent=1, sort_keys=True)


# Kafka's SCRAM message grammar (ScramMessages): Java's character-class intersections written out. A name is
# ASCII without ',' or '=' except the escapes =2C and =3D; a nonce is printable ASCII without ','.
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_B64 = "[a-zA-Z0-9/+]"
_BASE64 = f"(?:{_B64}{{4}})*(?:{_B64}{{3}}=|{_B64}{{2}}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?P<extensions>{_EXTENSIONS})"
)
_CLIENT_FINAL = re.compile(rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_BASE64})")


def _username(sasl_name: str) -> str:
    """RFC 5802 saslname -> username as Kafka's ScramFormatter.username: '=2C' is ',', '=3D' is '=', and any other
    '=' fails the exchange."""
    name = sasl_name.replace("=2C", ",")
    if "=" in name.replace("=3D", ""):
        raise ScramError(f"Invalid username: {sasl_name}")
    return name.replace("=3D", "=")


def _extensions(text: str) -> str:
    """The client-first extensions as Kafka puts them back into client-first-message-bare: key=value pairs in the
    order of a map (a later duplicate key replaces the earlier value in place)."""
    pairs: dict[str, str] = {}
    for item in text[1:].split(",") if text else ():
        key, _, value = item.partition("=")
        pairs[key] = value
    return ",".join(f"{k}={v}" for k, v in pairs.items())


class ScramServer:
    """One SCRAM exchange (client-first, server-first, client-final, server-final), as Kafka's ScramSaslServer.

    ``evaluate`` raises ScramError with Kafka's message when the exchange fails; ``complete`` and ``user`` tell
    the outcome.
    """

    def __init__(self, mechanism: str, store: CredentialStore) -> None:
        self.mechanism = mechanism
        self.hash = MECHANISMS[mechanism]
        self.store = store
        self.state = "client-first"
        self.user: str | None = None
        self.complete = False
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self.state == "client-first":
                return self._client_first(token.decode("utf-8"))
            if self.state == "client-final":
                return self._client_final(token.decode("utf-8"))
        except UnicodeDecodeError:
            self.state = "failed"
            raise ScramError("Invalid SCRAM message: not UTF-8") from None
        except ScramError:
            self.state = "failed"
            raise
        raise ScramError(f"Unexpected challenge in Sasl server state {self.state.upper()}")

    def _client_first(self, message: str) -> bytes:
        # Kafka accepts only gs2-header "n" (no channel binding) with an optional authzid; extensions are kept
        # in the AuthMessage but otherwise ignored.
        match = _CLIENT_FIRST.fullmatch(message)
        if match is None:
            raise ScramError(f"Invalid SCRAM client first message format: {message}")
        try:
            user = _username(match["saslname"])
        except ScramError:
            raise ScramError("Authentication failed: Credentials could not be obtained") from None
        credential = self.store.get(user, self.mechanism)
        if credential is None:
            raise ScramError("Authentication failed: Invalid user credentials")
        authzid = match["authzid"] or ""
        if authzid and authzid != user:
            raise ScramError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if credential.iterations < MIN_ITERATIONS:
            raise ScramError(
                f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} for {self.mechanism}"
            )
        self.user = user
        self._credential = credential
        extensions = _extensions(match["extensions"])
        self._client_first_bare = f"n={match['saslname']},r={match['nonce']}" + (f",{extensions}" if extensions else "")
        self._nonce = match["nonce"] + secrets.token_urlsafe(24)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self.state = "client-final"
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        match = _CLIENT_FINAL.fullmatch(message)
        if match is None:
            raise ScramError(f"Invalid SCRAM client final message format: {message}")
        if match["nonce"] != self._nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        assert self._credential is not None
        # As Kafka: the AuthMessage is rebuilt from the parsed fields (channel binding re-encoded, extensions of
        # the final message dropped), so it is exactly what Kafka's clients sign.
        channel = base64.b64encode(base64.b64decode(match["channel"])).decode()
        without_proof = f"c={channel},r={match['nonce']}"
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self.hash, self._credential.stored_key, auth_message)
        proof = base64.b64decode(match["proof"])
        if len(proof) != len(client_signature):
            raise ScramError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), self._credential.stored_key):
            raise ScramError("Invalid client credentials")
        server_signature = _hmac(self.hash, self._credential.server_key, auth_message)
        self._credential = None
        self.state = "complete"
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)
