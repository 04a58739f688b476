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
import errno
import fcntl
import hashlib
import itertools
import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..clock import SYSTEM_TIME
from ..errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaLogError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)
from ..layout import (
    INT32_MAX,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    WRITE_LOCK_FILE,
)
from ..logdir import CleanShutdownFile, TopicConfigStore
from ..partition import Partition
from ..record.builder import _binary_columns, assemble_batch, encode_record_columns, encode_records_fast
from ..record.compression import codec_id, codec_name
from ..storage.checkpoints import CheckpointError, OffsetCheckpointFile
from ..storage.config import LogConfig
from ..storage.files import fsync_dir
from ..storage.log import Log
from . import logfiles
from .source import log_dir_paths

log = logging.getLogger(__name__)

FORMAT_NAME = "kafkalog"

DEFAULT_BATCH_SIZE = 16384  # Kafka producer's batch.size
DEFAULT_BUFFER_MEMORY = 32 * 1024 * 1024  # Kafka producer's buffer.memory
DEFAULT_MAX_BLOCK_MS = 60_000  # Kafka producer's max.block.ms
EPOCHS_PER_PRODUCER_ID = 32767  # producer epochs 0..32766 per derived producer id
PRODUCER_ID_BIT = 1 << 62  # derived producer ids: bit 62 set, 62 hash bits below
NEVER_EXPIRE_MS = 1 << 62
# A record's framing at its widest (length, attributes, timestamp and offset deltas, key and value lengths,
# header count): sizes are estimated from above so a batch never outgrows batch.size or max.message.bytes.
RECORD_OVERHEAD = 36
HEADER_OVERHEAD = 10  # a header's key and value lengths
BATCH_OVERHEAD = 61
STATE_VERSION = 1

# Producer configs the sink maps to its own options (the unprefixed names win over the kafka. ones).
_ALIASES = {
    "compression.type": "kafka.compression.type",
    "batch.size": "kafka.batch.size",
    "buffer.memory": "kafka.buffer.memory",
    "max.block.ms": "kafka.max.block.ms",
}
_KNOWN_KAFKA = {*_ALIASES.values(), "kafka.enable.idempotence"}

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


# ----- options ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteOptions:
    """The sink options, validated."""

    paths: tuple[str, ...]
    topic: str | None = None
    compression: str = "none"
    batch_size: int = DEFAULT_BATCH_SIZE
    buffer_memory: int = DEFAULT_BUFFER_MEMORY
    max_block_ms: int = DEFAULT_MAX_BLOCK_MS
    idempotent: bool = True
    checkpoint_location: str | None = None
    ignored: tuple[str, ...] = ()


def _write_paths(opts: Mapping[str, str]) -> tuple[str, ...]:
    return log_dir_paths(opts, "kafkalog writes", "for the kafkalog sink: the topic's log dir(s), comma-separated.")


def _option(opts: Mapping[str, str], name: str) -> str | None:
    value = opts.get(name)
    alias = _ALIASES.get(name)
    other = opts.get(alias) if alias else None
    if value is not None and other is not None and value.strip() != other.strip():
        raise InvalidConfigurationError(
            f"Options '{name}' = '{value}' and '{alias}' = '{other}' disagree; give only one of them"
        )
    return value if value is not None else other


def _int_option(opts: Mapping[str, str], name: str, default: int) -> int:
    value = _option(opts, name)
    if value is None:
        return default
    text = value.strip()
    if not text.isdigit():
        raise InvalidConfigurationError(f"Option '{name}' must be a non-negative integer, not '{value}'")
    return int(text)


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate the sink options (keys are case-insensitive, as Spark passes them)."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    if "kafka.transactional.id" in opts:
        raise InvalidConfigurationError(
            "Option 'kafka.transactional.id' is not supported by the kafkalog sink: it writes without "
            "transactions (idempotent appends give exactly once, see kafkalog.spark.writer)"
        )
    compression = _option(opts, "compression.type")
    try:
        codec = codec_name(codec_id(compression.strip())) if compression is not None else "none"
    except KafkaLogError:
        raise InvalidConfigurationError(
            f"Invalid value {compression} for configuration compression.type: String must be one of: "
            "none, gzip, snappy, lz4, zstd"
        ) from None
    idempotence = opts.get("kafka.enable.idempotence", "true").strip().lower()
    if idempotence not in ("true", "false"):
        raise InvalidConfigurationError(
            f"Option 'kafka.enable.idempotence' must be 'true' or 'false', not '{idempotence}'"
        )
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise InvalidConfigurationError("Option 'topic' is empty: give a topic name, or leave it out to use a column")
    ignored = tuple(sorted(k for k in opts if k.startswith("kafka.") and k not in _KNOWN_KAFKA))
    return WriteOptions(
        paths=_write_paths(opts),
        topic=topic.strip() if topic is not None else None,
        compression=codec,
        batch_size=_int_option(opts, "batch.size", DEFAULT_BATCH_SIZE),
        buffer_memory=_int_option(opts, "buffer.memory", DEFAULT_BUFFER_MEMORY),
        max_block_ms=_int_option(opts, "max.block.ms", DEFAULT_MAX_BLOCK_MS),
        idempotent=idempotence == "true",
        checkpoint_location=opts.get("checkpointlocation"),
        ignored=ignored,
    )


# ----- the input columns (KafkaWriter.validateQuery) ------------------------------------------------------


@dataclass(frozen=True)
class SinkColumns:
    """Where each column the sink uses is in the input (None when absent), and the timestamp's type."""

    value: int
    key: int | None = None
    headers: int | None = None
    topic: int | None = None
    partition: int | None = None
    timestamp: int | None = None
    timestamp_is_double: bool = False


def _same_type(actual: DataType, wanted: DataType) -> bool:
    # DataTypeUtils.sameType: equal but for nullability.
    return actual.simpleString() == wanted.simpleString()


def _column(schema: StructType, name: str, wanted: list[DataType], required: str | None = None) -> int | None:
    names = schema.fieldNames()
    if name not in names:
        if required is not None:
            raise InvalidConfigurationError(required)
        return None
    index = names.index(name)
    actual = schema.fields[index].dataType
    if not any(_same_type(actual, w) for w in wanted):
        raise InvalidConfigurationError(
            f"{name} attribute unsupported type {actual.simpleString()}. {name} must be a(n) "
            f"{' or '.join(w.simpleString() for w in wanted)}"
        )
    return index


def resolve_columns(schema: StructType, topic_option: str | None) -> SinkColumns:
    """Check the input schema as the Kafka sink does (same messages) and locate the columns."""
    topic = None
    if topic_option is None:
        topic = _column(
            schema,
            "topic",
            [StringType()],
            required="topic option required when no 'topic' attribute is present. Use the topic option for "
            "setting a topic.",
        )
    key = _column(schema, "key", [StringType(), BinaryType()])
    value = _column(schema, "value", [StringType(), BinaryType()], required="Required attribute 'value' not found")
    headers = _column(schema, "headers", [HEADERS_TYPE])
    partition = _column(schema, "partition", [IntegerType()])
    timestamp = _column(schema, "timestamp", [DoubleType(), TimestampType()])
    is_double = timestamp is not None and isinstance(schema.fields[timestamp].dataType, DoubleType)
    assert value is not None
    return SinkColumns(value, key, headers, topic, partition, timestamp, is_double)


# ----- log dir ownership ------------------------------------------------------------------------------------


def _lock_holders(path: str) -> list[str]:
    """The processes holding a lock on ``path``, from /proc/locks (Linux; empty when unknown)."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    wanted = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    holders: dict[int, str] = {}
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":  # '->' lines are waiters, not holders
            continue
        try:
            major, minor, inode = parts[5].split(":")
            where = (int(major, 16), int(minor, 16), int(inode))
            pid = int(parts[4])
        except ValueError:
            continue
        if where != wanted or pid in holders:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            cmd = ""
        cmd = cmd if len(cmd) <= 160 else cmd[:157] + "..."
        holders[pid] = f"pid {pid} ({parts[1]} lock{', ' + cmd if cmd else ''})"
    return list(holders.values())


def _dir_in_use(log_dir: str) -> KafkaStorageError:
    path = os.path.join(log_dir, LOCK_FILE)
    holders = _lock_holders(path)
    who = "; ".join(holders) if holders else "another process"
    return KafkaStorageError(
        f"Log dir {os.path.abspath(log_dir)} is owned by a running LogManager or Kafka broker: its {LOCK_FILE} is "
        f"held by {who}. The kafkalog sink writes only log dirs that no LogManager holds; produce through "
        "that LogManager, or shut it down first.",
        path=log_dir,
    )


def _lock_shared(log_dir: str) -> int:
    """An fd holding a shared flock and a shared POSIX lock on ``<log_dir>/.lock``; KafkaStorageError if owned."""
    path = os.path.join(log_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise KafkaStorageError(f"Failed to open lock file {path}: {e}", path=log_dir) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise _dir_in_use(log_dir) from None
        raise KafkaStorageError(f"Failed to lock {path}: {e}", path=log_dir) from e
    return fd


def check_log_dirs_free(paths: Iterable[str]) -> None:
    """Fail (KafkaStorageError naming the dir and the holder) if a LogManager or broker holds a log dir."""
    for log_dir in paths:
        if not os.path.isdir(log_dir):
            raise KafkaStorageError(f"Log directory {log_dir} given in option 'path' does not exist", path=log_dir)
        os.close(_lock_shared(log_dir))


class _DirLocks:
    """The shared ``.lock`` locks of the log dirs a task writes into, held until the task is done.

    POSIX locks belong to the process and go when any of its fds on the file closes, so each dir is opened
    once and kept.
    """

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def hold(self, log_dir: str) -> None:
        if log_dir not in self._fds:
            self._fds[log_dir] = _lock_shared(log_dir)

    def release(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)


def _flock_wait(fd: int, timeout_ms: int, what: str) -> None:
    """Take an exclusive flock on ``fd``, waiting up to ``timeout_ms``."""
    deadline = time.monotonic() + timeout_ms / 1000
    delay = 0.002
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise KafkaStorageError(
                    f"Timed out after {timeout_ms} ms waiting for the write lock of {what}: another writer holds "
                    "it (option 'max.block.ms')"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


# ----- topics -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicInfo:
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


# ----- vectorized helpers -----------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _murmur2_positive(data, starts, lengths):  # pragma: no cover - compiled
    """Kafka's toPositive(murmur2(key)) of every key (0 for null ones, whose length is -1)."""
    m = 0x5BD1E995
    mask = 0xFFFFFFFF
    n = lengths.shape[0]
    out = np.zeros(n, np.int64)
    for i in range(n):
        length = lengths[i]
        if length < 0:
            continue
        pos = starts[i]
        h = (0x9747B28C ^ length) & mask
        blocks = length // 4
        for b in range(blocks):
            j = pos + 4 * b
            k = np.int64(data[j]) | (np.int64(data[j + 1]) << 8) | (np.int64(data[j + 2]) << 16)
            k |= np.int64(data[j + 3]) << 24
            k = (k * m) & mask
            k ^= k >> 24
            k = (k * m) & mask
            h = (h * m) & mask
            h ^= k
        tail = length & 3
        base = pos + blocks * 4
        if tail == 3:
            h ^= np.int64(data[base + 2]) << 16
        if tail >= 2:
            h ^= np.int64(data[base + 1]) << 8
        if tail >= 1:
            h ^= np.int64(data[base])
            h = (h * m) & mask
        h ^= h >> 13
        h = (h * m) & mask
        h ^= h >> 15
        out[i] = h & 0x7FFFFFFF
    return out


@njit(cache=True, nogil=True)
def _chunk_starts(sizes, limit):  # pragma: no cover - compiled
    """Greedy batch boundaries: a new batch starts when the next record would take it past ``limit`` bytes
    (a record larger than the limit gets a batch of its own, as the Kafka producer does)."""
    n = sizes.shape[0]
    out = np.empty(n + 1, np.int64)
    k = 0
    acc = 0
    for i in range(n):
        if i == 0 or (acc > 0 and acc + sizes[i] > limit):
            out[k] = i
            k += 1
            acc = 0
        acc += sizes[i]
    out[k] = n
    return out[: k + 1]


def murmur2_partitions(keys: pa.Array, num_partitions: np.ndarray | int) -> np.ndarray:
    """``toPositive(murmur2(key)) % num_partitions`` per key (Kafka's default partitioner); -1 for null keys."""
    data, starts, lengths = _binary_columns(keys)
    hashed = _murmur2_positive(np.ascontiguousarray(data), starts.astype(np.int64), lengths.astype(np.int64))
    return np.where(lengths >= 0, hashed % np.asarray(num_partitions, dtype=np.int64), -1)


def _as_large_binary(array: pa.Array) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return array if array.type == pa.large_binary() else array.cast(pa.large_binary())


def _lengths(array: pa.Array) -> np.ndarray:
    """Byte lengths of a large_binary array, -1 for nulls."""
    return _binary_columns(array)[2].astype(np.int64)


def _header_parts(headers: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """(headers per record, every header key, every header value) of a list<struct<key,value>> array."""
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    counts = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = headers.flatten()  # skips null lists, honours the slice offset
    if flat.null_count:
        raise InvalidRecordError("A header in the 'headers' column is null: every header needs a key")
    hkeys = flat.field(0)
    if hkeys.null_count:
        raise InvalidRecordError("Null header keys are not permitted (a header in the 'headers' column has a null key)")
    return counts, hkeys, flat.field(1)


def _header_bytes(headers: pa.Array) -> np.ndarray:
    """Per record, at most the bytes its headers take (keys, values and their lengths), for size estimates."""
    counts, hkeys, hvalues = _header_parts(headers)
    each = np.maximum(_lengths(_as_large_binary(hkeys)), 0) + np.maximum(_lengths(_as_large_binary(hvalues)), 0)
    each += HEADER_OVERHEAD
    sums = np.concatenate(([0], np.cumsum(each)))
    ends = np.cumsum(counts)
    return sums[ends] - sums[ends - counts]


def _records_section(keys: pa.Array, values: pa.Array, ts_deltas: np.ndarray, headers: pa.Array | None) -> bytes:
    """The records section of a batch from Arrow columns (headers a list<struct<key,value>> array): the bulk
    encoder's kernels fed from the Arrow buffers, never per record in Python."""
    n = len(values)
    offset_deltas = np.arange(n, dtype=np.int64)
    if headers is None or not pc.any(pc.greater(pc.fill_null(pc.list_value_length(headers), 0), 0)).as_py():
        return encode_records_fast(keys, values, ts_deltas, offset_deltas, None)
    hdr_count, hkeys, hvalues = _header_parts(headers)
    return encode_record_columns(
        keys, values, _as_large_binary(hkeys), _as_large_binary(hvalues), hdr_count, ts_deltas, offset_deltas
    )


def build_arrow_batch(
    keys: pa.Array,
    values: pa.Array,
    timestamps: np.ndarray,
    headers: pa.Array | None = None,
    *,
    compression: str = "none",
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One v2 batch (offsets from 0) from Arrow columns: keys/values binary or string arrays, ``timestamps``
    int64 ms, ``headers`` a list<struct<key:string,value:binary>> array or None."""
    n = len(values)
    if n == 0:
        return b""
    ts = np.ascontiguousarray(timestamps, dtype=np.int64)
    base_ts = int(ts[0])
    section = _records_section(_as_large_binary(keys), _as_large_binary(values), ts - base_ts, headers)
    codec = codec_id(compression)
    return assemble_batch(
        section,
        record_count=n,
        last_offset_delta=n - 1,
        base_offset=0,
        base_timestamp=base_ts,
        max_timestamp=max(int(ts.max()), -1),
        compression_type=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


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
        _flock_wait(fd, timeout_ms, f"log dir {log_dir}")
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


class PartitionAppender:
    """One partition opened for appending: its write lock held, its ``Log`` loaded from the files on disk.

    Use as a context manager; call ``commit()`` after the appends to close the log cleanly, update the log
    dir's checkpoints and record the files' fingerprint. Leaving without ``commit()`` (an error) closes the log
    as well as it can and records nothing, so the next writer recovers the partition.
    """

    def __init__(
        self,
        part: logfiles.PartitionDir,
        config: LogConfig,
        max_block_ms: int = DEFAULT_MAX_BLOCK_MS,
        acks: int = -1,
    ):
        self.part = part
        self.config = config
        self.max_block_ms = max_block_ms
        self.acks = acks
        self.log: Log | None = None
        self.partition: Partition | None = None
        self.opened_clean = False
        self._fd: int | None = None
        self._committed = False

    def __enter__(self) -> PartitionAppender:
        part = self.part
        fd = os.open(os.path.join(part.directory, WRITE_LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _flock_wait(fd, self.max_block_ms, f"partition {part.name} in {part.log_dir}")
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
        self._dir_locks = _DirLocks()

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
        values = _as_large_binary(batch.column(cols.value))
        keys = _as_large_binary(batch.column(cols.key)) if cols.key is not None else pa.nulls(n, pa.large_binary())
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
        key_lengths = _lengths(keys)
        value_lengths = _lengths(values)
        sizes = np.maximum(key_lengths, 0) + np.maximum(value_lengths, 0) + RECORD_OVERHEAD
        if headers is not None:
            sizes += _header_bytes(headers)
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
                bounds = _chunk_starts(sizes, self._batch_limit(info.config))
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
