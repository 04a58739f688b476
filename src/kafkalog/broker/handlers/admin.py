"""The admin APIs: DescribeConfigs, Incremental/AlterConfigs, DescribeCluster, DeleteRecords, DescribeLogDirs.

DescribeConfigs gives a topic's every config with where its value comes from (a topic override, the
broker's server.properties, or Kafka's default), and the broker's static configs; DeleteRecords moves log
start offsets forward through the replica manager.
"""

from __future__ import annotations

import shutil

from kafka.protocol.admin import (
    AlterConfigsResponse,
    DeleteRecordsResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeLogDirsResponse,
    IncrementalAlterConfigsResponse,
)

from ...errors import InvalidConfigurationError
from ...manager import TopicPartition
from ...storage.config import TOPIC_SYNONYMS, LogConfig, config_text
from ..protocol import INVALID_REQUEST, NONE, InvalidRequestError, Response, error_code, error_message
from ..replica_access import delete_records
from ..security.acl import cluster_allowed, require
from .common import each_partition, log

TOPIC = 2
BROKER = 4
# DescribeConfigsResponse.ConfigSource
TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# ConfigDef.Type as DescribeConfigs v3+ reports it
_TYPES = {bool: 1, str: 2, int: 5, float: 6, list: 7, tuple: 7}
# Kafka's PASSWORD-typed configs (never shown by DescribeConfigs), listener-prefixed or not: passwords, JAAS
# configurations, and PEM key material given inline (ssl.keystore.key, its certificate chain, trusted certificates).
_SENSITIVE_WORDS = (
    "password",
    "secret",
    "sasl.jaas",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.certificates",
)

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult
Synonym = Entry.DescribeConfigsSynonym


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
                chain.append(Synonym(name=key, value=config_text(overrides[key]), source=TOPIC_CONFIG))
            if broker_key is not None and broker_key in static:
                chain.append(Synonym(name=broker_key, value=static[broker_key], source=STATIC_BROKER_CONFIG))
        entries.append(
            Entry(
                name=key,
                value=config_text(value),
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
                require(broker, "DESCRIBE_CONFIGS", "TOPIC", resource.resource_name)
                configs = _topic_configs(broker, resource.resource_name, keys, version, bool(request.include_synonyms))
            elif resource.resource_type == BROKER and resource.resource_name in ("", str(broker.node_id)):
                require(broker, "DESCRIBE_CONFIGS", "CLUSTER")
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
    may = cluster_allowed(broker, "DESCRIBE")
    response = DescribeClusterResponse(
        version=version,
        throttle_time_ms=0,
        error_code=NONE if may else 31,
        error_message=None if may else "Cluster authorization failed.",
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

    def answer(name: str, p) -> P:
        low = delete_records(broker.replica_manager, TopicPartition(name, p.partition_index), p.offset)
        return P(partition_index=p.partition_index, low_watermark=low, error_code=NONE)

    def failed(p, e: BaseException) -> P:
        return P(partition_index=p.partition_index, low_watermark=-1, error_code=error_code(e))

    answers = each_partition(broker, request.topics, "DELETE", answer, failed)
    topics = [T(name=name, partitions=parts) for name, parts in answers]
    return Response.of(DeleteRecordsResponse(version=version, throttle_time_ms=0, topics=topics), version)


# ----- IncrementalAlterConfigs (key 44) and AlterConfigs (key 33) -----------------------------------------------
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _incremental_overrides(broker, name: str, configs) -> dict[str, str | None]:
    """The override updates of an IncrementalAlterConfigs resource (None removes an override)."""
    description = broker.log_manager.describe_topic(name)
    updates: dict[str, str | None] = {}
    for c in configs:
        if c.config_operation == SET:
            updates[c.name] = c.value
        elif c.config_operation == DELETE:
            updates[c.name] = None
        elif c.config_operation in (APPEND, SUBTRACT):
            current = description.config.get(c.name)
            if not isinstance(current, list | tuple):
                raise InvalidConfigurationError(f"Config value append/subtract is not allowed for config {c.name}")
            items = [str(v) for v in current]
            changes = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if c.config_operation == APPEND:
                items += [v for v in changes if v not in items]
            else:
                items = [v for v in items if v not in changes]
            updates[c.name] = ",".join(items)
        else:
            raise InvalidConfigurationError(f"Unknown config operation {c.config_operation} for {c.name}")
    return updates


def _alter(broker, resource, updates: dict[str, str | None], validate_only: bool, replace: bool):
    """Apply (or with ``validate_only`` check) topic override updates; the response entry."""
    Resp = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    try:
        if resource.resource_type == TOPIC:
            require(broker, "ALTER_CONFIGS", "TOPIC", resource.resource_name)
        if resource.resource_type != TOPIC:
            raise InvalidRequestError(
                f"Altering configs of resource type {resource.resource_type} is not supported (topics only)"
            )
        description = broker.log_manager.describe_topic(resource.resource_name)
        if replace:  # AlterConfigs: the given configs become the whole override set
            updates = {**dict.fromkeys(description.config_overrides), **updates}
        merged = {**description.config_overrides, **updates}
        LogConfig({k: v for k, v in merged.items() if v is not None}, broker=broker.config.log)  # validates
        if not validate_only:
            broker.log_manager.alter_topic_config(resource.resource_name, updates)
            log.info("Altered configs of topic %s: %s", resource.resource_name, updates)
        code, message = NONE, None
    except Exception as e:
        code, message = error_code(e), error_message(e)
    return Resp(
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
    )


async def handle_incremental_alter_configs(broker, header, request) -> Response:
    version = header.api_version
    responses = []
    for resource in request.resources:
        try:
            if resource.resource_type == TOPIC:
                require(broker, "ALTER_CONFIGS", "TOPIC", resource.resource_name)
            updates = _incremental_overrides(broker, resource.resource_name, resource.configs)
        except Exception as e:
            Resp = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
            responses.append(
                Resp(
                    error_code=error_code(e),
                    error_message=error_message(e),
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
            continue
        responses.append(_alter(broker, resource, updates, bool(request.validate_only), replace=False))
    response = IncrementalAlterConfigsResponse(version=version, throttle_time_ms=0, responses=responses)
    return Response.of(response, version)


async def handle_alter_configs(broker, header, request) -> Response:
    version = header.api_version
    responses = [
        _alter(broker, r, {c.name: c.value for c in r.configs}, bool(request.validate_only), replace=True)
        for r in request.resources
    ]
    response = AlterConfigsResponse(version=version, throttle_time_ms=0, responses=responses)
    return Response.of(response, version)


# ----- DescribeLogDirs (key 35) ----------------------------------------------------------------------------------
KAFKA_STORAGE_ERROR = 56


async def handle_describe_log_dirs(broker, header, request) -> Response:
    """Each log dir with its partitions' sizes (offset lag 0: no future replica moves here) and disk space."""
    version = header.api_version
    R = DescribeLogDirsResponse.DescribeLogDirsResult
    T = R.DescribeLogDirsTopic
    P = T.DescribeLogDirsPartition
    manager = broker.log_manager
    if not cluster_allowed(broker, "DESCRIBE"):  # Kafka: DESCRIBE on the cluster, else no log dirs at all
        response = DescribeLogDirsResponse(version=version, throttle_time_ms=0, error_code=31, results=[])
        return Response.of(response, version)
    wanted = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    by_dir: dict[str, dict[str, list]] = {str(d): {} for d in manager.log_dirs}
    for name in manager.topics():
        try:
            description = manager.describe_topic(name)
        except Exception:  # deleted meanwhile
            continue
        for p in description.partitions:
            if wanted is not None and (name, p.partition) not in wanted:
                continue
            entry = P(partition_index=p.partition, partition_size=p.size_bytes, offset_lag=0, is_future_key=False)
            by_dir.setdefault(p.log_dir, {}).setdefault(name, []).append(entry)
    offline = {str(d) for d in manager.offline_log_dirs}
    results = []
    for directory, topics in by_dir.items():
        try:
            usage = shutil.disk_usage(directory)
            total, usable = usage.total, usage.free
        except OSError:
            total = usable = -1
        results.append(
            R(
                error_code=KAFKA_STORAGE_ERROR if directory in offline else NONE,
                log_dir=directory,
                topics=[T(name=name, partitions=parts) for name, parts in sorted(topics.items())],
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    response = DescribeLogDirsResponse(version=version, throttle_time_ms=0, error_code=NONE, results=results)
    return Response.of(response, version)
