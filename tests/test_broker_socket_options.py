"""Kafka's socket options: ``socket.send.buffer.bytes`` (SO_SNDBUF of each accepted socket),
``socket.receive.buffer.bytes`` (SO_RCVBUF of the listening sockets, which accepted ones inherit),
``socket.listen.backlog.size``, -1 meaning the OS default; TCP_NODELAY and SO_KEEPALIVE on every accepted
socket (SocketServer.scala's openServerSocket and configureAcceptedSocketChannel); and
``replica.socket.receive.buffer.bytes`` on a follower's fetch connection.

What the kernel reports is read back with getsockopt: Linux doubles the size set (bookkeeping overhead), so
there the answer is exactly twice the setting; elsewhere at least the setting.
"""

from __future__ import annotations

import asyncio
import re
import socket
import sys

import pytest
from click.testing import CliRunner

from brokertools import BrokerProcess, api_versions_ok, wait_until
from kafkalog.broker.cluster.fetcher import BrokerConnection
from kafkalog.broker.cluster.state import ClusterSettings
from kafkalog.broker.config import Endpoint, KafkaConfig
from kafkalog.broker.network import SocketServer
from kafkalog.cli import main
from kafkalog.errors import InvalidConfigurationError

LINUX = sys.platform.startswith("linux")


def kernel_size(sock, option: int) -> int:
    return sock.getsockopt(socket.SOL_SOCKET, option)


def is_set_to(actual: int, requested: int) -> bool:
    return actual == 2 * requested if LINUX else actual >= requested


def test_defaults() -> None:
    """Kafka's, except the socket server's buffer sizes: the OS's (-1), measured faster here (see KafkaConfig)."""
    config = KafkaConfig({})
    assert config.socket_send_buffer_bytes == -1
    assert config.socket_receive_buffer_bytes == -1
    assert config.socket_listen_backlog_size == 50
    assert config.replica_socket_receive_buffer_bytes == 65536
    settings = ClusterSettings.from_properties({"zookeeper.connect": "127.0.0.1:2181"})
    assert settings is not None and settings.replica_socket_receive_buffer_bytes == 65536


def test_settings_and_minus_one_for_the_os_default() -> None:
    props = {
        "socket.send.buffer.bytes": "-1",
        "socket.receive.buffer.bytes": "262144",
        "socket.listen.backlog.size": "1",
        "replica.socket.receive.buffer.bytes": "-1",
    }
    config = KafkaConfig(props)
    assert config.socket_send_buffer_bytes == -1
    assert config.socket_receive_buffer_bytes == 262144
    assert config.socket_listen_backlog_size == 1
    assert config.replica_socket_receive_buffer_bytes == -1
    settings = ClusterSettings.from_properties({"zookeeper.connect": "zk:2181", **props})
    assert settings is not None and settings.replica_socket_receive_buffer_bytes == -1


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("socket.send.buffer.bytes", "0", "Value must be -1 \\(the OS default\\) or a positive number of bytes"),
        ("socket.receive.buffer.bytes", "-2", "Value must be at least -1"),
        ("replica.socket.receive.buffer.bytes", "0", "Value must be -1"),
        ("socket.send.buffer.bytes", "big", "Not a number of type INT"),
        ("socket.listen.backlog.size", "0", "Value must be at least 1"),
    ],
)
def test_bad_values_are_refused_with_a_clear_error(key, value, message) -> None:
    with pytest.raises(InvalidConfigurationError, match=f"configuration {key}: {message}"):
        KafkaConfig({key: value})


def test_serve_refuses_a_bad_buffer_size(tmp_path) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--override", "socket.send.buffer.bytes=0", "--log-dirs", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "Invalid value 0 for configuration socket.send.buffer.bytes" in result.output


async def _accepted(send: int, receive: int) -> dict[str, int]:
    """Start a SocketServer with these sizes, connect once, and read the options of both its sockets."""

    async def handler(conn, frame):
        return None

    server = SocketServer(
        [Endpoint("PLAINTEXT", "127.0.0.1", 0)],
        handler,
        max_request_bytes=1024,
        send_buffer_bytes=send,
        receive_buffer_bytes=receive,
        listen_backlog=5,
    )
    await server.start()
    try:
        listening = server._servers[0].sockets[0]
        _reader, writer = await asyncio.open_connection(*server.bound[0])
        for _ in range(500):
            if server.connections():
                break
            await asyncio.sleep(0.01)
        sock = server.connections()[0].stream.get_extra_info("socket")
        found = {
            "listen_rcvbuf": kernel_size(listening, socket.SO_RCVBUF),
            "sndbuf": kernel_size(sock, socket.SO_SNDBUF),
            "rcvbuf": kernel_size(sock, socket.SO_RCVBUF),
            "nodelay": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
            "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
        }
        writer.close()
        return found
    finally:
        await server.stop(drain_timeout=1)


def test_accepted_sockets_get_the_send_buffer_and_inherit_the_listeners_receive_buffer() -> None:
    found = asyncio.run(_accepted(send=65536, receive=49152))
    assert is_set_to(found["listen_rcvbuf"], 49152)
    assert is_set_to(found["rcvbuf"], 49152), "inherited from the listening socket"
    assert is_set_to(found["sndbuf"], 65536)
    assert found["nodelay"] and found["keepalive"]


def test_minus_one_leaves_the_os_defaults() -> None:
    found = asyncio.run(_accepted(send=-1, receive=-1))
    with socket.socket() as fresh:
        assert found["listen_rcvbuf"] == kernel_size(fresh, socket.SO_RCVBUF)  # not set: a new socket's size
    assert found["sndbuf"] != 2 * 102400  # not Kafka's default either
    assert found["nodelay"] and found["keepalive"]


def test_kafkalog_serve_applies_them(tmp_path) -> None:
    """Through ``kafkalog serve``: the broker logs what the kernel answers, as Kafka's acceptor does at DEBUG."""
    broker = BrokerProcess(tmp_path, {"socket.send.buffer.bytes": "65536", "socket.receive.buffer.bytes": "49152"})
    broker.args += ["--log-level", "DEBUG"]
    with broker:
        assert api_versions_ok(broker.bootstrap)
        assert wait_until(lambda: "sendBufferSize [actual|requested]" in broker.log, 10)
        line = next(x for x in broker.log.splitlines() if "sendBufferSize [actual|requested]" in x)
        if LINUX:
            assert "sendBufferSize [actual|requested]: [131072|65536]" in line
            assert "recvBufferSize [actual|requested]: [98304|49152]" in line
        assert "Accepted connection from /127.0.0.1:" in line


def test_kafkalog_serve_leaves_buffer_sizes_to_the_os_by_default(tmp_path) -> None:
    """Through ``kafkalog serve`` with no socket settings: nothing is requested (-1), so Linux autotunes; a
    connection's send buffer is not Kafka's 102400 doubled."""
    broker = BrokerProcess(tmp_path, {})
    broker.args += ["--log-level", "DEBUG"]
    with broker:
        assert api_versions_ok(broker.bootstrap)
        assert wait_until(lambda: "sendBufferSize [actual|requested]" in broker.log, 10)
        line = next(x for x in broker.log.splitlines() if "sendBufferSize [actual|requested]" in x)
        sizes = re.findall(r"BufferSize \[actual\|requested\]: \[(\d+)\|(-?\d+)\]", line)
        assert [requested for _, requested in sizes] == ["-1", "-1"], line
        if LINUX:
            assert f"[{2 * 102400}|" not in line


async def _fetch_connection_rcvbuf(size: int) -> int:
    async def answer(reader, writer):
        await reader.read()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        conn = BrokerConnection("127.0.0.1", port, "broker-1-fetcher-0", receive_buffer_bytes=size)
        await conn.connect(10)
        assert conn._writer is not None
        found = kernel_size(conn._writer.get_extra_info("socket"), socket.SO_RCVBUF)
        conn.close()
        return found
    finally:
        server.close()
        await server.wait_closed()


def test_the_followers_fetch_connection_gets_replica_socket_receive_buffer_bytes() -> None:
    assert is_set_to(asyncio.run(_fetch_connection_rcvbuf(24576)), 24576)
    assert asyncio.run(_fetch_connection_rcvbuf(-1)) != 2 * 24576  # -1: left to the OS
