"""Producer ids for idempotent producers (Kafka's ProducerIdManager), in blocks persisted before use.

Kafka's controller hands out blocks of 1000 ids and records each block in the metadata log before any id
of it is used, so an id is never given twice, even across a crash. kafkalog keeps the same rule with a small
file in the first log dir: the end of the last block taken, written (fsync, rename) before the block is used.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..errors import KafkaStorageError
from ..storage.files import atomic_write

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdManager:
    """Invariant: every id returned is below the block end persisted in ``path``."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / FILE_NAME
        self._lock = threading.Lock()
        self._next = self._read()
        self._end = self._next

    def _read(self) -> int:
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "next.block.start":
                try:
                    return int(value.strip())
                except ValueError:
                    break
        raise KafkaStorageError("Unreadable producer id block file (expected next.block.start=N)", path=str(self.path))

    def _persist(self, end: int) -> None:
        atomic_write(self.path, f"version=0\nnext.block.start={end}\n".encode("ascii"))

    def generate_producer_id(self) -> int:
        with self._lock:
            if self._next >= self._end:
                end = self._next + BLOCK_SIZE
                self._persist(end)
                self._end = end
            pid = self._next
            self._next += 1
            return pid
