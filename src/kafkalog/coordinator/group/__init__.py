"""Kafka's group coordinator (classic protocol) over the ``__consumer_offsets`` topic.

``records`` holds the topic's key and value schemas (written and decoded in one place: ``kafkalog dump
--offsets-decoder`` uses them too), ``group`` the classic group and member state, ``consumer_group`` the KIP-848
group model and assignors. The coordinator is built in layers, as Kafka's: ``metadata_manager`` (the groups and
their writes to the topic) <- ``classic_protocol`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and
``consumer_protocol`` (ConsumerGroupHeartbeat) <- ``offsets`` (commits, fetches, deletion, expiry) <-
``coordinator`` (lifecycle, loading, the admin APIs); ``config`` holds its broker configs.
"""

from ..internal_topic import java_string_hash, partition_for
from .coordinator import GROUP_METADATA_TOPIC_NAME, GroupCoordinator, GroupCoordinatorConfig
from .errors import Errors
from .group import ClassicGroup, GroupState, JoinResult, Member, OffsetAndMetadata, SyncResult

__all__ = [
    "GROUP_METADATA_TOPIC_NAME",
    "ClassicGroup",
    "Errors",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupState",
    "JoinResult",
    "Member",
    "OffsetAndMetadata",
    "SyncResult",
    "java_string_hash",
    "partition_for",
]
