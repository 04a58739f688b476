"""The quick form of the scale benchmark (benchmarks/bench_scale.py, ``make bench``'s "scale" row): hundreds of
partitions and connections on one ``kafkalog serve``. Functional properties only, never a timing: Metadata of
every topic lists every partition led by the broker (one at a time and from many connections at once), every
connection keeps answering, confluent-kafka producers and consumers write and read one record in every partition
exactly once, the broker's open descriptors, memory maps and RSS stay under the bounds computed from the
configuration before the run, and a restart after SIGTERM and after SIGKILL loads every partition with every
acknowledged record.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace

import pytest

from benchmarks.bench_scale import QUICK, run_scale

PARAMS = replace(
    QUICK,
    topics=5,
    partitions_per_topic=40,
    topics_per_request=5,
    connections=250,
    metadata_storm=20,
    calibration_partitions=50,
    calibration_connections=50,
)


def test_hundreds_of_partitions_and_connections_within_bounds_across_restarts(tmp_path):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to read the broker's descriptors, maps and memory")
    result = run_scale(PARAMS, tmp_path)  # raises on a wrong answer, a lost record or a partition not loaded
    partitions = PARAMS.topics * PARAMS.partitions_per_topic
    bounds, peaks = result["bounds"], result["peaks"]
    assert result["failures"] == [], result["failures"]
    assert peaks["fds"] <= bounds["fds"] and peaks["maps"] <= bounds["maps"] and peaks["rss"] <= bounds["rss_bytes"]
    # the sampler saw the run: every partition's segment and every connection held a descriptor at the peak
    assert peaks["fds"] >= result["base"]["fds"] + partitions + PARAMS.connections
    assert result["connections"]["answering_after"] == PARAMS.connections
    assert result["metadata_storm"]["connections"] == PARAMS.metadata_storm
    for kind in ("clean", "unclean"):
        assert result["restart"][kind]["partitions_loaded"] == partitions


def test_a_fetch_answer_waiting_to_be_sent_holds_no_descriptor_per_partition(tmp_path):
    """A fetch of every partition of a 300-partition topic, answered to a client that does not read: the answer
    carries a region of each partition's segment; only the region being sent holds a descriptor of its own (a
    consumer of 10,000 partitions would otherwise hold 10,000 more than the segments' own)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to count the broker's descriptors")
    from confluent_kafka import Producer

    from benchmarks.bench_scale import create_topics, proc_figures
    from tests.brokertools import BrokerProcess, encode_request, fetch_request

    partitions = 300
    with BrokerProcess(tmp_path / "logs") as broker:
        create_topics(broker.bootstrap, ["wide"], partitions, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        for p in range(partitions):
            producer.produce("wide", b"x" * 20_000, partition=p)
        assert producer.flush(60) == 0
        pid = broker.proc.pid
        base = proc_figures(pid, maps=False)["fds"]
        fetch = fetch_request("wide", list(range(partitions)))
        greedy = socket.socket()
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greedy.connect((broker.host, broker.port))
        try:
            greedy.sendall(encode_request(fetch, 12))  # ~6 MB of answer, of which the client reads nothing
            time.sleep(2.0)
            held = proc_figures(pid, maps=False)["fds"] - base
            assert held <= 10, f"{held} descriptors held by one unsent fetch answer of {partitions} partitions"
        finally:
            greedy.close()


def test_metadata_by_topic_id_among_many_topics(tmp_path):
    """Metadata v12 naming topics by id (as KIP-848 consumers ask) finds the topic among many without sizing their
    logs, and answers UNKNOWN_TOPIC_ID for an id no topic has."""
    import uuid

    from kafka.protocol.metadata import MetadataRequest

    from benchmarks.bench_scale import create_topics
    from tests.brokertools import BrokerProcess, RawClient

    names = [f"by-id-{i}" for i in range(20)]
    with BrokerProcess(tmp_path / "logs") as broker:
        create_topics(broker.bootstrap, names, 5, 10)
        with RawClient(broker.bootstrap) as client:
            every = client.call(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
            ids = {t.name: t.topic_id for t in every.topics}
            wanted = ids["by-id-13"]
            unknown = uuid.uuid4()
            T = MetadataRequest.MetadataRequestTopic
            answer = client.call(
                MetadataRequest(
                    topics=[T(topic_id=wanted, name=None), T(topic_id=unknown, name=None)],
                    allow_auto_topic_creation=False,
                ),
                12,
            )
    found, missing = answer.topics
    assert (found.error_code, found.name, found.topic_id) == (0, "by-id-13", wanted)
    assert sorted(p.partition_index for p in found.partitions) == [0, 1, 2, 3, 4]
    assert (missing.error_code, missing.name) == (100, None)  # UNKNOWN_TOPIC_ID
