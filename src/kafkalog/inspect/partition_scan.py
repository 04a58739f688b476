"""The read-only scan of one partition directory: its files sorted by kind, each segment scanned in offset order
(``segment_scan``), then the producer snapshots and the leader-epoch checkpoint (spec sections 4, 5, 9 and 10).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CorruptSnapshotError, KafkaLogError
from ..layout import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    ROOT_CHECKPOINTS,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_partition_dir,
)
from ..storage.checkpoints import CheckpointError, CheckpointFile, EpochFormatter
from ..storage.producer_state import read_snapshot
from .findings import Finding, PartitionReport, ScanOptions
from .index_checks import check_txn_index
from .segment_scan import GAPS_SHOWN, PartitionScanState, SegmentScan

# Topics that are compacted in any Kafka install (internal topics, Connect's and Schema Registry's, Streams changelogs).
_COMPACTED_NAMES = ("__consumer_offsets", "__transaction_state", "__cluster_metadata", "_schemas")
_COMPACTED_SUFFIXES = ("-changelog", "-configs", "-offsets", "-status")


def read_checkpoint(path: Path, version: int, formatter: Any) -> list[Any]:
    """Read a checkpoint file with Kafka's rules, without creating it (a read-only check must not)."""
    return CheckpointFile(path, version, formatter, create=False).read()


def _topic_looks_compacted(topic: str) -> bool:
    return topic in _COMPACTED_NAMES or topic.endswith(_COMPACTED_SUFFIXES) or topic.startswith("_confluent")


def _segment_base(name: str) -> int | None:
    prefix = name.split(".", 1)[0]
    return int(prefix) if prefix.isdigit() else None


def is_partition_dir(path: Path) -> bool:
    """A directory holding segment files, snapshots or partition files, or named ``<topic>-<partition>`` and empty."""
    names = [p.name for p in path.iterdir()]
    if any(n.endswith((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX)) for n in names):
        return True
    if LEADER_EPOCH_CHECKPOINT in names or "partition.metadata" in names:
        return True
    if any(n in ROOT_CHECKPOINTS or n == "meta.properties" for n in names):
        return False
    try:
        parse_partition_dir(path.name)
    except ValueError:
        return False
    return not any((path / n).is_dir() for n in names)


@dataclass
class _PartitionFiles:
    """The files of a partition directory by kind, each with the base offset its name starts with."""

    logs: list[tuple[int, Path]] = field(default_factory=list)
    snapshots: list[tuple[int, Path]] = field(default_factory=list)
    txn_indexes: dict[int, Path] = field(default_factory=dict)
    index_like: list[tuple[int, Path]] = field(default_factory=list)  # .index, .timeindex, .txnindex


def _classify(directory: Path, report: PartitionReport) -> _PartitionFiles:
    """Sort the directory's files by kind; leftovers and misnamed files become findings."""
    files = _PartitionFiles()
    for path in sorted(directory.iterdir()):
        name = path.name
        if not path.is_file():
            report.note(path, "unexpected directory inside a partition directory")
            continue
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)):
            report.temp_files.append(path)
            report.note(path, "left over from a deletion, cleaning or swap; Kafka's loader finishes or removes it")
            continue
        if not name.endswith((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, SNAPSHOT_SUFFIX)):
            continue
        base = _segment_base(name)
        if base is None:
            report.problem(path, "the name does not start with a base offset")
            continue
        if len(name.split(".", 1)[0]) < 20:
            report.note(path, "the base offset is not zero-padded to 20 digits as Kafka names files")
        if name.endswith(LOG_SUFFIX):
            files.logs.append((base, path))
        elif name.endswith(SNAPSHOT_SUFFIX):
            files.snapshots.append((base, path))
        else:
            if name.endswith(TXN_INDEX_SUFFIX):
                files.txn_indexes[base] = path
            files.index_like.append((base, path))
    files.logs.sort()
    return files


def _scan_segments(report: PartitionReport, files: _PartitionFiles, options: ScanOptions) -> PartitionScanState:
    """Scan every segment in offset order, each with its transaction index."""
    log_bases = {b for b, _ in files.logs}
    for base, path in files.index_like:
        if base not in log_bases:
            report.orphan_indexes.append(path)
            report.note(path, "an index with no .log: Kafka's loader deletes it")
    any_index_files = any(p.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) for _, p in files.index_like)
    state = PartitionScanState()
    for i, (base, path) in enumerate(files.logs):
        try:
            summary = SegmentScan(report, path, base, i == len(files.logs) - 1, state, options, any_index_files).run()
        except (OSError, KafkaLogError) as e:
            report.problem(path, f"cannot be read: {e}")
            continue
        report.segments.append(summary)
        if base in files.txn_indexes:
            check_txn_index(report, files.txn_indexes[base], base, summary.last_offset)
    return state


def _note_gaps(report: PartitionReport, state: PartitionScanState, compacted: bool) -> None:
    why = (
        "the topic looks compacted, and compaction removes offsets"
        if compacted
        else "legitimate after compaction (pass --compacted if the topic is)"
    )
    for gap in state.gap_findings:
        report.note(gap.log_path, f"offsets {gap.previous + 1}..{gap.first - 1} are absent: {why}", gap.position)
    if state.gaps > GAPS_SHOWN:
        report.note(report.directory, f"{state.gaps - GAPS_SHOWN} more offset gaps")


def _check_snapshots(report: PartitionReport, snapshots: list[tuple[int, Path]]) -> None:
    leo = report.log_end_offset
    for base, path in snapshots:
        try:
            read_snapshot(path)
        except CorruptSnapshotError as e:
            report.problem(path, f"unreadable producer snapshot: {e.reason}")
        except OSError as e:
            report.problem(path, f"cannot be read: {e}")
        if leo is not None and base > leo:
            report.note(path, f"snapshot at offset {base} is beyond the log end {leo}; Kafka deletes it at load")


def scan_partition(directory: Path, options: ScanOptions) -> PartitionReport:
    """Check one partition directory without modifying it."""
    directory = Path(directory)
    report = PartitionReport(directory, directory.name)
    files = _classify(directory, report)
    state = _scan_segments(report, files, options)
    try:
        topic, _ = parse_partition_dir(directory.name)
    except ValueError:
        topic = directory.name
    _note_gaps(report, state, options.compacted or _topic_looks_compacted(topic))
    _check_snapshots(report, files.snapshots)
    epoch_path = directory / LEADER_EPOCH_CHECKPOINT
    if epoch_path.is_file():
        _check_leader_epochs(report, epoch_path, report.log_end_offset)
    return report


def _check_leader_epochs(report: PartitionReport, path: Path, leo: int | None) -> None:
    try:
        entries = read_checkpoint(path, 0, EpochFormatter())
    except CheckpointError as e:
        report.problem(path, f"unreadable leader-epoch checkpoint: {e.reason}")
        return
    previous = None
    for number, (epoch, start) in enumerate(entries, start=3):
        if previous is not None and (epoch <= previous[0] or start < previous[1]):
            report.findings.append(
                Finding(
                    "problem",
                    path,
                    f"epoch {epoch} at {start} does not follow epoch {previous[0]} at {previous[1]}",
                    line=number,
                )
            )
        if leo is not None and start > leo:
            report.findings.append(
                Finding(
                    "note",
                    path,
                    f"epoch {epoch} starts at {start}, beyond the log end {leo}; Kafka truncates it at load",
                    line=number,
                )
            )
        previous = (epoch, start)
