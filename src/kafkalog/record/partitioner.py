"""Kafka's murmur2 hash and the default partitioner for keyed records (BuiltInPartitioner, Utils.murmur2).

One implementation of the hash, the numba function ``_hash``: ``murmur2`` hashes one key with it, and
``murmur2_partitions`` a whole Arrow column of keys laid end to end (the Spark sink's partitioning).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from .builder import binary_columns

_SEED = 0x9747B28C


@njit(cache=True, nogil=True, inline="always")
def _hash(data, pos, length):  # pragma: no cover - compiled
    """32-bit MurmurHash2 with Kafka's seed of ``data[pos : pos + length]``, as an unsigned value in an int64."""
    m = 0x5BD1E995
    mask = 0xFFFFFFFF
    h = (_SEED ^ length) & mask
    blocks = length // 4
    for b in range(blocks):
        j = pos + 4 * b
        k = np.int64(data[j]) | (np.int64(data[j + 1]) << 8) | (np.int64(data[j + 2]) << 16)
        k |= np.int64(data[j + 3]) << 24
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = length & 3
    base = pos + blocks * 4
    if tail == 3:
        h ^= np.int64(data[base + 2]) << 16
    if tail >= 2:
        h ^= np.int64(data[base + 1]) << 8
    if tail >= 1:
        h ^= np.int64(data[base])
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


@njit(cache=True, nogil=True)
def _murmur2_keys(data, starts, lengths):  # pragma: no cover - compiled
    """``_hash`` of every key ``data[starts[i] : starts[i] + lengths[i]]`` (0 for a null key, whose length is -1)."""
    n = lengths.shape[0]
    out = np.zeros(n, np.int64)
    for i in range(n):
        if lengths[i] >= 0:
            out[i] = _hash(data, starts[i], lengths[i])
    return out


@njit(cache=True, nogil=True)
def _murmur2_bytes(data):  # pragma: no cover - compiled
    """``_hash`` of one whole key (a ``bytes`` object: no array to build, about half a microsecond a call)."""
    return _hash(data, 0, len(data))


def murmur2(data: bytes) -> int:
    """32-bit MurmurHash2 with Kafka's seed, returned as a signed int32 like Java's."""
    h = int(_murmur2_bytes(data if type(data) is bytes else bytes(data)))
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


def murmur2_partitions(keys: pa.Array, num_partitions: np.ndarray | int) -> np.ndarray:
    """``toPositive(murmur2(key)) % num_partitions`` per key (Kafka's default partitioner); -1 for null keys.
    ``num_partitions`` is one count or one per key."""
    data, starts, lengths = binary_columns(keys)
    hashed = _murmur2_keys(np.ascontiguousarray(data), starts.astype(np.int64), lengths.astype(np.int64))
    return np.where(lengths >= 0, (hashed & 0x7FFFFFFF) % np.asarray(num_partitions, dtype=np.int64), -1)
