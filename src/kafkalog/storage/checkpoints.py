"""Kafka's text checkpoint files: the root offset checkpoints and the per-partition leader-epoch-checkpoint.

Format (server-common CheckpointFile)::

    <version>\\n
    <entry count>\\n
    <entry>\\n        (repeated)

Writes are atomic: ``<file>.tmp`` is written, flushed and fsynced, renamed over the file, and the parent
directory is fsynced. Reads follow Kafka's rules: an empty file or a missing count line reads as no entries;
a bad version, a malformed line or a wrong entry count raises CheckpointError (Kafka's IOException).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from ..errors import KafkaLogError
from ..layout import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, LEADER_EPOCH_CHECKPOINT
from .fileio import file_io
from .files import fsync_dir, fsync_file

_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _path_lock(path: Path) -> threading.Lock:
    """One lock per checkpoint file, shared by every object that writes it (the manager makes new ones)."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path, threading.Lock())


T = TypeVar("T")


_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine's terminators
_WHITESPACES = re.compile(r"[ \t\n\x0b\f\r]+")  # Java's \s+
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


class CheckpointError(KafkaLogError):
    """Kafka's IOException from a checkpoint file: bad version, malformed line, wrong entry count, I/O failure."""


class EntryFormatter(Protocol[T]):
    """Converts one checkpoint entry to its line and back (CheckpointFile.EntryFormatter)."""

    def to_line(self, entry: T) -> str:
        """The entry's line, without the line separator."""
        ...

    def from_line(self, line: str) -> T | None:
        """The entry a line holds, or None when the line is malformed."""
        ...


def parse_java_int(text: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int | None:
    """Integer.parseInt / Long.parseLong: an optional sign and ASCII digits, in range; no whitespace. Else None."""
    if not _JAVA_INT.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


INT32 = (INT32_MIN, INT32_MAX)
INT64 = (INT64_MIN, INT64_MAX)


def parse_fields(line: str, ranges: tuple[tuple[int, int] | None, ...]) -> list[str | int] | None:
    """The whitespace-separated fields of an entry line, one per item of ``ranges``: a Java int within the
    (lo, hi) given, or the text itself for None. None when the line has another number of fields or an int
    does not parse (the line is malformed)."""
    parts = split_whitespace(line)
    if len(parts) != len(ranges):
        return None
    fields: list[str | int] = []
    for part, bounds in zip(parts, ranges, strict=True):
        value = part if bounds is None else parse_java_int(part, *bounds)
        if value is None:
            return None
        fields.append(value)
    return fields


def split_whitespace(line: str) -> list[str]:
    """Java's ``Pattern.compile("\\\\s+").split(line)``: a leading empty token is kept, trailing ones dropped."""
    parts = _WHITESPACES.split(line)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def fsync_directory(path: str | PathLike[str]) -> None:
    """fsync a directory so that a rename inside it is durable (Utils.flushDir); a no-op on Windows."""
    if os.name != "nt":
        fsync_dir(Path(path))


class CheckpointFile(Generic[T]):
    """A text checkpoint of one version holding a list of entries. The file is created empty if missing.

    Invariant: the file always holds a whole checkpoint, the previous one or the new one, never a mix: a write
    goes to ``<name>.tmp``, is fsynced, and replaces the file by an atomic rename (then the directory is
    fsynced), one writer per file at a time.
    """

    def __init__(
        self, path: str | PathLike[str], version: int, formatter: EntryFormatter[T], *, create: bool = True
    ) -> None:
        """``create=False`` leaves a missing file missing (for read-only inspection tools)."""
        self.path = Path(path).absolute()
        self.tmp_path = self.path.with_name(self.path.name + ".tmp")
        self.version = version
        self.formatter = formatter
        if not create:
            return
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))  # create if missing, never truncate
        except OSError as e:
            raise CheckpointError(f"Cannot create checkpoint file: {e}", path=str(self.path)) from e

    def encode(self, entries: Iterable[T]) -> bytes:
        """The file's bytes for ``entries``: version line, count line, one line per entry."""
        lines = [self.formatter.to_line(entry) for entry in entries]
        return "".join(f"{line}\n" for line in [str(self.version), str(len(lines)), *lines]).encode("utf-8")

    def write(self, entries: Iterable[T], sync: bool = True) -> None:
        """Replace the file's content atomically with ``entries``; ``sync`` fsyncs the file and its directory."""
        self.write_bytes(self.encode(entries), sync)

    def write_bytes(self, data: bytes, sync: bool = True) -> None:
        """``write`` of bytes already encoded (by ``encode``)."""
        with _path_lock(self.path):  # as Kafka's CheckpointFile.write: one writer of a file (and its .tmp) at a time
            try:
                self._write_tmp(data, sync)
                os.replace(self.tmp_path, self.path)
                if sync:
                    fsync_directory(self.path.parent)
            except OSError as e:
                self._discard_tmp()
                raise CheckpointError(f"Error while writing checkpoint file: {e}", path=str(self.path)) from e

    def _write_tmp(self, data: bytes, sync: bool) -> None:
        io = file_io()
        fd = os.open(self.tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            written = 0
            while written < len(view):
                written += io.pwrite(fd, view[written:], written, self.tmp_path)
            if sync:
                io.fsync(fd, self.tmp_path)
        finally:
            os.close(fd)

    @staticmethod
    def write_all(writes: Sequence[tuple[CheckpointFile[Any], bytes]]) -> None:
        """Write many checkpoint files (``(file, its bytes from encode)``), each as ``write`` with sync does, in
        phases: every ``.tmp`` written, then each fsynced, then each renamed, then each directory fsynced. Every
        file is whole and durable before it takes its name, but the fsyncs come back to back, so the file system
        commits most of them together (the leader-epoch checkpoints of a thousand new partitions cost a fraction
        of a thousand separate writes). CheckpointError on the first failure; the files not yet renamed keep
        their previous content."""
        ordered = sorted(writes, key=lambda w: w[0].path)  # path locks taken in one order by every caller
        with contextlib.ExitStack() as locks:
            for file, _ in ordered:
                locks.enter_context(_path_lock(file.path))
            current = ordered[0][0] if ordered else None
            try:
                for current, data in ordered:
                    current._write_tmp(data, sync=False)
                for current, _ in ordered:
                    fsync_file(current.tmp_path)
                for current, _ in ordered:
                    os.replace(current.tmp_path, current.path)
                for directory in dict.fromkeys(file.path.parent for file, _ in ordered):
                    fsync_directory(directory)
            except OSError as e:
                for file, _ in ordered:
                    file._discard_tmp()
                where = str(current.path) if current is not None else None
                raise CheckpointError(f"Error while writing checkpoint file: {e}", path=where) from e

    def _discard_tmp(self) -> None:
        with contextlib.suppress(OSError):
            self.tmp_path.unlink()

    def read(self) -> list[T]:
        """The file's entries, by Kafka's reading rules."""
        return self.read_with_bytes()[0]

    def read_with_bytes(self) -> tuple[list[T], bytes]:
        """The file's entries and the bytes they were read from (whoever rewrites the file can compare)."""
        try:
            with _path_lock(self.path):
                data = self.path.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise CheckpointError(f"Error while reading checkpoint file: {e}", path=str(self.path)) from e
        return self._parse(text), data

    def _parse(self, text: str) -> list[T]:
        lines = _LINE_BREAK.split(text)
        if lines[-1] == "":
            lines.pop()
        if not lines:
            return []
        found = self._int_line(lines[0], 1)
        if found != self.version:
            raise self._error(f"Unrecognised version:{found}, expected version: {self.version}", 1)
        if len(lines) < 2:
            return []
        expected = self._int_line(lines[1], 2)
        if expected < 0:
            raise self._error(f"Malformed line (negative entry count): {lines[1]}", 2)
        entries = [self._entry(line, number) for number, line in enumerate(lines[2:], start=3)]
        if len(entries) != expected:
            raise self._error(f"Expected [{expected}] entries in checkpoint file, but found only [{len(entries)}]")
        return entries

    def _int_line(self, line: str, number: int) -> int:
        value = parse_java_int(line)
        if value is None:
            raise self._error(f"Malformed line in checkpoint file: {line}", number)
        return value

    def _entry(self, line: str, number: int) -> T:
        entry = self.formatter.from_line(line)
        if entry is None:
            raise self._error(f"Malformed line in checkpoint file: {line}", number)
        return entry

    def _error(self, message: str, line_number: int | None = None) -> CheckpointError:
        where = f" (line {line_number})" if line_number is not None else ""
        return CheckpointError(message + where, path=str(self.path))


# ---------------------------------------------------------------------------------------------------------------
# Offset checkpoints: recovery-point-offset-checkpoint, log-start-offset-checkpoint,
# replication-offset-checkpoint, cleaner-offset-checkpoint
# ---------------------------------------------------------------------------------------------------------------

TopicPartition = tuple[str, int]


class OffsetFormatter:
    """``<topic> <partition> <offset>`` (OffsetCheckpointFile.Formatter)."""

    def to_line(self, entry: tuple[TopicPartition, int]) -> str:
        (topic, partition), offset = entry
        return f"{topic} {partition} {offset}"

    def from_line(self, line: str) -> tuple[TopicPartition, int] | None:
        fields = parse_fields(line, (None, INT32, INT64))
        if fields is None:
            return None
        topic, partition, offset = fields
        return (str(topic), int(partition)), int(offset)


class TypedCheckpointFile(ABC, Generic[T]):
    """A checkpoint file of one kind of entry: a CheckpointFile of version ``VERSION`` read and written with the
    subclass's formatter (as Kafka's OffsetCheckpointFile and LeaderEpochCheckpointFile each wrap one)."""

    VERSION = 0

    def __init__(self, path: str | PathLike[str], *, create: bool = True) -> None:
        self.checkpoint: CheckpointFile[T] = CheckpointFile(path, self.VERSION, self.formatter(), create=create)

    @abstractmethod
    def formatter(self) -> EntryFormatter[T]:
        """The line format of the entries."""

    @property
    def path(self) -> Path:
        return self.checkpoint.path


class OffsetCheckpointFile(TypedCheckpointFile[tuple[TopicPartition, int]]):
    """A map of (topic, partition) → offset, checkpoint version 0."""

    def formatter(self) -> OffsetFormatter:
        return OffsetFormatter()

    def write(self, offsets: Mapping[TopicPartition, int], sync: bool = True) -> None:
        """Replace the checkpoint with ``offsets``, in the mapping's order."""
        self.checkpoint.write((((tp[0], tp[1]), offset) for tp, offset in offsets.items()), sync)

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; a partition listed twice keeps its last offset, as Kafka's HashMap does."""
        return dict(self.checkpoint.read())


# ---------------------------------------------------------------------------------------------------------------
# leader-epoch-checkpoint
# ---------------------------------------------------------------------------------------------------------------


class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


class EpochFormatter:
    """``<epoch> <startOffset>`` (LeaderEpochCheckpointFile's formatter)."""

    def to_line(self, entry: tuple[int, int]) -> str:
        epoch, start_offset = entry
        return f"{epoch} {start_offset}"

    def from_line(self, line: str) -> EpochEntry | None:
        fields = parse_fields(line, (INT32, INT64))
        if fields is None:
            return None
        epoch, start_offset = fields
        return EpochEntry(int(epoch), int(start_offset))


class LeaderEpochCheckpointFile(TypedCheckpointFile[tuple[int, int]]):
    """A partition's list of (epoch, start offset) entries, checkpoint version 0."""

    FILE_NAME = LEADER_EPOCH_CHECKPOINT

    def formatter(self) -> EpochFormatter:
        return EpochFormatter()

    def write(self, entries: Iterable[tuple[int, int]], sync: bool = True) -> None:
        """Replace the checkpoint with ``entries`` in the given order."""
        self.checkpoint.write(list(entries), sync)

    def read(self) -> list[EpochEntry]:
        """The checkpointed entries in file order."""
        return self.checkpoint.read()  # type: ignore[return-value]

    def read_with_bytes(self) -> tuple[list[EpochEntry], bytes]:
        """The checkpointed entries in file order, and the file's bytes."""
        return self.checkpoint.read_with_bytes()  # type: ignore[return-value]

    def encode(self, entries: Iterable[tuple[int, int]]) -> bytes:
        """The file's bytes for ``entries`` (what ``write`` would put there)."""
        return self.checkpoint.encode(entries)

    def write_bytes(self, data: bytes, sync: bool = True) -> None:
        """Replace the checkpoint with bytes from ``encode``."""
        self.checkpoint.write_bytes(data, sync)


__all__ = [
    "CheckpointError",
    "CheckpointFile",
    "EntryFormatter",
    "EpochEntry",
    "LeaderEpochCheckpointFile",
    "OffsetCheckpointFile",
    "TypedCheckpointFile",
    "fsync_directory",
]
