"""List the functions of src/kafkalog longer than a limit (80 lines by default), numba kernels apart.

``python -m tools.long_functions [--limit N] [SRC]``: one line per function, longest first, as
``lines  module:line  qualified name``; a function decorated with numba's ``njit`` (or ``intrinsic``) is a kernel
and is left out. The length runs from the ``def`` line (decorators excluded) to the function's last line.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

KERNEL_DECORATORS = {"njit", "jit", "intrinsic", "vectorize", "guvectorize"}


def _is_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in KERNEL_DECORATORS:
            return True
    return False


def _visit(node: ast.AST, prefix: str, file: str, limit: int, found: list[tuple[int, str, int, str]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            length = (child.end_lineno or child.lineno) - child.lineno + 1
            if length > limit and not _is_kernel(child):
                found.append((length, file, child.lineno, name))
            _visit(child, f"{name}.", file, limit, found)
        elif isinstance(child, ast.ClassDef):
            _visit(child, f"{prefix}{child.name}.", file, limit, found)


def long_functions(src: Path, limit: int) -> list[tuple[int, str, int, str]]:
    """(lines, file, line, qualified name) of every non-kernel function over ``limit`` lines, longest first."""
    found: list[tuple[int, str, int, str]] = []
    for path in sorted((src / "kafkalog").rglob("*.py")):
        _visit(ast.parse(path.read_text(), str(path)), "", str(path.relative_to(src)), limit, found)
    return sorted(found, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.long_functions", description=__doc__.splitlines()[0])
    parser.add_argument("src", nargs="?", default="src", type=Path)
    parser.add_argument("--limit", type=int, default=80)
    args = parser.parse_args()
    for length, file, line, name in long_functions(args.src, args.limit):
        print(f"{length:5d}  {file}:{line}  {name}")


if __name__ == "__main__":
    main()
