"""``kafkalog verify`` and ``kafkalog recover``: click wrappers around the ``kafkalog.inspect`` engines.

``verify`` checks a log dir (or one partition directory) read-only and prints the findings (exit status 1 on any
problem). ``recover`` runs Kafka's recovery (``Log.open`` with ``had_clean_shutdown=False, recovery_point=0``) on a
partition directory and reports what it changed; ``--dry-run`` runs the same segment recovery on a read-only copy
held in memory and says what would change.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from ..inspect.findings import (
    DEFAULT_INDEX_INTERVAL,
    DEFAULT_SEGMENT_INDEX_BYTES,
    PartitionReport,
    ScanOptions,
    VerifyResult,
)
from ..inspect.recovery import describe_changes, directory_state, plan_recovery
from ..inspect.verify import is_partition_dir, scan_partition, total_log_bytes, verify_path
from ..partition.readonly import log_dir_problem
from . import EXIT_ERROR

PROGRESS_MIN_BYTES = 64 * 1024 * 1024  # show a progress bar only for scans at least this large

# ------------------------------------------------------------------------------------------------ output


def _console(err: bool = False):
    from rich.console import Console

    stream = sys.stderr if err else sys.stdout
    width = None if stream.isatty() else 200
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def _print_result(result: VerifyResult) -> None:
    from rich.table import Table

    table = Table(title=f"kafkalog verify {result.root}", title_justify="left")
    for column in ("partition", "segments", "batches", "records", "bytes", "problems", "notes"):
        table.add_column(column, justify="left" if column == "partition" else "right")
    for p in result.partitions:
        table.add_row(
            p.name, str(len(p.segments)), str(p.batches), str(p.records), str(p.bytes), str(p.problems), str(p.notes)
        )
    _console().print(table)
    base = (
        result.root.parent
        if len(result.partitions) == 1 and result.partitions[0].directory == result.root
        else (result.root)
    )
    findings = list(result.all_findings())
    for finding in sorted(findings, key=lambda f: not f.is_problem):
        click.echo(finding.format(base))
    problems = sum(f.is_problem for f in findings)
    notes = len(findings) - problems
    verdict = "clean" if problems == 0 else "NOT clean"
    click.echo(f"{verdict}: {problems} problem(s), {notes} note(s) in {len(result.partitions)} partition(s)")


def _with_progress(target: Path, run: Callable[[ScanOptions], VerifyResult], options: ScanOptions) -> VerifyResult:
    if not sys.stderr.isatty():
        return run(options)
    total = total_log_bytes(target)
    if total < PROGRESS_MIN_BYTES:
        return run(options)
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=_console(err=True),
        transient=True,
    ) as progress:
        task = progress.add_task("scanning", total=total)
        options.progress = lambda n: progress.advance(task, n)
        return run(options)


def _topic_config_option(
    name: str, minimum: int, default: int, use: str
) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """An option that stands for a topic config (``--index-interval-bytes`` for index.interval.bytes) with Kafka's
    default; its help names the config, then says what the command uses it for (``use``, with its punctuation)."""
    config = name[2:].replace("-", ".")
    return click.option(
        name,
        type=click.IntRange(min=minimum),
        default=default,
        show_default=True,
        help=f"The topic's {config}{use}",
    )


@click.command("verify")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--compacted", is_flag=True, help="Treat every topic as compacted (offset gaps are expected).")
@click.option(
    "--partial",
    is_flag=True,
    help="PATH is a partial copy of a log dir: checkpoint entries for absent partitions are notes, not problems.",
)
@_topic_config_option(
    "--index-interval-bytes",
    0,
    DEFAULT_INDEX_INTERVAL,
    " (decides whether a missing active-segment index is expected).",
)
def verify_command(path: Path, compacted: bool, partial: bool, index_interval_bytes: int) -> None:
    """Check a log dir or partition directory without modifying it; exit 1 on any problem.

    Checks batch sizes and CRCs, offset order, segment bases, the offset and time indexes against the log,
    .txnindex files, producer snapshots, partial tails, and the root checkpoints.
    """
    if not is_partition_dir(path) and (problem := log_dir_problem(path)) is not None:
        raise click.ClickException(f"{problem}; verify takes a log dir or a partition directory")
    options = ScanOptions(index_interval_bytes=index_interval_bytes, compacted=compacted, partial=partial)
    result = _with_progress(path, lambda o: verify_path(path, o), options)
    _print_result(result)
    if result.problems:
        sys.exit(EXIT_ERROR)


# ------------------------------------------------------------------------------------------------ recover


def _describe_segments(report: PartitionReport) -> None:
    for s in report.segments:
        offsets = f"{s.first_offset}..{s.last_offset}" if s.last_offset is not None else "empty"
        index = "missing" if s.index_entries is None else f"{s.index_entries} entries"
        time_index = "missing" if s.time_index_entries is None else f"{s.time_index_entries} entries"
        click.echo(
            f"  {s.path.name}: {s.size} bytes, {s.batches} batches, offsets {offsets}; .index {index}, "
            f".timeindex {time_index}"
        )


@click.command("recover")
@click.argument("partition_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Only report what recovery would change; touch nothing.")
@_topic_config_option("--index-interval-bytes", 0, DEFAULT_INDEX_INTERVAL, ", used to rebuild the offset index.")
@_topic_config_option(
    "--segment-index-bytes", 12, DEFAULT_SEGMENT_INDEX_BYTES, " (the size indexes are given while they are rebuilt)."
)
def recover_command(partition_dir: Path, dry_run: bool, index_interval_bytes: int, segment_index_bytes: int) -> None:
    """Run Kafka's log recovery offline on PARTITION_DIR: cut the invalid tail, delete what follows, rebuild indexes.

    This is what a broker does after an unclean shutdown with a recovery point of 0. Stop the broker first.
    """
    if not is_partition_dir(partition_dir):
        raise click.ClickException(f"{partition_dir} is not a partition directory (no segment files)")
    options = ScanOptions(index_interval_bytes=index_interval_bytes)
    before = scan_partition(partition_dir, options)
    _describe_partition("Before", partition_dir, before)
    if dry_run:
        changes = plan_recovery(before, index_interval_bytes, segment_index_bytes)
        click.echo("Dry run: recovery would" + (" change nothing." if not changes else ":"))
        for change in changes:
            click.echo(f"  - {change}")
        if changes:
            click.echo("Nothing was modified (dry run).")
        return
    files_before = directory_state(partition_dir)
    _run_recovery(partition_dir, index_interval_bytes, segment_index_bytes)
    done = describe_changes(files_before, directory_state(partition_dir))
    after = scan_partition(partition_dir, options)
    click.echo("Recovery:" + (" nothing changed." if not done else ""))
    for change in done:
        click.echo(f"  - {change}")
    _describe_partition("After", partition_dir, after)
    for finding in after.findings:
        click.echo(finding.format(partition_dir.parent))
    if after.problems:
        sys.exit(EXIT_ERROR)


def _describe_partition(when: str, partition_dir: Path, report: PartitionReport) -> None:
    click.echo(
        f"{when}: {partition_dir}: {len(report.segments)} segment(s), {report.batches} batches, "
        f"{report.bytes} bytes, log end offset {report.log_end_offset}, {report.problems} problem(s)"
    )
    _describe_segments(report)


def _run_recovery(partition_dir: Path, index_interval_bytes: int, segment_index_bytes: int) -> None:
    """Kafka's recovery after an unclean shutdown, from offset 0: the broker's own loader, writing."""
    from ..storage.config import LogConfig
    from ..storage.log import Log

    config = LogConfig({"index.interval.bytes": index_interval_bytes, "segment.index.bytes": segment_index_bytes})
    log = Log.open(partition_dir, config, had_clean_shutdown=False, recovery_point=0, log_start_offset=0)
    log.close()
