"""InitProducerId (key 22): producer ids for idempotent producers, and for transactional ones through the
transaction coordinator (epoch bumps, fencing: kafkalog.coordinator.transaction).

Kafka answers PRODUCER_FENCED only from v4 (KIP-588); older clients get INVALID_PRODUCER_EPOCH instead.
"""

from __future__ import annotations

import logging

from ..protocol import (
    CLUSTER_AUTHORIZATION_FAILED,
    NONE,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    InitProducerIdResponse,
    Response,
    error_code,
)
from ..security.acl import allowed, cluster_allowed
from .txn import fenced_for, replicated


def _idempotent_write_allowed(broker) -> bool:
    """Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on a topic (KIP-679; here: on an existing topic)."""
    if cluster_allowed(broker, "IDEMPOTENT_WRITE", log_denied=False):
        return True
    return any(allowed(broker, "WRITE", "TOPIC", name, log_denied=False) for name in broker.log_manager.topics())


log = logging.getLogger("kafka.coordinator.transaction.ProducerIdManager")


async def handle(broker, header, request) -> Response:
    version = header.api_version
    denied = (
        not allowed(broker, "WRITE", "TRANSACTIONAL_ID", request.transactional_id)
        if request.transactional_id is not None
        else not _idempotent_write_allowed(broker)
    )
    if denied:
        code = (
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            if request.transactional_id is not None
            else CLUSTER_AUTHORIZATION_FAILED
        )
        response = InitProducerIdResponse(
            version=version, throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1
        )
        return Response.of(response, version)
    if request.transactional_id is not None:
        expected = None
        if version >= 3 and request.producer_id != -1:
            expected = (request.producer_id, request.producer_epoch)
        result = broker.txn_coordinator.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, expected
        )
        code = await replicated(broker, request.transactional_id, int(result.error))  # a cluster: once replicated
        ok = code == NONE
        response = InitProducerIdResponse(
            version=version,
            throttle_time_ms=0,
            error_code=fenced_for(version, 4, code),
            producer_id=result.producer_id if ok else -1,
            producer_epoch=result.producer_epoch if ok else -1,
        )
        return Response.of(response, version)
    try:
        pid = broker.producer_ids.generate_producer_id()
        response = InitProducerIdResponse(
            version=version, throttle_time_ms=0, error_code=NONE, producer_id=pid, producer_epoch=0
        )
    except Exception as e:
        log.error("Failed to allocate a producer id: %s", e)
        response = InitProducerIdResponse(
            version=version, throttle_time_ms=0, error_code=error_code(e), producer_id=-1, producer_epoch=-1
        )
    return Response.of(response, version)
