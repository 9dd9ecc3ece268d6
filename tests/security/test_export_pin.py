"""Issue 48 item 6: ``looper export`` runs the workspace's evaluate.py (its model-yaml check) only when it is the
one the tag pinned, as a night checks it; a changed one is refused unrun, naming both hashes. Real Store,
real files; the export itself (Ultralytics) is tests/e2e/test_export.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from looper.core.verdicts.verdict import Outcome
from looper.ship.export import ExportError, export
from looper.store import Store
from looper.workspace.hashes import file_sha256

WEIGHTS = "runs/t/00001/main-s0/out/weights.pt"


def _ws(tmp_path: Path, pin: bool = True) -> tuple[Path, Store]:
    root = tmp_path / "ws"
    (root / WEIGHTS).parent.mkdir(parents=True)
    (root / WEIGHTS).write_bytes(b"weights")
    (root / "evaluate.py").write_text("def architecture_problem(y):\n    return None\n")
    store = Store(root / "experiments.db")
    if pin:
        store.put_tag("t", branch="looper/t", base_commit="0" * 40, data_hash="d",
                      fixed_hashes={"evaluate.py": file_sha256(root / "evaluate.py")})
    eid = store.start_experiment(tag="t", kind="baseline", config={}, description="baseline")
    store.record_outcome(eid, outcome=Outcome.KEEP, score=0.5, verdict={"status": "pass"})
    store.add_run(eid, role="main", seed=0, score=0.5, metrics={"weighted_f1": 0.5},
                  weights_path=WEIGHTS, weights_sha256=file_sha256(root / WEIGHTS))
    return root, store


def test_an_evaluator_changed_since_the_tag_pinned_it_is_refused_unrun(tmp_path: Path) -> None:
    root, store = _ws(tmp_path)
    marker = tmp_path / "ran"
    (root / "evaluate.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef architecture_problem(y):\n"
                                      "    return None\n")
    with pytest.raises(ExportError, match=r"evaluate.py has sha256 .* the tag 't' pinned .*changed since the tag"):
        export(root, store, "t", tmp_path / "data", tmp_path / "best.pt")
    assert not marker.exists() and not (tmp_path / "best.pt").exists()
    (root / "evaluate.py").unlink()
    (root / "evaluate.py").symlink_to(tmp_path / "elsewhere.py")
    with pytest.raises(ExportError, match="has sha256 None"):
        export(root, store, "t", tmp_path / "data", tmp_path / "best.pt")


def test_a_tag_that_pinned_no_evaluator_exports_nothing(tmp_path: Path) -> None:
    root, store = _ws(tmp_path, pin=False)
    with pytest.raises(ExportError, match="no pinned evaluate.py"):
        export(root, store, "t", tmp_path / "data", tmp_path / "best.pt")


def test_the_pinned_evaluator_passes_the_check(tmp_path: Path) -> None:
    root, store = _ws(tmp_path)
    with pytest.raises(ExportError) as got:  # past the pin: the next check (the data's manifest) speaks
        export(root, store, "t", tmp_path / "data", tmp_path / "best.pt")
    assert "evaluate.py" not in str(got.value)
