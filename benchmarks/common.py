"""Helpers the benchmark modules share."""

from __future__ import annotations

import cProfile
import gc
import json
import os
import platform
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from rich.table import Table

REPO = Path(__file__).resolve().parents[1]


class Scratch:
    """A temp directory for a run's files: $KAFKALOG_BENCH_DIR if set, else the system temp dir."""

    def __init__(self, name: str) -> None:
        parent = os.environ.get("KAFKALOG_BENCH_DIR") or tempfile.gettempdir()
        self.root = Path(tempfile.mkdtemp(prefix=f"kafkalog-bench-{name}-", dir=parent))

    def same_device_as_repo(self) -> bool:
        """Whether the scratch files share a disk with the repository (figures then describe that disk)."""
        return os.stat(self.root).st_dev == os.stat(REPO).st_dev

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def platform_info() -> dict[str, Any]:
    """The interpreter and machine every results file records."""
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(wall time, result) of one call; garbage collected first, GC left on while timing."""
    gc.collect()
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def ok_mark(ok: bool | None) -> str:
    """A goal's verdict for the rich tables (None: the goal could not be assessed in this run)."""
    if ok is None:
        return "[yellow]not assessed[/]"
    return "[green]yes[/]" if ok else "[bold red]no[/]"


def goals_table() -> Table:
    """The empty "Goals" table every benchmark prints: goal, measured, met."""
    table = Table(title="Goals")
    table.add_column("goal")
    table.add_column("measured", justify="right")
    table.add_column("met")
    return table


def profile_table(title: str, rows: list[dict[str, Any]], caption: str | None = None, top: int = 12) -> Table:
    """The top ``rows`` of a profile (see ``profile_rows``) by own time: function, calls, own s, share, cum s."""
    table = Table(title=title, caption=caption)
    for col in ("function", "calls", "own s", "own share", "cum s"):
        table.add_column(col, justify="left" if col == "function" else "right")
    for row in rows[:top]:
        table.add_row(
            row["function"],
            f"{row['calls']:,}",
            f"{row['tottime_s']:.3f}",
            f"{row['tottime_share']:.0%}",
            f"{row['cumtime_s']:.3f}",
        )
    return table


def save_result(results_dir: Path, name: str, result: dict[str, Any]) -> Path:
    """Write ``result`` as ``<results_dir>/<name>.json`` (non-JSON values as strings) and return the path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return path


def finish(
    results_dir: Path,
    name: str,
    result: dict[str, Any],
    console: Any,
    print_tables: Any,
    scratch_dir: str | None = None,
) -> dict[str, Any]:
    """A benchmark's last steps: write ``result`` (``save_result``), print its tables, and say where it went,
    how long the run took (``result["elapsed_s"]``) and, when given, where its scratch files were."""
    path = save_result(results_dir, name, result)
    print_tables(result, console)
    where = f" (scratch files under {scratch_dir})" if scratch_dir else ""
    console.print(f"[dim]wrote {path} in {result['elapsed_s']:.1f} s{where}[/]")
    return result


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


class InThreadExecutor:
    """ThreadPoolExecutor's shape, running every job in the calling thread (so cProfile sees it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Takes ThreadPoolExecutor's arguments (max_workers, thread_name_prefix...) and needs none of them."""

    def __enter__(self) -> InThreadExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Callable[[Any], Any], iterable: Iterable[Any]):
        return map(fn, iterable)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn`` now; a finished Future holds its result or its exception."""
        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except Exception as e:
            future.set_exception(e)
        return future

    def shutdown(self, wait: bool = True) -> None:
        return None


def _startup_pool_module() -> Any:
    """The module whose ThreadPoolExecutor opens the logs at startup: kafkalog.log_loading since manager.py's split
    (23c9266), kafkalog.manager before it (so that the benchmarks still run against older trees, for A/B runs)."""
    import importlib

    import kafkalog.manager

    if hasattr(kafkalog.manager, "ThreadPoolExecutor"):
        return kafkalog.manager
    return importlib.import_module("kafkalog.log_loading")


def profiled_startup(manager: Any) -> cProfile.Profile:
    """``manager.startup()`` under cProfile, its log-opening pool replaced by :class:`InThreadExecutor` so that
    the profile sees the loading itself (cProfile does not follow a pool's worker threads)."""
    from unittest import mock

    profiler = cProfile.Profile()
    with mock.patch.object(_startup_pool_module(), "ThreadPoolExecutor", InThreadExecutor):
        profiler.enable()
        try:
            manager.startup()
        finally:
            profiler.disable()
    return profiler
