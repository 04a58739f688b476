"""The request router (Kafka's KafkaApis dispatch): header, version check, decode, handler, response header.

Handlers are looked up by API key; consumer groups and transactions will add their keys here, backed by
their own coordinators, without touching the existing handlers.
"""

from __future__ import annotations

import logging

from .handlers import admin, api_versions, fetch, group, metadata, offsets, produce, producer_id, topics
from .network import CLOSE, Connection
from .protocol import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    decode_request,
    parse_header,
    response_header,
)

log = logging.getLogger("kafka.server.KafkaApis")

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
}


class RequestRouter:
    """Turns one request frame into its response (or None, or CLOSE) for the socket server."""

    def __init__(self, broker) -> None:
        self.broker = broker

    async def __call__(self, conn: Connection, frame: memoryview):
        header, spec = parse_header(frame)
        if spec is None:
            raise InvalidRequestError(f"Unknown API key {header.api_key} (correlation id {header.correlation_id})")
        if not spec.min_version <= header.api_version <= spec.max_version:
            if spec.key == API_VERSIONS_KEY:
                return header.correlation_id.to_bytes(
                    4, "big", signed=True
                ), api_versions.unsupported_version_response()
            raise InvalidRequestError(
                f"Received request api key {spec.name} with version {header.api_version} which is not enabled "
                f"(supported: {spec.min_version}-{spec.max_version})"
            )
        request = decode_request(spec, header, frame)
        group.CLIENT_ADDRESS.set(getattr(conn, "client_host", ""))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("Handling %s v%d from %s (%s)", spec.name, header.api_version, conn.id, header.client_id)
        result = await HANDLERS[spec.key](self.broker, header, request)
        if result is None or result is CLOSE:
            return result
        return response_header(spec, header), result
