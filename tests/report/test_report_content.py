"""The morning report (text and HTML) says what the database says.

Every expectation is computed from the database through the Store or raw SQL, never
hard-coded, so a report that invents, drops or misattributes a number fails.
"""

from __future__ import annotations

import re
import sqlite3
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from report_seed import SECRET, TAG, Seeded

from looper.report import gather, report_text, write_html
from looper.store import ExperimentRecord


def _window_rows(s: Seeded) -> list[ExperimentRecord]:
    return s.store.find_experiments(since=s.since, tag=TAG)


def _sql(s: Seeded, query: str, *args: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(s.store.path)
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


class _Collect(HTMLParser):
    """Elements with their attributes, and the visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Collect:
    p = _Collect()
    p.feed(page)
    return p


# --------------------------------------------------------------------------- window


def test_default_window_is_the_last_daemon_run(seeded: Seeded) -> None:
    n = gather(seeded.store, seeded.root)
    assert n.since == seeded.since
    assert [e.id for e in n.experiments] == [e.id for e in _window_rows(seeded)]
    assert seeded.ids["old_discard"] not in {e.id for e in n.experiments}
    # the baseline lies outside the window and is still what the best is compared with
    assert n.baseline is not None and n.baseline.id == seeded.ids["baseline"]


def test_since_widens_the_window(seeded: Seeded) -> None:
    first = _sql(seeded, "SELECT min(started_at) FROM experiments")[0][0]
    n = gather(seeded.store, seeded.root, since=first)
    assert len(n.experiments) == _sql(seeded, "SELECT count(*) FROM experiments")[0][0]


# --------------------------------------------------------------------------- text


def test_text_counts_match_the_database(seeded: Seeded) -> None:
    text = report_text(seeded.store, seeded.root, console_width=160)
    counts = dict(_sql(seeded, "SELECT status, count(*) FROM experiments WHERE started_at >= ? GROUP BY status",
                       seeded.since))
    assert f"{sum(counts.values())} experiment(s):" in text
    for status, count in counts.items():
        assert f"{status} {count}" in text, status
    keeps = [r[0] for r in _sql(seeded, "SELECT id FROM experiments WHERE status='keep' AND kind='candidate' "
                                        "AND started_at >= ? ORDER BY id", seeded.since)]
    assert f"kept improvements: {len(keeps)} (" + " ".join(f"#{i}" for i in keeps) + ")" in text


def test_text_best_vs_baseline(seeded: Seeded) -> None:
    text = report_text(seeded.store, seeded.root, console_width=160)
    best = seeded.store.best(TAG)
    assert best is not None and best.score is not None
    base = seeded.store.experiment(seeded.ids["baseline"])
    assert base.score is not None
    line = next(x for x in text.splitlines() if x.startswith("best "))
    assert f"{best.score:.4f} (#{best.id})" in line
    assert f"baseline {base.score:.4f} (tag-start #{base.id})" in line
    assert f"{best.score - base.score:+.4f}" in line


def test_text_puts_what_needs_a_person_first(seeded: Seeded) -> None:
    text = report_text(seeded.store, seeded.root, console_width=200)
    attention_end = text.index("At a glance")
    head = text[:attention_end]
    halt = seeded.store.journal(kind="halt")[-1]
    assert halt.message in head and f"#{halt.experiment_id}" not in text[:text.index(halt.message)]
    assert "NOT DELIVERED" in head
    nm = seeded.ids["near_miss"]
    assert f"near miss #{nm}" in head and f"looper baseline approve {nm}" in head
    assert "fire_damper" in head and "smoke_damper" in head and "dead" in head
    # a class-gate failure that LOST to the best is not a near miss
    assert f"near miss #{seeded.ids['gate_fail_lower']}" not in text
    # a plain discard neither
    assert f"near miss #{seeded.ids['discard']}" not in text


def test_text_groups_crashes_by_signature(seeded: Seeded) -> None:
    text = report_text(seeded.store, seeded.root, console_width=200)
    groups = _sql(seeded, "SELECT failure_signature, group_concat(id, ' ') FROM experiments WHERE status='crash' "
                          "AND started_at >= ? GROUP BY failure_signature", seeded.since)
    assert len(groups) == 2
    for sig, ids in groups:
        line = next(x for x in text.splitlines() if sig in x and "crashed" not in x.split(sig)[0])
        ids_shown = " ".join(f"#{i}" for i in sorted(int(i) for i in ids.split()))
        assert ids_shown in line
        assert f" {len(ids.split())} " in f" {line.split()[0]} "


def test_text_time_totals(seeded: Seeded) -> None:
    text = report_text(seeded.store, seeded.root, console_width=160)
    n = gather(seeded.store, seeded.root)
    for part in ("agent", "train", "eval", "harness"):
        total, count = _sql(seeded, f"SELECT coalesce(sum({part}_seconds), 0), count({part}_seconds) "
                                    "FROM experiments WHERE started_at >= ?", seeded.since)[0]
        assert abs(n.time[part] - total) < 1e-9
        line = next(x for x in text.splitlines() if x.strip().startswith(part))
        assert f"({count} experiment(s))" in line
    peak = _sql(seeded, "SELECT id, json_extract(gpu_json, '$.peak_memory_mb') AS p FROM experiments "
                        "WHERE started_at >= ? AND p IS NOT NULL ORDER BY p DESC LIMIT 1", seeded.since)[0]
    assert f"peak memory {peak[1]:.0f} MB (#{peak[0]})" in text
    assert f"GPU LOST in #{seeded.ids['error']}" in text


def test_no_secret_ever_appears(seeded: Seeded, tmp_path: Path) -> None:
    text = report_text(seeded.store, seeded.root)
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    assert SECRET not in text and SECRET not in page
    assert "NOT DELIVERED" in page  # the event itself is shown, redacted


def test_approved_baseline_is_what_the_best_is_compared_with(seeded: Seeded) -> None:
    from looper.workspace.baselines import approve

    nm = seeded.ids["near_miss"]
    approve(seeded.store, seeded.root / "baselines", nm)
    n = gather(seeded.store, seeded.root)
    assert n.baseline_source.startswith("approved:") and f"(#{nm})" in n.baseline_source
    assert n.baseline_score == seeded.store.experiment(nm).score
    assert n.baseline_classes["return_grille"]["recall"] == seeded.store.class_scores(nm)["return_grille"].recall
    assert not any("no approved baseline" in a.text for a in n.attention)


def test_empty_database_reports_nothing_gracefully(tmp_path: Path) -> None:
    from looper.store import Store

    with Store(tmp_path) as store:
        text = report_text(store, tmp_path)
        page = write_html(store, tmp_path, tmp_path / "r.html").read_text()
    assert "0 experiment(s): none" in text
    assert "No measured experiment" in page


# --------------------------------------------------------------------------- HTML


def test_html_is_self_contained(seeded: Seeded, tmp_path: Path) -> None:
    page = write_html(seeded.store, seeded.root, tmp_path / "sub" / "r.html").read_text()
    p = _parse(page)
    assert not any(tag == "script" for tag, _ in p.elements)
    for tag, attrs in p.elements:
        for key in ("src", "href"):
            v = attrs.get(key)
            assert v is None or v.startswith("#"), f"<{tag} {key}={v!r}> points outside the page"
    assert "@import" not in page and "url(" not in page


def test_html_score_plot_has_one_point_per_scored_experiment(seeded: Seeded, tmp_path: Path) -> None:
    p = _parse(write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text())
    points = {int(a["data-id"]): float(a["data-score"]) for t, a in p.elements
              if t == "circle" and "pt" in (a.get("class") or "").split()}
    expected = dict(_sql(seeded, "SELECT id, score FROM experiments WHERE score IS NOT NULL AND started_at >= ?",
                         seeded.since))
    assert points.keys() == expected.keys()
    for i, score in expected.items():
        assert abs(points[i] - score) < 1e-6
    keeps = {int(a["data-id"]) for t, a in p.elements if t == "circle" and "keep" in (a.get("class") or "").split()}
    assert keeps == {r[0] for r in _sql(seeded, "SELECT id FROM experiments WHERE status='keep' AND started_at >= ?",
                                        seeded.since)}
    unscored = {int(a["data-id"]) for t, a in p.elements if "pt-unscored" in (a.get("class") or "")}
    assert unscored == {r[0] for r in _sql(seeded, "SELECT id FROM experiments WHERE score IS NULL AND "
                                                   "started_at >= ?", seeded.since)}
    assert any(t == "polyline" and a.get("id") == "running-best" for t, a in p.elements)


def test_html_outcome_counts_and_sections(seeded: Seeded, tmp_path: Path) -> None:
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    for status, count in _sql(seeded, "SELECT status, count(*) FROM experiments WHERE started_at >= ? "
                                      "GROUP BY status", seeded.since):
        assert f'data-outcome="{status}">{count}<' in page
    order = [page.index(f'id="{sid}"') for sid in ("attention", "glance", "score", "classes", "kept", "near-misses",
                                                    "crashes", "inconclusive", "exclusions", "time")]
    assert order == sorted(order), "sections out of order: what needs a person must come first"


def test_html_class_table_matches_class_metrics(seeded: Seeded, tmp_path: Path) -> None:
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    base = seeded.store.class_scores(seeded.ids["baseline"])
    top = seeded.store.best(TAG)
    assert top is not None
    best = seeded.store.class_scores(top.id)
    supports = sorted(v.support for v in base.values() if v.support > 0)
    median = (supports[(len(supports) - 1) // 2] + supports[len(supports) // 2]) / 2
    for c in base:
        m = re.search(rf'<tr class="(rare|)" data-class="{c}">(.*?)</tr>', page)
        assert m, c
        assert (m.group(1) == "rare") == (0 < base[c].support < median), c
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", m.group(2))
        b, k = base[c].recall, best[c].recall
        if b is not None:
            assert k is not None
            assert f"{b:.3f}" in cells and f"{k:.3f}" in cells
            assert f"{k - b:+.3f}" in cells
    assert page.count('class="cell"') == 6 * len(base)


def test_html_kept_changes_show_diff_rationale_and_score_change(seeded: Seeded, tmp_path: Path) -> None:
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    k1, k2 = seeded.store.experiment(seeded.ids["keep1"]), seeded.store.experiment(seeded.ids["keep2"])
    for k, before in ((k1, seeded.store.experiment(seeded.ids["baseline"])), (k2, k1)):
        block = page[page.index(f'id="exp-{k.id}"'):]
        block = block[: block.index("</details>")]
        assert k.rationale in block and k.description in block
        assert k.score is not None and before.score is not None
        assert f"{k.score - before.score:+.4f}" in block and f"#{before.id}" in block
        assert '<span class="a">+LR0' in block and '<span class="d">-LR0' in block


def test_html_near_miss_crash_groups_and_exclusions(seeded: Seeded, tmp_path: Path) -> None:
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    section = page[page.index('id="near-misses"'):page.index('id="crashes"')]
    assert f"looper baseline approve {seeded.ids['near_miss']}" in section
    assert f"looper baseline approve {seeded.ids['gate_fail_lower']}" not in section
    counts = sorted(int(c) for c in re.findall(r'class="crash-group" data-count="(\d+)"', page))
    expected = sorted(r[0] for r in _sql(seeded, "SELECT count(*) FROM experiments WHERE status='crash' AND "
                                                  "started_at >= ? GROUP BY failure_signature", seeded.since))
    assert counts == expected
    inc = seeded.store.experiment(seeded.ids["inconclusive"])
    assert inc.description in page[page.index('id="inconclusive"'):page.index('id="exclusions"')]
    excl = page[page.index('id="exclusions"'):page.index('id="time"')]
    for name in ("discard", "near_miss", "crash_oom1", "crash_name"):
        assert f"(#{seeded.ids[name]})" in excl, name
    assert f"(#{seeded.ids['inconclusive']})" not in excl  # inconclusive is never an exclusion


def test_html_every_experiment_link_has_a_target(seeded: Seeded, tmp_path: Path) -> None:
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    p = _parse(page)
    ids = [a["id"] for _, a in p.elements if a.get("id")]
    assert len(ids) == len(set(ids)), "duplicate element ids"
    targets = {a["href"][1:] for t, a in p.elements if t == "a" and (a.get("href") or "").startswith("#")}
    assert targets and targets <= set(ids), sorted(targets - set(ids))
    window = {f"exp-{e.id}" for e in seeded.store.find_experiments(since=seeded.since)}
    assert window <= set(ids)
