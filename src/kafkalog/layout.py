"""kafkalog's on-disk layout in one place: Kafka's file names, suffixes, markers, checkpoint names, limits and the
parsers of those names (Kafka's ``LogFileUtils``, ``LocalLog`` and ``LogManager`` constants).

A log dir holds ``meta.properties``, the ``.lock`` a running broker holds, the root checkpoints
(``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``, ``replication-offset-checkpoint``,
``cleaner-offset-checkpoint``) and one directory per partition, ``<topic>-<partition>``. A partition directory holds
its segments, each named by its base offset zero-padded to 20 digits (``.log``, ``.index``, ``.timeindex``,
``.txnindex``), producer snapshots (``.snapshot``), ``leader-epoch-checkpoint`` and ``partition.metadata``.
``.deleted``, ``.cleaned`` and ``.swap`` are appended to a full file name while a file is in transit;
``-delete``, ``-future`` and ``-stray`` end the renamed directory of a deleted, moving or stray partition.

Every module that names a file of a log dir, or a limit of the formats, takes it from here. The module imports
nothing of kafkalog, so every layer (the record layer's limits included) may use it.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

# ----- limits of the formats (Java's int and long) -----------------------------------------------------------
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
"""Java's Integer.MAX_VALUE: the largest relative offset, segment position, batch size, index entry."""
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
"""Java's Long.MAX_VALUE."""

# ----- segment files and the suffixes of files in transit -----------------------------------------------------
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

# ----- renamed partition directories --------------------------------------------------------------------------
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
RENAMED_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)
_RENAMED_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)(-delete|-future|-stray)$")
SEGMENT_FILE = re.compile(r"^(\d{20,})\.log$")
"""A segment's ``.log`` file name; group 1 is its base offset."""
PARTITION_DIR_NAME = re.compile(r"^(.+)-(\d+)$")
"""A partition directory's name, ``<topic>-<partition>``."""

# ----- files of a log dir -------------------------------------------------------------------------------------
META_PROPERTIES_FILE = "meta.properties"
LOCK_FILE = ".lock"
"""Held (flock) by the running LogManager or Kafka broker that owns the log dir."""
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
"""Written at a clean shutdown, removed at startup: without it the next start recovers the logs."""
TOPICS_FILE = "kafkalog-topics.json"
"""kafkalog's topic configs of a log dir started without KRaft metadata (``topic_store.TopicConfigStore``)."""
WRITE_LOCK_FILE = ".kafkalog-write.lock"
"""The Spark sink's lock: in a partition dir for its appends, in a log dir for its root checkpoints."""
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
ROOT_CHECKPOINTS = (
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
)
"""The offset checkpoints at the root of a log dir, each ``version``, ``count``, then ``topic partition offset``."""
LOG_DIR_ROOT_FILES = (META_PROPERTIES_FILE, *ROOT_CHECKPOINTS, TOPICS_FILE)
"""The files a Kafka broker (or kafkalog) keeps at the root of every log dir it has started on."""

# ----- files of a partition directory -------------------------------------------------------------------------
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"

# ----- the KRaft metadata partition ---------------------------------------------------------------------------
METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = f"{METADATA_TOPIC}-0"
KRAFT_SNAPSHOT_SUFFIX = ".checkpoint"
"""A KRaft snapshot, ``<20-digit end offset>-<10-digit epoch>.checkpoint`` (Kafka's ``Snapshots.SUFFIX``)."""


def filename_prefix(offset: int) -> str:
    """The base offset as Kafka prints it in file names: at least 20 digits, zero-padded."""
    return f"{offset:020d}"


def segment_file(directory: str | os.PathLike[str], offset: int, suffix: str, extra: str = "") -> Path:
    """``<dir>/<20-digit offset><suffix><extra>``, e.g. extra='.swap'."""
    return Path(directory) / f"{filename_prefix(offset)}{suffix}{extra}"


def offset_from_filename(name: str | Path) -> int:
    """The base offset of a segment or snapshot file: the digits before the first '.'."""
    return int(Path(name).name.split(".", 1)[0])


def parse_partition_dir(name: str) -> tuple[str, int]:
    """(topic, partition) of ``<topic>-<partition>``, split at the last '-', or of a renamed directory."""
    base = Path(name).name
    match = _RENAMED_DIR.match(base)
    if match:
        base = f"{match.group(1)}-{match.group(2)}"
    topic, sep, partition = base.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"Found directory {name}, '{base}' is not in the form of topic-partition")
    return topic, int(partition)


def deleted_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>.<uuid32hex>-delete``, the topic cut so the name stays within 255 characters."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[: 255 - len(suffix)] + suffix
