"""The import graph of src/kafkalog: the layer order of ARCHITECTURE.md and no import cycle, counting the imports
inside functions (tools/import_graph.py reads every module with ast)."""

from __future__ import annotations

from pathlib import Path

from tools import import_graph

SRC = Path(__file__).resolve().parents[1] / "src"

# Packages whose internal cycles are tolerated: none (issue 17 broke the last ones, inside kafkalog.cli). A cycle
# anywhere fails.
TOLERATED_PACKAGES: tuple[str, ...] = ()


def _tolerated(cycle: list[str]) -> bool:
    return any(all(module.startswith(package) for module in cycle) for package in TOLERATED_PACKAGES)


def test_every_import_goes_down_the_layers() -> None:
    violations, _ = import_graph.check(SRC)
    assert violations == []


def test_no_import_cycle_even_inside_functions() -> None:
    _, cycles = import_graph.check(SRC)
    assert [c for c in cycles if not _tolerated(c)] == []


def test_the_checker_sees_an_import_inside_a_function_and_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "kafkalog"
    (package / "storage").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "storage" / "__init__.py").write_text("")
    (package / "storage" / "a.py").write_text("def f():\n    from . import b\n")
    (package / "storage" / "b.py").write_text("from .a import f\n")
    (package / "manager.py").write_text("")
    (package / "storage" / "c.py").write_text("def g():\n    from ..manager import x\n")
    violations, cycles = import_graph.check(tmp_path)
    assert cycles == [["kafkalog.storage.a", "kafkalog.storage.b"]]
    assert violations == ["kafkalog.storage.c:2: storage module imports kafkalog.manager (manager)"]
