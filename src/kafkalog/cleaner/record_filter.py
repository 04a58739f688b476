"""Which records of a buffer of batches the cleaner keeps: Kafka's ``MemoryRecords.filterTo`` with the cleaner's
``RecordFilter`` (the per-batch reference path; the fast path over plain runs is ``Cleaner._emit_plain``).

Each batch gets a fate (``BatchRetention``); the records of the batches that stay are decided for all at once with
numpy masks against the offset map, and a batch that keeps every record is copied byte for byte, one that keeps
some is re-framed around the same offsets, an emptied one that must stay becomes a bare header.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from ..errors import KafkaStorageError
from ..record.batch import RecordBatch
from ..record.builder import assemble_batch, producer_fields
from ..record.legacy import LegacyBatch
from ..record.legacy_builder import build_legacy
from ..record.types import NO_TIMESTAMP, TimestampType
from . import _kernels as kernels
from .offset_map import SkimpyOffsetMap
from .pipeline import Records, decode
from .stats import CleanerStats
from .transactions import is_last_of_producer


class BatchRetention(Enum):
    """What becomes of a whole batch (Kafka's ``RecordFilter.BatchRetention``)."""

    DELETE = "DELETE"  # the batch goes, whatever its records
    DELETE_EMPTY = "DELETE_EMPTY"  # the batch goes if none of its records stays
    RETAIN_EMPTY = "RETAIN_EMPTY"  # the batch stays, as a bare header when none of its records stays


@dataclass
class FilterResult:
    """Batches kept by one filter pass: (batch index, bytes, max timestamp, its offset, max offset, records)."""

    entries: list = field(default_factory=list)
    messages_read: int = 0
    bytes_read: int = 0
    current: int = 0  # index of the batch being filtered

    def retained(self, data, max_timestamp: int, shallow_offset: int, max_offset: int, count: int) -> None:
        self.entries.append((self.current, data, max_timestamp, shallow_offset, max_offset, count))


class BatchFilter:
    """The reference filter of ``Cleaner`` (a base class of it): needs ``self.offset_map``; holds no state."""

    offset_map: SkimpyOffsetMap

    def _filter(self, batches, txn, active_producers, upper_bound, retain_legacy_deletes, retention_ms, now, stats):
        """MemoryRecords.filterTo with the cleaner's RecordFilter over one buffer of batches."""
        result = FilterResult()
        offset_map = self.offset_map
        fates: list[tuple] = []  # (batch, fate, discard records, empty marker)
        for index, batch in enumerate(batches):
            result.bytes_read += batch.size_in_bytes
            can_discard = txn.on_control_batch_read(batch) if batch.is_control else txn.on_batch_read(batch)
            if batch.is_control:
                horizon = batch.delete_horizon_ms
                discard_records = can_discard and horizon is not None and horizon <= now
            else:
                discard_records = can_discard
            last_of_producer = batch.has_producer_id and is_last_of_producer(batch, active_producers)
            if last_of_producer or batch.next_offset == upper_bound:
                fate = BatchRetention.RETAIN_EMPTY
            elif discard_records:
                fate = BatchRetention.DELETE
            else:
                fate = BatchRetention.DELETE_EMPTY
            if fate != BatchRetention.DELETE:
                fates.append((batch, fate, discard_records, can_discard and batch.is_control, index))
        v2 = [f for f in fates if isinstance(f[0], RecordBatch)]
        keep = None
        if v2:
            records = decode([f[0] for f in v2])
            keep = self._keep_mask(records, v2, offset_map, now, stats)
            result.messages_read += len(records.offsets)
            plans = self._rebuild_plans(records, keep, v2, retention_ms, now)
        j = 0
        for batch, fate, discard_records, _, index in fates:
            result.current = index
            if isinstance(batch, LegacyBatch):
                self._filter_legacy(batch, fate, discard_records, offset_map, retain_legacy_deletes, stats, result)
                continue
            self._emit_v2(batch, fate, plans[j], result)
            j += 1
        return result

    def _keep_mask(self, records: Records, v2, offset_map, now: int, stats: CleanerStats) -> np.ndarray:
        """Which records stay (the cleaner's shouldRetainRecord), for every record at once."""
        nb = len(v2)
        discard = np.fromiter((f[2] for f in v2), np.bool_, nb)[records.batch_of]
        control = np.fromiter((f[0].is_control for f in v2), np.bool_, nb)[records.batch_of]
        horizons = [f[0].delete_horizon_ms for f in v2]
        retain_deletes = np.fromiter((h is None or now < h for h in horizons), np.bool_, nb)[records.batch_of]
        past = records.offsets > offset_map.latest_offset
        has_key = records.key_len >= 0
        found = offset_map.get_records(records.arena, records.key_pos, records.key_len)
        keep_data = past | (has_key & (records.offsets >= found) & ((records.val_len >= 0) | retain_deletes))
        normal = ~discard & ~control
        stats.invalid_messages_read += int(np.count_nonzero(normal & ~past & ~has_key))
        return ~discard & (control | keep_data)

    def _rebuild_plans(self, records: Records, keep: np.ndarray, v2, retention_ms: int, now: int) -> list:
        """Per v2 batch: ('copy', n), ('empty',), ('drop',) or ('rebuild', section, n, base_ts, max_ts, horizon)."""
        nb = len(v2)
        kept = np.bincount(records.batch_of[keep], minlength=nb)
        tombstones = np.bincount(records.batch_of[keep & (records.val_len < 0)], minlength=nb) > 0
        totals = np.diff(records.first)
        plans: list = [None] * nb
        rebuild: list[int] = []
        horizons: list[int | None] = []
        for i, (batch, fate, _, empty_marker, _) in enumerate(v2):
            k = int(kept[i])
            if k == 0:
                plans[i] = ("empty",) if fate == BatchRetention.RETAIN_EMPTY else ("drop",)
                continue
            current = batch.delete_horizon_ms
            need_horizon = (bool(tombstones[i]) or empty_marker) and current is None
            if k == totals[i] and not need_horizon:
                plans[i] = ("copy", k)
                continue
            rebuild.append(i)
            horizons.append(now + retention_ms if need_horizon else current)
        if rebuild:
            self._reframe(records, keep, v2, rebuild, horizons, plans)
        return plans

    def _reframe(self, records: Records, keep, v2, rebuild: list[int], horizons: list, plans: list) -> None:
        """Re-encode the kept records of every batch to rebuild, in one kernel call."""
        nb = len(v2)
        selected_batch = np.zeros(nb, np.bool_)
        selected_batch[rebuild] = True
        sel = np.flatnonzero(keep & selected_batch[records.batch_of])
        sel_batch = records.batch_of[sel]
        _, first_idx = np.unique(sel_batch, return_index=True)  # rebuild is sorted: one run per batch
        ts = records.timestamps[sel]
        base_ts = np.empty(nb, np.int64)
        base_offsets = np.fromiter((f[0].base_offset for f in v2), np.int64, nb)
        for j, i in enumerate(rebuild):
            base_ts[i] = horizons[j] if horizons[j] is not None else ts[first_idx[j]]
        ts_delta = ts - base_ts[sel_batch]
        off_delta = records.offsets[sel] - base_offsets[sel_batch]
        sizes = kernels.reframed_sizes(sel, records.tail_start, records.rec_end, ts_delta, off_delta)
        out = np.empty(int(sizes.sum()), np.uint8)
        kernels.reframe_records(records.arena, sel, records.tail_start, records.rec_end, ts_delta, off_delta, out)
        bounds = np.zeros(len(sel) + 1, np.int64)
        np.cumsum(sizes, out=bounds[1:])
        ends_idx = np.append(first_idx[1:], len(sel))
        max_ts = np.maximum.reduceat(ts, first_idx)
        data = out.data
        for j, i in enumerate(rebuild):
            lo, hi = int(first_idx[j]), int(ends_idx[j])
            section = data[bounds[lo] : bounds[hi]]
            plans[i] = ("rebuild", section, hi - lo, int(base_ts[i]), int(max(max_ts[j], NO_TIMESTAMP)), horizons[j])

    def _emit_v2(self, batch: RecordBatch, fate: BatchRetention, plan: tuple, result: FilterResult) -> None:
        kind = plan[0]
        if kind == "copy":
            data = batch.source_buffer[batch.position : batch.position + batch.size_in_bytes]
            result.retained(data, batch.max_timestamp, batch.last_offset, batch.last_offset, plan[1])
        elif kind == "empty":
            data = _reassemble(
                batch, b"", record_count=0, base_timestamp=NO_TIMESTAMP, max_timestamp=batch.max_timestamp
            )
            result.retained(data, batch.max_timestamp, batch.last_offset, batch.last_offset, 0)
        elif kind == "rebuild":
            _, section, count, base_ts, max_ts, horizon = plan
            append_time = batch.timestamp_type_id == TimestampType.LOG_APPEND_TIME
            max_ts = batch.max_timestamp if append_time else max_ts
            data = _reassemble(
                batch,
                section,
                record_count=count,
                base_timestamp=base_ts,
                max_timestamp=max_ts,
                compression_type=batch.compression_type,
                has_delete_horizon=horizon is not None,
            )
            result.retained(data, max_ts, batch.last_offset, batch.last_offset, count)

    def _filter_legacy(self, batch, fate, discard_records, offset_map, retain_deletes, stats, result) -> None:
        """A v0/v1 wrapper: copied byte for byte when every message stays, else rebuilt in its own magic and codec."""
        kept = []
        total = 0
        for record in batch:
            total += 1
            if discard_records:
                continue
            if record.offset > offset_map.latest_offset:
                kept.append(record)
            elif record.key is None:
                stats.invalid_messages_read += 1
            elif record.offset >= offset_map.get(record.key) and (record.value is not None or retain_deletes):
                kept.append(record)
        result.messages_read += total
        if not kept:
            if fate == BatchRetention.RETAIN_EMPTY:
                raise KafkaStorageError(
                    "Empty batches are only supported for magic v2 and above", offset=batch.base_offset
                )
            return
        if len(kept) < total:
            # buildRetainedRecordsInto: Kafka's builder in the set's magic, codec (default level) and timestamp type,
            # from the first kept offset. Only a compressed wrapper keeps some of its messages, so one wrapper comes
            # back; as in Kafka's RecordsInfo, its (last) offset and timestamp (max or append time) describe it.
            append_time = batch.timestamp_type_id == TimestampType.LOG_APPEND_TIME
            data = build_legacy(
                batch.magic,
                [(r.offset, r.timestamp, r.key, r.value) for r in kept],
                compression_type=batch.compression_type,
                timestamp_type=batch.timestamp_type_id,
                log_append_time=batch.max_timestamp if append_time else NO_TIMESTAMP,
            )
            wrapper = LegacyBatch(data)
            result.retained(data, wrapper.max_timestamp, wrapper.offset, wrapper.offset, len(kept))
            return
        data = batch.source_buffer[batch.position : batch.position + batch.size_in_bytes]
        result.retained(data, batch.max_timestamp, batch.last_offset, batch.last_offset, total)


def _reassemble(batch: RecordBatch, section: bytes, **fields: Any) -> bytes:
    """A batch with ``batch``'s offsets, producer, transaction and leader epoch around the records ``section``."""
    return assemble_batch(
        section,
        last_offset_delta=batch.last_offset_delta,
        base_offset=batch.base_offset,
        timestamp_type=batch.timestamp_type_id,
        **producer_fields(batch),
        **fields,
    )
