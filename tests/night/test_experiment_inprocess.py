"""One experiment driven in-process through looper.night.experiment.run_candidate: real git, a real
Store in a temp dir, the fixture workspace (tests/fixture_ws) and its command agent, the local
executor. Each test asserts what settle() did: the one outcome row, the branch, the checkout."""

from __future__ import annotations

import io
import json
import shutil
import statistics
import subprocess

import pytest

from looper.agents import make_agent
from looper.agents.program import parse_program
from looper.config import config_from_dict, load_config
from looper.core.verdicts.verdict import Outcome, Status
from looper.errors import HarnessError
from looper.executors import make_executor
from looper.night.display import Display
from looper.night.experiment import run_candidate
from looper.night.loop import Loop
from looper.night.notify import AppriseNotifier
from looper.report import report_text, write_html
from looper.store import Store

pytestmark = pytest.mark.e2e  # the end-to-end tier: real git, real sandboxed runs of the fixture train.py


def night(ws, pages=None, display: Display | None = None, **over: object) -> Loop:
    """A Loop on the workspace, as `looper run` builds it; ``over``: "section.key" -> value."""
    cfg = load_config(ws.root / "looper.toml")
    if over:
        data = cfg.model_dump()
        for key, value in over.items():
            section, name = key.split(".")
            data[section][name] = value
        cfg = config_from_dict(data)
    text = (ws.root / "program.md").read_text()
    return Loop(ws.root, cfg, Store(ws.root / "experiments.db"), make_executor(ws.root, cfg.executor),
                make_agent(cfg.agent, parse_program(text)), AppriseNotifier([pages.url] if pages else []),
                display=display or Display(), program_md=text)


@pytest.fixture
def ws(make_ws, monkeypatch):
    w = make_ws()
    monkeypatch.setenv("FIXTURE_QUEUE", str(w.queue))
    monkeypatch.setenv("LOOPER_NOTIFY_URLS", "")
    return w


@pytest.fixture
def unboxed_ws(make_ws, monkeypatch):
    """ws with the sandbox off: for a test of an UNconfined train.py (the sandbox's own answer: tests/security)."""
    w = make_ws(exec_sandbox="none")
    monkeypatch.setenv("FIXTURE_QUEUE", str(w.queue))
    monkeypatch.setenv("LOOPER_NOTIFY_URLS", "")
    return w


def ready(ws, pages=None, display: Display | None = None, **over: object) -> Loop:
    loop = night(ws, pages, display, **over)
    assert loop.setup() is None  # the baseline is measured and kept
    return loop


def outcome_rows(ws) -> list[dict]:
    return [r for r in ws.rows() if r["status"] not in ("running", "pending")]


def tip(ws) -> str:
    return ws.git("rev-parse", "looper/t")


def test_keep_commits_on_the_branch_and_writes_one_scored_outcome(ws):
    loop = ready(ws)
    base = tip(ws)
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r is not None and r.outcome is Outcome.KEEP and r.halt_error is None
    (row,) = outcome_rows(ws)
    assert row["id"] == r.exp_id and row["status"] == "keep" and row["score"] == pytest.approx(r.score)
    assert row["parent"] == base and tip(ws) == row["commit"] != base
    assert json.loads(row["verdict_json"])["status"] == "pass"
    assert loop.ctx.night.stats.outcomes == {"keep": 1}


def test_discard_resets_to_the_parent_and_keeps_the_commit_reachable(ws):
    loop = ready(ws)
    base = tip(ws)
    ws.enqueue("QUALITY 0.5 -> 0.2", knobs={"QUALITY": 0.2})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.DISCARD
    (row,) = outcome_rows(ws)
    assert row["status"] == "discard" and row["score"] is not None  # a measured result keeps its score
    assert json.loads(row["blocking_json"]) == r.verdict.blocking != []
    assert tip(ws) == base and ws.git("status", "--porcelain", cwd=ws.worktree) == ""
    assert ws.git("rev-parse", f"refs/looper/discarded/{row['id']}") == row["commit"]


def test_crash_resets_and_records_a_signature_without_a_score(ws):
    loop = ready(ws)
    base = tip(ws)
    ws.enqueue("crash", knobs={"SCENARIO": "crash"})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.CRASH and r.halt_error is None and r.stuck is None
    (row,) = outcome_rows(ws)
    assert row["status"] == "crash" and row["score"] is None
    assert row["failure_signature"] and "ValueError" in row["failure_signature"]
    assert tip(ws) == base
    assert ws.git("rev-parse", f"refs/looper/discarded/{row['id']}") == row["commit"]


def test_scope_violation_restores_the_other_file_and_commits_nothing(ws):
    loop = ready(ws)
    base = tip(ws)
    ws.enqueue("sneak a file in", knobs={"QUALITY": 0.9}, extra_files={"notes.txt": "hi"})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.DISCARD and r.verdict.status is Status.FAIL
    assert r.verdict.blocking[0].startswith("scope violation: the agent changed notes.txt")
    (row,) = outcome_rows(ws)
    assert row["commit"] is None and row["score"] is None
    assert tip(ws) == base and not (ws.worktree / "notes.txt").exists()
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == ""


def test_an_error_is_recorded_then_halts_and_leaves_the_checkout_for_a_person(unboxed_ws):
    ws = unboxed_ws
    loop = ready(ws)
    ws.enqueue("delete the data", knobs={"SCENARIO": "delete_data"})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.ERROR
    assert isinstance(r.halt_error, HarnessError) and r.halt_error.exit_code == 3
    assert "data" in str(r.halt_error)
    (row,) = outcome_rows(ws)
    assert row["status"] == "error" and row["score"] is None
    assert json.loads(row["verdict_json"])["status"] == "error"
    # an error never resets: the commit stays where it was made, for a person to look at
    assert tip(ws) == row["commit"]
    with pytest.raises(subprocess.CalledProcessError):
        ws.git("rev-parse", "--verify", f"refs/looper/discarded/{row['id']}")


def test_verify_gates_the_workspace_train_py_and_commits_nothing(ws):
    loop = ready(ws)
    before = tip(ws), ws.git("rev-parse", "HEAD"), ws.git("for-each-ref")
    src = (ws.root / "train.py").read_text().replace("QUALITY = 0.5", "QUALITY = 0.8")
    (ws.root / "train.py").write_text(src)
    v = night(ws).verify()
    assert v.status is Status.PASS and v.metrics["outcome"] == "keep"
    (row,) = ws.rows("verify")
    assert row["id"] == v.metrics["experiment_id"] and row["status"] == "keep" and row["commit"] is None
    assert (tip(ws), ws.git("rev-parse", "HEAD"), ws.git("for-each-ref")) == before
    assert ws.rows() == []  # no candidate either
    assert loop.ctx.store.best("t").kind == "baseline"  # a verify is never the best


# ---------------------------------------------------------------- a tag's baseline follows what it depends on
def baselines(ws) -> list[dict]:
    return [r for r in ws.rows("baseline") if r["status"] == "keep"]


def test_a_changed_budget_starts_a_new_baseline_and_says_so(ws):
    ready(ws)
    assert len(baselines(ws)) == 1
    ready(ws)  # nothing changed: the baseline stands
    assert len(baselines(ws)) == 1
    shown = io.StringIO()
    loop = ready(ws, display=Display(shown), **{"loop.budget_seconds": 7})
    first, second = baselines(ws)
    assert json.loads(second["config_json"])["loop"]["budget_seconds"] == 7
    said = [e["message"] for e in ws.events("baseline")]
    line = f"loop.budget_seconds 6 -> 7 since baseline #{first['id']} was measured: measuring a new baseline"
    assert line in said and line in shown.getvalue()
    assert loop.ctx.store.best("t").id == second["id"]  # candidates now compare with the new one


def test_more_workers_on_a_tag_start_a_new_baseline_measured_under_them(ws):
    """The GPU slots note advises more workers; the tag's baseline (and its warm-up or fit run) was measured with
    one run at a time, so the next night says so and measures a new one under the runs it trains at once."""
    ready(ws, **{"loop.max_steps": "auto"})
    shown = io.StringIO()
    ready(ws, display=Display(shown), **{"loop.max_steps": "auto", "loop.workers": 2})
    first, second = baselines(ws)
    line = (f"runs at a time (loop.seed_jobs x loop.workers) 1 -> 2 since baseline #{first['id']} was measured: "
            "measuring a new baseline")
    assert line in [e["message"] for e in ws.events("baseline")] and line in shown.getvalue()
    base = ws.root / "runs" / "t" / f"{second['id']:05d}"
    assert (base / "warmup-s0").is_dir() and (base / "warmup-s1").is_dir()  # its warm-up: two runs at once


def test_a_changed_data_seed_starts_a_new_baseline_and_repins_rebuilt_data(ws):
    ready(ws)
    pinned = Store(ws.root / "experiments.db").tag_record("t").data_hash
    ready(ws, **{"data.seed": 3})  # the data folder stays as it was: prepare.py builds only missing data
    assert len(baselines(ws)) == 2
    (said,) = [e["message"] for e in ws.events("baseline") if "data.seed" in e["message"]]
    assert said.startswith("data.seed 0 -> 3 since baseline #") and "data in data is unchanged" in said
    shutil.rmtree(ws.root / "data")  # the person moves it away, as the event says
    loop = ready(ws, **{"data.seed": 4})
    assert len(baselines(ws)) == 3
    now = loop.ctx.store.tag_record("t").data_hash
    said = [e["message"] for e in ws.events("baseline") if "data.seed 3 -> 4" in e["message"]]
    assert now != pinned and said and f"data re-pinned: hash {now[:12]}" in said[0]  # the fixture data follow the seed
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    assert run_candidate(loop.ctx, loop.ctx.night.workers[0]).outcome is Outcome.KEEP


def test_the_advice_of_a_cannot_gate_halt_does_not_lead_back_into_it(ws, pages):
    """A baseline that finds nothing cannot gate; with a longer budget it learns; the page says
    to change the budget, and doing so measures a new baseline instead of halting again."""
    src = (ws.root / "train.py").read_text().replace(
        "q = QUALITY + BONUS", "q = (QUALITY if int(os.environ['LOOPER_BUDGET_SECONDS']) >= 8 else 0.0) + BONUS")
    (ws.root / "train.py").write_text(src)
    ws.git("commit", "-qam", "train.py learns only with 8 s or more")
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    loop = night(ws, pages)
    assert loop.run(max_experiments=1) == 3
    (page,) = pages.pages
    text = json.dumps(page)
    assert "cannot gate" in text and "budget_seconds" in text and "measures a new baseline" in text
    (halted,) = ws.rows()
    assert f"Experiment #{halted['id']} (error); blocking reasons:" in text  # the facts of this failure
    assert "No experiment finished this run." not in text and "Experiments finished this run: 1 (1 error)" in text
    ws.enqueue("QUALITY 0.5 -> 0.8 again", knobs={"QUALITY": 0.8})
    assert night(ws, pages, **{"loop.budget_seconds": 8}).run(max_experiments=1) == 0
    assert len(pages.pages) == 1
    assert [r["status"] for r in ws.rows()] == ["error", "keep"]
    assert any("loop.budget_seconds 6 -> 8" in e["message"] for e in ws.events("baseline"))


# ---------------------------------------------------------------- a halt page shows only its own failure
def test_a_halt_page_shows_only_the_facts_of_its_own_failure(ws, pages):
    ws.enqueue("QUALITY 0.5 -> 0.2", knobs={"QUALITY": 0.2})
    assert night(ws, pages).run(max_experiments=1) == 0
    (discarded,) = ws.rows()
    assert discarded["status"] == "discard"
    stale = json.loads(discarded["blocking_json"])
    assert stale
    broken = night(ws, pages, **{"agent.command": str(ws.root / "no-such-agent")})
    assert broken.run(max_experiments=1) == 3
    (page,) = pages.pages
    body = json.dumps(page)
    assert "agent command not found" in body
    for text in (*stale, "locking reasons", "Last lines", "Experiments this run", "{}", f"#{discarded['id']}"):
        assert json.dumps(text)[1:-1] not in body, (text, body)
    assert "No experiment finished this run." in body
    (halt,) = ws.events("halt")
    assert halt["experiment_id"] is None


@pytest.mark.parametrize("seeds", [2, 3])
def test_the_baseline_runs_baseline_seeds_seeds_whatever_the_candidate_reruns(ws, seeds):
    loop = ready(ws, **{"loop.baseline_seeds": seeds, "loop.noise_reruns": 0})
    (base,) = baselines(ws)
    runs = loop.ctx.store.run_records(base["id"])
    assert sorted(r.seed for r in runs) == list(range(seeds))
    for r in runs:  # the harness's clock: launched, the LOOPER_STARTUP line arrived, train.py exited, evaluated
        assert r.started_at <= r.train_started_at <= r.train_ended_at <= r.eval_ended_at <= r.finished_at, r
        assert r.phases.startup >= 0 and r.phases.train >= 0 and r.phases.eval > 0 and r.started_at != r.finished_at
    verdict = json.loads(base["verdict_json"])
    assert verdict["status"] == "pass"


@pytest.mark.parametrize("max_steps", [0, 7])
def test_a_step_budget_reaches_every_run_through_the_sandbox(ws, max_steps):
    """[loop] max_steps -> LOOPER_MAX_STEPS in train.py's environment (absent when 0)."""
    loop = ready(ws, **{"loop.max_steps": max_steps})
    (base,) = baselines(ws)
    seen = [r.train.get("max_steps") for r in loop.ctx.store.run_records(base["id"])]
    assert seen and all(s == max_steps for s in seen), seen


# ---------------------------------------------------------------- the tag's step budget, measured ("auto")
def test_auto_step_budget_warms_up_then_every_run_trains_the_pinned_steps(ws):
    """max_steps = "auto": one warm-up under the wall clock alone (the fixture fits 10 steps), the tag pins
    floor(0.8 x 10) = 8, and every baseline seed and every candidate run trains exactly 8."""
    loop = ready(ws, **{"loop.max_steps": "auto"})
    (base,) = baselines(ws)
    warm = ws.root / "runs" / "t" / f"{base['id']:05d}" / "warmup-s0" / "out" / "train.json"
    assert json.loads(warm.read_text())["max_steps"] == 0  # the warm-up had no step budget
    noise = loop.ctx.store.tag_record("t").noise
    n = loop.ctx.cfg.loop.baseline_seeds
    assert noise["max_steps"] == 8 and noise["warmup"]["steps"] == 10 and len(noise["scores"]) == n
    classes = base_metrics_classes(loop, base["id"])
    assert noise["class_recall_sd"] == {c: 0.0 for c in classes} and classes  # NOISE = 0: every seed alike
    assert loop.ctx.tag.max_steps() == 8
    seen = [(r.train["max_steps"], r.train["steps"]) for r in loop.ctx.store.run_records(base["id"])]
    assert seen == [(8, 8)] * n  # the warm-up is not one of the baseline's scored runs
    (said,) = [e["message"] for e in ws.events("baseline") if e["message"].startswith("warm-up")]
    assert "10 steps in 6 s" in said and "train 8 steps (80%)" in said
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.KEEP and "cut_short" not in r.verdict.metrics
    assert [x.train["max_steps"] for x in loop.ctx.store.run_records(r.exp_id)] == [8]
    text = report_text(loop.ctx.store, ws.root, console_width=400)
    assert "step budget: every run trains 8 optimizer steps (80 % of the 10 steps its warm-up run fitted" in text
    page = write_html(loop.ctx.store, ws.root, ws.root / "report.html").read_text()
    assert '<p id="step-budget">step budget: every run trains 8 optimizer steps' in page
    ready(ws, **{"loop.max_steps": "auto"})  # a restart keeps the tag's budget: no new warm-up, no new baseline
    assert len(baselines(ws)) == 1 and loop.ctx.store.tag_record("t").noise["max_steps"] == 8


def test_a_candidate_cut_short_by_the_wall_clock_is_not_discarded_on_its_loss(ws):
    """A candidate whose runs stopped before the step budget trained less than the baseline: its loss may be
    the clock's, so it is inconclusive and says why; the checkout is reset all the same."""
    loop = ready(ws, **{"loop.max_steps": "auto"})
    base = tip(ws)
    ws.enqueue("slower and worse", knobs={"QUALITY": 0.2, "STEPS_FIT": 5})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.INCONCLUSIVE, r.verdict
    # worse on seed 0, so a second seed before any discard (a discard stands on 2): both were cut short
    assert r.verdict.metrics["cut_short"] == ["seed 0: stopped by the wall clock at 5 of 8 steps",
                                              "seed 1: stopped by the wall clock at 5 of 8 steps"]
    assert r.verdict.blocking[0].startswith("not comparable: seed 0: stopped by the wall clock at 5 of 8 steps")
    assert any(b.startswith("would have discarded: ") for b in r.verdict.blocking[1:])
    assert tip(ws) == base and ws.git("status", "--porcelain", cwd=ws.worktree) == ""
    ws.enqueue("slower but better", knobs={"QUALITY": 0.9, "STEPS_FIT": 5})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.KEEP  # it won with fewer steps: the win stands, flagged
    assert r.verdict.metrics["cut_short"] == ["seed 0: stopped by the wall clock at 5 of 8 steps"]
    assert any(n.startswith("not comparable: ") for n in r.verdict.metrics["notes"])
    text = report_text(loop.ctx.store, ws.root, console_width=400)  # the morning report says it to a person
    (line,) = [x for x in text.splitlines() if "trained fewer steps than the tag's step budget" in x]
    ids = [row["id"] for row in outcome_rows(ws)]
    assert line.startswith(" ! ") and "2 experiment(s)" in line and " ".join(f"#{i}" for i in ids) in line


def test_a_baseline_cut_short_by_the_wall_clock_halts_with_advice(ws):
    """A step budget the machine cannot train (50 steps where the clock fits 10): the baseline is no reference."""
    loop = night(ws, **{"loop.max_steps": 50})
    halted = loop.setup()
    assert halted is not None and isinstance(halted.error, HarnessError)
    assert str(halted.error) == "baseline seed 0: stopped by the wall clock at 10 of 50 steps"
    assert "the budget does not fit this machine and data" in halted.advice
    # the fixture's train.json has no start-up figure: both keys named, no number made up (core.run.budget)
    assert "Raise [loop] budget_seconds (now 6) or lower [loop] max_steps (now 50)" in halted.advice
    (row,) = ws.rows("baseline")
    assert row["status"] == "error" and row["score"] is None


def timed_baseline(ws, rate: float) -> None:
    """The fixture train.py on a simulated clock: 1 s of start-up, then ``rate`` steps a second (train.json says so)."""
    src = (ws.root / "train.py").read_text().replace("RATE = 0.0", f"RATE = {rate}")
    (ws.root / "train.py").write_text(src)
    ws.git("commit", "-qam", f"a baseline at {rate} steps a second")


def test_a_step_budget_the_wall_clock_cannot_fit_is_measured_by_a_fit_run_and_the_wall_clock_raised(ws):
    """14 fixed steps at 2 steps/s after 1 s need 8 s (10 s with 25 % to spare) where the wall clock is 6 s, which
    fits 10: the fit run trains 10 of the 14 steps under 3 x 6 s, raises the tag's wall clock to 10 s, and every
    baseline seed and candidate run trains all 14 steps under it: no halt, nothing cut short."""
    timed_baseline(ws, 2.0)
    loop = ready(ws, **{"loop.max_steps": 14})
    (base,) = baselines(ws)
    fit_json = ws.root / "runs" / "t" / f"{base['id']:05d}" / "warmup-s0" / "out" / "train.json"
    fitted = json.loads(fit_json.read_text())
    assert (fitted["max_steps"], fitted["steps"], fitted["stopped_by"]) == (10, 10, "steps")
    budget = loop.ctx.store.tag_record("t").noise
    assert budget["wall_seconds"] == 10 and budget["fit"]["status"] == "raised" and budget["fit"]["need"] == 10
    assert loop.ctx.tag.wall_seconds(6) == 10.0
    seen = [(r.train["max_steps"], r.train["steps"], r.train["stopped_by"], r.train["wall_clock"])
            for r in loop.ctx.store.run_records(base["id"])]
    assert seen == [(14, 14, "steps", "10")] * loop.ctx.cfg.loop.baseline_seeds  # the fit run is not a scored seed
    assert fitted["wall_clock"] == "18"  # the fit run's own wall clock: 3 x 6 s
    (said,) = [e["message"] for e in ws.events("baseline") if e["message"].startswith("fit run")]
    assert said.endswith("14 steps need about 8 s; the wall clock raised from 6 s to 10 s (25 % to spare)")
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.KEEP and "cut_short" not in r.verdict.metrics
    assert [(x.train["steps"], x.train["wall_clock"]) for x in loop.ctx.store.run_records(r.exp_id)] == [(14, "10")]
    text = report_text(loop.ctx.store, ws.root, console_width=400)
    assert ("step budget: every run trains 14 optimizer steps (set in looper.toml); its fit run on this machine: "
            "10 steps after 1 s of start-up, 2.00 steps/s") in text
    ready(ws, **{"loop.max_steps": 14})  # a restart keeps the tag's wall clock: no new fit run, no new baseline
    assert len(baselines(ws)) == 1 and loop.ctx.store.tag_record("t").noise["wall_seconds"] == 10


def test_a_step_budget_past_3_x_the_wall_clock_halts_after_the_fit_run_before_any_seed(ws):
    """50 steps at 2 steps/s need 33 s with 25 % to spare, more than 3 x 6 s: halted after one short fit run, not
    after a baseline seed the wall clock cut short, with the budget to raise and the steps that would fit."""
    timed_baseline(ws, 2.0)
    halted = night(ws, **{"loop.max_steps": 50}).setup()
    assert halted is not None and isinstance(halted.error, HarnessError)
    assert str(halted.error) == ("the step budget does not fit this machine: 10-step fit run: 10 steps after 1 s of "
                                 "start-up, 2.00 steps/s: 50 steps need about 26 s; 33 s with 25 % to spare is more "
                                 "than 3 x the 6 s wall clock")
    assert halted.advice == ("Raise [loop] budget_seconds to at least 33, or lower [loop] max_steps to 8 to fit 6 s, "
                             "and start `looper run` again.")
    (row,) = ws.rows("baseline")
    assert row["status"] == "error" and Store(ws.root / "experiments.db").run_records(row["id"]) == []


def test_a_step_budget_that_fits_keeps_the_wall_clock(ws):
    """7 steps at 2 steps/s: 1 + 3.5 s, 6 s with 25 % to spare: the wall clock stays 6 s."""
    timed_baseline(ws, 2.0)
    loop = ready(ws, **{"loop.max_steps": 7})
    budget = loop.ctx.store.tag_record("t").noise
    assert budget["fit"]["status"] == "fits" and budget["wall_seconds"] == 0 and loop.ctx.tag.wall_seconds(6) == 6.0
    (base,) = baselines(ws)
    assert [r.train["wall_clock"] for r in loop.ctx.store.run_records(base["id"])] == ["6", "6"]


def base_metrics_classes(loop: Loop, exp_id: int) -> list[str]:
    (first, *_) = [r.metrics for r in loop.ctx.store.run_records(exp_id)]
    return sorted(first["classes"])


def test_the_tag_stores_the_seed_spread_of_every_class_recall(ws):
    """The baseline's per-class recall sd over its seeds, stored with the tag (a class that varies)."""
    src = (ws.root / "train.py").read_text().replace('WEAK_CLASS = ""', 'WEAK_CLASS = "vav_box"').replace(
        "WEAK_RECALL = 0.0", "WEAK_RECALL = 0.2 + 0.4 * (int(os.environ.get('LOOPER_SEED', '0')) % 2)")
    (ws.root / "train.py").write_text(src)
    ws.git("commit", "-qam", "a class whose recall follows the seed")
    loop = ready(ws, **{"loop.baseline_seeds": 3})
    (base,) = baselines(ws)
    sd = loop.ctx.store.tag_record("t").noise["class_recall_sd"]
    recalls = [r.metrics["classes"]["vav_box"]["recall"] for r in loop.ctx.store.run_records(base["id"])]
    assert len(set(recalls)) == 2  # the fixture did make it vary
    assert sd["vav_box"] == pytest.approx(statistics.stdev(recalls), abs=1e-6) and sd["vav_box"] > 0.1
    assert all(v == 0.0 for c, v in sd.items() if c != "vav_box") and len(sd) == 4


def test_a_candidate_that_ignores_the_step_budget_is_a_crash_of_the_change(ws):
    """train.py that drops LOOPER_MAX_STEPS and trains to the wall clock (more steps than the baseline
    had) must not win by budget: a crash naming the steps, the checkout reset, the night goes on."""
    loop = ready(ws, **{"loop.max_steps": "auto"})
    base = tip(ws)
    src = (ws.worktree / "train.py").read_text()
    fitted = "min(STEPS_FIT, max_steps) if max_steps else STEPS_FIT"
    assert fitted in src
    ws.enqueue("train to the wall clock", source=src.replace(fitted, "STEPS_FIT").replace(
        "QUALITY = 0.5", "QUALITY = 0.9"))
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.CRASH and r.halt_error is None, r.verdict
    assert r.verdict.blocking == ["train.py trained 10 optimizer steps; the tag's step budget is 8 "
                                  "(LOOPER_MAX_STEPS): a run must stop at it"]
    assert tip(ws) == base and ws.git("status", "--porcelain", cwd=ws.worktree) == ""


def test_a_warmup_that_cannot_train_halts_before_any_baseline_seed(ws):
    """The baseline train.py crashes in its warm-up: the night halts naming the warm-up; no seed ran."""
    src = (ws.root / "train.py").read_text().replace('SCENARIO = "ok"', 'SCENARIO = "crash"')
    (ws.root / "train.py").write_text(src)
    ws.git("commit", "-qam", "a baseline that crashes")
    halted = night(ws, **{"loop.max_steps": "auto"}).setup()
    assert halted is not None and isinstance(halted.error, HarnessError)
    assert str(halted.error).startswith("the baseline train.py could not train its warm-up run (")
    assert "boom at step 17" in str(halted.error)
    (row,) = ws.rows("baseline")
    assert row["status"] == "error" and Store(ws.root / "experiments.db").run_records(row["id"]) == []
    assert Store(ws.root / "experiments.db").tag_record("t").noise == {}  # no budget was pinned


def test_a_warmup_that_trained_less_than_one_step_halts_instead_of_pinning_zero(ws):
    """train.json may say 0.5 steps (the training evidence takes any positive number): no whole step, no
    budget; the night halts naming it rather than pinning a budget of 0 (the wall clock) or crashing."""
    src = (ws.root / "train.py").read_text().replace("STEPS_FIT = 10", "STEPS_FIT = 0.5")
    (ws.root / "train.py").write_text(src)
    ws.git("commit", "-qam", "a baseline that reports half a step")
    halted = night(ws, **{"loop.max_steps": "auto"}).setup()
    assert halted is not None and isinstance(halted.error, HarnessError)
    assert str(halted.error) == ("the baseline train.py could not train its warm-up run (error): train.json says 0.5 "
                                 "steps: less than one whole optimizer step, no step budget can be measured from it")
    assert Store(ws.root / "experiments.db").tag_record("t").noise == {}


def test_data_changed_after_the_tag_began_halts_with_advice_naming_a_new_tag(ws):
    """Issue 38: a changed data folder's advice names --tag (a tag's scores compare only on its own data)."""
    loop = ready(ws)
    truth = ws.root / "data" / "pages" / "test" / "page_000.json"
    truth.write_text(truth.read_text().replace('"seed 0"', '"relabelled"'))
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.ERROR and isinstance(r.halt_error, HarnessError), r
    assert "data in data changed since the tag began" in str(r.halt_error)
    assert "looper run --tag NEW" in str(r.halt_error), r.halt_error
