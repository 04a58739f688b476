"""Metadata answers assembled from encoded topic entries, byte for byte what kafka-python's encoder writes.

An all-topics Metadata answer of a broker with 10,000 partitions is ~260 KB, and most of the time of building it
was kafka-python's generic encoder walking 10,000 partition objects per request (60 %, issue 23). A topic's
entry in the answer depends only on the topic's state and the response version (not on the client, its
listener or its principal, but for the topic's authorized operations, which are spliced in per request), so it
is encoded once per state and version and the answer is joined from the cached entries:

    head (throttle time, brokers, cluster id, controller id) + topic count + entries + tail (cluster authorized
    operations v8-10, the tag buffer v9+)

The head and tail are the generic encoder's own bytes for the answer with no topic (one broker or a few: cheap),
cut around the empty topic array; the entries are the generic encoder's bytes for each topic's struct at that
version. ``encode_response`` of a message equals ``MetadataResponse.encode`` of it (tests/test_metadata_encoding.py
checks every version this broker serves).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ...record.varint import encode_unsigned_varint
from ..protocol import MetadataResponse

_TOPICS_FIELD: Any = MetadataResponse._struct.fields["topics"]  # type: ignore[attr-defined]
_TOPIC_STRUCT: Any = _TOPICS_FIELD.array_of
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
# what an unset authorized-operations field holds on the wire (Kafka's -2147483648: "not requested")
OPERATIONS_OMITTED = -(1 << 31)


def flexible(version: int) -> bool:
    return bool(MetadataResponse.flexible_version_q(version))


def encode_topic(topic: Any, version: int) -> bytes:
    """One topic's entry of a Metadata answer at ``version``: the generic encoder's bytes for its struct."""
    compact = flexible(version)
    return bytes(_TOPIC_STRUCT.encode(topic, version=version, compact=compact, tagged=compact))


def _array_length(n: int, version: int) -> bytes:
    return encode_unsigned_varint(n + 1) if flexible(version) else _INT32.pack(n)


def _operations_bits(operations: set[int] | None) -> bytes:
    bits = 0
    for op in operations if operations is not None else (31,):
        bits |= 1 << op
    return _UINT32.pack(bits)


def with_operations(entry: bytes, operations: set[int] | None, version: int) -> bytes:
    """``entry`` (a topic's entry at ``version`` >= 8) with its authorized operations set to ``operations``
    (Kafka's bit field of ACL operation codes; None = not requested). The field is the entry's last before its tag
    buffer, which is empty in every entry this broker writes (one byte, 0, in flexible versions)."""
    end = len(entry) - (1 if flexible(version) else 0)
    return entry[: end - 4] + _operations_bits(operations) + entry[end:]


def encode_response(response: Any, version: int, entries: Sequence[bytes]) -> bytes:
    """The body of ``response`` at ``version`` with ``entries`` (encoded topic entries) as its topics; the
    ``topics`` of ``response`` itself are ignored (set to an empty list while its head and tail are encoded)."""
    response.topics = []
    empty = bytes(response.encode(version=version))
    empty_array = _array_length(0, version)
    head_size = len(empty) - _tail_size(response, version) - len(empty_array)
    if empty[head_size : head_size + len(empty_array)] != empty_array:  # never: the topics field moved
        raise AssertionError(f"Metadata v{version}: the topic array is not where it was expected")
    return b"".join(
        (empty[:head_size], _array_length(len(entries), version), *entries, empty[head_size + len(empty_array) :])
    )


def _tail_size(response: Any, version: int) -> int:
    """The size of what follows the topic array of ``response`` at ``version`` as the generic encoder writes it:
    the fields after it (a few bytes), then the tag buffer in flexible versions."""
    compact = flexible(version)
    struct_field = MetadataResponse._struct  # type: ignore[attr-defined]
    fields = struct_field.untagged_fields(version)
    after = fields[[f.name for f in fields].index("topics") + 1 :]
    size = sum(
        len(f.encode(getattr(response, f.name), version=version, compact=compact, tagged=compact)) for f in after
    )
    if compact:
        size += len(struct_field.tagged_fields(version).encode(response, version=version))
    return size


class TopicEntries:
    """Encoded Metadata entries of topics, per topic name and response version, valid while the topic's state
    is the one they were encoded from.

    Invariant: an entry under ``name`` was encoded from the Topic that ``build()`` returned for the state ``state``
    stored beside it; a lookup with another state (anything an entry shows changed: id, partitions, leaders,
    epochs, replicas, ISR, offline replicas, errors) drops every version's entry of that topic and encodes anew.
    The states are compared by value. A lookup by stamp (``current``) skips reading the state when no change was
    noted since it was last compared: storage/metadata_changes.py's stamp for a single node's logs, the view's
    (broker/cluster/state.ClusterView.stamp) in ZooKeeper mode; a broker's entries are all of one kind. A deleted
    topic's entries stay until ``discard`` or ``retain`` (called with the topics that exist) drops them.
    """

    def __init__(self) -> None:
        # name -> [stamp, state, Topic, {version: entry}]
        self._entries: dict[str, list[Any]] = {}
        self._names_by_id: tuple[int | None, dict[Any, str]] = (None, {})

    def names_by_id(self, stamp: int, build: Callable[[], dict[Any, str]]) -> dict[Any, str]:
        """The topics' names by id, as ``build()`` made them under ``stamp`` (made again once it moved: topics
        created or deleted)."""
        seen, names = self._names_by_id
        if seen != stamp:
            names = build()
            self._names_by_id = (stamp, names)
        return names

    def current(self, name: str, stamp: int | None, version: int) -> bytes | None:
        """The entry of topic ``name`` at ``version`` if its state was last checked under ``stamp`` (the
        storage's metadata_changes stamp, read before the check: nothing changed since), else None."""
        cached = self._entries.get(name)
        if cached is None or stamp is None or cached[0] != stamp:
            return None
        return self._encoded(cached, version)

    def entry(
        self, name: str, state: Hashable, build: Callable[[], Any], version: int, stamp: int | None = None
    ) -> bytes:
        """The entry of topic ``name`` at ``version`` for ``state`` (checked under ``stamp``, if one: read before
        ``state`` was); ``build()`` makes its Topic if the cached one is of another state."""
        cached = self._entries.get(name)
        if cached is None or cached[1] != state:
            cached = [stamp, state, build(), {}]
            self._entries[name] = cached
        else:
            cached[0] = stamp
        return self._encoded(cached, version)

    @staticmethod
    def _encoded(cached: list[Any], version: int) -> bytes:
        by_version = cached[3]
        encoded = by_version.get(version)
        if encoded is None:
            encoded = by_version[version] = encode_topic(cached[2], version)
        return encoded

    def discard(self, name: str) -> None:
        """Drop the entries of topic ``name`` (found deleted)."""
        self._entries.pop(name, None)

    def retain(self, names: Callable[[str], bool]) -> None:
        """Drop the entries of every topic for which ``names(topic)`` is false (deleted topics)."""
        for name in [n for n in self._entries if not names(n)]:
            del self._entries[name]

    def __len__(self) -> int:
        return len(self._entries)
