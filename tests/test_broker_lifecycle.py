"""``kafkalog serve`` as a process: configuration, restarts, clean shutdown on SIGTERM, many and slow clients."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from brokertools import BrokerProcess, RawClient, api_versions_ok, encode_request, fetch_request
from kafkalog.broker.config import KafkaConfig
from kafkalog.cli import main
from kafkalog.errors import InvalidConfigurationError
from kafkalog.record import RecordBatchBuilder, iter_batches


def _batch(value: bytes) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(None, value)
    return builder.build()


def _produce(client, topic, value):
    P = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=_batch(value))])],
    )
    return client.call(request, 9).responses[0].partition_responses[0]


def _fetch_request(topic, offset, max_wait=0, min_bytes=0, partition_max=1 << 20):
    return fetch_request(
        topic, [0], fetch_offset=offset, partition_max_bytes=partition_max, max_wait_ms=max_wait, min_bytes=min_bytes
    )


def _metadata(client, topic):
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True)
    return client.call(request, 9)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # A thousand connects in a burst outrun Kafka's default accept queue of 50 (socket.listen.backlog.size) on a
    # loop that also serves requests: the kernel drops the excess SYNs and clients retry after 1 s, 3 s, ...
    with BrokerProcess(tmp_path_factory.mktemp("broker-lifecycle"), {"socket.listen.backlog.size": "1024"}) as server:
        yield server


# ----- configuration ---------------------------------------------------------------------------------------
def test_config_reads_properties_then_overrides(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("broker.id=3\nlisteners=PLAINTEXT://0.0.0.0:9093\nnum.partitions=4\nlog.dirs=/data/a\n")
    config = KafkaConfig.load(props, ["num.partitions=6", "advertised.listeners=PLAINTEXT://kafka.example:19093"])
    assert config.node_id == 3 and config.num_partitions == 6
    assert [(e.host, e.port) for e in config.listeners] == [("0.0.0.0", 9093)]
    assert [(e.host, e.port) for e in config.advertised] == [("kafka.example", 19093)]
    assert [str(d) for d in config.log_dirs] == ["/data/a"]
    defaults = KafkaConfig({})
    assert [(e.name, e.host, e.port) for e in defaults.listeners] == [("PLAINTEXT", "127.0.0.1", 9092)]
    assert defaults.socket_request_max_bytes == 104857600 and defaults.queued_max_requests == 500
    assert defaults.auto_create_topics_enable is True


@pytest.mark.parametrize(
    "props, message",
    [
        ({"listeners": "CLIENT://:9093"}, "No security protocol defined for listener CLIENT"),
        ({"listener.security.protocol.map": "CLIENT:TLS", "listeners": "CLIENT://:9093"}, "NAME:PROTOCOL"),
        ({"listeners": "PLAINTEXT://:9093,SSL://:9093"}, "port 9093 more than once"),
        ({"listeners": "PLAINTEXT://host:port"}, "Invalid port"),
        ({"node.id": "1", "broker.id": "2"}, "must be equal"),
        ({"default.replication.factor": "3"}, "single node"),
        ({"socket.request.max.bytes": "0"}, "at least 1"),
        ({"auto.create.topics.enable": "maybe"}, "boolean"),
    ],
)
def test_bad_config_is_refused_with_a_clear_error(props, message):
    with pytest.raises(InvalidConfigurationError, match=message):
        KafkaConfig(props)


def test_serve_refuses_a_bad_override_on_the_command_line(tmp_path):
    result = CliRunner().invoke(main, ["serve", "--override", "listeners=TLS://:1", "--log-dirs", str(tmp_path)])
    assert result.exit_code == 1 and "No security protocol defined for listener TLS" in result.output


def test_serve_refuses_an_ssl_listener_without_a_usable_keystore(tmp_path):
    result = CliRunner().invoke(
        main, ["serve", "--override", "listeners=SSL://127.0.0.1:0", "--log-dirs", str(tmp_path)]
    )
    assert result.exit_code == 1 and "ssl.keystore.type JKS" in result.output
    assert not list(tmp_path.iterdir()), "nothing is written to the log dir when the listeners are unusable"


def test_serve_refuses_log_dirs_of_another_node(tmp_path):
    with BrokerProcess(tmp_path):
        pass
    other = BrokerProcess(tmp_path, {"node.id": "5"})
    with pytest.raises(RuntimeError, match=r"doesn't match the configured node\.id 5"):
        other.start(timeout=60)


# ----- lifecycle ---------------------------------------------------------------------------------------------
def test_restart_keeps_data_and_cluster_id(tmp_path):
    with BrokerProcess(tmp_path) as first, RawClient(first.bootstrap) as c:
        cluster = _metadata(c, "kept").cluster_id
        assert _produce(c, "kept", b"persisted").error_code == 0
    with BrokerProcess(tmp_path) as second, RawClient(second.bootstrap) as c:
        assert _metadata(c, "kept").cluster_id == cluster
        part = c.call(_fetch_request("kept", 0), 12).responses[0].partitions[0]
        assert [r.value for b in iter_batches(bytes(part.records)) for r in b] == [b"persisted"]


def test_sigterm_answers_the_waiting_fetch_and_shuts_down_cleanly(tmp_path):
    server = BrokerProcess(tmp_path).start()
    with RawClient(server.bootstrap, timeout=30) as c:
        _metadata(c, "waiting")
        c.send(encode_request(_fetch_request("waiting", 0, max_wait=30000, min_bytes=1), 12, correlation_id=5))
        time.sleep(0.3)
        start = time.monotonic()
        server.proc.send_signal(15)
        body = c.receive()  # the long poll is answered at shutdown, not after its 30 s
        assert body[:4] == (5).to_bytes(4, "big")
        assert time.monotonic() - start < 10
    assert server.proc.wait(30) == 0
    assert "shut down completed" in server.log
    assert (tmp_path / ".kafka_cleanshutdown").exists()


def test_a_second_signal_during_shutdown_does_not_cut_it_short(tmp_path):
    """The first SIGTERM starts the shutdown (the waiting fetch is answered from inside it); a second SIGTERM and a
    SIGINT sent then are ignored: the logs are closed and the clean-shutdown marker is written, exit code 0.
    300 partitions make the closing of the logs last long enough for the second signal to arrive during it."""
    server = BrokerProcess(tmp_path, {"num.partitions": "300"}).start()
    with RawClient(server.bootstrap, timeout=30) as c:
        _metadata(c, "waiting")
        c.send(encode_request(_fetch_request("waiting", 0, max_wait=30000, min_bytes=1), 12, correlation_id=5))
        time.sleep(0.3)
        server.proc.send_signal(15)
        assert c.receive()[:4] == (5).to_bytes(4, "big")  # answered by the shutdown, which is under way
        server.proc.send_signal(15)
        server.proc.send_signal(2)
    assert server.proc.wait(30) == 0
    assert "shut down completed" in server.log
    assert (tmp_path / ".kafka_cleanshutdown").exists()


# ----- concurrency -----------------------------------------------------------------------------------------
def test_a_thousand_connections_at_once(broker):
    host, port = broker.host, broker.port
    request = encode_request(ApiVersionsRequest(), 0, correlation_id=11)
    socks = []
    try:
        for _ in range(1000):
            s = socket.create_connection((host, port), timeout=30)
            socks.append(s)
        for s in socks:
            s.sendall(request)
        answered = 0
        for s in socks:
            head = s.recv(8, socket.MSG_WAITALL)
            answered += head[4:8] == (11).to_bytes(4, "big")
        assert answered == 1000
    finally:
        for s in socks:
            s.close()
    assert api_versions_ok(broker.bootstrap)


def test_a_slow_reader_does_not_block_other_clients(broker):
    with RawClient(broker.bootstrap) as c:
        _metadata(c, "big")
        for _ in range(8):
            assert _produce(c, "big", b"x" * 900_000).error_code == 0
    slow = socket.create_connection((broker.host, broker.port))
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        # Many large fetches pipelined and never read: the broker's sends to this client stall.
        slow.sendall(encode_request(_fetch_request("big", 0, partition_max=8 << 20), 12) * 20)
        time.sleep(0.5)
        start = time.monotonic()
        for _ in range(20):
            assert api_versions_ok(broker.bootstrap)
        assert time.monotonic() - start < 10
    finally:
        slow.close()


def test_clients_in_parallel_processes(broker):
    """Several producer processes at once (kafka-python), every record acknowledged once, in order per process."""
    script = (
        "import sys\n"
        "from kafka import KafkaProducer\n"
        "p = KafkaProducer(bootstrap_servers=sys.argv[1], acks='all', linger_ms=2)\n"
        "fs = [p.send('parallel', key=sys.argv[2].encode(), value=b'%d' % i, partition=0) for i in range(200)]\n"
        "print(','.join(str(f.get(timeout=30).offset) for f in fs))\n"
        "p.close()\n"
    )
    with RawClient(broker.bootstrap) as c:
        _metadata(c, "parallel")
    procs = [
        subprocess.Popen([sys.executable, "-c", script, broker.bootstrap, f"p{i}"], stdout=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    offsets = [list(map(int, out.strip().split(","))) for out in outputs]
    assert all(o == sorted(o) for o in offsets)
    assert sorted(x for o in offsets for x in o) == list(range(800))


def test_threads_pipelining_on_one_broker(broker):
    errors = []

    def worker(n):
        try:
            with RawClient(broker.bootstrap) as c:
                for i in range(30):
                    assert _produce(c, f"threads-{n % 3}", b"%d-%d" % (n, i)).error_code == 0
        except Exception as e:  # collected: an assertion in a thread would be lost
            errors.append(e)

    with RawClient(broker.bootstrap) as c:
        for t in range(3):
            _metadata(c, f"threads-{t}")
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


def test_a_node_id_other_than_zero_leads_and_is_the_isr(tmp_path):
    with BrokerProcess(tmp_path, {"node.id": "3"}) as server, RawClient(server.bootstrap) as c:
        topic = _metadata(c, "node-three").topics[0]
        assert [(p.leader_id, p.replica_nodes, p.isr_nodes) for p in topic.partitions] == [(3, [3], [3])]
        assert _produce(c, "node-three", b"acks all").error_code == 0  # an ISR of one meets min.insync.replicas=1
    assert "node.id=3" in (tmp_path / "meta.properties").read_text()


def test_partitions_added_to_a_topic_survive_a_restart(tmp_path):
    from kafka.protocol.admin import CreatePartitionsRequest

    T = CreatePartitionsRequest.CreatePartitionsTopic
    with BrokerProcess(tmp_path) as server, RawClient(server.bootstrap) as c:
        _metadata(c, "grown")  # auto-created with num.partitions=1
        request = CreatePartitionsRequest(
            topics=[T(name="grown", count=3, assignments=None)], timeout_ms=1000, validate_only=False
        )
        assert c.call(request, 3).results[0].error_code == 0
        again = c.call(request, 3).results[0]
        assert (again.error_code, again.error_message) == (37, "Topic already has 3 partitions.")
    with BrokerProcess(tmp_path) as server, RawClient(server.bootstrap) as c:
        assert [p.partition_index for p in _metadata(c, "grown").topics[0].partitions] == [0, 1, 2]
