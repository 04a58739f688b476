"""ZooKeeper mode: a cluster view's stamp (broker/cluster/state.stamped) changes exactly when what Metadata answers
show of it changes, and the handler's cached entries keyed by it answer, byte for byte, what the generic encoder
writes for the view as it is, while walking no partition of a view re-read unchanged."""

from __future__ import annotations

import asyncio
import dataclasses
import types

import pytest

from kafkalog.broker.cluster import zkdata as zk
from kafkalog.broker.cluster.state import ClusterView, StampedViewHolder, stamped
from kafkalog.broker.handlers import metadata as handler
from kafkalog.broker.protocol import APIS, MetadataResponse
from kafkalog.logdir import new_uuid
from kafkalog.manager import TopicPartition
from tests.metadatatools import by_id

VERSIONS = list(range(APIS[3].min_version, APIS[3].max_version + 1))
IDS = {name: new_uuid() for name in ("a", "b", "c", "d")}
CLUSTER_STATE = handler._cluster_state  # (the tests count the handler's calls of it)


def _view(
    brokers: dict[int, int],
    topics: dict[str, dict[int, list[int]]],
    states: dict[tuple[str, int], tuple[int, int, list[int]]],
    ids: dict[str, str] | None = None,
    controller: int = 1,
) -> ClusterView:
    """A view read afresh: live ``brokers`` (id -> port), ``topics`` (name -> partition -> replicas), partition
    ``states`` ((topic, partition) -> (leader, epoch, isr)); every object new, as _read_view makes them."""
    ids = {**IDS, **(ids or {})}
    view = ClusterView()
    view.brokers = {
        b: zk.BrokerInfo(b, "localhost", port, rack="r1" if b == 2 else None) for b, port in brokers.items()
    }
    view.broker_epochs = {b: 100 + b for b in brokers}
    view.topics = {n: zk.TopicAssignment({p: list(r) for p, r in ps.items()}, ids[n]) for n, ps in topics.items()}
    view.configs = {n: {} for n in topics}
    view.states = {
        TopicPartition(t, p): zk.LeaderAndIsr(leader, epoch, list(isr), 3, zk_version=epoch)
        for (t, p), (leader, epoch, isr) in states.items()
    }
    view.controller_id = controller
    view.controller_epoch = 3
    return view


BROKERS = {1: 9001, 2: 9002, 3: 9003}
TOPICS = {"a": {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [1, 3, 2]}, "b": {0: [2, 1], 1: [3, 2]}, "c": {0: [1]}}
STATES = {
    **{("a", p): (r[0], 0, r) for p, r in TOPICS["a"].items()},
    **{("b", p): (r[0], 2, r) for p, r in TOPICS["b"].items()},
}  # c: assigned, no state yet


def _changed(**kwargs) -> ClusterView:
    return _view(kwargs.get("brokers", BROKERS), kwargs.get("topics", TOPICS), kwargs.get("states", STATES))


# ----- the stamp ---------------------------------------------------------------------------------------------
def test_a_view_read_again_unchanged_keeps_its_stamp():
    first = stamped(_view(BROKERS, TOPICS, STATES), None)
    assert first.stamp > 0
    again = stamped(_view(BROKERS, TOPICS, STATES), first)
    assert again.stamp == first.stamp
    assert stamped(again, again).stamp == first.stamp  # set again as it is
    # what no Metadata entry shows: znode versions, the controller, configs, deletions, broker epochs
    other = _view(BROKERS, TOPICS, STATES, controller=2)
    other.states = {tp: dataclasses.replace(s, zk_version=s.zk_version + 5) for tp, s in other.states.items()}
    other.configs["a"] = {"retention.ms": "1"}
    other.deleting = {"b"}
    other.broker_epochs = {1: 7}
    assert stamped(other, again).stamp == first.stamp


@pytest.mark.parametrize(
    "change",
    [
        "a topic created",
        "a topic deleted",
        "a partition added",
        "replicas reassigned",
        "a topic id changed",
        "a partition state written",
        "a leader moved",
        "an epoch moved",
        "an ISR shrank",
        "a broker died",
        "a broker joined",
        "a broker's endpoint changed",
    ],
)
def test_each_change_an_answer_shows_takes_a_new_stamp(change):
    before = stamped(_view(BROKERS, TOPICS, STATES), None)
    topics = {n: dict(ps) for n, ps in TOPICS.items()}
    states = dict(STATES)
    brokers = dict(BROKERS)
    ids: dict[str, str] = {}
    if change == "a topic created":
        topics["d"] = {0: [1]}
        states[("d", 0)] = (1, 0, [1])
    elif change == "a topic deleted":
        del topics["b"]
        del states[("b", 0)], states[("b", 1)]
    elif change == "a partition added":
        topics["b"][2] = [1, 3]
    elif change == "replicas reassigned":
        topics["b"][1] = [3, 1]
    elif change == "a topic id changed":
        ids["a"] = new_uuid()
    elif change == "a partition state written":
        states[("c", 0)] = (1, 0, [1])
    elif change == "a leader moved":
        states[("a", 1)] = (3, 0, [2, 3, 1])
    elif change == "an epoch moved":
        states[("a", 1)] = (2, 1, [2, 3, 1])
    elif change == "an ISR shrank":
        states[("a", 1)] = (2, 0, [2, 3])
    elif change == "a broker died":
        del brokers[3]
    elif change == "a broker joined":
        brokers[4] = 9004
    elif change == "a broker's endpoint changed":
        brokers[2] = 9102
    after = stamped(_view(brokers, topics, states, ids), before)
    assert after.stamp != before.stamp
    assert stamped(_view(BROKERS, TOPICS, STATES), after).stamp not in (before.stamp, after.stamp)  # never reused


def test_the_zookeeper_node_stamps_every_view_it_is_given():
    from kafkalog.broker.cluster.zk_node import ZkNode

    node = object.__new__(ZkNode)  # only its view: no server, no ZooKeeper client
    node.view = _view(BROKERS, TOPICS, STATES)
    first = node.view.stamp
    node.view = _view(BROKERS, TOPICS, STATES)
    assert node.view.stamp == first
    node.view = _changed(brokers={1: 9001, 2: 9002})
    assert node.view.stamp not in (0, first)


# ----- the handler -------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _on_the_plaintext_listener():
    """Requests come in on the PLAINTEXT listener (each broker's endpoint in the answer is that listener's)."""
    from kafkalog.broker.security.context import CURRENT

    token = CURRENT.set(dataclasses.replace(CURRENT.get(), listener="PLAINTEXT"))
    yield
    CURRENT.reset(token)


class _Cluster(StampedViewHolder):
    """A cluster broker's ZooKeeper node as the handler reads it: its view, stamped when set."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    async def wait_ready(self) -> None:
        return None


def _broker(view: ClusterView):
    return types.SimpleNamespace(
        cluster=_Cluster(view),
        node_id=1,
        cluster_id="cid",
        config=types.SimpleNamespace(auto_create_topics_enable=False),
        advertised_endpoint=lambda: ("localhost", 9001),
    )


def _answer(broker, version: int, names: list[str] | None = None) -> bytes:
    from kafka.protocol.metadata import MetadataRequest

    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    request = MetadataRequest(topics=topics, allow_auto_topic_creation=False)
    response = asyncio.run(handler.handle(broker, types.SimpleNamespace(api_version=version), request))
    return bytes(response.parts[0])


def _generic(view: ClusterView, version: int, names: list[str] | None = None) -> bytes:
    """The answer for ``view`` as the generic encoder writes it, every topic's Topic built from the view now."""
    Broker = MetadataResponse.MetadataResponseBroker
    topics = []
    for name in sorted(view.topics) if names is None else names:
        state = CLUSTER_STATE(view, name)
        if state is not None:
            topics.append(handler._cluster_topic_of(name, state))
        elif names is not None:
            topics.append(handler._error_topic(name, 3))
    return bytes(
        MetadataResponse(
            version=version,
            throttle_time_ms=0,
            brokers=[Broker(node_id=b, host=i.host, port=i.port, rack=i.rack) for b, i in sorted(view.brokers.items())],
            cluster_id="cid",
            controller_id=view.controller_id,
            topics=topics,
        ).encode(version=version)
    )


def test_cached_entries_follow_every_view_change_byte_for_byte(monkeypatch):
    walks: list[str] = []
    original = handler._cluster_state

    def counting(view, name):
        walks.append(name)
        return original(view, name)

    broker = _broker(_view(BROKERS, TOPICS, STATES))
    steps = [
        ("read again, unchanged", _view(BROKERS, TOPICS, STATES)),
        ("an epoch moved", _changed(states={**STATES, ("a", 1): (2, 1, [2, 3, 1])})),
        ("an ISR shrank", _changed(states={**STATES, ("a", 1): (2, 1, [2, 3])})),
        ("c's state written", _changed(states={**STATES, ("a", 1): (2, 1, [2, 3]), ("c", 0): (1, 0, [1])})),
        ("broker 3 died", _changed(brokers={1: 9001, 2: 9002}, states={**STATES, ("c", 0): (1, 0, [1])})),
        ("broker 3 back", _changed(states={**STATES, ("c", 0): (1, 0, [1])})),
        ("read again, unchanged", _changed(states={**STATES, ("c", 0): (1, 0, [1])})),
        (
            "b grew",
            _changed(topics={**TOPICS, "b": {**TOPICS["b"], 2: [1, 2]}}, states={**STATES, ("b", 2): (1, 0, [1])}),
        ),
        ("b deleted", _changed(topics={"a": TOPICS["a"], "c": TOPICS["c"]}, states=STATES)),
    ]
    monkeypatch.setattr(handler, "_cluster_state", counting)
    for version in VERSIONS:  # the first answers: every topic walked, once per version's first request
        assert _answer(broker, version) == _generic(broker.cluster.view, version)
        assert _answer(broker, version, ["b", "zz", "a"]) == _generic(broker.cluster.view, version, ["b", "zz", "a"])
    for step, view in steps:
        walks.clear()
        stamp = broker.cluster.view.stamp
        broker.cluster.view = view
        for version in VERSIONS:
            assert _answer(broker, version) == _generic(view, version), (step, version)
            assert _answer(broker, version, ["c", "a"]) == _generic(view, version, ["c", "a"]), (step, version)
        answered = [n for n in walks if n in view.topics and original(view, n) is not None]
        if step.startswith("read again"):
            assert view.stamp == stamp and answered == [], step  # no topic walked again
        else:
            assert view.stamp != stamp, step
            # each known topic walked once after the change (then answered from its entry), unknown ones each time
            assert sorted(set(answered)) == sorted(answered), step
            assert set(answered) == {n for n in view.topics if original(view, n) is not None}, step


def test_unchanged_view_answers_walk_no_partition(monkeypatch):
    broker = _broker(_view(BROKERS, TOPICS, {**STATES, ("c", 0): (1, 0, [1])}))
    first = _answer(broker, 12)
    walks: list[str] = []
    monkeypatch.setattr(handler, "_cluster_state", lambda view, name: walks.append(name))
    for _ in range(3):
        broker.cluster.view = _view(BROKERS, TOPICS, {**STATES, ("c", 0): (1, 0, [1])})  # the reconcile pass
        assert _answer(broker, 12) == first
        assert MetadataResponse.decode(_answer(broker, 12, ["a"]), version=12).topics[0].name == "a"
    assert walks == []


class _UnstampedCluster:
    """A node whose views are never stamped (ClusterView.stamp stays 0)."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    async def wait_ready(self) -> None:
        return None


@pytest.mark.parametrize("stamping", [True, False])
def test_topics_asked_by_id_follow_the_view(stamping):
    """Metadata v12 by topic id in ZooKeeper mode, as on a single node: the topic, UNKNOWN_TOPIC_ID for an id no
    topic of the view has (a topic recreated has a new id; one with no partition state yet is unknown). Also
    with views that are never stamped (stamp 0: every lookup made anew)."""
    broker = _broker(_view(BROKERS, TOPICS, STATES))
    if not stamping:
        broker.cluster = _UnstampedCluster(_view(BROKERS, TOPICS, STATES))
    ids = {t.name: t.topic_id for t in MetadataResponse.decode(_answer(broker, 12), version=12).topics}
    c_id = handler.topic_uuid(IDS["c"])
    unknown = handler.topic_uuid(new_uuid())
    assert by_id(broker, ids["b"], unknown, ids["a"], c_id) == [
        (0, "b", 2),
        (100, None, 0),
        (0, "a", 4),
        (100, None, 0),
    ]
    recreated = new_uuid()
    broker.cluster.view = _view(BROKERS, TOPICS, {**STATES, ("c", 0): (1, 0, [1])}, ids={"a": recreated})
    assert by_id(broker, ids["a"], handler.topic_uuid(recreated), c_id) == [(100, None, 0), (0, "a", 4), (0, "c", 1)]
