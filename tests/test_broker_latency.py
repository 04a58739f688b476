"""The broker's event loop kept free for requests (issue 23's latency work): what must not stop it.

No timing assertion here (the machine is shared): each test checks the mechanism, e.g. that the heap is frozen
after startup, or that another client is answered while a slow topic creation is still running.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import struct
import sys
import threading
import weakref

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from brokertools import RawClient, encode_request
from kafkalog.broker import server as server_module
from kafkalog.broker.config import KafkaConfig
from kafkalog.broker.protocol import APIS
from kafkalog.broker.server import KafkaServer, settle_heap
from kafkalog.record import RecordBatchBuilder


def _config(tmp_path) -> KafkaConfig:
    return KafkaConfig.load(None, ["listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp_path / 'logs'}"])


class _Node:
    """An object that can be part of a reference cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other: _Node | None = None


def test_settle_heap_freezes_what_is_alive_and_still_collects_later_cycles():
    before = _Node()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a cycle made after the freeze: only the collector can free it
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
        # A later collection does not thaw the frozen objects (gc.unfreeze would bring the count to 0); the count
        # may still fall by the few frozen objects whose last reference went meanwhile (in a full test run, a
        # cache entry replaced by another thread): refcounting frees frozen objects too.
        assert gc.get_freeze_count() >= frozen * 0.9
        assert before.other is None
    finally:
        gc.unfreeze()


def test_serve_forever_settles_the_heap_once_started(tmp_path, monkeypatch):
    calls: list[bool] = []

    def settle() -> None:
        calls.append(server.socket_server is not None)  # after startup: the listeners are up
        # then stop, through serve_forever's own signal handler (installed before the loop runs this)
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(server_module, "settle_heap", settle)
    before = sys.getswitchinterval()
    server = KafkaServer(_config(tmp_path))
    try:
        asyncio.run(asyncio.wait_for(server.serve_forever(), 120))
        # and the loop takes the GIL back from a busy background thread within 0.5 ms, not CPython's 5 ms
        assert sys.getswitchinterval() == pytest.approx(server_module.SWITCH_INTERVAL_S)
        assert before > server_module.SWITCH_INTERVAL_S
    finally:
        sys.setswitchinterval(before)
    assert calls == [True]
    assert server.stopping


def _create_request(name: str) -> CreateTopicsRequest:
    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=3, replication_factor=1, assignments=[], configs=[]
    )
    return CreateTopicsRequest(topics=[topic], timeout_ms=30000, validate_only=False)


def _produce_request(topic: str) -> ProduceRequest:
    builder = RecordBatchBuilder()
    builder.append(b"k", b"answered while a topic is created")
    P = ProduceRequest.TopicProduceData
    data = [P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=builder.build())])]
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=data)


def _find_coordinator_request() -> FindCoordinatorRequest:
    return FindCoordinatorRequest(version=1, key="latency-group", key_type=0)


HELD_REQUESTS = {  # a request whose topic creation gets held: (request, version)
    "CreateTopics": (_create_request("slow"), 5),
    "FindCoordinator creating __consumer_offsets": (_find_coordinator_request(), 1),
}


@pytest.mark.parametrize("held", sorted(HELD_REQUESTS))
def test_other_clients_are_answered_while_a_topic_is_being_created(tmp_path, monkeypatch, held):
    """CreateTopics, and the first FindCoordinator (which creates __consumer_offsets), run their topic creation off
    the event loop: while it is held (a slow disk), another client's Metadata and Produce are answered; the held
    request then completes and is answered too."""
    request, version = HELD_REQUESTS[held]
    loop = asyncio.new_event_loop()
    server = KafkaServer(_config(tmp_path))
    loop.run_until_complete(server.startup())
    thread = threading.Thread(target=loop.run_forever, name="broker-loop", daemon=True)
    thread.start()
    entered, release = threading.Event(), threading.Event()
    create_topic = server.log_manager.create_topic

    def slow_create_topic(*args, **kwargs):
        entered.set()
        release.wait(60)
        return create_topic(*args, **kwargs)

    try:
        create_topic("existing", 1)
        monkeypatch.setattr(server.log_manager, "create_topic", slow_create_topic)
        host, port = server.bound_addresses[0]
        with RawClient(f"{host}:{port}", timeout=60) as creating, RawClient(f"{host}:{port}", timeout=60) as other:
            creating.send(encode_request(request, version, correlation_id=7))
            assert entered.wait(60), "the held request never reached the log manager"
            metadata = other.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="existing")]), 9)
            assert [(t.name, t.error_code) for t in metadata.topics] == [("existing", 0)]
            produced = other.call(_produce_request("existing"), 9, correlation_id=2)
            assert [(p.index, p.error_code, p.base_offset) for p in produced.responses[0].partition_responses] == [
                (0, 0, 0)
            ]
            assert not release.is_set() and thread.is_alive()  # both answered while the creation was still held
            release.set()
            body = creating.receive()
            assert struct.unpack_from(">i", body)[0] == 7
            spec = APIS[request.API_KEY]
            answer = spec.response[version].decode(body[5 if spec.flexible(version) else 4 :])
            if request.API_KEY == 19:
                assert [(t.name, t.error_code, t.num_partitions) for t in answer.topics] == [("slow", 0, 3)]
                assert server.log_manager.describe_topic("slow").topic_id
            else:
                assert (answer.error_code, answer.node_id, answer.port) == (0, 0, port)
                assert len(server.log_manager.describe_topic("__consumer_offsets").partitions) == 50
    finally:
        release.set()
        asyncio.run_coroutine_threadsafe(server.shutdown(), loop).result(120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        loop.close()
