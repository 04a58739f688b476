"""The engine of ``kafkalog dump``: Kafka's DumpLogSegments (``kafka-dump-log.sh``), line for line (spec section 14).

Dumps ``.log`` segments (and KRaft ``.checkpoint`` snapshots), ``.index``, ``.timeindex``, producer
``.snapshot`` and ``.txnindex`` files in the exact text Kafka's tool prints, with its reports on stderr
(index mismatches, time index errors, non-consecutive offsets). ``--json`` prints one JSON object per line
instead (per file, batch, record, entry and report), for scripts.

Files are streamed: batches are read a chunk at a time through ``FileRecords``, indexes through a read-only
memory map, so memory stays flat whatever the segment size.

The message parsers (decoders) are in ``decoders`` and ``transaction_log``.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptSnapshotError, KafkaLogError
from ..layout import INT32_MAX
from ..record.batch import RecordBatch, increment_sequence
from ..record.columnar import batches_to_arrow
from ..record.legacy import LegacyBatch
from ..record.types import Record
from ..storage.file_records import FileRecords
from ..storage.index import OffsetIndex, TimeIndex
from ..storage.producer_state import read_snapshot
from ..storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn
from .decoders import (
    DECODERS,
    DEPRECATED_DECODERS,
    STRING_DECODER,
    ClusterMetadataParser,
    DecoderParser,
    DumpError,
    MessageParser,
    OffsetsParser,
    decode_string,
)
from .dump_text import (
    DumpField,
    absolute,
    control_info,
    fields_json,
    fields_text,
    first_batch_last_offset,
    java_bool,
    joined_header_keys,
    legacy_record_checks,
    optional_long,
)
from .transaction_log import TransactionLogParser

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
RECORD_INDENT = "|"
_COLUMNAR_RUN_BYTES = 4 << 20  # v2 data batches decoded together by the columnar path (bounded memory)


_SNAPSHOT_CHECKPOINT = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"


def _v2_batch_fields(batch: RecordBatch | LegacyBatch) -> list[DumpField]:
    """The header fields kafka-dump-log prints first for a v2 batch."""
    return [
        ("baseOffset", batch.base_offset, str),
        ("lastOffset", batch.last_offset, str),
        ("count", batch.record_count, str),
        ("baseSequence", batch.base_sequence, str),
        ("lastSequence", batch.last_sequence, str),
        ("producerId", batch.producer_id, str),
        ("producerEpoch", batch.producer_epoch, str),
        ("partitionLeaderEpoch", batch.partition_leader_epoch, str),
        ("isTransactional", batch.is_transactional, java_bool),
        ("isControl", batch.is_control, java_bool),
        ("deleteHorizonMs", batch.delete_horizon_ms, optional_long),
    ]


# ---------------------------------------------------------------------------------------------- reporting


@dataclass(frozen=True)
class DumpOptions:
    """The options of one dump, as Kafka's tool names them (``--deep-iteration`` is ``deep_iteration``...).

    Invariant (``with_implied``): any decoder option implies printing, and printing implies deep iteration.
    """

    deep_iteration: bool = False
    print_data_log: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_bytes: int = INT32_MAX
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    skip_record_metadata: bool = False
    key_decoder: str | None = None
    value_decoder: str | None = None
    offsets_decoder: bool = False
    cluster_metadata_decoder: bool = False
    transaction_log_decoder: bool = False
    as_json: bool = False

    def with_implied(self) -> DumpOptions:
        """These options with Kafka's implications applied."""
        printing = bool(
            self.print_data_log
            or self.offsets_decoder
            or self.cluster_metadata_decoder
            or self.transaction_log_decoder
            or self.key_decoder
            or self.value_decoder
        )
        return replace(self, print_data_log=printing, deep_iteration=self.deep_iteration or printing)


class Dumper:
    """One run of the tool: options, output streams, and the reports printed at the end."""

    def __init__(self, opts: DumpOptions, out: TextIO, err: TextIO) -> None:
        self.o = opts.with_implied()
        self.out = out
        self.err = err
        self.json = opts.as_json
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.time_not_found: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}
        # Files whose content is damaged (bytes that are no batch, a batch whose CRC fails, a snapshot that does
        # not parse, an index that disagrees with its log): the dump still prints what Kafka's tool prints, then
        # exits with status 1, whatever the kind of file. (Non-consecutive offsets are no damage: compaction.)
        self.corrupt: dict[str, str] = {}
        self.current = ""

    # ----- output helpers
    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def emit(self, obj: dict) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")

    def message(self, text: str, **obj) -> None:
        """An informational stdout line of Kafka's (or a JSON object in --json mode)."""
        if self.json:
            self.emit({"type": "message", "message": text, **obj})
        else:
            self.line(text)

    # ----- dispatch
    def run(self, files: str) -> None:
        """Dump each file of the comma-separated ``files``, print the reports; DumpError naming damaged files."""
        paths = files.split(",")
        while paths and not paths[-1]:  # Java's String.split drops trailing empty strings
            paths.pop()
        for path in paths:
            self.dump(path)
        self.print_reports()
        self.out.flush()
        damaged = self.damaged()
        if damaged:
            what = "; ".join(f"{file}: {why}" for file, why in damaged.items())
            raise DumpError(f"{len(damaged)} damaged file{'s' if len(damaged) > 1 else ''}: {what}")

    def dump(self, path: str) -> None:
        name = os.path.basename(path)
        self.current = path
        if self.json:
            self.emit({"type": "file", "path": path})
        else:
            self.line(f"Dumping {path}")
        suffix = name[name.rfind(".") :] if "." in name else ""
        if suffix in (".log", ".checkpoint"):
            self.dump_log(path)
        elif suffix == ".index":
            self.dump_index(path)
        elif suffix == ".timeindex":
            self.dump_time_index(path)
        elif suffix == ".snapshot":
            self.dump_snapshot(path)
        elif suffix == ".txnindex":
            self.dump_txn_index(path)
        else:
            self.err.write(f"Ignoring unknown file {path}\n")

    @staticmethod
    def _require(path: str) -> None:
        if not os.path.exists(path):
            raise DumpError(f"No such file: {path}")
        if os.path.isdir(path):
            raise DumpError(f"{path} is a directory, not a file")

    @staticmethod
    def _start_offset(path: str) -> int:
        prefix = os.path.basename(path).split(".")[0]
        try:
            return int(prefix)
        except ValueError:
            raise DumpError(f"Cannot parse a base offset from the file name {os.path.basename(path)!r}") from None

    @staticmethod
    def _sibling(path: str, suffix: str) -> str:
        return os.path.join(os.path.dirname(absolute(path)), os.path.basename(path).split(".")[0] + suffix)

    # ----- .log
    def _parser(self) -> MessageParser:
        o = self.o
        if o.offsets_decoder:
            return OffsetsParser(as_objects=self.json)
        if o.cluster_metadata_decoder:
            return ClusterMetadataParser(as_objects=self.json)
        if o.transaction_log_decoder:
            return TransactionLogParser(as_objects=self.json)
        decoders = []
        for name in (o.value_decoder, o.key_decoder):  # Kafka resolves the value decoder first
            name = name or STRING_DECODER
            if name in DEPRECATED_DECODERS:
                new = DEPRECATED_DECODERS[name]
                self.message(f"{name} is deprecated. Please use {new} instead")
                name = new
            decoders.append(DECODERS[name])
        return DecoderParser(decoders[1], decoders[0])

    def dump_log(self, path: str) -> None:
        name = os.path.basename(path)
        parser = self._parser()
        if name.endswith(".log"):
            start = self._start_offset(path)
            self.message(f"Log starting offset: {start}", logStartingOffset=start)
        elif name == BOOTSTRAP_CHECKPOINT:
            self.message("KRaft bootstrap snapshot")
        else:
            match = _SNAPSHOT_CHECKPOINT.match(name)
            if not match:
                raise DumpError(f"Invalid snapshot file name {name}")
            offset, epoch = int(match.group(1)), int(match.group(2))
            self.message(f"Snapshot end offset: {offset}, epoch: {epoch}", endOffset=offset, epoch=epoch)
        self._require(path)
        o = self.o
        max_bytes = o.max_bytes
        deep, printing, skip = o.deep_iteration, o.print_data_log, o.skip_record_metadata
        records = FileRecords.open(Path(path), mutable=False)
        try:
            end = min(records.size, max_bytes)
            valid_bytes = 0
            last_offset = -1
            pairs: list[tuple[int, int]] = []
            columnar = deep and not self.json and not skip and isinstance(parser, DecoderParser)
            run: list[tuple[int, Any]] = []  # consecutive v2 data batches, decoded together
            run_bytes = 0
            for _position, batch in records.batches(0, end):
                if columnar and batch.magic >= 2 and not batch.is_control:
                    run.append((valid_bytes, batch))
                    run_bytes += batch.size_in_bytes
                    valid_bytes += batch.size_in_bytes
                    if run_bytes >= _COLUMNAR_RUN_BYTES:
                        last_offset = self._dump_run(run, parser if printing else None, last_offset, pairs)
                        run, run_bytes = [], 0
                    continue
                if run:
                    last_offset = self._dump_run(run, parser if printing else None, last_offset, pairs)
                    run, run_bytes = [], 0
                self._print_batch(batch, valid_bytes)
                if deep:
                    legacy_checks = legacy_record_checks(batch) if isinstance(batch, LegacyBatch) else None
                    for i, record in enumerate(batch):
                        if last_offset != -1 and record.offset != last_offset + 1:
                            pairs.append((last_offset, record.offset))
                        last_offset = record.offset
                        check = legacy_checks[i] if legacy_checks is not None else None
                        self._print_record(batch, record, check, parser if printing else None, skip)
                valid_bytes += batch.size_in_bytes
            if run:
                last_offset = self._dump_run(run, parser if printing else None, last_offset, pairs)
            if pairs:
                self.non_consecutive.setdefault(absolute(path), []).extend(pairs)
            trailing = end - valid_bytes
            if trailing > 0 and max_bytes == INT32_MAX:
                if self.json:
                    self.emit({"type": "invalidBytes", "file": name, "count": trailing})
                else:
                    self.line(f"Found {trailing} invalid bytes at the end of {name}")
                self.corrupt.setdefault(path, f"{trailing} invalid bytes at the end")
        finally:
            records.close_handlers()

    def _dump_run(
        self, run: list[tuple[int, Any]], parser: MessageParser | None, last_offset: int, pairs: list[Any]
    ) -> int:
        """Print a run of v2 data batches and their records, decoded by the columnar fast path.

        The same lines as ``_print_batch`` + ``_print_record``; a run the columnar decoder refuses is printed
        record by record instead, so the output up to the bad record and the error are the reference path's.
        """
        assert parser is None or isinstance(parser, DecoderParser)  # the columnar path runs with decoders only
        try:
            table = batches_to_arrow([b for _, b in run], verify_crc=False)
        except KafkaLogError:
            for position, batch in run:
                self._print_batch(batch, position)
                for record in batch:
                    if last_offset != -1 and record.offset != last_offset + 1:
                        pairs.append((last_offset, record.offset))
                    last_offset = record.offset
                    self._print_record(batch, record, None, parser, False)
            return last_offset
        if parser is None or (parser.key_decoder is decode_string and parser.value_decoder is decode_string):
            try:
                return self._dump_run_vectorized(run, table, parser is not None, last_offset, pairs)
            except pa.ArrowInvalid:
                pass  # a key or value that is not valid UTF-8: the per-record path replaces it as Java does
        offsets = table.column("offset").to_pylist()
        stamps = table.column("timestamp").cast("int64").to_pylist()
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        header_keys = joined_header_keys(table.column("headers"))
        lines: list[str] = []
        i = 0
        try:
            for position, batch in run:
                self.out.write("".join(lines))
                lines.clear()
                self._print_batch(batch, position)
                tstype = batch.timestamp_type
                base_offset, base_sequence = batch.base_offset, batch.base_sequence
                for _ in range(batch.record_count):
                    offset, key, value = offsets[i], keys[i], values[i]
                    if last_offset != -1 and offset != last_offset + 1:
                        pairs.append((last_offset, offset))
                    last_offset = offset
                    sequence = increment_sequence(base_sequence, offset - base_offset) if base_sequence >= 0 else -1
                    line = (
                        f"{RECORD_INDENT} offset: {offset} {tstype}: {stamps[i]} "
                        f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if value is None else len(value)} "
                        f"sequence: {sequence} headerKeys: [{header_keys[i]}]"
                    )
                    if parser is not None:
                        if key is not None:
                            line += f" key: {parser.key_decoder(key)}"
                        if value is not None:
                            line += f" payload: {parser.value_decoder(value)}"
                    lines.append(line + "\n")
                    i += 1
        finally:  # what was formatted is printed even when a decoder fails on a later record
            self.out.write("".join(lines))
        return last_offset

    def _dump_run_vectorized(self, run: list, table, printing: bool, last_offset: int, pairs: list) -> int:
        """``_dump_run`` with the record lines built by Arrow string kernels (no Python work per record)."""
        counts = np.array([b.record_count for _, b in run], dtype=np.int64)
        offsets = table.column("offset").combine_chunks()
        offset_values = offsets.to_numpy()
        keys = table.column("key").combine_chunks()
        values = table.column("value").combine_chunks()
        base_offsets = np.repeat([b.base_offset for _, b in run], counts)
        base_sequences = np.repeat([b.base_sequence for _, b in run], counts)
        sequences = base_sequences + (offset_values - base_offsets)
        sequences = np.where(sequences > INT32_MAX, sequences - INT32_MAX - 1, sequences)  # incrementSequence
        sequences = np.where(base_sequences >= 0, sequences, -1)
        ts_types = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat([b.attributes >> 3 & 1 for _, b in run], counts).astype(np.int8)),
            pa.array(["CreateTime", "LogAppendTime"]),
        ).cast(pa.string())
        headers = table.column("headers").combine_chunks()
        header_keys = pc.binary_join(pa.ListArray.from_arrays(headers.offsets, headers.flatten().field("key")), ",")
        parts = [
            f"{RECORD_INDENT} offset: ",
            offsets.cast(pa.string()),
            " ",
            ts_types,
            ": ",
            table.column("timestamp").combine_chunks().cast(pa.int64()).cast(pa.string()),
            " keySize: ",
            pc.if_else(keys.is_null(), -1, pc.binary_length(keys)).cast(pa.string()),
            " valueSize: ",
            pc.if_else(values.is_null(), -1, pc.binary_length(values)).cast(pa.string()),
            " sequence: ",
            pa.array(sequences).cast(pa.string()),
            " headerKeys: [",
            header_keys,
            "]",
        ]
        if printing:  # " key: k" and " payload: v" only where they are not null
            parts.append(pc.binary_join_element_wise(" key: ", keys.cast(pa.string()), ""))
            parts.append(pc.binary_join_element_wise(" payload: ", values.cast(pa.string()), ""))
        parts.append("\n")
        lines = pc.binary_join_element_wise(
            *[pa.scalar(p) if isinstance(p, str) else p for p in parts],
            "",
            null_handling="replace",
            null_replacement="",
        )
        text_offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset : lines.offset + len(lines) + 1]
        text = memoryview(lines.buffers()[2])
        gaps = np.flatnonzero(np.diff(offset_values) != 1)
        if len(offset_values) and last_offset != -1 and offset_values[0] != last_offset + 1:
            pairs.append((last_offset, int(offset_values[0])))
        pairs.extend((int(offset_values[g]), int(offset_values[g + 1])) for g in gaps)
        start = 0
        for (position, batch), count in zip(run, counts, strict=True):
            self._print_batch(batch, position)
            if count:
                end = start + int(count)
                self.out.write(bytes(text[text_offsets[start] : text_offsets[end]]).decode("utf-8"))
                start = end
        return int(offset_values[-1]) if len(offset_values) else last_offset

    def _print_batch(self, batch: RecordBatch | LegacyBatch, position: int) -> None:
        codec = batch.compression
        valid = batch.is_valid()
        if not valid:
            self.corrupt.setdefault(self.current, f"a batch at position {position} fails its CRC check")
        if self.json:
            obj: dict[str, Any] = {"type": "batch"}
            if batch.magic >= 2:
                obj.update(fields_json(_v2_batch_fields(batch)))
            else:
                obj["offset"] = batch.last_offset
            obj.update(
                position=position,
                timestampType=batch.timestamp_type,
                maxTimestamp=batch.max_timestamp,
                size=batch.size_in_bytes,
                magic=batch.magic,
                compresscodec=codec,
                crc=batch.crc,
                isValid=valid,
            )
            self.emit(obj)
            return
        head = fields_text(_v2_batch_fields(batch)) if batch.magic >= 2 else f"offset: {batch.last_offset}"
        self.line(
            f"{head} position: {position} {batch.timestamp_type}: {batch.max_timestamp} size: {batch.size_in_bytes} "
            f"magic: {batch.magic} compresscodec: {codec} crc: {batch.crc} isvalid: {java_bool(valid)}"
        )

    def _print_record(self, batch, record: Record, legacy_check, parser: MessageParser | None, skip: bool) -> None:
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        control = control_info(record) if batch.is_control else None
        parsed = parser.parse(record) if parser is not None and not batch.is_control else None
        if self.json:
            obj: dict = {"type": "record", "offset": record.offset}
            if not skip:
                obj.update(
                    timestampType=batch.timestamp_type,
                    timestamp=record.timestamp,
                    keySize=key_size,
                    valueSize=value_size,
                )
                if batch.magic >= 2:
                    obj.update(sequence=record.sequence, headerKeys=[k for k, _ in record.headers])
                if legacy_check is not None:
                    obj.update(isValid=legacy_check[1], crc=legacy_check[0])
                if control is not None:
                    obj.update(control[1])
            if parsed is not None:
                if parsed[0] is not None:
                    obj["key"] = parsed[0]
                if parsed[1] is not None:
                    obj["payload"] = parsed[1]
            self.emit(obj)
            return
        parts = []
        prefix = f"{RECORD_INDENT} "
        if not skip:
            parts.append(
                f"{prefix}offset: {record.offset} {batch.timestamp_type}: {record.timestamp} "
                f"keySize: {key_size} valueSize: {value_size}"
            )
            prefix = " "
            if batch.magic >= 2:
                parts.append(f" sequence: {record.sequence} headerKeys: [{','.join(k for k, _ in record.headers)}]")
            if legacy_check is not None:
                parts.append(f" isValid: {java_bool(legacy_check[1])} crc: {legacy_check[0]}}}")
            if control is not None:
                parts.append(control[0])
        if parsed is not None:
            key, payload = parsed
            if key is not None:
                parts.append(f"{prefix}key: {key}")
                prefix = " "
            if payload is not None:
                parts.append(f" payload: {payload}")
        self.line("".join(parts))

    # ----- .index
    def dump_index(self, path: str) -> None:
        start = self._start_offset(path)
        log_path = self._sibling(path, ".log")
        self._require(log_path)
        self._require(path)
        index = OffsetIndex(path, start, writable=False)
        records = FileRecords.open(Path(log_path), mutable=False)
        try:
            if index.entries == 0:
                self.message(f"{path} is empty.")
                return
            if self.o.index_sanity_check:
                self._sanity(index, path)
                return
            mismatches = []
            try:
                for i in range(index.entries):
                    entry = index.entry(i)
                    if entry.offset == index.base_offset and i > 0:
                        break
                    found = first_batch_last_offset(records, entry.position, self.o.max_message_size)
                    if found != entry.offset:
                        mismatches.append((entry.offset, found))
                    if not self.o.verify_index_only:
                        if self.json:
                            self.emit({"type": "indexEntry", "offset": entry.offset, "position": entry.position})
                        else:
                            self.line(f"offset: {entry.offset} position: {entry.position}")
            finally:
                if mismatches:
                    self.index_mismatches.setdefault(absolute(path), []).extend(mismatches)
        finally:
            records.close_handlers()
            index.close_handler()

    def _sanity(self, index, path: str) -> None:
        try:
            index.sanity_check()
        except KafkaLogError as e:
            raise DumpError(f"{type(e).__name__}: {e.reason} ({path})") from None
        self.message(f"{path} passed sanity check.", passedSanityCheck=True)

    # ----- .timeindex
    def dump_time_index(self, path: str) -> None:
        start = self._start_offset(path)
        log_path = self._sibling(path, ".log")
        index_path = self._sibling(path, ".index")
        self._require(log_path)
        self._require(path)
        records = FileRecords.open(Path(log_path), mutable=False)
        index = OffsetIndex(index_path, start, writable=False) if os.path.exists(index_path) else None
        time_index = TimeIndex(path, start, writable=False)
        key = absolute(path)
        try:
            if self.o.index_sanity_check:
                self._sanity(time_index, path)
                return
            prev_timestamp = -1
            for i in range(time_index.entries):
                entry = time_index.entry(i)
                if entry.offset == time_index.base_offset and i > 0:
                    return
                position = index.lookup(entry.offset).position if index is not None and index.entries else 0
                found = None
                for header in records.batch_headers(position):
                    if header.last_offset >= entry.offset:
                        found = header
                        break
                if found is None:
                    self.time_not_found.setdefault(key, []).append((entry.offset, -1))
                elif found.last_offset != entry.offset:
                    self.time_not_found.setdefault(key, []).append((entry.offset, found.last_offset))
                else:
                    max_timestamp = -1
                    for record in records.read_batch(found):
                        max_timestamp = max(max_timestamp, record.timestamp)
                    if max_timestamp != entry.timestamp:
                        self.time_mismatches.setdefault(key, []).append((entry.timestamp, max_timestamp))
                    if prev_timestamp >= entry.timestamp:
                        self.time_out_of_order.setdefault(key, []).append((entry.timestamp, prev_timestamp))
                if not self.o.verify_index_only:
                    if self.json:
                        self.emit({"type": "timeIndexEntry", "timestamp": entry.timestamp, "offset": entry.offset})
                    else:
                        self.line(f"timestamp: {entry.timestamp} offset: {entry.offset}")
                prev_timestamp = entry.timestamp
        finally:
            records.close_handlers()
            time_index.close_handler()
            if index is not None:
                index.close_handler()

    # ----- .snapshot
    def dump_snapshot(self, path: str) -> None:
        self._require(path)
        try:
            entries = read_snapshot(path)
        except CorruptSnapshotError as e:
            self.err.write(e.reason + "\n")
            self.corrupt.setdefault(path, "not a readable producer snapshot")
            return
        for entry in entries:
            fields: list[DumpField] = [
                ("producerId", entry.producer_id, str),
                ("producerEpoch", entry.producer_epoch, str),
                ("coordinatorEpoch", entry.coordinator_epoch, str),
                ("currentTxnFirstOffset", entry.current_txn_first_offset, optional_long),
                ("lastTimestamp", entry.last_timestamp, str),
            ]
            meta_fields: list[DumpField] = []
            if entry.batch_metadata:
                meta = entry.batch_metadata[0]
                meta_fields = [
                    ("firstSequence", meta.first_seq, str),
                    ("lastSequence", meta.last_seq, str),
                    ("lastOffset", meta.last_offset, str),
                    ("offsetDelta", meta.offset_delta, str),
                    ("timestamp", meta.timestamp, str),
                ]
            if self.json:
                self.emit({"type": "producerSnapshotEntry", **fields_json(fields + meta_fields)})
            else:  # Kafka's line has a space after lastTimestamp, with or without the batch fields
                self.line(fields_text(fields) + " " + fields_text(meta_fields))

    # ----- .txnindex
    def dump_txn_index(self, path: str) -> None:
        self._require(path)
        with open(path, "rb") as f:
            position = 0
            while True:
                data = f.read(ABORTED_TXN_SIZE)
                if len(data) < ABORTED_TXN_SIZE:
                    return
                try:
                    txn = AbortedTxn.from_bytes(data)
                except KafkaLogError as e:
                    raise DumpError(f"{e.reason} (at position {position} of {path})") from None
                version = struct.unpack_from(">b", data)[0]
                if self.json:
                    self.emit(
                        {
                            "type": "abortedTxn",
                            "version": version,
                            "producerId": txn.producer_id,
                            "firstOffset": txn.first_offset,
                            "lastOffset": txn.last_offset,
                            "lastStableOffset": txn.last_stable_offset,
                        }
                    )
                else:
                    self.line(
                        f"version: {version} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
                        f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}"
                    )
                position += ABORTED_TXN_SIZE

    def damaged(self) -> dict[str, str]:
        """Every damaged file with why: the files marked while dumping, and those the reports name (an index
        or time index that disagrees with its log)."""
        found = dict(self.corrupt)
        for what, table in (
            ("index entries that do not match the log", self.index_mismatches),
            ("time index timestamps that do not match the log", self.time_mismatches),
            ("time index timestamps out of order", self.time_out_of_order),
        ):
            for file in table:
                found.setdefault(file, what)
        if self.time_not_found:
            for file in self.time_not_found:
                found.setdefault(file, "time index offsets not found in the log")
        return found

    # ----- reports (Kafka prints them to stderr once every file is dumped)
    def print_reports(self) -> None:
        if self.json:
            for kind, table in (
                ("indexMismatches", self.index_mismatches),
                ("timestampMismatches", self.time_mismatches),
                ("outOfOrderTimestamps", self.time_out_of_order),
                ("indexedOffsetsNotFound", self.time_not_found),
                ("nonConsecutiveOffsets", self.non_consecutive),
            ):
                for file, pairs in table.items():
                    self.emit({"type": kind, "file": file, "pairs": [list(p) for p in pairs]})
            return
        err = self.err
        # Kafka prepends to an immutable List while collecting, so these two come out newest first.
        for file, pairs in self.index_mismatches.items():
            err.write(f"Mismatches in :{file}\n")
            for index_offset, log_offset in reversed(pairs):
                err.write(f"  Index offset: {index_offset}, log offset: {log_offset}\n")
        for file, pairs in self.time_mismatches.items():
            err.write(f"Found timestamp mismatch in :{file}\n")
            for index_ts, log_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}\n")
        for file, pairs in self.time_out_of_order.items():
            err.write(f"Found out of order timestamp in :{file}\n")
            for index_ts, prev_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}\n")
        for pairs in self.time_not_found.values():
            err.write("The following indexed offsets are not found in the log.\n")
            for indexed, found in pairs:
                err.write(f"Indexed offset: {indexed}, found log offset: {found}\n")
        for file, pairs in self.non_consecutive.items():
            err.write(f"Non-consecutive offsets in {file}\n")
            for first, second in reversed(pairs):
                err.write(f"  {first} is followed by {second}\n")
