"""Numbers a person reads are rounded to what their noise band supports (looper/report/fmt.shown):
suggest, status and the report's headline print no raw float like 0.10392233333333334."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from report_seed import TAG, Seeded

from looper.agents.suggest import suggest
from looper.config import Config
from looper.report import report_text, write_html
from looper.report.fmt import digits_for, shown
from looper.report.status import status_text

REPO = Path(__file__).resolve().parents[2]
RAW = 0.10392233333333334
LONG = re.compile(r"\d\.\d{7,}")  # a float printed with more digits than any noise band supports


@pytest.mark.parametrize(("band", "digits"), [
    (0.062, 3), (0.004, 4), (0.15, 2), (0.0004, 5), (1e-9, 6), (5.0, 2), (None, 4), (0.0, 4), (-1.0, 4),
    (float("nan"), 4), (float("inf"), 4),
])
def test_digits_follow_the_noise_band(band: float | None, digits: int) -> None:
    assert digits_for(band) == digits


@pytest.mark.parametrize(("v", "band", "sign", "text"), [
    (RAW, 0.004, False, "0.1039"), (RAW, 0.03, False, "0.104"), (RAW, None, False, "0.1039"),
    (0.0123, 0.004, True, "+0.0123"), (None, 0.01, False, "-"), (True, 0.01, False, "-"),
])
def test_shown(v: float | None, band: float | None, sign: bool, text: str) -> None:
    assert shown(v, band, sign=sign) == text


class _NoLock:
    def is_held(self) -> bool:
        return False


def test_suggest_status_and_report_print_rounded_scores(seeded: Seeded, tmp_path: Path) -> None:
    train_py = (REPO / "train.py").read_text()
    for name in ("program.md", "train.py"):
        shutil.copy(REPO / name, seeded.root / name)
    real = seeded.store.start_experiment(tag=TAG, kind="candidate", config={}, source=train_py, description="real")
    seeded.store.record_outcome(real, outcome="keep", score=RAW, metrics={"weighted_f1": RAW},
                                verdict={"status": "pass", "blocking": [], "metrics": {}, "confidence": 1.0},
                                commit="c" * 40)
    text = suggest(seeded.root, Config(), seeded.store)["text"]
    assert "score 0.1039;" in text and not LONG.search(text)  # the tag's sigma 0.004 supports 4 decimals
    status = status_text(seeded.store, Config(), _NoLock())
    assert f"#{real} score 0.1039 " in status and not LONG.search(status)
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    assert str(RAW) not in page and not LONG.search(report_text(seeded.store, seeded.root))
