"""Metadata answers while a topic is being created, step by step: never a topic with no partitions and no error,
never stale once the creation is done.

Single node: the handler is asked before and after every change a creation makes (each noted by
storage/metadata_changes.note_change, so each step is a point where a cached entry could be left behind), with
a real LogManager. ZooKeeper mode: the handler is asked over the views a broker can read while the controller
writes a new topic's partition states one by one (brokers/cluster/state.ClusterView); Kafka's answers for them are
those of its metadata cache (ZkMetadataCache.getPartitionMetadata): a partition is known once its state is, a
topic once one of its partitions is, and a partition whose leader is not alive is LEADER_NOT_AVAILABLE with no
leader (-1).
"""

from __future__ import annotations

import asyncio
import types

import pytest

from kafkalog.broker.handlers import metadata as handler
from kafkalog.broker.protocol import MetadataResponse
from kafkalog.storage import metadata_changes
from kafkalog.testing import MockTime
from tests.metadatatools import local_broker

NONE, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE = 0, 3, 5
# a single node's partition as answered (after its index): led at epoch 0; being added or deleted (no leader)
LED = (NONE, 0, 0, [0], [0], [])
NO_LEADER = (LEADER_NOT_AVAILABLE, -1, -1, [0], [], [])


def _request(names: list[str] | None, auto_create: bool = False):
    from kafka.protocol.metadata import MetadataRequest

    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    return MetadataRequest(topics=topics, allow_auto_topic_creation=auto_create)


def _ask(broker, names: list[str] | None, version: int = 12, auto_create: bool = False) -> MetadataResponse:
    response = asyncio.run(
        handler.handle(broker, types.SimpleNamespace(api_version=version), _request(names, auto_create))
    )
    return MetadataResponse.decode(bytes(response.parts[0]), version=version)


def _topics(answer: MetadataResponse) -> dict[str, tuple[int, list[tuple]]]:
    """name -> (error, [(partition, error, leader, epoch, replicas, isr, offline)])."""
    return {
        t.name: (
            t.error_code,
            [
                (
                    p.partition_index,
                    p.error_code,
                    p.leader_id,
                    p.leader_epoch,
                    list(p.replica_nodes),
                    list(p.isr_nodes),
                    list(p.offline_replicas),
                )
                for p in t.partitions
            ],
        )
        for t in answer.topics
    }


def _check_no_empty_topic(answer: MetadataResponse) -> None:
    for t in answer.topics:
        assert t.error_code != NONE or t.partitions, f"{t.name}: no error and no partition"
        assert t.error_code == NONE or not t.partitions, f"{t.name}: an error with partitions"


# ----- single node ---------------------------------------------------------------------------------------------


def _asking_at_every_change(monkeypatch, broker, name: str) -> list[tuple[dict, dict]]:
    """Make every noted change ask the handler (for ``name`` and for every topic) just before the note and just
    after it; the answers are collected in the returned list as they come."""
    seen: list[tuple[dict, dict]] = []
    original = metadata_changes.note_change

    def ask() -> None:
        named, every = _ask(broker, [name]), _ask(broker, None)
        _check_no_empty_topic(named)
        _check_no_empty_topic(every)
        seen.append((_topics(named), _topics(every)))

    def note_change() -> None:
        ask()  # the change is made, not yet noted: an entry cached now is under the old stamp
        original()
        ask()

    monkeypatch.setattr(metadata_changes, "note_change", note_change)
    return seen


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_topic_being_created_is_unknown_until_every_partition_is_led(tmp_path, monkeypatch, partitions):
    from kafkalog.manager import LogManager

    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        broker = local_broker(manager)
        manager.create_topic("other", 2)
        before = _topics(_ask(broker, None))
        seen = _asking_at_every_change(monkeypatch, broker, "t")
        manager.create_topic("t", partitions)
        monkeypatch.undo()
        assert len(seen) >= 2 * partitions  # every partition's registration (and leadership) was a step
        complete = [(p, NONE, 0, 0, [0], [0], []) for p in range(partitions)]
        for named, every in seen:
            # at each step: unknown (and not listed), or complete: every partition led at epoch 0
            assert named["t"] in ((UNKNOWN_TOPIC_OR_PARTITION, []), (NONE, complete))
            assert every.get("t", (NONE, complete)) == (NONE, complete)
            assert every["other"] == before["other"]
        assert seen[-1][0]["t"] == (NONE, complete)
        # and after: the entries cached along the way are not what is answered
        assert _topics(_ask(broker, ["t"]))["t"] == (NONE, complete)
        assert _topics(_ask(broker, None)) == {**before, "t": (NONE, complete)}
        for version in (0, 1, 5, 9, 12):
            answer = _ask(broker, None, version)
            assert {t.name: len(t.partitions) for t in answer.topics} == {"other": 2, "t": partitions}


def test_partitions_being_added_show_up_whole_and_the_answer_is_not_stale_after(tmp_path, monkeypatch):
    from kafkalog.manager import LogManager

    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        broker = local_broker(manager)
        manager.create_topic("t", 2)
        _ask(broker, None)  # entries cached
        seen = _asking_at_every_change(monkeypatch, broker, "t")
        manager.create_partitions("t", 5)
        monkeypatch.undo()
        for named, every in seen:
            error, parts = named["t"]
            assert error == NONE and every["t"] == named["t"]
            # the partitions registered so far: the old ones led, a new one either led at epoch 0 or, while its
            # replica is being made leader, answered with no leader (never the topic as unknown)
            assert [p[0] for p in parts] == list(range(len(parts))) and 2 <= len(parts) <= 5
            assert all(p[1:] == LED for p in parts[:2])
            assert all(p[1:] in (LED, NO_LEADER) for p in parts)
        assert {p[1] for _, every in seen for p in every["t"][1]} == {NONE, LEADER_NOT_AVAILABLE}  # both were seen
        final = [(p, NONE, 0, 0, [0], [0], []) for p in range(5)]
        assert seen[-1][0]["t"] == (NONE, final)
        assert _topics(_ask(broker, ["t"]))["t"] == (NONE, final)
        assert _topics(_ask(broker, None))["t"] == (NONE, final)


def test_a_topic_being_deleted_is_answered_whole_or_unknown(tmp_path, monkeypatch):
    from kafkalog.manager import LogManager

    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        broker = local_broker(manager)
        manager.create_topic("t", 3)
        manager.create_topic("other", 1)
        _ask(broker, None)
        seen = _asking_at_every_change(monkeypatch, broker, "t")
        manager.delete_topic("t")
        monkeypatch.undo()
        for named, every in seen:
            error, parts = named["t"]
            if error == UNKNOWN_TOPIC_OR_PARTITION:
                assert "t" not in every
                continue
            assert error == NONE and every["t"] == named["t"] and parts
            assert all(p[1:] in (LED, NO_LEADER) for p in parts)
        assert seen[-1][0]["t"] == (UNKNOWN_TOPIC_OR_PARTITION, [])
        assert set(_topics(_ask(broker, None))) == {"other"}


def test_auto_creation_by_metadata_answers_the_whole_topic(tmp_path):
    from kafkalog.manager import LogManager

    with LogManager(tmp_path / "logs", clock=MockTime()) as manager:
        broker = local_broker(manager)
        broker.config = types.SimpleNamespace(auto_create_topics_enable=True, num_partitions=3)
        broker.auto_create_topic = lambda name: manager.create_topic(name, 3)
        assert _topics(_ask(broker, ["auto"]))["auto"] == (UNKNOWN_TOPIC_OR_PARTITION, [])  # not allowed: unknown
        answer = _topics(_ask(broker, ["auto"], auto_create=True))
        assert answer["auto"] == (NONE, [(p, NONE, 0, 0, [0], [0], []) for p in range(3)])
        assert _topics(_ask(broker, None)) == answer


# ----- ZooKeeper mode ------------------------------------------------------------------------------------------
class _Cluster:
    """What the handler reads of a cluster broker's ZooKeeper node: ``view`` (set by the test, stamped as the
    node stamps its views) and auto-creation, which finds a topic whose assignment is in the view existing, else
    records it in ``created``."""

    def __init__(self) -> None:
        from kafkalog.broker.cluster.state import ClusterView

        self.view = ClusterView()
        self.created: list[str] = []
        self.settings = types.SimpleNamespace(default_replication_factor=3)

    @property
    def view(self):
        return self._view

    @view.setter
    def view(self, view) -> None:
        from kafkalog.broker.cluster.state import stamped

        self._view = stamped(view, getattr(self, "_view", None))

    async def wait_ready(self) -> None:
        return None

    async def create_topic(self, name, partitions, replication, config, validate_only) -> None:
        from kafkalog.errors import TopicExistsError

        if name in self.view.topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        self.created.append(name)


def _cluster_broker():
    return types.SimpleNamespace(
        cluster=_Cluster(),
        node_id=1,
        cluster_id="cid",
        config=types.SimpleNamespace(auto_create_topics_enable=True, num_partitions=3),
        advertised_endpoint=lambda: ("localhost", 9092),
    )


_TOPIC_IDS: dict[str, str] = {}


def _view(brokers: list[int], topics: dict[str, dict[int, list[int]]], states: dict[tuple[str, int], tuple]):
    """A ClusterView of live ``brokers``, ``topics`` (name -> partition -> replicas) and partition ``states``
    ((topic, partition) -> (leader, epoch, isr))."""
    from kafkalog.broker.cluster import zkdata as zk
    from kafkalog.broker.cluster.state import ClusterView
    from kafkalog.logdir import new_uuid
    from kafkalog.manager import TopicPartition

    view = ClusterView()
    view.brokers = {b: zk.BrokerInfo(b, "localhost", 9000 + b) for b in brokers}
    view.topics = {
        name: zk.TopicAssignment(parts, _TOPIC_IDS.setdefault(name, new_uuid())) for name, parts in topics.items()
    }
    view.states = {
        TopicPartition(t, p): zk.LeaderAndIsr(leader, epoch, isr, 1) for (t, p), (leader, epoch, isr) in states.items()
    }
    view.controller_id = 1
    return view


def test_cluster_topic_is_unknown_until_its_partitions_have_states_and_shows_only_those():
    """The views a broker reads while the controller creates a 3-partition topic (replicas [1, 2, 3]) and writes
    each partition's state in turn."""
    replicas = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    broker = _cluster_broker()
    cluster = broker.cluster
    cluster.view = _view([1, 2, 3], {"old": {0: [1]}}, {("old", 0): (1, 0, [1])})
    old = (NONE, [(0, NONE, 1, 0, [1], [1], [])])

    # asked before it exists: auto-created (LEADER_NOT_AVAILABLE, as Kafka's answer for a topic it creates)
    assert _topics(_ask(broker, ["t"], auto_create=True))["t"] == (LEADER_NOT_AVAILABLE, [])
    assert cluster.created == ["t"]
    # its assignment written, no partition state yet: unknown, not a topic with no partitions or no leaders
    cluster.view = _view([1, 2, 3], {"old": {0: [1]}, "t": replicas}, {("old", 0): (1, 0, [1])})
    assert _topics(_ask(broker, ["t"]))["t"] == (UNKNOWN_TOPIC_OR_PARTITION, [])
    assert _topics(_ask(broker, ["t"], auto_create=True))["t"] == (LEADER_NOT_AVAILABLE, [])  # exists: not again
    assert cluster.created == ["t"]
    assert _topics(_ask(broker, None)) == {"old": old}
    # the states written one by one: the partitions with a state, each with its leader
    states = {("old", 0): (1, 0, [1])}
    for p in range(3):
        states[("t", p)] = (replicas[p][0], 0, replicas[p])
        cluster.view = _view([1, 2, 3], {"old": {0: [1]}, "t": replicas}, states)
        expected = (NONE, [(q, NONE, replicas[q][0], 0, replicas[q], replicas[q], []) for q in range(p + 1)])
        for answer in (_ask(broker, ["t"]), _ask(broker, ["t"], auto_create=True), _ask(broker, None)):
            _check_no_empty_topic(answer)
            assert _topics(answer)["t"] == expected
    assert cluster.created == ["t"]
    for version in (0, 1, 5, 9, 12):
        assert [len(t.partitions) for t in _ask(broker, ["t"], version).topics] == [3]


def test_cluster_partition_led_by_a_dead_broker_has_no_leader():
    """Broker 2 gone, the controller not yet past it: its partition's state still names it leader. Kafka's
    answer: LEADER_NOT_AVAILABLE, leader -1, the epoch/replicas/ISR of the state, broker 2 offline."""
    replicas = {0: [1, 2], 1: [2, 1]}
    states = {("t", 0): (1, 4, [1, 2]), ("t", 1): (2, 7, [2, 1])}
    broker = _cluster_broker()
    broker.cluster.view = _view([1, 2], {"t": replicas}, states)
    assert _topics(_ask(broker, ["t"]))["t"] == (
        NONE,
        [(0, NONE, 1, 4, [1, 2], [1, 2], []), (1, NONE, 2, 7, [2, 1], [2, 1], [])],
    )
    broker.cluster.view = _view([1], {"t": replicas}, states)
    assert _topics(_ask(broker, None))["t"] == (
        NONE,
        [(0, NONE, 1, 4, [1, 2], [1, 2], [2]), (1, LEADER_NOT_AVAILABLE, -1, 7, [2, 1], [2, 1], [2])],
    )
    # the controller's next states: 1 leads both at new epochs, 2 out of the ISRs
    broker.cluster.view = _view([1], {"t": replicas}, {("t", 0): (1, 5, [1]), ("t", 1): (1, 8, [1])})
    assert _topics(_ask(broker, None))["t"] == (
        NONE,
        [(0, NONE, 1, 5, [1, 2], [1], [2]), (1, NONE, 1, 8, [2, 1], [1], [2])],
    )
    # offline (no eligible replica): leader -1 in the state itself
    broker.cluster.view = _view([1], {"t": replicas}, {("t", 0): (-1, 6, [1]), ("t", 1): (1, 8, [1])})
    assert _topics(_ask(broker, ["t"]))["t"][1][0] == (0, LEADER_NOT_AVAILABLE, -1, 6, [1, 2], [1], [2])
