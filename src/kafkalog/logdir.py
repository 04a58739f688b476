"""The files at the root of a log dir and in a partition dir that are not segments, as Kafka writes them.

- ``LogDirLock``: the exclusive lock on ``<dir>/.lock`` (LogManager.lockLogDirs, FileLock).
- ``MetaProperties``: ``<dir>/meta.properties`` (metadata/.../properties/MetaProperties.java), and
  ``verify_meta_properties`` / ``initial_meta_properties``: MetaPropertiesEnsemble's checks across the log dirs
  of one broker and what a broker writes into a dir that has none.
- ``CleanShutdownFile``: ``<dir>/.kafka_cleanshutdown`` (CleanShutdownFileHandler.java).
- ``PartitionMetadataFile``: ``<partition dir>/partition.metadata`` (PartitionMetadataFile.java).
- ``validate_topic_name`` / ``has_collision_chars``: Kafka's Topic.validate rules, which also keep a topic's
  directory inside its log dir.
- ``TopicConfigStore``: kafkalog's own per-topic state (``kafkalog-topics.json``), which Kafka keeps in
  its metadata log instead.
- ``new_uuid`` / ``parse_uuid``: Kafka's Uuid, printed as 22 characters of base64url without padding.
"""

from __future__ import annotations

import base64
import fcntl
import json
import logging
import os
import re
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import (
    InconsistentBrokerIdError,
    InconsistentBrokerMetadataError,
    InconsistentClusterIdError,
    InvalidTopicError,
    KafkaLogError,
    KafkaStorageError,
)
from .layout import (
    CLEAN_SHUTDOWN_FILE,
    INT32_MAX,
    INT32_MIN,
    LOCK_FILE,
    META_PROPERTIES_FILE,
    PARTITION_METADATA_FILE,
)
from .scheduler import SchedulerNotRunningError
from .storage.checkpoints import CheckpointError
from .storage.files import atomic_write, fsync_dir, fsync_file
from .storage.leader_epoch import LeaderEpochFileCache
from .storage.properties import parse_properties

if TYPE_CHECKING:
    from .storage.log import Log, Scheduler

log = logging.getLogger(__name__)

__all__ = [
    "ONE_UUID",
    "ZERO_UUID",
    "CleanShutdownFile",
    "DeferredPartitionMetadata",
    "LogDirLock",
    "MetaProperties",
    "PartitionMetadataFile",
    "has_collision_chars",
    "initial_meta_properties",
    "new_uuid",
    "parse_uuid",
    "validate_topic_name",
    "verify_meta_properties",
]


# ---------------------------------------------------------------------------------------------------------------
# Kafka's Uuid
# ---------------------------------------------------------------------------------------------------------------

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID: "no id"
ONE_UUID = "AAAAAAAAAAAAAAAAAAAAAQ"  # Uuid.ONE_UUID: the __cluster_metadata topic id
# DirectoryId's reserved ids: UNASSIGNED (0), LOST (1), MIGRATING (2), and the rest below 100.
_RESERVED_DIRECTORY_ID_COUNT = 100
_RESERVED_UUIDS = frozenset({ZERO_UUID, ONE_UUID})
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def _uuid_string(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def new_uuid() -> str:
    """A random version-4 UUID as Kafka prints it (Uuid.randomUuid): never zero, one, or starting with '-'."""
    while True:
        text = _uuid_string(uuid.uuid4().bytes)
        if text not in _RESERVED_UUIDS and not text.startswith("-"):
            return text


def parse_uuid(text: str) -> bytes:
    """The 16 bytes of a base64url UUID string (Uuid.fromString); ValueError with Kafka's wording if bad."""
    if not isinstance(text, str):
        raise ValueError(f"A UUID must be a string, not {type(text).__name__}")
    if len(text) > 24:
        raise ValueError(f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID")
    if not _BASE64URL.fullmatch(text) or len(text.rstrip("=")) % 4 == 1:
        raise ValueError(f"Input string `{text}` is not valid base64url")
    raw = base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
    if len(raw) != 16:
        raise ValueError(
            f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the expected 16 bytes "
            "of a base64-encoded UUID"
        )
    return raw


def _canonical_uuid(text: str) -> str:
    """``text`` parsed and printed again (drops '=' padding)."""
    return _uuid_string(parse_uuid(text))


# ---------------------------------------------------------------------------------------------------------------
# .lock
# ---------------------------------------------------------------------------------------------------------------


def lock_holders(path: str | os.PathLike[str]) -> list[int]:
    """The pids holding a lock on ``path``: a kafkalog LogManager's ``flock`` or a Kafka broker's POSIX lock (Java's
    FileLock), read from ``/proc/locks`` (Linux), else from ``fcntl(F_GETLK)`` for a POSIX lock. Kafka's ``.lock``
    file is empty and stays so (a broker and kafkalog share it), so the holder is found from the kernel's lock
    table, not from the file. Empty when nobody holds it or the platform cannot tell."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: list[int] = []
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            for line in table:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5424588 0 EOF" (blocked waiters are marked "->")
                if "->" in fields:
                    continue
                if len(fields) >= 6 and fields[5] == device and fields[4].isdigit():
                    pids.append(int(fields[4]))
        return sorted(set(pids))
    except OSError:
        pass
    try:  # no /proc: ask for the POSIX lock that would block ours (struct flock: type, whence, start, len, pid)
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return []
    try:
        request = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, request)
        kind, _, _, _, pid = struct.unpack("hhqqi", answer)
        return [pid] if kind != fcntl.F_UNLCK and pid > 0 else []
    except OSError:
        return []
    finally:
        os.close(fd)


def _command_line(pid: int) -> str:
    """The command line of ``pid`` (its first 80 characters), or "" when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(" ".join(part.decode("utf-8", "replace").split()) for part in raw.split(b"\0") if part)
    return text if len(text) <= 80 else text[:77] + "..."


class LogDirLock:
    """An exclusive, non-blocking ``flock`` and POSIX lock on ``<dir>/.lock``, held from ``acquire()`` to
    ``release()``.

    flock locks belong to an open file, so a second handle conflicts whether it is in another process, another
    thread, or the same thread. The POSIX lock (``lockf``) is the one a Kafka broker's ``FileLock`` takes, so a
    broker and kafkalog exclude each other; POSIX locks belong to the process (another handle in the same process
    does not conflict, and closing one drops it), which the flock covers. The ``.lock`` file stays after release,
    empty, as Kafka leaves it; :func:`lock_holders` says who holds it.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self._fd: int | None = None

    def _in_use(self) -> KafkaStorageError:
        """Kafka's message (LogManager.lockLogDirs), then who holds the lock when the kernel says."""
        holders = [pid for pid in lock_holders(self.path) if pid != os.getpid()]
        held = ""
        if holders:
            held = " Held by " + ", ".join(
                f"process {pid}" + (f" ({cmd})" if (cmd := _command_line(pid)) else "") for pid in holders
            )
            held += "."
        return KafkaStorageError(
            f"Failed to acquire lock on file {LOCK_FILE} in {self.directory.absolute()}. "
            f"A Kafka instance in another process or thread is using this directory.{held}"
        )

    @property
    def is_locked(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> LogDirLock:
        """Take the lock (creating ``.lock``); KafkaStorageError if anyone, this object included, holds it."""
        if self._fd is not None:
            raise self._in_use()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise KafkaStorageError(f"Failed to create lock file {self.path}: {e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Also the POSIX lock a Kafka broker takes (Java's FileLock is fcntl's), which on Linux does not
            # conflict with flock: without it kafkalog would open a dir a running Kafka broker is using.
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):
            os.close(fd)  # drops the flock taken above, if it was
            raise self._in_use() from None
        except OSError as e:
            os.close(fd)
            raise KafkaStorageError(f"Failed to lock {self.path}: {e}") from e
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock; does nothing if it is not held."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> LogDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            self.release()

    def __repr__(self) -> str:
        return f"LogDirLock({str(self.directory)!r}, locked={self.is_locked})"


# ---------------------------------------------------------------------------------------------------------------
# meta.properties
# ---------------------------------------------------------------------------------------------------------------

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _java_date(epoch_s: float) -> str:
    """``java.util.Date.toString()`` in UTC, e.g. ``Sun Feb 27 16:00:38 UTC 2022`` (locale independent)."""
    t = time.gmtime(epoch_s)
    clock = f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    return f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} {clock} UTC {t.tm_year}"


def _escape_property(text: str, is_key: bool) -> str:
    """Escape as java.util.Properties.store does; non-ASCII as \\uXXXX so any reader's charset round-trips."""
    out = []
    for i, ch in enumerate(text):
        if ch == " " and (is_key or i == 0):
            out.append("\\ ")
        elif ch in "\\=:#!":
            out.append("\\" + ch)
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.extend(f"\\u{unit:04X}" for unit in _utf16_units(ch))
        else:
            out.append(ch)
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    raw = ch.encode("utf-16-be")
    return [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]


def _parse_int(key: str, value: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", value) or not INT32_MIN <= int(value) <= INT32_MAX:
        raise ValueError(f"Unable to read {key} as a base-10 number.")
    return int(value)


@dataclass
class MetaProperties:
    """The contents of ``meta.properties``.

    Versions (MetaPropertiesVersion): 0, the ZooKeeper-era file (``broker.id``, every field optional);
    1, KRaft (``node.id`` and ``cluster.id`` required); 2 (``node.id`` and ``directory.id`` required).
    ``directory_id`` is a base64url UUID string.
    """

    version: int = 1
    cluster_id: str | None = None
    node_id: int | None = None
    directory_id: str | None = None

    @staticmethod
    def path(directory: str | os.PathLike[str]) -> Path:
        return Path(directory) / META_PROPERTIES_FILE

    @staticmethod
    def new_uuid() -> str:
        return new_uuid()

    @classmethod
    def generate(cls, cluster_id: str | None = None, node_id: int | None = 0) -> MetaProperties:
        """A fresh version-1 file's contents with a new directory id (and a new cluster id if none is given)."""
        return cls(
            version=1,
            cluster_id=cluster_id if cluster_id is not None else new_uuid(),
            node_id=node_id if node_id is not None else 0,
            directory_id=new_uuid(),
        )

    def validate(self) -> None:
        """Raise ValueError if a field the version requires is missing or a value is malformed."""
        if self.version not in (0, 1, 2):
            raise ValueError(f"Unknown meta.properties version number {self.version}")
        if self.version == 1 and self.cluster_id is None:
            raise ValueError("cluster.id was not found.")
        if self.version != 0 and self.node_id is None:
            raise ValueError("node.id was not found.")
        if self.version == 2 and self.directory_id is None:
            raise ValueError("directory.id was not found.")
        if self.node_id is not None and not INT32_MIN <= self.node_id <= INT32_MAX:
            raise ValueError(f"node id {self.node_id} does not fit a 32-bit integer")
        if self.directory_id is not None:
            try:
                parse_uuid(self.directory_id)
            except ValueError as e:
                raise ValueError(f"Unable to read directory.id as a Uuid: {e}") from None

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> MetaProperties:
        """Build from parsed properties as Kafka's MetaProperties.Builder(Properties) does; ValueError if bad."""
        text = props.get("version", "0")
        try:
            version = int(text.strip())
        except ValueError:
            raise ValueError(f"Invalid meta.properties version string '{text}'") from None
        node_key = "broker.id" if version == 0 else "node.id"
        node_id = None
        if node_key in props:
            node_id = _parse_int(node_key, props[node_key])
        elif version != 0:
            raise ValueError(f"Failed to find {node_key}")
        directory_id = props.get("directory.id")
        if directory_id is not None:
            try:
                directory_id = _canonical_uuid(directory_id)
            except ValueError as e:
                raise ValueError(f"Unable to read directory.id as a Uuid: {e}") from None
        meta = cls(version, props.get("cluster.id"), node_id, directory_id)
        meta.validate()
        return meta

    def to_properties(self) -> dict[str, str]:
        """The keys Kafka writes, in the order kafkalog writes them."""
        props = {"version": str(self.version)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.node_id is not None:
            props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id
        return props

    def to_text(self, now_s: float | None = None) -> str:
        """The file text as Properties.store(writer, "") prints it: '#', a date comment, then key=value lines."""
        lines = ["#", "#" + _java_date(time.time() if now_s is None else now_s)]
        lines += [f"{_escape_property(k, True)}={_escape_property(v, False)}" for k, v in self.to_properties().items()]
        return "\n".join(lines) + "\n"

    @classmethod
    def read(cls, directory: str | os.PathLike[str]) -> MetaProperties | None:
        """The directory's meta.properties, or None if it has none; KafkaStorageError if it cannot be used."""
        path = cls.path(directory)
        try:
            # Kafka loads it from a byte stream, i.e. as ISO-8859-1.
            text = path.read_text(encoding="iso-8859-1")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise KafkaStorageError(f"Failed to read {path}: {e}", path=str(path)) from e
        try:
            return cls.from_properties(parse_properties(text))
        except ValueError as e:  # InvalidConfigurationError is a ValueError too
            raise KafkaStorageError(
                f"Invalid {META_PROPERTIES_FILE} in {Path(directory)}: {e}", path=str(path)
            ) from None

    def write(self, directory: str | os.PathLike[str]) -> None:
        """Write ``<directory>/meta.properties`` atomically (tmp file, fsync, rename, fsync dir)."""
        self.validate()
        path = self.path(directory)
        try:
            atomic_write(path, self.to_text().encode("ascii"))
        except OSError as e:
            raise KafkaStorageError(f"Failed to write {path}: {e}") from e


def is_reserved_directory_id(directory_id: str) -> bool:
    """DirectoryId.reserved: most significant 64 bits zero and least significant ones, as a signed long, < 100."""
    raw = parse_uuid(directory_id)
    return raw[:8] == bytes(8) and int.from_bytes(raw[8:], "big", signed=True) < _RESERVED_DIRECTORY_ID_COUNT


def new_directory_id(taken: set[str] | frozenset[str] = frozenset()) -> str:
    """MetaPropertiesEnsemble.generateValidDirectoryId: random, not reserved, not one of ``taken``."""
    while True:
        candidate = new_uuid()
        if candidate not in taken and not is_reserved_directory_id(candidate):
            return candidate


_AGREED_FIELDS: tuple[tuple[str, str, type[KafkaLogError], str], ...] = (
    (
        "cluster_id",
        "cluster.id was not specified in the v1 file: {path}",
        InconsistentClusterIdError,
        "Invalid cluster.id in: {path}. Expected {expected}, but read {read}",
    ),
    (
        "node_id",
        "node.id was not specified in {path}",
        InconsistentBrokerIdError,
        "Stored node id {read} doesn't match previous node id {expected} in {path}. If you moved your data, make "
        "sure your configured node id matches. If you intend to create a new node, you should remove all data in "
        "your data directories.",
    ),
)
"""The fields every log dir's meta.properties must agree on: (attribute, Kafka's message when a version-1 file
lacks it, the error and message when one differs from the value found first)."""


def verify_meta_properties(metas: dict[Path, MetaProperties], expected_node_id: int | None = None) -> None:
    """Kafka's MetaPropertiesEnsemble.verify over the ``meta.properties`` of one broker's log dirs.

    Every dir must name the same cluster id and the same node id (the configured one, if given), and no two dirs
    the same directory id. Raises InconsistentClusterIdError / InconsistentBrokerIdError /
    InconsistentBrokerMetadataError with Kafka's messages: the dirs of two brokers, or of two clusters, are not
    served together.
    """
    expected: dict[str, object] = {"cluster_id": None, "node_id": None}
    if expected_node_id is not None and expected_node_id >= 0:
        expected["node_id"] = expected_node_id
    seen: dict[str, Path] = {}
    for directory, meta in metas.items():
        path = MetaProperties.path(directory)
        for name, missing, mismatch_error, mismatch in _AGREED_FIELDS:
            value = getattr(meta, name)
            if value is None:
                if meta.version != 0:  # only a ZooKeeper-era file may lack it
                    raise InconsistentBrokerMetadataError(missing.format(path=path))
            elif expected[name] is None:
                expected[name] = value
            elif value != expected[name]:
                raise mismatch_error(mismatch.format(path=path, expected=expected[name], read=value))
        if meta.directory_id is not None:
            if is_reserved_directory_id(meta.directory_id):
                raise InconsistentBrokerMetadataError(
                    f"Invalid resrved directory ID {meta.directory_id} found in {directory}"
                )
            previous = seen.setdefault(meta.directory_id, directory)
            if previous != directory:
                raise InconsistentBrokerMetadataError(
                    f"Duplicate directory ID Optional[{meta.directory_id}] found. It was the ID of {previous}, "
                    f"but also of {directory}"
                )


def initial_meta_properties(
    metas: dict[Path, MetaProperties], node_id: int | None, taken_directory_ids: set[str]
) -> MetaProperties:
    """What a broker writes into a log dir without ``meta.properties``, given those of its other dirs.

    Beside ZooKeeper-era files (version 0) it writes one alike (KafkaServer.checkpointBrokerMetadata: version 0,
    ``broker.id`` and ``cluster.id``); otherwise a KRaft file as ``kafka-storage.sh format`` does (version 1 with
    ``cluster.id``, ``node.id`` and a new ``directory.id``). The cluster id and node id are the other dirs'
    (verified equal before), else the configured node id (0 if none) and a new cluster id.
    """
    existing = next(iter(metas.values()), None)
    node = existing.node_id if existing is not None and existing.node_id is not None else None
    if node is None:
        node = node_id if node_id is not None and node_id >= 0 else 0
    cluster = next((m.cluster_id for m in metas.values() if m.cluster_id is not None), None)
    if existing is not None and existing.version == 0:
        return MetaProperties(version=0, cluster_id=cluster, node_id=node)
    return MetaProperties(
        version=1,
        cluster_id=cluster if cluster is not None else new_uuid(),
        node_id=node,
        directory_id=new_directory_id(taken_directory_ids),
    )


# ---------------------------------------------------------------------------------------------------------------
# .kafka_cleanshutdown
# ---------------------------------------------------------------------------------------------------------------


class CleanShutdownFile:
    """The clean-shutdown marker. Its presence means clean; newer brokers (KIP-966) store the broker epoch.

    Brokers before 3.7 wrote it empty, so ``read()`` answers None for an empty or unreadable file, as Kafka's
    CleanShutdownFileHandler does: the file's existence is what counts.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / CLEAN_SHUTDOWN_FILE

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> int | None:
        """The broker epoch it records, or None (no file, an empty legacy file, or unparsable content)."""
        try:
            content = json.loads(self.path.read_text(encoding="utf-8"))
            epoch = content["brokerEpoch"]
            if isinstance(epoch, bool) or not isinstance(epoch, int):
                raise ValueError(f"brokerEpoch is {epoch!r}")
            return epoch
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as e:
            log.debug("Fail to read the clean shutdown file in %s: %s", self.path, e)
            return None

    def write(self, broker_epoch: int) -> None:
        """Write ``{"version":0,"brokerEpoch":<n>}``, fsync it and the directory."""
        data = json.dumps({"version": 0, "brokerEpoch": int(broker_epoch)}, separators=(",", ":"))
        try:
            with open(self.path, "wb") as f:
                f.write(data.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(self.directory)
        except OSError as e:
            raise KafkaStorageError(f"Failed to write the clean shutdown file {self.path}: {e}") from e

    def delete(self) -> bool:
        """Remove the marker; True if it existed."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise KafkaStorageError(f"Failed to delete the clean shutdown file {self.path}: {e}") from e
        return True

    def __repr__(self) -> str:
        return f"CleanShutdownFile(file={self.path})"


# ---------------------------------------------------------------------------------------------------------------
# partition.metadata
# ---------------------------------------------------------------------------------------------------------------

_KEY_SEPARATOR = re.compile(r":\s+")


class PartitionMetadataFile:
    """``<partition dir>/partition.metadata``: ``version: 0\\ntopic_id: <base64url uuid>``, no final newline."""

    CURRENT_VERSION = 0

    def __init__(self, partition_dir: str | os.PathLike[str]) -> None:
        self.partition_dir = Path(partition_dir)
        self.path = self.partition_dir / PARTITION_METADATA_FILE

    def exists(self) -> bool:
        return self.path.exists()

    @staticmethod
    def encode(topic_id: str) -> str:
        return f"version: {PartitionMetadataFile.CURRENT_VERSION}\ntopic_id: {topic_id}"

    def write(self, topic_id: str) -> None:
        """Write the file through ``.tmp``: write, fsync, rename, fsync the directory."""
        topic_id = _canonical_uuid(topic_id)
        if topic_id == ZERO_UUID:
            raise ValueError(f"Cannot record the zero topic id in {self.path}")
        try:
            atomic_write(self.path, self.encode(topic_id).encode("utf-8"))
        except OSError as e:
            raise KafkaStorageError(f"Error while writing partition metadata file {self.path.absolute()}: {e}") from e

    @classmethod
    def write_all(cls, partition_dirs: list[Path], topic_id: str) -> None:
        """Write the file of every one of ``partition_dirs`` (new partitions of one topic), as ``write`` does each,
        in phases: every ``.tmp`` written, then each fsynced, then each renamed, then each directory fsynced,
        then their parent log dirs (their new entries). Each file is still whole and durable before it takes its
        name, but the fsyncs come one after another instead of between writes, so the file system commits
        most of them together: creating 1,000 partitions no longer waits for 2,000 separate journal commits."""
        topic_id = _canonical_uuid(topic_id)
        if topic_id == ZERO_UUID:
            raise ValueError(f"Cannot record the zero topic id in {partition_dirs[0] if partition_dirs else '?'}")
        data = cls.encode(topic_id).encode("utf-8")
        files = [cls(d) for d in partition_dirs]
        current = files[0] if files else None
        try:
            for current in files:
                with open(current.path.with_name(PARTITION_METADATA_FILE + ".tmp"), "wb") as f:
                    f.write(data)
            for current in files:
                fsync_file(current.path.with_name(PARTITION_METADATA_FILE + ".tmp"))
            for current in files:
                os.replace(current.path.with_name(PARTITION_METADATA_FILE + ".tmp"), current.path)
            for current in files:
                fsync_dir(current.partition_dir)
            for parent in dict.fromkeys(d.parent for d in partition_dirs):
                fsync_dir(parent)
        except OSError as e:
            where = current.path.absolute() if current is not None else "?"
            raise KafkaStorageError(f"Error while writing partition metadata file {where}: {e}") from e

    @classmethod
    def write_missing(cls, partition_dirs: list[Path], topic_id: str) -> list[Path]:
        """Write the file into those of ``partition_dirs`` (one topic's) that have none, as Kafka's log loading does
        for a log whose topic id it knows (a creation cut short before its deferred write); the dirs written."""
        missing = [d for d in partition_dirs if not (Path(d) / PARTITION_METADATA_FILE).exists()]
        if missing:
            cls.write_all(missing, topic_id)
        return missing

    def read(self) -> str:
        """The topic id; KafkaStorageError (Kafka's wording) if the file is missing or malformed."""
        location = str(self.path.absolute())
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise KafkaStorageError(f"Error while reading partition metadata file {location}: {e}") from e
        lines = text.splitlines()

        def value(index: int, key: str) -> tuple[str, str]:
            line = lines[index] if index < len(lines) else None
            parts = _KEY_SEPARATOR.split(line, maxsplit=1) if line is not None else []
            if len(parts) != 2 or parts[0] != key:
                raise KafkaStorageError(f"Malformed line in partition metadata file [{location}]: {line}")
            return line, parts[1]

        line, raw_version = value(0, "version")
        if not re.fullmatch(r"[+-]?[0-9]+", raw_version):
            raise KafkaStorageError(f"Malformed line in partition metadata file [{location}]: {line}")
        version = int(raw_version)
        # As Kafka: only versions below the current one are refused, so a newer file stays readable.
        if version < self.CURRENT_VERSION:
            raise KafkaStorageError(f"Unrecognized version of partition metadata file ({location}): {version}")
        line, raw_id = value(1, "topic_id")
        try:
            topic_id = _canonical_uuid(raw_id)
        except ValueError:
            raise KafkaStorageError(f"Malformed line in partition metadata file [{location}]: {line}") from None
        if topic_id == ZERO_UUID:
            raise KafkaStorageError(f"Invalid topic ID in partition metadata file ({location})")
        return topic_id

    def delete(self) -> bool:
        """Remove the file; True if it existed."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def __repr__(self) -> str:
        return f"PartitionMetadataFile(path={self.path})"


class DeferredPartitionMetadata:
    """The ``partition.metadata`` files of new partitions of one topic: recorded now, written by ``flush``.

    Kafka's PartitionMetadataFile.record + maybeFlush: creating a log records its topic id and schedules the
    write (``flush-metadata-file``), so the request that created the topic never waits for its fsyncs; the
    append path flushes first if the task has not run yet (no record reaches a log whose topic id is not on
    disk), and so does closing the log. Here one flush writes the files of all the topic's new partitions in
    one pass (``PartitionMetadataFile.write_all``), then the leader-epoch checkpoints their logs were left to
    write with them (the first epoch recorded when each partition was made leader: Log.maybe_assign_epoch_start_offset)
    in a second phased pass. Invariant: once ``flush`` has returned, every file is durable under its name; a
    failed flush (KafkaStorageError) leaves them pending for the next call.
    """

    def __init__(self, partition_dirs: list[Path], topic_id: str) -> None:
        topic_id = _canonical_uuid(topic_id)
        if topic_id == ZERO_UUID:
            raise ValueError(f"Cannot record the zero topic id in {partition_dirs[0] if partition_dirs else '?'}")
        self.partition_dirs = list(partition_dirs)
        self.topic_id = topic_id
        self._logs: list[Log] = []
        self._lock = threading.Lock()
        self._pending = bool(self.partition_dirs)

    @property
    def pending(self) -> bool:
        return self._pending

    def defer(self, logs: list[Log], scheduler: Scheduler) -> None:
        """``attach(logs)`` then ``schedule(scheduler)``."""
        self.attach(logs)
        self.schedule(scheduler)

    def attach(self, logs: list[Log]) -> None:
        """Make each of ``logs`` (the partitions' logs, just opened) flush the files first if one is appended to
        or closed before the task has run; until then their new leader epochs are left for the flush too."""
        self._logs = list(logs)
        for log_obj in logs:
            log_obj.metadata_flush = self.flush

    def schedule(self, scheduler: Scheduler) -> None:
        """Hand the write to ``scheduler``'s threads (Kafka's ``flush-metadata-file`` task); after the logs were
        made leaders, so that the one pass writes their first epochs as well."""
        try:
            scheduler.schedule_once("flush-metadata-file", self.flush)
        except SchedulerNotRunningError:  # stopping: no task will run, so write them now
            self.flush()

    def flush(self) -> None:
        """Write every file, once (Kafka's maybeFlush); later calls return at once."""
        if not self._pending:  # the append path's case: one attribute read, no lock
            return
        with self._lock:
            if self._pending:
                PartitionMetadataFile.write_all(self.partition_dirs, self.topic_id)
                try:
                    LeaderEpochFileCache.flush_all([log_obj.leader_epoch_cache for log_obj in self._logs])
                except CheckpointError as e:
                    raise KafkaStorageError(f"Error while writing the leader epoch checkpoints: {e}") from e
                self._pending = False


# ---------------------------------------------------------------------------------------------------------------
# Topic names
# ---------------------------------------------------------------------------------------------------------------

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _invalid_topic_reason(name: object) -> str | None:
    if not isinstance(name, str):
        return f"a topic name must be a string, not {type(name).__name__}"
    if not name:
        return "the empty string is not allowed"
    if name == ".":
        return "'.' is not allowed"
    if name == "..":
        return "'..' is not allowed"
    if len(name.encode("utf-16-le")) // 2 > MAX_TOPIC_NAME_LENGTH:  # Java's String.length(): UTF-16 units
        return f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    if not all(ch in _LEGAL_TOPIC_CHARS for ch in name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: raise InvalidTopicError("Topic name is invalid: ...") for an illegal name.

    A legal name has no '/', NUL or other separator and is neither '.' nor '..', so ``<log dir>/<name>-<n>``
    always stays inside the log dir.
    """
    reason = _invalid_topic_reason(name)
    if reason is not None:
        raise InvalidTopicError(f"Topic name is invalid: {reason}")


def is_valid_topic_name(name: str) -> bool:
    return _invalid_topic_reason(name) is None


def has_collision_chars(name: str) -> bool:
    """True if the name has '.' or '_', which Kafka's metric names cannot tell apart."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """The name with every '.' replaced by '_' (Topic.unifyCollisionChars), to check for collisions."""
    return name.replace(".", "_")
