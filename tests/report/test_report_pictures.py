"""The morning in pictures (looper/report/pictures.py, pictures_html.py, json_report.py): the
regions where the best and the baseline differ, drawn; the confusion matrices as a picture and
as numbers; what is missing said in words."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

from report_pictures import PAGES, add_pictures
from report_seed import Seeded

from looper.core.scoring import matches as core_matches
from looper.report import write_html
from looper.report.json_report import report_json

PNG = re.compile(r'<img class="crop crop-(best|baseline)"[^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def test_the_page_draws_where_best_and_baseline_differ(seeded: Seeded, tmp_path: Path) -> None:
    from PIL import Image

    ids = add_pictures(seeded.root, seeded.store)
    out = write_html(seeded.store, seeded.root, tmp_path / "r.html")
    page = out.read_text()
    assert 'id="pictures"' in page and out.stat().st_size < 5 * 2**20
    imgs = PNG.findall(page)
    sides = [s for s, _ in imgs]
    assert sides and sides == ["best", "baseline"] * (len(sides) // 2)  # side by side, best first
    for _, data in imgs:
        im = Image.open(io.BytesIO(base64.b64decode(data)))
        im.load()
        assert im.format == "PNG" and im.size[0] >= 256
        colours = {c for _, c in im.convert("RGB").getcolors(1 << 16)}
        assert (26, 152, 80) in colours  # a found box, solid green
    # the three styles have a legend; the baseline's crops show its invented and missed boxes
    for word in ("solid green", "dashed red", "dotted orange"):
        assert word in page
    caps = re.findall(rf"baseline #{ids['baseline']}: (\d+) found, (\d+) invented, (\d+) missed</figcaption>",
                      page)
    assert len(caps) == len(imgs) // 2
    assert sum(int(c[1]) for c in caps) >= 1 and sum(int(c[2]) for c in caps) >= 1
    assert any(name in page for name in PAGES)  # the person sees which page a region is on


def test_the_confusion_matrices_group_the_lookalikes(seeded: Seeded, tmp_path: Path) -> None:
    ids = add_pictures(seeded.root, seeded.store)
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    assert 'id="confusion-best"' in page and 'id="confusion-delta"' in page
    assert 'data-group="square_diffusers"' in page and 'data-group="dampers"' in page
    # the baseline took return diffusers for supply diffusers: the change shows it going away
    cell = re.search(r'id="confusion-delta".*?data-pred="supply_diffuser" data-true="return_diffuser" data-v="(-?\d+)"',
                     page, re.S)
    assert cell is not None and int(cell.group(1)) < 0
    got = report_json(seeded.store, seeded.root)
    pics = got["pictures"]
    assert pics["best"]["experiment"] == ids["best"] and pics["baseline"]["experiment"] == ids["baseline"]
    base = pics["baseline"]["confusion"]
    labels = base["labels"]
    assert labels[:2] == ["supply_diffuser", "return_diffuser"] and labels[-1] == "background"
    assert base["matrix"][labels.index("supply_diffuser")][labels.index("return_diffuser")] == 6  # 2 per page
    assert base["matrix"][labels.index("thermostat")][labels.index("background")] == 3
    change = pics["change"]  # best minus baseline, cell by cell
    lab = change["labels"]
    assert change["matrix"][lab.index("supply_diffuser")][lab.index("return_diffuser")] == -6
    assert change["matrix"][lab.index("return_diffuser")][lab.index("return_diffuser")] == 6
    text = json.dumps(got)
    assert not any(name in text for name in PAGES) and "base64" not in text and "iVBOR" not in text


def test_a_missing_matches_file_is_said_in_words(seeded: Seeded, tmp_path: Path) -> None:
    ids = add_pictures(seeded.root, seeded.store, baseline=False)
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    assert f"baseline #{ids['baseline']}: no run folder" in page or f"baseline #{ids['baseline']}: no MATCHES.json" in page
    assert "the baseline has no matched boxes: the regions where best" in page and 'id="confusion-best"' in page
    sides = [side for side, _ in PNG.findall(page)]
    assert sides and set(sides) == {"best"}  # the best's errors, drawn alone
    assert re.search(r"\(\d+ invented or missed\)", page)
    got = report_json(seeded.store, seeded.root)["pictures"]
    assert got["baseline"]["confusion"] is None and got["baseline"]["problem"]


def test_no_pictures_when_no_run_kept_matches(seeded: Seeded, tmp_path: Path) -> None:
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    assert 'id="pictures"' in page and "no run folder" in page and "data:image/png" not in page


def test_a_planted_page_name_is_never_opened(seeded: Seeded, tmp_path: Path) -> None:
    """A page name in MATCHES.json is a file name under the test pages, nothing else."""
    add_pictures(seeded.root, seeded.store)
    for run in (seeded.root / "runs").rglob("MATCHES.json"):
        obj = json.loads(run.read_text())
        for p in obj["pages"]:
            p["page"] = "../../../etc/" + p["page"]
        run.write_text(json.dumps(obj))
        assert core_matches.problems(obj) == []
    page = write_html(seeded.store, seeded.root, tmp_path / "r.html").read_text()
    assert "test page image(s) not found" in page and "data:image/png" not in page


def test_the_terminal_report_says_it_in_words(seeded: Seeded) -> None:
    from looper.report import report_text

    ids = add_pictures(seeded.root, seeded.store)
    text = report_text(seeded.store, seeded.root)
    tail = text.split("On the test pages", 1)[1]
    assert f"best #{ids['best']}: 33 found, 0 invented, 3 missed on 3 test page(s)" in tail
    assert f"baseline #{ids['baseline']}: 24 found, 9 invented, 12 missed on 3 test page(s)" in tail
    assert f"best #{ids['best']} takes no class for another" in tail
    assert f"baseline #{ids['baseline']} most confused: return_diffuser taken for supply_diffuser 6x" in tail
    assert not any(name in tail for name in PAGES)  # counts and classes, no page names


def test_when_the_best_is_the_baseline_its_errors_are_drawn_alone(seeded: Seeded) -> None:
    """A night that kept nothing (the demo's usual answer): the baseline is the best, so there is
    nothing to compare; the page shows where it invents and misses most."""
    import dataclasses

    from looper.report.facts import gather
    from looper.report.pictures import pictures
    from looper.report.pictures_html import pictures_html

    ids = add_pictures(seeded.root, seeded.store)
    n = gather(seeded.store, seeded.root)
    same = dataclasses.replace(n, baseline_id=ids["best"])
    p = pictures(same, seeded.root)
    assert p.crops and all(c.baseline_png is None and set(c.counts) == {"best"} for c in p.crops)
    assert all(c.counts["best"]["fp"] + c.counts["best"]["fn"] >= 1 for c in p.crops)
    assert any(f"the best is the baseline (#{ids['best']})" in x for x in p.notes)
    html = pictures_html(p)
    assert html.count('class="crop crop-best"') == len(p.crops) and "crop-baseline" not in html
