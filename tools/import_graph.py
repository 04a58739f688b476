"""Check kafkalog's import graph: the layer order and no cycles, counting imports inside functions too.

``python -m tools.import_graph [SRC]`` reads every module under ``SRC/kafkalog`` (default ``src``) with ``ast``
and collects each import statement wherever it stands: at module level, inside functions and methods, inside
``try`` and ``if`` blocks. Imports under ``if TYPE_CHECKING:`` count for the layer order but not for cycles
(they never run). An import names the module it loads: ``from a.b import c`` is an edge to ``a.b.c`` when that is
a module of the tree, else to ``a.b``; the parent packages Python initialises on the way are not edges (every
submodule would otherwise form a cycle with its package's ``__init__``).

Layers, lowest first (ARCHITECTURE.md): a module may import its own layer and the layers below it, never above.
It prints each violation and each cycle and exits 1 when there is any; ``tests/test_import_layers.py`` runs it.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

# (layer name, module prefixes), lowest first. A module belongs to the layer of its longest matching prefix.
# ``kafkalog`` itself (its ``__init__`` re-exports the public API) is the top; the log cleaner and the log-dir
# modules (meta.properties and the lock, the KRaft topic origins) sit above one partition's storage and below the
# partition layer, which reads log dirs through them.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("common", ("kafkalog.errors", "kafkalog.clock", "kafkalog.scheduler", "kafkalog.layout")),
    ("record", ("kafkalog.record",)),
    ("storage", ("kafkalog.storage",)),
    ("cleaner, log dirs", ("kafkalog.cleaner", "kafkalog.logdir", "kafkalog.topic_store", "kafkalog.topic_origins")),
    ("partition", ("kafkalog.partition",)),
    (
        "manager",
        (
            "kafkalog.manager",
            "kafkalog.manager_results",
            "kafkalog.log_loading",
            "kafkalog.dir_checkpoints",
            "kafkalog.logdir",
            "kafkalog.replica_manager",
            "kafkalog.retention",
            "kafkalog.coordinator",
        ),
    ),
    ("inspect", ("kafkalog.inspect",)),
    ("broker", ("kafkalog.broker",)),
    ("cli, spark", ("kafkalog.cli", "kafkalog.spark", "kafkalog.demo", "kafkalog.testing")),
    ("package", ()),
]
PACKAGE = "kafkalog"


@dataclass(frozen=True)
class Import:
    """One import statement of ``source`` loading ``target``, at ``line``; ``typing_only`` under TYPE_CHECKING."""

    source: str
    target: str
    line: int
    typing_only: bool


def module_names(src: Path) -> dict[str, Path]:
    """Every module of the ``kafkalog`` tree under ``src``: dotted name -> file (a package by its ``__init__``)."""
    names: dict[str, Path] = {}
    for path in sorted((src / "kafkalog").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(base: str, name: str, modules: dict[str, Path]) -> str:
    candidate = f"{base}.{name}" if base else name
    return candidate if candidate in modules else base


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """The kafkalog modules that ``module`` imports anywhere in its file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "kafkalog":
                    found.append(Import(module, alias.name, node.lineno, typing_only))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] == "kafkalog":
                for alias in node.names:
                    found.append(Import(module, _resolve(base, alias.name, modules), node.lineno, typing_only))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def layer_of(module: str) -> int:
    """Index in LAYERS of the layer ``module`` belongs to (its longest matching prefix); KeyError if none."""
    if module == PACKAGE:
        return len(LAYERS) - 1
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise KeyError(f"{module} is in no layer of tools/import_graph.py LAYERS: add it where it belongs")
    return best


def layer_violations(imports: list[Import]) -> list[str]:
    """Each import from a lower layer up to a higher one, as ``file:line: a (layer) imports b (layer)``."""
    out: list[str] = []
    for imp in dict.fromkeys(imports):
        low, high = layer_of(imp.source), layer_of(imp.target)
        if high > low:
            out.append(f"{imp.source}:{imp.line}: {LAYERS[low][0]} module imports {imp.target} ({LAYERS[high][0]})")
    return out


def cycles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself), runtime edges."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if not imp.typing_only and imp.source != imp.target:
            graph.setdefault(imp.source, set()).add(imp.target)
            graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        # iterative Tarjan: (node, iterator over its successors)
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def check(src: Path) -> tuple[list[str], list[list[str]]]:
    """(layer violations, import cycles) of the kafkalog tree under ``src``."""
    modules = module_names(src)
    imports = [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]
    return layer_violations(imports), cycles(imports)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else Path("src")
    violations, found = check(src)
    for line in violations:
        print(line)
    for component in found:
        print("cycle: " + " <-> ".join(component))
    print(f"{len(violations)} layer violations, {len(found)} import cycles")
    return 1 if violations or found else 0


if __name__ == "__main__":
    sys.exit(main())
