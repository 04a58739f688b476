"""Small helpers for tests that take record batches apart (header field offsets, CRC rewriting) and read
logs back as a consumer would (fold, read_committed)."""

from __future__ import annotations

import struct

from kafkalog.record.checksums import crc32c

# Byte positions of v2 header fields (spec section 1.2).
BASE_OFFSET, BATCH_LENGTH, LEADER_EPOCH, MAGIC, CRC, ATTRIBUTES = 0, 8, 12, 16, 17, 21
LAST_OFFSET_DELTA, BASE_TIMESTAMP, MAX_TIMESTAMP, PRODUCER_ID = 23, 27, 35, 43
PRODUCER_EPOCH, BASE_SEQUENCE, RECORDS_COUNT, RECORDS = 51, 53, 57, 61


def with_crc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC-32C recomputed over attributes..end, so parsing goes past the CRC check."""
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC, crc32c(bytes(out[ATTRIBUTES:])))
    return bytes(out)


def patch(batch: bytes, position: int, fmt: str, value: int, *, fix_crc: bool = True) -> bytes:
    """Overwrite one big-endian field and (by default) fix the CRC."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, position, value)
    return with_crc(out) if fix_crc else bytes(out)


def replace_records(batch: bytes, records: bytes, count: int | None = None) -> bytes:
    """The batch with its records section replaced (uncompressed batches), length and CRC fixed."""
    out = bytearray(batch[:RECORDS]) + records
    struct.pack_into(">i", out, BATCH_LENGTH, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, RECORDS_COUNT, count)
    return with_crc(out)


def fold(records) -> dict[bytes, bytes]:
    """Last write wins per key; a tombstone (value None) deletes the key."""
    state: dict[bytes, bytes] = {}
    for key, value in records:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def read_committed(log) -> list:
    """Every record a read_committed consumer gets from the log start (aborted and control batches dropped)."""
    return list(log.records(isolation="read_committed"))
