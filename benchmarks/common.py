"""Helpers the benchmark modules share."""

from __future__ import annotations

import cProfile
import pstats
from pathlib import Path
from typing import Any


def profile_rows(profiler: cProfile.Profile) -> tuple[float, list[dict[str, Any]]]:
    """(total seconds, one row per profiled function, by own time first): function, calls, own and
    cumulative seconds and own-time share. Paths inside src/ print as kafkalog/..., others by file name."""
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        short = filename.split("/src/", 1)[-1] if "/src/" in filename else Path(filename).name
        rows.append(
            {
                "function": f"{short}:{line}({func})",
                "calls": calls,
                "tottime_s": tottime,
                "cumtime_s": cumtime,
                "tottime_share": tottime / total if total else 0.0,
            }
        )
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return total, rows
