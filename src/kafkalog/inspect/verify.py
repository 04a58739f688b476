"""``verify``'s engine: check a log dir, or one partition directory, without writing anything (docs/log-format.md
sections 1, 3, 4, 5, 9 and 10).

Every batch: the size field and the CRC, and bytes at the end that do not form a batch. Offsets: increasing across
batches and segments (an overlap or a decrease is a problem; a gap is a note, since compaction removes offsets), a
segment's base offset <= its first batch's, offsets within the 4-byte relative range. The offset index against the
log: entries strictly increasing, each at the start of a batch, its offset not in an earlier batch (a lookup would
skip records) and equal to the last offset of a batch, nothing past the data. The time index: timestamps and
offsets non-decreasing, offsets within the segment, each timestamp <= the largest timestamp of the batches up to its
offset. ``.txnindex`` entries, producer snapshots (CRC), the ``leader-epoch-checkpoint``. The root checkpoints:
readable, recovery point and high watermark <= log end, log start offset within [first segment base, log end], and
no entry for a partition whose directory is missing.

Findings are *problems* (the CLI exits 1) or *notes* (legitimate oddities worth knowing).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..layout import CLEAN_SHUTDOWN_FILE, LOG_SUFFIX, ROOT_CHECKPOINTS, parse_partition_dir
from ..storage.checkpoints import CheckpointError, OffsetFormatter
from .findings import NOTE, PROBLEM, Finding, PartitionReport, ScanOptions, VerifyResult
from .partition_scan import is_partition_dir, read_checkpoint, scan_partition

__all__ = ["check_checkpoints", "is_partition_dir", "scan_partition", "total_log_bytes", "verify_path"]


def _checkpoint_line(path: Path, topic: str, partition: int) -> int | None:
    """The 1-based line of ``<topic> <partition> ...`` in a checkpoint file (for locating a finding)."""
    try:
        lines = path.read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for number, line in enumerate(lines, start=1):
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == str(partition):
            return number
    return None


TopicPartition = tuple[str, int]
Missing = dict[TopicPartition, list[tuple[str, int]]]  # partition -> [(checkpoint name, offset)]


def _read_root_checkpoints(log_dir: Path, findings: list[Finding]) -> dict[str, dict[TopicPartition, int]]:
    """The root offset checkpoints that exist and parse, by name (an unreadable one becomes a finding)."""
    values: dict[str, dict[TopicPartition, int]] = {}
    for name in ROOT_CHECKPOINTS:
        path = log_dir / name
        if not path.is_file():
            continue
        try:
            values[name] = dict(read_checkpoint(path, 0, OffsetFormatter()))
        except CheckpointError as e:
            findings.append(Finding(PROBLEM, path, f"unreadable checkpoint: {e.reason}"))
    return values


def _entry_finding(name: str, tp: TopicPartition, offset: int, report: PartitionReport) -> tuple[str, str] | None:
    """(severity, message) when checkpoint ``name``'s ``offset`` for ``tp`` does not fit the scanned partition."""
    leo, first = report.log_end_offset, report.first_base
    label = f"{tp[0]}-{tp[1]}"
    if leo is None or first is None:
        return (PROBLEM, f"{label}: {offset} but the partition has no segments") if offset > 0 else None
    if name == "recovery-point-offset-checkpoint" and offset > leo:
        return PROBLEM, f"{label}: recovery point {offset} is beyond the log end offset {leo} (stale checkpoint)"
    if name == "replication-offset-checkpoint" and offset > leo:
        return PROBLEM, f"{label}: high watermark {offset} is beyond the log end offset {leo}"
    if name == "log-start-offset-checkpoint" and not first <= offset <= leo:
        return (
            PROBLEM,
            f"{label}: log start offset {offset} is outside [first segment base {first}, log end offset {leo}]",
        )
    if name == "cleaner-offset-checkpoint" and offset > leo:
        return NOTE, f"{label}: cleaner offset {offset} is beyond the log end {leo}; the cleaner resets it"
    return None


def _missing_findings(log_dir: Path, missing: Missing, partial: bool) -> list[Finding]:
    """Checkpoint entries of partitions with no directory: a problem when they held data (unless ``partial``)."""
    findings: list[Finding] = []
    empty: list[str] = []
    for tp, entries in sorted(missing.items()):
        label = f"{tp[0]}-{tp[1]}"
        names = ", ".join(f"{n}={o}" for n, o in entries)
        path = log_dir / entries[0][0]
        line = _checkpoint_line(path, *tp)
        if all(o == 0 for _, o in entries):
            empty.append(label)
        elif partial:
            findings.append(
                Finding(NOTE, path, f"{label} has no directory ({names}); --partial: a partial copy", line=line)
            )
        else:
            message = f"{label} has no directory, but the checkpoints say it held data ({names})"
            findings.append(Finding(PROBLEM, path, message, line=line))
    if empty:
        shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        message = (
            f"{len(empty)} checkpointed partition(s) have no directory, all at offset 0 (empty partitions, "
            f"nothing lost): {shown}"
        )
        findings.append(Finding(NOTE, log_dir, message))
    return findings


def check_checkpoints(
    log_dir: Path, partitions: dict[TopicPartition, PartitionReport], only: TopicPartition | None, partial: bool
) -> list[Finding]:
    """The root offset checkpoints against the partitions found (``only``: check just that partition's entries)."""
    findings: list[Finding] = []
    missing: Missing = {}
    for name, entries in _read_root_checkpoints(log_dir, findings).items():
        path = log_dir / name
        for tp, offset in entries.items():
            if only is not None and tp != only:
                continue
            report = partitions.get(tp)
            if report is None:
                missing.setdefault(tp, []).append((name, offset))
                continue
            found = _entry_finding(name, tp, offset, report)
            if found is not None:
                findings.append(Finding(found[0], path, found[1], line=_checkpoint_line(path, *tp)))
    return findings + _missing_findings(log_dir, missing, partial)


def verify_path(target: Path, options: ScanOptions) -> VerifyResult:
    """Verify a log dir or one partition directory; nothing is written."""
    target = Path(target)
    if is_partition_dir(target):
        parent = target.parent
        options.clean_shutdown = (parent / CLEAN_SHUTDOWN_FILE).exists()
        report = scan_partition(target, options)
        findings: list[Finding] = []
        try:
            tp = parse_partition_dir(target.name)
        except ValueError:
            tp = None
        if tp is not None and any((parent / n).is_file() for n in ROOT_CHECKPOINTS):
            findings = check_checkpoints(parent, {tp: report}, tp, options.partial)
        return VerifyResult(target, [report], findings)
    options.clean_shutdown = (target / CLEAN_SHUTDOWN_FILE).exists()
    reports: dict[tuple[str, int], PartitionReport] = {}
    renamed: list[PartitionReport] = []
    findings = []
    for path in sorted(target.iterdir()):
        if not path.is_dir() or path.name.startswith("."):
            continue
        try:
            tp = parse_partition_dir(path.name)
        except ValueError:
            findings.append(Finding("note", path, "not a partition directory; skipped"))
            continue
        report = scan_partition(path, options)
        if path.name.endswith(("-delete", "-future", "-stray")):
            report.note(path, "a renamed partition directory (being deleted, moved or a stray)")
            renamed.append(report)
        else:
            reports[tp] = report
    partitions = sorted([*reports.values(), *renamed], key=lambda r: r.name)
    findings += check_checkpoints(target, reports, None, options.partial)
    return VerifyResult(target, partitions, findings)


def total_log_bytes(target: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(target):
        for name in files:
            if name.endswith(LOG_SUFFIX):
                with contextlib.suppress(OSError):
                    total += os.path.getsize(os.path.join(root, name))
    return total
