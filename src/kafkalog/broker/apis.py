"""The request router (Kafka's KafkaApis dispatch): header, version check, decode, handler, response header.

Handlers are looked up by API key; consumer groups (handlers/group.py) and transactions (handlers/txn.py) add
their keys here, backed by their own coordinators (kafkalog.coordinator.group, kafkalog.coordinator.transaction).
"""

from __future__ import annotations

import asyncio
import logging
import time

from .handlers import (
    acls,
    admin,
    api_versions,
    controller,
    fetch,
    group,
    metadata,
    offsets,
    produce,
    producer_id,
    producers,
    quotas,
    security,
    topics,
    txn,
)
from .handlers.common import log
from .network import CLOSE, Connection
from .protocol import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    Response,
    decode_request,
    parse_header,
    response_header,
)
from .quota import TimedCoroutine, thread_percent_seconds
from .security.context import CURRENT, THROTTLE_MS, RequestContext
from .security.sasl import CLOSE_UNANSWERED, REFUSE, SERVE
from .throttle import client_throttles, raise_throttle_time

HANDLERS = {
    0: produce.handle,
    1: fetch.handle,
    2: offsets.handle_list_offsets,
    3: metadata.handle,
    18: api_versions.handle,
    19: topics.handle_create,
    20: topics.handle_delete,
    21: admin.handle_delete_records,
    22: producer_id.handle,
    23: offsets.handle_offset_for_leader_epoch,
    32: admin.handle_describe_configs,
    33: admin.handle_alter_configs,
    35: admin.handle_describe_log_dirs,
    37: topics.handle_create_partitions,
    44: admin.handle_incremental_alter_configs,
    60: admin.handle_describe_cluster,
    5: controller.handle_stop_replica,
    7: controller.handle_controlled_shutdown,
    43: controller.handle_elect_leaders,
    61: producers.handle,
    8: group.handle_offset_commit,
    9: group.handle_offset_fetch,
    10: group.handle_find_coordinator,
    11: group.handle_join_group,
    12: group.handle_heartbeat,
    13: group.handle_leave_group,
    14: group.handle_sync_group,
    15: group.handle_describe_groups,
    16: group.handle_list_groups,
    42: group.handle_delete_groups,
    47: group.handle_offset_delete,
    68: group.handle_consumer_group_heartbeat,
    69: group.handle_consumer_group_describe,
    24: txn.handle_add_partitions,
    25: txn.handle_add_offsets,
    26: txn.handle_end_txn,
    27: txn.handle_write_txn_markers,
    28: txn.handle_txn_offset_commit,
    65: txn.handle_describe_transactions,
    66: txn.handle_list_transactions,
    29: acls.handle_describe,
    30: acls.handle_create,
    31: acls.handle_delete,
    48: quotas.handle_describe,
    49: quotas.handle_alter,
    50: security.handle_describe_scram,
    51: security.handle_alter_scram,
}
# Requests the request quota does not charge (Kafka's sendResponseExemptThrottle): inter-broker ones (a follower's
# Fetch too, see below), the SASL exchange, and ApiVersions (a client's first request; see throttle.py).
REQUEST_QUOTA_EXEMPT = frozenset({4, 5, 6, 7, 17, 18, 27, 36})
# APIs that act on the connection itself (its SASL state): called as handler(broker, conn, header, request).
CONNECTION_HANDLERS = {
    17: security.handle_handshake,
    36: security.handle_authenticate,
}


def _metric_names(name: str, request) -> tuple[str, ...]:
    """The request metrics a request counts in: its API's, and for a Fetch also FetchConsumer or FetchFollower."""
    if name != "Fetch":
        return (name,)
    return (name, "FetchFollower" if getattr(request, "replica_id", -1) >= 0 else "FetchConsumer")


def _refusal(sasl, name: str) -> str:
    """Why a request closes a SASL connection unanswered (for the log)."""
    if sasl.state == "complete":
        return "its SASL session has expired (connections.max.reauth.ms)"
    if sasl.state == "reauth_bad_mechanism":
        return "re-authentication requested another SASL mechanism than the session's"
    return f"Unexpected Kafka request of type {name} during SASL handshake."


def illegal_sasl_state_response(spec, version: int, message: str) -> Response:
    """The answer to a request other than SaslAuthenticate during a SASL exchange: that API's response with
    ILLEGAL_SASL_STATE in its top-level error code (and message) where it has one (Kafka's getErrorResponse fills
    per-item codes of some APIs as well; the connection closes after it either way)."""
    klass = spec.response[version]
    fields = klass._struct.fields
    values = {
        name: value
        for name, value in (("error_code", 34), ("error_message", message))
        if name in fields and fields[name].for_version_q(version)
    }
    return Response.of(klass(**values), version)


class RequestRouter:
    """Turns one request frame into its response (or None, or CLOSE) for the socket server."""

    def __init__(self, broker) -> None:
        self.broker = broker

    async def _before_login(self, conn: Connection, sasl, frame: memoryview):
        """A frame on a SASL connection that has not logged in (or is re-authenticating): CLOSE for one larger
        than ``sasl.server.max.receive.size`` (Kafka's authenticator reads no more before login); the answer to
        a bare token after a v0 handshake; None for a request to route as usual."""
        if len(frame) > sasl.settings.max_receive_size:
            log.info(
                "Closing connection %s: a %d-byte frame before login exceeds sasl.server.max.receive.size=%d",
                conn.id,
                len(frame),
                sasl.settings.max_receive_size,
            )
            return CLOSE
        if not sasl.raw_tokens:
            return None
        code, _, answer = await security.sasl_token(self.broker, conn, bytes(frame))
        return CLOSE if code else (b"", Response([answer]))

    async def __call__(self, conn: Connection, frame: memoryview):
        started = time.perf_counter()
        sasl = conn.sasl
        if sasl is not None and not sasl.authenticated:
            refused = await self._before_login(conn, sasl, frame)
            if refused is not None:
                return refused
        header, spec = parse_header(frame)
        if spec is None:
            raise InvalidRequestError(f"Unknown API key {header.api_key} (correlation id {header.correlation_id})")
        verdict = SERVE if sasl is None else sasl.gate(spec.key)
        if verdict == CLOSE_UNANSWERED:
            log.info("Closing connection %s from %s: %s", conn.id, conn.client_host, _refusal(sasl, spec.name))
            return CLOSE
        if not spec.min_version <= header.api_version <= spec.max_version:
            if spec.key == API_VERSIONS_KEY and verdict == SERVE:
                return header.correlation_id.to_bytes(
                    4, "big", signed=True
                ), api_versions.unsupported_version_response()
            raise InvalidRequestError(
                f"Received request api key {spec.name} with version {header.api_version} which is not enabled "
                f"(supported: {spec.min_version}-{spec.max_version})"
            )
        request = decode_request(spec, header, frame)
        if verdict == REFUSE:  # Kafka's IllegalSaslStateException: the request's error response, then close
            message = f"Unexpected Kafka request of type {spec.name} during SASL authentication."
            log.info("Closing connection %s from %s: %s", conn.id, conn.client_host, message)
            conn.close_after_send = True
            return response_header(spec, header), illegal_sasl_state_response(spec, header.api_version, message)
        if sasl is not None and spec.key == API_VERSIONS_KEY:
            sasl.api_versions_seen = True
        conn.request_metric = (_metric_names(spec.name, request), header.api_version)
        group.CLIENT_ADDRESS.set(getattr(conn, "client_host", ""))
        context = RequestContext(
            conn.principal,
            conn.peer_host,
            conn.endpoint.name,
            conn.endpoint.security_protocol,
            header.client_id or "",
            len(frame),
        )
        CURRENT.set(context)
        throttle = [0]
        THROTTLE_MS.set(throttle)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("Handling %s v%d from %s (%s)", spec.name, header.api_version, conn.id, header.client_id)
        if spec.key in CONNECTION_HANDLERS:
            handling = CONNECTION_HANDLERS[spec.key](self.broker, conn, header, request)
        else:
            handling = HANDLERS[spec.key](self.broker, header, request)
        quota = getattr(self.broker, "request_quota", None)
        if (
            quota is None
            or spec.key in REQUEST_QUOTA_EXEMPT
            or getattr(request, "replica_id", -1) >= 0
            or not quota.applies(context.user, context.client_id)
        ):
            result = await handling
        else:  # a client under a request_percentage quota: charge the time its request held the loop
            timed = TimedCoroutine(handling)
            before = time.perf_counter() - started
            result = await timed
            request_ms = quota.record(context.user, context.client_id, thread_percent_seconds(before + timed.seconds))
            if request_ms > 0:
                if isinstance(result, Response):
                    raise_throttle_time(spec.key, header.api_version, result, request_ms)
                throttle[0] = max(throttle[0], request_ms)
        if throttle[0] > 0:
            if client_throttles(spec.key, header.api_version):
                # KIP-219: the answer goes out now, carrying throttle_time_ms; the connection is muted meanwhile.
                conn.mute_until = time.monotonic() + throttle[0] / 1000.0
            else:  # an older client does not throttle itself: the answer is delayed instead
                await asyncio.sleep(throttle[0] / 1000.0)
        if result is None or result is CLOSE:
            return result
        return response_header(spec, header), result
