"""What both coordinators' record schemas (``group/records.py``, ``transaction/records.py``) read and write the
same way: Kafka's generated-message reader over big-endian bytes, and the unsigned varint of flexible versions.

Each schema module keeps its own field rules (nullable or not, compact in flexible versions) in a subclass of
``MessageReader``; this module holds only the byte-level reading they share.
"""

from __future__ import annotations

import struct
from typing import Any

from ..record.varint import encode_unsigned_varint

__all__ = ["MessageReader", "encode_unsigned_varint"]


class MessageReader:
    """A cursor over one message's bytes. Invariant: ``pos`` never passes the end; a read that would raises
    ValueError (as a truncated or over-long varint does), which the record decoders report as unreadable."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"Tried to read {n} bytes at position {self.pos}, only {len(self.data) - self.pos} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        """The value(s) of struct format ``fmt`` (one value alone, several as a tuple)."""
        values = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return values[0] if len(values) == 1 else values

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(5):
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise ValueError("Varint is too long")

    def raw_tagged_fields(self) -> dict[int, bytes]:
        """A flexible version's tagged fields: tag -> its raw bytes."""
        tags: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags
