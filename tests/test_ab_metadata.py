"""benchmarks.ab_metadata at a tiny size: a log dir of a few topics made by a broker, then one measuring round on
another broker over it (every answer checked in full by the benchmark itself; no timing asserted)."""

from __future__ import annotations

import argparse

from benchmarks import common
from benchmarks.ab_metadata import make_log_dir, measure


def test_a_round_measures_one_connection_and_a_storm(tmp_path):
    expected = make_log_dir(common.REPO, tmp_path / "logs", 30, 10)
    assert expected == {"meta-0000": 10, "meta-0001": 10, "meta-0002": 10}
    args = argparse.Namespace(repeats=3, storm=5, storms=2)
    figures = measure(common.REPO, tmp_path / "logs", expected, args)
    assert set(figures) == {"one conn p50 ms", "one conn max ms", "storm of 5 p50 ms", "storm of 5 max ms"}
    assert all(v > 0 for v in figures.values())


def test_a_cluster_view_round_measures_the_handler_and_digests_its_answers():
    from benchmarks.ab_metadata import measure_cluster_view

    args = argparse.Namespace(per_topic=10, repeats=2)
    first = measure_cluster_view(common.REPO, 30, args)  # a child process on the work tree's kafkalog
    again = measure_cluster_view(common.REPO, 30, args)
    assert set(first) == {
        "all, same view ms",
        "all, re-read unchanged ms",
        "set view ms",
        "all, one epoch moved ms",
        "one topic ms",
        "digests",
    }
    assert all(v > 0 for k, v in first.items() if k != "digests")
    assert first["digests"] == again["digests"] and first["digests"]["unchanged"] != first["digests"]["moved"]
