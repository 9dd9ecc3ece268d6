"""Privacy stays: the test pages and their crops appear only in the report a person reads, never
in an agent's prompt, ``looper history`` (text or --json) or ``looper suggest`` (text or --json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from report_pictures import PAGES, add_pictures
from report_seed import TAG, Seeded

from looper.agents.prompt import build_prompt
from looper.agents.suggest import suggest
from looper.agents.view import build_history
from looper.config import Config
from looper.report import history_json, history_rows, history_text, write_html

REPO = Path(__file__).resolve().parents[2]
#: What a page or a crop would look like in text: its file name, a data URL, a PNG's base64 start.
MARKERS = (*PAGES, "page_0", "data:image", "base64", "iVBORw0KGgo", "MATCHES.json", "pages/test")


def _leaks(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


def test_pages_and_crops_reach_only_the_report(seeded: Seeded, tmp_path: Path) -> None:
    add_pictures(seeded.root, seeded.store)
    report = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    assert "data:image/png;base64,iVBORw0KGgo" in report and PAGES[0] in report  # the person sees them

    program_md, train_py = (REPO / "program.md").read_text(), (REPO / "train.py").read_text()
    prompt = build_prompt(program_md, train_py, build_history(seeded.store, TAG, "weighted_f1"), env={})
    assert prompt and _leaks(prompt) == []

    rows = history_rows(seeded.store)
    assert rows and _leaks(history_json(rows)) == [] and _leaks(history_text(rows)) == []

    for name in ("program.md", "train.py"):
        shutil.copy(REPO / name, seeded.root / name)
    # suggest plans from the best's train.py: make the best a real one (the seeded sources are stubs)
    real = seeded.store.start_experiment(tag=TAG, kind="candidate", config={}, source=train_py,
                                         description="the real train.py")
    seeded.store.record_outcome(real, outcome="keep", score=0.99, metrics={"weighted_f1": 0.99},
                                verdict={"status": "pass", "blocking": [], "metrics": {}, "confidence": 1.0},
                                commit="c" * 40)
    out = suggest(seeded.root, Config(), seeded.store)
    assert out["experiments_seen"] > 0 and out["text"] and _leaks(out["text"]) == [] and _leaks(json.dumps(out, default=str)) == []
