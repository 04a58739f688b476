"""Reliability rows for untrusted files and bad input, for ``make reliability``.

``fuzz_summary(quick)`` runs every fuzz target of ``kafkalog.testing.fuzz`` over seeded random inputs (mutated
valid files and raw bytes) and counts the cases whose outcome broke the contract: anything but a result or a
located kafkalog error. ``bad_input_summary()`` runs the tests' bad-input catalogue (``tests/bad_inputs.py``,
also run case by case by ``tests/test_bad_input.py``) and counts, per entrance, the inputs rejected clearly.
``tests/test_fuzz_parsers.py`` holds the same fuzz checks in CI.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from kafkalog.testing.fuzz import TARGETS, run_cases

QUICK_CASES = 100
FULL_CASES = 2_000
_SLOW_TARGETS = ("cli_dump", "cli_dump_indexes", "cli_verify", "cli_recover", "spark_logfiles")
BAD_INPUTS_FILE = Path(__file__).resolve().parents[2] / "tests" / "bad_inputs.py"


def fuzz_summary(quick: bool) -> list[tuple[str, int, int]]:
    """(parser, cases run, unexpected exceptions) for every fuzz target; ``quick`` runs 100 cases each, else 2000."""
    rows = []
    for name in TARGETS:
        cases = QUICK_CASES if quick else FULL_CASES
        if name in _SLOW_TARGETS:
            cases //= 2
        ran, unexpected, _ = run_cases(name, cases)
        rows.append((name, ran, unexpected))
    return rows


def _bad_inputs_module() -> ModuleType:
    """``tests/bad_inputs.py``, under the name the tests import it by (``bad_inputs``), loaded once.

    The tests directory is not a package (pytest puts it on ``sys.path``), so the catalogue is loaded from its file.
    """
    module = sys.modules.get("bad_inputs")
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location("bad_inputs", BAD_INPUTS_FILE)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"the bad-input catalogue {BAD_INPUTS_FILE} is missing (run from a kafkalog checkout)")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bad_inputs"] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


def bad_input_summary() -> list[tuple[str, int, int]]:
    """(entrance, inputs tried, rejected clearly) per entrance, from the tests' catalogue."""
    summary: list[tuple[str, int, int]] = _bad_inputs_module().bad_input_summary()
    return summary
