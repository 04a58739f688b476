"""What the Metadata handler tests share: a broker as handlers/metadata.py reads it, and asking by topic id."""

from __future__ import annotations

import asyncio
import types

from kafkalog.broker.handlers import metadata as handler
from kafkalog.broker.protocol import MetadataResponse


def local_broker(manager, host: str = "localhost"):
    """What handlers/metadata.py reads of a single-node KafkaServer with no authorizer: a LogManager and its
    partitions."""
    from kafkalog.broker.replica_access import prepare_replica_manager

    return types.SimpleNamespace(
        log_manager=manager,
        replica_manager=prepare_replica_manager(manager, 0),
        node_id=0,
        cluster_id="cid",
        config=types.SimpleNamespace(auto_create_topics_enable=False),
        advertised_endpoint=lambda: (host, 9092),
    )


def by_id(broker, *ids) -> list[tuple[int, str | None, int]]:
    """Metadata v12 of the topics ``ids`` (uuid.UUID): (error code, name, partition count) of each, in order."""
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(topic_id=i, name=None) for i in ids],
        allow_auto_topic_creation=False,
    )
    response = asyncio.run(handler.handle(broker, types.SimpleNamespace(api_version=12), request))
    return [
        (t.error_code, t.name, len(t.partitions))
        for t in MetadataResponse.decode(bytes(response.parts[0]), version=12).topics
    ]
