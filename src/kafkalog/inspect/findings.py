"""What a read-only scan of a log dir finds: findings (problems and notes) and per-segment, per-partition summaries.

Invariant: nothing here touches a file; these are plain records the scanners fill in and the CLI prints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

PROBLEM = "problem"
NOTE = "note"
DEFAULT_INDEX_INTERVAL = 4096  # index.interval.bytes
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024  # segment.index.bytes


_COMPACTED_NAMES = ("__consumer_offsets", "__transaction_state", "__cluster_metadata", "_schemas")
_COMPACTED_SUFFIXES = ("-changelog", "-configs", "-offsets", "-status")


# ------------------------------------------------------------------------------------------------ findings


@dataclass(frozen=True)
class Finding:
    """One problem (``severity == "problem"``) or note, located by file and, where it applies, byte position."""

    severity: str
    path: Path
    message: str
    position: int | None = None
    line: int | None = None

    @property
    def is_problem(self) -> bool:
        return self.severity == PROBLEM

    def where(self, root: Path | None = None) -> str:
        name = str(self.path)
        if root is not None:
            with contextlib.suppress(ValueError):
                name = str(self.path.relative_to(root)) or self.path.name
        if self.position is not None:
            return f"{name} @ byte {self.position}"
        if self.line is not None:
            return f"{name} @ line {self.line}"
        return name

    def format(self, root: Path | None = None) -> str:
        label = "PROBLEM" if self.is_problem else "note"
        return f"{label:<7} {self.where(root)}: {self.message}"


@dataclass
class SegmentSummary:
    """What a scan learned about one segment (small: the per-batch work is streamed)."""

    base: int
    path: Path
    size: int
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    parsed_end: int = 0  # end of the last batch whose framing was readable
    stop_reason: str | None = None  # the first damage a recovery stops at (its wording for the plan), if any
    max_timestamp: int = -1
    index_entries: int | None = None  # None: no file
    time_index_entries: int | None = None


class _SegmentTotal:
    """A read-only attribute of a PartitionReport: one SegmentSummary field summed over its segments."""

    def __init__(self, summary_field: str) -> None:
        self.summary_field = summary_field

    def __get__(self, report: PartitionReport, owner: type) -> int:
        return sum(getattr(segment, self.summary_field) for segment in report.segments)


@dataclass
class PartitionReport:
    """The scan of one partition directory."""

    directory: Path
    name: str
    segments: list[SegmentSummary] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    temp_files: list[Path] = field(default_factory=list)
    orphan_indexes: list[Path] = field(default_factory=list)

    batches = _SegmentTotal("batches")
    records = _SegmentTotal("records")
    bytes = _SegmentTotal("size")

    @property
    def problems(self) -> int:
        return sum(f.is_problem for f in self.findings)

    @property
    def notes(self) -> int:
        return len(self.findings) - self.problems

    @property
    def first_base(self) -> int | None:
        return self.segments[0].base if self.segments else None

    @property
    def log_end_offset(self) -> int | None:
        """Kafka's LEO: the offset after the last batch of the last segment, or its base when it is empty."""
        if not self.segments:
            return None
        last = self.segments[-1]
        return last.last_offset + 1 if last.last_offset is not None else last.base

    def problem(self, path: Path, message: str, position: int | None = None) -> None:
        self.findings.append(Finding(PROBLEM, path, message, position))

    def note(self, path: Path, message: str, position: int | None = None) -> None:
        self.findings.append(Finding(NOTE, path, message, position))


@dataclass
class ScanOptions:
    """How to read a log dir: the topic's index interval, whether offset gaps are expected (compaction), whether it
    is a partial copy, whether the broker shut down cleanly, and a progress callback fed with bytes scanned."""

    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL
    compacted: bool = False
    partial: bool = False
    clean_shutdown: bool = False
    progress: Callable[[int], None] | None = None


@dataclass
class VerifyResult:
    """The scan of a log dir or one partition directory: its partitions and the log-dir level findings."""

    root: Path
    partitions: list[PartitionReport]
    findings: list[Finding]  # log-dir level findings (checkpoints)

    def all_findings(self) -> Iterator[Finding]:
        yield from self.findings
        for partition in self.partitions:
            yield from partition.findings

    @property
    def problems(self) -> int:
        return sum(f.is_problem for f in self.all_findings())
