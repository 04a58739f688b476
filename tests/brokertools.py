"""Helpers for the broker tests: a ``kafkalog serve`` subprocess on a free loopback port, and a raw Kafka client.

The server listens on port 0 and the tests read the port it got from its log line ("Awaiting socket
connections on HOST:PORT"), so no port is guessed and no two test modules collide.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from kafka.protocol.metadata import ApiVersionsRequest

REPO = Path(__file__).resolve().parents[1]
_LISTENING = re.compile(r"Awaiting socket connections on (\S+):(\d+)(?: \(listener (\w+))?")


class BrokerProcess:
    """``kafkalog serve`` in a subprocess; ``bootstrap`` is its host:port once started."""

    def __init__(self, log_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.log_dir = Path(log_dir)
        settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(self.log_dir)}
        settings.update(overrides or {})
        self.args = [sys.executable, "-c", "from kafkalog.cli import main; main()", "serve"]
        for key, value in settings.items():
            self.args += ["--override", f"{key}={value}"]
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.host = "127.0.0.1"
        self.port = 0
        self.listener_count = len([x for x in settings["listeners"].split(",") if x.strip()])
        self.ports: dict[str, int] = {}  # listener name -> bound port

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        return f"{self.host}:{self.ports[listener]}"

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        env = dict(os.environ)
        src = str(REPO / "src")
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            self.args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, env=env
        )
        found = threading.Event()

        def drain() -> None:
            for line in self.proc.stderr:
                self.lines.append(line)
                m = _LISTENING.search(line)
                if m and not found.is_set():
                    if not self.port:
                        self.host, self.port = m.group(1), int(m.group(2))
                    if m.group(3):
                        self.ports[m.group(3)] = int(m.group(2))
                    if len(self.ports) >= self.listener_count or not m.group(3):
                        found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        if not found.wait(timeout) or not self.port:
            self.stop()
            raise RuntimeError("kafkalog serve did not start:\n" + "".join(self.lines))
        return self

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ----- a raw protocol client ----------------------------------------------------------------------------
def frame(api_key: int, version: int, body: bytes, correlation_id: int = 1, client_id: str | None = "test") -> bytes:
    """A request frame with a v1 header, or v2 (empty tagged fields) when ``flexible``-by-key-and-version."""
    from kafkalog.testing.protocol_messages import request_header

    payload = request_header(api_key, version, correlation_id, client_id) + body
    return struct.pack(">i", len(payload)) + payload


def encode_request(message, version: int, correlation_id: int = 1) -> bytes:
    return frame(message.API_KEY, version, message.encode(version=version), correlation_id)


def fetch_request(
    topic: str,
    partitions: list[int] | dict[int, int],
    *,
    fetch_offset: int = 0,
    partition_max_bytes: int = 1 << 20,
    max_bytes: int = 50 << 20,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: list[int] | tuple[int, ...] = (),
    isolation_level: int = 0,
):
    """A consumer's FetchRequest (v12 fields) reading ``partitions`` of ``topic`` from ``fetch_offset``, or from
    each one's own offset when ``partitions`` maps partition -> offset (no topic at all when it is empty: an
    incremental fetch with nothing to change). No fetch session by default (id 0, epoch -1); ``forgotten``: the
    partitions an incremental fetch drops from its session. Encode it with ``encode_request(request, version)``."""
    from kafka.protocol.consumer import FetchRequest

    T = FetchRequest.FetchTopic
    offsets = partitions if isinstance(partitions, dict) else dict.fromkeys(partitions, fetch_offset)
    fetched = [
        T.FetchPartition(
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=partition_max_bytes,
        )
        for p, offset in offsets.items()
    ]
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=topic, partitions=list(forgotten))]
        if forgotten
        else [],
        rack_id="",
        topics=[T(topic=topic, partitions=fetched)] if fetched else [],
    )


class RawClient:
    """One TCP connection speaking Kafka frames; responses are returned as (correlation id, body bytes)."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, ssl_context=None) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        if ssl_context is not None:
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self) -> bytes:
        (size,) = struct.unpack(">i", self._read_exactly(4))
        return self._read_exactly(size)

    def call(self, message, version: int, correlation_id: int = 1):
        """Send ``message`` at ``version`` and decode its response."""
        from kafkalog.broker.protocol import APIS

        spec = APIS[message.API_KEY]
        self.send(encode_request(message, version, correlation_id))
        body = self.receive()
        (corr,) = struct.unpack_from(">i", body)
        assert corr == correlation_id, f"correlation id {corr} != {correlation_id}"
        skip = 5 if spec.flexible(version) and spec.key != 18 else 4
        return spec.response[version].decode(body[skip:])

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within ``timeout`` (reads EOF)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def api_versions_ok(bootstrap: str) -> bool:
    """The broker answers ApiVersions on a fresh connection (it is alive and serving)."""
    with RawClient(bootstrap) as client:
        response = client.call(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), 3)
        return response.error_code == 0


def knows_its_topic(consumer, topic: str) -> set[int]:
    """Have a subscribing kafka-python consumer fetch ``topic``'s metadata before its first poll; its partitions.

    kafka-python (3.0.12) sends its first JoinGroup before any Metadata of its subscription (its bootstrap asks for
    no topic): its leader then assigns nothing ("No partition metadata for topic ...") and rejoins once the topic's
    metadata comes in. That rejoin is driven only by the changed metadata, which the leader's assignment marks as
    seen: when a poll's timeout ends while its SyncGroup is in flight, the next poll finds nothing to rejoin for,
    drops the in-flight answer and never re-enables its heartbeat, so the member is expelled after its session
    timeout and consumes nothing (Kafka would see the same client do the same). Knowing the topic first makes the
    first assignment complete."""
    return consumer.partitions_for_topic(topic)


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
