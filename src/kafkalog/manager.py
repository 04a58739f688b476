"""The broker's storage side (Kafka's LogManager): log dirs, topics, and Kafka's background work.

``LogManager(log_dirs, config, clock)`` locks each log dir, checks that the dirs' ``meta.properties`` are of one
broker of one cluster (and writes one where a dir has none), loads every partition in it (in parallel,
recovering only what an unclean shutdown requires), and schedules retention, flushing and the
checkpoints on Kafka's intervals. With ``clock=MockTime(...)`` every task runs when the clock passes
its due time, so the whole schedule is testable.

Topics kafkalog did not create take their ids and configs from the KRaft cluster metadata in the dirs, when
there is one (kafkalog.topic_origins); where their configs cannot be known, no deleting retention runs on them
until the operator confirms (``kafkalog.adopted.topics.retention.enable``, or setting the topic's configs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

from .cleaner.explain import CompactionExplanation, explain_compaction
from .cleaner.log_cleaner import CleanerPassStats, LogCleaner
from .clock import SYSTEM_TIME, Time
from .dir_checkpoints import write_dir_checkpoint
from .errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from .layout import (
    INT64_MAX,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    deleted_dir_name,
)
from .log_loading import (
    PartitionStart,
    close_logs,
    ensure_meta_properties,
    open_logs,
    read_log_dir,
    scan_partition_dirs,
)
from .logdir import (
    CleanShutdownFile,
    DeferredPartitionMetadata,
    LogDirLock,
    MetaProperties,
    PartitionMetadataFile,
    has_collision_chars,
    new_uuid,
    unify_collision_chars,
    validate_topic_name,
)
from .manager_results import ConsumerRecord, PartitionDescription, TopicDescription
from .partition.topic_partition import TopicPartition
from .record import RecordBatchBuilder, default_partition
from .replica_manager import ReplicaManager
from .retention import RetentionExplanation, explain_retention
from .scheduler import KafkaScheduler
from .storage import metadata_changes
from .storage.checkpoints import CheckpointError
from .storage.cluster_metadata import ClusterMetadataImage
from .storage.config import BrokerConfig, LogConfig
from .storage.log import Log
from .topic_origins import INTERNAL_TOPIC_CONFIGS, internal_topic_configs, read_cluster_metadata, resolve_topic
from .topic_store import ORIGIN_KAFKALOG, ORIGIN_UNKNOWN, TopicConfigStore, TopicState

log = logging.getLogger(__name__)


class LogManager:
    """Every partition log in ``log_dirs``, and the background tasks that keep them."""

    def __init__(
        self, log_dirs=None, config: dict | str | Path | BrokerConfig | None = None, clock: Time | None = None
    ) -> None:
        self.broker = _broker_config(config, log_dirs)
        dirs = log_dirs if log_dirs is not None else self.broker.log_dirs
        if isinstance(dirs, str | Path):
            dirs = [p for p in str(dirs).split(",") if p]
        self.log_dirs = [Path(d).resolve() for d in dirs]
        if not self.log_dirs:
            raise KafkaStorageError("No log directories configured (log.dirs)")
        self.clock = clock or SYSTEM_TIME
        mock_scheduler = getattr(self.clock, "scheduler", None)
        self.scheduler = mock_scheduler if mock_scheduler is not None else KafkaScheduler(clock=self.clock)
        self._owns_scheduler = mock_scheduler is None
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._partition_counts: dict[str, int] = {}  # logs per topic, kept with _logs (produce needs it per call)
        # partition number -> TopicPartition per topic, kept with _logs: a topic's partitions without a scan of
        # every log (describing every topic of a broker with 10,000 partitions was topics x partitions)
        self._topic_partitions: dict[str, dict[int, TopicPartition]] = {}
        self._locks: list[LogDirLock] = []
        self._tasks: list[object] = []
        self._store = TopicConfigStore(self.log_dirs)
        self._round_robin = itertools.count()
        self._next_retention_check_ms: int | None = None
        self._started = False
        self._clean_start: dict[Path, bool] = {}
        self.cleaner: LogCleaner | None = None
        self._offline_dirs: dict[Path, str] = {}  # Kafka's LogDirFailureChannel: failed dir -> why
        self.cluster_metadata: ClusterMetadataImage | None = None  # the KRaft metadata read at startup, if any
        self._unconfirmed: dict[str, str] = {}  # topics whose configs are unknown -> why
        self.meta_properties: dict[Path, MetaProperties] = {}  # each log dir's, checked at startup
        self._offline_lock = threading.Lock()
        # The one path for appends and reads: a Partition per log, led by this node (kafkalog.replica_manager).
        self.replica_manager = ReplicaManager(self)

    # ----- startup and shutdown --------------------------------------------------------------
    def __enter__(self) -> LogManager:
        self.startup()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def startup(self) -> None:
        """Lock the log dirs, load every partition, and schedule Kafka's background tasks.

        As Kafka's LogManager.loadLogs, a log dir whose loading hits an I/O error starts offline (its loaded
        logs refuse requests; the next startup recovers it) while the others serve; if every dir fails, the
        startup fails with KafkaStorageError.
        """
        with self._lock:
            if self._started:
                return
            self._offline_dirs.clear()
            failed: dict[Path, Exception] = {}
            try:
                for directory in self.log_dirs:
                    directory.mkdir(parents=True, exist_ok=True)
                    lock = LogDirLock(directory)
                    lock.acquire()
                    self._locks.append(lock)
                self._ensure_meta_properties()
                self._store.load()
                self.cluster_metadata = read_cluster_metadata(self.log_dirs)
                self._resolve_topics()
                for directory in self.log_dirs:
                    try:
                        self._load_dir(directory)
                    except (OSError, KafkaStorageError) as e:
                        if not _is_io_error(e):
                            raise
                        log.error("Error while loading log dir %s: %s", directory, e)
                        failed[directory] = e
                if len(failed) == len(self.log_dirs):
                    raise KafkaStorageError(
                        "None of the log dirs could be loaded: " + "; ".join(f"{d}: {e}" for d, e in failed.items())
                    )
            except BaseException:
                self._close_loaded_logs()
                self._release_locks()
                raise
            for directory, error in failed.items():
                self.handle_log_dir_failure(directory, error)
            # Kafka's cleaner manager creates cleaner-offset-checkpoint at startup, empty until a log is cleaned.
            self.cleaner = LogCleaner(self.broker, self._online_logs, self._dir_of.get, self.clock, self.log_dirs)
            if self._owns_scheduler:
                self.scheduler.startup()
            self._schedule_tasks()
            if self.broker.log_cleaner_enable:
                self.cleaner.startup(None if self._owns_scheduler else self.scheduler)
            self._started = True

    def _ensure_meta_properties(self) -> None:
        configured = self.broker.node_id if self.broker.node_id >= 0 else None
        self.meta_properties = ensure_meta_properties(self.log_dirs, configured)

    def _resolve_topics(self) -> None:
        """Decide each topic's source of configs before its logs open (kafkalog.topic_origins) and store what
        changed; warn about the topics whose configs are unknown."""
        self._unconfirmed.clear()
        changed: dict[str, TopicState] = {}
        for topic, parts in sorted(scan_partition_dirs(self.log_dirs).items()):
            stored = self._store.get(topic)
            partitions = max(p for p, _ in parts) + 1
            if stored is not None:
                partitions = max(partitions, stored.partitions)
            resolution = resolve_topic(topic, stored, self.cluster_metadata, [path for _, path in parts], partitions)
            if resolution.state != stored:
                changed[topic] = resolution.state
            if resolution.state.origin == ORIGIN_KAFKALOG:  # kafkalog's own topic: its id is known, so heal
                _write_missing_metadata(topic, [path for _, path in parts], resolution.state.topic_id)
            if resolution.state.origin == ORIGIN_UNKNOWN and topic not in INTERNAL_TOPIC_CONFIGS:
                self._unconfirmed[topic] = resolution.reason or "its configs are unknown"  # internal: compacted
        if changed:
            self._store.put_all(changed)
        if self._unconfirmed and not self.broker.kafkalog_adopted_topics_retention_enable:
            log.warning(
                "The configs of %d topics in these log dirs are unknown to kafkalog (%s): %s. Their retention, "
                "which deletes segments, does not run until their configs are confirmed: set them (kafkalog topics "
                "--log-dir DIR --alter --topic NAME --config k=v) or, if the broker defaults are right for them, set "
                "kafkalog.adopted.topics.retention.enable=true.",
                len(self._unconfirmed),
                "; ".join(sorted(set(self._unconfirmed.values()))),
                ", ".join(sorted(self._unconfirmed)),
            )

    @property
    def cluster_id(self) -> str | None:
        """The cluster id the log dirs' meta.properties agree on (None before startup, or in ZooKeeper-era files
        that have none)."""
        return next((m.cluster_id for m in self.meta_properties.values() if m.cluster_id is not None), None)

    @property
    def unconfirmed_topics(self) -> dict[str, str]:
        """The topics whose configs kafkalog cannot know (e.g. a ZooKeeper-era broker's), each with why. No
        deleting retention runs on them unless kafkalog.adopted.topics.retention.enable is true."""
        return dict(self._unconfirmed)

    def _load_dir(self, directory: Path) -> None:
        """Open the partition logs of ``directory`` and register them; then raise the first error, if any (a
        log that opened is registered all the same, to be closed with the others or marked offline with its dir)."""
        contents = read_log_dir(directory)
        self._clean_start[directory] = contents.clean
        for path in contents.deleted:
            self._schedule_dir_removal(path, 0)
        threads = int(self.broker.num_recovery_threads_per_data_dir)
        error: BaseException | None = None
        configs: dict[str, LogConfig] = {}  # one (immutable) LogConfig per topic, not one parse per partition

        def open_log(tp: TopicPartition, path: Path, start: PartitionStart) -> Log:
            config = configs.get(tp.topic)
            if config is None:
                config = configs[tp.topic] = self._log_config(tp.topic)
            return self._open_log(tp, path, start, config)

        for tp, path, opened in open_logs(contents.partitions, open_log, threads):
            if isinstance(opened, BaseException):
                error = error or opened
                continue
            if tp in self._logs:
                opened.close()
                error = error or KafkaStorageError(
                    f"Duplicate log directories for {tp} are found in both {self._dir_of[tp]} and {path}."
                )
                continue
            self._register_log(tp, opened, directory)
            if self._store.get(tp.topic) is None:
                self._adopt_topic(tp, path)
        if error is not None:
            raise error

    def _open_log(self, tp: TopicPartition, path: Path, start: PartitionStart, config: LogConfig) -> Log:
        return Log.open(
            path,
            config,
            self.clock,
            log_start_offset=start.log_start_offset,
            recovery_point=start.recovery_point,
            high_watermark=start.high_watermark,
            had_clean_shutdown=start.had_clean_shutdown,
            scheduler=self.scheduler,
        )

    def _adopt_topic(self, tp: TopicPartition, path: Path) -> None:
        """A partition directory kafkalog did not create, missed by _resolve_topics: its topic, configs unknown."""
        partitions = max(self._topic_partitions.get(tp.topic, {}), default=0) + 1
        resolution = resolve_topic(tp.topic, None, self.cluster_metadata, [path], partitions)
        self._store.put(tp.topic, resolution.state)
        if resolution.state.origin == ORIGIN_UNKNOWN and tp.topic not in INTERNAL_TOPIC_CONFIGS:
            self._unconfirmed[tp.topic] = resolution.reason or "its configs are unknown"

    def _log_config(self, topic: str) -> LogConfig:
        """The topic's effective configs: its stored overrides (internal topics kept compacted) over the broker's."""
        state = self._store.get(topic)
        return LogConfig(internal_topic_configs(topic, dict(state.config) if state else {}), broker=self.broker)

    def _retention_allowed(self, topic: str) -> bool:
        """False for a topic whose configs are unknown, until the operator confirms them."""
        return topic not in self._unconfirmed or self.broker.kafkalog_adopted_topics_retention_enable

    def _schedule_tasks(self) -> None:
        b = self.broker
        delay = int(b.log_initial_task_delay_ms)
        self._next_retention_check_ms = self.clock.milliseconds() + delay
        tasks = [
            ("kafka-log-retention", self._scheduled_cleanup, int(b.log_retention_check_interval_ms)),
            ("kafka-log-flusher", self.flush_dirty_logs, int(b.log_flush_scheduler_interval_ms)),
            (
                "kafka-recovery-point-checkpoint",
                self.checkpoint_recovery_points,
                int(b.log_flush_offset_checkpoint_interval_ms),
            ),
            (
                "kafka-log-start-offset-checkpoint",
                self.checkpoint_log_start_offsets,
                int(b.log_flush_start_offset_checkpoint_interval_ms),
            ),
            (
                "highwatermark-checkpoint",
                self.checkpoint_high_watermarks,
                int(b.replica_high_watermark_checkpoint_interval_ms),
            ),
        ]
        for name, fn, period in tasks:
            if period >= INT64_MAX // 2:
                continue  # Kafka's Long.MAX default: the task never comes due
            self._tasks.append(self.scheduler.schedule(name, fn, delay, period))

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker, release the dirs."""
        with self._lock:
            if not self._started:
                return
            for task in self._tasks:
                task.cancel()
            self._tasks.clear()
            if self.cleaner is not None:
                self.cleaner.shutdown()
            if self._owns_scheduler:
                self.scheduler.shutdown()
            close_logs(self._logs, self._dir_of, int(self.broker.num_recovery_threads_per_data_dir))
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
            self.checkpoint_high_watermarks()
            for directory in self.log_dirs:
                if directory not in self._offline_dirs:  # an offline dir is recovered at the next start
                    CleanShutdownFile(directory).write(0)
            self._forget_logs()
            self._release_locks()
            self._started = False

    def _close_loaded_logs(self) -> None:
        """Close the logs a failed startup had opened (their files stay as they are)."""
        for log_obj in self._logs.values():
            with contextlib.suppress(Exception):
                log_obj.mark_offline("the log manager failed to start")
                log_obj.close()
        self._forget_logs()

    def _register_log(self, tp: TopicPartition, log_obj: Log, directory: Path) -> None:
        self._logs[tp] = log_obj
        self._dir_of[tp] = directory
        self._partition_counts[tp.topic] = self._partition_counts.get(tp.topic, 0) + 1
        self._topic_partitions.setdefault(tp.topic, {})[tp.partition] = tp
        metadata_changes.note_change()
        self._attach(log_obj, directory)
        self.replica_manager.add_partition(tp, log_obj)

    def _forget_logs(self) -> None:
        self.replica_manager.clear()
        self._logs.clear()
        self._dir_of.clear()
        self._partition_counts.clear()
        self._topic_partitions.clear()
        metadata_changes.note_change()

    def _release_locks(self) -> None:
        for lock in self._locks:
            lock.release()
        self._locks.clear()

    # ----- background tasks ------------------------------------------------------------------
    def cleanup_logs(self) -> int:
        """One retention pass over every non-compacted log, now; return the segments deleted.

        As in Kafka, compacted logs (``compact`` or ``compact,delete``) get their retention from the log
        cleaner, after each clean, so that the two never work on one log at the same time.
        """
        deleted = 0
        for tp, log_obj in self._online_logs().items():
            if not log_obj.config.compact and self._retention_allowed(tp.topic):
                try:
                    deleted += log_obj.delete_old_segments()
                except OSError as e:
                    self.handle_log_dir_failure(log_obj.directory.parent, e)
        return deleted

    def clean_once(self) -> CleanerPassStats:
        """One log-cleaner pass, now: every eligible compacted log cleaned once (dirtiest first), then the
        retention of compacted logs. Returns what it read, wrote and kept."""
        self._check_started()
        return self.cleaner.clean_once()

    def _scheduled_cleanup(self) -> None:
        """The kafka-log-retention task: a pass, then the time of the next one (fixed rate)."""
        self._next_retention_check_ms = self.clock.milliseconds() + int(self.broker.log_retention_check_interval_ms)
        self.cleanup_logs()

    def flush_dirty_logs(self) -> None:
        """Flush every log whose flush.ms has passed (the kafka-log-flusher task)."""
        for log_obj in self._online_logs().values():
            try:
                log_obj.flush_if_due()
            except KafkaStorageError as e:  # its dir is offline now; the other dirs go on
                log.warning("%s", e)

    def _write_checkpoint(self, name: str) -> None:
        """Write root checkpoint ``name`` into every online log dir, for its logs (kafkalog.dir_checkpoints)."""
        for directory in self.log_dirs:
            if directory in self._offline_dirs:
                continue  # as Kafka: checkpoints are written for live dirs only
            logs = [(tp, lg) for tp, lg in list(self._logs.items()) if self._dir_of.get(tp) == directory]
            try:
                write_dir_checkpoint(directory, name, logs)
            except CheckpointError as e:
                if not isinstance(e.__cause__, OSError):
                    raise
                self.handle_log_dir_failure(directory, e)
                log.error("Disk error while writing to %s checkpoint file in directory %s: %s", name, directory, e)

    # ----- log dir failures (Kafka's LogDirFailureChannel and ReplicaManager.handleLogDirFailure) ------
    @property
    def offline_log_dirs(self) -> list[Path]:
        """The log dirs taken offline by an I/O error since startup (a restart brings them back)."""
        with self._offline_lock:
            return list(self._offline_dirs)

    @property
    def online_log_dirs(self) -> list[Path]:
        with self._offline_lock:
            return [d for d in self.log_dirs if d not in self._offline_dirs]

    def offline_reason(self, directory) -> str | None:
        with self._offline_lock:
            return self._offline_dirs.get(Path(directory).resolve())

    def handle_log_dir_failure(self, directory, error: Exception) -> None:
        """Take ``directory`` offline: every log in it refuses appends and reads with KafkaStorageError from
        now on; the logs of the other dirs keep serving. Nothing more is written to it (no checkpoint, no
        clean-shutdown marker), so the next startup recovers it."""
        directory = Path(directory).resolve()
        reason = str(error)
        with self._offline_lock:
            if directory in self._offline_dirs or directory not in self.log_dirs:
                return
            self._offline_dirs[directory] = reason
        log.error("Stopping serving logs in dir %s: %s", directory, reason)
        for tp, log_obj in list(self._logs.items()):
            if self._dir_of.get(tp) == directory:
                log_obj.mark_offline(f"log dir {directory} is offline after an I/O error")
        if not self.online_log_dirs:
            log.error("Shutdown broker because all log dirs in %s have failed", ", ".join(map(str, self.log_dirs)))

    def _attach(self, log_obj: Log, directory: Path) -> None:
        log_obj.on_io_error = lambda _log, error: self.handle_log_dir_failure(directory, error)

    def _online_logs(self) -> dict[TopicPartition, Log]:
        return {tp: lg for tp, lg in list(self._logs.items()) if not lg.is_offline}

    def checkpoint_recovery_points(self) -> None:
        self._write_checkpoint(RECOVERY_POINT_CHECKPOINT)

    def checkpoint_log_start_offsets(self) -> None:
        self._write_checkpoint(LOG_START_OFFSET_CHECKPOINT)

    def checkpoint_high_watermarks(self) -> None:
        self._write_checkpoint(REPLICATION_OFFSET_CHECKPOINT)

    def _schedule_dir_removal(self, path: Path, delay_ms: int) -> None:
        def remove() -> None:
            shutil.rmtree(path, ignore_errors=True)
            log.info("Deleted log directory %s", path)

        if self._started or not self._owns_scheduler:
            self.scheduler.schedule_once(f"kafka-delete-logs-{path.name}", remove, delay_ms)
        else:
            remove()

    # ----- topics ----------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None) -> TopicDescription:
        """Create a topic: partitions spread over the log dirs, each with its partition.metadata."""
        validate_topic_name(name)
        if partitions < 1:
            raise InvalidPartitionsError(f"Number of partitions must be larger than 0, not {partitions}")
        overrides = {k: str(v) for k, v in (config or {}).items()}
        log_config = LogConfig(overrides, broker=self.broker)
        with self._lock:
            self._check_started()
            if self._store.get(name) is not None:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            self._check_collision(name)
            topic_id = new_uuid()
            self._create_partition_logs(name, range(partitions), topic_id, log_config)
            self._store.put(name, TopicState(topic_id, partitions, overrides))
            return self.describe_topic(name)

    def _check_collision(self, name: str) -> None:
        """Kafka's controller refuses a name that differs from an existing topic's only by '.' versus '_'
        (ReplicationControlManager.validateNewTopicNames): their metric names would be the same."""
        if not has_collision_chars(name):
            return
        unified = unify_collision_chars(name)
        for existing in sorted({tp.topic for tp in self._logs} | set(self._store.topics())):
            if existing != name and unify_collision_chars(existing) == unified:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {existing}")

    def get_or_create_log(self, tp: TopicPartition, topic_id: str, config: dict | None = None) -> Log:
        """The local log of ``tp``, created when missing (Kafka's LogManager.getOrCreateLog): a replica a cluster's
        controller assigned to this broker. ``topic_id`` is the cluster's id of the topic (its partition.metadata);
        ``config`` its overrides. The topic's partition count grows to cover ``tp``."""
        with self._lock:
            self._check_started()
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            state = self._store.get(tp.topic)
            overrides = {
                k: str(v) for k, v in (config if config is not None else (state.config if state else {})).items()
            }
            log_config = LogConfig(overrides, broker=self.broker)
            directory = self._next_log_dir(self._partitions_per_dir())
            path = directory / f"{tp.topic}-{tp.partition}"
            path.mkdir(parents=True, exist_ok=True)
            log_obj = Log.open(path, log_config, self.clock, scheduler=self.scheduler, had_clean_shutdown=True)
            metadata = DeferredPartitionMetadata([path], topic_id)
            metadata.attach([log_obj])
            self._register_log(tp, log_obj, directory)
            metadata.schedule(self.scheduler)
            count = max(tp.partition + 1, state.partitions if state is not None else 0)
            self._store.put(tp.topic, TopicState(topic_id, count, overrides))
            return log_obj

    def create_partitions(self, name: str, count: int) -> TopicDescription:
        """Grow a topic to ``count`` partitions (Kafka's CreatePartitions): the new ones spread over the log dirs,
        with the topic's id and configs. A count not above the current one is InvalidPartitionsError."""
        with self._lock:
            self._check_started()
            state = self._store.get(name)
            if state is None:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
            current = len(self._partitions_of(name))
            if count < current:
                raise InvalidPartitionsError(
                    f"Topic currently has {current} partitions, which is higher than the requested {count}."
                )
            if count == current:
                raise InvalidPartitionsError(f"Topic already has {current} partitions.")
            log_config = self._log_config(name)
            self._create_partition_logs(name, range(current, count), state.topic_id, log_config)
            self._store.put(name, dataclasses.replace(state, partitions=count))  # same configs, same origin
            return self.describe_topic(name)

    def _create_partition_logs(self, name: str, numbers: range, topic_id: str, log_config: LogConfig) -> None:
        """Create the new partitions ``numbers`` of topic ``name``, spread over the online log dirs: their
        directories and logs, registered (made leaders: each records its epoch 0 at offset 0), and their
        partition.metadata and leader-epoch-checkpoint files written by the scheduler soon after
        (DeferredPartitionMetadata: off a broker's event loop, yet before any record reaches them)."""
        counts = self._partitions_per_dir()
        placed: list[tuple[int, Path, Path]] = []
        for p in numbers:
            directory = self._next_log_dir(counts)
            counts[directory] += 1
            path = directory / f"{name}-{p}"
            path.mkdir(parents=True, exist_ok=False)
            placed.append((p, directory, path))
        metadata = DeferredPartitionMetadata([path for _, _, path in placed], topic_id)
        logs = [
            Log.open(path, log_config, self.clock, scheduler=self.scheduler, had_clean_shutdown=True)
            for *_, path in placed
        ]
        metadata.attach(logs)
        for (p, directory, _), log_obj in zip(placed, logs, strict=True):
            self._register_log(TopicPartition(name, p), log_obj, directory)
        metadata.schedule(self.scheduler)  # after the logs were made leaders: the pass writes their epochs too

    def _partitions_per_dir(self) -> dict[Path, int]:
        counts = {d: 0 for d in self.log_dirs}
        for directory in self._dir_of.values():
            counts[directory] += 1
        return counts

    def _next_log_dir(self, counts: dict[Path, int]) -> Path:
        """The online log dir with the fewest partitions in ``counts`` (Kafka's nextLogDirs)."""
        online = self.online_log_dirs
        if not online:
            raise KafkaStorageError(f"No log directory is online: {', '.join(map(str, self.log_dirs))} are offline")
        return min(online, key=lambda d: (counts[d], self.log_dirs.index(d)))

    def delete_topic(self, name: str) -> None:
        """Close the topic's logs, rename their dirs to ``-delete`` and remove them after file.delete.delay.ms."""
        with self._lock:
            self._check_started()
            partitions = self._partitions_of(name)
            delay = LogConfig({}, broker=self.broker).file_delete_delay_ms
            for tp in partitions:
                # As Kafka's asyncDelete: out of the map first, so that neither the cleaner nor a retention pass
                # can pick the log up again once its clean has been aborted.
                log_obj = self._logs.pop(tp)
                self.replica_manager.remove_partition(tp)
                self._partition_counts[tp.topic] -= 1
                self._forget_partition(tp)
                directory = self._dir_of[tp]
                self.cleaner.remove_partition(tp, directory)
                del self._dir_of[tp]
                log_obj.close()
                target = directory / deleted_dir_name(tp.topic, tp.partition)
                log_obj.directory.rename(target)
                self._schedule_dir_removal(target, delay)
            self._store.remove(name)
            self._unconfirmed.pop(name, None)
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()

    def topics(self) -> list[str]:
        return sorted(self._store.topics())

    def _forget_partition(self, tp: TopicPartition) -> None:
        numbers = self._topic_partitions.get(tp.topic)
        if numbers is not None:
            numbers.pop(tp.partition, None)
            if not numbers:
                del self._topic_partitions[tp.topic]
        metadata_changes.note_change()

    def _partitions_of(self, topic: str) -> list[TopicPartition]:
        numbers = self._topic_partitions.get(topic, {})
        partitions = [numbers[p] for p in sorted(numbers)]
        if not partitions:
            raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.")
        return partitions

    def topic_id_and_partitions(self, name: str) -> tuple[str, list[TopicPartition]]:
        """A topic's id and its partitions in order, reading no log: what a Metadata answer needs of every topic
        (describe_topic also sizes every log and copies the config; for 10,000 partitions that was most of the
        time of an all-topics Metadata answer)."""
        state = self._store.get(name)
        if state is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return state.topic_id, self._partitions_of(name)

    def describe_topic(self, name: str) -> TopicDescription:
        state = self._store.get(name)
        if state is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        parts = []
        for tp in self._partitions_of(name):
            lg = self._logs[tp]
            parts.append(
                PartitionDescription(
                    tp.partition,
                    str(self._dir_of[tp]),
                    lg.log_start_offset,
                    lg.log_end_offset,
                    lg.high_watermark,
                    lg.size,
                    len(lg.segments),
                )
            )
        config = self._logs[TopicPartition(name, parts[0].partition)].config.to_dict() if parts else {}
        return TopicDescription(name, state.topic_id, parts, dict(state.config), config)

    def alter_topic_config(self, name: str, updates: dict) -> TopicDescription:
        """Change topic config overrides at runtime (a None value removes one); persisted and applied now.

        From then on kafkalog's store is the source of this topic's configs (origin ``kafkalog``): for a topic
        whose configs were unknown, this is the operator confirming them, and its retention runs again."""
        with self._lock:
            state = self._store.get(name)
            if state is None:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
            overrides = dict(state.config)
            for key, value in updates.items():
                if value is None:
                    overrides.pop(key, None)
                else:
                    overrides[key] = str(value)
            log_config = LogConfig(internal_topic_configs(name, overrides), broker=self.broker)
            for tp in self._partitions_of(name):
                self._logs[tp].config = log_config
            self._store.put(name, TopicState(state.topic_id, state.partitions, overrides, ORIGIN_KAFKALOG))
            self._unconfirmed.pop(name, None)
            return self.describe_topic(name)

    def get_log(self, topic: str, partition: int = 0) -> Log:
        try:
            return self._logs[TopicPartition(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"Partition {topic}-{partition} does not exist.") from None

    def _check_started(self) -> None:
        if not self._started:
            raise KafkaStorageError("The log manager is not started (use it as a context manager, or startup())")

    # ----- data ------------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers=(),
        partition: int | None = None,
        timestamp: int | None = None,
        *,
        acks: int = -1,
    ) -> tuple[int, int]:
        """Append one record through the replica manager; return (partition, offset). A key picks the partition
        as Kafka's default partitioner does (murmur2); without a key or partition, partitions take turns.
        ``acks`` is the producer's (default -1, all in-sync replicas, Kafka's producer default): NotEnoughReplicasError
        when the topic's min.insync.replicas exceeds the ISR (this node), InvalidRequiredAcksError outside 0/1/-1."""
        count = self._partition_counts.get(topic, 0)
        if not count:
            raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.")
        if partition is None:
            partition = default_partition(key, count) if key is not None else next(self._round_robin) % count
        elif not 0 <= partition < count:
            raise InvalidPartitionsError(
                f"Partition {partition} of topic '{topic}' does not exist ({count} partitions)"
            )
        builder = RecordBatchBuilder(clock=self.clock)
        builder.append(key, value, timestamp, headers)
        tp = TopicPartition(topic, partition)
        result = self.replica_manager.append_records({tp: builder.build()}, acks)[tp]
        if result.error is not None:
            raise result.error
        return partition, result.info.first_offset

    def consume(
        self,
        topic: str,
        partition: int | None = None,
        from_offset: int | None = None,
        isolation: str = "read_uncommitted",
    ) -> Iterator[ConsumerRecord]:
        """Every record of one partition (or of each partition in turn) from ``from_offset`` or the log start, up
        to the high watermark (read_uncommitted) or the last stable offset (read_committed), as a consumer reads."""
        partitions = [partition] if partition is not None else [tp.partition for tp in self._partitions_of(topic)]
        for p in partitions:
            for record in self.replica_manager.get_partition(topic, p).records(from_offset, isolation):
                yield ConsumerRecord(
                    topic, p, record.offset, record.timestamp, record.key, record.value, record.headers
                )

    # ----- explanations ------------------------------------------------------------------------
    def explain_retention(self, topic: str, partition: int | None = None) -> list[RetentionExplanation]:
        """Why each segment is still here and when it will go, per partition (see kafkalog.retention)."""
        partitions = [partition] if partition is not None else [tp.partition for tp in self._partitions_of(topic)]
        now = self.clock.milliseconds()
        interval = int(self.broker.log_retention_check_interval_ms)
        next_check = self._next_retention_check_ms if self._next_retention_check_ms is not None else now
        explanations = [
            explain_retention(
                self.get_log(topic, p), now_ms=now, check_interval_ms=interval, next_check_ms=max(next_check, now)
            )
            for p in partitions
        ]
        if self._retention_allowed(topic):
            return explanations
        why = self._unconfirmed[topic]
        note = (
            f"Retention does not run on this topic: its configs are unknown ({why}); confirm them by setting them "
            "or with kafkalog.adopted.topics.retention.enable=true. Once confirmed: "
        )
        return [dataclasses.replace(e, next_deletion_ms=None, summary=note + e.summary) for e in explanations]

    def explain_compaction(self, topic: str, partition: int = 0, *, estimate: bool = True) -> CompactionExplanation:
        """The cleaner's view of one partition: dirty ratio, why it is or is not eligible now, and (with
        ``estimate``) the size one clean would leave, from a dry run (see kafkalog.cleaner.explain)."""
        self._check_started()
        log_obj = self.get_log(topic, partition)
        return explain_compaction(self.cleaner, TopicPartition(topic, partition), log_obj, estimate=estimate)


def _is_io_error(error: BaseException) -> bool:
    """An I/O error, or Kafka's KafkaStorageError wrapping one (what takes a log dir offline)."""
    return isinstance(error, OSError) or (isinstance(error, KafkaStorageError) and isinstance(error.__cause__, OSError))


def _broker_config(config, log_dirs) -> BrokerConfig:
    if isinstance(config, BrokerConfig):
        return config
    if isinstance(config, str | Path):
        return BrokerConfig.from_file(config)
    values = dict(config or {})
    if log_dirs is not None and "log.dirs" not in values and "log.dir" not in values:
        dirs = [log_dirs] if isinstance(log_dirs, str | Path) else list(log_dirs)
        values["log.dirs"] = ",".join(str(d) for d in dirs)
    return BrokerConfig(values)


def _write_missing_metadata(topic: str, partition_dirs: list[Path], topic_id: str) -> None:
    """partition.metadata for the partitions of ``topic`` that lack it (its deferred write cut short by a crash)."""
    try:
        written = PartitionMetadataFile.write_missing(partition_dirs, topic_id)
    except KafkaStorageError as e:  # its dir is failing: loading it takes it offline
        log.error("Could not write the missing partition.metadata of topic %s: %s", topic, e)
        return
    if written:
        log.info("Wrote the missing partition.metadata of %s", ", ".join(d.name for d in written))
