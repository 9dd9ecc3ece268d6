"""What a person sees of the statistical gate (issue 15, part 6): each verdict's noise band and
score test in words, the class tests in words, why a night kept nothing, the sandbox-off
warning, and the error bars of the HTML plots.

The verdicts in the seeded store come from the real gate (``report_seed_noise``); every
expectation is read back from what the store holds (the verdict's metrics, its blocking
reasons, the configuration), never hard-coded, so a report that invents or drops a figure fails.
"""

from __future__ import annotations

import re
import sqlite3
import statistics
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import report_seed
import report_seed_noise as seed
from seed_copies import SeedCopies

from looper.core.keep import stats
from looper.report import gather, render_html, report_text, write_html


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))


def _elements(page: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Collect()
    p.feed(page)
    return p.elements


def _verdict(s: seed.Seeded, name: str) -> dict[str, Any]:
    v = s.store.experiment(s.ids[name]).verdict
    assert isinstance(v, dict)
    return v


def _text(s: seed.Seeded) -> str:
    return report_text(s.store, s.root, console_width=400)  # wide: one line per printed line


def _page(s: seed.Seeded, tmp_path: Path) -> str:
    return write_html(s.store, s.root, tmp_path / "report.html").read_text()


# each fixture is this test's own copy of a seed built once per session (conftest.py: seed_copy)
@pytest.fixture
def nothing(tmp_path: Path, seed_copy: SeedCopies) -> seed.Seeded:
    return seed_copy(seed.build, tmp_path / "nothing")


@pytest.fixture
def kept(tmp_path: Path, seed_copy: SeedCopies) -> seed.Seeded:
    return seed_copy(seed.build, tmp_path / "kept", keep=True, sandbox="bwrap")


@pytest.fixture
def one_seed(tmp_path: Path, seed_copy: SeedCopies) -> seed.Seeded:
    return seed_copy(seed.build, tmp_path / "one", baseline_seeds=1)


# --------------------------------------------------------------------------- the seed is what it claims


def test_the_seed_holds_the_cases_the_report_must_explain(nothing: seed.Seeded, kept: seed.Seeded,
                                                          one_seed: seed.Seeded) -> None:
    """The gate really judged each case as the tests below assume (else they would test nothing)."""
    inside = _verdict(nothing, "inside")["metrics"]
    assert inside["noise_measured"] and abs(inside["diff"]) < inside["noise_band"]
    assert nothing.store.experiment(nothing.ids["inside"]).status == "inconclusive"
    fail = _verdict(nothing, "class_fail")
    assert any(b.startswith(f"recall.{seed.FAN}:") for b in fail["blocking"])
    assert kept.store.experiment(kept.ids["better"]).status == "keep"
    assert not _verdict(one_seed, "inside")["metrics"]["noise_measured"]


# --------------------------------------------------------------------------- the score test in words


def test_inside_the_noise_verdict_shows_its_band_and_test_in_words(nothing: seed.Seeded, tmp_path: Path) -> None:
    i = nothing.ids["inside"]
    m = _verdict(nothing, "inside")["metrics"]
    band, diff = m["noise_band"], m["diff"]
    seeds = f"{len(m['candidate_scores'])} candidate + {len(m['best_scores'])} best seeds"
    text = _text(nothing)
    line = next(x for x in text.splitlines() if x.strip().startswith(f"#{i} inconclusive:"))
    assert f"{diff:+.3f} vs best, band {band:.3f} at alpha" in line
    assert seeds in line and f"df {m['noise_df']}" in line and "t-test" in line
    assert line.rstrip().endswith("inside the noise")
    assert f"{m['alpha_per_look']:.3g}" in line  # the alpha this look really used
    page = _page(nothing, tmp_path)
    row = re.search(rf'<tr class="verdict" data-verdict-id="{i}" data-where="([a-z ]+)">(.*?)</tr>', page)
    assert row and row.group(1) == "inside the noise"
    assert f"band {band:.3f}" in row.group(2) and seeds in row.group(2) and f"{band:.4f}" in row.group(2)


def test_worse_and_better_verdicts_name_their_p_values(kept: seed.Seeded) -> None:
    text = _text(kept)
    worse = _verdict(kept, "worse")["metrics"]
    line = next(x for x in text.splitlines() if x.strip().startswith(f"#{kept.ids['worse']} discard:"))
    assert f"below the noise (p = {worse['score_test']['p_worse']:.2g} worse)" in line
    better = _verdict(kept, "better")["metrics"]
    line = next(x for x in text.splitlines() if x.strip().startswith(f"#{kept.ids['better']} keep:"))
    assert f"beyond the noise (p = {better['score_test']['p_better']:.2g} better)" in line


def test_class_failure_shows_its_test_in_words(nothing: seed.Seeded, tmp_path: Path) -> None:
    i = nothing.ids["class_fail"]
    v = _verdict(nothing, "class_fail")
    reasons = [b for b in v["blocking"] if b.startswith("recall.")]
    assert reasons and all("exact McNemar" in r and "p = " in r and "Holm over" in r for r in reasons)
    # each reason with the 95% intervals the gate stored for that class test
    failed = [t for t in v["metrics"]["class_tests"] if t["fails"]]
    assert len(failed) == len(reasons)
    shown = [f"{r}; 95% intervals {t['ref_interval'][0]:.2f}-{t['ref_interval'][1]:.2f} -> "
             f"{t['cand_interval'][0]:.2f}-{t['cand_interval'][1]:.2f}" for r, t in zip(reasons, failed, strict=True)]
    text = _text(nothing)
    section = text[text.index("Verdicts against the noise"):]
    block = section[section.index(f"#{i} discard:"):]
    for line in shown:
        assert f"class gate: {line}" in block
    page = _page(nothing, tmp_path)
    row = re.search(rf'<tr class="verdict" data-verdict-id="{i}"[^>]*>(.*?)</tr>', page)
    assert row
    for line in shown:
        assert f'<span class="fails">{line.replace(">", "&gt;").replace("<", "&lt;")}</span>' in row.group(1)


def test_a_verdict_from_before_the_statistics_gets_no_words(tmp_path: Path, seed_copy: SeedCopies) -> None:
    """The old seed's verdicts carry no noise figures: no judgement is invented for them."""
    s = seed_copy(report_seed.build, tmp_path)
    n = gather(s.store, s.root)
    assert n.judgements == {}
    assert "Verdicts against the noise" not in report_text(s.store, s.root)
    assert 'id="verdicts"' not in render_html(n) and 'class="errbar"' not in render_html(n)


# --------------------------------------------------------------------------- a night that kept nothing


def test_a_night_that_kept_nothing_says_why_in_numbers(nothing: seed.Seeded, tmp_path: Path) -> None:
    judged = [_verdict(nothing, k)["metrics"] for k in ("inside", "class_fail", "worse")]
    bands = sorted(m["noise_band"] for m in judged)
    alpha = judged[0]["alpha"]
    expected = f"no change beat the noise band {bands[0]:.3f} to {bands[-1]:.3f} (alpha {alpha:g})"
    text = _text(nothing)
    glance = text[text.index("At a glance"):]
    line = next(x for x in glance.splitlines() if x.startswith("kept nothing:"))
    assert expected in line
    inside = sum(1 for m in judged if abs(m["diff"]) < m["noise_band"])
    assert f"of {len(judged)} judged, {inside} inside the noise" in line
    closest = max(("inside", "class_fail", "worse"), key=lambda k: _verdict(nothing, k)["metrics"]["diff"])
    assert f"closest #{nothing.ids[closest]} at {_verdict(nothing, closest)['metrics']['diff']:+.3f}" in line
    page = _page(nothing, tmp_path)
    why = page[page.index('id="why-nothing-kept"'):]
    assert expected in why[:why.index("</div>")]
    assert "Nothing was kept: " + expected in page


def test_a_night_that_kept_something_does_not_say_it_kept_nothing(kept: seed.Seeded, tmp_path: Path) -> None:
    assert "kept nothing" not in _text(kept)
    assert 'id="why-nothing-kept"' not in _page(kept, tmp_path)


def test_unmeasured_noise_is_said_plainly(one_seed: seed.Seeded, tmp_path: Path) -> None:
    plain = "noise unmeasured: no keep or discard on the score alone"
    base = one_seed.store.experiment(one_seed.ids["baseline"])
    assert len(base.metrics["seed_scores"]) == 1  # type: ignore[index]
    text = _text(one_seed)
    line = next(x for x in text.splitlines() if x.startswith("kept nothing:"))
    unmeasured = [k for k in ("inside", "class_fail", "worse") if not _verdict(one_seed, k)["metrics"]["noise_measured"]]
    assert unmeasured
    assert f"{plain} ({len(unmeasured)} judged" in line and f"baseline #{base.id} was measured with 1 seed(s)" in line
    section = text[text.index("Verdicts against the noise"):]
    for k in unmeasured:
        i, m = one_seed.ids[k], _verdict(one_seed, k)["metrics"]
        v = next(x for x in section.splitlines() if x.strip().startswith(f"#{i} "))
        assert f"{m['diff']:+.4f} vs best: {plain}" in v or f"{m['diff']:+.3f} vs best: {plain}" in v
        assert "band" not in v  # no band is claimed where none was measured
    assert plain in _page(one_seed, tmp_path)


# --------------------------------------------------------------------------- the sandbox


def _sandbox_off(s: seed.Seeded | report_seed.Seeded) -> list[int]:
    con = sqlite3.connect(s.store.path)
    try:
        return [r[0] for r in con.execute("SELECT id FROM experiments WHERE started_at >= ? AND "
                                          "json_extract(config_json, '$.executor.sandbox') = 'none' ORDER BY id",
                                          (s.since,))]
    finally:
        con.close()


def test_sandbox_off_is_a_warning_that_needs_a_person(nothing: seed.Seeded, tmp_path: Path) -> None:
    off = _sandbox_off(nothing)
    assert off
    text = _text(nothing)
    head = text[:text.index("At a glance")]
    assert head.startswith("looper morning report") and "NEEDS A PERSON" in head
    line = next(x for x in head.splitlines() if '[executor] sandbox = "none"' in x)
    assert line.startswith(" ! ") and "WITHOUT its sandbox" in line
    assert f"in {len(off)} experiment(s): " + " ".join(f"#{i}" for i in off) in line
    n = gather(nothing.store, nothing.root)
    warn = next(a for a in n.attention if "sandbox" in a.text)
    assert warn.level == "warn"
    page = _page(nothing, tmp_path)
    attn = page[page.index('id="attention"'):page.index('id="glance"')]
    assert "[executor] sandbox = &quot;none&quot;" in attn and 'data-level="warn"' in attn


def test_sandbox_on_says_nothing(kept: seed.Seeded) -> None:
    assert _sandbox_off(kept) == []
    assert "sandbox" not in _text(kept)


def test_sandbox_off_in_the_workspace_config_when_no_experiment_records_it(tmp_path: Path,
                                                                           seed_copy: SeedCopies) -> None:
    s = seed_copy(report_seed.build, tmp_path)  # its experiments' configuration has no [executor]
    assert "sandbox" not in report_text(s.store, s.root)
    (tmp_path / "looper.toml").write_text('[executor]\nsandbox = "none"\n')
    text = report_text(s.store, s.root, console_width=400)
    head = text[:text.index("At a glance")]
    assert "looper.toml sets [executor] sandbox = \"none\"" in head
    (tmp_path / "looper.toml").write_text('[executor]\nsandbox = "bwrap"\n')
    assert "sandbox" not in report_text(s.store, s.root)


# --------------------------------------------------------------------------- error bars in the HTML


def test_score_plot_error_bars_for_every_experiment_with_several_seeds(nothing: seed.Seeded,
                                                                       tmp_path: Path) -> None:
    els = _elements(_page(nothing, tmp_path))
    bars = {a["id"]: a for t, a in els if t == "line" and a.get("class") == "errbar"}
    points = {a["data-id"]: a for t, a in els if t == "circle" and "pt" in (a.get("class") or "").split()}
    base = nothing.store.experiment(nothing.ids["baseline"])
    inside = _verdict(nothing, "inside")["metrics"]
    # exactly the experiments measured with more than one seed
    assert set(bars) == {f"err-{base.id}", f"err-{nothing.ids['inside']}"}
    scores = base.metrics["seed_scores"]  # type: ignore[index]
    base_band = stats.score_band(statistics.stdev(scores), len(scores) - 1, 1, len(scores), 0.05)
    for i, mean, band, runs in ((base.id, statistics.fmean(scores), base_band, len(scores)),
                                (nothing.ids["inside"], statistics.fmean(inside["candidate_scores"]),
                                 inside["noise_band"], len(inside["candidate_scores"]))):
        a = bars[f"err-{i}"]
        assert a["data-id"] == str(i) and int(a["data-seeds"] or 0) == runs
        assert abs(float(a["data-mean"] or 0) - mean) < 1e-6 and abs(float(a["data-band"] or 0) - band) < 1e-6
        # drawn through its point: the bar spans the point's y, symmetric around it
        cy = float(points[str(i)]["cy"] or 0)
        y1, y2 = float(a["y1"] or 0), float(a["y2"] or 0)
        assert y1 < cy < y2 and abs((cy - y1) - (y2 - cy)) < 0.2
        assert float(a["x1"] or 0) == float(points[str(i)]["cx"] or 0)


def test_class_interval_plot_uses_the_gates_counts(kept: seed.Seeded, tmp_path: Path) -> None:
    page = _page(kept, tmp_path)
    els = _elements(page)
    cis = {a["id"]: a for t, a in els if t == "line" and (a.get("class") or "").startswith("ci ")}
    best = kept.store.experiment(kept.ids["better"])
    tests = [t for t in best.verdict["metrics"]["class_tests"] if t["against"] == "baseline"]  # type: ignore[index]
    assert tests
    for t in tests:
        for side, key, who in (("base", "ref_interval", kept.ids["baseline"]), ("best", "cand_interval", best.id)):
            a = cis[f"ci-{side}-{t['class']}"]
            assert abs(float(a["data-lo"] or 0) - t[key][0]) < 1e-6 and abs(float(a["data-hi"] or 0) - t[key][1]) < 1e-6
            assert a["data-id"] == str(who) and a["data-class"] == t["class"]
            assert float(a["x1"] or 0) <= float(a["x2"] or 0)
        row = re.search(rf'<tr data-ci-class="{t["class"]}"[^>]*>(.*?)</tr>', page)
        assert row and f"{t['ref_found']} of {t['ref_total']}" in row.group(1)
        assert f"{t['cand_found']} of {t['cand_total']}" in row.group(1)
    ids = [a["id"] for _, a in els if a.get("id")]
    assert len(ids) == len(set(ids)), "duplicate element ids"
    for old in ("score-plot", "class-heatmap", "class-table", "time-bar", "outcome-bar", "running-best"):
        assert old in ids, old


def test_class_intervals_without_the_gates_counts_pool_the_seeds(nothing: seed.Seeded, tmp_path: Path) -> None:
    """Nothing kept: the best is the baseline (no class tests); its intervals pool its 3 seeds."""
    els = _elements(_page(nothing, tmp_path))
    base = nothing.store.experiment(nothing.ids["baseline"])
    runs = len(base.metrics["seed_scores"])  # type: ignore[index]
    lines = {a["id"]: a for t, a in els if t == "line" and (a.get("class") or "").startswith("ci ")}
    checked = 0
    for c, m in nothing.store.class_scores(base.id).items():
        if not m.support:
            assert f"ci-base-{c}" not in lines
            continue
        total = m.support * runs
        lo, hi = stats.recall_interval(round((m.recall or 0) * total), total)
        a = lines[f"ci-base-{c}"]
        assert abs(float(a["data-lo"] or 0) - lo) < 1e-6 and abs(float(a["data-hi"] or 0) - hi) < 1e-6
        checked += 1
    assert checked >= 20



def test_class_intervals_leave_out_a_verdict_judged_against_another_baseline(kept: seed.Seeded) -> None:
    """Once a baseline is approved, the best's class tests (judged against the tag start) are not
    the report's baseline: the intervals come from the approved figures instead."""
    from looper.report.classes import class_intervals
    from looper.workspace.baselines import approve

    before = class_intervals(gather(kept.store, kept.root))
    assert before and {r["source"] for r in before} == {"gate"}
    approve(kept.store, kept.root / "baselines", kept.ids["inside"])
    n = gather(kept.store, kept.root)
    assert n.baseline_source.startswith("approved:")
    after = class_intervals(n)
    assert after and {r["source"] for r in after} == {"recall x support x seeds"}
    approved = kept.store.experiment(kept.ids["inside"])
    runs = approved.metrics["runs"]  # type: ignore[index]
    for r in after:
        m = approved.classes[r["class"]]
        assert r["base_total"] == m["support"] * runs
        assert r["base_found"] == round(m["recall"] * m["support"] * runs)


def test_a_night_of_crashes_says_nothing_was_measured(tmp_path: Path) -> None:
    from looper.store import Store

    with Store(tmp_path) as store:
        store.add_event("t", "start", "daemon started")
        for sig in ("CUDA out of memory", "CUDA out of memory", "NameError"):
            i = store.start_experiment(tag="t", kind="candidate", parent="p" * 40, seed=0, config={}, description="x",
                                       rationale="", source="", diff="")
            store.record_outcome(i, outcome="crash", blocking=[sig], failure_signature=sig, exit_code=1)
        text = report_text(store, tmp_path, console_width=400)
    assert "kept nothing: no candidate was kept: 3 tried, none measured a score (crash 3)" in text
    assert "noise band" not in text.split("At a glance")[1].split("halts")[0]


@pytest.mark.parametrize(("share", "looks", "alpha_look", "halved", "words"), [
    (None, 1, 0.05, False, "at alpha 0.05 (one-sided"),                          # one look: the configured alpha
    (None, 3, 0.05, False, "at alpha 0.05 (one-sided"),                          # an older verdict without alpha_per_look
    (None, 3, 0.05 / 3, False, "at alpha 0.0167 (0.05 split over 3 seeds) (one-sided"),  # one look per seed
    (None, 1, 0.025, True, "at alpha 0.025 (0.05 halved for two tests) (one-sided"),
    (2 / 7, 3, 0.05 * 2 / 7, False, "at alpha 0.0143 (0.05 shared over 3 looks by their seeds) (one-sided"),
    (2 / 7, 3, 0.05 / 7, True,
     "at alpha 0.00714 (0.05 shared over 3 looks by their seeds, halved for two tests) (one-sided"),
])
def test_a_verdict_line_says_where_its_alpha_came_from(share, looks, alpha_look, halved, words) -> None:
    from looper.report.night import Judgement

    j = Judgement(id=1, outcome="inconclusive", diff=0.001, band=0.02, measured=True, alpha=0.05,
                  alpha_look=alpha_look, looks=looks, candidate_scores=(0.5, 0.51), n_best=3, df=3, p_better=0.4,
                  p_worse=0.6, simpler=False, class_failures=(), share=share, halved=halved)
    assert words in j.words and j.words.endswith("inside the noise")
