"""A stamp of what a Metadata answer shows of this process's logs: it changes whenever that may have changed.

The broker caches each topic's encoded Metadata entry (broker/handlers/metadata_encoding.py) and, while the stamp
is the one it saw when it last checked the topic's state, reuses the entry without looking at the topic's
partitions again: an all-topics answer of 10,000 partitions then costs a lookup per topic, not per partition.
Everything that changes what an entry shows calls ``note_change`` after the change is made: the topic store
(topics created, deleted, their ids and partition counts), the log manager's partition index, the replica
manager's partitions, each partition's leader epoch and ISR, a log going offline.

Each note takes a new value from a counter, so a stamp is never seen twice, even when two threads note changes at
once: a reader that read the stamp before looking at the state, and finds it unchanged later, knows that no change
was noted meanwhile.
"""

from __future__ import annotations

import itertools

_counter = itertools.count(1)
_stamp = 0


def note_change() -> None:
    """Something a Metadata answer shows has just changed (call after the change is visible)."""
    global _stamp
    _stamp = next(_counter)


def stamp() -> int:
    """The current stamp: read it before reading the state it vouches for."""
    return _stamp
