"""Kafka's rack-unaware replica assignment (AdminUtils.assignReplicasToBrokersRackUnaware).

The first replica of each partition goes round-robin over the sorted brokers from a random start; the other
replicas follow it at a shift that grows by one every time the partitions wrap around the brokers, so
leaders and followers both spread evenly.
"""

from __future__ import annotations

import random

from ...errors import InvalidPartitionsError, InvalidReplicationFactorError


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign_replicas(
    brokers: list[int],
    partitions: int,
    replication_factor: int,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replica list (the first is the preferred leader), as Kafka assigns them."""
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}."
        )
    ordered = sorted(brokers)
    n = len(ordered)
    rand = rng or random.Random()
    start = fixed_start_index if fixed_start_index >= 0 else rand.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rand.randrange(n)
    current = max(0, start_partition_id)
    result: dict[int, list[int]] = {}
    for _ in range(partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start) % n
        replicas = [ordered[first]]
        replicas += [ordered[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        result[current] = replicas
        current += 1
    return result
