"""The fields and helpers of a partition log, declared once for the classes ``Log`` is assembled from.

``Log`` (``storage/log.py``) inherits its append path from ``LogAppend`` (``log_append.py``) and what the log
cleaner calls from ``CleanerSupport`` (``log_compaction.py``). Those parts hold no state of their own: they work on
the fields ``Log.__init__`` sets and call a few of ``Log``'s helpers. ``LogState`` declares those names and their
types, so that each part is type-checked against the same declarations; it defines no behaviour.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..clock import Time
from .config import LogConfig
from .leader_epoch import LeaderEpochFileCache
from .producer_state import ProducerStateManager
from .segment import LogSegment
from .segments import LogSegments
from .validator import LogAppendInfo


class LogState:
    """What every part of a ``Log`` may rely on (the invariants are ``Log``'s, stated on that class)."""

    directory: Path
    topic: str
    partition: int
    config: LogConfig
    clock: Time
    segments: LogSegments
    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochFileCache
    auto_high_watermark: bool
    leader_hw_rule: Callable[[], None] | None
    metadata_flush: Callable[[], None] | None
    _rng: random.Random
    _lock: threading.RLock
    _log_start_offset: int
    _recovery_point: int
    _log_end_offset: int
    _high_watermark: int

    if TYPE_CHECKING:  # defined by Log; declared here only for the type checker

        @property
        def active_segment(self) -> LogSegment: ...

        def flush(self, offset: int | None = None, *, include_active: bool = False) -> None: ...

        def flush_metadata(self) -> None: ...

        def _check_open(self) -> None: ...

        def _io_failure(self, action: str, error: Exception) -> Exception: ...

        def _set_high_watermark(self, offset: int) -> int: ...

        def _maybe_roll(self, messages_size: int, info: LogAppendInfo, now: int | None = None) -> LogSegment: ...

        def _roll_due(self, segment: LogSegment, messages_size: int, info: LogAppendInfo, now: int) -> bool: ...

        def _new_segment(self, base_offset: int) -> LogSegment: ...

        def _delete_segment_files(
            self, segments: list[LogSegment], *, keep_snapshots_of: frozenset[int] = frozenset()
        ) -> None: ...
