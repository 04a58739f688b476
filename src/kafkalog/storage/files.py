"""The small durable-write helpers of the storage layer: fsync a directory, write a file atomically, delete one.

The names of the files they write are in ``kafkalog.layout``.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path) -> None:
    """fsync ``path`` through a read-only descriptor of its own: a directory, so that renames and creations in it
    are durable, or a file already written (and closed) through another descriptor."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path
"""fsync a directory so that renames and creations in it are durable."""

fsync_file = fsync_path
"""fsync a file already written (and closed) through another descriptor."""


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
