"""Which topics a command's ``--topic`` names, and which are Kafka's internal ones: shared by ``topics`` (offline
and online) and ``get-offsets``, so that a name or a pattern selects the same topics on a log dir and on a broker;
and what one ``topics`` invocation asks for (:class:`TopicsRequest`), the same object for both paths."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import click

# Kafka's Topic.isInternal (clients/src/main/java/org/apache/kafka/common/internals/Topic.java): what
# --exclude-internal leaves out.
KAFKA_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def include_list(raw: str) -> re.Pattern[str]:
    """Kafka's IncludeList: a regex where ',' means '|', spaces and surrounding quotes dropped, matched whole."""
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", raw.strip().replace(",", "|").replace(" ", "")))
    try:
        return re.compile(regex)
    except re.error as e:
        raise click.BadParameter(f"{raw} is an invalid regex: {e}") from None


def listed_topics(names: Iterable[str], exclude_internal: bool) -> list[str]:
    """``names`` in their order, without Kafka's internal topics when ``exclude_internal`` (--exclude-internal)."""
    return [n for n in names if not (exclude_internal and n in KAFKA_INTERNAL_TOPICS)]


def matching_topics(names: list[str], topic: str, action: str) -> list[str]:
    """The topics ``--topic`` names. For --list and --describe it is a regular expression, as TopicCommand's
    IncludeList (',' meaning '|', matched whole); for --alter and --delete only the exact name, so that a '.' in
    a name never reaches a colliding topic ('a.b' matching 'a_b')."""
    if action in ("list", "describe"):
        pattern = include_list(topic)
        return [n for n in names if n == topic or pattern.fullmatch(n)]
    return [n for n in names if n == topic]


@dataclass(frozen=True)
class TopicsRequest:
    """What one ``kafkalog topics`` asks for, offline or online: kafka-topics.sh's action (create, list,
    describe, alter, delete), its --topic, and the options that modify the action (TopicCommand.java)."""

    action: str
    topic: str | None = None
    partitions: int | None = None
    replication_factor: int | None = None
    overrides: dict[str, str] = field(default_factory=dict)  # --config k=v
    delete_configs: tuple[str, ...] = ()
    if_exists: bool = False
    if_not_exists: bool = False
    topics_with_overrides: bool = False
    exclude_internal: bool = False

    @property
    def named_topic(self) -> str:
        """The --topic of an action that needs one (create, alter, delete: checked before the action runs)."""
        assert self.topic is not None
        return self.topic

    def selected(self, names: Iterable[str]) -> list[str]:
        """The topics of ``names`` this request is about: --exclude-internal applied, then --topic as matched by
        :func:`matching_topics` (every topic when there is no --topic)."""
        listed = listed_topics(names, self.exclude_internal)
        return matching_topics(listed, self.topic, self.action) if self.topic else listed
