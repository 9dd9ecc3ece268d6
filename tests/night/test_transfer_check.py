"""The transfer check, driven in-process on the fixture workspace (real git, real Store, the local
executor): the night's confirmed best and the baseline trained at a longer step budget on fresh seeds,
the verdict stored, headlined in the report, and a person paged when it does not hold."""

from __future__ import annotations

import dataclasses
import json

import pytest

from looper.core.verdicts.verdict import Outcome
from looper.night.experiment import run_candidate
from looper.report import report_text
from looper.store.queries import confirmations, transfers
from night.test_experiment_inprocess import night, ready  # noqa: F401 (fixtures below)
from night.test_experiment_inprocess import ws as ws  # noqa: F401,PLC0414

pytestmark = pytest.mark.e2e
LONGER = {"loop.confirm_seeds": 2, "loop.max_steps": 2, "confirm.transfer_steps": -1, "confirm.transfer_seeds": 2}


def test_a_night_end_transfer_check_holds_and_the_report_says_both_figures(ws, pages):
    loop = night(ws, pages, **{**LONGER, "loop.max_experiments": 1})
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    assert loop.run() == 0
    (kept,) = [r for r in ws.rows() if r["status"] == "keep"]
    (c,) = confirmations(loop.ctx.store, "t")
    (t,) = transfers(loop.ctx.store, "t")
    assert c.status == "confirmed" and (t.confirmation_id, t.experiment_id, t.trigger) == (c.id, kept["id"], "night_end")
    # the tiny preset's multiple: 3 x the night's 2 steps; fresh seeds above the confirmation's
    assert (t.status, t.steps, t.night_steps, t.seeds, t.runs) == ("holds", 6, 2, (4, 5), 4) and not t.flagged
    assert t.low > 0 and t.seconds > 0
    with ws.db() as con:  # another budget: never the experiments' own runs
        seeds = {r[0] for r in con.execute("SELECT seed FROM runs")}
    assert not seeds & {4, 5}
    folder = ws.root / "runs" / "t"
    assert sorted(p.name for p in folder.glob("*/transfer-s*")) == ["transfer-s4", "transfer-s4", "transfer-s5", "transfer-s5"]

    for p in folder.glob("*/transfer-s*/out/train.json"):
        assert json.loads(p.read_text())["max_steps"] == 6  # trained the longer budget
    text = report_text(loop.ctx.store, ws.root)
    assert f"Confirmed: weighted F1 {c.diff:+.3f}" in text
    assert f"Trained longer: holds at 6 steps (3x the night's 2): weighted F1 {t.diff:+.3f} [{t.low:+.3f}, {t.high:+.3f}]" \
           in text and "4 run(s)" in text and "min wall" in text
    assert pages.pages == []


def test_a_gain_that_reverses_when_trained_longer_is_flagged_and_a_person_is_paged(ws, pages, monkeypatch):
    loop = ready(ws, pages, **LONGER)
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    kept = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert kept.outcome is Outcome.KEEP
    from looper.night.confirm import confirm

    cid, error = confirm(loop.ctx, "command")
    assert error is None
    # planted: trained longer, the kept change does worse than the baseline (its train.py at the longer
    # budget is QUALITY 0.3: what a learning rate that only wins short runs looks like)
    real = loop.ctx.store.experiment
    monkeypatch.setattr(loop.ctx.store, "experiment", lambda i: dataclasses.replace(
        real(i), source=real(i).source.replace("QUALITY = 0.8", "QUALITY = 0.3")) if i == kept.exp_id else real(i))
    assert loop.transfer(cid, "command") is None
    (t,) = transfers(loop.ctx.store, "t")
    assert t.status == "reverses" and t.flagged and t.high < 0
    assert "REVERSES at 6 steps" in t.headline and "the baseline is better when trained longer" in t.headline
    (page,) = pages.pages
    assert f"#{kept.exp_id}'s confirmed gain reverses when trained longer (6 steps)" in json.dumps(page)
    text = report_text(loop.ctx.store, ws.root)
    assert f"!! #{kept.exp_id}'s confirmed gain reverses when trained longer (6 steps)" in text


def test_side_by_side_a_seed_s_two_runs_train_together_and_the_check_takes_one_round_a_seed(ws, pages, monkeypatch):
    """seed_jobs 2: the best's and the baseline's run of a seed are the pair that trains at once (the load of the
    moment falls on both sides alike), so 2 seeds a side take 2 rounds, where one side after the other took 2 + 2."""
    import threading
    import time

    from looper.night import measure as measure_module

    loop = ready(ws, pages, **{**LONGER, "loop.seed_jobs": 2})
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    kept = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert kept.outcome is Outcome.KEEP
    from looper.night.confirm import confirm

    cid, error = confirm(loop.ctx, "command")
    assert error is None
    spans: list[tuple[int, int, float, float]] = []  # (experiment, seed, start, end) of each transfer run
    real, lock = measure_module.measure, threading.Lock()

    def timed(ctx, w, exp_id, role, seed, *args, **kwargs):  # the real measure, its span noted
        t0 = time.monotonic()
        m = real(ctx, w, exp_id, role, seed, *args, **kwargs)
        with lock:
            spans.append((exp_id, seed, t0, time.monotonic()))
        return m

    monkeypatch.setattr(measure_module, "measure", timed)
    assert loop.transfer(cid, "command") is None
    (t,) = transfers(loop.ctx.store, "t")
    (c,) = confirmations(loop.ctx.store, "t")
    assert (t.status, t.runs, t.seeds) == ("holds", 4, (4, 5)), t.headline
    assert sorted((e, s) for e, s, *_ in spans) == sorted((e, s) for e in (c.experiment_id, c.baseline_id) for s in (4, 5))
    by = {(e, s): (a, b) for e, s, a, b in spans}
    for seed in (4, 5):  # a seed's two runs overlap in time: they trained as a pair
        (a0, a1), (b0, b1) = by[(c.experiment_id, seed)], by[(c.baseline_id, seed)]
        assert max(a0, b0) < min(a1, b1), (seed, spans)
    first_ends = min(by[(c.experiment_id, 4)][1], by[(c.baseline_id, 4)][1])
    assert all(by[(e, 5)][0] >= first_ends - 0.5 for e in (c.experiment_id, c.baseline_id)), spans  # seed 5 after a slot


def test_a_harness_error_mid_check_is_the_halt_s_words_and_the_runs_done_stay_on_record(ws, pages, monkeypatch):
    """The baseline's second seed ends in a harness error (planted on its real run's result): the check stops there,
    returns the error for the halt, and its row names that error, not a cut, with the 3 runs that scored counted."""
    from looper.night import measure as measure_module

    loop = ready(ws, pages, **LONGER)
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    assert run_candidate(loop.ctx, loop.ctx.night.workers[0]).outcome is Outcome.KEEP
    from looper.night.confirm import confirm

    cid, error = confirm(loop.ctx, "command")
    assert error is None
    (c,) = confirmations(loop.ctx.store, "t")
    real, ran = measure_module.measure, []

    def planted(ctx, w, exp_id, role, seed, *args, **kwargs):  # the real run; the baseline's seed 5 then errs
        m = real(ctx, w, exp_id, role, seed, *args, **kwargs)
        ran.append((exp_id, seed))
        return m.ended(Outcome.ERROR, "planted: the evaluator's pin changed") if (exp_id, seed) == (c.baseline_id, 5) else m

    monkeypatch.setattr(measure_module, "measure", planted)
    from looper.night import transfer

    record, err = transfer.check(loop.ctx, "command", cid)
    assert ran == [(c.experiment_id, 4), (c.baseline_id, 4), (c.experiment_id, 5), (c.baseline_id, 5)]
    assert str(err) == f"transfer check of #{c.baseline_id}, seed 5: planted: the evaluator's pin changed"
    (t,) = transfers(loop.ctx.store, "t")
    assert (t.status, t.trigger, t.runs, len(t.scores), len(t.baseline_scores)) == ("nothing", "command", 3, 2, 1)
    assert t.headline == f"transfer check: nothing: {err}" and record.id == t.id


def test_off_by_default_and_after_a_confirmation_that_confirmed_nothing(ws):
    loop = ready(ws, **{"loop.confirm_seeds": 2})  # transfer_steps 0: off
    from looper.night import transfer

    assert transfer.check(loop.ctx, "command", 1) == (None, None)
    loop = ready(ws, **LONGER)
    assert transfer.check(loop.ctx, "command", None) == (None, None)  # no confirmation
    assert transfers(loop.ctx.store, "t") == []





def test_looper_confirm_transfer_prints_both_and_refuses_when_off(ws):
    import subprocess
    import sys

    loop = ready(ws, **{"loop.max_steps": 2})
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    assert run_candidate(loop.ctx, loop.ctx.night.workers[0]).outcome is Outcome.KEEP
    cfg = (ws.root / "looper.toml").read_text().replace("confirm_seeds = 0", "confirm_seeds = 2")
    (ws.root / "looper.toml").write_text(cfg.replace("[loop]\n", "[loop]\nmax_steps = 2\n", 1))
    ws.git("commit", "-qam", "confirm on")

    def confirm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "looper.cli", "confirm", *args], cwd=ws.root, env=ws.env(),
                              capture_output=True, text=True, timeout=300)

    off = confirm("--transfer")
    assert off.returncode == 2 and "[confirm] transfer_steps is 0 (off)" in off.stderr
    with open(ws.root / "looper.toml", "a") as f:
        f.write("\n[confirm]\ntransfer_steps = 8\ntransfer_seeds = 2\n")
    ws.git("commit", "-qam", "transfer on")
    done = confirm("--transfer")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "transfer check: holds at 8 steps (4x the night's 2): weighted F1 +" in done.stdout
    assert "4 run(s)" in done.stdout.split("transfer check:")[1]
    (t,) = transfers(loop.ctx.store, "t")
    assert t.trigger == "command" and t.steps == 8
    from looper.report import write_html

    page = write_html(loop.ctx.store, ws.root, ws.root / "report.html").read_text()
    assert "Trained longer: holds at 8 steps" in page
