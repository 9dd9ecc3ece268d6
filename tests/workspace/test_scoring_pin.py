"""What evaluates is pinned: the looper modules evaluate.py and prepare.py import (matching
rules, class list) are hashed with the fixed files, and a change to one mid-tag halts the
night as a harness error that names it (issue 12, part 6)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness import make_ws, pages  # noqa: F401  (pytest fixtures)

import looper.core.scoring.metrics
from looper.workspace.hashes import PACKAGE_PARENT, SCORING_MODULES, file_sha256, fixed_hashes

REPO = Path(__file__).resolve().parents[2]


def _imported_looper_modules(script: str) -> set[str]:
    """The looper modules a fixed file pulls in when it is imported, as package-relative paths."""
    code = ("import json, runpy, sys; sys.argv = ['x', '--help']\n"
            f"try:\n    runpy.run_path({script!r}, run_name='not_main')\nexcept SystemExit:\n    pass\n"
            "import looper\nroot = looper.__file__.rsplit('/looper/', 1)[0] + '/'\n"
            "print(json.dumps(sorted(m.__file__[len(root):] for n, m in list(sys.modules.items())\n"
            "                        if (n == 'looper' or n.startswith('looper.')) and getattr(m, '__file__', None))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_pin_covers_every_looper_module_the_fixed_files_import() -> None:
    used = _imported_looper_modules(str(REPO / "evaluate.py")) | _imported_looper_modules(str(REPO / "prepare.py"))
    assert "looper/core/scoring/metrics.py" in used and "looper/core/scoring/classes.py" in used
    assert used <= set(SCORING_MODULES), f"not pinned: {sorted(used - set(SCORING_MODULES))}"
    assert PACKAGE_PARENT / "looper/core/scoring/metrics.py" == Path(looper.core.scoring.metrics.__file__).resolve()


def test_fixed_hashes_cover_the_scoring_modules(tmp_path: Path) -> None:
    pkg = tmp_path / "site"
    for rel in SCORING_MODULES:
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PACKAGE_PARENT / rel, pkg / rel)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "evaluate.py").write_text("print(1)\n")
    before = fixed_hashes(ws, ("evaluate.py",), package_parent=pkg)
    assert set(before) == {"evaluate.py", *SCORING_MODULES}
    assert before["looper/core/scoring/metrics.py"] == file_sha256(PACKAGE_PARENT / "looper/core/scoring/metrics.py")
    with open(pkg / "looper/core/scoring/metrics.py", "a") as f:
        f.write("\nIOU = 0.3  # an upgrade that changes every score\n")
    after = fixed_hashes(ws, ("evaluate.py",), package_parent=pkg)
    assert [n for n in before if before[n] != after[n]] == ["looper/core/scoring/metrics.py"]


@pytest.mark.e2e
def test_a_scoring_module_changed_mid_tag_is_a_harness_error_naming_it(make_ws, pages, tmp_path):  # noqa: F811
    """The daemon runs from a copy of the looper package (PYTHONPATH); the tag's baseline is
    measured, then the copy's looper/core/scoring/metrics.py is edited: the next night halts (exit 3),
    measures nothing, and the page and the experiment's blocking reasons name the module."""
    site = tmp_path / "site"
    shutil.copytree(PACKAGE_PARENT / "looper", site / "looper", ignore=shutil.ignore_patterns("__pycache__"))
    ws = make_ws()
    env = ws.env()
    env["PYTHONPATH"] = str(site)
    which = subprocess.run([sys.executable, "-c", "import looper.workspace.hashes as d; print(d.PACKAGE_PARENT)"],
                           env=env, cwd=ws.root, capture_output=True, text=True, check=True)
    assert Path(which.stdout.strip()) == site.resolve(), "the daemon would not run from the copy"
    ws.baseline_only(env=env)
    with ws.db() as con:
        pinned = json.loads(con.execute("SELECT fixed_hashes_json FROM tags").fetchone()[0])
    assert pinned["looper/core/scoring/metrics.py"] == file_sha256(site / "looper/core/scoring/metrics.py")
    with open(site / "looper/core/scoring/metrics.py", "a") as f:
        f.write("\n# upgraded mid-tag\n")
    ws.enqueue("never measured", knobs={"QUALITY": 0.9})
    r = ws.looper("run", "--max-experiments", "1", env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    assert len(pages.pages) == 1 and "looper/core/scoring/metrics.py changed" in json.dumps(pages.pages[0])
    (row,) = ws.rows()
    assert row["status"] == "error" and row["score"] is None
    assert "fixed file looper/core/scoring/metrics.py changed since the tag began" in row["blocking_json"]
    with ws.db() as con:
        trained = con.execute("SELECT COUNT(*) FROM runs r JOIN experiments e ON e.id = r.experiment_id "
                              "WHERE e.kind = 'candidate'").fetchone()[0]
    assert trained == 0, "a candidate was measured with the changed matching rules"


def test_a_fixed_file_of_an_older_looper_is_named_with_the_module_it_imports(tmp_path: Path) -> None:
    from looper.workspace.hashes import stale_imports

    old = "looper.core" + ".metrics"  # an old path, spelt so that /work/regroup.py leaves it as it is
    (tmp_path / "evaluate.py").write_text(f"from {old} import IOU\nimport looper.core.scoring.metrics\n")
    (tmp_path / "prepare.py").write_text("from looper.core.scoring.classes import CLASSES\nfrom . import x\n")
    (tmp_path / "train.py").write_text("def broken(:\n")
    got = stale_imports(tmp_path, ("evaluate.py", "prepare.py", "train.py", "absent.py"))
    assert got == [f"evaluate.py imports {old}, which this looper does not have: the workspace was "
                   "made by an older looper; copy evaluate.py from a new `looper init` and start a new tag"]
    assert stale_imports(REPO, ("evaluate.py", "prepare.py")) == []
    (tmp_path / "evaluate.py").write_text("from looper.core.scoring.metrics import IOU, tile_grid\n")  # tile_grid moved
    assert stale_imports(tmp_path, ("evaluate.py",)) == [
        "evaluate.py imports tile_grid from looper.core.scoring.metrics, which this looper does not have there: the "
        "workspace was made by an older looper; copy evaluate.py from a new `looper init` and start a new tag"]
