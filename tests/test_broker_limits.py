"""Connection limits: max.connections.per.ip (and its overrides) refuses the connections over the limit while
the broker keeps serving the others, max.connections makes a new connection wait for a slot, and
connections.max.idle.ms closes idle connections."""

from __future__ import annotations

import socket
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from brokertools import BrokerProcess, RawClient, wait_until


def _served(client: RawClient) -> bool:
    return client.call(ApiVersionsRequest(version=0), 0).error_code == 0


def _client_from(bootstrap: str, source: str) -> RawClient:
    client = RawClient.__new__(RawClient)
    host, port = bootstrap.rsplit(":", 1)
    client.sock = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
    return client


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    settings = {"max.connections.per.ip": "3", "max.connections.per.ip.overrides": "127.0.0.3:1"}
    with BrokerProcess(tmp_path_factory.mktemp("limits"), settings) as b:
        yield b


def test_connections_beyond_max_connections_per_ip_are_refused_while_others_are_served(broker):
    held = [RawClient(broker.bootstrap) for _ in range(3)]
    try:
        assert all(_served(c) for c in held)
        with RawClient(broker.bootstrap) as extra:
            assert extra.closed_by_peer(), "a fourth connection from 127.0.0.1 is closed"
        rejected = "Rejected connection from /127.0.0.1, address already has the configured maximum of 3 connections."
        assert wait_until(lambda: rejected in broker.log, 10)  # the log is read by a thread: wait for the line
        assert all(_served(c) for c in held), "the connections within the limit are still served"
        with _client_from(broker.bootstrap, "127.0.0.2") as other:  # another address has its own count
            assert _served(other)
        held.pop().close()
        assert wait_until(lambda: _try_new(broker.bootstrap), 5), "a freed slot is usable again"
    finally:
        for c in held:
            c.close()


def _try_new(bootstrap: str) -> bool:
    try:
        with RawClient(bootstrap) as c:
            return _served(c)
    except (ConnectionError, OSError):
        return False


def test_per_ip_overrides(broker):
    with _client_from(broker.bootstrap, "127.0.0.3") as first:
        assert _served(first)
        with _client_from(broker.bootstrap, "127.0.0.3") as second:
            assert second.closed_by_peer()
        assert _served(first)


def test_max_connections_makes_a_new_connection_wait_for_a_slot(tmp_path):
    with BrokerProcess(tmp_path, {"max.connections": "2"}) as b:
        a, c = RawClient(b.bootstrap), RawClient(b.bootstrap)
        assert _served(a) and _served(c)
        waiting = RawClient(b.bootstrap, timeout=1.0)
        from brokertools import encode_request

        waiting.send(encode_request(ApiVersionsRequest(version=0), 0))
        with pytest.raises(TimeoutError):
            waiting.receive()  # no slot: not served yet
        a.close()
        waiting.sock.settimeout(10)
        assert waiting.receive()  # served once a slot is free
        assert "max.connections=2 reached" in b.log
        waiting.close()
        c.close()


def test_idle_connections_are_closed(tmp_path):
    with BrokerProcess(tmp_path, {"connections.max.idle.ms": "400"}) as b, RawClient(b.bootstrap) as client:
        assert _served(client)
        start = time.monotonic()
        assert client.closed_by_peer(timeout=5)
        assert time.monotonic() - start >= 0.3
