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
