"""The sink's view of the topics of its log dirs: their partitions, where each lives and its configs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UnknownTopicOrPartitionError
from ..storage.config import LogConfig
from ..topic_store import TopicConfigStore
from . import logfiles

# ----- topics -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicInfo:
    """One topic as the sink writes it: its partition count, each partition's directory, its configs."""

    name: str
    partitions: int
    dirs: dict[int, logfiles.PartitionDir]
    config: LogConfig


class TopicCatalog:
    """The topics of the log dirs: partition counts (kafkalog-topics.json, else the directories), dirs, configs."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        self.paths = paths
        self.found = logfiles.discover(list(paths))
        self.store = TopicConfigStore([Path(p) for p in paths]).load()
        self._topics: dict[str, TopicInfo] = {}

    def topic(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            info = self._topics[name] = self._load(name)
        return info

    def _load(self, name: str) -> TopicInfo:
        where = ", ".join(self.paths)
        dirs = {p: d for (t, p), d in self.found.items() if t == name}
        state = self.store.get(name)
        if not dirs:
            raise UnknownTopicOrPartitionError(
                f"Topic {name} not present in the log dirs {where}. The kafkalog sink does not create topics: "
                "create it first (kafkalog topics --log-dir DIR --create --topic NAME, or LogManager.create_topic)"
            )
        count = state.partitions if state is not None else max(dirs) + 1
        missing = [p for p in range(count) if p not in dirs]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"Topic {name} has {count} partitions but {', '.join(f'{name}-{p}' for p in missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not in the log dirs {where}: give every log dir of the "
                "topic in option 'path'"
            )
        config = LogConfig(dict(state.config) if state is not None else {})
        return TopicInfo(name, count, dirs, config)
