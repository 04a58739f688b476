"""The Prometheus endpoint of ``kafkalog serve`` (metrics.port): scraped over plain HTTP while librdkafka
(confluent-kafka) produces and a consumer group drains, its counters must agree with what the clients did and
with the files on disk -- records in, bytes in (the batches' bytes: the record values plus the v2 format's
overhead), log end offsets, request counts and total-time quantiles, and consumer-group lag before and after a
commit."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from brokertools import BrokerProcess, wait_until
from kafkalog.broker.metrics import quantile

TOPIC = "metered"
PARTITIONS = 3
N = 600
VALUE = 200
BATCH_HEADER = 61  # a v2 record batch's header
RECORD_OVERHEAD_MAX = 12  # a v2 record's own fields for a 200-byte value, a 5-byte key, no headers (varints)
_ENDPOINT = re.compile(r"Prometheus metrics endpoint on http://[^:]+:(\d+)/metrics")


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, keyed by (sample name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def by_label(samples, name: str, label: str, **fixed: str) -> dict[str, float]:
    """``label``'s value -> sample value, over the samples of ``name`` that carry ``fixed``."""
    out = {}
    for (sample_name, labels), v in samples.items():
        d = dict(labels)
        if sample_name == name and label in d and all(d.get(k) == x for k, x in fixed.items()):
            out[d[label]] = v
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = BrokerProcess(
        tmp_path_factory.mktemp("metrics"),
        {"metrics.port": "0", "metrics.host": "127.0.0.1"},
    ).start()
    try:
        assert wait_until(lambda: _ENDPOINT.search(server.log) is not None, 30), server.log
        server.metrics_port = int(_ENDPOINT.search(server.log).group(1))
        yield server
    finally:
        assert server.stop() == 0, server.log


def _produce(bootstrap: str) -> dict[int, int]:
    """N records of VALUE bytes, acks=all and idempotent; returns the next offset of each partition, as the
    delivery reports told it."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its answer is in
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    ends = dict.fromkeys(range(PARTITIONS), 0)
    errors = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            ends[msg.partition()] = max(ends[msg.partition()], msg.offset() + 1)

    for i in range(N):
        producer.produce(TOPIC, bytes([i % 251]) * VALUE, key=f"k{i:04d}".encode(), on_delivery=delivered)
        if i % 100 == 99:
            producer.flush(30)
    assert producer.flush(30) == 0
    assert not errors, errors
    assert sum(ends.values()) == N
    return ends


def _segment_bytes(log_dir: Path) -> int:
    return sum(f.stat().st_size for f in log_dir.glob(f"{TOPIC}-*/*.log"))


def test_counters_match_what_the_clients_did(broker):
    from confluent_kafka import Consumer, TopicPartition

    before = scrape(broker.metrics_port)
    assert value(before, "kafka_server_brokertopicmetrics_messagesin_total") == 0
    ends = _produce(broker.bootstrap)
    samples = scrape(broker.metrics_port)

    # records and bytes in, per topic and for all topics
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == N
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total") == N
    bytes_in = value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC)
    requests = sum(
        by_label(samples, "kafka_network_requestmetrics_requests_total", "version", request="Produce").values()
    )
    assert requests > 0
    assert (
        N * VALUE + BATCH_HEADER <= bytes_in <= N * (VALUE + RECORD_OVERHEAD_MAX) + BATCH_HEADER * requests * PARTITIONS
    )
    assert bytes_in == _segment_bytes(broker.log_dir), "every byte in was appended as sent (no conversion)"

    # the log gauges against the delivery reports and the files
    end_offsets = by_label(samples, "kafka_log_log_logendoffset", "partition", topic=TOPIC)
    assert end_offsets == {str(p): float(e) for p, e in ends.items()}
    assert by_label(samples, "kafka_log_log_logstartoffset", "partition", topic=TOPIC) == dict.fromkeys(
        map(str, range(PARTITIONS)), 0.0
    )
    assert set(by_label(samples, "kafka_log_log_numlogsegments", "partition", topic=TOPIC).values()) == {1.0}
    assert sum(by_label(samples, "kafka_log_log_size", "partition", topic=TOPIC).values()) == bytes_in
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_network_requestchannel_requestqueuesize") >= 0
    assert value(samples, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    assert value(samples, "kafka_log_logcleaner_deadthreadcount") == 0
    assert value(samples, "kafka_log_logcleanermanager_time_since_last_run_ms") >= 0

    # request total time: every Yammer percentile, a count at least the request count
    quantiles = by_label(samples, "kafka_network_requestmetrics_totaltimems", "quantile", request="Produce")
    assert set(quantiles) == {"0.50", "0.75", "0.95", "0.98", "0.99", "0.999"}
    assert 0 < quantiles["0.50"] <= quantiles["0.99"] <= quantiles["0.999"]
    assert value(samples, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == requests

    # the group commits offset 0 without consuming: its lag is every record
    group = "metrics-readers"
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)], asynchronous=False)
    committer.close()
    samples = scrape(broker.metrics_port)
    lags = by_label(samples, "kafka_consumergroup_lag", "partition", consumergroup=group, topic=TOPIC)
    assert lags == {str(p): float(e) for p, e in ends.items()}
    assert value(samples, "kafka_consumergroup_lag_sum", consumergroup=group, topic=TOPIC) == N

    # a member drains the topic and commits: lag 0, committed offsets at the log ends, bytes out >= bytes in
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([TOPIC])
    seen = 0
    try:
        deadline = time.monotonic() + 60
        while seen < N and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen += 1
        assert seen == N
        consumer.commit(asynchronous=False)
        samples = scrape(broker.metrics_port)
        assert value(samples, "kafka_consumergroup_members", consumergroup=group) == 1
    finally:
        consumer.close()
    samples = scrape(broker.metrics_port)
    assert by_label(samples, "kafka_consumergroup_lag", "partition", consumergroup=group, topic=TOPIC) == dict.fromkeys(
        map(str, range(PARTITIONS)), 0.0
    )
    assert by_label(samples, "kafka_consumergroup_current_offset", "partition", consumergroup=group, topic=TOPIC) == {
        str(p): float(e) for p, e in ends.items()
    }
    assert value(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) >= bytes_in
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == N, "reads add nothing"
    fetches = by_label(samples, "kafka_network_requestmetrics_requests_total", "version", request="FetchConsumer")
    assert sum(fetches.values()) > 0
    assert set(by_label(samples, "kafka_network_requestmetrics_totaltimems", "quantile", request="Fetch")) == {
        "0.50",
        "0.75",
        "0.95",
        "0.98",
        "0.99",
        "0.999",
    }
    assert value(samples, "kafka_server_brokertopicmetrics_failedproducerequests_total") == 0
    assert value(samples, "process_resident_memory_bytes") > 0


def test_metrics_are_off_unless_metrics_port_is_set(tmp_path):
    with BrokerProcess(tmp_path) as b:
        assert "Prometheus metrics endpoint" not in b.log


def test_serve_metrics_port_option(tmp_path):
    broker = BrokerProcess(tmp_path, {"metrics.host": "127.0.0.1"})
    broker.args += ["--metrics-port", "0"]
    with broker:
        assert wait_until(lambda: _ENDPOINT.search(broker.log) is not None, 30), broker.log
        samples = scrape(int(_ENDPOINT.search(broker.log).group(1)))
        assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1


def test_metrics_port_is_validated(tmp_path):
    from click.testing import CliRunner

    from kafkalog.cli import main

    result = CliRunner().invoke(main, ["serve", "--log-dirs", str(tmp_path), "--override", "metrics.port=70000"])
    assert result.exit_code != 0
    assert "metrics.port" in (result.output + str(result.exception))


def test_quantiles_follow_yammer_snapshots():
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.5) == pytest.approx(50.5)  # rank 0.5 * 101 = 50.5: between the 50th and 51st
    assert quantile(values, 0.999) == 100.0  # past the last rank: the largest
    assert quantile([7.0], 0.99) == 7.0
    assert quantile([], 0.5) == 0.0
