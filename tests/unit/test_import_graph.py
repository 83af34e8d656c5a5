"""The import graph of ``src/parley`` and ``bench/`` has no cycles, and the floors and
capabilities import only downwards.

The graph is read from the source with :mod:`ast`, not by importing: every ``import`` and
``from ... import`` counts, at module level, inside functions and under ``if TYPE_CHECKING:``
alike. A function-level or type-only import is still a dependency a reader has to hold in their
head, and hiding a circle behind one is how circles grow back.

``from package import name`` counts as an edge to ``package.name`` when that is a module, else to
``package`` itself. Bench scripts import each other by bare name (``bench/`` is on their
``sys.path``), so a bare name that is a file in ``bench/`` is that file.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
BENCH = ROOT / "bench"

# What each floor must not import. Core has no I/O and imports nothing but core; adapters
# implement core's ports; the service reaches adapters only through those ports and takes its
# settings as a value. Surfaces and the composition root (config, bootstrap) sit on top.
_COMPOSITION = ("parley.config", "parley.bootstrap", "parley.demo", "parley.testing")
FORBIDDEN = {
    "parley.core": ("parley.adapters", "parley.service", "parley.surfaces", *_COMPOSITION),
    "parley.adapters": ("parley.service", "parley.surfaces", *_COMPOSITION),
    "parley.service": ("parley.adapters", "parley.surfaces", *_COMPOSITION),
}

# The service layer's capabilities, lowest first (``service/__init__.py`` draws the map). A
# module may import its own capability and lower ones; meetings and workers, on one level, never
# import each other. Modules directly in ``service/`` other than the hub are the shared level.
CAPABILITY_LEVEL = {
    "mail": 1,
    "conversations": 2,
    "meetings": 3,
    "workers": 3,
    "tools": 4,
    "hub": 5,
    "bridge": 6,
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted((SRC / "parley").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    for path in sorted(BENCH.glob("*.py")):
        found[f"bench.{path.stem}"] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module ``name`` is, or the nearest enclosing one of ours (``a.b.C`` is ``a.b``)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _targets(module: str, path: Path) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    in_bench = module.startswith("bench.")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _named(alias.name, in_bench)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                found = list(_named(f"{source}.{alias.name}", in_bench, exact=True))
                yield from found or _named(source, in_bench)


def _named(name: str, in_bench: bool, *, exact: bool = False) -> Iterator[str]:
    if in_bench and f"bench.{name.split('.')[0]}" in MODULES and not name.startswith("parley"):
        name = f"bench.{name}"
    if exact:
        if name in MODULES:
            yield name
        return
    target = _resolve(name)
    if target is not None:
        yield target


def _graph() -> dict[str, set[str]]:
    return {
        module: {t for t in _targets(module, path) if t != module}
        for module, path in MODULES.items()
    }


GRAPH = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _show(cycle: frozenset[str]) -> str:
    return " <-> ".join(sorted(cycle))


def test_the_graph_sees_the_codebase() -> None:
    # A parser that found nothing would pass every check below.
    assert "parley.service.hub" in GRAPH["parley.bootstrap"]
    assert "parley.service.conversations.transcripts" in GRAPH["parley.service.conversations.tasks"]
    assert "bench.common" in GRAPH["bench.mcp_wake"]


def test_no_import_cycles() -> None:
    cycles = set(_cycles(GRAPH))
    found = sorted(_show(c) for c in cycles)
    assert not found, "import cycles (break them; see service/__init__.py):\n" + "\n".join(found)


def test_floors_import_only_downwards() -> None:
    wrong = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for floor, forbidden in FORBIDDEN.items()
        if module == floor or module.startswith(f"{floor}.")
        for target in targets
        if target.startswith(forbidden)
    ]
    assert not wrong, "imports against the floors:\n" + "\n".join(sorted(wrong))


def test_core_imports_only_core() -> None:
    wrong = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if module.startswith("parley.core")
        for target in targets
        if target.startswith("parley.") and not target.startswith("parley.core")
    ]
    assert not wrong, "\n".join(sorted(wrong))


def _capability(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["parley", "service"] or len(parts) < 3:
        return None  # parley.service itself re-exports the hub
    if parts[2] in CAPABILITY_LEVEL:
        return parts[2]
    return "shared"


def test_capabilities_import_only_downwards() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        mine = _capability(module)
        if mine is None:
            continue
        level = CAPABILITY_LEVEL.get(mine, 0)
        for target in targets:
            theirs = _capability(target)
            if theirs is None or theirs == mine:
                continue
            their_level = CAPABILITY_LEVEL.get(theirs, 0)
            if their_level >= level:
                wrong.append(f"{module} ({mine}) -> {target} ({theirs})")
    assert not wrong, "a capability imports its own level or above:\n" + "\n".join(sorted(wrong))
