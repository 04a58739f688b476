"""benchmarks.ab_trees: which JSON leaves are figures, and how rounds become ratios (no benchmark is run)."""

from __future__ import annotations

from benchmarks.ab_trees import figures, summarise


def test_figures_are_the_times_of_one_run():
    data = {
        "codecs": {"none": {"build": {"best_s": 0.5, "mb_per_s": 40.0, "times_s": [0.5, 0.6], "records": 7}}},
        "lookup": {"p99_us": 80.0, "ms_per_pass": 3.0, "mb_per_cpu_s_read": 9.0},
        "parameters": {"warmup_s": 1.0},
        "goals": {"budget_s": 2.0},
        "profile": {"total_s": 1.0},
    }
    assert figures(data) == {"/codecs/none/build/best_s": 0.5, "/lookup/p99_us": 80.0, "/lookup/ms_per_pass": 3.0}


def test_summarise_gives_the_ratio_of_medians_and_the_per_round_spread():
    runs = {
        "old": [
            {"/a/best_s": 1.0, "/kafka-python/best_s": 2.0},
            {"/a/best_s": 1.2, "/kafka-python/best_s": 2.0},
            {"/a/best_s": 1.1, "/kafka-python/best_s": 2.0},
        ],
        "new": [
            {"/a/best_s": 1.3, "/kafka-python/best_s": 3.0},
            {"/a/best_s": 1.2, "/kafka-python/best_s": 3.0},
            {"/a/best_s": 1.2, "/kafka-python/best_s": 3.0},
        ],
    }
    rows = {row["figure"]: row for row in summarise(runs, "old", "new", 1.05)}
    a = rows["/a/best_s"]
    assert (a["old_median"], a["new_median"]) == (1.1, 1.2)
    assert abs(a["ratio"] - 1.2 / 1.1) < 1e-12 and a["worse"] and not a["control"]
    assert [round(r, 6) for r in a["round_ratios"]] == [1.3, 1.0, round(1.2 / 1.1, 6)]
    control = rows["/kafka-python/best_s"]
    assert control["control"] and not control["worse"] and control["ratio"] == 1.5
