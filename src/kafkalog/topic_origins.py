"""Where the configs of a topic in a log dir come from, when kafkalog did not create it.

kafkalog keeps its topics' ids and configs in its own store (``kafkalog-topics.json``, topic_store.TopicConfigStore).
A Kafka broker keeps them elsewhere: a KRaft broker (3.x/4.x) in its cluster metadata (``__cluster_metadata-0``,
read by kafkalog.storage.cluster_metadata), a ZooKeeper-era broker in ZooKeeper, which is not in the log dir.
``resolve_topic`` decides, per topic, which source holds and what kafkalog can say:

1. a topic kafkalog created, or whose configs were set through kafkalog: its own store;
2. a topic the cluster metadata knows under the topic id of its ``partition.metadata``: the metadata's configs
   and id (origin ``cluster-metadata``, re-read at every startup, so a broker that ran again is followed);
3. otherwise its configs are unknown (origin ``unknown``): a ZooKeeper-era broker's topic, or a partition the
   metadata does not know (Kafka would delete it as a stray replica). kafkalog then uses the broker defaults but
   runs no deleting retention on it until the operator confirms (LogManager.unconfirmed_topics).

Whatever the source, the internal topics get the configs Kafka creates them with where the source says nothing,
and ``__consumer_offsets`` / ``__transaction_state`` are always compacted (``internal_topic_configs``).

It reads and decides only (the LogManager stores the result), and depends on ``logdir`` and ``storage`` alone,
so the read-only view (partition.readonly) uses it too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidConfigurationError, KafkaLogError, KafkaStorageError
from .layout import METADATA_PARTITION_DIR
from .logdir import PartitionMetadataFile, new_uuid
from .storage.cluster_metadata import BROKER_RESOURCE, ClusterMetadataImage, load_cluster_metadata
from .storage.config import BROKER_KEYS, TOPIC_KEYS, LogConfig
from .topic_store import ORIGIN_CLUSTER_METADATA, ORIGIN_KAFKALOG, ORIGIN_UNKNOWN, TopicState

log = logging.getLogger(__name__)

__all__ = [
    "INTERNAL_TOPIC_CONFIGS",
    "Resolution",
    "find_metadata_dir",
    "internal_topic_configs",
    "read_cluster_metadata",
    "resolve_topic",
    "usable_topic_configs",
]

# The configs Kafka creates its internal topics with (GroupCoordinator.offsetsTopicConfigs with
# offsets.topic.segment.bytes' default; TransactionStateManager.transactionTopicConfigs with
# transaction.state.log.segment.bytes' default). min.insync.replicas is left to the source: kafkalog is one node.
INTERNAL_TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    "__consumer_offsets": {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": "104857600",
    },
    "__transaction_state": {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "segment.bytes": "104857600",
        "unclean.leader.election.enable": "false",
    },
}


def internal_topic_configs(topic: str, configs: dict[str, str]) -> dict[str, str]:
    """``configs`` with Kafka's creation configs of an internal topic filled in where they are absent, and a
    ``cleanup.policy`` without ``compact`` made ``compact``: its offsets, groups or transactions are kept by key,
    never deleted by age. Other topics' configs are returned unchanged."""
    defaults = INTERNAL_TOPIC_CONFIGS.get(topic)
    if defaults is None:
        return configs
    out = {**defaults, **configs}
    policy = [p.strip().lower() for p in out["cleanup.policy"].split(",")]
    if "compact" not in policy:
        log.warning(
            "Topic %s has cleanup.policy=%s; kafkalog compacts it (cleanup.policy=compact) as Kafka's internal "
            "topic is, rather than delete its records by age",
            topic,
            out["cleanup.policy"],
        )
        out["cleanup.policy"] = "compact"
    return out


def usable_topic_configs(topic: str, configs: dict[str, str]) -> dict[str, str]:
    """The topic configs kafkalog's LogConfig accepts, one by one; others (e.g. a vendor's ``confluent.*``
    configs, or values Kafka allowed but kafkalog does not) are logged and left out."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        if name not in TOPIC_KEYS:
            log.info("Topic %s: config %s=%s of the cluster metadata is not a log config; ignored", topic, name, value)
            continue
        try:
            LogConfig({name: value})
        except (InvalidConfigurationError, ValueError) as e:
            log.warning("Topic %s: config %s=%s from the cluster metadata is ignored: %s", topic, name, value, e)
            continue
        out[name] = value
    return out


def find_metadata_dir(log_dirs: Iterable[Path]) -> Path | None:
    """The ``__cluster_metadata-0`` dir among the log dirs, or None; KafkaStorageError if several have one
    (KafkaRaftServer refuses a metadata partition outside the one metadata log dir)."""
    found = [Path(d) / METADATA_PARTITION_DIR for d in log_dirs if (Path(d) / METADATA_PARTITION_DIR).is_dir()]
    if len(found) > 1:
        raise KafkaStorageError(
            f"Found unexpected metadata location in data directory `{found[1]}` (the metadata directory is "
            f"{found[0].parent}): these log dirs are not of one broker."
        )
    return found[0] if found else None


def read_cluster_metadata(log_dirs: Iterable[Path]) -> ClusterMetadataImage | None:
    """The replayed cluster metadata of the log dirs, or None when none has ``__cluster_metadata-0`` or it holds
    nothing readable (then its topics' configs are unknown, as in a ZooKeeper-era dir; a warning says why)."""
    directory = find_metadata_dir(log_dirs)
    if directory is None:
        return None
    try:
        image = load_cluster_metadata(directory)
    except (KafkaLogError, OSError) as e:
        log.warning("The cluster metadata in %s cannot be read, so its topics' configs are unknown: %s", directory, e)
        return None
    where = f"snapshot {image.snapshot.file_name}" if image.snapshot is not None else "the log"
    log.info(
        "Read the cluster metadata in %s up to offset %d (%s, then %d records): %d topics",
        directory,
        image.last_offset,
        where,
        image.records_applied,
        len(image.topics),
    )
    dynamic = sorted(
        f"{name}={value} ({f'broker {resource}' if resource else 'cluster default'})"
        for (kind, resource), configs in image.configs.items()
        if kind == BROKER_RESOURCE
        for name, value in configs.items()
        if name in BROKER_KEYS
    )
    if dynamic:
        log.warning(
            "The cluster metadata in %s sets broker configs dynamically, which kafkalog does not apply (give them "
            "in its broker config if they should hold): %s",
            directory,
            ", ".join(dynamic),
        )
    return image


@dataclass(frozen=True)
class Resolution:
    """A topic's state as kafkalog will keep it, and, for an unknown origin, why the configs are unknown."""

    state: TopicState
    reason: str | None = None


def _partition_ids(topic: str, partition_dirs: Iterable[Path]) -> set[str]:
    ids = set()
    for path in partition_dirs:
        metadata = PartitionMetadataFile(path)
        if not metadata.exists():
            continue
        try:
            ids.add(metadata.read())
        except KafkaLogError as e:
            log.warning("Topic %s: the unreadable %s is not used: %s", topic, metadata.path, e)
    return ids


def resolve_topic(
    topic: str,
    stored: TopicState | None,
    image: ClusterMetadataImage | None,
    partition_dirs: list[Path],
    partitions: int,
) -> Resolution:
    """Where ``topic``'s id and configs come from (see the module docstring), as the state to store."""
    if stored is not None and stored.origin == ORIGIN_KAFKALOG:
        return Resolution(stored)
    ids = _partition_ids(topic, partition_dirs)
    known = image.topic(topic) if image is not None else None
    if image is not None and known is not None and ids <= {known.topic_id}:
        configs = usable_topic_configs(topic, image.topic_configs(topic))
        return Resolution(TopicState(known.topic_id, partitions, configs, ORIGIN_CLUSTER_METADATA))
    if stored is not None and stored.origin is None:  # written before origins were kept: kafkalog's, as then
        return Resolution(TopicState(stored.topic_id, stored.partitions, stored.config, ORIGIN_KAFKALOG))
    if stored is not None and stored.origin == ORIGIN_CLUSTER_METADATA and image is None:
        return Resolution(stored)  # the metadata dir is gone: its configs as last read
    topic_id = next(iter(sorted(ids)), None) or (stored.topic_id if stored is not None else new_uuid())
    config = dict(stored.config) if stored is not None else {}
    if image is not None and known is None:
        reason = "the cluster metadata does not know it (deleted from the cluster? Kafka would delete it as stray)"
    elif image is not None and known is not None:
        reason = (
            f"its partition.metadata topic id {', '.join(sorted(ids))} is not the cluster metadata's "
            f"{known.topic_id} (an older topic of that name; Kafka would delete it as stray)"
        )
    else:  # no image (a known topic needs one)
        reason = "no cluster metadata in the log dirs (a ZooKeeper-era broker keeps topic configs in ZooKeeper)"
    return Resolution(TopicState(topic_id, partitions, config, ORIGIN_UNKNOWN), reason)
