"""The val-tuned confidence in the report (looper/report/thresholds.py, issue 47): from a THRESHOLD.json
built by the night's own rule (looper.night.tuned.summary), the text report, the HTML page and
``looper report --json`` show per class the test F1 at 0.25 beside the F1 at the val threshold; a side
not measured says why; a class without val truth shows no threshold."""

from __future__ import annotations

import json
from pathlib import Path

from report_seed import Seeded

from looper.night.tuned import result_path, summary
from looper.report import report_text, write_html
from looper.report.facts import gather
from looper.report.json_report import report_json
from looper.report.thresholds import tuned, tuned_lines


def _stream(split: str, ranked: dict, support: dict) -> dict:
    return {"schema": 1, "split": split, "classes": ["supply_diffuser", "fire_damper", "thermostat"],
            "support": support, "ranked": ranked}


VAL = _stream("val", {"supply_diffuser": [[0.9, True], [0.12, True], [0.05, False]]}, {"supply_diffuser": 2})
TEST = _stream("test", {"supply_diffuser": [[0.8, True], [0.2, True], [0.15, False], [0.02, True]],
                        "fire_damper": [[0.6, True]]}, {"supply_diffuser": 3, "fire_damper": 2})


def _write(seeded: Seeded, exp_id: int, obj: dict) -> None:
    n = gather(seeded.store, seeded.root)
    path = result_path(seeded.root, n.tag, exp_id)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": 1, "experiment": exp_id, "confidence": 0.25, **obj}))


def _ids(seeded: Seeded) -> tuple[int, int]:
    n = gather(seeded.store, seeded.root)
    assert n.best is not None and n.baseline_id is not None and n.best.id != n.baseline_id
    return n.best.id, n.baseline_id


def test_the_report_shows_the_tuned_f1_beside_the_pinned_one(seeded: Seeded, tmp_path: Path) -> None:
    best, base = _ids(seeded)
    _write(seeded, best, {"status": "measured", "weights": "runs/x/main-s0/out/weights.pt", "seconds": 12.3,
                          **summary(VAL, TEST)})
    _write(seeded, base, {"status": "not measured", "reason": "the val evaluation failed (exit 2): no pages"})
    text = report_text(seeded.store, seeded.root)
    section = text[text.index("Confidence: test F1 at the pinned 0.25"):]
    # supply_diffuser: val F1 1.0 from above 0.05 to 0.12, threshold 0.085; test F1 1 of 3 at 0.25 -> 0.500, 2 of 3 (0.8,
    # 0.2, 0.15 shown) -> 0.667; fire_damper has no val truth: no threshold, its F1 at 0.25 (1 of 2 found, 0.667)
    # stays in the weighted F1 (two classes of few instances weigh alike: (0.500 + 0.667) / 2 -> (0.667 + 0.667) / 2)
    assert f"best #{best}: weighted F1 on the test pages 0.583 at 0.25 -> 0.667 with each class" in section
    assert f"baseline #{base}: not measured: the val evaluation failed (exit 2): no pages" in section
    line = next(x for x in section.splitlines() if x.strip().startswith("supply_diffuser"))
    assert line.split()[1:6] == ["2", "0.085", "0.050-0.120", "0.500", "0.667"]
    line = next(x for x in section.splitlines() if x.strip().startswith("fire_damper"))
    assert line.split()[1:6] == ["0", "none", "-", "0.667", "-"] and "no truth of this class on the val split" in line
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    assert 'id="thresholds"' in page and f'id="thresholds-{best}"' in page
    assert ('<tr data-class="supply_diffuser"><td>supply_diffuser</td><td class="n">2</td><td class="n">0.085</td>'
            '<td class="n">0.050-0.120</td>') in page
    got = report_json(seeded.store, seeded.root)["thresholds"]
    assert got["best"]["status"] == "measured" and got["best"]["weighted_f1_tuned"] == 0.666667
    rows = {r["class"]: r for r in got["best"]["classes"]}
    assert rows["supply_diffuser"]["threshold"] == (0.05 + 0.12) / 2 and rows["fire_damper"]["threshold"] is None
    assert got["baseline"] == {"experiment": base, "status": "not measured", "reason": "the val evaluation failed "
                               "(exit 2): no pages", "weighted_f1_fixed": None, "weighted_f1_tuned": None, "classes": []}


def test_missing_or_broken_files_are_not_measured_in_words(seeded: Seeded) -> None:
    best, base = _ids(seeded)
    n = gather(seeded.store, seeded.root)
    t = tuned(n, seeded.root)
    assert not t.best.measured and "no threshold evaluation of it ran" in t.best.reason
    path = result_path(seeded.root, n.tag, base)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert "is not readable JSON" in tuned(n, seeded.root).baseline.reason
    path.write_text(json.dumps(["measured"]))
    assert "says it measured nothing" in tuned(n, seeded.root).baseline.reason
    path.write_bytes(b" " * (4 * 2**20 + 1))
    assert "larger than 4 MiB" in tuned(n, seeded.root).baseline.reason
    lines = tuned_lines(tuned(n, seeded.root))
    assert len(lines) == 3 and all("not measured" in x for x in lines[1:])  # no table without a measured best
