"""Paired intensification and the confirmed morning, driven in-process (issue 25): the fixture workspace
(tests/fixture_ws), its command agent, real git, a real Store, the local executor. NOISE in the fixture's
train.py moves the score by seed (seed % 3), the same way on both sides of a pair, as a shared seed does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from looper.core.keep.score import PAIRED_TEST
from looper.core.verdicts.verdict import Outcome
from looper.night.confirm import confirm
from looper.night.experiment import run_candidate
from looper.report import history_rows, report_text, write_html
from looper.store import Store
from looper.store.queries import confirmations
from night.test_experiment_inprocess import night, ready  # noqa: F401 (fixtures below)
from night.test_experiment_inprocess import ws as ws  # noqa: F401,PLC0414

pytestmark = pytest.mark.e2e


def verdict(ws, exp_id: int) -> dict:
    (row,) = [r for r in ws.rows() if r["id"] == exp_id]
    return json.loads(row["verdict_json"])["metrics"]


def run_seeds(ws, exp_id: int) -> list[int]:
    with ws.db() as con:
        return [r[0] for r in con.execute("SELECT seed FROM runs WHERE experiment_id=? ORDER BY id", (exp_id,))]


def noisy(ws, noise: float = 0.05) -> None:
    """The workspace's train.py moves its score by seed: NOISE * (seed % 3 - 1)."""
    p = ws.root / "train.py"
    p.write_text(p.read_text().replace("NOISE = 0.0 ", f"NOISE = {noise} "))
    ws.git("commit", "-qam", "noisy seeds")


def test_a_clear_win_stops_early_for_success_on_the_best_s_first_seed(ws):
    loop = ready(ws, **{"loop.noise_reruns": 3})  # up to 4 seeds: 1, 2, 4
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.KEEP
    cost = verdict(ws, r.exp_id)["cost"]
    assert run_seeds(ws, r.exp_id) == [0] and cost["seeds"] == [0]
    assert (cost["candidate_runs"], cost["best_runs"], cost["cap"], cost["looks"]) == (1, 0, 4, 3)
    assert cost["stopped"] == "stopped early for success after 1 seed(s)" and cost["minutes"] > 0
    assert 0 < cost["wall_minutes"] < 60, cost  # the decision's own clock, from its first run to its last look


def test_a_clear_loss_stops_early_for_futility_on_its_second_seed(ws):
    # worse on the first seed already, but a discard stands on 2 seeds (one low seed is not a verdict):
    # the second seed is run, then the challenger stops, 2 seeds short of its cap of 4
    loop = ready(ws, **{"loop.noise_reruns": 3})
    ws.enqueue("QUALITY 0.5 -> 0.2", knobs={"QUALITY": 0.2})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.DISCARD
    m = verdict(ws, r.exp_id)
    assert run_seeds(ws, r.exp_id) == [0, 1] and m["cost"]["stopped"] == "stopped early for futility after 2 seed(s)"
    assert m["alpha_share"] == pytest.approx(2 / 7)  # the look at 2 of the planned 1, 2, 4 seeds


def test_a_cap_of_one_seed_discards_on_that_seed(ws):
    loop = ready(ws, **{"loop.noise_reruns": 0})
    ws.enqueue("QUALITY 0.5 -> 0.2", knobs={"QUALITY": 0.2})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r.outcome is Outcome.DISCARD and run_seeds(ws, r.exp_id) == [0]
    assert verdict(ws, r.exp_id)["cost"]["stopped"] == "discarded after 1 seed(s)"


def test_a_paired_score_test_fixed_in_advance_keeps_a_win_on_two_seed_pairs(ws):
    """Seeds that move every score alike (NOISE): the paired test, fixed in looper.toml, sees the change on each
    seed and keeps it on the first two seed pairs with the look's whole alpha. (With classes weighed at most as
    a class of MIN_SUPPORT test instances, the fixture's differences no longer clear half the alpha on two pairs,
    where "auto" holds each test: the gate's own tests cover that halving, tests/core.)"""
    noisy(ws)
    # the baseline runs seeds 0 and 1; a cap of 3 seeds: looks at 1, 2, 3 with 1/6, 2/6, 3/6 of alpha
    loop = ready(ws, **{"loop.noise_reruns": 2, "gate.score_test": "paired"})
    ws.enqueue("BONUS 0 -> 0.2", knobs={"BONUS": 0.2})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    m = verdict(ws, r.exp_id)
    assert r.outcome is Outcome.KEEP and run_seeds(ws, r.exp_id) == [0, 1]
    assert m["paired_seeds"] == [0, 1] and m["score_test_used"] == PAIRED_TEST
    assert m["noise_band"] == m["paired_test"]["band"] < m["diff"]
    assert m["score_test_alpha"] == m["alpha_per_look"]  # fixed in advance: the look's whole alpha
    assert m["cost"]["stopped"] == "stopped early for success after 2 seed(s)" and m["cost"]["best_runs"] == 0
    assert m["alpha_share"] == pytest.approx(2 / 6) and m["score_test_alpha"] == pytest.approx(0.05 * 2 / 6)
    # the report states the test that decided (the paired one), its alpha and where the difference lies
    line = next(x for x in report_text(loop.ctx.store, ws.root, console_width=400).splitlines()
                if x.strip().startswith(f"#{r.exp_id} keep:") and "vs best" in x)
    assert f"at alpha {m['score_test_alpha']:.3g} (0.05 shared over 3 looks by their seeds) " in line, line
    assert "(one-sided paired t-test, 2 seed pairs, df 1): beyond the noise" in line, line


def test_a_score_test_fixed_in_looper_toml_reaches_the_gate_with_the_whole_alpha(ws):
    # the same noisy seeds and change as above, with [gate] score_test = "pooled" (what the demo preset
    # sets): the paired test is computed and reported but never decides, and the pooled one keeps the
    # look's whole alpha on the same 2 seeds
    noisy(ws)
    loop = ready(ws, **{"loop.noise_reruns": 2, "gate.score_test": "pooled"})
    ws.enqueue("BONUS 0 -> 0.2", knobs={"BONUS": 0.2})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    m = verdict(ws, r.exp_id)
    assert m["score_test_used"] != PAIRED_TEST and m["score_test_choice"].startswith(
        'pooled: fixed by [gate] score_test = "pooled"')
    assert m["score_test_alpha"] == pytest.approx(m["alpha_per_look"])  # not halved
    assert m["paired_test"]["pairs"] == 2  # reported, for information
    assert r.outcome is Outcome.KEEP and run_seeds(ws, r.exp_id) == [0, 1]
    assert m["score_test_alpha"] / 2 < m["score_test"]["p_better"] <= m["score_test_alpha"]
    line = next(x for x in report_text(loop.ctx.store, ws.root, console_width=400).splitlines()
                if x.strip().startswith(f"#{r.exp_id} ") and "vs best" in x)
    assert "halved for two tests" not in line and "(one-sided t-test," in line, line


def test_the_best_gains_the_seeds_a_decision_needs(ws):
    noisy(ws)
    loop = ready(ws, **{"loop.noise_reruns": 3})
    base = loop.ctx.store.best("t")
    assert run_seeds(ws, base.id) == [0, 1]
    ws.enqueue("BONUS 0 -> 0.03", knobs={"BONUS": 0.03})  # inside the noise up to the cap of 4 seeds
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    m = verdict(ws, r.exp_id)
    # 1 seed, then 2, then 4: the baseline never ran seeds 2 and 3, so it ran each first
    assert r.outcome is Outcome.INCONCLUSIVE and m["cost"]["stopped"] == "inconclusive after 4 seed(s) (the cap)"
    assert run_seeds(ws, r.exp_id) == [0, 1, 2, 3] and run_seeds(ws, base.id) == [0, 1, 2, 3]
    assert m["cost"]["best_seeds_gained"] == [2, 3] and m["cost"]["runs"] == 6
    assert m["paired_seeds"] == [0, 1, 2, 3] and m["best_scores"] == m["baseline_scores"] and len(m["best_scores"]) == 4
    notes = [e["message"] for e in ws.events("note")]
    assert any(f"#{r.exp_id} needs seed 2, which the current best #{base.id} never ran" in n for n in notes)
    # the next candidate needs no new seed of the best: seed 3 is there now
    ws.enqueue("BONUS 0 -> 0.031", knobs={"BONUS": 0.031})
    r2 = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert run_seeds(ws, r2.exp_id) == [0, 1, 2, 3] and verdict(ws, r2.exp_id)["cost"]["best_runs"] == 0
    assert run_seeds(ws, base.id) == [0, 1, 2, 3]


def test_the_night_confirms_its_best_on_fresh_seeds(ws):
    loop = night(ws, **{"loop.confirm_seeds": 2, "loop.max_experiments": 1})
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    assert loop.run() == 0
    (kept,) = [r for r in ws.rows() if r["status"] == "keep"]
    (c,) = confirmations(loop.ctx.store, "t")
    assert (c.trigger, c.status, c.experiment_id, c.planned, c.runs) == ("night_end", "confirmed", kept["id"], 2, 2)
    assert c.seeds == (2, 3)  # above every seed the tag used (baseline 0, 1; the candidate 0)
    assert run_seeds(ws, kept["id"])[-2:] == [2, 3] and c.low is not None and c.low > 0 and not c.flagged
    assert c.selection_diff == pytest.approx(kept["score"] - c.baseline_scores[0])
    text = report_text(loop.ctx.store, ws.root)
    assert f"Confirmed: weighted F1 {c.diff:+.3f} [{c.low:+.3f}, {c.high:+.3f}] over the baseline on 2 fresh seeds" \
        in text and "at selection:" in text and "decisions: 1, 1 run(s)" in text
    page = write_html(loop.ctx.store, ws.root, ws.root / "report.html").read_text()
    assert f"Confirmed: weighted F1 {c.diff:+.3f} [{c.low:+.3f}, {c.high:+.3f}]" in page and 'id="confirmed"' in page
    row = next(r for r in history_rows(loop.ctx.store) if r["id"] == kept["id"])
    assert row["confirmations"][0]["status"] == "confirmed" and row["cost"]["candidate_runs"] == 1


def test_looper_confirm_runs_the_best_on_fresh_seeds(ws):
    loop = ready(ws)
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    kept = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert kept.outcome is Outcome.KEEP
    cfg = (ws.root / "looper.toml").read_text().replace("confirm_seeds = 0", "confirm_seeds = 2")
    (ws.root / "looper.toml").write_text(cfg)
    ws.git("commit", "-qam", "confirm on")
    done = subprocess.run([sys.executable, "-m", "looper.cli", "confirm"], cwd=ws.root, env=ws.env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (c,) = confirmations(Store(ws.root / "experiments.db"), "t")
    assert c.trigger == "command" and c.status == "confirmed" and c.experiment_id == kept.exp_id
    assert "over the baseline on 2 fresh seeds" in done.stdout
    assert f"2 run(s), {c.seconds / 60:.1f} min of runs, {c.wall_seconds / 60:.1f} min wall" in done.stdout


def test_a_kept_gain_that_does_not_confirm_is_flagged(ws, monkeypatch):
    loop = ready(ws, **{"loop.confirm_seeds": 2})
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    kept = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    best = loop.ctx.store.best("t")
    assert best.id == kept.exp_id
    # a winner's curse, planted: the train.py the confirmation re-runs is the baseline's, so on fresh seeds
    # the kept change does no better than the baseline (the selection-time gain was not real)
    import dataclasses

    real_best = loop.ctx.store.best
    monkeypatch.setattr(loop.ctx.store, "best", lambda tag: dataclasses.replace(
        real_best(tag), source=real_best(tag).source.replace("QUALITY = 0.8", "QUALITY = 0.5")))
    cid, error = confirm(loop.ctx, "command")
    assert error is None
    (c,) = confirmations(loop.ctx.store, "t")
    assert c.id == cid and c.status == "not_confirmed" and c.flagged
    text = report_text(loop.ctx.store, ws.root)
    assert "NOT confirmed" in text and f"#{kept.exp_id}'s kept gain did not confirm" in text


def test_a_night_cut_short_records_what_it_confirmed_so_far(ws, monkeypatch):
    import looper.night.runs as runs_mod

    loop = ready(ws, **{"loop.confirm_seeds": 3})
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    assert run_candidate(loop.ctx, loop.ctx.night.workers[0]).outcome is Outcome.KEEP
    real = runs_mod.record_run

    def then_a_signal(ctx, exp_id, role, m):  # a signal arrives after the first fresh run
        real(ctx, exp_id, role, m)
        ctx.night.cancel.set()

    monkeypatch.setattr(runs_mod, "record_run", then_a_signal)
    confirm(loop.ctx, "night_end")
    (c,) = confirmations(loop.ctx.store, "t")
    assert c.trigger == "cut_short" and c.runs == 1 and len(c.scores) == 1 and c.status == "confirmed"
    assert "on 1 fresh seed (of 3 planned: cut short)" in c.headline


def test_a_halted_night_says_it_confirmed_nothing(ws):
    loop = night(ws, **{"loop.confirm_seeds": 2})
    ws.enqueue("touch evaluate.py", knobs={"SCENARIO": "touch_eval"})
    assert loop.run() == 3
    (c,) = confirmations(loop.ctx.store, "t")
    assert (c.status, c.trigger, c.runs) == ("nothing", "cut_short", 0)
    assert c.headline.startswith("confirmed nothing: the night halted before its confirmation")
    assert "Confirmed: confirmed nothing: the night halted" in report_text(loop.ctx.store, ws.root)


def test_a_night_whose_best_is_the_baseline_confirms_nothing(ws):
    loop = night(ws, **{"loop.confirm_seeds": 2, "loop.max_experiments": 1})
    ws.enqueue("QUALITY 0.5 -> 0.2", knobs={"QUALITY": 0.2})
    assert loop.run() == 0
    (c,) = confirmations(loop.ctx.store, "t")
    assert (c.status, c.trigger, c.runs) == ("nothing", "night_end", 0)
    assert "the night's best is the baseline" in c.headline


def test_two_workers_share_the_seeds_the_best_gains(make_ws):
    ws = make_ws(loop_workers=2, loop_noise_reruns=3)
    noisy(ws)
    # both inside the noise up to the cap of 4 seeds: both need the baseline's seeds 2 and 3
    ws.enqueue("BONUS 0 -> 0.03", knobs={"BONUS": 0.03})
    ws.enqueue("BONUS 0 -> 0.031", knobs={"BONUS": 0.031})
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    (base,) = ws.rows("baseline")
    assert run_seeds(ws, base["id"]) == [0, 1, 2, 3]  # each seed run once on the best, by one worker
    cands = ws.rows()
    assert len(cands) == 2 and {c["worker"] for c in cands} == {"w0", "w1"}
    costs = [verdict(ws, c["id"])["cost"] for c in cands]
    assert sorted(s for c in costs for s in c["best_seeds_gained"]) == [2, 3]
    assert all(run_seeds(ws, c["id"]) == [0, 1, 2, 3] for c in cands)


def best_runs_changed(loop, monkeypatch, old: str, new: str):
    """From now on the best's train.py runs with ``old`` replaced by ``new`` (the seeds it already
    ran stay recorded); returns the store's real ``best`` for the assertions."""
    import dataclasses

    real_best = loop.ctx.store.best
    monkeypatch.setattr(loop.ctx.store, "best", lambda tag: dataclasses.replace(
        real_best(tag), source=real_best(tag).source.replace(old, new)))
    return real_best


def test_a_best_that_cannot_run_a_needed_seed_leaves_the_candidate_undecided(ws, monkeypatch):
    noisy(ws)
    loop = ready(ws, **{"loop.noise_reruns": 3})
    # the best's train.py, as the seed it must gain would run it, crashes (its own seeds 0, 1 are recorded)
    real_best = best_runs_changed(loop, monkeypatch, 'SCENARIO = "ok"', 'SCENARIO = "crash"')
    ws.enqueue("BONUS 0 -> 0.03", knobs={"BONUS": 0.03})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    base = real_best("t")
    assert r.outcome is Outcome.INCONCLUSIVE and r.halt_error is None
    assert r.verdict.blocking[0].startswith(f"the current best #{base.id} could not be measured on seed 2 (crash")
    assert run_seeds(ws, r.exp_id) == [0, 1] and run_seeds(ws, base.id) == [0, 1, 2]  # the failed run is on record
    assert [e for e in ws.rows() if e["id"] == r.exp_id][0]["status"] == "inconclusive"


def test_looper_confirm_exit_codes_off_and_nothing_to_confirm(ws):
    ready(ws)  # the baseline only: it is the best

    def confirm_cli() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "looper.cli", "confirm"], cwd=ws.root, env=ws.env(),
                              capture_output=True, text=True, timeout=120)

    off = confirm_cli()
    assert off.returncode == 2 and "confirm_seeds is 0" in off.stderr
    (ws.root / "looper.toml").write_text((ws.root / "looper.toml").read_text().replace(
        "confirm_seeds = 0", "confirm_seeds = 2"))
    nothing = confirm_cli()
    assert nothing.returncode == 1, nothing.stdout + nothing.stderr
    assert "confirmed nothing: the night's best is the baseline" in nothing.stdout
    (c,) = confirmations(Store(ws.root / "experiments.db"), "t")
    assert (c.status, c.trigger, c.runs) == ("nothing", "command", 0)


def test_a_best_run_cut_short_is_on_record_but_never_the_best_s_measurement(ws, monkeypatch):
    noisy(ws)
    loop = ready(ws, **{"loop.noise_reruns": 3, "loop.max_steps": 8})  # the fixture fits 10 steps: runs train 8
    # as the best gains seed 2 it fits only 5 of its 8 steps (a slower machine, say)
    real_best = best_runs_changed(loop, monkeypatch, "STEPS_FIT = 10 ", "STEPS_FIT = 5 ")
    ws.enqueue("BONUS 0 -> 0.03", knobs={"BONUS": 0.03})
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    base = real_best("t")
    assert r.outcome is Outcome.INCONCLUSIVE
    assert r.verdict.blocking[0].startswith(f"the current best #{base.id} on seed 2: ")
    assert "not comparable" in r.verdict.blocking[0]
    assert run_seeds(ws, base.id) == [0, 1, 2]
    with ws.db() as con:
        seed2 = con.execute("SELECT metrics_json FROM runs WHERE experiment_id=? AND seed=2", (base.id,)).fetchone()
    assert seed2[0] is None  # recorded without metrics: no gate reads it as the best's score


def test_a_night_stopped_by_a_signal_says_it_confirmed_nothing(ws):
    import threading

    loop = night(ws, **{"loop.confirm_seeds": 2})
    ws.enqueue("slow: QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8, "SLEEP": 30.0})

    def signal_when_training() -> None:  # what the SIGTERM handler does, once the candidate trains
        ws.wait_for(lambda: any((r["phase"] or "").startswith("train") for r in ws.rows()), 60, "training")
        loop.ctx.night.cancel.set()

    t = threading.Thread(target=signal_when_training)
    t.start()
    assert loop.run() == 0
    t.join()
    assert [r["status"] for r in ws.rows()] == ["interrupted"]
    (c,) = confirmations(loop.ctx.store, "t")
    assert (c.status, c.trigger, c.runs, c.experiment_id) == ("nothing", "cut_short", 0, ws.rows("baseline")[0]["id"])
    assert c.headline == "confirmed nothing: the night was stopped by a signal before its confirmation"
