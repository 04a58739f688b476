"""Kafka's fetch session cache and contexts (KIP-227) in broker/fetch_session.py, on MockTime.

The expected behaviour is Kafka's FetchSessionTest / FetchManager.newContext: which request metadata opens,
closes or continues a session, the errors FETCH_SESSION_ID_NOT_FOUND (70) and INVALID_FETCH_SESSION_EPOCH (71),
what an incremental response carries, the order of a session's partitions and the cache's eviction rules.
"""

from __future__ import annotations

import random

import pytest

from kafkalog.broker.config import KafkaConfig
from kafkalog.broker.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    FetchManager,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    PartitionRequest,
    SessionErrorContext,
    SessionlessFetchContext,
    next_epoch,
)
from kafkalog.broker.handlers.fetch import PartitionAnswer
from kafkalog.errors import InvalidConfigurationError
from kafkalog.manager import TopicPartition
from kafkalog.storage.file_records import EMPTY_SLICE
from kafkalog.testing import MockTime

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class _Records:
    """Stands for a non-empty record set (only its size is read)."""

    def __init__(self, size: int) -> None:
        self.size = size


def _answer(tp, hw=10, log_start=0, error=0, records=0):
    return (
        tp,
        PartitionAnswer(tp.partition, error, hw, hw, log_start, None, _Records(records) if records else EMPTY_SLICE),
    )


def _req(offset=0, max_bytes=1024):
    return PartitionRequest(offset, max_bytes)


@pytest.fixture
def clock():
    return MockTime()


def _manager(clock, slots=10, eviction_ms=1000):
    return FetchManager(FetchSessionCache(slots, eviction_ms, clock, random.Random(7)))


def _open(manager, parts, privileged=False, answers=None):
    """A session over ``parts`` (a full request at epoch 0): its id."""
    ctx = manager.new_context(0, 0, {tp: _req() for tp in parts}, [], privileged)
    assert isinstance(ctx, FullFetchContext)
    return ctx.commit(answers if answers is not None else [_answer(tp) for tp in parts])


def test_epoch_minus_one_without_session_is_sessionless(clock):
    manager = _manager(clock)
    ctx = manager.new_context(0, -1, {A0: _req(5)}, [], False)
    assert isinstance(ctx, SessionlessFetchContext)
    assert [(tp, r.fetch_offset) for tp, r in ctx.partitions()] == [(A0, 5)]
    assert ctx.commit([_answer(A0)]) == 0
    assert len(manager.cache) == 0


def test_full_request_at_epoch_zero_creates_a_session(clock):
    manager = _manager(clock)
    session_id = _open(manager, [A0, A1, B0])
    assert session_id > 0
    session = manager.cache.get(session_id)
    assert session.epoch == 1
    assert list(session.partitions) == [A0, A1, B0]
    assert manager.cache.total_partitions == 3


def test_incremental_request_answers_only_what_changed(clock):
    manager = _manager(clock)
    sid = _open(manager, [A0, A1, B0])
    ctx = manager.new_context(sid, 1, {}, [], False)
    assert isinstance(ctx, IncrementalFetchContext)
    assert [tp for tp, _ in ctx.partitions()] == [A0, A1, B0]  # every partition of the session is read
    answers = [_answer(A0), _answer(A1, hw=11), _answer(B0, log_start=3)]
    assert [tp for tp, _ in ctx.select(answers)] == [A1, B0]
    assert ctx.commit(answers) == sid
    # Nothing changed since: an empty response.
    ctx = manager.new_context(sid, 2, {}, [], False)
    answers = [_answer(A0), _answer(A1, hw=11), _answer(B0, log_start=3)]
    assert ctx.select(answers) == []
    ctx.commit(answers)
    # Records and errors are always sent; after an error the partition is sent again once it is gone.
    ctx = manager.new_context(sid, 3, {}, [], False)
    answers = [_answer(A0, records=100), _answer(A1, hw=11, error=6), _answer(B0, log_start=3)]
    assert [tp for tp, _ in ctx.select(answers)] == [A0, A1]
    ctx.commit(answers)
    ctx = manager.new_context(sid, 4, {}, [], False)
    answers = [_answer(A0), _answer(A1, hw=11), _answer(B0, log_start=3)]
    assert [tp for tp, _ in ctx.select(answers)] == [A1]


def test_a_throttled_or_unsent_response_leaves_the_partitions_as_they_were(clock):
    manager = _manager(clock)
    sid = _open(manager, [A0])
    ctx = manager.new_context(sid, 1, {}, [], False)
    assert [tp for tp, _ in ctx.select([_answer(A0, hw=20)])] == [A0]
    assert ctx.throttled_session_id() == sid  # not committed
    ctx = manager.new_context(sid, 2, {}, [], False)  # the epoch moved on with the request
    assert [tp for tp, _ in ctx.select([_answer(A0, hw=20)])] == [A0]


def test_unknown_session_and_wrong_epoch(clock):
    manager = _manager(clock)
    ctx = manager.new_context(12345, 1, {A0: _req()}, [], False)
    assert isinstance(ctx, SessionErrorContext) and ctx.error == FETCH_SESSION_ID_NOT_FOUND
    sid = _open(manager, [A0])
    for wrong in (2, 7):
        ctx = manager.new_context(sid, wrong, {}, [], False)
        assert isinstance(ctx, SessionErrorContext) and ctx.error == INVALID_FETCH_SESSION_EPOCH
    assert manager.cache.get(sid).epoch == 1  # errors do not move the session
    assert isinstance(manager.new_context(sid, 1, {}, [], False), IncrementalFetchContext)


def test_a_session_that_moved_on_while_a_request_waited_answers_71(clock):
    manager = _manager(clock)
    sid = _open(manager, [A0])
    first = manager.new_context(sid, 1, {}, [], False)
    manager.new_context(sid, 2, {}, [], False)  # e.g. the client's retry, answered before the first
    assert first.select([_answer(A0, hw=30)]) == []
    assert first.commit([_answer(A0, hw=30)]) == sid
    assert first.error == INVALID_FETCH_SESSION_EPOCH


def test_incremental_request_adds_updates_and_forgets_partitions(clock):
    manager = _manager(clock)
    sid = _open(manager, [A0, A1])
    ctx = manager.new_context(sid, 1, {A1: _req(42, 99), B0: _req(7)}, [A0], False)
    parts = dict(ctx.partitions())
    assert list(parts) == [A1, B0]
    assert (parts[A1].fetch_offset, parts[A1].max_bytes, parts[B0].fetch_offset) == (42, 99, 7)
    # A new partition has no high watermark cached yet: it is always in the next response.
    answers = [_answer(A1), _answer(B0)]
    assert [tp for tp, _ in ctx.select(answers)] == [B0]
    ctx.commit(answers)
    assert manager.cache.total_partitions == 2


def test_forgetting_every_partition_closes_the_session(clock):
    manager = _manager(clock)
    sid = _open(manager, [A0])
    ctx = manager.new_context(sid, 1, {}, [A0], False)
    assert isinstance(ctx, SessionlessFetchContext)
    assert manager.cache.get(sid) is None
    assert manager.cache.total_partitions == 0


def test_full_requests_close_the_session_they_name(clock):
    manager = _manager(clock)
    sid = _open(manager, [A0])
    ctx = manager.new_context(sid, -1, {A0: _req()}, [], False)
    assert isinstance(ctx, SessionlessFetchContext)
    assert manager.cache.get(sid) is None
    sid = _open(manager, [A0])
    ctx = manager.new_context(sid, 0, {A0: _req(), B0: _req()}, [], False)
    assert isinstance(ctx, FullFetchContext) and manager.cache.get(sid) is None
    new_sid = ctx.commit([_answer(A0), _answer(B0)])
    assert new_sid not in (0, sid)
    assert len(manager.cache) == 1 and manager.cache.total_partitions == 2


def test_partitions_that_returned_records_move_to_the_end(clock):
    manager = _manager(clock)
    sid = _open(manager, [A0, A1, B0])
    ctx = manager.new_context(sid, 1, {}, [], False)
    ctx.commit([_answer(A0, records=10), _answer(A1, hw=12), _answer(B0)])
    assert list(manager.cache.get(sid).partitions) == [A1, B0, A0]  # A1 (only a new high watermark) stays


def test_a_full_cache_without_evictable_sessions_answers_sessionless(clock):
    manager = _manager(clock, slots=2, eviction_ms=1000)
    _open(manager, [A0])
    _open(manager, [A0, A1])
    assert _open(manager, [A0, A1, B0]) == 0  # both are younger than the eviction time
    assert manager.cache.evictions == 0
    assert len(_manager(clock, slots=0).cache) == 0
    assert _open(_manager(clock, slots=0), [A0]) == 0


def test_a_follower_evicts_a_young_consumer_session(clock):
    manager = _manager(clock, slots=2, eviction_ms=1000)
    small = _open(manager, [A0])
    large = _open(manager, [A0, A1])
    follower = _open(manager, [A0], privileged=True)
    assert follower > 0 and manager.cache.evictions == 1
    assert manager.cache.get(small) is None and manager.cache.get(large) is not None  # the smaller one goes
    # A young privileged session cannot be evicted by another follower.
    clock.advance(1)
    manager.new_context(large, 1, {}, [], False)  # keep the consumer's session the most recently used
    assert _open(manager, [A0, A1, B0], privileged=True) > 0
    assert manager.cache.get(large) is None and manager.cache.get(follower) is not None


def test_stale_sessions_are_evicted_first(clock):
    manager = _manager(clock, slots=2, eviction_ms=1000)
    first = _open(manager, [A0, A1])
    clock.advance(500)
    second = _open(manager, [A0, A1])
    clock.advance(501)  # the first one is now unused for 1,001 ms
    third = _open(manager, [A0])
    assert third > 0 and manager.cache.get(first) is None and manager.cache.get(second) is not None
    assert manager.cache.evictions == 1


def test_an_old_session_is_evicted_only_by_a_larger_one(clock):
    manager = _manager(clock, slots=2, eviction_ms=1000)
    two = _open(manager, [A0, A1])
    three = _open(manager, [A0, A1, B0])
    clock.advance(1001)
    # Both are used again (not stale) while older than the eviction time: evictable by size.
    manager.new_context(two, 1, {}, [], False)
    manager.new_context(three, 1, {}, [], False)
    assert _open(manager, [A0]) == 0
    bigger = _open(manager, [A0, A1, B0, TopicPartition("c", 0)])
    assert bigger > 0 and manager.cache.get(two) is None and manager.cache.get(three) is not None


def test_next_epoch_wraps_and_final_stays_final():
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1


def test_session_cache_configs():
    config = KafkaConfig({"log.dirs": "/tmp/unused"})
    assert config.max_incremental_fetch_session_cache_slots == 1000
    assert config.min_incremental_fetch_session_eviction_ms == 120000
    config = KafkaConfig(
        {
            "log.dirs": "/tmp/unused",
            "max.incremental.fetch.session.cache.slots": "5",
            "min.incremental.fetch.session.eviction.ms": "10",
        }
    )
    assert (config.max_incremental_fetch_session_cache_slots, config.min_incremental_fetch_session_eviction_ms) == (
        5,
        10,
    )
    with pytest.raises(InvalidConfigurationError, match=r"max\.incremental\.fetch\.session\.cache\.slots"):
        KafkaConfig({"log.dirs": "/tmp/unused", "max.incremental.fetch.session.cache.slots": "-1"})
