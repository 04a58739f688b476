"""Kafka's murmur2 hash and the default partitioner for keyed records (BuiltInPartitioner, Utils.murmur2)."""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit MurmurHash2 with Kafka's seed, returned as a signed int32 like Java's."""
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    blocks = length // 4
    for i in range(0, blocks * 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & 3
    base = blocks * 4
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's Utils.toPositive: clear the sign bit."""
    return value & 0x7FFFFFFF


def default_partition(key: bytes, num_partitions: int) -> int:
    """Partition of a keyed record: ``(murmur2(key) & 0x7fffffff) % num_partitions``."""
    if key is None:
        raise ValueError("the default partitioner hashes keys; a record without a key has no fixed partition")
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
