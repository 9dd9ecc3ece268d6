"""The report lists a data set's classes in the order of its manifest (issue 38, point 3): a 4-class
import of one's own reads in its own class order, not looper's 26 and not sorted."""

from __future__ import annotations

import json
from pathlib import Path

from looper.report import report_text
from looper.report.classes import class_rows
from looper.report.facts import gather
from looper.store import Store

OWN = ["zeta_valve", "motorized_damper", "alpha_pump", "fire_damper"]  # neither sorted nor looper's order
PASS = {"status": "pass", "blocking": [], "metrics": {}, "confidence": 1.0}


def _night(root: Path) -> Store:
    store = Store(root / "experiments.db")
    store.put_tag("t", branch="looper/t", base_commit="a" * 40, fixed_hashes={}, data_hash="d" * 64)
    store.add_event("t", "start", "daemon started (pid 1)")
    classes = {c: {"tp": 9 - i, "fp": 1, "fn": 1 + i, "support": 10, "precision": 0.9, "recall": (9 - i) / 10,
                   "f1": 0.8, "count_error": 0.0} for i, c in enumerate(sorted(OWN))}
    b = store.start_experiment(tag="t", kind="baseline", parent=None, seed=0, config={"gate": {"score": "weighted_f1"}},
                               description="baseline", rationale="", source="x\n", diff="")
    store.record_outcome(b, outcome="keep", score=0.8, metrics={"weighted_f1": 0.8, "classes": classes},
                         verdict=PASS, commit="b" * 40, train_seconds=60.0, eval_seconds=5.0)
    return store


def _workspace(root: Path, manifest: bool) -> None:
    (root / "looper.toml").write_text('[data]\ndir = "mine"\n')
    (root / "mine").mkdir()
    if manifest:
        (root / "mine" / "manifest.json").write_text(json.dumps({"version": 2, "classes": OWN}))


def test_the_per_class_table_follows_the_manifests_order(tmp_path: Path) -> None:
    _workspace(tmp_path, manifest=True)
    store = _night(tmp_path)
    n = gather(store, tmp_path)
    assert n.class_order == tuple(OWN)
    assert [r["class"] for r in class_rows(n)] == OWN
    text = report_text(store, tmp_path)
    at = [text.index(f" {c} ") for c in OWN]
    assert at == sorted(at), text  # the text report's table in the same order


def test_without_a_readable_manifest_looper_s_order_then_the_rest_sorted(tmp_path: Path) -> None:
    _workspace(tmp_path, manifest=False)
    n = gather(_night(tmp_path), tmp_path)
    # looper's 26 first in their order (motorized_damper after fire_damper there), then unknown names sorted
    assert [r["class"] for r in class_rows(n)] == ["fire_damper", "motorized_damper", "alpha_pump", "zeta_valve"]
