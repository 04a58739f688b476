"""The broker's small JSON stores in its first log dir (ACLs, SCRAM credentials, client quotas) on a single node.

Each is one JSON document, read once when the broker starts and replaced atomically (a temporary file written,
fsynced and renamed) on every change, so a crash leaves either the old or the new document, never half of one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import KafkaStorageError
from ..storage.files import atomic_write

T = TypeVar("T")


class JsonFileStore:
    """A JSON document at ``<log dir>/<file name>``. Invariant (kept by the subclasses): the file equals the store's
    state whenever a change has returned -- a change is built on a copy, saved under ``_lock``, then installed."""

    def __init__(self, log_dir: str | Path, file_name: str, what: str) -> None:
        self.path = Path(log_dir) / file_name
        self._lock = threading.Lock()
        self._what = what

    def _load(
        self, parse: Callable[[Any], T], errors: tuple[type[Exception], ...] = (ValueError, TypeError)
    ) -> T | None:
        """``parse`` of the stored document (None without a file). A document that cannot be read or parsed is a
        KafkaStorageError: the broker does not start over a store it would then overwrite."""
        if not self.path.exists():
            return None
        try:
            return parse(json.loads(self.path.read_text()))
        except errors as e:
            raise KafkaStorageError(f"Cannot read the {self._what} in {self.path}: {e}") from None

    def _save(self, document: Any, mode: int = 0o666, **dumps_options: Any) -> None:
        """Replace the file with ``document`` (a new file gets ``mode``, less the umask)."""
        atomic_write(self.path, json.dumps(document, **dumps_options).encode(), mode=mode)
