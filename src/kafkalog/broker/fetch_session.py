"""Incremental fetch sessions (KIP-227): Kafka's FetchSessionCache, FetchManager and fetch contexts.

A client that sends a Fetch with session id 0 and epoch 0 asks for a session: the broker answers the full request
and, when the cache has room (or something it may evict), returns a new session id. The client then sends only
what changed (new partitions, new fetch offsets, ``forgotten_topics_data``) at epochs 1, 2, ...; the broker reads
every partition of the session and answers only those with something new: records, a changed high watermark or
log start offset, or an error (Kafka's CachedPartition.maybeUpdateResponseData; Kafka does not compare the last
stable offset, a change of which always comes with a high watermark change). The request metadata:

- id 0, epoch -1: sessionless (full request, no session); id X, epoch -1: close X, then sessionless;
- id 0, epoch 0: full request that creates a session; id X, epoch 0: close X, then the same;
- id X, epoch N > 0: incremental: X unknown -> FETCH_SESSION_ID_NOT_FOUND, N not the session's next epoch ->
  INVALID_FETCH_SESSION_EPOCH. The session's epoch advances when the context is made (at the request); its cached
  partitions (high watermarks, order) change only when a response is generated, not when a throttled or failed
  one is.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions. A new session may evict one that has not been
used for ``min.incremental.fetch.session.eviction.ms``, else the least valuable one by (privileged, size): a
follower's session (privileged) beats a consumer's, a larger session a smaller one, and a session younger than the
eviction time may only be evicted by a privileged one (and only if it is not privileged itself). Everything here
runs on the broker's event loop thread, so nothing is locked.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Iterable, Iterator
from typing import Any

from ..manager import TopicPartition

log = logging.getLogger("kafka.server.FetchSession")

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NONE = 0
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
_INT32_MAX = 2**31 - 1

DEFAULT_CACHE_SLOTS = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120_000  # min.incremental.fetch.session.eviction.ms


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: -1 stays -1, the maximum wraps to 1 (0 is only ever a session's start)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


class PartitionRequest:
    """What a fetch asks of one partition (Kafka's FetchRequest.PartitionData)."""

    __slots__ = ("fetch_offset", "leader_epoch", "log_start_offset", "max_bytes")

    def __init__(self, fetch_offset: int, max_bytes: int, leader_epoch: int = -1, log_start_offset: int = -1) -> None:
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.leader_epoch = leader_epoch
        self.log_start_offset = log_start_offset  # the follower's own log start offset (-1 from a consumer)


class CachedPartition(PartitionRequest):
    """One partition of a session: the last request parameters and the last high watermark / log start offset sent.

    ``high_watermark`` is -1 until a response carried the partition (or after one carried an error), so that the
    next response includes it."""

    __slots__ = ("high_watermark", "local_log_start_offset")

    def __init__(self, req: PartitionRequest, high_watermark: int = -1, local_log_start_offset: int = -1) -> None:
        super().__init__(req.fetch_offset, req.max_bytes, req.leader_epoch, req.log_start_offset)
        self.high_watermark = high_watermark
        self.local_log_start_offset = local_log_start_offset

    def update_request(self, req: PartitionRequest) -> None:
        self.fetch_offset = req.fetch_offset
        self.max_bytes = req.max_bytes
        self.leader_epoch = req.leader_epoch
        self.log_start_offset = req.log_start_offset

    def must_respond(self, answer: Any, update: bool) -> bool:
        """Whether ``answer`` (error, high_watermark, log_start_offset, records) must be sent; with ``update``,
        remember what it says (Kafka's maybeUpdateResponseData)."""
        must = answer.records.size > 0
        if self.high_watermark != answer.high_watermark:
            must = True
            if update:
                self.high_watermark = answer.high_watermark
        if self.local_log_start_offset != answer.log_start_offset:
            must = True
            if update:
                self.local_log_start_offset = answer.log_start_offset
        if answer.error != NONE:
            must = True
            if update:
                self.high_watermark = -1  # resend the partition once the error is gone
        return must


class FetchSession:
    """A session: its partitions in fetch order (a dict keeps insertion order; a partition that returned records
    moves to the end so that others get their turn at the response's size limit), its epoch (the one the next
    request must carry) and when it was created and last used."""

    __slots__ = (
        "cached_size",
        "creation_ms",
        "epoch",
        "evictable_by_all",
        "evictable_by_privileged",
        "id",
        "last_used_ms",
        "partitions",
        "privileged",
    )

    def __init__(
        self, session_id: int, privileged: bool, partitions: dict[TopicPartition, CachedPartition], now: int
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.creation_ms = now
        self.last_used_ms = now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1  # the size the cache last counted (-1: not counted yet)
        self.evictable_by_all = False  # both set by FetchSessionCache.touch
        self.evictable_by_privileged = False

    def update(
        self, fetch_data: dict[TopicPartition, PartitionRequest], forgotten: Iterable[TopicPartition]
    ) -> tuple[list[TopicPartition], list[TopicPartition], list[TopicPartition]]:
        """Apply an incremental request: new partitions are appended, known ones take the new parameters, then the
        forgotten ones are removed. Returns (added, updated, removed)."""
        added: list[TopicPartition] = []
        updated: list[TopicPartition] = []
        removed: list[TopicPartition] = []
        parts = self.partitions
        for tp, req in fetch_data.items():
            cached = parts.get(tp)
            if cached is None:
                parts[tp] = CachedPartition(req)
                added.append(tp)
            else:
                cached.update_request(req)
                updated.append(tp)
        for tp in forgotten:
            if parts.pop(tp, None) is not None:
                removed.append(tp)
        return added, updated, removed

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)


class FetchSessionCache:
    """The broker's sessions by id. Invariants: ``_by_last_use`` holds every session, least recently used first;
    ``total_partitions`` is the sum of the sessions' ``cached_size``; ids are unique, positive and never 0."""

    def __init__(self, max_entries: int, eviction_ms: int, time: Any, rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.time = time
        self._rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self._by_last_use: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()
        self.total_partitions = 0
        self.evictions = 0  # Kafka's IncrementalFetchSessionEvictionsPerSec meter (its count)

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _INT32_MAX - 1)
            if session_id not in self.sessions:
                return session_id

    def maybe_create(self, privileged: bool, partitions: dict[TopicPartition, CachedPartition]) -> int:
        """A new session of ``partitions`` if there is room or something to evict: its id, else 0."""
        now = self.time.milliseconds()
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now):
            log.debug("No fetch session created for privileged=%s, size=%d.", privileged, len(partitions))
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, partitions, now)
        self.sessions[session.id] = session
        self.touch(session, now)
        log.debug("Created fetch session %d with %d partitions.", session.id, len(partitions))
        return session.id

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's tryEvict: the stalest session if unused for longer than the eviction time, else the least
        valuable evictable one if the new session is worth at least as much."""
        if not self._by_last_use:
            return False
        stalest = next(iter(self._by_last_use.values()))
        if now - stalest.last_used_ms > self.eviction_ms:
            log.debug("Evicting stale fetch session %d.", stalest.id)
            self._evict(stalest)
            return True
        # Linear in the cache's size (1,000 by default), and only when a full cache is asked for a new session.
        # Which sessions may be evicted was decided when each was last used (Kafka's evictableBy* trees).
        if privileged:
            candidates = [s for s in self.sessions.values() if s.evictable_by_privileged]
        else:
            candidates = [s for s in self.sessions.values() if s.evictable_by_all]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < victim.evictable_key():
            return False
        log.debug("Evicting fetch session %d (privileged=%s, size=%d).", victim.id, victim.privileged, size)
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self._by_last_use.pop(session_id, None)
            self.total_partitions -= max(0, session.cached_size)
        return session

    def touch(self, session: FetchSession, now: int) -> None:
        """Mark ``session`` used now and recount its partitions."""
        session.last_used_ms = now
        self._by_last_use[session.id] = session
        self._by_last_use.move_to_end(session.id)
        self.total_partitions += len(session.partitions) - max(0, session.cached_size)
        session.cached_size = len(session.partitions)
        old = now - session.creation_ms > self.eviction_ms
        session.evictable_by_all = old
        session.evictable_by_privileged = old or not session.privileged


# ----- fetch contexts -----------------------------------------------------------------------------------------------
class FetchContext:
    """How one Fetch request's partitions are chosen and its response is made."""

    error = NONE

    def partitions(self) -> Iterator[tuple[TopicPartition, PartitionRequest]]:
        """The partitions to read, in the order to answer them."""
        return iter(())

    def select(self, answers: list[tuple[TopicPartition, Any]]) -> list[tuple[TopicPartition, Any]]:
        """The answers the response carries (without changing the session)."""
        return answers

    def commit(self, answers: list[tuple[TopicPartition, Any]]) -> int:
        """Record what the response sends; returns the session id it carries."""
        return INVALID_SESSION_ID

    def throttled_session_id(self) -> int:
        """The session id of an empty, throttled response (the session is left as it is)."""
        return INVALID_SESSION_ID


class SessionErrorContext(FetchContext):
    """A request whose session is unknown or at another epoch: answered with the error and no partitions."""

    def __init__(self, error: int) -> None:
        self.error = error

    def select(self, answers):
        return []


class SessionlessFetchContext(FetchContext):
    """A full request without a session (epoch -1): the request's partitions, all answered."""

    def __init__(self, fetch_data: dict[TopicPartition, PartitionRequest]) -> None:
        self.fetch_data = fetch_data

    def partitions(self):
        return iter(self.fetch_data.items())


class FullFetchContext(SessionlessFetchContext):
    """A full request at epoch 0: answered in full; a session of the answered partitions is created if the cache
    allows (the response then carries its id, else 0)."""

    def __init__(self, cache: FetchSessionCache, fetch_data: dict[TopicPartition, PartitionRequest], privileged: bool):
        super().__init__(fetch_data)
        self.cache = cache
        self.privileged = privileged

    def commit(self, answers):
        fetch_data = self.fetch_data
        cached: dict[TopicPartition, CachedPartition] = {}
        for tp, a in answers:
            req = fetch_data.get(tp)
            if req is not None:
                cached[tp] = CachedPartition(req, a.high_watermark, a.log_start_offset)
        return self.cache.maybe_create(self.privileged, cached)


class IncrementalFetchContext(FetchContext):
    """An incremental request of a known session (whose epoch has already advanced): every partition of the session
    is read, and only those with news are answered."""

    def __init__(self, session: FetchSession, request_epoch: int) -> None:
        self.session = session
        self.expected_epoch = next_epoch(request_epoch)

    def _stale(self) -> bool:
        # Another request of the session was made in between (e.g. a client's retry): Kafka answers that with 71.
        return self.session.epoch != self.expected_epoch

    def partitions(self):
        return iter(list(self.session.partitions.items()))

    def select(self, answers):
        if self._stale():
            return []
        parts = self.session.partitions
        chosen = []
        for tp, a in answers:
            cached = parts.get(tp)
            if cached is None or cached.must_respond(a, False):
                chosen.append((tp, a))
        return chosen

    def commit(self, answers):
        if self._stale():
            log.info(
                "Incremental fetch session %d expected epoch %d, but got %d. Possible duplicate request.",
                self.session.id,
                self.expected_epoch,
                self.session.epoch,
            )
            self.error = INVALID_FETCH_SESSION_EPOCH
            return self.session.id
        parts = self.session.partitions
        for tp, a in answers:
            cached = parts.get(tp)
            if cached is not None and cached.must_respond(a, True) and a.records.size > 0:
                parts[tp] = parts.pop(tp)  # fairness: a partition that returned records goes to the end
        return self.session.id

    def throttled_session_id(self):
        if self._stale():
            self.error = INVALID_FETCH_SESSION_EPOCH
        return self.session.id


class FetchManager:
    """Makes each Fetch request's context from its session id and epoch (Kafka's FetchManager.newContext)."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(
        self,
        session_id: int,
        epoch: int,
        fetch_data: dict[TopicPartition, PartitionRequest],
        forgotten: Iterable[TopicPartition],
        from_follower: bool,
    ) -> FetchContext:
        cache = self.cache
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full request: any session it names is closed
            if session_id != INVALID_SESSION_ID and cache.remove(session_id) is not None:
                log.debug("Removed fetch session %d.", session_id)
            if epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(cache, fetch_data, from_follower)
        session = cache.get(session_id)
        if session is None:
            log.debug("Session error for %d: no such session ID found.", session_id)
            return SessionErrorContext(FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            log.debug("Session error for %d: expected epoch %d, but got %d instead.", session_id, session.epoch, epoch)
            return SessionErrorContext(INVALID_FETCH_SESSION_EPOCH)
        added, updated, removed = session.update(fetch_data, forgotten)
        if not session.partitions:
            log.debug("Closing fetch session %d: no partitions left after removing %s.", session_id, removed)
            cache.remove(session_id)
            return SessionlessFetchContext(fetch_data)
        cache.touch(session, cache.time.milliseconds())
        session.epoch = next_epoch(session.epoch)
        log.debug(
            "Created a new incremental FetchContext for session id %d, epoch %d: added %d, updated %d, removed %d",
            session_id,
            session.epoch,
            len(added),
            len(updated),
            len(removed),
        )
        return IncrementalFetchContext(session, epoch)
