"""Loading a broker's log dirs at startup (Kafka's LogManager.loadLogs and the MetaPropertiesEnsemble check), and
closing their logs at shutdown with as many threads.

What is found in the dirs and opened, without deciding what the log manager keeps: the dirs' meta.properties
checked (and written where missing), the topics' partition directories listed, and the logs of one dir opened
in parallel (``num.recovery.threads.per.data.dir`` threads), each from where the dir's root checkpoints and
clean-shutdown marker say it stopped. The log manager registers what opened and decides what an error means.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .dir_checkpoints import read_dir_checkpoint
from .errors import KafkaStorageError
from .layout import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    METADATA_PARTITION_DIR,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    STRAY_DIR_SUFFIX,
    parse_partition_dir,
)
from .logdir import CleanShutdownFile, MetaProperties, initial_meta_properties, verify_meta_properties
from .partition.topic_partition import TopicPartition
from .storage.log import Log

log = logging.getLogger(__name__)


def ensure_meta_properties(log_dirs: Sequence[Path], node_id: int | None) -> dict[Path, MetaProperties]:
    """Check the dirs' meta.properties as Kafka's MetaPropertiesEnsemble.verify does (one cluster id, one node
    id, equal to ``node_id`` if configured, no directory id twice), then write one into each dir that has none,
    alike the others' (KafkaServer / kafka-storage.sh format). Returns every dir's."""
    metas = {d: m for d in log_dirs if (m := MetaProperties.read(d)) is not None}
    verify_meta_properties(metas, node_id)
    taken = {m.directory_id for m in metas.values() if m.directory_id is not None}
    for directory in log_dirs:
        if directory in metas:
            continue
        meta = initial_meta_properties(metas, node_id, taken)
        meta.write(directory)
        metas[directory] = meta
        log.info("Wrote %s (version %d, node id %s)", MetaProperties.path(directory), meta.version, meta.node_id)
        if meta.directory_id is not None:
            taken.add(meta.directory_id)
    return metas


def _is_skipped(name: str) -> bool:
    """Entries of a log dir that are no partition to load: hidden ones, the KRaft metadata partition, and
    partitions being deleted, moved (``-future``) or left behind (``-stray``)."""
    return (
        name.startswith(".")
        or name == METADATA_PARTITION_DIR
        or name.endswith((DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX))
    )


def scan_partition_dirs(log_dirs: Sequence[Path]) -> dict[str, list[tuple[int, Path]]]:
    """Every topic's partition dirs across the log dirs, by a listing (nothing is opened); a dir that cannot be
    listed is passed over (its loading meets the same error and takes it offline)."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for directory in log_dirs:
        try:
            children = sorted(directory.iterdir())
        except OSError:
            continue
        for child in children:
            if _is_skipped(child.name):
                continue
            try:
                topic, partition = parse_partition_dir(child.name)
            except ValueError:
                continue
            if child.is_dir():
                found.setdefault(topic, []).append((partition, child))
    return found


@dataclass(frozen=True)
class PartitionStart:
    """Where one partition's log starts loading from: its root checkpoints' offsets, and whether the broker
    shut down cleanly (then no segment needs recovery)."""

    log_start_offset: int
    recovery_point: int
    high_watermark: int | None
    had_clean_shutdown: bool


OpenLog = Callable[[TopicPartition, Path, PartitionStart], Log]
"""Opens the log of a partition directory (the log manager's, with the topic's configs)."""


@dataclass
class LogDirContents:
    """What one log dir holds at startup: whether it was shut down cleanly (the marker is consumed), its
    partition directories in name order with where each starts, and its ``-delete`` dirs left to remove."""

    clean: bool
    partitions: list[tuple[TopicPartition, Path, PartitionStart]] = field(default_factory=list)
    deleted: list[Path] = field(default_factory=list)


def read_log_dir(directory: Path) -> LogDirContents:
    """List ``directory`` for loading: its partition directories, each with the offsets of the dir's root
    checkpoints and the clean-shutdown marker, which is deleted (a crash from now on is an unclean shutdown)."""
    marker = CleanShutdownFile(directory)
    contents = LogDirContents(clean=marker.exists())
    if contents.clean:
        marker.delete()
    recovery = read_dir_checkpoint(directory, RECOVERY_POINT_CHECKPOINT)
    starts = read_dir_checkpoint(directory, LOG_START_OFFSET_CHECKPOINT)
    high_watermarks = read_dir_checkpoint(directory, REPLICATION_OFFSET_CHECKPOINT)
    for child in sorted(directory.iterdir()):
        if not child.is_dir():
            continue
        if child.name.endswith(DELETE_DIR_SUFFIX) and not child.name.startswith("."):
            contents.deleted.append(child)
        if _is_skipped(child.name):
            continue
        try:
            tp = TopicPartition(*parse_partition_dir(child.name))
        except ValueError:
            log.warning("Skipping %s in log dir %s: not a topic-partition directory", child.name, directory)
            continue
        start = PartitionStart(starts.get(tp, 0), recovery.get(tp, 0), high_watermarks.get(tp), contents.clean)
        contents.partitions.append((tp, child, start))
    return contents


def open_logs(
    partitions: Sequence[tuple[TopicPartition, Path, PartitionStart]], open_log: OpenLog, threads: int
) -> list[tuple[TopicPartition, Path, Log | BaseException]]:
    """Open the log of each of ``partitions`` with ``threads`` threads: per partition, in order, its log or the
    error opening it. Every job has finished when this returns, so that the caller keeps (or closes) each log
    that opened even when another failed."""
    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="log-recovery") as pool:
        futures = [(tp, path, pool.submit(open_log, tp, path, start)) for tp, path, start in partitions]
    opened: list[tuple[TopicPartition, Path, Log | BaseException]] = []
    for tp, path, future in futures:
        error = future.exception()
        opened.append((tp, path, error if error is not None else future.result()))
    return opened


def close_logs(logs: dict[TopicPartition, Log], dir_of: dict[TopicPartition, Path], threads: int) -> None:
    """Flush and close every log, each dir's in a pool of ``threads`` threads of its own, as Kafka's
    LogManager.shutdown closes them (num.recovery.threads.per.data.dir): the fsyncs and file work of one log
    overlap another's, where a serial close of 10,000 partitions took minutes. A log whose dir is offline now is
    logged and left (its dir gets no marker and no checkpoint). Every close has finished when this returns; any
    other error a close raised is raised then.

    When no pool can take work (an atexit hook during interpreter shutdown: "cannot schedule new futures after
    interpreter shutdown", "can't create new thread at interpreter shutdown"), the logs no thread took are
    closed here, one after another: slower, but every log is closed as cleanly."""
    by_dir: dict[Path, list[Log]] = {}
    for tp, log_obj in logs.items():
        by_dir.setdefault(dir_of[tp], []).append(log_obj)
    pools = [ThreadPoolExecutor(max(1, threads), thread_name_prefix=f"log-closing-{d}") for d in by_dir]
    submitted: list[tuple[Log, Future[None]]] = []
    here: list[Log] = []  # closed in this thread: no pool would take them
    try:
        for pool, dir_logs in zip(pools, by_dir.values(), strict=True):
            for lg in dir_logs:
                if here or sys.is_finalizing():
                    here.append(lg)
                    continue
                try:
                    submitted.append((lg, pool.submit(_close, lg)))
                except RuntimeError:  # interpreter shutdown: the job may sit queued with no thread to run it
                    here.append(lg)
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=bool(here))  # queued jobs no thread will run are cancelled
    here += [lg for lg, future in submitted if future.cancelled()]
    error: BaseException | None = None
    for lg in here:
        try:
            _close(lg)
        except Exception as e:  # every other log is closed all the same
            error = error or e
    for _, future in submitted:
        if not future.cancelled():
            future.result()
    if error is not None:
        raise error


def _close(log_obj: Log) -> None:
    try:
        log_obj.close()
    except KafkaStorageError as e:
        log.warning("Error while closing %s: %s", log_obj, e)
