"""The night's orchestration in the fast tier: the real Loop, real git, a real SQLite store, on the fake
executor (tests/fakes/executor.py: no subprocess, no sandbox) with a scripted agent. Each test drives one
whole candidate through run_candidate and asserts what settle() did: the one outcome row, the branch,
the checkout, the halt. The same outcomes through real sandboxed runs: tests/night/test_experiment_inprocess.py.
The runtime is pinned and checked before each evaluation as always, its fingerprint taken once per session
(``runtime_taken_once``, tests/night/conftest.py: the fake executor runs nothing that could change it)."""

from __future__ import annotations

import json
import subprocess

import pytest
from fakes.agent import ScriptedAgent
from fakes.executor import FakeExecutor

from looper.config import load_config
from looper.core.verdicts.verdict import Outcome
from looper.errors import HarnessError
from looper.night.display import Display
from looper.night.experiment import run_candidate
from looper.night.loop import Loop
from looper.night.notify import AppriseNotifier
from looper.store import Store

pytestmark = pytest.mark.usefixtures("runtime_taken_once")


def night(ws, agent: ScriptedAgent, executor: FakeExecutor | None = None) -> Loop:
    cfg = load_config(ws.root / "looper.toml")
    loop = Loop(ws.root, cfg, Store(ws.root / "experiments.db"), executor or FakeExecutor(), agent,
                AppriseNotifier([]), display=Display(), program_md=(ws.root / "program.md").read_text())
    assert loop.setup() is None  # the baseline is measured (2 seeds) and kept
    return loop


def tip(ws) -> str:
    return ws.git("rev-parse", "looper/t")


def settled(ws) -> list[dict]:
    return [r for r in ws.rows() if r["status"] not in ("running", "pending")]


def test_keep_a_better_candidate_commits_on_the_branch_with_one_scored_row(ws):
    fake = FakeExecutor()
    loop = night(ws, ScriptedAgent({"QUALITY": 0.8}), fake)
    base = tip(ws)
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r is not None and r.outcome is Outcome.KEEP and r.halt_error is None
    (row,) = settled(ws)
    assert row["status"] == "keep" and row["score"] == pytest.approx(r.score) and row["score"] > 0.8
    assert row["parent"] == base and tip(ws) == row["commit"] != base
    assert json.loads(row["verdict_json"])["status"] == "pass"
    assert [c for c in fake.calls if c[0] == "train"] == [("train", 0), ("train", 1), ("train", 0)]  # baseline 2 seeds, then 1


def test_discard_a_worse_candidate_resets_to_the_parent(ws):
    loop = night(ws, ScriptedAgent({"QUALITY": 0.2}))
    base = tip(ws)
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.DISCARD
    (row,) = settled(ws)
    assert row["status"] == "discard" and row["score"] is not None
    assert tip(ws) == base and ws.git("status", "--porcelain", cwd=ws.worktree) == ""
    assert ws.git("rev-parse", f"refs/looper/discarded/{row['id']}") == row["commit"]


def test_a_crash_is_the_candidates_fault_with_a_signature_and_no_score(ws):
    loop = night(ws, ScriptedAgent({"SCENARIO": "crash"}))
    base = tip(ws)
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.CRASH and r.halt_error is None
    (row,) = settled(ws)
    assert row["status"] == "crash" and row["score"] is None and "ValueError" in row["failure_signature"]
    assert tip(ws) == base and ws.git("status", "--porcelain", cwd=ws.worktree) == ""


def test_a_broken_transport_is_a_harness_error_that_halts_and_leaves_the_commit(ws):
    fake = FakeExecutor()
    loop = night(ws, ScriptedAgent({"QUALITY": 0.8}), fake)
    fake.down = True  # the GPU host is gone: the candidate's run and the canary both fail
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.ERROR
    assert isinstance(r.halt_error, HarnessError) and r.halt_error.exit_code == 3
    (row,) = settled(ws)
    assert row["status"] == "error" and row["score"] is None
    assert json.loads(row["verdict_json"])["status"] == "error"
    assert tip(ws) == row["commit"]  # an error never resets: the commit stays for a person
    with pytest.raises(subprocess.CalledProcessError):
        ws.git("rev-parse", "--verify", f"refs/looper/discarded/{row['id']}")


def test_a_vacuous_run_is_never_green(ws):
    loop = night(ws, ScriptedAgent({"SCENARIO": "vacuous"}))
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.VACUOUS and r.halt_error is None
    (row,) = settled(ws)
    assert row["status"] == "vacuous" and row["score"] is None
