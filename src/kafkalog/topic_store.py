"""``kafkalog-topics.json``: the topics kafkalog knows in a log dir started without KRaft metadata, with their ids,
partition counts, config overrides and where those configs come from (``TopicState.origin``).

The file is kept in every log dir (written atomically, the newest copy wins when they disagree) because a topic's
partitions may be spread over several of them.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .errors import (
    InvalidPartitionsError,
    KafkaStorageError,
)
from .layout import (
    TOPICS_FILE,
)
from .logdir import parse_uuid, validate_topic_name
from .storage import metadata_changes
from .storage.files import atomic_write

log = logging.getLogger(__name__)

TOPICS_FILE_VERSION = 1


ORIGIN_KAFKALOG = "kafkalog"
ORIGIN_CLUSTER_METADATA = "cluster-metadata"
ORIGIN_UNKNOWN = "unknown"
ORIGINS = (ORIGIN_KAFKALOG, ORIGIN_CLUSTER_METADATA, ORIGIN_UNKNOWN)


@dataclass
class TopicState:
    """What kafkalog remembers about a topic across restarts: its id, partition count and config overrides.

    ``origin`` says where the configs come from: ``kafkalog`` (created by kafkalog, or configs set through it),
    ``cluster-metadata`` (a KRaft broker's topic: its configs are re-read from ``__cluster_metadata`` at each
    startup), ``unknown`` (a topic kafkalog did not create, whose configs it cannot know, e.g. in a ZooKeeper-era
    broker's dir). None: written by a kafkalog that did not record it (before origins were kept).
    """

    topic_id: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    origin: str | None = ORIGIN_KAFKALOG

    def validate(self) -> None:
        try:
            parse_uuid(self.topic_id)
        except ValueError as e:
            raise ValueError(f"Invalid topic id {self.topic_id!r}: {e}") from None
        if isinstance(self.partitions, bool) or not isinstance(self.partitions, int) or self.partitions < 1:
            raise InvalidPartitionsError(f"Number of partitions must be at least 1, not {self.partitions!r}")
        if not isinstance(self.config, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.config.items()
        ):
            raise ValueError(f"Topic config must map strings to strings: {self.config!r}")
        if self.origin is not None and self.origin not in ORIGINS:
            raise ValueError(f"Unknown topic origin {self.origin!r} (known: {', '.join(ORIGINS)})")

    def copy(self) -> TopicState:
        return TopicState(self.topic_id, self.partitions, dict(self.config), self.origin)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"topic_id": self.topic_id, "partitions": self.partitions, "config": dict(self.config)}
        if self.origin is not None:
            out["origin"] = self.origin
        return out

    @classmethod
    def from_json(cls, data: object) -> TopicState:
        if not isinstance(data, dict):
            raise ValueError(f"a topic entry must be an object, not {data!r}")
        state = cls(data["topic_id"], data["partitions"], data.get("config", {}), data.get("origin"))
        state.validate()
        return state.copy()


class TopicConfigStore:
    """Per-topic state kept in ``kafkalog-topics.json`` in every log dir, so it survives losing a dir.

    Each change writes every copy atomically with the next ``generation``; ``load()`` keeps the readable
    copy with the highest generation (a corrupt or unreadable copy is skipped with a warning). The state is
    loaded on first use if ``load()`` was not called.
    """

    def __init__(self, log_dirs: list[Path]) -> None:
        if not log_dirs:
            raise ValueError("TopicConfigStore needs at least one log dir")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.generation = 0
        self._topics: dict[str, TopicState] = {}
        self._loaded = False
        self._lock = threading.RLock()

    def path(self, log_dir: Path) -> Path:
        return Path(log_dir) / TOPICS_FILE

    @staticmethod
    def _read_copy(path: Path) -> tuple[int, dict[str, TopicState]]:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("the file is not a JSON object")
        if data.get("version") != TOPICS_FILE_VERSION:
            raise ValueError(f"unsupported version {data.get('version')!r}")
        generation = data.get("generation")
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise ValueError(f"bad generation {generation!r}")
        topics = data.get("topics")
        if not isinstance(topics, dict):
            raise ValueError("'topics' is not an object")
        states = {}
        for name, entry in topics.items():
            validate_topic_name(name)
            states[name] = TopicState.from_json(entry)
        return generation, states

    def load(self) -> TopicConfigStore:
        """(Re)read every copy and keep the newest readable one."""
        best: tuple[int, dict[str, TopicState]] | None = None
        for log_dir in self.log_dirs:
            path = self.path(log_dir)
            try:
                copy = self._read_copy(path)
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("Ignoring the unreadable topic state file %s: %s", path, e)
                continue
            if best is None or copy[0] > best[0]:
                best = copy
        with self._lock:
            self.generation, self._topics = best if best is not None else (0, {})
            metadata_changes.note_change()
            self._loaded = True
        return self

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.load()

    def _persist(self, topics: dict[str, TopicState]) -> None:
        """Write ``topics`` as the next generation to every log dir; commit in memory if any copy was written."""
        generation = self.generation + 1
        data = {
            "version": TOPICS_FILE_VERSION,
            "generation": generation,
            "topics": {name: topics[name].to_json() for name in sorted(topics)},
        }
        payload = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
        failures = []
        for log_dir in self.log_dirs:
            try:
                atomic_write(self.path(log_dir), payload)
            except OSError as e:
                log.warning("Failed to write the topic state file %s: %s", self.path(log_dir), e)
                failures.append(f"{self.path(log_dir)}: {e}")
        if len(failures) == len(self.log_dirs):
            raise KafkaStorageError("Failed to write the topic state file in every log dir: " + "; ".join(failures))
        self.generation = generation
        self._topics = topics
        metadata_changes.note_change()

    def put(self, topic: str, state: TopicState) -> None:
        """Record (or replace) a topic's state and persist it."""
        validate_topic_name(topic)
        state.validate()
        with self._lock:
            self._ensure_loaded()
            topics = dict(self._topics)
            topics[topic] = state.copy()
            self._persist(topics)

    def put_all(self, states: dict[str, TopicState]) -> None:
        """Record (or replace) several topics' states and persist them in one write."""
        for topic, state in states.items():
            validate_topic_name(topic)
            state.validate()
        with self._lock:
            self._ensure_loaded()
            topics = dict(self._topics)
            topics.update({topic: state.copy() for topic, state in states.items()})
            self._persist(topics)

    def remove(self, topic: str) -> bool:
        """Forget a topic and persist; True if it was known."""
        with self._lock:
            self._ensure_loaded()
            if topic not in self._topics:
                return False
            topics = dict(self._topics)
            del topics[topic]
            self._persist(topics)
            return True

    def _committed(self) -> dict[str, TopicState]:
        """The committed topics, without waiting for a write in progress (its fsyncs: a broker's event loop reads
        here while a topic is created on another thread). Every commit replaces the dict and none changes it,
        so a reader sees the state before a write or after it, never part of one."""
        if not self._loaded:
            with self._lock:
                self._ensure_loaded()
        return self._topics

    def get(self, topic: str) -> TopicState | None:
        """A copy of the topic's state, or None."""
        state = self._committed().get(topic)
        return state.copy() if state is not None else None

    def topics(self) -> list[str]:
        """The known topic names, sorted."""
        return sorted(self._committed())

    def __contains__(self, topic: object) -> bool:
        return topic in self._committed()
