"""The replication checker: every replica's log against what the producers were told.

Written once and used by every replication test and the reliability runner. Producers record each record
they *attempted* (its value) and each one *acknowledged* (value, partition, offset). After the cluster is
stopped cleanly, ``check`` reads every replica's log dir read-only and reports, per partition:

- lost: an acknowledged record missing below the committed offset of some replica, or present at another
  offset than the one acknowledged (``misplaced``);
- duplicated: a value found more than once in a replica's log;
- reordered: one producer's records of a partition out of its send order in a log;
- phantom: a value in a log that no producer ever attempted;
- diverged: replicas whose batch bytes differ below the committed offset (the high watermark), or a replica
  whose log ends below it.

Values are ``b"<producer>:<seq>"`` (``value_of``) so that order and origin can be read back from the log.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kafkalog.layout import REPLICATION_OFFSET_CHECKPOINT
from kafkalog.partition.readonly import ReadOnlyLogDir, read_checkpoint

_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA_AT = 23  # baseOffset(8) length(4) epoch(4) magic(1) crc(4) attributes(2) -> lastOffsetDelta


def value_of(producer: str, seq: int) -> bytes:
    return f"{producer}:{seq}".encode()


def _parse(value: bytes) -> tuple[str, int] | None:
    producer, sep, seq = value.decode("utf-8", "replace").rpartition(":")
    if not sep or not seq.isdigit():
        return None
    return producer, int(seq)


@dataclass
class ProducerLog:
    """What one producer attempted and was told (filled from its delivery callbacks)."""

    attempted: set[bytes] = field(default_factory=set)
    acked: list[tuple[int, int, bytes]] = field(default_factory=list)  # (partition, offset, value)
    failed: list[tuple[bytes, str]] = field(default_factory=list)  # (value, error name)

    def merge(self, other: ProducerLog) -> None:
        self.attempted |= other.attempted
        self.acked += other.acked
        self.failed += other.failed


@dataclass
class Report:
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)  # partition -> committed offset (the HW)
    records: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.phantom or self.diverged)

    def summary(self) -> str:
        parts = [
            f"{name}={len(items)}"
            for name, items in (
                ("lost", self.lost),
                ("duplicated", self.duplicated),
                ("reordered", self.reordered),
                ("phantom", self.phantom),
                ("diverged", self.diverged),
            )
        ]
        details = [*self.lost[:5], *self.duplicated[:5], *self.reordered[:5], *self.phantom[:5], *self.diverged[:5]]
        return (
            ", ".join(parts) + f" (records checked {self.records})" + ("\n  " + "\n  ".join(details) if details else "")
        )


def batch_bytes_below(partition_dir: Path, end_offset: int) -> bytes:
    """The bytes of every batch of a partition's segments that ends below ``end_offset``, in offset order."""
    out = bytearray()
    for name in sorted(n for n in os.listdir(partition_dir) if n.endswith(".log")):
        with open(partition_dir / name, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            base, length = _HEAD.unpack_from(data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            (delta,) = struct.unpack_from(">i", data, pos + _LAST_DELTA_AT)
            if base + delta >= end_offset:
                return bytes(out)
            out += data[pos : pos + 12 + length]
            pos += 12 + length
    return bytes(out)


def _replica_records(log_dir: Path, topic: str, partition: int, end: int) -> list[tuple[int, bytes]]:
    view = ReadOnlyLogDir([log_dir])
    part = view.partition(topic, partition)
    return [(r.offset, bytes(r.value or b"")) for r in part.records() if r.offset < end]


def committed_offsets(log_dirs: Iterable[Path], topic: str) -> dict[int, int]:
    """Partition -> the largest high watermark any replica checkpointed (the last leader's, after a clean stop)."""
    result: dict[int, int] = {}
    for d in log_dirs:
        for key, hw in read_checkpoint(str(d), REPLICATION_OFFSET_CHECKPOINT).items():
            t, p = key if isinstance(key, tuple) else (key.topic, key.partition)
            if t == topic:
                result[int(p)] = max(result.get(int(p), 0), int(hw))
    return result


def check(replica_dirs: dict[int, Path], topic: str, producers: ProducerLog, partitions: Iterable[int]) -> Report:
    """Check every replica (broker id -> its log dir) of ``topic`` against what the producers were told."""
    report = Report()
    report.committed = committed_offsets(replica_dirs.values(), topic)
    acked_by_partition: dict[int, list[tuple[int, bytes]]] = {}
    for p, offset, value in producers.acked:
        acked_by_partition.setdefault(p, []).append((offset, value))
    for p in partitions:
        hw = report.committed.get(p, 0)
        reference: bytes | None = None
        for broker_id, log_dir in sorted(replica_dirs.items()):
            where = f"partition {p} on broker {broker_id}"
            pdir = Path(log_dir) / f"{topic}-{p}"
            if not pdir.is_dir():
                report.diverged.append(f"{where}: no replica directory")
                continue
            records = _replica_records(Path(log_dir), topic, p, hw)
            report.records += len(records)
            by_offset = dict(records)
            seen: dict[bytes, int] = {}
            last_seq: dict[str, tuple[int, int]] = {}
            for offset, value in records:
                if value in seen:
                    report.duplicated.append(f"{where}: {value!r} at offsets {seen[value]} and {offset}")
                seen.setdefault(value, offset)
                if value not in producers.attempted:
                    report.phantom.append(f"{where}: {value!r} at offset {offset} was never sent")
                parsed = _parse(value)
                if parsed is not None:
                    producer, seq = parsed
                    previous = last_seq.get(producer)
                    if previous is not None and seq < previous[0]:
                        report.reordered.append(
                            f"{where}: {producer} seq {seq} at offset {offset} after seq {previous[0]} at {previous[1]}"
                        )
                    last_seq[producer] = (seq, offset)
            for offset, value in acked_by_partition.get(p, []):
                if offset >= hw:
                    report.lost.append(f"{where}: {value!r} acknowledged at offset {offset}, above the HW {hw}")
                elif by_offset.get(offset) != value:
                    found = seen.get(value)
                    report.lost.append(
                        f"{where}: {value!r} acknowledged at offset {offset}; "
                        + (f"found at {found} (misplaced)" if found is not None else "missing")
                    )
            data = batch_bytes_below(pdir, hw)
            if reference is None:
                reference = data
            elif data != reference:
                same = next((i for i, (a, b) in enumerate(zip(data, reference, strict=False)) if a != b), None)
                report.diverged.append(
                    f"{where}: {len(data)} batch bytes below HW {hw} differ from the first replica's {len(reference)}"
                    f" (first difference at byte {same if same is not None else min(len(data), len(reference))})"
                )
    return report
