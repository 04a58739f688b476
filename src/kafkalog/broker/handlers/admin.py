"""DescribeConfigs (key 32), DescribeCluster (key 60) and DeleteRecords (key 21).

DescribeConfigs gives a topic's every config with where its value comes from (a topic override, the
broker's server.properties, or Kafka's default), and the broker's static configs; DeleteRecords moves log
start offsets forward through the replica manager.
"""

from __future__ import annotations

from kafka.protocol.admin import DeleteRecordsResponse, DescribeClusterResponse, DescribeConfigsResponse

from ...manager import TopicPartition
from ...storage.config import TOPIC_SYNONYMS
from ..protocol import INVALID_REQUEST, NONE, Response, error_code, error_message
from ..replica_access import delete_records

TOPIC = 2
BROKER = 4
# DescribeConfigsResponse.ConfigSource
TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# ConfigDef.Type as DescribeConfigs v3+ reports it
_TYPES = {bool: 1, str: 2, int: 5, float: 6, list: 7, tuple: 7}
_SENSITIVE_WORDS = ("password", "secret", "sasl.jaas")

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult
Synonym = Entry.DescribeConfigsSynonym


def _text(value) -> str | None:
    """A config value as Kafka prints it: lists comma-joined, booleans in lower case."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _topic_configs(broker, name: str, keys, version: int, synonyms: bool) -> list:
    description = broker.log_manager.describe_topic(name)
    overrides = description.config_overrides
    static = broker.config.props
    entries = []
    for key, value in sorted(description.config.items()):
        if keys is not None and key not in keys:
            continue
        broker_key = TOPIC_SYNONYMS.get(key)
        if key in overrides:
            source = TOPIC_CONFIG
        elif broker_key is not None and broker_key in static:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        chain = []
        if synonyms:
            if key in overrides:
                chain.append(Synonym(name=key, value=_text(overrides[key]), source=TOPIC_CONFIG))
            if broker_key is not None and broker_key in static:
                chain.append(Synonym(name=broker_key, value=static[broker_key], source=STATIC_BROKER_CONFIG))
        entries.append(
            Entry(
                name=key,
                value=_text(value),
                read_only=False,
                config_source=source,
                is_default=source == DEFAULT_CONFIG,
                is_sensitive=False,
                synonyms=chain,
                config_type=_TYPES.get(type(value), 0),
                documentation=None,
            )
        )
    return entries


def _broker_configs(broker, keys) -> list:
    entries = []
    for key, value in sorted(broker.config.props.items()):
        if keys is not None and key not in keys:
            continue
        sensitive = any(word in key for word in _SENSITIVE_WORDS)
        entries.append(
            Entry(
                name=key,
                value=None if sensitive else value,
                read_only=True,
                config_source=STATIC_BROKER_CONFIG,
                is_default=False,
                is_sensitive=sensitive,
                synonyms=[],
                config_type=0,
                documentation=None,
            )
        )
    return entries


async def handle_describe_configs(broker, header, request) -> Response:
    version = header.api_version
    results = []
    for resource in request.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        code, message, configs = NONE, None, []
        try:
            if resource.resource_type == TOPIC:
                configs = _topic_configs(broker, resource.resource_name, keys, version, bool(request.include_synonyms))
            elif resource.resource_type == BROKER and resource.resource_name in ("", str(broker.node_id)):
                configs = _broker_configs(broker, keys)
            else:
                code = INVALID_REQUEST
                message = f"Unsupported resource type {resource.resource_type} or name {resource.resource_name!r}"
        except Exception as e:
            code, message, configs = error_code(e), error_message(e), []
        results.append(
            Result(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return Response.of(DescribeConfigsResponse(version=version, throttle_time_ms=0, results=results), version)


async def handle_describe_cluster(broker, header, request) -> Response:
    version = header.api_version
    host, port = broker.advertised_endpoint()
    response = DescribeClusterResponse(
        version=version,
        throttle_time_ms=0,
        error_code=NONE,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(broker_id=broker.node_id, host=host, port=port, rack=None)
        ],
    )
    return Response.of(response, version)


async def handle_delete_records(broker, header, request) -> Response:
    version = header.api_version
    T = DeleteRecordsResponse.DeleteRecordsTopicResult
    P = T.DeleteRecordsPartitionResult
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                low = delete_records(broker.replica_manager, TopicPartition(topic.name, p.partition_index), p.offset)
                parts.append(P(partition_index=p.partition_index, low_watermark=low, error_code=NONE))
            except Exception as e:
                parts.append(P(partition_index=p.partition_index, low_watermark=-1, error_code=error_code(e)))
        topics.append(T(name=topic.name, partitions=parts))
    return Response.of(DeleteRecordsResponse(version=version, throttle_time_ms=0, topics=topics), version)
