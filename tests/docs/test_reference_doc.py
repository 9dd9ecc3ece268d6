"""docs/REFERENCE.md is the user-facing contract: it must list every config key of the code with
the code's default, every experiment status, every command, and point nowhere outside the
repository."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from looper.cli import app
from looper.config import Config
from looper.core.verdicts.verdict import Outcome

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "REFERENCE.md").read_text()
CONFIG_SECTION = REFERENCE.split("## 5. looper.toml", 1)[1].split("\n## ", 1)[0]


def _config_keys() -> list[tuple[str, object]]:
    out = []
    for section, field in Config.model_fields.items():
        model = field.default_factory() if field.default_factory else field.default
        for key, f in type(model).model_fields.items():
            default = f.default_factory() if f.default_factory else f.default
            out.append((f"{section}.{key}", default))
    return out


def _toml(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else json.dumps(value)


@pytest.mark.parametrize("key,default", _config_keys(), ids=[k for k, _ in _config_keys()])
def test_every_config_key_is_documented_with_its_default(key: str, default: object) -> None:
    rows = [ln for ln in CONFIG_SECTION.splitlines() if ln.startswith(f"| `{key}` |")]
    assert rows, f"docs/REFERENCE.md section 5 has no row for {key}"
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == f"`{_toml(default)}`", f"{key}: the doc says {cells[1]}, the code's default is {_toml(default)}"


def test_no_documented_key_is_unknown_to_the_code() -> None:
    documented = set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", CONFIG_SECTION, flags=re.M))
    assert documented == {k for k, _ in _config_keys()}


def test_every_status_is_documented() -> None:
    table = REFERENCE.split("Each experiment ends in one outcome", 1)[1].split("`experiments` columns", 1)[0]
    for status in Outcome.values():
        assert f"`{status}`" in table, status


def test_every_command_is_documented() -> None:
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    names += [f"{g.name} {c.name}" for g in app.registered_groups for c in g.typer_instance.registered_commands]
    assert "run" in names and "baseline approve" in names
    for name in names:
        assert f"| `looper {name}` |" in REFERENCE, name
        assert f"    looper {name}" in REFERENCE, name


def test_no_doc_template_or_docstring_points_outside_the_repository() -> None:
    got = subprocess.run(["grep", "-rn", r"\.\./shared\|shared/CONTRACT", "README.md", "docs", "looper",
                          "looper.toml", "program.md"], cwd=ROOT, capture_output=True, text=True)
    assert got.returncode == 1 and got.stdout == "", got.stdout
