"""Client quotas: produce and fetch byte rates per user and client id, as Kafka's ClientQuotaManager.

Quotas are set with AlterClientQuotas (``kafkalog configs --entity-type users|clients --add-config
producer_byte_rate=...``) and kept in ``quotas.json`` in the first log dir. The quota of a request is the first
that exists of Kafka's eight levels: (user, client-id), (user, default client-id), (user), (default user,
client-id), (default user, default client-id), (default user), (client-id), (default client-id). Bytes are
counted per quota entity with the defaults replaced by the request's own names, so clients sharing a default
quota are each held to it, while the clients of one user quota share it.

The rate is Kafka's: the bytes of the last ``quota.window.num`` (11) windows of ``quota.window.size.seconds``
(1 s) over the time they span, at least ``quota.window.num - 1`` windows. A request that takes the rate over
the bound is answered with ``throttle_time_ms = (rate - bound) / bound * window`` (capped at the whole
window); the broker then reads nothing more from that connection for that long (KIP-219), or, for a request
version whose clients do not throttle themselves, delays the answer instead. A throttled fetch returns no
records, and its bytes are not counted.

``request_percentage`` (Kafka's ClientRequestQuotaManager) bounds the time the broker spends on a client's
requests, as a percentage of one thread over the quota window: each request counts the time its parsing and its
handler ran on the event loop (:class:`TimedCoroutine` measures only the steps the handler ran, not the time it
waited, e.g. in a long poll), and a client over its bound gets a throttle time capped at one window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .file_store import JsonFileStore

STORE_FILE = "quotas.json"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, "controller_mutation_rate")
_LONG_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)  # Kafka's QuotaConfigs types them LONG, the others DOUBLE


def value_problem(key: str, value: float) -> str | None:
    """Why ``value`` cannot be set as quota ``key`` (None if it can): a byte rate must be a whole number, as
    Kafka's AlterClientQuotas checks for LONG quota configs, and every quota a positive finite number (NaN or
    infinity would reach the throttle arithmetic)."""
    if not math.isfinite(value) or value <= 0:
        return f"Invalid value {value} for configuration {key}: quotas must be positive"
    if key in _LONG_KEYS and value != int(value):
        return f"Configuration {key} must be a Long value"
    return None


ENTITY_TYPES = ("user", "client-id")

Entity = tuple[tuple[str, str | None], ...]  # sorted (type, name) pairs; name None = the default entity


def entity_key(pairs) -> Entity:
    return tuple(sorted((t, n) for t, n in pairs))


def _entries(rows: list[dict[str, Any]]) -> dict[Entity, dict[str, float]]:
    """The stored rows ({"entity": [[type, name]...], "values": {...}}) by entity."""
    return {entity_key((t, n) for t, n in row["entity"]): dict(row["values"]) for row in rows}


class QuotaStore(JsonFileStore):
    """Quota values by entity. Invariant: the file equals ``entries`` whenever a change has returned."""

    def __init__(self, log_dir: str | Path) -> None:
        super().__init__(log_dir, STORE_FILE, "client quotas")
        self.entries: dict[Entity, dict[str, float]] = self._load(_entries, (ValueError, TypeError, KeyError)) or {}

    def alter(self, changes: list[tuple[Entity, dict[str, float | None]]]) -> None:
        """Set (a float) or remove (None) values of each entity; all written at once."""
        with self._lock:
            entries = {k: dict(v) for k, v in self.entries.items()}
            for entity, ops in changes:
                values = entries.setdefault(entity, {})
                for key, value in ops.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
                if not values:
                    del entries[entity]
            rows = [{"entity": list(k), "values": v} for k, v in sorted(entries.items(), key=str)]
            self._save(rows)
            self.entries = entries

    def lookup(self, user: str, client_id: str, key: str) -> tuple[Entity, float] | None:
        """The quota entity that applies and its bound, by Kafka's precedence (None: unlimited)."""
        if not self.entries:  # no quota anywhere (the usual case): every request asks, so answer at once
            return None
        levels: list[Entity] = [
            (("client-id", client_id), ("user", user)),
            (("client-id", None), ("user", user)),
            (("user", user),),
            (("client-id", client_id), ("user", None)),
            (("client-id", None), ("user", None)),
            (("user", None),),
            (("client-id", client_id),),
            (("client-id", None),),
        ]
        for level in levels:
            value = self.entries.get(level, {}).get(key)
            if value is not None:
                return level, value
        return None


class _Rate:
    """Kafka's Rate over a SampledStat: ``samples`` windows of ``window_ms``."""

    __slots__ = ("samples", "values", "window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.values: list[list[float]] = []  # [window start ms, total]

    def record(self, value: float, now_ms: float) -> None:
        if not self.values or now_ms >= self.values[-1][0] + self.window_ms:
            self.values.append([now_ms, 0.0])
            del self.values[: -self.samples]
        self.values[-1][1] += value

    def _purge(self, now_ms: float) -> None:
        horizon = now_ms - self.samples * self.window_ms
        self.values = [v for v in self.values if v[0] + self.window_ms > horizon]

    def window_size_ms(self, now_ms: float) -> float:
        self._purge(now_ms)
        elapsed = now_ms - self.values[0][0] if self.values else 0.0
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def rate(self, now_ms: float) -> float:
        size = self.window_size_ms(now_ms)
        return sum(v[1] for v in self.values) / (size / 1000.0) if size > 0 else 0.0


@dataclass(eq=False)
class QuotaManager:
    """Records bytes of one kind (``producer_byte_rate`` or ``consumer_byte_rate``) and says how long to throttle."""

    store: QuotaStore
    key: str
    samples: int = 11
    window_ms: int = 1000
    clock: Callable[[], float] = time.monotonic
    # the longest throttle: the whole sampled span (None), or one window for request_percentage (Kafka's
    # ClientRequestQuotaManager bounds it so, as a client's CPU use is measured after the fact)
    max_throttle_ms: int | None = None
    _rates: dict[tuple[str, str, Entity], _Rate] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_throttle_ms is None:
            self.max_throttle_ms = self.samples * self.window_ms

    def applies(self, user: str, client_id: str) -> bool:
        """Whether a quota of this kind bounds the client (so its usage needs measuring)."""
        return self.store.lookup(user, client_id, self.key) is not None

    def _sensor(self, user: str, client_id: str) -> tuple[_Rate, float] | None:
        found = self.store.lookup(user, client_id, self.key)
        if found is None:
            return None
        level, bound = found
        types = {t for t, _ in level}
        tag = (user if "user" in types else "", client_id if "client-id" in types else "", level)
        rate = self._rates.get(tag)
        if rate is None:
            rate = self._rates[tag] = _Rate(self.samples, self.window_ms)
        return rate, bound

    def record(self, user: str, client_id: str, size: float) -> int:
        """Count ``size`` (bytes, or percent-seconds of a thread); the throttle time in ms (0 within the quota or
        without one)."""
        sensor = self._sensor(user, client_id)
        if sensor is None:
            return 0
        rate, bound = sensor
        now = self.clock() * 1000.0
        rate.record(size, now)
        value = rate.rate(now)
        if value <= bound or (bound <= 0 and value == 0):
            return 0
        if bound <= 0:
            return self.max_throttle_ms
        throttle = (value - bound) / bound * rate.window_size_ms(now)
        return int(min(round(throttle), self.max_throttle_ms))

    def unrecord(self, user: str, client_id: str, size: int) -> None:
        sensor = self._sensor(user, client_id)
        if sensor is not None:
            sensor[0].record(-size, self.clock() * 1000.0)


def request_quota(store: QuotaStore, samples: int, window_ms: int, clock: Callable[[], float] = time.monotonic):
    """The request_percentage quota manager: throttles capped at one quota window, as Kafka's."""
    return QuotaManager(store, REQUEST_PERCENTAGE, samples, window_ms, clock, max_throttle_ms=window_ms)


def thread_percent_seconds(seconds: float) -> float:
    """Thread time as the request quota counts it: percent of one thread, per second (Kafka's nanosToPercentage)."""
    return seconds * 100.0


T = TypeVar("T")


class TimedCoroutine(Awaitable[T]):
    """Await a coroutine and add up the time its steps ran (``seconds``), not the time it was suspended.

    Each ``send``/``throw`` into the coroutine runs it up to its next suspension; the loop's other work happens
    between steps, so the sum is the time this request held the event loop -- what Kafka's request quota
    charges (request handler thread time), without a long poll's or a replication wait's idle time.
    """

    __slots__ = ("coro", "seconds")

    def __init__(self, coro: Awaitable[T]) -> None:
        self.coro: Any = coro.__await__()
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, T]:
        coro = self.coro
        value: Any = None
        error: BaseException | None = None
        clock = time.perf_counter
        while True:
            started = clock()
            try:
                yielded = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as done:
                self.seconds += clock() - started
                return done.value  # type: ignore[no-any-return]
            except BaseException:
                self.seconds += clock() - started
                raise
            self.seconds += clock() - started
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # e.g. the task's cancellation: passed on into the coroutine
                value, error = None, e
