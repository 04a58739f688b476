"""The rows the kafkalog Spark source should give for a topic, taken from the log layer (a test oracle)."""

from __future__ import annotations


def expected_rows(logs, topic: str, headers: bool = False, start: dict | None = None, end: dict | None = None):
    """Every partition's records of ``topic`` as ``LogManager.consume`` (Log.records, read_uncommitted) gives
    them, in the source's row shape; ``start``/``end`` bound offsets per partition (end exclusive)."""
    out = []
    for p in range(len(logs.describe_topic(topic).partitions)):
        for r in logs.consume(topic, p):
            if (start is not None and r.offset < start.get(p, 0)) or (end is not None and r.offset >= end[p]):
                continue
            row = {
                "key": r.key,
                "value": r.value,
                "topic": topic,
                "partition": p,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "timestampType": 0,
            }
            if headers:
                row["headers"] = [{"key": k, "value": v} for k, v in r.headers]
            out.append(row)
    return out
