"""The group coordinator's broker configs, with Kafka's names and defaults (GroupCoordinatorConfig,
OffsetConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import CoordinatorConfig, at_least, config_field


@dataclass(frozen=True)
class GroupCoordinatorConfig(CoordinatorConfig):
    """The group coordinator's broker configs, with Kafka's names and defaults.

    offsets.topic.replication.factor defaults to 1 here (Kafka's default is 3, which its own sample
    server.properties lowers to 1 for a single broker): this broker has one node, so a larger value could
    never be met and the offsets topic would never be created.
    """

    offsets_topic_num_partitions: int = config_field("offsets.topic.num.partitions", "INT", 50, at_least(1))
    offsets_topic_replication_factor: int = config_field("offsets.topic.replication.factor", "INT", 1, at_least(1))
    offsets_topic_segment_bytes: int = config_field(
        "offsets.topic.segment.bytes", "INT", 100 * 1024 * 1024, at_least(1)
    )
    offsets_topic_compression_codec: int = config_field("offsets.topic.compression.codec", "INT", 0, at_least(0))
    offsets_retention_minutes: int = config_field("offsets.retention.minutes", "INT", 7 * 24 * 60, at_least(1))
    offsets_retention_check_interval_ms: int = config_field(
        "offsets.retention.check.interval.ms", "INT", 600_000, at_least(1)
    )
    offset_metadata_max_bytes: int = config_field("offset.metadata.max.bytes", "INT", 4096, at_least(0))
    group_min_session_timeout_ms: int = config_field("group.min.session.timeout.ms", "INT", 6000, at_least(0))
    group_max_session_timeout_ms: int = config_field("group.max.session.timeout.ms", "INT", 1_800_000, at_least(0))
    group_initial_rebalance_delay_ms: int = config_field("group.initial.rebalance.delay.ms", "INT", 3000, at_least(0))
    group_max_size: int = config_field("group.max.size", "INT", 2**31 - 1, at_least(1))
    consumer_session_timeout_ms: int = config_field("group.consumer.session.timeout.ms", "INT", 45_000, at_least(1))
    consumer_heartbeat_interval_ms: int = config_field(
        "group.consumer.heartbeat.interval.ms", "INT", 5_000, at_least(1)
    )
