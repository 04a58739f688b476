"""InitProducerId (key 22): producer ids for idempotent producers (no transactional id).

A transactional id needs the transaction coordinator, which is another issue's: such a request is answered
COORDINATOR_NOT_AVAILABLE, as Kafka's is while no coordinator is loaded.
"""

from __future__ import annotations

import logging

from ..protocol import COORDINATOR_NOT_AVAILABLE, NONE, InitProducerIdResponse, Response, error_code

log = logging.getLogger("kafka.coordinator.transaction.ProducerIdManager")


async def handle(broker, header, request) -> Response:
    version = header.api_version
    if request.transactional_id is not None:
        response = InitProducerIdResponse(
            version=version, throttle_time_ms=0, error_code=COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1
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
