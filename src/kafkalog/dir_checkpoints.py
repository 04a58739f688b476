"""The offset checkpoints at the root of a log dir, one line per partition of the dir (Kafka's LogManager and
ReplicaManager files): what each holds of a log, reading them at startup and writing them.

- ``recovery-point-offset-checkpoint``: the recovery point (flushed up to), by kafka-recovery-point-checkpoint;
- ``log-start-offset-checkpoint``: the log start offset once it moved past the first segment's base, by
  kafka-log-start-offset-checkpoint;
- ``replication-offset-checkpoint``: the high watermark, by highwatermark-checkpoint.

A checkpoint that cannot be read is ignored with a warning (Kafka then recovers from the segments' own
offsets); one that cannot be written raises CheckpointError, for the log manager to take the dir offline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from .layout import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT
from .partition.topic_partition import TopicPartition
from .storage.checkpoints import CheckpointError, OffsetCheckpointFile
from .storage.log import Log

log = logging.getLogger(__name__)


def _moved_log_start(lg: Log) -> int | None:
    """Kafka checkpoints a log start offset only once it has moved past the first segment's base."""
    first = lg.segments.first()
    return lg.log_start_offset if first is not None and lg.log_start_offset > first.base_offset else None


CHECKPOINT_VALUES: dict[str, Callable[[Log], int | None]] = {
    RECOVERY_POINT_CHECKPOINT: lambda lg: lg.recovery_point,
    LOG_START_OFFSET_CHECKPOINT: _moved_log_start,
    REPLICATION_OFFSET_CHECKPOINT: lambda lg: lg.high_watermark,
}
"""Each root checkpoint's file name -> what it holds of one log (None leaves the log out)."""


def read_dir_checkpoint(directory: Path, name: str) -> dict[TopicPartition, int]:
    """The offsets of checkpoint ``name`` in ``directory`` by partition; empty when it is missing or unreadable."""
    try:
        entries = OffsetCheckpointFile(directory / name).read()
    except (CheckpointError, OSError, ValueError) as e:
        log.warning("Ignoring the unreadable checkpoint %s: %s", directory / name, e)
        return {}
    return {TopicPartition(t, p): o for (t, p), o in entries.items()}


def write_dir_checkpoint(directory: Path, name: str, logs: Iterable[tuple[TopicPartition, Log]]) -> None:
    """Write checkpoint ``name`` of ``directory`` with the value it holds of each of ``logs`` (the dir's logs).
    CheckpointError when the file cannot be written."""
    value_of = CHECKPOINT_VALUES[name]
    entries = {}
    for tp, log_obj in logs:
        if (value := value_of(log_obj)) is not None:
            entries[(tp.topic, tp.partition)] = value
    OffsetCheckpointFile(directory / name).write(entries)
