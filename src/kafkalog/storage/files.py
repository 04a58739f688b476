"""Kafka's file and directory names (LogFileUtils, LocalLog), and the small durable-write helpers.

Segment files are named by base offset, zero-padded to 20 digits; ``.deleted``, ``.cleaned`` and
``.swap`` are appended to a full name while a file is in transit.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_RENAMED_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)(-delete|-future|-stray)$")


def filename_prefix(offset: int) -> str:
    """The base offset as Kafka prints it in file names: at least 20 digits, zero-padded."""
    return f"{offset:020d}"


def segment_file(directory: Path, offset: int, suffix: str, extra: str = "") -> Path:
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


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that renames and creations in it are durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Write ``data`` to ``path`` through ``<path>.tmp``: write, fsync, rename, fsync the directory.

    A new file gets ``mode`` (less the umask), e.g. 0o600 for credentials only the broker may read."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def delete_if_exists(path: Path) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
