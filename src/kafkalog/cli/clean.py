"""``kafkalog clean``: run one log-cleaner pass over a log dir now, as the broker's cleaner threads would."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from .common import broker_config_option, open_manager


@click.command("clean")
@click.argument("log_dir", type=click.Path(file_okay=False, path_type=Path))
@broker_config_option
def clean_command(log_dir: Path, config_file: Path | None) -> None:
    """Compact every eligible log in LOG_DIR once (dirtiest first, by each topic's cleanup.policy and
    min.cleanable.dirty.ratio), then apply retention to compacted logs; print what each clean did."""
    manager = open_manager((log_dir,), config_file)
    try:
        result = manager.clean_once()
    finally:
        manager.shutdown()
    console = Console(width=200) if not Console().is_terminal else Console()
    if not result.cleaned:
        console.print("No log is eligible for cleaning now (see `kafkalog explain compaction`).")
    else:
        table = Table(title=f"Cleaned {result.logs_cleaned} of {len(result.cleaned)} logs")
        for column in ("partition", "dirty ratio", "dirty range", "read", "written", "records kept", "result"):
            table.add_column(column, justify="right" if column not in ("partition", "result") else "left")
        for r in result.cleaned:
            stats = r.stats
            table.add_row(
                f"{r.topic}-{r.partition}",
                f"{r.cleanable_ratio:.3f}",
                f"[{r.first_dirty_offset:,}, {r.end_offset:,})",
                f"{stats.bytes_read:,} B" if stats else "-",
                f"{stats.bytes_written:,} B" if stats else "-",
                f"{stats.messages_written:,} / {stats.messages_read:,}" if stats else "-",
                "ok" if r.error is None else r.error,
            )
        console.print(table)
    if result.segments_deleted:
        console.print(f"Retention deleted {result.segments_deleted} segments of compacted logs.")
    if any(r.error for r in result.cleaned):
        raise SystemExit(1)
