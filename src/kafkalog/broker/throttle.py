"""Where a response carries ``throttle_time_ms``, and which clients throttle themselves (KIP-219).

A request quota (``request_percentage``) is charged after the handler has built its response, so the router
writes the throttle time into the encoded body: in Kafka's schemas ThrottleTimeMs is the body's first field for
every API that has one, except OffsetDelete (after its int16 ErrorCode), Produce (its last field, before the
tagged fields of flexible versions, of which this broker's hand encoder writes none) and ApiVersions (after the
variable ApiKeys array; ApiVersions is exempt from the request quota here, see apis.REQUEST_QUOTA_EXEMPT).
tests/test_broker_request_quota.py checks the positions against kafka-python's encoders of Kafka's schemas.
"""

from __future__ import annotations

import struct

from .protocol import Response

_I32 = struct.Struct(">i")

# API key -> first version with ThrottleTimeMs (Kafka's common/message/*Response.json)
THROTTLE_FROM = {
    0: 1, 1: 1, 2: 2, 3: 3, 8: 3, 9: 3, 10: 1, 11: 2, 12: 1, 13: 1, 14: 1, 15: 1, 16: 1, 19: 2, 20: 1,
    21: 0, 22: 0, 23: 2, 24: 0, 25: 0, 26: 0, 28: 0, 29: 0, 30: 0, 31: 0, 32: 0, 33: 0, 35: 0, 37: 0, 42: 0,
    43: 0, 44: 0, 47: 0, 48: 0, 49: 0, 50: 0, 51: 0, 60: 0, 61: 0, 65: 0, 66: 0, 68: 0, 69: 0,
}  # fmt: skip
_AT_OFFSET = {47: 2}  # OffsetDelete: ErrorCode first

# The first version of each API whose clients throttle themselves (Kafka's AbstractResponse.shouldClientThrottle;
# an API not listed never does): for older versions the broker delays the answer instead of muting the channel.
CLIENT_THROTTLES_FROM = {
    0: 6, 1: 8, 2: 3, 3: 6, 8: 4, 9: 4, 10: 2, 11: 3, 12: 2, 13: 2, 14: 2, 15: 2, 16: 2, 18: 2, 19: 3, 20: 2,
    21: 1, 22: 1, 24: 1, 25: 1, 26: 1, 28: 1, 29: 1, 30: 1, 31: 1, 32: 2, 33: 1, 35: 1, 37: 1, 42: 1, 43: 0,
    44: 0, 47: 0, 50: 0, 51: 0,
}  # fmt: skip


def client_throttles(api_key: int, version: int) -> bool:
    return version >= CLIENT_THROTTLES_FROM.get(api_key, 1 << 15)


def throttle_field_offset(api_key: int, version: int, body_size: int) -> int | None:
    """The byte offset of throttle_time_ms in a response body of ``body_size`` bytes (None: the response has none)."""
    first = THROTTLE_FROM.get(api_key)
    if first is None or version < first:
        return None
    if api_key == 0:  # Produce: the last field, then one empty tagged-field count in flexible versions
        return body_size - (5 if version >= 9 else 4)
    return _AT_OFFSET.get(api_key, 0)


def raise_throttle_time(api_key: int, version: int, response: Response, throttle_ms: int) -> None:
    """Make the response's throttle_time_ms at least ``throttle_ms`` (Kafka answers the larger of the byte-rate
    and request throttles). Only the first part, which holds the field, is rewritten."""
    if not response.parts or not isinstance(response.parts[0], (bytes, bytearray)):
        return
    head = response.parts[0]
    body_size = response.size if api_key != 0 else len(head)
    offset = throttle_field_offset(api_key, version, body_size)
    if offset is None or offset < 0 or offset + 4 > len(head):
        return
    (current,) = _I32.unpack_from(head, offset)
    if current >= throttle_ms:
        return
    patched = bytearray(head)
    _I32.pack_into(patched, offset, throttle_ms)
    response.parts[0] = bytes(patched)
