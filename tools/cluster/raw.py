"""One request over a plain socket (tests use it to see a broker's raw error codes)."""

from __future__ import annotations

import socket
import struct


def request(bootstrap: str, api_key: int, version: int, body: bytes, timeout: float = 10.0) -> bytes:
    """Send one non-flexible request (header v1) and return the response body after the correlation id."""
    host, port = bootstrap.rsplit(":", 1)
    client = b"test"
    frame = struct.pack(">hhih", api_key, version, 7, len(client)) + client + body
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _read(s, 4))[0]
        payload = _read(s, size)
    return payload[4:]


def _read(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed")
        out += chunk
    return bytes(out)
