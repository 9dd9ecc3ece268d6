"""The report of a night judged by the statistical gate, opened in a REAL headless Chromium:
the error bars of the score plot and the per-class recall intervals are in the rendered DOM,
each with its id, and the page logs no console error. The screenshot is kept under
``artifacts/`` for a person to look at.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import report_seed_noise as seed
from test_report_chromium import _dom, _keep_screenshot

from looper.report import write_html

pytestmark = pytest.mark.e2e


def test_noise_report_draws_error_bars_in_chromium(tmp_path: Path) -> None:
    s = seed.build(tmp_path / "ws", keep=True)
    try:
        page = write_html(s.store, s.root, tmp_path / "report.html")
        best = s.store.experiment(s.ids["better"])
        tests = [t for t in best.verdict["metrics"]["class_tests"] if t["against"] == "baseline"]  # type: ignore[index]
        several = [e.id for e in s.store.find_experiments(since=s.since)
                   if e.kind == "baseline" or len((e.verdict or {}).get("metrics", {}).get("candidate_scores") or []) > 1]
    finally:
        s.store.close()
    dom = _dom(tmp_path, page)
    bars = sorted(int(i) for i in re.findall(r'<line class="errbar" id="err-(\d+)" data-id="\1"', dom))
    assert bars == sorted(several) and len(bars) >= 3
    for t in tests:
        for side in ("base", "best"):
            assert f'id="ci-{side}-{t["class"]}"' in dom, (side, t["class"])
    for svg_id in ("score-plot", "class-heatmap", "class-intervals", "time-bar", "outcome-bar"):
        assert f'id="{svg_id}"' in dom, svg_id
    assert 'id="verdict-table"' in dom and 'id="seed-bars"' in dom
    _keep_screenshot(tmp_path, page, "report_noise", 4200)
