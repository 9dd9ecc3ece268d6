"""bench/calibration_procedures.py: the two procedures the calibration in bench/RESULTS.md replays on a
pool of real runs, and the draws that decide which real run plays which part. Synthetic METRICS.json
(no training): one class that never moves, so the score test alone decides.

- ``judge_paired`` is the loop's intensification (looper.night.race.measure_and_gate): the candidate
  runs the best's own seeds in order, 1 then 2 then 4 ... up to the cap, a seed the best never ran is
  run on the best first, and a clear answer stops it early;
- ``judge_pooled`` is the last wave's loop: one fresh seed at a time, the gate told no seeds;
- the A/A paired draw never lets a run meet itself; the planted paired draw is the same seed on both
  sides; the planted pooled draw gives the baseline no seed of the candidate's;
- ``scaled`` plants an effect of a chosen size on the score alone.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

from looper.core.keep.gate import GateConfig

REPO = Path(__file__).resolve().parents[2]
CLASSES = {"a": {"tp": 5, "fp": 1, "fn": 5, "support": 10, "recall": 0.5}}


def _load():
    sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("calibration_procedures", REPO / "bench" / "calibration_procedures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cp = _load()
CFG = GateConfig()


def run(seed: int, score: float) -> dict:
    return {"seed": seed, "score": score,
            "metrics": {"pages": 1, "predictions": 10, "weighted_f1": score, "classes": CLASSES}}


class Recorder:
    """best_at / cand_at that record the seeds asked for, in order."""

    def __init__(self, base: float, effect: float, noise: dict[int, float]) -> None:
        self.base, self.effect, self.noise = base, effect, noise
        self.best_asked: list[int] = []
        self.cand_asked: list[int] = []

    def best_at(self, seed: int) -> dict:
        self.best_asked.append(seed)
        return run(seed, self.base + self.noise[seed])

    def cand_at(self, seed: int) -> dict:
        self.cand_asked.append(seed)
        return run(seed, self.base + self.effect + self.noise[seed] + 0.001 * (seed % 2))


NOISE = {k: 0.01 * ((k * 7) % 5 - 2) for k in range(20)}  # seed components, sd ~0.016


def test_paired_runs_the_bests_seeds_in_order_and_gains_the_ones_it_never_ran():
    # no effect: inconclusive at every look, so it runs the whole schedule 1, 2, 4, 5
    rec = Recorder(0.8, 0.0, NOISE)
    outcome, cand_runs, gained = cp.judge_paired(CFG, 3, 5, rec.best_at, rec.cand_at)
    assert outcome == "inconclusive"
    assert rec.cand_asked == [0, 1, 2, 3, 4]  # the best's seeds 0, 1, 2 first, then new ones
    assert rec.best_asked == [0, 1, 2, 3, 4]  # the best's own three, then the two it gained, each before the candidate
    assert (cand_runs, gained) == (5, 2)


def test_paired_stops_early_when_the_pairs_agree_on_a_clear_gain():
    # +0.05 on every seed, the pairs moving together (sd of the differences 0.0005): the paired t
    # keeps after 2 seeds of a cap of 5, without gaining any seed on the best
    rec = Recorder(0.8, 0.05, NOISE)
    outcome, cand_runs, gained = cp.judge_paired(CFG, 3, 5, rec.best_at, rec.cand_at)
    assert (outcome, cand_runs, gained) == ("keep", 2, 0)
    assert rec.cand_asked == [0, 1]


def test_paired_hands_the_decision_that_ended_it_to_decided_once():
    seen: list = []
    rec = Recorder(0.8, 0.05, NOISE)
    outcome, _, _ = cp.judge_paired(CFG, 3, 5, rec.best_at, rec.cand_at, decided=seen.append)
    assert [d.outcome.value for d in seen] == [outcome] == ["keep"]  # the last look's, not one per look


def test_why_names_each_blocking_check_and_counts_nothing_unknown_as_score_or_class():
    spec = importlib.util.spec_from_file_location("calibration_why", REPO / "bench" / "calibration_why.py")
    why = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(why)
    assert why.kind("recall.turning_vanes: 80 of 80 found -> 66 of 80 vs baseline", "weighted_f1") == "class gate"
    assert why.kind("weighted_f1 0.8673 is below the current best 0.8826", "weighted_f1") == "score"
    assert why.kind("weighted_f1_macro 0.8 is below", "weighted_f1") == "other (weighted_f1_macro 0.8 is below)"
    assert why.kind("crash: train.py exited 1", "weighted_f1") == "other (crash: train.py exited 1)"


def test_pooled_takes_one_fresh_seed_per_look_up_to_the_cap():
    base = [run(s, 0.8 + NOISE[s]) for s in range(3)]
    same = [run(10 + s, 0.8 + NOISE[s]) for s in range(3)]
    assert cp.judge_pooled(CFG, base, same) == ("inconclusive", 3, 0)
    far = [run(10 + s, 0.2) for s in range(3)]  # far below the baseline: discarded at the first look
    assert cp.judge_pooled(CFG, base, far) == ("discard", 1, 0)


def test_aa_paired_draw_pairs_distinct_runs_by_position():
    unchanged = [run(s, 0.8) for s in range(8)]
    rng = random.Random(1)
    for _ in range(50):
        best_at, cand_at = cp.draw_aa_paired(unchanged, 3, 4, rng)
        best = [best_at(k)["seed"] for k in range(4)]
        cand = [cand_at(k)["seed"] for k in range(4)]
        assert not set(best) & set(cand)
        assert len(set(best)) == 4
    with pytest.raises(ValueError, match="repeat a seed"):
        cp.draw_aa_paired([run(0, 0.8)] * 8, 3, 4, rng)


def test_planted_paired_draw_is_the_same_seed_on_both_sides():
    unchanged = [run(s, 0.8) for s in range(10)] + [run(1000 + s, 0.8) for s in range(5)]
    changed = [run(s, 0.7) for s in range(6)]
    rng = random.Random(2)
    for _ in range(50):
        best_at, cand_at = cp.draw_planted_paired(unchanged, changed, 3, 5, rng)
        for k in range(5):
            assert best_at(k)["seed"] == cand_at(k)["seed"] < 6
            assert (best_at(k)["score"], cand_at(k)["score"]) == (0.8, 0.7)


def test_planted_pooled_draw_keeps_the_candidates_seeds_out_of_the_baseline():
    unchanged = [run(s, 0.8) for s in range(6)]
    changed = [run(s, 0.7) for s in range(6)]
    rng = random.Random(3)
    for _ in range(50):
        base, cand = cp.draw_planted_pooled(unchanged, changed, 3, 3, rng)
        assert not {r["seed"] for r in base} & {r["seed"] for r in cand}
        assert all(r["score"] == 0.7 for r in cand) and len(base) == 3


def test_can_draw_names_what_is_missing():
    u = [run(s, 0.8) for s in range(7)]
    c = [run(s, 0.7) for s in range(4)]
    assert cp.can_draw("aa", "pooled", u, [], 3, 4) is None
    assert cp.can_draw("aa", "paired", u, [], 3, 4) == "7 unchanged runs, 8 needed"
    assert cp.can_draw("planted", "paired", u, c, 3, 4) is None
    assert cp.can_draw("planted", "paired", u, c, 3, 5) == "4 seeds with both codes, 5 needed"
    assert cp.can_draw("planted", "pooled", u, c, 3, 5).startswith("4 changed")


def test_scaled_plants_a_score_effect_of_the_chosen_size_on_the_unchanged_runs_metrics():
    u = [run(s, 0.8 + NOISE[s]) for s in range(4)]
    c = [run(s, 0.7 + NOISE[s] / 2) for s in range(3)] + [run(99, 0.1)]  # seed 99: no unchanged twin, left out
    out = cp.scaled(u, c, 0.25, "weighted_f1")
    assert [r["seed"] for r in out] == [0, 1, 2]
    for r in out:
        s = r["seed"]
        want = 0.8 + NOISE[s] + 0.25 * ((0.7 + NOISE[s] / 2) - (0.8 + NOISE[s]))
        assert r["score"] == pytest.approx(want) == r["metrics"]["weighted_f1"]
        assert r["metrics"]["classes"] is u[s]["metrics"]["classes"]


def test_judge_row_counts_every_draw_and_skips_a_pool_too_small():
    unchanged = [run(s, 0.8 + NOISE[s]) for s in range(10)]
    changed = [run(s, 0.75 + NOISE[s]) for s in range(5)]
    row = cp.judge_row(CFG, "paired", "planted", unchanged, changed, 3, 4, 30, 7)
    assert sum(row["counts"].values()) == row["draws"] == 30
    assert row["disjoint_judgements"] == 1  # 5 seeds with both codes, 4 a judgement
    assert row["runs_per_decision"] == row["candidate_runs"] + row["best_gained"]
    assert row == cp.judge_row(CFG, "paired", "planted", unchanged, changed, 3, 4, 30, 7)  # its own seed: repeatable
    assert cp.judge_row(CFG, "paired", "aa", unchanged[:7], [], 3, 4, 30, 7) == {
        "draws": 0, "skipped": "7 unchanged runs, 8 needed"}


def test_an_aa_draw_shifted_by_a_large_delta_is_kept_and_the_shift_touches_the_score_only():
    unchanged = [run(s, 0.8 + NOISE[s]) for s in range(10)]
    shifted = cp.shift(unchanged[0], 0.5, "weighted_f1")
    assert shifted["score"] == shifted["metrics"]["weighted_f1"] == pytest.approx(0.8 + NOISE[0] + 0.5)
    assert shifted["metrics"]["classes"] is unchanged[0]["metrics"]["classes"] and unchanged[0]["score"] < 0.9
    for procedure in ("pooled", "paired"):
        row = cp.judge_row(CFG, procedure, "aa", unchanged, [], 3, 3, 20, 1, delta=0.5)
        assert row["counts"] == {"keep": 20}


def test_the_pool_file_lists_every_run_with_what_the_tables_rest_on(tmp_path: Path):
    # bench/calibration_resample.py --pool-json: one row per run, read back from a real pool layout
    spec = importlib.util.spec_from_file_location("calibration_resample", REPO / "bench" / "calibration_resample.py")
    cr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cr)
    for label, seed, score, recalls in (("baseline", 1, 0.8, (0.5, 0.0)), ("baseline", 0, 0.7, (0.4, 0.2)),
                                        ("lrlow", 0, 0.9, (1.0, 0.3))):
        ck = tmp_path / "runs" / f"{label}-s{seed}"
        (ck / "out").mkdir(parents=True)
        classes = {f"c{i}": {"recall": r, "support": 10} for i, r in enumerate(recalls)}
        (ck / "METRICS.json").write_text(f'{{"weighted_f1": {score}, "classes": {json.dumps(classes)}}}')
        (ck / "out" / "train.json").write_text('{"steps": 300, "max_steps": 300, "seconds": 12.5}')
    rows = cr.pool_rows(cr.load_pool(tmp_path, "weighted_f1"), "weighted_f1")
    assert [(r["label"], r["seed"], r["weighted_f1"], r["classes_found"]) for r in rows] == [
        ("baseline", 0, 0.7, 2), ("baseline", 1, 0.8, 1), ("lrlow", 0, 0.9, 2)]
    assert all(r["steps"] == 300 and r["train_seconds"] == 12.5 for r in rows)
