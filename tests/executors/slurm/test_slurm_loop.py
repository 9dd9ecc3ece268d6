"""A night of two workers on the real single-node SLURM cluster: keeps and discards, every
run a batch job, one database."""

from __future__ import annotations

import pytest
from harness import make_ws, pages  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.e2e


def test_two_workers_on_slurm_keep_and_discard(make_ws, slurm_cluster, pages):  # noqa: F811
    ws = make_ws(exec_kind="slurm", exec_partition=slurm_cluster, loop_workers=2)
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    ws.enqueue("QUALITY 0.5 -> 0.2 (loses)", knobs={"QUALITY": 0.2, "SLEEP": 2.0})
    ws.enqueue("BONUS 0 -> 0.05", knobs={"BONUS": 0.05})
    r = ws.looper("run", "--max-experiments", "3", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = ws.by_description()
    assert rows["QUALITY 0.5 -> 0.8"]["status"] == "keep"
    assert rows["QUALITY 0.5 -> 0.2 (loses)"]["status"] == "discard"
    assert {r["worker"] for r in ws.rows()} == {"w0", "w1"}
    kept = [r for r in ws.rows() if r["status"] == "keep"]
    assert ws.git("rev-parse", "looper/t") == kept[-1]["commit"]
    # every run went through the scheduler: each run folder holds its batch script and job output
    runs = list((ws.root / "runs" / "t").glob("*/*-s*"))
    assert len(runs) >= 5  # the baseline (two seeds) and three candidates
    for run in runs:
        assert list((run / "slurm").iterdir()), f"no slurm job files in {run}"
        assert "fixture train.py starting" in (run / "train.log").read_text()
    assert pages.pages == []
