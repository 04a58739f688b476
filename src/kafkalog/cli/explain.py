"""``kafkalog explain retention`` / ``explain compaction``: why is this data still here, and when will it go?

``explain compaction`` renders ``LogManager.explain_compaction`` per partition: the dirty section, the bound
that ends it, the dirty ratio against min.cleanable.dirty.ratio, and the size a clean would leave.

It renders ``LogManager.explain_retention`` as a table, and with ``--html`` as a segment timeline:
segments on an offset axis and a time axis, the active segment, the retention horizon, and why each
segment is kept.

Both only read the log dir: they run the log manager's rules on a private copy of the topic's partitions
(see ``cli.common.private_copy_manager``), so nothing in the log dir is written, locked or recovered.
"""

from __future__ import annotations

import datetime as dt
import html
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ..cleaner.explain import CompactionExplanation
from ..retention import RetentionExplanation
from .common import broker_config_option, private_copy_manager


@click.group("explain")
def explain_command() -> None:
    """Explain what the log manager will do to a topic's data."""


@explain_command.command("retention")
@click.argument("log_dir", type=click.Path(file_okay=False, path_type=Path))
@broker_config_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, help="One partition (else every partition).")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a segment timeline to this HTML file.",
)
def explain_retention_command(
    log_dir: Path, config_file: Path | None, topic: str, partition: int | None, html_file: Path | None
) -> None:
    """For each segment of TOPIC in LOG_DIR: its offsets, largest timestamp, size, and the rule that will
    delete it (or why none can yet), with the time of the retention check that will and when its files go."""
    with private_copy_manager(log_dir, config_file, topic, partition) as manager:
        explanations = manager.explain_retention(topic, partition)
    console = Console(width=200) if not Console().is_terminal else Console()
    for explanation in explanations:
        console.print(_table(explanation))
        console.print(explanation.summary)
    if html_file is not None:
        html_file.write_text(render_html(explanations), encoding="utf-8")
        click.echo(f"Wrote the segment timeline to {html_file}", err=True)


@explain_command.command("compaction")
@click.argument("log_dir", type=click.Path(file_okay=False, path_type=Path))
@broker_config_option
@click.option("--topic", required=True)
@click.option("--partition", type=int, help="One partition (else every partition).")
@click.option("--no-estimate", is_flag=True, help="Skip the dry-run clean that estimates the size after cleaning.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the segments (clean, dirty, uncleanable, active) on an offset axis to this HTML file.",
)
def explain_compaction_command(
    log_dir: Path,
    config_file: Path | None,
    topic: str,
    partition: int | None,
    no_estimate: bool,
    html_file: Path | None,
) -> None:
    """For each partition of TOPIC in LOG_DIR: the dirty section, what bounds it, the dirty ratio, whether the
    cleaner would clean it now and why, and the size one clean would leave (a dry run; nothing is written)."""
    with private_copy_manager(log_dir, config_file, topic, partition) as manager:
        partitions = (
            [partition] if partition is not None else [p.partition for p in manager.describe_topic(topic).partitions]
        )
        explanations = [manager.explain_compaction(topic, p, estimate=not no_estimate) for p in partitions]
    console = Console(width=200) if not Console().is_terminal else Console()
    for explanation in explanations:
        console.print(compaction_table(explanation))
        console.print(explanation.summary)
    if html_file is not None:
        html_file.write_text(render_compaction_html(explanations), encoding="utf-8")
        click.echo(f"Wrote the segment map to {html_file}", err=True)


def compaction_table(e: CompactionExplanation) -> Table:
    """One partition's compaction explanation as a two-column table."""
    table = Table(title=f"{e.topic}-{e.partition}: cleanup.policy {','.join(e.cleanup_policy)}")
    table.add_column("what")
    table.add_column("value", justify="left")
    rows = [
        ("offsets", f"{e.log_start_offset:,}..{e.log_end_offset:,}"),
        ("first dirty offset", f"{e.first_dirty_offset:,} (from the {e.first_dirty_source})"),
        ("first uncleanable offset", f"{e.first_uncleanable_offset:,} (bounded by {e.uncleanable_bound})"),
        ("clean bytes", f"{e.clean_bytes:,}"),
        ("cleanable (dirty) bytes", f"{e.cleanable_bytes:,}"),
        ("dirty ratio", f"{e.dirty_ratio:.3f} (min.cleanable.dirty.ratio {e.min_cleanable_dirty_ratio})"),
        ("compaction delay", f"{e.max_compaction_delay_ms:,} ms past max.compaction.lag.ms"),
        ("cleaner state", e.state),
        ("eligible now", "yes" if e.eligible else "no"),
    ]
    if e.expected_size_after is not None:
        saved = e.size_now - e.expected_size_after
        rows.append(("size after one clean", f"{e.expected_size_after:,} bytes ({saved:,} fewer)"))
        rows.append(("records kept / read", f"{e.expected_records_kept:,} / {e.expected_records_read:,}"))
    if e.last_clean is not None and e.last_clean.last_clean_ms is not None:
        rows.append(
            ("last clean", f"{_when(e.last_clean.last_clean_ms)} UTC, up to offset {e.last_clean.end_offset:,}")
        )
    for what, value in rows:
        table.add_row(what, value)
    return table


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _table(e: RetentionExplanation) -> Table:
    table = Table(
        title=f"{e.topic}-{e.partition}: policy {e.policy}, retention.ms {e.retention_ms}, "
        f"retention.bytes {e.retention_bytes}, offsets {e.log_start_offset}..{e.log_end_offset} "
        f"(HW {e.high_watermark}), {e.total_bytes:,} bytes"
    )
    for column in (
        "base offset",
        "next offset",
        "bytes",
        "largest timestamp (UTC)",
        "rule",
        "deleted at (UTC)",
        "files gone (UTC)",
        "why",
    ):
        table.add_column(column, justify="left" if column == "why" else "right")
    for s in e.segments:
        table.add_row(
            f"{s.base_offset:,}",
            f"{s.next_offset:,}",
            f"{s.size_bytes:,}",
            _when(s.largest_timestamp) + (" (mtime)" if s.largest_timestamp_source == "mtime" else ""),
            s.rule or "-",
            _when(s.deleted_at_ms),
            _when(s.files_gone_at_ms),
            s.reason,
        )
    return table


def render_html(explanations: list[RetentionExplanation]) -> str:
    """A self-contained HTML page: per partition, segments drawn on an offset axis and a time axis."""
    parts = [
        "<!doctype html><meta charset='utf-8'><title>kafkalog retention timeline</title>",
        "<style>body{font-family:sans-serif;margin:2em} svg{border:1px solid #ccc;background:#fafafa}"
        " td,th{padding:2px 8px;text-align:left} .legend span{display:inline-block;width:1em;height:1em;"
        "margin:0 .3em 0 1em;vertical-align:middle}</style>",
        "<h1>Retention timeline</h1><p class='legend'>"
        "<span style='background:#d9534f'></span>deleted at the next check"
        "<span style='background:#f0ad4e'></span>will be deleted later"
        "<span style='background:#5bc0de'></span>kept (no deletion foreseen)"
        "<span style='background:#5cb85c'></span>active segment</p>",
    ]
    for e in explanations:
        parts.append(_partition_svg(e))
    return "\n".join(parts)


def _color(s) -> str:
    if s.deletable_now:
        return "#d9534f"
    if s.is_active:
        return "#5cb85c"
    return "#f0ad4e" if s.deleted_at_ms is not None else "#5bc0de"


def _partition_svg(e: RetentionExplanation) -> str:
    width, bar = 1000, 30
    segs = e.segments
    lo = min((s.base_offset for s in segs), default=0)
    hi = max((s.next_offset for s in segs), default=lo + 1)
    span = max(hi - lo, 1)
    times = [s.largest_timestamp for s in segs] + [e.next_check_ms]
    horizon = e.next_check_ms - e.retention_ms if e.retention_ms >= 0 else None
    if horizon is not None:
        times.append(horizon)
    t_lo, t_hi = min(times), max(times)
    t_span = max(t_hi - t_lo, 1)
    rows = []
    for s in segs:
        x = (s.base_offset - lo) / span * width
        w = max((s.next_offset - s.base_offset) / span * width, 2)
        tip = html.escape(
            f"segment {s.base_offset}..{s.next_offset - 1}, {s.size_bytes} bytes, largest timestamp "
            f"{_when(s.largest_timestamp)}: {s.reason}"
        )
        rows.append(
            f"<rect x='{x:.1f}' y='20' width='{w:.1f}' height='{bar}' fill='{_color(s)}' stroke='#333'>"
            f"<title>{tip}</title></rect>"
        )
        tx = (s.largest_timestamp - t_lo) / t_span * width
        rows.append(
            f"<circle cx='{tx:.1f}' cy='{95}' r='5' fill='{_color(s)}' stroke='#333'><title>{tip}</title></circle>"
        )
    if horizon is not None:
        hx = (horizon - t_lo) / t_span * width
        rows.append(
            f"<line x1='{hx:.1f}' y1='75' x2='{hx:.1f}' y2='115' stroke='#d9534f' stroke-dasharray='4'/>"
            f"<text x='{hx + 4:.1f}' y='125' font-size='11'>retention horizon at the next check "
            f"({html.escape(_when(horizon))})</text>"
        )
    svg = (
        f"<svg width='{width}' height='140' viewBox='-5 0 {width + 10} 140'>"
        f"<text x='0' y='14' font-size='12'>offsets {lo:,} .. {hi - 1:,}</text>"
        f"<text x='0' y='72' font-size='12'>largest timestamps {html.escape(_when(t_lo))} .. "
        f"{html.escape(_when(t_hi))}</text>{''.join(rows)}</svg>"
    )
    table_rows = "".join(
        f"<tr><td>{s.base_offset}</td><td>{s.size_bytes}</td><td>{html.escape(_when(s.largest_timestamp))}</td>"
        f"<td>{html.escape(s.rule or '-')}</td><td>{html.escape(_when(s.files_gone_at_ms))}</td>"
        f"<td>{html.escape(s.reason)}</td></tr>"
        for s in segs
    )
    return (
        f"<h2>{html.escape(e.topic)}-{e.partition}</h2><p>{html.escape(e.summary)}</p>{svg}"
        "<table><tr><th>base offset</th><th>bytes</th><th>largest timestamp (UTC)</th><th>rule</th>"
        f"<th>files gone (UTC)</th><th>why</th></tr>{table_rows}</table>"
    )


_SECTION_COLORS = {"clean": "#5bc0de", "dirty": "#f0ad4e", "uncleanable": "#999999", "active": "#5cb85c"}


def render_compaction_html(explanations: list[CompactionExplanation]) -> str:
    """A self-contained HTML page: per partition, its segments on an offset axis coloured by cleaner section."""
    legend = "".join(f"<span style='background:{color}'></span>{name}" for name, color in _SECTION_COLORS.items())
    parts = [
        "<!doctype html><meta charset='utf-8'><title>kafkalog compaction map</title>",
        "<style>body{font-family:sans-serif;margin:2em} svg{border:1px solid #ccc;background:#fafafa}"
        " .legend span{display:inline-block;width:1em;height:1em;margin:0 .3em 0 1em;vertical-align:middle}</style>",
        f"<h1>Compaction map</h1><p class='legend'>{legend}</p>",
    ]
    width = 1000
    for e in explanations:
        segs = e.segments
        lo = min((s.base_offset for s in segs), default=0)
        hi = max((s.next_offset for s in segs), default=lo + 1)
        span = max(hi - lo, 1)
        rects = []
        for s in segs:
            x = (s.base_offset - lo) / span * width
            w = max((s.next_offset - s.base_offset) / span * width, 2)
            tip = html.escape(f"segment {s.base_offset}..{s.next_offset - 1}, {s.size_bytes} bytes: {s.section}")
            rects.append(
                f"<rect x='{x:.1f}' y='20' width='{w:.1f}' height='30' fill='{_SECTION_COLORS[s.section]}' "
                f"stroke='#333'><title>{tip}</title></rect>"
            )
        dirty_x = (e.first_dirty_offset - lo) / span * width
        rects.append(
            f"<line x1='{dirty_x:.1f}' y1='15' x2='{dirty_x:.1f}' y2='55' stroke='#d9534f' stroke-dasharray='4'/>"
            f"<text x='{dirty_x + 4:.1f}' y='68' font-size='11'>first dirty offset {e.first_dirty_offset:,}</text>"
        )
        parts.append(
            f"<h2>{html.escape(e.topic)}-{e.partition}</h2><p>{html.escape(e.summary)}</p>"
            f"<svg width='{width}' height='80' viewBox='-5 0 {width + 10} 80'>"
            f"<text x='0' y='14' font-size='12'>offsets {lo:,} .. {hi - 1:,}</text>{''.join(rects)}</svg>"
        )
    return "\n".join(parts)
