"""Waiting fetches (Kafka's fetch purgatory): a long poll wakes when a high watermark it watches advances.

The replica manager's high-watermark hook calls ``notify(tp)``; every fetch waiting on ``tp`` is woken at once
and re-reads. Nothing polls on a timer: a fetch with nothing new sleeps until data arrives or ``max.wait.ms``
runs out.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

from ..manager import TopicPartition


class FetchPurgatory:
    """Events of waiting fetches by partition. Invariant: an event is registered only while its fetch waits."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._watchers: dict[TopicPartition, set[asyncio.Event]] = {}

    def watch(self, partitions: Iterable[TopicPartition]) -> asyncio.Event:
        event = asyncio.Event()
        for tp in partitions:
            self._watchers.setdefault(tp, set()).add(event)
        return event

    def unwatch(self, partitions: Iterable[TopicPartition], event: asyncio.Event) -> None:
        for tp in partitions:
            watchers = self._watchers.get(tp)
            if watchers is not None:
                watchers.discard(event)
                if not watchers:
                    del self._watchers[tp]

    def notify(self, tp: TopicPartition) -> None:
        """Wake the fetches waiting on ``tp`` (callable from any thread)."""
        if threading.get_ident() == self._loop_thread:
            self._wake(tp)
        else:
            self._loop.call_soon_threadsafe(self._wake, tp)

    def _wake(self, tp: TopicPartition) -> None:
        for event in self._watchers.get(tp, ()):
            event.set()

    def wake_all(self) -> None:
        """Wake every waiting fetch (shutdown: each answers with what it has)."""
        for events in list(self._watchers.values()):
            for event in events:
                event.set()

    @property
    def waiting(self) -> int:
        return len({e for events in self._watchers.values() for e in events})
