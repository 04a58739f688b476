"""The quick form of the scale benchmark (benchmarks/bench_scale.py, ``make bench``'s "scale" row): hundreds of
partitions and connections on one ``kafkalog serve``. Functional properties only, never a timing: Metadata of
every topic lists every partition led by the broker (one at a time and from many connections at once), every
connection keeps answering, confluent-kafka producers and consumers write and read one record in every partition
exactly once, the broker's open descriptors, memory maps and RSS stay under the bounds computed from the
configuration before the run, and a restart after SIGTERM and after SIGKILL loads every partition with every
acknowledged record.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from benchmarks.bench_scale import QUICK, run_scale

PARAMS = replace(
    QUICK,
    topics=5,
    partitions_per_topic=40,
    topics_per_request=5,
    connections=250,
    metadata_storm=20,
    calibration_partitions=50,
    calibration_connections=50,
)


def test_hundreds_of_partitions_and_connections_within_bounds_across_restarts(tmp_path):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to read the broker's descriptors, maps and memory")
    result = run_scale(PARAMS, tmp_path)  # raises on a wrong answer, a lost record or a partition not loaded
    partitions = PARAMS.topics * PARAMS.partitions_per_topic
    bounds, peaks = result["bounds"], result["peaks"]
    assert result["failures"] == [], result["failures"]
    assert peaks["fds"] <= bounds["fds"] and peaks["maps"] <= bounds["maps"] and peaks["rss"] <= bounds["rss_bytes"]
    # the sampler saw the run: every partition's segment and every connection held a descriptor at the peak
    assert peaks["fds"] >= result["base"]["fds"] + partitions + PARAMS.connections
    assert result["connections"]["answering_after"] == PARAMS.connections
    assert result["metadata_storm"]["connections"] == PARAMS.metadata_storm
    for kind in ("clean", "unclean"):
        assert result["restart"][kind]["partitions_loaded"] == partitions
