"""A topic-partition's name (Kafka's TopicPartition): the key every layer above storage uses for a partition."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TopicPartition:
    """A topic name and a partition number; its ``str`` is the partition directory's name, ``<topic>-<partition>``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
