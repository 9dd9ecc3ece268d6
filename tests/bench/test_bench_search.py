"""bench/bench_search.py's own logic (its arms in bench/search_arms.py, its statistics and table in
bench/search_results.py): what its table in bench/RESULTS.md claims rests on these.

- ``compare``: "beats the baseline beyond the noise" (interval ends apart), Welch's one-sided p,
  and a keep the re-measurement did not confirm (a false keep caught).
- ``tune_source``: the Tuner's best hyperparameters written into train.py as a person would
  (the knobs train.py shares set in its block, the rest passed to ``model.train``).
- ``set_toml``: the arm's workspace settings land in the right section.
- ``--finish`` on a saved results.json (a relative ``--out``) compares, plots and prints.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from looper.core.propose.hyperblock import read_knobs

REPO = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("bench_search", REPO / "bench" / "bench_search.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = _load()
sys.path.insert(0, str(REPO / "bench"))
import search_arms  # noqa: E402
import search_results  # noqa: E402


@pytest.fixture
def bench():
    return BENCH


def measured(scores: list[float]) -> dict:
    """A re-measurement record as ``remeasure`` writes it."""
    m, lo, hi = search_results.interval(scores)
    return {"runs": [{"seed": 1000 + i, "score": s, "steps": 316} for i, s in enumerate(scores)],
            "mean": round(m, 4), "low": round(lo, 4), "high": round(hi, 4), "classes_found": 23,
            "remeasure_steps": 316}


def test_interval_is_the_95_percent_t_interval() -> None:
    m, lo, hi = search_results.interval([0.20, 0.22, 0.24])
    # sd 0.02, n 3, t(0.975, 2) = 4.3027
    assert m == pytest.approx(0.22)
    assert hi - m == pytest.approx(4.302653 * 0.02 / 3 ** 0.5, rel=1e-5)
    assert m - lo == pytest.approx(hi - m)
    one = search_results.interval([0.3])
    assert one[0] == 0.3 and one[1] != one[1] and one[2] != one[2]  # NaN: one seed has no interval


def test_compare_beyond_noise_needs_the_interval_ends_apart() -> None:
    entry = {"baseline": measured([0.20, 0.21, 0.22]),
             "arms": {"far": {"keeps": 1, "remeasured": measured([0.40, 0.41, 0.42])},
                      "overlap": {"keeps": 2, "remeasured": measured([0.21, 0.23, 0.25])},
                      "kept_worse": {"keeps": 1, "remeasured": measured([0.18, 0.19, 0.20])},
                      "kept_nothing": {"keeps": 0, "remeasured": measured([0.18, 0.19, 0.20])},
                      "tune": {"keeps": None, "remeasured": measured([0.10, 0.12, 0.14])}}}
    search_results.compare(entry)
    arms = entry["arms"]
    assert arms["far"]["beats_baseline"] is True and arms["far"]["welch_p_greater"] < 0.001
    # a higher mean inside the noise is not "beyond the noise", and its p says so
    assert arms["overlap"]["remeasured"]["mean"] > entry["baseline"]["mean"]
    assert arms["overlap"]["beats_baseline"] is False and arms["overlap"]["welch_p_greater"] > 0.05
    # a keep whose re-measured mean is not above the baseline's is a false keep caught; no keep, none caught
    assert arms["kept_worse"]["false_keep_caught"] is True
    assert arms["kept_nothing"]["false_keep_caught"] is False
    assert arms["far"]["false_keep_caught"] is False
    assert "false_keep_caught" not in arms["tune"] and arms["tune"]["beats_baseline"] is False


def test_compare_judges_the_tuners_own_training_on_its_own_record() -> None:
    own = measured([0.30, 0.31, 0.29]) | {"training": "ultralytics model.train, best.pt"}
    entry = {"baseline": measured([0.20, 0.21, 0.22]),
             "arms": {"tune": {"keeps": None, "remeasured": measured([0.19, 0.20, 0.21]), "remeasured_own": own}}}
    search_results.compare(entry)
    tune = entry["arms"]["tune"]
    assert tune["beats_baseline"] is False  # through train.py
    assert own["beats_baseline"] is True and own["welch_p_greater"] < 0.01  # Ultralytics' own training
    table = search_results.markdown({"args": {"minutes": 45, "budget": 150, "scale": "demo", "reseeds": 3, "device": "cpu"},
                            "repeats": [entry | {"repeat": 0}]})
    assert "| 0 | tune: its best hyperparameters, Ultralytics' own training (best.pt) |" in table
    assert "? / ? / ? epochs (time=)" in table


def test_compare_without_a_baseline_interval_claims_nothing() -> None:
    entry = {"baseline": {}, "arms": {"planner": {"keeps": 1, "remeasured": measured([0.4, 0.5])}}}
    search_results.compare(entry)
    assert "beats_baseline" not in entry["arms"]["planner"]
    assert "welch_p_greater" not in entry["arms"]["planner"]


def test_tune_source_writes_the_tuners_choice_into_train_py() -> None:
    base = (REPO / "train.py").read_text()
    hyp = {"lr0": 0.00731, "momentum": 0.91, "fliplr": 0.4, "shear": 6.0, "mixup": 0.72, "hsv_h": 0.01}
    src = search_arms.tune_source(base, hyp)
    ast.parse(src)
    k = read_knobs(src)
    assert k["LR0"] == pytest.approx(0.00731) and k["MOMENTUM"] == pytest.approx(0.91)
    assert k["FLIPLR"] == pytest.approx(0.4)
    # arguments train.py already passes are replaced in place; the others are added to model.train
    assert "hsv_h=0.01," in src and "hsv_h=0.0," not in src
    assert "'shear': 6.0" in src and "'mixup': 0.72" in src
    untouched = read_knobs(base)
    assert all(k[n] == untouched[n] for n in ("BATCH", "IMGSZ", "WIDTH", "OPTIMIZER"))


def test_set_toml_sets_a_key_in_its_own_section() -> None:
    text = '[loop]\ntag = "night"\nbudget_seconds = 60\n\n[agent]\nkind = "planner"\n'
    out = search_arms.set_toml(text, "agent", "kind", "evolve")
    out = search_arms.set_toml(out, "agent", "seed", 3)
    out = search_arms.set_toml(out, "executor", "require_gpu", False)
    import tomllib

    parsed = tomllib.loads(out)
    assert parsed["agent"] == {"kind": "evolve", "seed": 3}
    assert parsed["loop"] == {"tag": "night", "budget_seconds": 60}
    assert parsed["executor"] == {"require_gpu": False}


@pytest.mark.e2e  # draws the SVG with matplotlib (1.6 s): the fast tier had ~1 s of margin on a 2-core machine
def test_finish_on_a_saved_bench_with_a_relative_out(bench, tmp_path, monkeypatch, capsys) -> None:
    entry = {"repeat": 0, "baseline": measured([0.20, 0.21, 0.22]),
             "arms": {"planner": {"experiments": 5, "keeps": 1, "best_in_loop": 0.3, "curve": [[600.0, 0.3]],
                                  "remeasured": measured([0.30, 0.31, 0.32])}}}
    args = {"minutes": 45, "budget": 150, "scale": "demo", "reseeds": 3, "device": "cpu"}
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.json").write_text(json.dumps({"args": args, "repeats": [entry]}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench_search.py", "--finish", "--out", "out"])
    assert bench.main() == 0
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["repeats"][0]["arms"]["planner"]["beats_baseline"] is True
    assert (tmp_path / "out" / "best_over_time.svg").read_text().lstrip().startswith("<?xml")
    table = capsys.readouterr().out
    assert "| 0 | planner | 5 | 1 | 0.3000 | 0.300 / 0.310 / 0.320 | 0.31 [" in table
    assert "316 / 316 / 316 (at most 316)" in table


@pytest.mark.parametrize(("mine", "theirs", "same"), [
    ([{"seed": 1000, "score": 0.88}, {"seed": 1001, "score": 0.9}],
     [{"seed": 1000, "score": 0.88}, {"seed": 1001, "score": 0.9}], True),
    ([{"seed": 1000, "score": 0.88}], [{"seed": 1000, "score": 0.881}], False),  # another score
    ([{"seed": 1000, "score": 0.88}], [{"seed": 1001, "score": 0.88}], False),   # another seed
    ([{"seed": 1000, "score": 0.88}], [{"seed": 1000, "score": 0.88}, {"seed": 1001, "score": 0.9}], False),
    ([{"seed": 1000}], [{"seed": 1000}], False),  # both failed: nothing reproduced
    ([], [], False),
])
def test_a_re_measurement_reproduces_another_only_seed_for_seed_with_every_run_scored(
        mine: list[dict], theirs: list[dict], same: bool) -> None:
    assert search_results.reproduced(mine, theirs) is same
