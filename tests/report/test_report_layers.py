"""The report package is layered without an import circle: each module imports only the
layers before it, and only the store's public records and queries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[2] / "looper" / "report"
#: module -> the report modules it may import (its layers below).
LAYERS: dict[str, set[str]] = {
    "fmt": set(),
    "night": {"fmt"},
    "attention": {"fmt", "night"},
    "classes": {"fmt", "night"},
    "noise": {"fmt", "night"},
    "lines": {"fmt", "night"},
    "facts": {"fmt", "night", "attention", "classes", "noise", "lines"},
    "confirm": {"fmt"},
    "history": {"fmt", "confirm"},
    "text": {"fmt", "night", "classes", "noise", "lines", "facts", "pictures", "confirm", "thresholds"},
    "svg": {"fmt", "night", "classes", "noise"},
    "pictures": {"night"},
    "pictures_html": {"pictures"},
    "thresholds": {"fmt", "night"},
    "html_page": {"fmt", "night", "classes", "noise", "lines", "facts", "svg", "pictures", "pictures_html", "confirm",
                  "thresholds"},
    "json_report": {"facts", "pictures", "thresholds"},
    "status": {"fmt"},
    "__init__": {"night", "facts", "history", "html_page", "text"},
}
STORE_PUBLIC = {"looper.store", "looper.store.queries"}


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_every_report_module_has_a_layer() -> None:
    assert {p.stem for p in REPORT.glob("*.py")} == set(LAYERS)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_report_module_imports_only_the_layers_below_it(name: str) -> None:
    imported = _imports(REPORT / f"{name}.py")
    report = {m.removeprefix("looper.report.") for m in imported if m.startswith("looper.report")}
    assert "looper.report" not in imported, "a submodule must not import the package (a circle)"
    assert report <= LAYERS[name], sorted(report - LAYERS[name])
    store = {m for m in imported if m.startswith("looper.store")}
    assert store <= STORE_PUBLIC, sorted(store - STORE_PUBLIC)
    assert not any(m.startswith("sqlalchemy") for m in imported)


def test_the_layer_table_has_no_circle() -> None:
    """A layer table with a circle would let the check above pass on a circle: it cannot."""
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name not in done:
            for below in LAYERS[name]:
                visit(below, (*path, name))
            done.add(name)

    for name in LAYERS:
        visit(name, ())
