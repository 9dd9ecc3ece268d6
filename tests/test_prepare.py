"""prepare.py: deterministic, imbalanced, look-alike-rich synthetic drawings."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from looper.core.scoring.classes import CLASSES, LOOKALIKE_GROUPS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import prepare  # noqa: E402

sys.path.remove(str(REPO))


def all_boxes(data: Path) -> Counter[str]:
    """Class counts over the whole data set: train tiles are cut from train pages, so count
    train pages through their own truth (rebuilt from the same seed) plus val/test pages."""
    counts: Counter[str] = Counter()
    for page in sorted((data / "pages").rglob("page_*.json")):
        counts.update(b["class"] for b in json.loads(page.read_text())["boxes"])
    sc = prepare.SCALES["tiny"]
    quota = prepare.class_quota("train", sc, np.random.RandomState([0, prepare.SPLIT_CODES["train"], 0]))
    for names in quota:
        counts.update(names)
    return counts


def test_same_seed_same_bytes(tiny_data: Path, tmp_path: Path) -> None:
    again = prepare.build(tmp_path / "again", "tiny", 0, test_seed=0)  # tiny_data's seeds (conftest)
    first = json.loads((tiny_data / "manifest.json").read_text())
    assert again["hash"] == first["hash"] and again["files"] == first["files"]
    for rel in list(first["files"])[:20]:
        assert (tmp_path / "again" / rel).read_bytes() == (tiny_data / rel).read_bytes()
    assert (tmp_path / "again" / "manifest.json").read_bytes() == (tiny_data / "manifest.json").read_bytes()


def test_different_seed_differs(tiny_data: Path, tmp_path: Path) -> None:
    other = prepare.build(tmp_path / "other", "tiny", 1, test_seed=1)
    first = json.loads((tiny_data / "manifest.json").read_text())
    assert other["hash"] != first["hash"]
    assert (tmp_path / "other" / "pages/test/page_000.png").read_bytes() != (tiny_data / "pages/test/page_000.png").read_bytes()


def test_manifest_hashes_every_file(tiny_data: Path) -> None:
    manifest = json.loads((tiny_data / "manifest.json").read_text())
    assert manifest["classes"] == list(CLASSES) and manifest["version"] == 2
    on_disk = {p.relative_to(tiny_data).as_posix() for p in tiny_data.rglob("*") if p.is_file()}
    assert set(manifest["files"]) == on_disk - {"manifest.json"} - {p for p in on_disk if p.endswith(".cache")}
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((tiny_data / rel).read_bytes()).hexdigest() == digest
    assert prepare.verify(tiny_data) == []


def test_verify_catches_a_changed_file(tiny_data: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_data, copy)  # the session's build, verified clean by test_manifest_hashes_every_file
    assert prepare.verify(copy) == []
    page = copy / "pages/test/page_000.json"
    page.write_text(page.read_text().replace("supply", "return", 1))
    assert any("page_000.json" in p for p in prepare.verify(copy))


def test_labels_sit_on_drawn_symbols(tiny_data: Path) -> None:
    checked = 0
    for page_json in sorted((tiny_data / "pages").rglob("page_*.json")):
        truth = json.loads(page_json.read_text())
        img = np.asarray(Image.open(page_json.with_suffix(".png")).convert("L"))
        for b in truth["boxes"]:
            x1, y1, x2, y2 = b["box"]
            crop = img[y1:y2, x1:x2]
            assert crop.size and (crop < 128).mean() > 0.03, f"{page_json.name}: no ink under {b}"
            # tight: ink on the box's outermost rows/columns
            assert (crop[0] < 128).any() or (crop[:, 0] < 128).any()
            checked += 1
    for label in sorted((tiny_data / "tiles/train/labels").glob("*.txt"))[:20]:
        img = np.asarray(Image.open(tiny_data / "tiles/train/images" / (label.stem + ".png")).convert("L"))
        side = img.shape[0]
        for line in label.read_text().splitlines():
            c, cx, cy, w, h = line.split()
            assert 0 <= int(c) < len(CLASSES)
            x1, y1 = int((float(cx) - float(w) / 2) * side), int((float(cy) - float(h) / 2) * side)
            x2, y2 = int((float(cx) + float(w) / 2) * side), int((float(cy) + float(h) / 2) * side)
            assert (img[y1:y2 + 1, x1:x2 + 1] < 128).mean() > 0.03
            checked += 1
    assert checked > 50


def test_imbalance_and_lookalikes(tiny_data: Path) -> None:
    counts = all_boxes(tiny_data)
    assert set(counts) == set(CLASSES), f"classes never drawn: {set(CLASSES) - set(counts)}"
    ratio = max(counts.values()) / min(counts.values())
    assert ratio >= 50, f"imbalance ratio {ratio:.1f} < 50"
    assert len(LOOKALIKE_GROUPS) >= 3
    for group in LOOKALIKE_GROUPS.values():
        assert len(group) >= 2 and all(name in counts for name in group)


def test_lookalikes_differ_only_by_a_small_detail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepare, "ROTATABLE", set())  # compare the symbols upright
    for group in ("grilles", "dampers", "sensors"):
        imgs = [np.asarray(prepare.draw_symbol(n, 40, np.random.RandomState(0))) < 128
                for n in LOOKALIKE_GROUPS[group]]
        same = [im for im in imgs if im.shape == imgs[0].shape]
        assert len(same) >= 2, f"{group}: look-alikes should share their outline"
        for a in same[1:]:
            differ = (a != same[0]).mean()
            assert 0 < differ < 0.25, f"{group}: look-alikes differ on {differ:.0%} of pixels"


def test_test_pages_never_feed_training(tiny_data: Path) -> None:
    train_sources = {p.name.split("_")[0] for p in (tiny_data / "tiles/train/images").glob("*.png")}
    assert train_sources and all(s.startswith("train") for s in train_sources)
    tile = prepare.TILE
    train_hashes = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (tiny_data / "tiles/train/images").glob("*.png")}
    for page in sorted((tiny_data / "pages/test").glob("page_*.png")):
        img = Image.open(page)
        truth = json.loads(page.with_suffix(".json").read_text())
        assert truth["split"] == "test"
        for y0 in prepare.tile_positions(img.height, tile, tile * 3 // 4):
            for x0 in prepare.tile_positions(img.width, tile, tile * 3 // 4):
                crop = prepare.png_bytes(img.crop((x0, y0, x0 + tile, y0 + tile)))
                assert hashlib.sha256(crop).hexdigest() not in train_hashes, f"{page.name} tile {x0},{y0} is in training"


def test_dataset_yaml_is_relative(tiny_data: Path) -> None:
    text = (tiny_data / "dataset.yaml").read_text()
    assert "train: tiles/train/images" in text and str(tiny_data) not in text and "path:" not in text


def test_bad_scale_and_nonempty_out(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="unknown --scale"):
        prepare.build(tmp_path / "x", "huge", 0)
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "stray.txt").write_text("x")
    with pytest.raises(SystemExit, match="not empty"):
        prepare.build(tmp_path / "y", "tiny", 0)


@pytest.mark.e2e  # builds a whole demo data set (about 1.6 s on a slow 2-core machine)
def test_demo_test_split_gives_every_class_gate_power(tmp_path: Path) -> None:
    """Issue 15: a class gate on 3-10 test instances fires on single symbols; the demo test split
    holds at least 20 instances of every class on 8 pages (was 3 on 12): evaluation stays cheap."""
    prepare.build(tmp_path / "demo", "demo", 0, test_seed=0)
    counts: Counter[str] = Counter()
    pages = sorted((tmp_path / "demo" / "pages" / "test").glob("page_*.json"))
    for page in pages:
        counts.update(b["class"] for b in json.loads(page.read_text())["boxes"])
    assert len(pages) == 8
    assert set(counts) == set(CLASSES)
    thin = {c: n for c, n in counts.items() if n < 20}
    assert not thin, f"classes with fewer than 20 test instances: {thin}"
    assert max(counts.values()) / min(counts.values()) >= 5  # still imbalanced, common classes common


# -- issue 23: the test pages cannot be rebuilt from anything train.py can read ------------------

def _digests(data: Path, prefix: str) -> dict[str, str]:
    files = json.loads((data / "manifest.json").read_text())["files"]
    return {k: v for k, v in files.items() if k.startswith(prefix)}


def test_the_test_pages_come_from_a_secret_the_manifest_does_not_hold(tiny_data: Path, tmp_path: Path) -> None:
    """A build from the same (public) seed as tiny_data, whose test pages were drawn the old way (from
    that seed: test_seed=0): the same train and val files, other test pages. prepare.py and the
    manifest's seed rebuild the training data, never the test pages; the manifest holds no test seed."""
    a = prepare.build(tmp_path / "a", "tiny", 0)  # a fresh secret
    assert _digests(tmp_path / "a", "tiles/") == _digests(tiny_data, "tiles/")
    assert _digests(tmp_path / "a", "pages/val/") == _digests(tiny_data, "pages/val/")
    mine, old_way = _digests(tmp_path / "a", "pages/test/"), _digests(tiny_data, "pages/test/")
    assert mine and set(mine) == set(old_way) and not set(mine.values()) & set(old_way.values())
    assert a["seed"] == 0 and a["version"] == 2 and not [k for k in a if "test" in k]


def test_an_explicit_test_seed_is_never_written_down(tmp_path: Path) -> None:
    """Reproducible builds (--test-seed) are covered by test_same_seed_same_bytes; the seed itself
    appears in no file of the data set."""
    seed = 0xDEADBEEF_0123456789ABCDEF_55AA55AA
    prepare.build(tmp_path / "a", "tiny", 0, test_seed=seed)
    text = b"".join(p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.suffix in (".json", ".yaml", ".txt"))
    for form in (str(seed), f"{seed:x}", f"{seed:032x}"):
        assert form.encode() not in text
    with pytest.raises(SystemExit, match="below 2\\*\\*128"):
        prepare.build(tmp_path / "c", "tiny", 0, test_seed=1 << 128)


def test_the_secret_is_kept_mode_600_and_used_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """prepare.py as looper runs it: $LOOPER_TEST_SEED_FILE names where the secret is kept (drawn there
    the first time, mode 600); a second build from it is byte-identical; its output never shows it."""
    from looper.workspace.hashes import TEST_SEED_ENV, secret_seed_file

    assert TEST_SEED_ENV == prepare.TEST_SEED_ENV
    keep = secret_seed_file(tmp_path / "ws")
    monkeypatch.setenv(TEST_SEED_ENV, str(keep))
    assert prepare.main(["--out", str(tmp_path / "a"), "--scale", "tiny", "--seed", "0"]) == 0
    assert keep.is_file() and (keep.stat().st_mode & 0o777) == 0o600
    secret = keep.read_text().strip()
    assert len(secret) == 32 and int(secret, 16) > 0
    assert prepare.main(["--out", str(tmp_path / "b"), "--scale", "tiny", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert secret not in out and str(int(secret, 16)) not in out
    ma, mb = ((tmp_path / d / "manifest.json").read_text() for d in "ab")
    assert ma == mb and secret not in ma and str(int(secret, 16)) not in ma
    assert prepare.main(["--out", str(tmp_path / "a"), "--verify"]) == 0  # every file by its hash
    (tmp_path / "a" / "pages/test/page_000.png").write_bytes(b"rebuilt")
    assert prepare.main(["--out", str(tmp_path / "a"), "--verify"]) == 1
    keep.write_text("not hex\n")
    with pytest.raises(SystemExit, match="does not hold a test seed"):
        prepare.main(["--out", str(tmp_path / "c"), "--scale", "tiny", "--seed", "0"])


def test_the_workspace_template_copy_is_this_file() -> None:
    """`looper init` copies prepare.py from the package's workspace template (setup.py ships the root's
    file; an editable install reads the root): both are the one file changed here."""
    from looper.workspace.create import template_root

    assert (template_root() / "prepare.py").read_bytes() == (REPO / "prepare.py").read_bytes()


def test_two_builds_drawing_the_test_seed_at_once_both_read_the_one_written_whole(tmp_path: Path) -> None:
    """load_test_seed on a new file from 8 threads released together, 20 times: one value for all, mode 600."""
    from at_once import at_once

    for i in range(20):
        path = tmp_path / f"w{i}" / ".looper" / "test_seed"
        got, errors = at_once(lambda path=path: prepare.load_test_seed(path))
        assert errors == [] and len(got) == 8 and len(set(got)) == 1, (i, errors)
        assert oct(path.stat().st_mode & 0o777) == "0o600" and [p.name for p in path.parent.iterdir()] == ["test_seed"]
