"""What several handlers share: KafkaApis's logger, the per-topic, per-partition loop of the partition-level
APIs, the per-resource loop of the Describe APIs of groups and transactional ids, and the copy of a layer's
attributes into the response fields of the same names.

ListOffsets, OffsetForLeaderEpoch and DeleteRecords answer each partition on its own: the topic's ACL is checked
for each partition (as Kafka's handlers do, so each refusal is logged), the partition layer answers, and any
error -- a refusal included -- becomes that partition's error code, never the whole request's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..security.acl import allowed, require

# Kafka's request handlers (KafkaApis) log under one name; every handler module logs through this logger.
log = logging.getLogger("kafka.server.KafkaApis")

Answer = TypeVar("Answer")


def each_partition(
    broker: Any,
    topics: Iterable[Any],
    operation: str,
    answer: Callable[[str, Any], Answer],
    failed: Callable[[Any, BaseException], Answer],
    name_field: str = "name",
) -> list[tuple[str, list[Answer]]]:
    """[(topic name, [one answer per partition])] in request order: ``answer(topic name, partition)`` once
    ``operation`` on the topic is allowed, else (or on any error) ``failed(partition, error)``. ``name_field`` is
    the request topic's name field (``topic`` in the older schemas)."""
    out = []
    for topic in topics:
        name = getattr(topic, name_field)
        parts = []
        for p in topic.partitions:
            try:
                require(broker, operation, "TOPIC", name)
                parts.append(answer(name, p))
            except Exception as e:
                parts.append(failed(p, e))
        out.append((name, parts))
    return out


def describe_each(
    broker: Any,
    resource_type: str,
    names: Iterable[str],
    denied: int,
    describe: Callable[[str], Answer],
    failed: Callable[[str, int], Answer],
) -> list[Answer]:
    """One entry per named resource (a group, a transactional id), in request order: ``describe(name)`` when the
    request may DESCRIBE it, else ``failed(name, denied)`` (Kafka's per-resource authorization error)."""
    return [describe(n) if allowed(broker, "DESCRIBE", resource_type, n) else failed(n, denied) for n in names]


def same_named(source: Any, names: Iterable[str]) -> dict[str, Any]:
    """The attributes ``names`` of a layer's object, as keyword arguments for the response fields of the same
    names (a coordinator's member, a producer's state)."""
    return {name: getattr(source, name) for name in names}
