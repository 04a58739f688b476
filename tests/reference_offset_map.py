"""Kafka's ``SkimpyOffsetMap`` line by line, over ``hashlib.md5`` and a ``bytearray``: the test oracle that
``kafkalog.cleaner.offset_map.SkimpyOffsetMap`` is held to (same results, same counters, same table bytes)."""

from __future__ import annotations

import hashlib

import numpy as np

from kafkalog.cleaner.offset_map import (
    ENTRY_BYTES,
    HASH_BYTES,
    OffsetMapFullError,
    _check_geometry,
    _check_offset,
    _full_message,
    probe_slot,
)

_EMPTY_ENTRY = bytes(ENTRY_BYTES)


class ReferenceOffsetMap:
    """Kafka's ``SkimpyOffsetMap`` line by line, over ``hashlib.md5`` and a ``bytearray``: the test oracle."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.memory, self.slots, self.max_entries, self.load_factor = _check_geometry(memory, load_factor)
        self._bytes = bytearray(self.slots * ENTRY_BYTES)
        self.memory_bytes = len(self._bytes)
        self._entries = 0
        self.lookups = 0
        self.probes = 0
        self._last_offset = -1

    @property
    def size(self) -> int:
        return self._entries

    @property
    def latest_offset(self) -> int:
        return self._last_offset

    @property
    def utilization(self) -> float:
        return self._entries / self.slots

    @property
    def collision_rate(self) -> float:
        return (self.probes - self.lookups) / self.lookups if self.lookups else 0.0

    def clear(self) -> None:
        self._entries = 0
        self.lookups = 0
        self.probes = 0
        self._last_offset = -1
        self._bytes[:] = bytes(len(self._bytes))

    def update_latest_offset(self, offset: int) -> None:
        self._last_offset = _check_offset(offset)

    def table_bytes(self) -> bytes:
        return bytes(self._bytes)

    def _position_of(self, digest: bytes, attempt: int) -> int:
        self.probes += 1
        return probe_slot(digest, attempt, self.slots) * ENTRY_BYTES

    def _is_empty(self, pos: int) -> bool:
        return self._bytes[pos : pos + ENTRY_BYTES] == _EMPTY_ENTRY

    def put(self, key: bytes, offset: int) -> None:
        self._put_digest(hashlib.md5(key).digest(), offset)

    def get(self, key: bytes) -> int:
        return self._get_digest(hashlib.md5(key).digest())

    def _put_digest(self, digest: bytes, offset: int) -> None:
        offset = _check_offset(offset)
        if self._entries >= self.slots:
            raise OffsetMapFullError(_full_message(self._entries, self.slots))
        self.lookups += 1
        attempt = 0
        pos = self._position_of(digest, attempt)
        while not self._is_empty(pos):
            if self._bytes[pos : pos + HASH_BYTES] == digest:
                self._bytes[pos + HASH_BYTES : pos + ENTRY_BYTES] = offset.to_bytes(8, "big", signed=True)
                self._last_offset = offset
                return
            attempt += 1
            pos = self._position_of(digest, attempt)
        self._bytes[pos : pos + ENTRY_BYTES] = digest + offset.to_bytes(8, "big", signed=True)
        self._last_offset = offset
        self._entries += 1

    def _get_digest(self, digest: bytes) -> int:
        self.lookups += 1
        max_attempts = self.slots + HASH_BYTES - 4
        attempt = 0
        while True:
            if attempt >= max_attempts:
                return -1
            pos = self._position_of(digest, attempt)
            if self._is_empty(pos):
                return -1
            attempt += 1
            if self._bytes[pos : pos + HASH_BYTES] == digest:
                return int.from_bytes(self._bytes[pos + HASH_BYTES : pos + ENTRY_BYTES], "big", signed=True)

    @staticmethod
    def _checked_arena(arena, key_pos, key_len) -> bytes:
        data = bytes(np.asarray(arena, dtype=np.uint8))
        for i in range(len(key_len)):
            n, p = int(key_len[i]), int(key_pos[i])
            if n >= 0 and (p < 0 or p + n > len(data)):
                raise ValueError(f"key {i} at [{p}, {p + n}) is outside the {len(data)}-byte arena")
        return data

    def mark_held(self, marks: np.ndarray, base: int, from_mark: int, to_mark: int) -> None:
        for pos in range(0, len(self._bytes), ENTRY_BYTES):
            if not self._is_empty(pos):
                rel = int.from_bytes(self._bytes[pos + HASH_BYTES : pos + ENTRY_BYTES], "big", signed=True) - base
                if 0 <= rel < len(marks) and marks[rel] == from_mark:
                    marks[rel] = to_mark

    def put_records(self, arena, key_pos, key_len, offsets, start_offset: int) -> int:
        data = self._checked_arena(arena, key_pos, key_len)
        for i in range(len(offsets)):
            n = int(key_len[i])
            offset = int(offsets[i])
            if n < 0 or offset < start_offset:
                continue
            if self._entries >= self.max_entries:
                return i
            p = int(key_pos[i])
            self.put(data[p : p + n], offset)
        return len(offsets)

    def get_records(self, arena, key_pos, key_len) -> np.ndarray:
        data = self._checked_arena(arena, key_pos, key_len)
        out = np.full(len(key_len), -1, dtype=np.int64)
        for i in range(len(key_len)):
            n = int(key_len[i])
            if n >= 0:
                p = int(key_pos[i])
                out[i] = self.get(data[p : p + n])
        return out
