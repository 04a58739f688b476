"""Producer ids of a ZooKeeper cluster (Kafka's ZkProducerIdManager): blocks taken from /latest_producer_id_block.

Every broker of a cluster hands out producer ids, so they must come from one place: a broker takes a block
of 1000 by a conditional write of ``/latest_producer_id_block`` (ProducerIdBlockZNode: version, broker,
block_start, block_end, the numbers as strings as Kafka writes them) and only then uses its ids. Two brokers
taking a block at once conflict on the znode's version and the loser retries with the next block.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading

from ...errors import KafkaStorageError

PATH = "/latest_producer_id_block"
BLOCK_SIZE = 1000

log = logging.getLogger("kafka.coordinator.transaction.ProducerIdManager")


def encode_block(broker_id: int, start: int, end: int) -> bytes:
    return json.dumps(
        {"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)}, separators=(",", ":")
    ).encode()


def decode_block_end(data: bytes) -> int:
    """The last id of the recorded block (-1 when none has been taken)."""
    if not data:
        return -1
    return int(json.loads(data.decode())["block_end"])


class ZkProducerIdManager:
    """Invariant: every id returned lies in a block this broker recorded in ZooKeeper first."""

    def __init__(self, zk, broker_id: int) -> None:  # zk: a started kazoo KazooClient
        self.zk = zk
        self.broker_id = broker_id
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0  # exclusive

    def _take_block(self) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        for _ in range(100):
            try:
                data, stat = self.zk.get(PATH)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(PATH, b"", makepath=True)
                continue
            start = decode_block_end(data) + 1
            end = start + BLOCK_SIZE - 1
            try:
                self.zk.set(PATH, encode_block(self.broker_id, start, end), version=stat.version)
            except BadVersionError:
                continue
            log.info("[ProducerIdManager %d] acquired producer ids %d-%d", self.broker_id, start, end)
            self._next, self._end = start, end + 1
            return
        raise KafkaStorageError("Could not take a producer id block from ZooKeeper (too many conflicting writes)")

    def generate_producer_id(self) -> int:
        with self._lock:
            if self._next >= self._end:
                self._take_block()
            pid = self._next
            self._next += 1
            return pid
