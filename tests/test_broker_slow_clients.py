"""Clients that tie up connections without working: slowloris (half a request, then nothing), a thousand idle
connections, and a client that pipelines large fetches and never reads the answers. The broker keeps serving
everyone else, its memory and descriptors stay within bounds set here beforehand, and connections.max.idle.ms
closes each of them, as Kafka's idle expiry does (a half-sent request and an untaken response count as idle).

(tests/test_broker_lifecycle.py has a thousand connections each sending a request, and a slow reader beside
other clients; tests/test_broker_limits.py the connection limits and idle connections between requests.)
"""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
from kafka.protocol.consumer import FetchRequest

from brokertools import BrokerProcess, api_versions_ok, encode_request, wait_until

IDLE_MS = 5000
MB = 1 << 20


def rss(pid: int) -> int:
    """Resident set size in bytes, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def settled_fds(pid: int) -> int:
    """The broker's descriptor count once connections just closed have been let go."""
    last = -1
    for _ in range(50):
        now = fds(pid)
        if now == last:
            return now
        last = now
        time.sleep(0.1)
    return last


def responsive(bootstrap: str, calls: int = 20, within: float = 5.0) -> bool:
    """``calls`` ApiVersions round trips on fresh connections, all answered within ``within`` seconds."""
    start = time.monotonic()
    return all(api_versions_ok(bootstrap) for _ in range(calls)) and time.monotonic() - start < within


def closed_by_broker(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(1 << 16)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to read the broker's memory and descriptors")
    # socket.listen.backlog.size: a thousand connects in a burst outrun Kafka's default accept queue of 50
    settings = {"connections.max.idle.ms": str(IDLE_MS), "socket.listen.backlog.size": "1024"}
    server = BrokerProcess(tmp_path_factory.mktemp("slow-clients"), settings).start()
    yield server
    assert server.stop() == 0, server.log


def test_slowloris_connections_are_closed_and_hold_no_announced_memory(broker):
    pid = broker.proc.pid
    assert responsive(broker.bootstrap)
    base_rss, base_fds = rss(pid), settled_fds(pid)
    held = []
    try:
        for _ in range(200):  # each announces a 50 MB request (under socket.request.max.bytes) and sends 1 KB of it
            s = socket.create_connection((broker.host, broker.port), timeout=10)
            s.sendall(struct.pack(">i", 50 * MB) + b"\x00" * 1024)
            held.append(s)
        assert wait_until(lambda: fds(pid) >= base_fds + 200, 10)
        assert responsive(broker.bootstrap), "others are served while 200 half requests wait"
        # bound set beforehand: the bytes received and the connection's own objects, not the 10 GB announced
        assert rss(pid) - base_rss < 32 * MB
        start = time.monotonic()
        assert all(closed_by_broker(s, IDLE_MS / 1000 + 10) for s in held), "half requests closed when idle"
        assert time.monotonic() - start >= IDLE_MS / 1000 - 2
    finally:
        for s in held:
            s.close()
    assert wait_until(lambda: fds(pid) <= base_fds + 5, 10)
    assert responsive(broker.bootstrap)


def test_a_thousand_idle_connections(broker):
    pid = broker.proc.pid
    base_rss, base_fds = rss(pid), settled_fds(pid)
    held = []
    try:
        for _ in range(1000):
            held.append(socket.create_connection((broker.host, broker.port), timeout=10))
        assert wait_until(lambda: fds(pid) >= base_fds + 1000, 10), "every connection accepted"
        assert responsive(broker.bootstrap), "others are served beside 1,000 idle connections"
        # bound set beforehand: 64 KB per connection (asyncio's stream objects and buffers); measured ~7 KB
        assert rss(pid) - base_rss < 1000 * 64 * 1024
        assert all(closed_by_broker(s, IDLE_MS / 1000 + 15) for s in held), "idle connections closed"
    finally:
        for s in held:
            s.close()
    assert wait_until(lambda: fds(pid) <= base_fds + 5, 10), "their descriptors released"


def _fetch(topic: str, partition_max: int) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=50 * MB,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        rack_id="",
        topics=[
            T(
                topic=topic,
                partitions=[
                    T.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=partition_max,
                    )
                ],
            )
        ],
    )


def test_a_client_that_never_reads_its_responses(broker):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(64):
        producer.produce("unread", bytes([i]) * 120_000, partition=0)
    assert producer.flush(30) == 0  # ~7.5 MB in the partition
    pid = broker.proc.pid
    base_rss = rss(pid)
    greedy = socket.create_connection((broker.host, broker.port))
    greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        # 100 pipelined fetches of the whole partition: 750 MB of answers, none of them read
        greedy.sendall(encode_request(_fetch("unread", 8 * MB), 12) * 100)
        time.sleep(1.0)
        assert responsive(broker.bootstrap), "others are served while the broker cannot send to this client"
        # bound set beforehand: one response at a time, its records sent from the file by sendfile
        assert rss(pid) - base_rss < 32 * MB
        start = time.monotonic()
        assert closed_by_broker_without_reading(greedy, IDLE_MS / 1000 + 15), "closed once its response sat untaken"
        assert time.monotonic() - start >= IDLE_MS / 1000 - 2
    finally:
        greedy.close()
    assert responsive(broker.bootstrap)


def closed_by_broker_without_reading(sock: socket.socket, timeout: float) -> bool:
    """Poll (without reading: the client never reads) until the broker has closed its end: the kernel then
    reports the socket readable with EOF pending behind the unread bytes, or a reset on a send."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            sock.send(b"")  # raises once the broker reset the connection
        except (BrokenPipeError, ConnectionResetError):
            return True
        info = socket_state(sock)
        if info in ("CLOSE_WAIT", "CLOSED"):
            return True
        time.sleep(0.2)
    return False


def socket_state(sock: socket.socket) -> str:
    """The TCP state of ``sock`` (TCP_INFO's first byte): CLOSE_WAIT once the peer closed."""
    states = {1: "ESTABLISHED", 7: "CLOSED", 8: "CLOSE_WAIT"}
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)
    return states.get(info[0], str(info[0]))
