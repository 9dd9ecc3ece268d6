"""No import cycle among looper's modules (read from the AST: every import, module-level or
inside a function). ``from pkg import sub`` runs ``pkg/__init__.py`` first, so it counts as
an import of ``pkg`` as well as of ``pkg.sub``: the store's package and its repository
importing each other was such a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "looper"


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = p
    return found


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    def owner(name: str) -> str | None:  # the looper module a dotted name lives in
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(owner(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets.add(owner(base))
                targets.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods)
        graph[mod] = {t for t in targets if t and t != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_looper_has_no_import_cycle() -> None:
    mods = modules(ROOT)
    assert "looper.store.repo" in mods and "looper.core.keep.gate" in mods
    assert cycles(import_graph(mods)) == []


def test_the_cycle_check_sees_a_package_and_its_module_importing_each_other(tmp_path: Path) -> None:
    pkg = tmp_path / "looper" / "store"
    pkg.mkdir(parents=True)
    (tmp_path / "looper" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from looper.store.repo import Store\n")
    (pkg / "models.py").write_text("")
    (pkg / "repo.py").write_text("from looper.store import models as m\n")
    graph = import_graph(modules(tmp_path / "looper"))
    assert graph["looper.store.repo"] == {"looper.store", "looper.store.models"}
    assert cycles(graph) == [["looper.store", "looper.store.repo"]]
    (pkg / "repo.py").write_text("import looper.store.models as m\n")
    assert cycles(import_graph(modules(tmp_path / "looper"))) == []
