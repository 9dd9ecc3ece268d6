"""Parallel workers on one workspace: distinct checkouts, one database, and candidates
that raced a keep merged onto the new best and rerun (never kept on a source that was not
the one measured)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e


def _race(make_ws, slow: str, knobs: dict):  # noqa: ANN001, ANN202
    """Two workers: a fast winner (QUALITY 0.5 -> 0.7), and ``slow`` (3 s longer) that finishes after its
    keep; the night run to its stop rule. Returns the workspace and the two rows (fast, slow)."""
    ws = make_ws(loop_workers=2)
    ws.enqueue("fast: QUALITY 0.5 -> 0.7", knobs={"QUALITY": 0.7})
    ws.enqueue(slow, knobs={**knobs, "SLEEP": 3.0})
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    exps = ws.by_description()
    fast = exps["fast: QUALITY 0.5 -> 0.7"]
    assert fast["status"] == "keep"
    return ws, fast, exps[slow]


def test_two_workers_race_clean_merge_is_rerun_and_kept(make_ws):
    # one fast winner, and one slow winner on another line that finishes after the keep
    ws, fast, slow = _race(make_ws, "slow: BONUS 0 -> 0.1", {"BONUS": 0.1})
    assert {fast["worker"], slow["worker"]} == {"w0", "w1"}
    # the slow one beat the best it started from; the best had moved: merged and rerun
    assert slow["status"] == "keep", slow
    assert slow["parent"] == fast["commit"]
    assert "QUALITY = 0.7" in slow["source"] and "BONUS = 0.1" in slow["source"]
    assert slow["score"] > fast["score"]
    with ws.db() as con:
        roles = [r[0] for r in con.execute("SELECT role FROM runs WHERE experiment_id=? ORDER BY id",
                                           (slow["id"],))]
    assert roles[:2] == ["main", "rerun"]  # the merged source was measured, and that is what was kept
    assert ws.git("rev-parse", "looper/t") == slow["commit"]
    assert ws.git("show", f"{slow['commit']}:train.py") == slow["source"]
    assert ws.events("note") and "merged cleanly" in json.dumps(ws.events("note"))


def test_two_workers_race_conflicting_merge_is_discarded_with_reason(make_ws):
    ws, fast, slow = _race(make_ws, "slow: QUALITY 0.5 -> 0.6", {"QUALITY": 0.6})
    assert slow["status"] == "discard"
    assert f"conflicts with kept change #{fast['id']}" in slow["blocking_json"]
    assert ws.git("rev-parse", "looper/t") == fast["commit"]
    # handed back, not excluded: the agent's next prompt lists no exclusion for it
    from looper.agents.view import build_history
    from looper.store import Store

    h = build_history(Store(ws.root / "experiments.db"), "t", "weighted_f1")
    assert not any("0.6" in e for e in h.exclusions)
    assert [e.excluded for e in h.experiments if e.id == slow["id"]] == [False]


def test_status_and_report_show_each_worker(make_ws):
    ws = make_ws(loop_workers=2)
    ws.enqueue("a: QUALITY 0.5 -> 0.3", knobs={"QUALITY": 0.3})
    ws.enqueue("b: QUALITY 0.5 -> 0.4", knobs={"QUALITY": 0.4, "SLEEP": 1.0})
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = ws.rows()
    report = ws.looper("report")
    assert report.returncode == 0, report.stderr
    for w in ("w0", "w1"):
        mine = [x for x in rows if x["worker"] == w]
        assert f"{w}: {len(mine)} experiment(s)" in report.stdout, report.stdout
        assert f"last #{mine[-1]['id']} {mine[-1]['status']}" in report.stdout
