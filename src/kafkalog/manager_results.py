"""What the log manager's calls return: the records ``LogManager.consume`` yields and the descriptions of
topics and partitions that ``describe_topic`` (and the calls creating or changing topics) give."""

from __future__ import annotations

from dataclasses import dataclass, field

from .record.types import Header


@dataclass(frozen=True)
class ConsumerRecord:
    """A record as ``consume`` yields it: where it lives, and the record itself."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True)
class PartitionDescription:
    """One partition of a described topic: where its log lives, its offsets and its size."""

    partition: int
    log_dir: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segments: int


@dataclass(frozen=True)
class TopicDescription:
    """A topic as ``describe_topic`` (and the calls that create or change topics) report it: its id, its
    partitions, its config overrides and its effective configs."""

    name: str
    topic_id: str
    partitions: list[PartitionDescription]
    config_overrides: dict[str, str] = field(default_factory=dict)
    config: dict[str, object] = field(default_factory=dict)
