"""The core is pure, every module of the folder (read from the AST, imports at the top or inside a
function): no module that touches files, processes, the network, the clock or the database, and
no looper module outside looper.core. A new module under looper/core/ is checked without a list."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "looper" / "core"
#: What a pure module may import besides looper.core: numbers, text, data shapes, parsers of
#: values handed in (json, yaml, ast), digests of values handed in (hashlib, hmac: no file, no clock,
#: no randomness of their own), and sys for the names of the standard library only.
ALLOWED = {"__future__", "ast", "collections", "dataclasses", "datetime", "enum", "functools", "hashlib", "hmac",
           "itertools", "json", "math", "numpy", "posixpath", "pydantic", "random", "re", "scipy", "statistics",
           "sys", "typing", "yaml"}
MODULES = sorted(CORE.rglob("*.py"))


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def impure(names: set[str]) -> list[str]:
    return sorted(n for n in names if not (n.startswith("looper.core") or n.split(".")[0] in ALLOWED))


def test_the_folder_is_read_sub_packages_and_all() -> None:
    assert len(MODULES) > 30 and any(p.parent != CORE for p in MODULES)
    assert all((p.parent / "__init__.py").is_file() for p in MODULES)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(CORE).as_posix())
def test_a_core_module_imports_nothing_that_does_io(path: Path) -> None:
    assert impure(imports(path)) == []
    # sys only for its list of standard modules, never its streams or its exit
    uses = {f"sys.{n.attr}" for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "sys"}
    assert uses <= {"sys.stdlib_module_names"}, uses


def test_the_check_sees_io_and_looper_outside_the_core() -> None:
    assert impure({"os", "pathlib", "subprocess", "sqlite3", "looper.store", "time", "math"}) == [
        "looper.store", "os", "pathlib", "sqlite3", "subprocess", "time"]
