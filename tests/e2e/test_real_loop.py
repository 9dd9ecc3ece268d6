"""The real thing through the loop: looper init, the real prepare.py (tiny scale), the real
train.py under the loop's budget, the real evaluate.py, the built-in planner with the real
program.md. The night runs once (module fixture); one test checks what holds whatever the
model learned, and one test per outcome of the tiny baseline (26 steps) checks that outcome, the
other skipping with the reason: a baseline that found something gates the planner's
candidate; a baseline that found nothing cannot gate, and the loop says so and halts. Never a
harness error about the data (Ultralytics writes label caches into the data folder)."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from looper.program import load_program
from looper.workspace import init_workspace

pytestmark = pytest.mark.e2e


@dataclass
class Night:
    root: Path
    run: subprocess.CompletedProcess[str]
    base: dict
    candidates: list[dict]
    classes: int
    metrics: dict
    halts: list[str]


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Night:
    root = init_workspace(tmp_path_factory.mktemp("real") / "ws", preset="tiny")
    r = subprocess.run([sys.executable, "-m", "looper.cli", "run", "--max-experiments", "1"], cwd=root,
                       capture_output=True, text=True, timeout=600)
    con = sqlite3.connect(root / "experiments.db")
    con.row_factory = sqlite3.Row
    rows = [dict(x) for x in con.execute("SELECT * FROM experiments ORDER BY id")]
    assert rows and rows[0]["kind"] == "baseline", (rows, r.stdout, r.stderr)
    base = rows[0]
    n = con.execute("SELECT COUNT(*) FROM class_metrics WHERE experiment_id=?", (base["id"],)).fetchone()[0]
    halts = [e[0] for e in con.execute("SELECT message FROM events WHERE kind='halt' ORDER BY id")]
    con.close()
    return Night(root, r, base, [x for x in rows if x["kind"] == "candidate"], n,
                 json.loads(base["metrics_json"] or "{}"), halts)


def test_real_night_on_tiny_data(night: Night) -> None:
    """Whatever the model learned: a measured baseline with all 26 classes on the real data."""
    base = night.base
    assert base["status"] == "keep", (night.run.stdout, night.run.stderr)
    assert night.classes == 26  # every class of the real data set, measured on whole test pages
    assert night.metrics["pages"] == 2 and night.metrics["truth"] > 0
    assert (night.root / "data" / "manifest.json").is_file()
    assert list((night.root / "runs" / "tiny").glob("*/*/out/weights.pt"))
    assert not [c for c in night.candidates if "data" in (c["blocking_json"] or "").lower()]


def test_real_night_baseline_that_found_something_gates_the_candidate(night: Night) -> None:
    if night.metrics.get("predictions", 0) == 0:
        pytest.skip("outcome condition: the tiny baseline (26 steps) predicted nothing on this machine; "
                    "test_real_night_baseline_that_found_nothing_cannot_gate checked that outcome")
    assert night.run.returncode == 0, night.run.stdout + night.run.stderr
    assert len(night.candidates) == 1, night.candidates
    cand = night.candidates[0]
    # the built-in planner's step: one knob of the real program.md's search plan, "NAME old -> new"
    knobs = {k.name for k in load_program(night.root / "program.md").knobs}
    assert re.fullmatch(r"[A-Z0-9_]+ \S+ -> \S+", cand["description"]), cand["description"]
    assert cand["description"].split()[0] in knobs, (cand["description"], knobs)
    assert cand["status"] in ("keep", "discard", "inconclusive"), cand
    assert cand["score"] is not None
    assert not night.halts, night.halts


def test_real_night_baseline_that_found_nothing_cannot_gate(night: Night) -> None:
    if night.metrics.get("predictions", 0) > 0:
        pytest.skip(f"outcome condition: the tiny baseline (26 steps) predicted {night.metrics['predictions']} boxes on "
                    "this machine; test_real_night_baseline_that_found_something_gates_the_candidate "
                    "checked that outcome")
    assert night.run.returncode == 3, night.run.stdout + night.run.stderr
    assert len(night.halts) == 1 and "cannot gate" in night.halts[0], night.halts
    # nothing is judged against a baseline that cannot gate
    assert all(c["status"] == "error" and c["score"] is None for c in night.candidates), night.candidates


def test_real_night_keeps_the_matched_boxes_and_the_report_draws_them(night: Night, tmp_path: Path) -> None:
    """Whatever the model learned: every evaluated run (through the real evaluation sandbox) left
    MATCHES.json beside METRICS.json with the same counts, and the report reads it: the confusion
    matrix as numbers (``looper report --json``) and as a picture (``--html``)."""
    from looper.core import matches as core_matches

    runs = sorted((night.root / "runs" / "tiny").glob("*/*/METRICS.json"))
    assert runs, (night.run.stdout, night.run.stderr)
    for metrics_path in runs:
        matches = json.loads(metrics_path.with_name("MATCHES.json").read_text())
        assert core_matches.problems(matches) == []
        implied = core_matches.implied_counts(matches)
        for name, c in json.loads(metrics_path.read_text())["classes"].items():
            assert implied.get(name, {"tp": 0, "fp": 0, "fn": 0}) == {k: c[k] for k in ("tp", "fp", "fn")}, name
    r = subprocess.run([sys.executable, "-m", "looper.cli", "report", "--json"], cwd=night.root, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pics = json.loads(r.stdout)["pictures"]
    best = pics["best"]["confusion"]
    assert best is not None and best["labels"][-1] == "background", pics
    assert sum(map(sum, best["matrix"])) >= night.metrics["truth"]  # every truth box sits in a column
    html_path = tmp_path / "report.html"
    r = subprocess.run([sys.executable, "-m", "looper.cli", "report", "--html", str(html_path)], cwd=night.root,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    page = html_path.read_text()
    assert 'id="pictures"' in page and 'id="confusion-best"' in page
