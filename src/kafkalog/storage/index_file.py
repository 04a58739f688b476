"""What a segment's three index files share (``.index``, ``.timeindex``, ``.txnindex``): the file's path, which
follows renames, the segment's base offset, and moving the file (Kafka's ``Utils.atomicMoveWithFallback``)."""

from __future__ import annotations

import errno
import os
import shutil
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Self


def atomic_move_with_fallback(source: Path, target: Path) -> None:
    """Kafka's ``Utils.atomicMoveWithFallback``: an atomic rename, or a plain move across file systems."""
    try:
        os.replace(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(source, target)


class SegmentIndexFile(ABC):
    """One index file of a segment. Invariant: ``_path`` is where the file is, or (for a file created lazily)
    will be; every change to it holds ``_lock``."""

    CREATED_LAZILY = False
    """True when the file may not exist yet (the ``.txnindex`` is created on its first append): a rename then
    only moves a file that exists."""

    def __init__(self, path: str | os.PathLike[str], base_offset: int) -> None:
        self._path = Path(path)
        self._base_offset = base_offset
        self._lock = threading.RLock()

    @property
    def path(self) -> Path:
        """Where the index file is now (follows ``rename_to``), or will be once something is appended."""
        return self._path

    @property
    def file(self) -> Path:
        """Alias of :attr:`path` (Kafka's ``file()``)."""
        return self._path

    @property
    def base_offset(self) -> int:
        """The segment's base offset (Kafka's ``baseOffset``, the transaction index's ``startOffset``)."""
        return self._base_offset

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Move the file; the new path is adopted even if the move fails (an open mapping stays valid)."""
        with self._lock:
            target = new_path if isinstance(new_path, Path) else Path(new_path)  # a Path is immutable: no copy
            try:
                if not self.CREATED_LAZILY or self._path.exists():
                    atomic_move_with_fallback(self._path, target)
            finally:
                self._path = target

    def update_parent_dir(self, parent_dir: str | os.PathLike[str]) -> None:
        """Point at the same file name in another directory (after the directory itself was renamed)."""
        with self._lock:
            self._path = Path(parent_dir) / self._path.name

    @abstractmethod
    def close(self) -> None:
        """Release the file (each index says what else closing does)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
