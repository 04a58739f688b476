"""Run the benchmarks: ``python -m benchmarks.run [--quick] [--only NAME] [--results-dir DIR]``.

Each benchmark module writes ``<results-dir>/<name>.json`` and prints its tables. The run reports the
figures and whether the goals are met; it fails only when a benchmark itself fails (a wrong result).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from rich.console import Console

BENCHMARKS = {
    "record": "benchmarks.bench_record",
    "storage": "benchmarks.bench_storage",
    "manager": "benchmarks.bench_manager",
    "dump": "benchmarks.bench_dump",
    "cleaner": "benchmarks.bench_cleaner",
    "spark": "benchmarks.bench_spark",
    "broker": "benchmarks.bench_broker",
    "scale": "benchmarks.bench_scale",
    "recovery": "benchmarks.bench_recovery",
}
DEFAULT_RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (few records, few repeats)")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable); one of: {', '.join(BENCHMARKS)}",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=DEFAULT_RESULTS,
        help=f"where to write the JSON files (default {DEFAULT_RESULTS})",
    )
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 150)  # wide tables even when piped
    for name in args.only or list(BENCHMARKS):
        console.rule(f"benchmark: {name}" + (" (quick)" if args.quick else ""))
        module = importlib.import_module(BENCHMARKS[name])
        module.run(quick=args.quick, results_dir=args.results_dir, console=console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
