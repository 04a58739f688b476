"""The SASL APIs (SaslHandshake 17, SaslAuthenticate 36) and the SCRAM credential APIs (50, 51).

SaslHandshake and SaslAuthenticate act on the connection's :class:`~..security.sasl.SaslAuthenticator`, so the
router calls them with the connection. A failed login is answered after ``connection.failed.authentication.
delay.ms`` (Kafka delays the answer to slow down password guessing) and the connection is then closed.
"""

from __future__ import annotations

import asyncio
import logging

from ..network import CLOSE, Connection
from ..protocol import (
    NONE,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
    Response,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
)
from ..security.acl import cluster_allowed
from ..security.sasl import ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, IllegalSaslState, SaslFailure
from ..security.scram import MAX_ITERATIONS, MECHANISM_IDS, MIN_ITERATIONS, ScramCredential, credential_from_salted

log = logging.getLogger("org.apache.kafka.common.network.Selector")

UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


async def handle_handshake(broker, conn: Connection, header, request) -> Response | object:
    version = header.api_version
    sasl = conn.sasl
    if sasl is None:  # not a SASL listener: Kafka's KafkaApis answers ILLEGAL_SASL_STATE
        return Response.of(SaslHandshakeResponse[version](error_code=ILLEGAL_SASL_STATE, mechanisms=[]), version)
    try:
        code = sasl.handshake(version, request.mechanism)
    except IllegalSaslState as e:
        log.info("Closing connection %s: %s", conn.id, e)
        return CLOSE
    if code == UNSUPPORTED_SASL_MECHANISM:
        log.info(
            "Failed authentication with %s (channelId=%s) (Unsupported SASL mechanism %s)",
            conn.client_host,
            conn.id,
            request.mechanism,
        )
        conn.close_after_send = True
    # An authenticated connection that may not re-authenticate now gets KafkaApis' answer: no mechanisms.
    mechanisms = [] if code == ILLEGAL_SASL_STATE else list(sasl.settings.mechanisms)
    return Response.of(SaslHandshakeResponse[version](error_code=code, mechanisms=mechanisms), version)


def _authenticate_response(version: int, code: int, message: str | None, token: bytes, lifetime: int) -> Response:
    fields = {"error_code": code, "error_message": message, "auth_bytes": token}
    if version >= 1:
        fields["session_lifetime_ms"] = lifetime
    return Response.of(SaslAuthenticateResponse[version](**fields), version)


async def sasl_token(broker, conn: Connection, token: bytes) -> tuple[int, str | None, bytes]:
    """Evaluate one token: (error code, message, answer). Delays and logs a failure, and marks the connection
    to close once answered."""
    sasl = conn.sasl
    assert sasl is not None
    try:
        answer = sasl.authenticate(token)
    except SaslFailure as e:
        log.info("Failed authentication with %s (channelId=%s) (%s)", conn.client_host, conn.id, e)
        conn.close_after_send = True
        await asyncio.sleep(broker.config.failed_authentication_delay_ms / 1000.0)
        return SASL_AUTHENTICATION_FAILED, e.client_message, b""
    if sasl.authenticated:
        conn.principal = sasl.principal or conn.principal
        log.debug("Authenticated %s on %s as %s (%s)", conn.id, conn.endpoint.name, conn.principal, sasl.mechanism)
    return NONE, None, answer


async def handle_authenticate(broker, conn: Connection, header, request) -> Response:
    version = header.api_version
    if conn.sasl is None or conn.sasl.state not in ("authenticate", "reauthenticate"):
        # Kafka's KafkaApis: a connection that is not in a SASL exchange (plaintext, or authenticated)
        message = "SaslAuthenticate request received after successful authentication"
        return _authenticate_response(version, ILLEGAL_SASL_STATE, message, b"", 0)
    code, message, answer = await sasl_token(broker, conn, bytes(request.auth_bytes))
    return _authenticate_response(version, code, message, answer, conn.sasl.session_lifetime_ms)


async def handle_describe_scram(broker, header, request) -> Response:
    if not cluster_allowed(broker, "DESCRIBE"):
        R = DescribeUserScramCredentialsResponse
        response = R(
            version=0, throttle_time_ms=0, error_code=31, error_message="Cluster authorization failed.", results=[]
        )
        return Response.of(response, 0)
    store = broker.credential_store
    known = store.users()
    names = [u.name for u in request.users] if request.users else list(known)
    results = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            results.append(
                (
                    name,
                    DUPLICATE_RESOURCE,
                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                    [],
                )
            )
            continue
        seen.add(name)
        if name not in known:
            results.append((name, RESOURCE_NOT_FOUND, f"Attempt to describe nonexistent user {name}", []))
            continue
        ids = {v: k for k, v in MECHANISM_IDS.items()}
        infos = [(ids[m], i) for m, i in sorted(known[name].items())]
        results.append((name, NONE, None, infos))
    R = DescribeUserScramCredentialsResponse[0]
    response = R(
        throttle_time_ms=0,
        error_code=NONE,
        error_message=None,
        results=[
            R.DescribeUserScramCredentialsResult(
                user=name,
                error_code=code,
                error_message=message,
                credential_infos=[
                    R.DescribeUserScramCredentialsResult.CredentialInfo(mechanism=m, iterations=i) for m, i in infos
                ],
            )
            for name, code, message, infos in results
        ],
    )
    return Response.of(response, 0)


def _check_upsert(u) -> tuple[int, str] | None:
    mechanism = MECHANISM_IDS.get(u.mechanism)
    if mechanism is None:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if not u.name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if u.iterations < MIN_ITERATIONS:
        return (
            UNACCEPTABLE_CREDENTIAL,
            f"Iterations {u.iterations} is less than the minimum {MIN_ITERATIONS} for {mechanism}",
        )
    if u.iterations > MAX_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not u.salt or not u.salted_password:
        return UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


async def handle_alter_scram(broker, header, request) -> Response:
    """AlterUserScramCredentials: the client sends SaltedPassword; the broker keeps StoredKey and ServerKey.

    As Kafka's: a user named twice in one request fails as a whole (DUPLICATE_RESOURCE), each user's changes
    apply together or not at all, deleting a credential that does not exist is RESOURCE_NOT_FOUND.
    """
    store = broker.credential_store
    errors: dict[str, tuple[int, str]] = {}
    if not cluster_allowed(broker, "ALTER"):  # Kafka: ALTER on the cluster, else every user fails
        for item in list(request.deletions) + list(request.upsertions):
            errors[item.name] = (31, "Cluster authorization failed.")
    order: list[str] = []
    touched: dict[str, set[str]] = {}
    for item in list(request.deletions) + list(request.upsertions):
        if item.name not in touched:
            order.append(item.name)
            touched[item.name] = set()
        mechanism = MECHANISM_IDS.get(item.mechanism, str(item.mechanism))
        if mechanism in touched[item.name]:
            errors[item.name] = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        touched[item.name].add(mechanism)
    upserts: dict[tuple[str, str], ScramCredential] = {}
    deletes: set[tuple[str, str]] = set()
    for d in request.deletions:
        if d.name in errors:
            continue
        mechanism = MECHANISM_IDS.get(d.mechanism)
        if mechanism is None:
            errors[d.name] = (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif not d.name:
            errors[d.name] = (UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif store.get(d.name, mechanism) is None:
            errors[d.name] = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        else:
            deletes.add((d.name, mechanism))
    for u in request.upsertions:
        if u.name in errors:
            continue
        problem = _check_upsert(u)
        if problem is not None:
            errors[u.name] = problem
            continue
        mechanism = MECHANISM_IDS[u.mechanism]
        upserts[(u.name, mechanism)] = credential_from_salted(
            mechanism, bytes(u.salted_password), bytes(u.salt), u.iterations
        )
    upserts = {k: v for k, v in upserts.items() if k[0] not in errors}
    deletes = {k for k in deletes if k[0] not in errors}
    if upserts or deletes:
        store.apply(upserts, deletes)
    R = AlterUserScramCredentialsResponse[0]
    results = [
        R.AlterUserScramCredentialsResult(
            user=name, error_code=errors.get(name, (NONE, None))[0], error_message=errors.get(name, (NONE, None))[1]
        )
        for name in order
    ]
    return Response.of(R(throttle_time_ms=0, results=results), 0)
