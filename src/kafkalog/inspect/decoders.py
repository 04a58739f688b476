"""The message parsers of ``dump --print-data-log``: Kafka's decoder classes by name, and the ``__consumer_offsets``
and KRaft metadata parsers (the transaction log's is in ``transaction_log``). The record schemas live with their
owners: ``coordinator.group.records`` decodes ``__consumer_offsets``, ``record.kraft`` the metadata records.

Decoders (``--key-decoder-class`` / ``--value-decoder-class``), by Kafka's class names:

* ``org.apache.kafka.tools.api.StringDecoder`` (default; ``kafka.serializer.StringDecoder`` too): UTF-8, each
  malformed sequence replaced by one U+FFFD where Java's ``new String(bytes, UTF_8)`` puts one
  (kafkalog.record.java_text);
* ``...IntegerDecoder`` / ``...LongDecoder``: the first 4 / 8 bytes as a big-endian signed integer;
* ``...DefaultDecoder``: Kafka prints the Java ``byte[]`` itself, i.e. ``[B@<identity hash>``; that is
  imitated (the hash is meaningless, as in Kafka);
* ``hex`` (kafkalog's own): the bytes in lowercase hex.
"""

from __future__ import annotations

import json
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable

from ..coordinator.group.records import UnknownRecordType, decode_offsets_record
from ..errors import MetadataParseError
from ..record.java_text import java_utf8
from ..record.kraft import decode_metadata_record, to_json_text
from ..record.types import Record

STRING_DECODER = "org.apache.kafka.tools.api.StringDecoder"
_DEFAULT = "org.apache.kafka.tools.api.DefaultDecoder"
_INTEGER = "org.apache.kafka.tools.api.IntegerDecoder"
_LONG = "org.apache.kafka.tools.api.LongDecoder"
DEPRECATED_DECODERS = {
    "kafka.serializer.StringDecoder": STRING_DECODER,
    "kafka.serializer.LongDecoder": _LONG,
    "kafka.serializer.IntegerDecoder": _INTEGER,
    "kafka.serializer.DefaultDecoder": _DEFAULT,
}


class DumpError(Exception):
    """Stops the dump: printed as one ``Error:`` line on stderr, exit status 1 (Kafka's tool dies here too)."""


# ------------------------------------------------------------------------------------------------- decoders


def decode_string(data: bytes):
    return java_utf8(data)  # Java's new String(bytes, UTF_8): one U+FFFD per malformed sequence, as Java counts


def _decode_int(size: int, name: str) -> Callable[[bytes], int]:
    def decode(data: bytes) -> int:
        if len(data) < size:
            raise DumpError(f"{name} needs {size} bytes but the field has {len(data)} (BufferUnderflowException)")
        return int.from_bytes(data[:size], "big", signed=True)

    return decode


def _decode_default(data: bytes) -> str:
    # Kafka prints the byte[] object: "[B@" + its identity hash code in hex. Imitated, equally meaningless.
    return f"[B@{id(data) & 0x7FFFFFFF:x}"


def _decode_hex(data: bytes) -> str:
    return data.hex()


DECODERS: dict[str, Callable[[bytes], object]] = {
    STRING_DECODER: decode_string,
    _DEFAULT: _decode_default,
    _INTEGER: _decode_int(4, "IntegerDecoder"),
    _LONG: _decode_int(8, "LongDecoder"),
    "hex": _decode_hex,
}


# ------------------------------------------------------------------------------------------ offsets decoder
# The __consumer_offsets schemas live with the group coordinator that writes them (one place per concept).


def jsonish(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# ------------------------------------------------------------------------------------------ message parsers


class MessageParser(ABC):
    """Kafka's MessageParser: (key, payload) of a record, each None when absent."""

    @abstractmethod
    def parse(self, record: Record) -> tuple[object | None, object | None]:
        """The printable key and payload of ``record``."""


class DecoderParser(MessageParser):
    def __init__(self, key_decoder: Callable[[bytes], object], value_decoder: Callable[[bytes], object]) -> None:
        self.key_decoder = key_decoder
        self.value_decoder = value_decoder

    def parse(self, record: Record):
        key = None if record.key is None else self.key_decoder(record.key)
        value = None if record.value is None else self.value_decoder(record.value)
        return key, value


class OffsetsParser(MessageParser):
    """Kafka's OffsetsMessageParser; ``as_objects`` keeps the JSON as dicts (for ``--json``)."""

    def __init__(self, as_objects: bool = False) -> None:
        self.as_objects = as_objects

    def parse(self, record: Record):
        if record.key is None:
            raise DumpError(
                f"Failed to decode message at offset {record.offset} using offset topic decoder "
                "(message had a missing key)"
            )
        try:
            key_obj, value_obj = decode_offsets_record(record.key, record.value)
        except UnknownRecordType as e:
            return f"Unknown record type {e.record_type} at offset {record.offset}, skipping.", None
        except (ValueError, struct.error) as e:
            return f"Error at offset {record.offset}, skipping. {e}", None
        if self.as_objects:
            return key_obj, "<DELETE>" if value_obj is None else value_obj
        return jsonish(key_obj), "<DELETE>" if value_obj is None else jsonish(value_obj)


class ClusterMetadataParser(MessageParser):
    """Kafka's ClusterMetadataLogMessageParser: no key; the payload is the record's type, version and data."""

    def __init__(self, as_objects: bool = False) -> None:
        self.as_objects = as_objects

    def parse(self, record: Record):
        try:
            if record.value is None:
                raise MetadataParseError("the record has no value")
            decoded = decode_metadata_record(record.value).to_json()
        except MetadataParseError as e:
            return None, f"Error at {record.offset}, skipping. {e.reason}"
        return None, decoded if self.as_objects else to_json_text(decoded)
