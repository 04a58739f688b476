"""The partition layer (Kafka's cluster.Partition): leadership, ISR, high watermark and acks over a storage Log;
and ``readonly``, the read-only view of log dirs that every command that only reads uses.

Layering: record <- storage <- partition <- manager (LogManager, ReplicaManager) <- broker <- cli, spark.
"""

from .partition import LOG_END, READ_COMMITTED, READ_UNCOMMITTED, VALID_ACKS, Partition

__all__ = ["LOG_END", "READ_COMMITTED", "READ_UNCOMMITTED", "VALID_ACKS", "Partition"]
