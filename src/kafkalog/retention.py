"""Why is this data still here, and when will it go? Retention explained for one partition.

``explain_retention(log, now_ms=..., check_interval_ms=..., next_check_ms=...)`` asks the retention planner
(``storage.retention.plan_retention``, the one ``Log.delete_old_segments`` carries out) what the pass at ``now_ms``
deletes, without touching the log, and explains it (Kafka's UnifiedLog.deleteOldSegments, spec section 8):

1. three walks, in this order, each seeing what the previous one left: the log-start-offset rule (a segment
   goes when the *next* segment's base offset ≤ the log start offset), then, only when cleanup.policy has
   ``delete``, the size rule (oldest first while ``excess − size ≥ 0``) and the time rule
   (``now − largest timestamp > retention.ms``, strictly greater);
2. each walk goes oldest first and stops at the first segment it keeps, so one young segment (or one
   segment with a timestamp in the future) keeps every later one, however old;
3. a segment is deleted only when the high watermark ≥ its upper bound (the next segment's base offset,
   or the log end offset for the last one), and the last segment is never deleted while it is empty;
4. when a walk would delete every segment, the pass first rolls a new empty active segment at the log end
   offset, so the active segment *is* deleted once it qualifies (e.g. an idle topic whose data expired);
5. deleted segments are renamed ``.deleted`` at the check and removed ``file.delete.delay.ms`` later.

The forecast assumes nothing changes but the clock: no new records, the same high watermark and log
start offset. Under that assumption only the time rule can delete more later (the size and log-start
rules already did all they can at the next check). Checks run at ``next_check_ms + k × check_interval_ms``.

A record's real lifetime is therefore: the time until its segment's LARGEST timestamp is more than
retention.ms old (the segment keeps taking records until it rolls, at most segment.ms after its first
batch's timestamp), plus up to one check interval, plus file.delete.delay.ms; see
``worst_case_lifetime_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from .layout import INT64_MIN
from .storage.config import LogConfig
from .storage.log import Log
from .storage.retention import RULE_LOG_START, RULE_SIZE, RULE_TIME, Deletion, plan_retention
from .storage.segment import LogSegment


@dataclass
class SegmentRetention:
    """One segment: what the retention rules say about it now, and when (if ever) it will go.

    ``eligible_at_ms`` is the earliest time a check can delete it (for the time rule: the largest timestamp
    + retention.ms + 1, and no earlier than the older segments the walk must pass first); ``deleted_at_ms``
    is the first check at or after that, when its files are renamed ``.deleted``; ``files_gone_at_ms`` is
    ``deleted_at_ms`` + file.delete.delay.ms. All three are None when no rule will delete it unless
    something other than the clock changes (new data, the high watermark, the log start offset, configs).
    ``rolls_by_time_at_ms`` (active segment only): an append timestamped at or after it rolls the segment
    (segment.ms, measured from its first batch's timestamp); records timestamped earlier still join it.
    """

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp: int
    largest_timestamp_source: str  # 'records' or 'mtime'
    is_active: bool
    rule: str | None  # the rule deleting it now, or the one expected to at eligible_at_ms
    deletable_now: bool
    reason: str
    eligible_at_ms: int | None
    deleted_at_ms: int | None
    files_gone_at_ms: int | None
    rolls_by_time_at_ms: int | None = None


@dataclass
class RetentionExplanation:
    """The retention picture of one partition: its settings, offsets and every segment, oldest first."""

    topic: str
    partition: int
    policy: str
    retention_ms: int
    retention_bytes: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    total_bytes: int
    segments: list[SegmentRetention]
    next_deletion_ms: int | None
    summary: str
    check_interval_ms: int = 0
    next_check_ms: int = 0
    file_delete_delay_ms: int = 0
    worst_case_lifetime_ms: int | None = None


def worst_case_lifetime_ms(
    config: LogConfig, check_interval_ms: int, file_delete_delay_ms: int | None = None
) -> int | None:
    """The longest a record can stay on disk under time retention, from its timestamp to its files' removal.

    Its segment keeps taking records until it rolls: up to max segment.ms after the first batch's timestamp,
    so its largest timestamp can be that much later; deletion needs now − largest > retention.ms; the check
    that sees it comes up to one interval later; the files go file.delete.delay.ms after that. None when
    time retention does not apply. It assumes record timestamps near the clock (a future timestamp, or an
    older record landing in a later segment, pins data longer) and a high watermark that keeps up.
    """
    if not config.delete or config.retention_ms < 0:
        return None
    delay = config.file_delete_delay_ms if file_delete_delay_ms is None else file_delete_delay_ms
    return config.max_segment_ms + config.retention_ms + check_interval_ms + delay


@dataclass
class _Seg:
    """A segment as the simulated pass sees it."""

    base: int
    size: int
    largest: int
    source: str
    segment: LogSegment
    rule: str | None = None
    note: str = ""
    eligible: int | None = None

    @property
    def base_offset(self) -> int:  # the planner's RetentionSegment
        return self.base

    @property
    def largest_timestamp(self) -> int:
        return self.largest


def _upper(segs: list[_Seg], i: int, log_end: int) -> int:
    return segs[i + 1].base if i + 1 < len(segs) else log_end


def _segment_timestamps(segment: LogSegment) -> tuple[int, str]:
    """LogSegment.largestTimestamp and where it comes from (the records, or the .log file's mtime)."""
    if segment.size == 0:  # no records, so no timestamp (and no need to open its time index)
        return segment.log.last_modified_ms(), "mtime"
    ts = segment.max_timestamp_so_far
    if ts >= 0:
        return ts, "records"
    return segment.log.last_modified_ms(), "mtime"


def _first_batch_timestamp(segment: LogSegment) -> int | None:
    """The roll clock's start (LogSegment.rollingBasedTimestamp), read without caching it."""
    if segment.rolling_based_timestamp is not None:
        return segment.rolling_based_timestamp
    for header in segment.log.batch_headers():
        return header.max_timestamp
    return None


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return "out of range"


def _at(ms: int) -> str:
    return f"{ms} ({_iso(ms)})"


def _stamp(seg: _Seg) -> str:
    origin = "from its records" if seg.source == "records" else "the .log file's mtime: no record has a timestamp"
    return f"{seg.largest} ({_iso(seg.largest)}, {origin})"


def _duration(ms: int) -> str:
    """A short human duration: 90061001 → '1d 1h 1m 1.001s'."""
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    parts = [f"{days}d"] if days else []
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if rest or not parts:
        parts.append(f"{rest / 1000:g}s")
    return sign + " ".join(parts)


def _annotate(
    model: list[_Seg], deletions: list[Deletion], log_start: int, log_end: int, retention: tuple[int, int], now_ms: int
) -> list[_Seg]:
    """Mark the segments the plan deletes with their rule and why (and, time rule, when each qualified)."""
    retention_bytes, retention_ms = retention
    removed = []
    cumulative = INT64_MIN
    for deletion in deletions:
        seg = model[deletion.index]
        seg.rule = deletion.rule
        if deletion.rule == RULE_LOG_START:
            following = model[deletion.index + 1].base if deletion.index + 1 < len(model) else log_end
            seg.note = (
                f"the log start offset {log_start} ≥ the next segment's base offset {following} "
                "(moved by DeleteRecords or by an earlier deletion)"
            )
        elif deletion.rule == RULE_SIZE:
            seg.note = (
                f"the log is {deletion.log_bytes} bytes, {deletion.excess_bytes} over retention.bytes="
                f"{retention_bytes} (after the older segments this pass deletes), and its {seg.size} bytes fit in "
                "that excess"
            )
        else:
            cumulative = max(cumulative, seg.largest + retention_ms + 1)
            seg.eligible = cumulative
            seg.note = (
                f"its largest timestamp {_stamp(seg)} is {_duration(now_ms - seg.largest)}"
                f" old, more than retention.ms={retention_ms}"
            )
        removed.append(seg)
    return removed


@dataclass
class _Context:
    """One explanation's inputs: the log's snapshot, its config, the clock and the retention check schedule."""

    config: LogConfig
    now_ms: int
    log_start: int  # after the pass at now_ms
    log_end: int
    hw: int
    active: LogSegment | None
    first_ts: int | None  # the active segment's first batch timestamp
    active_created: int
    jitter: int
    next_check_ms: int
    check_interval_ms: int
    delay: int
    total: int

    def first_check(self, at: int) -> int:
        """The first retention check at or after ``at``."""
        if at <= self.next_check_ms:
            return self.next_check_ms
        return self.next_check_ms + -(-(at - self.next_check_ms) // self.check_interval_ms) * self.check_interval_ms


def explain_retention(
    log: Log,
    *,
    now_ms: int,
    check_interval_ms: int,
    next_check_ms: int,
    file_delete_delay_ms: int | None = None,
) -> RetentionExplanation:
    """Explain, segment by segment, what Log.delete_old_segments would do at ``now_ms`` and when the
    segments it keeps will go if only the clock moves (the log is not changed)."""
    if check_interval_ms <= 0:
        raise ValueError(f"check_interval_ms must be positive, not {check_interval_ms}")
    if next_check_ms < now_ms:
        raise ValueError(f"next_check_ms {next_check_ms} is before now_ms {now_ms}")
    config = log.config
    delay = config.file_delete_delay_ms if file_delete_delay_ms is None else file_delete_delay_ms
    retention_ms, retention_bytes = config.retention_ms, config.retention_bytes

    with log._lock:  # a consistent snapshot against concurrent appends and retention passes
        segments = list(log.segments)
        log_start, log_end, hw = log.log_start_offset, log.log_end_offset, log.high_watermark
        model = []
        for segment in segments:
            largest, source = _segment_timestamps(segment)
            model.append(_Seg(segment.base_offset, segment.size, largest, source, segment))
        active = segments[-1] if segments else None
        first_ts = _first_batch_timestamp(active) if active is not None and active.size > 0 else None
        active_created = active.created_ms if active is not None else 0
        jitter = active.rolling_jitter_ms if active is not None else 0

    next_of = {s.base: _upper(model, i, log_end) for i, s in enumerate(model)}
    total = sum(s.size for s in model)
    plan = plan_retention(
        model,
        log_start_offset=log_start,
        log_end_offset=log_end,
        high_watermark=hw,
        delete_policy=config.delete,
        retention_bytes=retention_bytes,
        retention_ms=retention_ms,
        now_ms=now_ms,
    )
    removed = _annotate(model, plan.deletions, log_start, log_end, (retention_bytes, retention_ms), now_ms)
    ctx = _Context(
        config, now_ms, plan.log_start_offset, log_end, hw, active, first_ts, active_created, jitter, next_check_ms,
        check_interval_ms, delay, total,
    )  # fmt: skip
    results = {seg.base: _deleted_now(ctx, seg, next_of[seg.base]) for seg in removed}
    results.update(_kept(ctx, [s for s in model if s.rule is None], next_of))
    ordered = [results[s.base] for s in model]
    pending = [s.deleted_at_ms for s in ordered if s.deleted_at_ms is not None]
    next_deletion = min(pending) if pending else None
    worst = worst_case_lifetime_ms(config, check_interval_ms, delay)
    rolled = plan.rolled_by is not None
    summary = _summary(
        log, config, ordered, total, log_start, log_end, hw, next_check_ms, next_deletion, delay, worst, rolled
    )
    return RetentionExplanation(
        log.topic, log.partition, ",".join(config.cleanup_policy), retention_ms, retention_bytes, log_start, log_end,
        hw, total, ordered, next_deletion, summary, check_interval_ms, next_check_ms, delay, worst,
    )  # fmt: skip


def _deleted_now(ctx: _Context, seg: _Seg, next_offset: int) -> SegmentRetention:
    """A segment the check at now deletes: by which rule, why, and when its files go."""
    is_active = seg.segment is ctx.active
    eligible = seg.eligible if seg.rule == RULE_TIME and seg.eligible is not None else ctx.now_ms
    reason = f"deletable now: {seg.rule}: {seg.note}"
    if is_active:
        reason += (
            f"; it is the active segment, and since every segment goes, the check first rolls a new empty "
            f"segment at offset {ctx.log_end}"
        )
    deleted = ctx.first_check(eligible)
    return SegmentRetention(
        seg.base, next_offset, seg.size, seg.largest, seg.source, is_active, seg.rule, True, reason,
        eligible, deleted, deleted + ctx.delay,
    )  # fmt: skip


def _why_kept(ctx: _Context, seg: _Seg, following: _Seg | None, blocker: tuple[int, str] | None) -> str:
    """Why the check at now keeps ``seg`` (``blocker``: the first kept segment's base and reason)."""
    config, now_ms, retention_ms = ctx.config, ctx.now_ms, ctx.config.retention_ms
    upper = following.base if following is not None else ctx.log_end
    own_e = seg.largest + retention_ms + 1
    if not config.delete:
        why = (
            f"kept: cleanup.policy={','.join(config.cleanup_policy)} has no 'delete', so retention.ms and "
            f"retention.bytes do not apply; only the log-start-offset rule deletes segments"
        )
        if following is None:
            return why + ", and never the last one"
        return why + f", once the log start offset (now {ctx.log_start}) reaches {following.base}"
    if following is None and seg.size == 0:
        return "kept: the empty active segment; a log always keeps one segment and an empty last one is never deleted"
    if ctx.hw < upper:
        upper_name = f"next segment {upper}" if following is not None else f"log end {upper}"
        return (
            f"kept: above the high watermark (HW {ctx.hw} < {upper_name}); it waits for the high watermark to advance"
        )
    if retention_ms < 0:
        return "kept: retention.ms=-1 (infinite)"
    if now_ms - seg.largest <= retention_ms:
        if seg.largest > now_ms:
            return (
                f"kept: its largest timestamp {_stamp(seg)} is "
                f"{_duration(seg.largest - now_ms)} in the future, which pins it until "
                f"{_at(own_e)} (largest timestamp + retention.ms + 1)"
            )
        return (
            f"kept: retention.ms={retention_ms}: its largest timestamp {_stamp(seg)} is "
            f"{_duration(now_ms - seg.largest)} old; the rule is strictly 'older than', so it qualifies at "
            f"{_at(own_e)}"
        )
    return (
        f"kept: an older segment (offset {blocker[0] if blocker else '?'}) is kept ({blocker[1] if blocker else ''}), "
        f"and the walk stops at the first kept segment; on its own this one is past retention.ms (largest "
        f"timestamp {_stamp(seg)} is {_duration(now_ms - seg.largest)} old)"
    )


def _roll_note(ctx: _Context, eligible: int | None) -> tuple[int, str]:
    """(the time from which an append rolls the active segment, what to say about it)."""
    config, first_ts, jitter = ctx.config, ctx.first_ts, ctx.jitter
    limit = config.max_segment_ms - jitter
    if first_ts is not None and first_ts >= 0:
        rolls_at = first_ts + limit + 1
        roll_clock = (
            f"the first append timestamped at or after {_at(rolls_at)} (its first batch's timestamp "
            f"{first_ts} + segment.ms {config.max_segment_ms}" + (f" − jitter {jitter}" if jitter else "") + " + 1)"
        )
    else:
        rolls_at = ctx.active_created + limit + 1
        roll_clock = f"the first append at or after {_at(rolls_at)} (segment creation + segment.ms + 1)"
    if eligible is not None:
        return rolls_at, (
            "; it is the active segment: if no more records arrive, the check that deletes it rolls a new "
            "empty segment first; records appended before it rolls (it rolls on "
            f"{roll_clock}, or on one that does not fit in segment.bytes={config.segment_bytes}) raise its "
            "largest timestamp and can postpone that"
        )
    return rolls_at, f"; it is the active segment and rolls on {roll_clock}, or on one that would not fit"


def _kept(ctx: _Context, kept: list[_Seg], next_of: dict[int, int]) -> dict[int, SegmentRetention]:
    """What is kept, why, and when the time rule will take it if only the clock moves."""
    config, retention_ms, retention_bytes = ctx.config, ctx.config.retention_ms, ctx.config.retention_bytes
    kept_total = sum(s.size for s in kept)
    results: dict[int, SegmentRetention] = {}
    blocker: tuple[int, str] | None = None
    cumulative_eligible: int | None = None
    forecast_blocked = not config.delete or retention_ms < 0
    cum_size = 0
    for i, seg in enumerate(kept):
        following = kept[i + 1] if i + 1 < len(kept) else None
        upper = following.base if following is not None else ctx.log_end
        is_active = seg.segment is ctx.active
        cum_size += seg.size
        own_e = seg.largest + retention_ms + 1
        above_hw = ctx.hw < upper
        last_and_empty = following is None and seg.size == 0
        expired = retention_ms >= 0 and ctx.now_ms - seg.largest > retention_ms
        why = _why_kept(ctx, seg, following, blocker)
        if blocker is None:
            blocker = (seg.base, why.removeprefix("kept: "))

        # Forecast: only the time rule deletes more while only the clock moves.
        eligible = None
        if not forecast_blocked and not above_hw and not last_and_empty:
            cumulative_eligible = own_e if cumulative_eligible is None else max(cumulative_eligible, own_e)
            eligible = cumulative_eligible
            if eligible > own_e and expired is False:
                why += f"; not before {_at(eligible)}, when the older segments the walk must pass first qualify"
        else:
            forecast_blocked = True

        if config.delete and retention_bytes >= 0 and not is_active and not last_and_empty and not above_hw:
            more = cum_size + retention_bytes - kept_total
            why += (
                f"; retention.bytes={retention_bytes}: the log ({kept_total} bytes"
                + (" after this check" if kept_total != ctx.total else "")
                + f") must grow by {more} more bytes before the size rule deletes it"
            )
        elif config.delete and retention_bytes < 0 and retention_ms < 0:
            why += "; retention.bytes=-1 (unlimited)"
        if seg.base < ctx.log_start < upper:
            why += (
                f"; the log start offset {ctx.log_start} is inside it: offsets below it can no longer be read, "
                f"but the segment stays until the log start reaches {upper}"
            )
        rolls_at = None
        if is_active and seg.size > 0:
            rolls_at, note = _roll_note(ctx, eligible)
            why += note
        deleted = ctx.first_check(eligible) if eligible is not None else None
        results[seg.base] = SegmentRetention(
            seg.base, next_of[seg.base], seg.size, seg.largest, seg.source, is_active,
            RULE_TIME if eligible is not None else None, False, why, eligible, deleted,
            deleted + ctx.delay if deleted is not None else None, rolls_at,
        )  # fmt: skip
    return results


def _summary(
    log: Log,
    config: LogConfig,
    segments: list[SegmentRetention],
    total: int,
    log_start: int,
    log_end: int,
    hw: int,
    next_check_ms: int,
    next_deletion: int | None,
    delay: int,
    worst: int | None,
    rolled: bool,
) -> str:
    lines = [
        f"{log.topic}-{log.partition}: {len(segments)} segment(s), {total} bytes, offsets {log_start}..{log_end} "
        f"(HW {hw}); cleanup.policy={','.join(config.cleanup_policy)}, retention.ms={config.retention_ms}, "
        f"retention.bytes={config.retention_bytes}, file.delete.delay.ms={delay}."
    ]
    now = [s for s in segments if s.deletable_now]
    if now:
        rules = sorted({s.rule for s in now if s.rule})
        lines.append(
            f"Deletable now: {len(now)} segment(s), offsets {now[0].base_offset}..{now[-1].next_offset - 1}, by "
            f"{', '.join(rules)}; the check at {_at(next_check_ms)} renames them .deleted and their files go at "
            f"{_at(next_check_ms + delay)}."
            + (" Every segment goes, so it first rolls an empty one." if rolled else "")
        )
    later = [s for s in segments if not s.deletable_now and s.deleted_at_ms is not None]
    if later:
        first = later[0]
        lines.append(
            f"Next by time: segment {first.base_offset} (offsets {first.base_offset}..{first.next_offset - 1}) "
            f"qualifies at {_at(first.eligible_at_ms or 0)}, is deleted at the check at {_at(first.deleted_at_ms or 0)}"
            f" and its files go at {_at(first.files_gone_at_ms or 0)}, if only the clock moves."
        )
    kept = [s for s in segments if not s.deletable_now]
    if kept and kept[0].deleted_at_ms is None:
        lines.append(f"Segment {kept[0].base_offset} stays (and with it every later one): {kept[0].reason}.")
    if next_deletion is None:
        lines.append("No deletion is due unless new data, the high watermark, the log start offset or configs change.")
    if worst is not None:
        lines.append(
            f"Worst case for a record written now: segment.ms {config.max_segment_ms} + retention.ms "
            f"{config.retention_ms} + check interval + file.delete.delay.ms = {_duration(worst)} "
            "(more with future timestamps or a lagging high watermark)."
        )
    return "\n".join(lines)
