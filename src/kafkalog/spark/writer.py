"""Writes through the ``kafkalog`` data source: Spark's Kafka sink, appending to log directories.

A Spark user who knows the Kafka sink changes the format name and gives log dirs instead of a broker::

    df.write.format("kafkalog").mode("append")
        .option("path", "/var/lib/kafka/data")     # the topic's log dir(s), comma-separated
        .option("topic", "orders")                 # or a 'topic' column; the option wins
        .save()

    df.writeStream.format("kafkalog")
        .option("path", "/var/lib/kafka/data").option("topic", "orders")
        .option("checkpointLocation", "/chk/orders")
        .start()

Columns, as the Kafka sink takes them: ``value`` (required; string or binary, null is a tombstone), ``key``
(string or binary, optional), ``headers`` (``array<struct<key:string,value:binary>>``, optional), ``topic``
(string, unless the ``topic`` option is given), ``partition`` (int, optional) and ``timestamp`` (timestamp, or
double seconds; optional, null means now). Other columns are ignored. Options:

``path``                               log dir(s); every log dir holding a partition of the topic must be given
``topic``                              the topic of every row (wins over a ``topic`` column)
``compression.type``                   none (default), gzip, snappy, lz4, zstd
``batch.size``                         bytes of records per batch before a new one starts (16384, Kafka's)
``buffer.memory``                      bytes a task buffers before it appends them (33554432, Kafka's)
``max.block.ms``                       how long a task waits for another writer's partition lock (60000)
``kafka.enable.idempotence``           true (default): exactly-once appends, see below; false: plain batches
``kafka.<producer config>``            ``kafka.compression.type``, ``kafka.batch.size``, ``kafka.buffer.memory``
                                       and ``kafka.max.block.ms`` mean the same as the names above; other
                                       producer configs (acks, linger.ms, ...) do not apply to files and are
                                       ignored with a warning; ``kafka.transactional.id`` is refused. The sink
                                       appends as a producer with Kafka's default acks=all, through the
                                       partition layer (kafkalog.partition): a topic whose min.insync.replicas
                                       exceeds its one replica fails the write with NotEnoughReplicasError
                                       before anything is appended, as a Kafka producer's would fail.

Topics are never created (the Kafka sink does not create them either): a topic must be in
``kafkalog-topics.json`` or have its partition directories in the log dirs, else the write fails with
UnknownTopicOrPartitionError. A batch write takes ``mode("append")``; ``overwrite`` is refused, as the Kafka
sink refuses it (Spark itself refuses the default ``errorifexists`` for Python data sources). A streaming write
in ``complete`` mode appends, as the Kafka sink does.

Partitioning (Kafka's producer): an explicit ``partition`` is used as is (out of range fails); a keyed record
goes to ``toPositive(murmur2(key)) % partitions``; a record with neither follows Kafka >= 3.3's built-in
sticky partitioner (KIP-794): records stick to one partition until ``batch.size`` bytes went there, then move
on. kafkalog moves round-robin from a start partition derived from the writer's identity instead of choosing
at random, so a retried task or a replayed micro-batch sends every row where it went the first time (which the
exactly-once design below needs).

How a task appends. Each Spark task receives its rows as Arrow record batches, routes them to partitions with
vectorized code, buffers them per partition (up to ``buffer.memory``), then appends each partition's rows as
v2 batches built by the bulk builder, one partition at a time:

* Ownership. While it writes into a log dir a task holds a *shared* lock on the dir's ``.lock`` (both a
  ``flock`` and a POSIX lock, so a kafkalog LogManager, which flocks it, and a Kafka broker, whose Java
  FileLock is a POSIX lock, are both seen). A dir whose ``.lock`` a LogManager holds cannot be locked
  shared: the write fails naming the dir and the holding process (from ``/proc/locks``), and never touches it.
  Conversely, a LogManager cannot start on a dir while a Spark task writes into it. The driver probes the
  dirs first, so such a write fails before any task runs.
* Serialization. Appends to one partition are serialized across processes by an exclusive ``flock`` on
  ``<partition dir>/.kafkalog-write.lock`` (waiting up to ``max.block.ms``). A task holds at most one such
  lock at a time, so writers cannot deadlock.
* Under that lock the task opens the partition with ``Log.open``, appends, and closes it (flush, producer
  snapshot) before unlocking, so every append starts from the state on disk. The open is a clean one (no
  recovery) only when the files are exactly as the last writer left them after a successful close: that
  writer records a fingerprint of the partition's files (names, sizes, mtimes) in the lock file; or when the
  log dir holds the ``.kafka_cleanshutdown`` marker of a LogManager that shut down cleanly (the marker is then
  deleted before anything is appended, as a starting LogManager deletes it). Otherwise, e.g. after a writer
  was killed mid-append, Kafka's recovery runs from the checkpointed recovery point and truncates a torn tail.
  After closing, the task sets the partition's entries of the log dir's ``recovery-point-offset-checkpoint``
  and ``replication-offset-checkpoint`` (high watermark) to the log end, under ``<log dir>/.kafkalog-write.lock``,
  so a LogManager started later sees every record as committed and recovers little. (The first write into a
  partition after a LogManager ran has no fingerprint to trust, unless that manager's clean-shutdown marker is
  still there: it re-validates the partition's active segment, as Kafka's recovery from the checkpoint does.)
* A batch is written whole or not at all: each batch is one ``Log.append``; a process killed in the middle of
  one leaves a torn tail that the next open (a writer's or a LogManager's) truncates.

Exactly once (``kafka.enable.idempotence=true``, the default, as for Kafka's producer since 3.0). Every task
writes as an idempotent producer whose producer id is derived from the writer's identity: a hash of (job or
query id, Spark partition id), with bit 62 set, far above the ids a broker hands out. For a streaming query the
identity is the query id (kept in the checkpoint, so it survives restarts) and the producer epoch is the
micro-batch id (modulo 32767; the producer id changes every 32767 micro-batches); for a batch write it is a
random job id made on the driver, with epoch 0. Each partition's records get sequence numbers by their
position in the task's stream for that partition (0, 1, 2, ...). Under the partition lock, the task reads the
producer's entry in the log's producer state, which the log persists with its data and rebuilds from it on
recovery: the last sequence of the current epoch says how many of the task's records are already in the
partition, and only the rest is appended. So a task retried after a failure, a speculative duplicate of a
task, and a micro-batch replayed after a crash before its commit was recorded (Spark re-runs it with the same
offsets) each leave every record exactly once, also when the first attempt died in the middle of an append.
This relies on what Spark's replay guarantees anyway for a deterministic query over a replayable source: the
same rows in the same order per task (and the replay must run with the same ``batch.size``, which places the
keyless records). (A nondeterministic query replayed this way does not duplicate rows by
position, but the rows of the retry may differ from the first attempt's.) Producer entries written here never
expire in the writer's own opens; a LogManager expires them after ``producer.id.expiration.ms`` (one day),
counted, as in Kafka, from the largest record timestamp, so a replay that comes after that is not deduplicated.
With ``kafka.enable.idempotence=false`` batches carry no producer id and a retry appends again (at least once).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    StructType,
)

from ..clock import SYSTEM_TIME
from ..errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTimestampError,
)
from ..layout import (
    INT32_MAX,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    WRITE_LOCK_FILE,
)
from ..logdir import CleanShutdownFile
from ..partition import Partition
from ..record.partitioner import murmur2_partitions
from ..storage.checkpoints import CheckpointError, OffsetCheckpointFile
from ..storage.config import LogConfig
from ..storage.files import fsync_dir
from ..storage.log import Log
from . import logfiles
from .catalog import TopicCatalog, TopicInfo
from .locks import DirLocks, check_log_dirs_free, flock_wait
from .options import FORMAT_NAME
from .sink_batches import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    as_large_binary,
    binary_lengths,
    build_arrow_batch,
    chunk_starts,
    header_bytes,
)
from .sink_options import DEFAULT_MAX_BLOCK_MS, SinkColumns, WriteOptions, parse_write_options, resolve_columns

log = logging.getLogger(__name__)

EPOCHS_PER_PRODUCER_ID = 32767  # producer epochs 0..32766 per derived producer id
PRODUCER_ID_BIT = 1 << 62  # derived producer ids: bit 62 set, 62 hash bits below
NEVER_EXPIRE_MS = 1 << 62
STATE_VERSION = 1


# ----- one partition, locked and opened ---------------------------------------------------------------------


def _fingerprint(directory: str) -> str:
    """A digest of a partition dir's files (name, size, mtime) but the write lock: equal means untouched."""
    digest = hashlib.sha256()
    entries = []
    with os.scandir(directory) as it:
        for entry in it:
            if entry.name == WRITE_LOCK_FILE:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            entries.append(f"{entry.name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}")
    for item in sorted(entries):
        digest.update(item.encode("utf-8", "surrogateescape"))
        digest.update(b"\n")
    return digest.hexdigest()


def _read_state(fd: int) -> dict | None:
    try:
        raw = os.pread(fd, 1 << 16, 0)
        state = json.loads(raw.decode("utf-8")) if raw else None
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and state.get("version") == STATE_VERSION else None


def _write_state(fd: int, state: dict) -> None:
    data = json.dumps(state, sort_keys=True).encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _update_root_checkpoints(log_dir: str, key: tuple[str, int], offset: int, timeout_ms: int) -> None:
    """Set ``key``'s recovery point and high watermark in the log dir's checkpoints, one writer at a time."""
    fd = os.open(os.path.join(log_dir, WRITE_LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        flock_wait(fd, timeout_ms, f"log dir {log_dir}")
        for name in (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT):
            checkpoint = OffsetCheckpointFile(Path(log_dir) / name)
            try:
                entries = checkpoint.read()
            except CheckpointError as e:
                log.warning("Rewriting the unreadable checkpoint %s: %s", checkpoint.path, e)
                entries = {}
            if entries.get(key) != offset:
                entries[key] = offset
                checkpoint.write(entries)
    finally:
        os.close(fd)  # closing drops the flock


@dataclass(eq=False)  # identity: one appender per opened partition
class PartitionAppender:
    """One partition opened for appending: its write lock held, its ``Log`` loaded from the files on disk.

    Use as a context manager; call ``commit()`` after the appends to close the log cleanly, update the log
    dir's checkpoints and record the files' fingerprint. Leaving without ``commit()`` (an error) closes the log
    as well as it can and records nothing, so the next writer recovers the partition.
    """

    part: logfiles.PartitionDir
    config: LogConfig
    max_block_ms: int = DEFAULT_MAX_BLOCK_MS
    acks: int = -1
    log: Log | None = field(default=None, init=False)
    partition: Partition | None = field(default=None, init=False)
    opened_clean: bool = field(default=False, init=False)
    _fd: int | None = field(default=None, init=False, repr=False)
    _committed: bool = field(default=False, init=False, repr=False)

    def __enter__(self) -> PartitionAppender:
        part = self.part
        fd = os.open(os.path.join(part.directory, WRITE_LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            flock_wait(fd, self.max_block_ms, f"partition {part.name} in {part.log_dir}")
            self._fd = fd
            self.log = self._open()
            # The sink writes as the partition's leader (this task alone holds its write lock): acks and the
            # high watermark as kafkalog.partition keeps them.
            self.partition = Partition(self.log)
            self.partition.make_leader()
        except BaseException:
            if self.log is not None:
                with contextlib.suppress(Exception):
                    self.log.close()
            self._fd = None
            os.close(fd)
            raise
        return self

    def _open(self) -> Log:
        part = self.part
        key = (part.topic, part.partition)
        recorded = _read_state(self._fd)
        marker = CleanShutdownFile(part.log_dir)
        if marker.exists():
            # A LogManager shut down cleanly, and no writer appended since (each deletes the marker first).
            clean = True
            if marker.delete():
                fsync_dir(Path(part.log_dir))
        else:
            clean = recorded is not None and recorded.get("fingerprint") == _fingerprint(part.directory)
        os.ftruncate(self._fd, 0)  # from here on the partition may change: no fingerprint until commit()
        recovery = logfiles.read_checkpoint(part.log_dir, RECOVERY_POINT_CHECKPOINT)
        starts = logfiles.read_checkpoint(part.log_dir, LOG_START_OFFSET_CHECKPOINT)
        self.opened_clean = clean
        return Log.open(
            part.directory,
            self.config,
            SYSTEM_TIME,
            log_start_offset=starts.get(key, 0),
            recovery_point=recovery.get(key, 0),
            had_clean_shutdown=clean,
            producer_id_expiration_ms=NEVER_EXPIRE_MS,
        )

    def written(self, producer_id: int, producer_epoch: int) -> int | None:
        """How many records of (producer id, epoch) the partition holds, from its producer state: the next
        sequence to write; None when the producer already wrote with a later epoch (all of these are in)."""
        entry = self.log.producer_state.last_entry(producer_id)
        if entry is None or entry.producer_epoch < producer_epoch:
            return 0
        if entry.producer_epoch > producer_epoch:
            return None
        return entry.last_seq + 1 if entry.batch_metadata else 0

    def append(self, batch: bytes):
        return self.partition.append_records_to_leader(batch, self.acks)

    def commit(self) -> int:
        """Close the log (flush, snapshot), checkpoint it, record the fingerprint; return the log end."""
        part = self.part
        self.log.close()
        self._committed = True
        end = self.log.log_end_offset
        _update_root_checkpoints(part.log_dir, (part.topic, part.partition), end, self.max_block_ms)
        _write_state(self._fd, {"version": STATE_VERSION, "fingerprint": _fingerprint(part.directory), "end": end})
        return end

    def __exit__(self, *exc) -> None:
        fd, self._fd = self._fd, None
        try:
            if self.log is not None and not self._committed:
                with contextlib.suppress(Exception):
                    self.log.close()
        finally:
            if fd is not None:
                os.close(fd)  # drops the flock


# ----- one task ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriterIdentity:
    """Who writes: a job or query id, the Spark partition id, and the micro-batch (0 for a batch write)."""

    job: str
    spark_partition: int
    micro_batch: int = 0

    @property
    def producer_id(self) -> int:
        generation = self.micro_batch // EPOCHS_PER_PRODUCER_ID
        digest = hashlib.sha256(f"kafkalog-sink\0{self.job}\0{generation}\0{self.spark_partition}".encode()).digest()
        return PRODUCER_ID_BIT | (int.from_bytes(digest[:8], "big") & (PRODUCER_ID_BIT - 1))

    @property
    def producer_epoch(self) -> int:
        return self.micro_batch % EPOCHS_PER_PRODUCER_ID

    def sticky_start(self, topic: str, partitions: int) -> int:
        digest = hashlib.sha256(f"sticky\0{self.job}\0{self.spark_partition}\0{topic}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % partitions


@dataclass
class PartitionStats:
    appended: int = 0
    duplicates: int = 0
    batches: int = 0
    first_offset: int = -1
    last_offset: int = -1


@dataclass
class KafkaLogCommitMessage(WriterCommitMessage):
    """What one task wrote: per ``topic-partition``, records appended and replayed duplicates skipped."""

    producer_id: int
    producer_epoch: int
    partitions: dict[str, PartitionStats] = field(default_factory=dict)

    @property
    def appended(self) -> int:
        return sum(s.appended for s in self.partitions.values())

    @property
    def duplicates(self) -> int:
        return sum(s.duplicates for s in self.partitions.values())


@dataclass
class _Pending:
    batches: list[pa.RecordBatch] = field(default_factory=list)
    start: int = 0  # the stream position of the first buffered record
    routed: int = 0  # records routed to the partition so far (the next position)
    nbytes: int = 0


class TaskWriter:
    """The rows of one Spark task, routed, buffered and appended (see the module doc)."""

    def __init__(self, options: WriteOptions, columns: SinkColumns, identity: WriterIdentity) -> None:
        self.options = options
        self.columns = columns
        self.identity = identity
        self.producer_id = identity.producer_id if options.idempotent else -1
        self.producer_epoch = identity.producer_epoch if options.idempotent else -1
        self.catalog: TopicCatalog | None = None
        self.pending: dict[tuple[str, int], _Pending] = {}
        self.pending_bytes = 0
        self.sticky_bytes: dict[str, int] = {}
        self.message = KafkaLogCommitMessage(self.producer_id, self.producer_epoch)
        self._dir_locks = DirLocks()

    def write(self, batches: Iterable[pa.RecordBatch]) -> KafkaLogCommitMessage:
        try:
            for batch in batches:
                if batch.num_rows:
                    self.route(batch)
                    if self.pending_bytes >= self.options.buffer_memory:
                        self.flush()
            self.flush()
        finally:
            self._dir_locks.release()
        return self.message

    # ----- routing -----
    def _topics(self, batch: pa.RecordBatch) -> tuple[list[TopicInfo], np.ndarray]:
        if self.catalog is None:
            self.catalog = TopicCatalog(self.options.paths)
        n = batch.num_rows
        if self.options.topic is not None:
            return [self.catalog.topic(self.options.topic)], np.zeros(n, np.int64)
        column = batch.column(self.columns.topic)
        if column.null_count:
            raise InvalidRecordError(
                "null topic present in the data. Use the topic option for setting a default topic."
            )
        encoded = pc.dictionary_encode(column)
        names = encoded.dictionary.to_pylist()
        return [self.catalog.topic(t) for t in names], encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)

    def _timestamps(self, batch: pa.RecordBatch) -> pa.Array | None:
        if self.columns.timestamp is None:
            return None
        column = batch.column(self.columns.timestamp)
        if self.columns.timestamp_is_double:  # Cast(double -> timestamp): seconds
            micros = pc.cast(pc.trunc(pc.multiply(column, 1e6)), pa.int64(), safe=False)
        else:
            micros = column.cast(pa.int64())
        ms = pc.divide(micros, 1000)  # Scala's Long division (truncation), as KafkaRowWriter strips micros
        bad = pc.less(ms, 0)
        if pc.any(bad).as_py():
            first = pc.filter(ms, bad)[0].as_py()
            raise InvalidTimestampError(f"Invalid timestamp: {first}. Timestamp should always be non-negative or null.")
        return ms

    def route(self, batch: pa.RecordBatch) -> None:
        """Assign every row its partition and buffer it there (vectorized)."""
        cols = self.columns
        n = batch.num_rows
        values = as_large_binary(batch.column(cols.value))
        keys = as_large_binary(batch.column(cols.key)) if cols.key is not None else pa.nulls(n, pa.large_binary())
        headers = batch.column(cols.headers) if cols.headers is not None else None
        timestamps = self._timestamps(batch)
        topics, topic_index = self._topics(batch)
        counts = np.array([t.partitions for t in topics], dtype=np.int64)[topic_index]

        partitions = np.full(n, -1, dtype=np.int64)
        if cols.partition is not None:
            column = batch.column(cols.partition)
            given = column.is_valid().to_numpy(zero_copy_only=False)
            numbers = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)
            bad = given & ((numbers < 0) | (numbers >= counts))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InvalidPartitionsError(
                    f"Invalid partition given with record: {numbers[i]} is not in the range [0...{counts[i]}) "
                    f"(topic {topics[topic_index[i]].name})."
                )
            partitions[given] = numbers[given]
        key_lengths = binary_lengths(keys)
        value_lengths = binary_lengths(values)
        sizes = np.maximum(key_lengths, 0) + np.maximum(value_lengths, 0) + RECORD_OVERHEAD
        if headers is not None:
            sizes += header_bytes(headers)
        open_rows = partitions < 0
        keyed = open_rows & (key_lengths >= 0)
        if keyed.any():
            partitions[keyed] = murmur2_partitions(keys, counts)[keyed]
        keyless = open_rows & (key_lengths < 0)
        if keyless.any():
            for t in np.unique(topic_index[keyless]):
                rows = np.flatnonzero(keyless & (topic_index == t))
                info = topics[t]
                before = self.sticky_bytes.get(info.name, 0)
                cumulative = before + np.cumsum(sizes[rows]) - sizes[rows]
                runs = cumulative // max(self.options.batch_size, 1)
                start = self.identity.sticky_start(info.name, info.partitions)
                partitions[rows] = (start + runs) % info.partitions
                self.sticky_bytes[info.name] = before + int(sizes[rows].sum())

        payload = {"key": keys, "value": values, "size": pa.array(sizes, pa.int64())}
        if headers is not None:
            payload["headers"] = headers.combine_chunks() if isinstance(headers, pa.ChunkedArray) else headers
        if timestamps is not None:
            payload["timestamp"] = timestamps
        table = pa.RecordBatch.from_pydict(payload)
        composite = topic_index * (1 << 32) + partitions
        order = np.argsort(composite, kind="stable")
        ordered = composite[order]
        bounds = np.flatnonzero(np.diff(ordered)) + 1
        for group in np.split(order, bounds):
            first = int(group[0])
            tp = (topics[topic_index[first]].name, int(partitions[first]))
            rows = table.take(pa.array(group, pa.int64()))
            pending = self.pending.get(tp)
            if pending is None:
                pending = self.pending[tp] = _Pending()
            if not pending.batches:
                pending.start = pending.routed
            pending.batches.append(rows)
            pending.routed += len(group)
            pending.nbytes += rows.nbytes
            self.pending_bytes += rows.nbytes
        if any(p.routed > INT32_MAX for p in self.pending.values()):
            raise InvalidRecordError(
                "More than 2^31-1 records from one task to one partition: sequence numbers overflow"
            )

    # ----- appending -----
    def flush(self) -> None:
        """Append every buffered record, one partition at a time (one partition lock held at a time)."""
        for tp in sorted(tp for tp, p in self.pending.items() if p.batches):
            pending = self.pending[tp]
            rows = pa.Table.from_batches(pending.batches).combine_chunks()
            self._append(tp, rows, pending.start)
            pending.batches = []
            self.pending_bytes -= pending.nbytes
            pending.nbytes = 0

    def _batch_limit(self, config: LogConfig) -> int:
        """Records per batch up to batch.size bytes, and never past the topic's max.message.bytes (with room
        for a codec's worst case), where the broker would refuse the batch and Kafka's producer split it."""
        limit = config.max_message_bytes - BATCH_OVERHEAD
        if self.options.compression != "none":
            limit -= limit // 64 + 64
        return max(1, min(self.options.batch_size, limit))

    def _append(self, tp: tuple[str, int], rows: pa.Table, start: int) -> None:
        topic, partition = tp
        info = self.catalog.topic(topic)
        part = info.dirs[partition]
        stats = self.message.partitions.setdefault(f"{topic}-{partition}", PartitionStats())
        self._dir_locks.hold(part.log_dir)
        n = rows.num_rows
        with PartitionAppender(part, info.config, self.options.max_block_ms) as appender:
            skip = 0
            if self.producer_id >= 0:
                written = appender.written(self.producer_id, self.producer_epoch)
                skip = n if written is None else min(n, max(0, written - start))
                if skip:
                    log.info(
                        "%s: %d of %d records of producer %d epoch %d are already in the log (a retry or a replay)",
                        part.name,
                        skip,
                        n,
                        self.producer_id,
                        self.producer_epoch,
                    )
            stats.duplicates += skip
            if skip < n:
                rest = rows.slice(skip)
                sizes = rest.column("size").to_numpy().astype(np.int64)
                bounds = chunk_starts(sizes, self._batch_limit(info.config))
                now = SYSTEM_TIME.milliseconds()
                for a, b in itertools.pairwise(bounds):
                    a, b = int(a), int(b)
                    chunk = rest.slice(a, b - a)
                    if "timestamp" in chunk.column_names:
                        ts = pc.fill_null(chunk.column("timestamp"), now).to_numpy().astype(np.int64)
                    else:
                        ts = np.full(b - a, now, dtype=np.int64)
                    headers = chunk.column("headers").combine_chunks() if "headers" in chunk.column_names else None
                    try:
                        payload = build_arrow_batch(
                            chunk.column("key").combine_chunks(),
                            chunk.column("value").combine_chunks(),
                            ts,
                            headers,
                            compression=self.options.compression,
                            producer_id=self.producer_id,
                            producer_epoch=self.producer_epoch,
                            base_sequence=start + skip + a if self.producer_id >= 0 else -1,
                        )
                    except Exception:
                        appender.commit()  # a bad record: what went in before it is whole, keep it committed
                        raise
                    result = appender.append(payload)
                    if result.is_duplicate:
                        stats.duplicates += b - a
                        continue
                    stats.appended += b - a
                    stats.batches += 1
                    if stats.first_offset < 0:
                        stats.first_offset = result.first_offset
                    stats.last_offset = result.last_offset
            appender.commit()


def write_arrow(
    options: Mapping[str, str] | WriteOptions,
    schema: StructType,
    batches: Iterable[pa.RecordBatch],
    identity: WriterIdentity,
) -> KafkaLogCommitMessage:
    """Write Arrow record batches (columns as ``schema``) as one task of a job would: the sink without Spark."""
    opts = options if isinstance(options, WriteOptions) else parse_write_options(options)
    return TaskWriter(opts, resolve_columns(schema, opts.topic), identity).write(batches)


# ----- the Spark writers ------------------------------------------------------------------------------------


def _task_context():
    from pyspark import TaskContext

    return TaskContext.get()


class _SinkBase:
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = parse_write_options(options)
        self.columns = resolve_columns(schema, self.options.topic)
        self.schema = schema
        if self.options.ignored:
            log.warning(
                "kafkalog sink: ignoring Kafka producer options that do not apply to log files: %s",
                ", ".join(self.options.ignored),
            )
        check_log_dirs_free(self.options.paths)
        if self.options.topic is not None:
            TopicCatalog(self.options.paths).topic(self.options.topic)

    def _write(self, iterator: Iterator[pa.RecordBatch], identity: WriterIdentity) -> KafkaLogCommitMessage:
        return TaskWriter(self.options, self.columns, identity).write(iterator)


class KafkaLogWriter(_SinkBase, DataSourceArrowWriter):
    """``df.write.format("kafkalog").mode("append")``: the Kafka sink's batch write (see the module doc)."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise InvalidConfigurationError(
                "Save mode Overwrite not allowed for kafkalog: a Kafka topic is append-only. Use mode('append')."
            )
        super().__init__(options, schema)
        self.job = f"batch:{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaLogCommitMessage:
        context = _task_context()
        identity = WriterIdentity(self.job, context.partitionId() if context is not None else 0)
        return self._write(iterator, identity)

    def commit(self, messages: list[KafkaLogCommitMessage | None]) -> None:
        done = [m for m in messages if m is not None]
        log.info(
            "kafkalog sink: %d tasks appended %d records (%d retried duplicates skipped)",
            len(done),
            sum(m.appended for m in done),
            sum(m.duplicates for m in done),
        )

    def abort(self, messages: list[KafkaLogCommitMessage | None]) -> None:
        done = [m for m in messages if m is not None]
        log.warning(
            "kafkalog sink: the write failed; the %d records appended by the %d tasks that finished stay in the "
            "log (a Kafka topic cannot take records back)",
            sum(m.appended for m in done),
            len(done),
        )


class KafkaLogStreamWriter(_SinkBase, DataSourceStreamArrowWriter):
    """``df.writeStream.format("kafkalog")``: each micro-batch appended exactly once (see the module doc)."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        # overwrite is complete output mode: the Kafka sink appends then too (its truncate does nothing).
        super().__init__(options, schema)
        location = self.options.checkpoint_location
        self.fallback_job = f"checkpoint:{location}" if location else f"stream:{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaLogCommitMessage:
        context = _task_context()
        batch_id = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        if batch_id is None:
            log.warning("kafkalog sink: no micro-batch id in the task context; replays will not be deduplicated")
            job, micro_batch = f"stream:{uuid.uuid4()}", 0
        else:
            query = context.getLocalProperty("sql.streaming.queryId")
            job, micro_batch = (f"query:{query}" if query else self.fallback_job), int(batch_id)
        spark_partition = context.partitionId() if context is not None else 0
        return self._write(iterator, WriterIdentity(job, spark_partition, micro_batch))

    def commit(self, messages: list[KafkaLogCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if m is not None]
        log.info(
            "kafkalog sink: micro-batch %d appended %d records (%d replayed duplicates skipped)",
            batchId,
            sum(m.appended for m in done),
            sum(m.duplicates for m in done),
        )

    def abort(self, messages: list[KafkaLogCommitMessage | None], batchId: int) -> None:
        log.warning(
            "kafkalog sink: micro-batch %d failed; what its finished tasks appended stays, and its replay will "
            "not append it again",
            batchId,
        )


__all__ = [
    "FORMAT_NAME",
    "KafkaLogCommitMessage",
    "KafkaLogStreamWriter",
    "KafkaLogWriter",
    "PartitionAppender",
    "TopicCatalog",
    "WriteOptions",
    "WriterIdentity",
    "build_arrow_batch",
    "check_log_dirs_free",
    "murmur2_partitions",
    "parse_write_options",
    "resolve_columns",
    "write_arrow",
]
