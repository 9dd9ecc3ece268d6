"""The command line: exit codes, clear errors that name the thing, one verdict object."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from looper.cli import app
from looper.core.verdicts.verdict import Outcome, Verdict
from looper.store import Store
from looper.workspace.create import init_workspace

runner = CliRunner()


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = init_workspace(tmp_path / "ws")
    monkeypatch.setenv("LOOPER_WORKSPACE", str(root))
    return root


def test_init_makes_a_committed_workspace_with_the_project_files(tmp_path: Path):
    r = runner.invoke(app, ["init", str(tmp_path / "w"), "--preset", "demo"])
    assert r.exit_code == 0, r.output
    root = tmp_path / "w"
    for name in ("program.md", "train.py", "prepare.py", "evaluate.py", "looper.toml", ".gitignore"):
        assert (root / name).is_file(), name
    assert (Path(__file__).parents[2] / "train.py").read_text() == (root / "train.py").read_text()
    log = subprocess.run(["git", "log", "--oneline"], cwd=root, capture_output=True, text=True, check=True)
    assert len(log.stdout.splitlines()) == 1
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
    assert status.stdout == ""
    from looper.config import load_config

    cfg = load_config(root / "looper.toml")
    from looper.workspace.create import PRESETS

    want = PRESETS["demo"]
    assert (cfg.loop.tag, cfg.loop.budget_seconds, cfg.loop.noise_reruns, cfg.data.scale) == (
        want["loop"]["tag"], want["loop"]["budget_seconds"], want["loop"]["noise_reruns"], want["data"]["scale"])
    assert cfg.gate.score_test == want["gate"]["score_test"] == "pooled"  # fixed in advance for the demo's regime
    # the regime the demo's gate was calibrated in: a fixed step budget, not one that follows the machine's hour
    # and two one-core runs side by side, as its calibration pools ran (8 baseline seeds, 4 fresh ones)
    assert (cfg.loop.max_steps, cfg.loop.baseline_seeds, cfg.loop.confirm_seeds, cfg.loop.seed_jobs) == (
        169, 8, 4, 2) == (want["loop"]["max_steps"], want["loop"]["baseline_seeds"], want["loop"]["confirm_seeds"],
                          want["loop"]["seed_jobs"])


def test_init_refuses_a_non_empty_folder_and_leaves_it_alone(tmp_path: Path):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "mine.txt").write_text("keep me")
    r = runner.invoke(app, ["init", str(target)])
    assert r.exit_code == 2
    assert "not empty" in r.output
    assert [p.name for p in target.iterdir()] == ["mine.txt"]


def test_bad_config_is_exit_2_naming_the_key(ws: Path):
    (ws / "looper.toml").write_text((ws / "looper.toml").read_text().replace("[loop]", "[loop]\ntagg = 1"))
    r = runner.invoke(app, ["run", "--max-experiments", "1"])
    assert r.exit_code == 2
    assert "loop.tagg" in r.output
    assert not (ws / "experiments.db").exists()  # nothing was started


def test_bad_until_on_the_command_line_is_exit_2(ws: Path):
    r = runner.invoke(app, ["run", "--until", "25:99"])
    assert r.exit_code == 2 and "loop.until" in r.output


def test_run_outside_a_workspace_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LOOPER_WORKSPACE", str(tmp_path))
    r = runner.invoke(app, ["run"])
    assert r.exit_code == 2 and "not a looper workspace" in r.output


def test_verify_json_without_a_baseline_is_one_error_verdict_exit_2(ws: Path):
    r = runner.invoke(app, ["verify", "--json"])
    assert r.exit_code == 2
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    v = Verdict.model_validate_json(lines[-1])
    assert v.status.value == "error" and "no measured baseline" in v.blocking[0]


def _seed(root: Path) -> tuple[int, int]:
    store = Store(root / "experiments.db")
    metrics = {"weighted_f1": 0.4, "macro_f1": 0.4, "pages": 3, "truth": 10, "predictions": 9,
               "classes": {"vav_box": {"tp": 4, "fp": 1, "fn": 1, "support": 5, "precision": 0.8,
                                       "recall": 0.8, "f1": 0.8, "count_error": 0.0}}}
    base = store.start_experiment(tag="nightly", kind="baseline", seed=0, config={})
    store.record_outcome(base, outcome=Outcome.KEEP, score=0.4, metrics=metrics, class_metrics=metrics["classes"],
                         verdict=Verdict.passed(), blocking=[], commit="a" * 40)
    crash = store.start_experiment(tag="nightly", kind="candidate", parent="a" * 40, seed=0, config={},
                                   description="LR0 0.003 -> 1.0")
    store.record_outcome(crash, outcome=Outcome.CRASH, verdict=Verdict.failed("boom"), blocking=["boom"],
                         failure_signature="ValueError: boom")
    return base, crash


def test_history_json_lists_every_experiment(ws: Path):
    base, crash = _seed(ws)
    r = runner.invoke(app, ["history", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [(x["id"], x["status"]) for x in rows] == [(base, "keep"), (crash, "crash")]
    r = runner.invoke(app, ["history", "--json", "--status", "crash"])
    assert [x["id"] for x in json.loads(r.stdout)] == [crash]
    r = runner.invoke(app, ["history", "--status", "crashed"])
    assert r.exit_code == 2 and "crashed" in r.output


def test_baseline_approve_refuses_a_crash_and_writes_a_file_for_a_result(ws: Path):
    base, crash = _seed(ws)
    r = runner.invoke(app, ["baseline", "approve", str(crash)])
    assert r.exit_code == 2 and "crash" in r.output
    assert not list((ws / "baselines").glob("*.json"))
    r = runner.invoke(app, ["baseline", "approve", str(base)])
    assert r.exit_code == 0, r.output
    files = list((ws / "baselines").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["experiment_id"] == base


def test_status_reads_the_database(ws: Path):
    _seed(ws)
    r = runner.invoke(app, ["status"])
    assert r.exit_code == 0, r.output
    assert "daemon: not running" in r.stdout
    assert "best [nightly]: #1" in r.stdout and "crash 1" in r.stdout


def test_suggest_follows_phase_1_of_the_real_program(ws: Path):
    r = runner.invoke(app, ["suggest", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    from looper.agents.program import parse_program

    first = parse_program((ws / "program.md").read_text()).knobs[0]
    assert out["phase"] == 1 and list(out["changes"]) == [first.name]


def test_suggest_explains_each_strategy_in_one_line(ws: Path):
    r = runner.invoke(app, ["suggest"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    each = lines.index("Each strategy ([agent] kind):")
    named = [ln.strip().split(":", 1)[0] for ln in lines[each + 1:each + 4]]
    assert named == ["planner", "random", "evolve"]
    assert all("(why: " in ln for ln in lines[each + 1:each + 4])
    out = json.loads(runner.invoke(app, ["suggest", "--json"]).stdout)
    assert set(out["strategies"]) == {"planner", "random", "evolve"}
    import re

    for name in ("random", "evolve"):  # each names knob changes "NAME old -> new" and its own reason
        assert re.match(r"[A-Z_0-9]+ \S+ -> \S+", out["strategies"][name]), out["strategies"][name]
        assert f"(why: {name}: " in out["strategies"][name]


def test_run_refuses_to_start_without_bubblewrap_and_names_the_install(ws: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no bwrap on PATH
    r = runner.invoke(app, ["run", "--max-experiments", "1"])
    assert r.exit_code == 2, r.output
    assert "bubblewrap (bwrap) is not installed" in r.output and "apt-get install -y bubblewrap" in r.output
    assert 'sandbox = "none"' in r.output
    assert not (ws / "experiments.db").exists()  # refused before anything started
