"""A/B of any benchmark over two (or more) source trees, in one run, by CPU time.

Run: ``python -m benchmarks.ab_trees --old DIR --new DIR --only record,storage --rounds N [--quick]``.
``DIR`` is a checkout (or ``git worktree``/``git archive``) whose ``src/`` holds the ``kafkalog`` to measure;
``--old`` may be repeated (each old tree is compared with the new one). The benchmark code is always this
repository's ``benchmarks/`` (the same workload for every tree): each run is a child interpreter with the tree's
``src`` first on ``PYTHONPATH``, started from this repository's root.

The machine is shared (2 cores, load 10+), so wall clock says more about the neighbours than the code. Two
CPU measures are taken instead:

- ``process CPU s``: user + system seconds of the whole child (``os.wait4``, its reaped children included);
- every time figure of the benchmark's JSON (``*_s``, ``*_ms``, ``*_us``, ``ms_per_*``), measured with the
  benchmark's own code but with its clock (``time.perf_counter`` in the benchmark module and
  ``benchmarks.common``, and the timing helper of ``bench_dump``'s children) swapped for the CPU clock of the
  process (``time.process_time``: all threads) or of the child (its ``ru_utime + ru_stime``). ``--clock wall``
  keeps the benchmark's wall clock instead.

The rounds alternate the trees, in reversed order every other round (A B, B A, A B, ...), so drift in the
machine's load falls on both. Each figure's answer is the median over rounds per tree, the ratio new/old of
the medians, and the spread of the per-round ratios (new of round i over old of round i). A figure whose
ratio exceeds ``--threshold`` (default 1.05) is flagged. Figures of other libraries measured by the same
benchmarks (kafka-python, aiokafka, raw file copies) are the controls: their ratios show the noise.
Results go to ``--out`` (default ``benchmarks/results/restructure-ab.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from . import common

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "restructure-ab.json"
# The last key of a JSON path that holds a time (a cost: more is worse).
_TIME_KEY = re.compile(r"(_s|_ms|_us)$|^(ms|us)_per_")
_RATE_KEY = re.compile(r"per_s$|per_cpu_s")  # a rate (more is better): the same figure as its time, left out
# Paths that are not figures of one run (lists of repeats, profiles, parameters, goals' thresholds).
_SKIP = ("[", "profile", "/parameters", "/machine", "/goals")
# Figures that do not run kafkalog code: the noise of the machine.
_CONTROLS = ("kafka-python", "aiokafka", "/raw", "copyfile", "read_write_loop", "rss")


def _cpu_clock_module(original: types.ModuleType) -> types.SimpleNamespace:
    """A stand-in for the ``time`` module whose ``perf_counter`` reads the process's CPU clock."""
    proxy = types.SimpleNamespace(**{k: getattr(original, k) for k in dir(original) if not k.startswith("__")})
    proxy.perf_counter = time.process_time
    proxy.perf_counter_ns = time.process_time_ns
    return proxy


def _child(name: str, results_dir: Path, quick: bool, clock: str) -> int:
    """Run benchmark ``name`` in this process (the child), with the CPU clock if asked."""
    import importlib

    from rich.console import Console

    from .run import BENCHMARKS

    module = importlib.import_module(BENCHMARKS[name])
    if clock == "cpu":
        for mod in (module, common):
            if isinstance(getattr(mod, "time", None), types.ModuleType):
                mod.time = _cpu_clock_module(time)  # type: ignore[attr-defined]
        measure = getattr(module, "_MEASURE", None)  # bench_dump times its children from a helper process
        if isinstance(measure, str):
            patched = measure.replace("elapsed = time.perf_counter() - t0", "elapsed = usage.ru_utime + usage.ru_stime")
            if patched == measure:
                raise SystemExit(f"{name}: cannot switch the child timing to CPU time (bench_dump._MEASURE changed)")
            module._MEASURE = patched  # type: ignore[attr-defined]
    with open(os.devnull, "w") as null:
        module.run(quick=quick, results_dir=results_dir, console=Console(file=null, width=150))
    return 0


def _run_one(tree: Path, name: str, quick: bool, clock: str, work: Path) -> dict[str, Any]:
    """One child over ``tree``: the benchmark's JSON plus the child's CPU and wall seconds."""
    results = Path(tempfile.mkdtemp(dir=work))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree / "src"), str(common.REPO)]))
    cmd = [sys.executable, "-m", "benchmarks.ab_trees", "--child", name, "--results-dir", str(results)]
    cmd += ["--clock", clock] + (["--quick"] if quick else [])
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=common.REPO, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{name} over {tree} failed:\n{err.read().decode(errors='replace')[-3000:]}")
    data = json.loads((results / f"{name}.json").read_text())
    return {"json": data, "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall}


def figures(data: Any, path: str = "") -> dict[str, float]:
    """The time figures of one benchmark JSON by path (see _TIME_KEY and _SKIP)."""
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(figures(value, f"{path}/{key}"))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        key = path.rsplit("/", 1)[-1]
        if _TIME_KEY.search(key) and not _RATE_KEY.search(key) and not any(s in path for s in _SKIP):
            out[path] = float(data)
    return out


def summarise(runs: dict[str, list[dict[str, float]]], old: str, new: str, threshold: float) -> list[dict[str, Any]]:
    """One row per figure present in every run of both trees: medians, ratio new/old, per-round spread."""
    rows = []
    common_keys = set.intersection(*(set(r) for side in (old, new) for r in runs[side]))
    for key in sorted(common_keys):
        olds, news = [r[key] for r in runs[old]], [r[key] for r in runs[new]]
        med_old, med_new = statistics.median(olds), statistics.median(news)
        if med_old <= 0:
            continue
        per_round = [n / o for o, n in zip(olds, news, strict=False) if o > 0]
        ratio = med_new / med_old
        rows.append(
            {
                "figure": key,
                "control": any(c in key for c in _CONTROLS),
                "old_median": med_old,
                "new_median": med_new,
                "ratio": ratio,
                "round_ratios": per_round,
                "worse": ratio > threshold and not any(c in key for c in _CONTROLS),
            }
        )
    return rows


def _write(
    args: argparse.Namespace,
    argv: list[str] | None,
    trees: dict[str, Path],
    new: str,
    names: list[str],
    runs: dict[str, dict[str, list[dict[str, float]]]],
    started: float,
    done: int,
) -> dict[str, Any]:
    """Summarise the rounds done so far into ``args.out`` (rewritten after every round); the comparisons."""
    comparisons = {
        old: {name: summarise(runs[name], old, new, args.threshold) for name in names} for old in trees if old != new
    }
    result = {
        "command": "python -m benchmarks.ab_trees " + " ".join(sys.argv[1:] if argv is None else argv),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "elapsed_s": time.time() - started,
        "machine": common.platform_info(),
        "load_average": os.getloadavg(),
        "parameters": {
            "rounds": args.rounds,
            "rounds_done": done,
            "quick": args.quick,
            "clock": args.clock,
            "threshold": args.threshold,
            "warmup": args.warmup,
        },
        "new": new,
        "comparisons": comparisons,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return comparisons


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab_trees", description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, action="append", help="a tree to compare with --new (repeatable)")
    parser.add_argument("--new", type=Path, help="the tree under test")
    parser.add_argument("--only", default="record,storage,manager,dump,cleaner", help="comma-separated benchmarks")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the benchmarks' quick forms")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--threshold", type=float, default=1.05)
    parser.add_argument(
        "--warmup", action="store_true", help="run each benchmark once per tree first, not counted (numba caches)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.results_dir, args.quick, args.clock)
    if not args.old or not args.new:
        parser.error("--old and --new are required")
    trees = {str(t.resolve()): t.resolve() for t in [*args.old, args.new]}
    new = str(args.new.resolve())
    names = [n for n in args.only.split(",") if n]
    runs: dict[str, dict[str, list[dict[str, float]]]] = {n: {t: [] for t in trees} for n in names}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="kafkalog-ab-trees-") as work:
        if args.warmup:  # a fresh tree compiles its numba kernels into its own cache on first use
            for name in names:
                for tree in trees:
                    _run_one(trees[tree], name, args.quick, args.clock, Path(work))
        for rnd in range(args.rounds):
            order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
            for name in names:
                for tree in order:
                    one = _run_one(trees[tree], name, args.quick, args.clock, Path(work))
                    figs = figures(one["json"])
                    figs["/process CPU s"] = one["cpu_s"]
                    figs["/process wall s"] = one["wall_s"]
                    runs[name][tree].append(figs)
                    print(
                        f"round {rnd + 1} {name} {tree}: cpu {one['cpu_s']:.1f} s wall {one['wall_s']:.1f} s",
                        flush=True,
                    )
            _write(args, argv, trees, new, names, runs, started, rnd + 1)
    comparisons = _write(args, argv, trees, new, names, runs, started, args.rounds)
    for old, per_bench in comparisons.items():
        print(f"\nnew {new} / old {old} (medians of {args.rounds} rounds, clock {args.clock})")
        for name, rows in per_bench.items():
            for row in rows:
                spread = f"{min(row['round_ratios']):.2f}-{max(row['round_ratios']):.2f}"
                mark = " WORSE" if row["worse"] else (" (control)" if row["control"] else "")
                print(f"  {name}{row['figure']}: {row['ratio']:.3f} [{spread}]{mark}")
    print(f"\nwritten {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
