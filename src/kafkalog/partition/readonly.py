"""The read-only view of log dirs (``ReadOnlyLogDir``, ``ReadOnlyPartition``): what every command that only
reads uses (consume, topics --list/--describe, verify, recover --dry-run, explain) and what the Spark source
reads through.

It takes no lock and writes nothing, so it works on a read-only file system and on a copy of a live
broker's dir; a folder that is not a log dir is refused rather than initialised. The functions it is built
from live in ``segment_files`` (discovery, indexes, offsets), ``read_path`` (Kafka's read path, the last
stable offset), ``aborted`` (aborted transactions) and ``timestamps`` (ListOffsets); they are re-exported
here, the one module the Spark source imports.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from ..errors import KafkaLogError, KafkaStorageError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from ..layout import (
    CLEAN_SHUTDOWN_FILE,
    LOG_DIR_ROOT_FILES,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    METADATA_PARTITION_DIR,
    METADATA_TOPIC,
    PARTITION_DIR_NAME,
    REPLICATION_OFFSET_CHECKPOINT,
    SEGMENT_FILE,
)
from ..logdir import PartitionMetadataFile
from ..storage.cluster_metadata import ClusterMetadataImage, load_cluster_metadata
from ..topic_origins import resolve_topic
from ..topic_store import TopicConfigStore
from .aborted import AbortedFilter, collect_aborted_txns, read_txn_index
from .read_path import ReadRun, last_stable_offset, path_batches, read_path, read_range, runs_from
from .segment_files import (
    INTERNAL_TOPICS,
    RUN_BYTES,
    CheckpointedOffsets,
    PartitionDir,
    PartitionOffsets,
    batch_boundaries,
    checkpoint_mtime_ns,
    data_loss_message,
    discover,
    index_entries,
    log_end_offset,
    open_segment,
    partition_offsets,
    read_checkpoint,
    segment_bases,
    segment_last_offset,
    segment_path,
    start_position,
)
from .timestamps import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    SPECIAL_TIMESTAMPS,
    first_offset_at_or_after,
    offset_for_timestamp,
    time_index_entries,
)

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "INTERNAL_TOPICS",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "RUN_BYTES",
    "SPECIAL_TIMESTAMPS",
    "AbortedFilter",
    "CheckpointedOffsets",
    "PartitionDir",
    "PartitionOffsets",
    "ReadOnlyLogDir",
    "ReadOnlyPartition",
    "ReadRun",
    "batch_boundaries",
    "check_log_dir",
    "checkpoint_mtime_ns",
    "collect_aborted_txns",
    "data_loss_message",
    "discover",
    "discover_log_dirs",
    "first_offset_at_or_after",
    "index_entries",
    "last_stable_offset",
    "log_dir_problem",
    "log_end_offset",
    "offset_for_timestamp",
    "open_segment",
    "partition_offsets",
    "path_batches",
    "read_checkpoint",
    "read_path",
    "read_range",
    "read_txn_index",
    "runs_from",
    "segment_bases",
    "segment_last_offset",
    "start_position",
    "time_index_entries",
]

# ----- the read-only view of log dirs -----------------------------------------------------------------------

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def _has_segment_files(directory: str) -> bool:
    try:
        return any(SEGMENT_FILE.match(name) for name in os.listdir(directory))
    except OSError:
        return False


def log_dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is not a log dir that can be read, or None when it is one.

    A broker writes ``meta.properties`` and the root checkpoints into every log dir when it starts on it
    (Kafka's ``LogManager`` and ``MetaPropertiesEnsemble``), and a partition lives in a ``<topic>-<n>``
    directory holding ``<base offset>.log`` segments. A folder with none of these is not a log dir: a
    ZooKeeper-mode broker would initialise it as a new one (a KRaft broker refuses to start until
    ``kafka-storage.sh format`` has written its ``meta.properties``), which a reading command must never do.
    A partial copy of a log dir (only some partition directories) still counts.
    """
    root = os.fspath(path)
    if not os.path.exists(root):
        return f"Log dir {root} does not exist"
    if not os.path.isdir(root):
        return f"{root} is not a directory, so it is not a log dir"
    try:
        entries = list(os.scandir(root))
    except OSError as e:
        return f"Log dir {root} cannot be listed: {e.strerror}"
    names = {entry.name for entry in entries}
    if any(name in names for name in LOG_DIR_ROOT_FILES):
        return None
    for entry in entries:
        if PARTITION_DIR_NAME.match(entry.name) and entry.is_dir() and _has_segment_files(entry.path):
            return None
    return (
        f"{root} is not a Kafka log dir: it has no meta.properties, no root checkpoint file and no "
        "<topic>-<partition> directory with .log segments (a reading command does not create one)"
    )


def check_log_dir(path: str | os.PathLike[str]) -> None:
    """Raise KafkaStorageError with ``log_dir_problem``'s reason when ``path`` is not a readable log dir."""
    problem = log_dir_problem(path)
    if problem is not None:
        raise KafkaStorageError(problem, path=os.fspath(path))


def discover_log_dirs(paths: list[str]) -> dict[tuple[str, int], PartitionDir]:
    """``discover`` for a reader: each path must be a log dir (``check_log_dir``), then its partitions."""
    for path in paths:
        check_log_dir(path)
    return discover(paths)


class ReadOnlyPartition:
    """One partition of a log dir as a reader sees it, from its files alone: no lock, no write, no map.

    Invariants: nothing here opens a file for writing or creates one (segments and indexes are read with
    ``pread``; missing indexes are not rebuilt, a torn tail is not truncated, a checkpoint is not rewritten);
    ``log_start_offset <= high_watermark == log_end_offset``; ``last_stable_offset <= high_watermark``.

    The high watermark is what a single-replica leader would compute on becoming leader
    (``Partition.maybeIncrementLeaderHW`` with an ISR of one): the log end offset, one past the last complete
    batch of the last segment. A ``replication-offset-checkpoint`` entry below it (a broker killed between two
    checkpoints, or a follower's copy) is reported by ``high_watermark_note`` and not used to hide records.
    Offsets are computed on first use and kept: the view is a snapshot of the files at that moment.
    """

    def __init__(
        self, part: PartitionDir, log_start_checkpoint: int | None = None, checkpointed_hw: int | None = None
    ) -> None:
        self._part = part
        self._log_start_checkpoint = log_start_checkpoint
        self.checkpointed_high_watermark = checkpointed_hw
        self._offsets: tuple[int, int] | None = None
        self._lso: int | None = None

    topic = property(lambda self: self._part.topic)
    partition = property(lambda self: self._part.partition)
    directory = property(lambda self: self._part.directory)
    log_dir = property(lambda self: self._part.log_dir)
    name = property(lambda self: self._part.name)
    partition_dir = property(lambda self: self._part)

    def segment_bases(self) -> list[int]:
        """The base offsets of the segments now on disk, ascending."""
        return segment_bases(self.directory)

    def _load_offsets(self) -> tuple[int, int]:
        if self._offsets is None:
            bases = self.segment_bases()
            first = bases[0] if bases else 0
            start = max(first, self._log_start_checkpoint if self._log_start_checkpoint is not None else first)
            end = log_end_offset(self.directory, bases)
            self._offsets = (start, max(start, end if end is not None else start))
        return self._offsets

    @property
    def log_start_offset(self) -> int:
        """The first segment's base, or the checkpointed log start when DeleteRecords moved it further."""
        return self._load_offsets()[0]

    @property
    def log_end_offset(self) -> int:
        """One past the last offset of the last complete batch of the last segment (Kafka's LocalLog)."""
        return self._load_offsets()[1]

    @property
    def high_watermark(self) -> int:
        """The log end offset: a single-replica leader's high watermark (see the class comment)."""
        return self.log_end_offset

    @property
    def high_watermark_note(self) -> str | None:
        """Why the high watermark differs from the checkpointed one, or None when they agree."""
        hw, checkpointed = self.high_watermark, self.checkpointed_high_watermark
        if checkpointed is None:
            if hw > self.log_start_offset:
                return f"derived from the log end: no {REPLICATION_OFFSET_CHECKPOINT} entry"
            return None
        if checkpointed < hw:
            return (
                f"derived from the log end as a single-replica leader does: {REPLICATION_OFFSET_CHECKPOINT} "
                f"says {checkpointed}, {hw - checkpointed} record offset(s) behind the log"
            )
        if checkpointed > hw:
            return f"{REPLICATION_OFFSET_CHECKPOINT} says {checkpointed}, past the log end; capped at the log end"
        return None

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction below the high watermark (else the HW)."""
        if self._lso is None:
            self._lso = last_stable_offset(self.directory, self.log_start_offset, self.high_watermark)
        return self._lso

    def bound(self, isolation: str) -> int:
        """The end of what a fetch with ``isolation`` may return: the HW, or the LSO for read_committed."""
        if isolation not in ISOLATION_LEVELS:
            raise ValueError(f"Unknown isolation level {isolation!r}: expected one of {', '.join(ISOLATION_LEVELS)}")
        return self.last_stable_offset if isolation == "read_committed" else self.high_watermark

    @property
    def size_bytes(self) -> int:
        """The bytes of the segment files now on disk."""
        total = 0
        for base in self.segment_bases():
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(segment_path(self.directory, base, LOG_SUFFIX)).st_size
        return total

    @property
    def segment_count(self) -> int:
        return len(self.segment_bases())

    def read_path(self) -> list[ReadRun]:
        """The segments a consumer from the log start reads, and from where (see ``read_path``)."""
        return read_path(self.directory, self.segment_bases(), self.log_start_offset)

    def offset_for_timestamp(self, timestamp: int, isolation: str = "read_uncommitted") -> int | None:
        """ListOffsets for ``timestamp`` (-2 earliest, -1 latest, -3 max timestamp, or a time in ms)."""
        return offset_for_timestamp(self.directory, timestamp, self.log_start_offset, self.bound(isolation))

    def batches(self, start: int | None = None, isolation: str = "read_uncommitted") -> Iterator:
        """The batches a consumer fetching from ``start`` (default: the log start) receives, up to the
        isolation's bound, along Kafka's read path; with read_committed, aborted ones are left out."""
        start = self.log_start_offset if start is None else start
        end = self.bound(isolation)
        if start < self.log_start_offset or start > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"Received request for offset {start} for partition {self.name}, but we only have log segments "
                f"in the range {self.log_start_offset} to {self.high_watermark}.",
                offset=start,
                path=self.directory,
            )
        aborted = None
        if isolation == "read_committed":
            aborted = AbortedFilter(collect_aborted_txns(self.directory, self.segment_bases(), start, end))
        for _, batch in path_batches(self.directory, self.name, start, end, fail_on_data_loss=True, aborted=aborted):
            yield batch

    def records(self, start: int | None = None, isolation: str = "read_uncommitted") -> Iterator:
        """Every record from ``start`` up to the isolation's bound, as a consumer sees them: control records
        left out, and with read_committed, aborted transactions too (the same as ``Log.records``)."""
        start = self.log_start_offset if start is None else start
        end = self.bound(isolation)
        for batch in self.batches(start, isolation):
            if batch.is_control:
                continue
            for record in batch:
                if start <= record.offset < end:
                    yield record

    def read_range(self, start: int, end: int, *, read_committed: bool = False) -> Iterator[pa.Table]:
        """The records in [start, end) as Arrow tables (see ``read_range``)."""
        return read_range(self.directory, self.name, start, end, fail_on_data_loss=True, read_committed=read_committed)


class ReadOnlyLogDir:
    """One or more Kafka log dirs opened for reading only: the view every command that only reads uses.

    Invariants: opening and using it takes no lock and writes nothing (no ``.lock``, ``meta.properties``,
    checkpoint, clean-shutdown marker, index, snapshot or topic config file), so it works on a read-only file
    system and on a copy of a live broker's dir; a folder that is not a log dir (``log_dir_problem``) is
    refused with KafkaStorageError instead of being turned into one; a partition found in two of the dirs is
    an error, as Kafka refuses it at startup.
    """

    def __init__(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        self.log_dirs = [os.fspath(p) for p in paths]
        if not self.log_dirs:
            raise KafkaStorageError("No log directories given")
        for path in self.log_dirs:
            check_log_dir(path)
        parts = discover(self.log_dirs)
        starts = {d: read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT) for d in self.log_dirs}
        watermarks = {d: read_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT) for d in self.log_dirs}
        self._partitions = {
            key: ReadOnlyPartition(part, starts[part.log_dir].get(key), watermarks[part.log_dir].get(key))
            for key, part in parts.items()
        }
        self._store: TopicConfigStore | None = None
        self._metadata: tuple[ClusterMetadataImage | None] | None = None

    @property
    def clean_shutdown(self) -> bool:
        """Whether every log dir holds Kafka's clean-shutdown marker (the broker stopped cleanly)."""
        return all(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in self.log_dirs)

    def topics(self) -> list[str]:
        """The topics with a partition directory, sorted (the KRaft metadata topic left out, as Kafka does)."""
        return sorted({topic for topic, _ in self._partitions if topic != METADATA_TOPIC})

    def partitions_of(self, topic: str) -> list[ReadOnlyPartition]:
        """The partitions of ``topic`` in partition order; UnknownTopicOrPartitionError when it has none."""
        found = sorted((p for (t, _), p in self._partitions.items() if t == topic), key=lambda p: p.partition)
        if not found:
            raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.")
        return found

    def partition(self, topic: str, partition: int) -> ReadOnlyPartition:
        try:
            return self._partitions[(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"Partition {topic}-{partition} does not exist.") from None

    def _topic_store(self) -> TopicConfigStore:
        if self._store is None:
            self._store = TopicConfigStore([Path(d) for d in self.log_dirs]).load()
        return self._store

    def cluster_metadata(self) -> ClusterMetadataImage | None:
        """The KRaft metadata image of the first log dir holding ``__cluster_metadata-0`` (None without one),
        replayed read-only from its snapshots and log."""
        if self._metadata is None:
            image = None
            for log_dir in self.log_dirs:
                directory = os.path.join(log_dir, METADATA_PARTITION_DIR)
                if os.path.isdir(directory):
                    with contextlib.suppress(KafkaLogError, OSError):
                        image = load_cluster_metadata(directory)
                    break
            self._metadata = (image,)
        return self._metadata[0]

    def topic_id(self, topic: str) -> str | None:
        """The topic id from a partition's ``partition.metadata``, else kafkalog's topic file, else the KRaft
        metadata."""
        for part in self.partitions_of(topic):
            metadata = PartitionMetadataFile(part.directory)
            if metadata.exists():
                with contextlib.suppress(KafkaLogError, OSError, ValueError):
                    return metadata.read()
        state = self._topic_store().get(topic)
        if state is not None:
            return state.topic_id
        image = self.cluster_metadata()
        found = image.topic(topic) if image is not None else None
        return found.topic_id if found is not None else None

    def config_overrides(self, topic: str) -> dict[str, str]:
        """The topic's config overrides as a LogManager would load them (kafkalog.topic_origins): kafkalog's
        record for a topic it created or was given configs for, else a KRaft broker's cluster metadata
        (ConfigRecords), else none known (a ZooKeeper-era dir kept them in ZooKeeper)."""
        parts = self.partitions_of(topic)
        stored = self._topic_store().get(topic)
        directories = [Path(p.directory) for p in parts]
        return dict(resolve_topic(topic, stored, self.cluster_metadata(), directories, len(parts)).state.config)
