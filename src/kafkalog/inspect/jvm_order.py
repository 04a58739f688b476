"""The iteration order of the JVM's hash sets of TopicPartitions, so that kafkalog prints them as Kafka's tools do.

Kafka's tools print some sets of partitions in their hash set's iteration order: the dump's transaction log
decoder a Scala 2.13 ``mutable.HashSet`` (TransactionMetadata.topicPartitions), ``kafka-transactions.sh
describe`` a Java ``HashSet`` (the admin client's TransactionDescription). Both orders follow only from the
elements' hash codes (Java's String.hashCode and TopicPartition.hashCode), the table size and, within a bucket,
the insertion order; they are computed here from those rules.
"""

from __future__ import annotations

from collections.abc import Iterable

_INT = 1 << 32


def _int32(n: int) -> int:
    n &= _INT - 1
    return n - _INT if n >= 1 << 31 else n


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, in int32 arithmetic."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & (_INT - 1)
    return _int32(h)


def topic_partition_hash(topic: str, partition: int) -> int:
    """Kafka's TopicPartition.hashCode: 31 * (31 + partition) + topic.hashCode(), in int32 arithmetic."""
    return _int32(31 * (31 + partition) + java_string_hash(topic))


def _improve(h: int) -> int:
    """Scala 2.13 mutable.HashSet.improveHash: h ^ (h >>> 16)."""
    return _int32(h ^ ((h & (_INT - 1)) >> 16))


def _table_size_for(capacity: int) -> int:
    """Scala 2.13 mutable.HashSet.tableSizeFor: highestOneBit(max(capacity - 1, 4)) * 2, at most 2^30."""
    return min((1 << (max(capacity - 1, 4).bit_length() - 1)) * 2, 1 << 30)


def scala_hash_set_order(groups: Iterable[Iterable[tuple[str, int]]]) -> list[tuple[str, int]]:
    """The iteration order of a Scala 2.13 ``mutable.HashSet[TopicPartition]`` filled group by group with ``++=``
    (TransactionMetadata.addPartitions, once per topic of the record, as readTxnRecordValue calls it).

    The set's table starts at 16 buckets (load factor 0.75); each ``++=`` first sizes it for the added
    collection (sizeHint). A group of up to 4 partitions is an immutable Set1..Set4, added one by one through
    ``addOne``, which doubles the table when the next element would reach the threshold; a larger group is an
    immutable.HashSet, whose elements go straight into the buckets (no growth check). A bucket keeps its nodes
    in ascending (signed) hash order; iteration walks the buckets in index order.
    """
    length = 16
    members: dict[tuple[str, int], int] = {}  # element -> improved hash, in insertion order
    for group in groups:
        items = list(dict.fromkeys(group))
        length = max(length, _table_size_for(int((len(items) + 1) / 0.75)))
        for tp in items:
            if tp in members:
                continue
            if len(items) <= 4 and len(members) + 1 >= int(length * 0.75):
                length *= 2
            members[tp] = _improve(topic_partition_hash(*tp))
    order = list(members)  # a stable sort keeps insertion order among equal hashes, as the bucket lists do
    return sorted(order, key=lambda tp: (members[tp] & (length - 1), members[tp]))


def java_hash_set_order(items: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The iteration order of a Java ``HashSet<TopicPartition>`` after adding ``items`` in order.

    java.util.HashMap: 16 buckets at the first insertion, doubled whenever the size passes 0.75 of the table;
    the spread hash is h ^ (h >>> 16); a bucket lists its entries in insertion order (a resize splits a bucket
    keeping that order); iteration walks the buckets in index order. (Buckets turned into trees, at 8 entries
    in a table of 64 or more, are not modelled: their order is still the insertion order for iteration in
    practice, as the tree keeps the list links.)
    """
    members = list(dict.fromkeys(items))
    length = 16
    while len(members) > int(length * 0.75):
        length *= 2
    spread = {tp: _improve(topic_partition_hash(*tp)) for tp in members}
    return sorted(members, key=lambda tp: spread[tp] & (length - 1))  # stable: insertion order within a bucket
