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
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..cleaner.explain import CompactionExplanation
from ..retention import RetentionExplanation
from .common import broker_config_option, private_copy_manager


@click.group("explain")
def explain_command() -> None:
    """Explain what the log manager will do to a topic's data."""


def _explain_options(html_help: str, *extra: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """What both explain commands take: LOG_DIR, the broker's --config, --topic, --partition, the command's own
    ``extra`` options, and --html (what the HTML file shows: ``html_help``)."""
    options = [
        click.argument("log_dir", type=click.Path(file_okay=False, path_type=Path)),
        broker_config_option,
        click.option("--topic", required=True),
        click.option("--partition", type=int, help="One partition (else every partition)."),
        *extra,
        click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), help=html_help),
    ]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _show(
    explanations: list[Any],
    table: Callable[[Any], Table],
    html_file: Path | None,
    html: Callable[[list[Any]], str],
    what: str,
) -> None:
    """Each explanation as its table and summary line, then, with --html, the page ``html`` renders written
    there."""
    console = Console(width=200) if not Console().is_terminal else Console()
    for explanation in explanations:
        console.print(table(explanation))
        console.print(explanation.summary)
    if html_file is not None:
        html_file.write_text(html(explanations), encoding="utf-8")
        click.echo(f"Wrote the {what} to {html_file}", err=True)


@explain_command.command("retention")
@_explain_options("Also write a segment timeline to this HTML file.")
def explain_retention_command(
    log_dir: Path, config_file: Path | None, topic: str, partition: int | None, html_file: Path | None
) -> None:
    """For each segment of TOPIC in LOG_DIR: its offsets, largest timestamp, size, and the rule that will
    delete it (or why none can yet), with the time of the retention check that will and when its files go."""
    with private_copy_manager(log_dir, config_file, topic, partition) as manager:
        explanations = manager.explain_retention(topic, partition)
    _show(explanations, _table, html_file, render_html, "segment timeline")


@explain_command.command("compaction")
@_explain_options(
    "Also write the segments (clean, dirty, uncleanable, active) on an offset axis to this HTML file.",
    click.option("--no-estimate", is_flag=True, help="Skip the dry-run clean that estimates the size after cleaning."),
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
    _show(explanations, compaction_table, html_file, render_compaction_html, "segment map")


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
    for column in RETENTION_COLUMNS:
        table.add_column(column, justify="left" if column == "why" else "right")
    for s in e.segments:
        table.add_row(*_row(s, s.reason))
    return table


# The CLI table's columns, in its order: the HTML shows every one of them, in the chart's hover text and the table.
RETENTION_COLUMNS = (
    "base offset",
    "next offset",
    "bytes",
    "largest timestamp (UTC)",
    "rule",
    "deleted at (UTC)",
    "files gone (UTC)",
    "why",
)
_STATE_COLORS = {
    "deleted at the next check": "#d9534f",
    "deleted later": "#f0ad4e",
    "kept (no deletion foreseen)": "#5bc0de",
    "active segment": "#5cb85c",
}


def _state(s) -> str:
    if s.deletable_now:
        return "deleted at the next check"
    if s.is_active and s.deleted_at_ms is None:
        return "active segment"
    return "deleted later" if s.deleted_at_ms is not None else "kept (no deletion foreseen)"


def _row(s, why: str | None = None) -> list[str]:
    """A segment's cells in RETENTION_COLUMNS' order, as the CLI table prints them; ``why`` is the reason as the
    caller shows it (the HTML's, by default, with its times in one format: UTC, seconds)."""
    return [
        f"{s.base_offset:,}",
        f"{s.next_offset:,}",
        f"{s.size_bytes:,}",
        _when(s.largest_timestamp) + (" (mtime)" if s.largest_timestamp_source == "mtime" else ""),
        s.rule or "-",
        _when(s.deleted_at_ms),
        _when(s.files_gone_at_ms),
        one_time_format(s.reason) if why is None else why,
    ]


def _or(ms: int | None, default: int) -> int:
    return default if ms is None else ms


_EPOCH_AND_ISO = re.compile(r"\b(1\d{12}) \(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z(?:, ([^)]*))?\)")
_EPOCH = re.compile(r"\b1\d{12}\b")


def one_time_format(text: str) -> str:
    """The explainer's prose gives times as epoch milliseconds, mostly with their ISO form in parentheses; the
    page shows each as the table does (UTC, to the second), so that one format is used throughout."""

    def both(m: re.Match[str]) -> str:
        return _when(int(m.group(1))) + (f" ({m.group(2)})" if m.group(2) else "")

    return _EPOCH.sub(lambda m: _when(int(m.group(0))), _EPOCH_AND_ISO.sub(both, text))


def _iso(ms: int) -> str:
    """A time for plotly's date axis: UTC, to the millisecond, as a naive ISO string (plotly draws it as given)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def retention_figure(e: RetentionExplanation, now_ms: int) -> dict:
    """The plotly figure (as JSON-able data) of one partition's retention timeline.

    One row per segment on a time axis: a bar from its largest timestamp to the time its files go (to the axis'
    end, faded, when no deletion is foreseen), a mark where the retention check renames it ``.deleted``; a
    labelled line at now, one at the next retention check, and the retention horizon of that check. The axis runs
    from the oldest segment's largest timestamp to the last files-gone time (or now, when later), padded 5%,
    so every segment is visible whatever the spread of timestamps. The hover text has every column of the
    CLI table."""
    import plotly.graph_objects as go

    segs = e.segments
    horizon = e.next_check_ms - e.retention_ms if e.retention_ms >= 0 else None
    times = [s.largest_timestamp for s in segs] + [now_ms]
    times += [s.files_gone_at_ms for s in segs if s.files_gone_at_ms is not None]
    start, end = min(times), max(times)
    pad = max((end - start) // 20, 1000)
    lo, hi = start - pad, end + pad
    fig = go.Figure()
    labels = [f"{s.base_offset:,}..{s.next_offset - 1:,}" for s in segs]
    hover = "<br>".join(f"{c}: %{{customdata[{i}]}}" for i, c in enumerate(RETENTION_COLUMNS)) + "<extra></extra>"
    for state, color in _STATE_COLORS.items():
        chosen = [i for i, s in enumerate(segs) if _state(s) == state]
        if not chosen:
            continue
        ends = [_or(segs[i].files_gone_at_ms, hi) for i in chosen]
        fig.add_trace(
            go.Bar(
                name=state,
                orientation="h",
                y=[labels[i] for i in chosen],
                base=[_iso(segs[i].largest_timestamp) for i in chosen],
                x=[max(end_ - segs[i].largest_timestamp, 1) for i, end_ in zip(chosen, ends, strict=True)],
                marker={"color": color, "opacity": 0.45 if state == "kept (no deletion foreseen)" else 0.9},
                customdata=[_row(segs[i]) for i in chosen],
                hovertemplate=hover,
            )
        )
    deleted = [i for i, s in enumerate(segs) if s.deleted_at_ms is not None]
    if deleted:
        fig.add_trace(
            go.Scatter(
                name="renamed .deleted (retention check)",
                mode="markers",
                y=[labels[i] for i in deleted],
                x=[_iso(_or(segs[i].deleted_at_ms, hi)) for i in deleted],
                marker={"symbol": "x", "size": 11, "color": "#333"},
                customdata=[_row(segs[i]) for i in deleted],
                hovertemplate=hover,
            )
        )
    lines = [("now", now_ms, "#000", "solid"), ("next retention check", e.next_check_ms, "#777", "dot")]
    if horizon is not None:
        lines.append(("retention horizon of the next check", horizon, "#d9534f", "dash"))
    for level, (text, when, color, dash) in enumerate(lines):
        if lo <= when <= hi:  # each label on its own level above the plot: lines seconds apart stay readable
            fig.add_vline(x=_iso(when), line={"color": color, "dash": dash, "width": 1.5})
            fig.add_annotation(
                x=_iso(when), y=1.0, yref="paper", yanchor="bottom", yshift=2 + 30 * level,
                text=f"{text}<br>{_when(when)}", showarrow=False, font={"size": 11, "color": color},
                bgcolor="rgba(255,255,255,0.85)",
            )  # fmt: skip
    fig.update_layout(
        title=f"{e.topic}-{e.partition}: retention.ms {e.retention_ms}, retention.bytes {e.retention_bytes}, "
        f"offsets {e.log_start_offset}..{e.log_end_offset}",
        barmode="overlay",
        height=300 + 28 * len(segs),
        margin={"t": 150, "b": 120},
        xaxis={"type": "date", "range": [_iso(lo), _iso(hi)], "tickformat": "%Y-%m-%d %H:%M:%S",
               "title": {"text": "time (UTC)"}},
        yaxis={"title": {"text": "segment (offsets)"}, "autorange": "reversed", "type": "category"},
    )  # fmt: skip
    return json.loads(fig.to_json())


def render_html(explanations: list[RetentionExplanation], now_ms: int | None = None) -> str:
    """A self-contained HTML page (plotly.js inline, no network needed): per partition, the retention timeline
    chart and the CLI table's every column. Each chart's figure is also in a ``<script type=application/json>``
    block, which is what the page draws (and what a test reads)."""
    from plotly.offline import get_plotlyjs

    now = int(time.time() * 1000) if now_ms is None else now_ms
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>kafkalog retention timeline</title>",
        f"<script>{get_plotlyjs()}</script>",
        "<style>body{font-family:sans-serif;margin:2em} td,th{padding:2px 8px;text-align:left;"
        "border-bottom:1px solid #ddd} table{border-collapse:collapse;font-size:13px}</style></head><body>",
        f"<h1>Retention timeline</h1><p>Times are UTC. Generated at {html.escape(_when(now))}.</p>",
    ]
    for n, e in enumerate(explanations):
        figure = json.dumps(retention_figure(e, now)).replace("</", "<\\/")
        header = "".join(f"<th>{html.escape(c)}</th>" for c in RETENTION_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in _row(s)) + "</tr>" for s in e.segments
        )
        parts.append(
            f"<h2>{html.escape(e.topic)}-{e.partition}</h2><p>{html.escape(one_time_format(e.summary))}</p>"
            f"<div id='chart-{n}' class='retention-chart'></div>"
            f"<script type='application/json' id='figure-{n}'>{figure}</script>"
            f"<script>(function(){{var f=JSON.parse(document.getElementById('figure-{n}').textContent);"
            f"Plotly.newPlot('chart-{n}',f.data,f.layout,{{responsive:true}});}})();</script>"
            f"<table><tr>{header}</tr>{body}</table>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


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
