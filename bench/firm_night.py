"""A firm's drawings, tonight (issue 47): real-size sheets of a firm's own symbols, drawn here without
prepare.py and exported by a third-party library, through import, check and a demo-preset night.

The sheets: A1 at 150 dpi (4967 x 3508 px), a frame and title block, a column grid with its labels,
walls, duct runs (double lines), room text; :data:`CLASSES` (8 own glyphs, none of prepare.py's) at 18
to 60 px, a quarter turned by 90/180/270 degrees, some in crowded clusters, about ``--symbols`` a sheet;
a third of the sheets with a scanned look (paper grain, speckle, a slight blur). supervision writes them
as COCO in Roboflow's layout (``train/``, ``valid/``, ``test/``, each with ``_annotations.coco.json``).
Then, as a user would, with no step by hand::

    looper init WS --preset demo --data EXPORT
    looper data check           (in WS)
    looper run --max-experiments 3
    looper report

then ``looper predict`` on one whole test sheet with a scored run's weights, timed and compared with the boxes
that run's MATCHES.json lists for the sheet; and one summary line ``firm_night: ...``: sheets, symbols, each
command's exit and seconds, every run's train.json figures (peak RAM in MB, seconds to the first step, steps,
stopped by; all in ``firm_night.json``) and the predict check. The goals (issue 47): no halt (``looper run``
exits 0 with 3 experiments), peak RAM <= 2048 MB a run, first step <= 15 s at 40 and at 160 sheets,
``looper predict`` on a whole A1 sheet the evaluator's boxes in <= 10 s.

    .venv/bin/python bench/firm_night.py --out /tmp/firm40 --sheets 40
    .venv/bin/python bench/firm_night.py --out /tmp/firm160 --sheets 160 --experiments 1
    .venv/bin/python bench/firm_night.py --out /tmp/firm5 --sheets 5 --export-only
    python bench/firm_night.py --out /tmp/firm40g --sheets 40 --set executor.require_gpu=true \
        --set loop.max_steps=1000 --set loop.seed_jobs=4          # issue 47's GPU goal, on a GPU host

``--set`` changes looper.toml after init, before anything runs (the GPU night: its step budget and slots).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_parts import toml_set  # noqa: E402  (bench/: keeps the rest of looper.toml as it is)

WIDTH, HEIGHT = 4967, 3508  # A1 landscape at 150 dpi, px
CLASSES = ["firm_diffuser", "firm_return_grille", "firm_sensor", "firm_valve",
           "firm_fan", "firm_damper", "firm_thermostat", "firm_pump"]
SIZE_PX = (18, 60)  # a symbol's side, px
SCANNED_SHARE = 1 / 3  # of the sheets, with paper grain, speckle and blur
TURNED_SHARE = 0.25  # of the symbols, turned by 90, 180 or 270 degrees
SPLIT_SHARE = {"train": 0.7, "val": 0.1, "test": 0.2}


def glyph(name: str, side: int) -> Image.Image:
    """One symbol of the firm's legend on white, ``side`` px square, drawn at 4x and reduced (anti-aliased)."""
    s = side * 4
    im = Image.new("L", (s, s), 255)
    d = ImageDraw.Draw(im)
    w = max(4, s // 14)  # line width
    m = w  # margin
    box = (m, m, s - m, s - m)
    c = s // 2
    if name == "firm_diffuser":  # square with both diagonals
        d.rectangle(box, outline=0, width=w)
        d.line((m, m, s - m, s - m), fill=0, width=w)
        d.line((m, s - m, s - m, m), fill=0, width=w)
    elif name == "firm_return_grille":  # square with parallel hatching
        d.rectangle(box, outline=0, width=w)
        for k in range(1, 5):
            x = m + k * (s - 2 * m) // 5
            d.line((x, m, x, s - m), fill=0, width=max(2, w // 2))
    elif name == "firm_sensor":  # circle with a filled dot and a tail
        d.ellipse(box, outline=0, width=w)
        r = s // 8
        d.ellipse((c - r, c - r, c + r, c + r), fill=0)
        d.line((c, c, s - m, m), fill=0, width=w)
    elif name == "firm_valve":  # bow tie: two triangles meeting at the centre, a stem
        d.polygon([(m, s // 4), (c, c), (m, 3 * s // 4)], outline=0, fill=0)
        d.polygon([(s - m, s // 4), (c, c), (s - m, 3 * s // 4)], outline=0, width=w)
        d.line((c, c, c, m), fill=0, width=w)
    elif name == "firm_fan":  # circle with three blades
        d.ellipse(box, outline=0, width=w)
        for a in (90, 210, 330):
            x = c + (c - 2 * m) * math.cos(math.radians(a))
            y = c - (c - 2 * m) * math.sin(math.radians(a))
            d.line((c, c, x, y), fill=0, width=w)
    elif name == "firm_damper":  # rectangle, a blade across it and its pivot
        d.rectangle((m, s // 4, s - m, 3 * s // 4), outline=0, width=w)
        d.line((m, 3 * s // 4, s - m, s // 4), fill=0, width=w)
        r = s // 10
        d.ellipse((c - r, c - r, c + r, c + r), outline=0, width=max(2, w // 2))
    elif name == "firm_thermostat":  # square with a circle inside
        d.rectangle(box, outline=0, width=w)
        r = s // 4
        d.ellipse((c - r, c - r, c + r, c + r), outline=0, width=w)
    elif name == "firm_pump":  # circle with a triangle pointing right
        d.ellipse(box, outline=0, width=w)
        d.polygon([(s // 3, s // 4), (3 * s // 4, c), (s // 3, 3 * s // 4)], outline=0, width=w)
    else:
        raise ValueError(f"not a class of the firm's legend: {name!r}")
    return im.resize((side, side), Image.LANCZOS)


def background(rng: np.random.Generator) -> Image.Image:
    """A sheet without symbols: frame, title block, column grid with labels, walls, ducts, room text."""
    im = Image.new("L", (WIDTH, HEIGHT), 255)
    d = ImageDraw.Draw(im)
    d.rectangle((60, 60, WIDTH - 60, HEIGHT - 60), outline=0, width=6)
    tb = (WIDTH - 1100, HEIGHT - 460, WIDTH - 60, HEIGHT - 60)  # title block
    d.rectangle(tb, outline=0, width=4)
    for k in range(1, 5):
        d.line((tb[0], tb[1] + k * 80, tb[2], tb[1] + k * 80), fill=0, width=2)
    for k, text in enumerate(["FIRM ENGINEERS LLP", "MECHANICAL - HVAC LAYOUT", f"DWG M-{rng.integers(100, 999)}",
                              "SCALE 1:100", "REV C"]):
        d.text((tb[0] + 30, tb[1] + 25 + k * 80), text, fill=0)
    for k, x in enumerate(range(300, WIDTH - 1200, 600)):  # column grid
        d.line((x, 120, x, HEIGHT - 120), fill=170, width=1)
        d.ellipse((x - 30, 70, x + 30, 130), outline=0, width=2)
        d.text((x - 4, 94), chr(65 + k), fill=0)
    for k, y in enumerate(range(300, HEIGHT - 200, 600)):
        d.line((120, y, WIDTH - 1200, y), fill=170, width=1)
        d.text((90, y - 6), str(k + 1), fill=0)
    for _ in range(int(rng.integers(10, 18))):  # walls: rooms as thick rectangles
        x0, y0 = int(rng.integers(150, WIDTH - 1800)), int(rng.integers(150, HEIGHT - 900))
        x1, y1 = x0 + int(rng.integers(400, 1400)), y0 + int(rng.integers(300, 900))
        d.rectangle((x0, y0, x1, y1), outline=40, width=int(rng.integers(8, 16)))
        d.text((x0 + 40, y0 + 40), f"ROOM {rng.integers(100, 400)}", fill=0)
    for _ in range(int(rng.integers(6, 12))):  # duct runs: double lines with a centre mark
        horizontal = rng.random() < 0.5
        a, b = int(rng.integers(200, WIDTH - 1400)), int(rng.integers(200, HEIGHT - 300))
        length, gap = int(rng.integers(600, 2500)), int(rng.integers(30, 70))
        if horizontal:
            d.line((a, b, min(a + length, WIDTH - 1200), b), fill=60, width=3)
            d.line((a, b + gap, min(a + length, WIDTH - 1200), b + gap), fill=60, width=3)
            d.text((a + 60, b + gap // 2 - 6), f"{gap * 10}x{gap * 6}", fill=0)
        else:
            d.line((a, b, a, min(b + length, HEIGHT - 200)), fill=60, width=3)
            d.line((a + gap, b, a + gap, min(b + length, HEIGHT - 200)), fill=60, width=3)
    for _ in range(40):  # notes
        d.text((int(rng.integers(150, WIDTH - 1400)), int(rng.integers(150, HEIGHT - 150))),
               rng.choice(["SUPPLY AIR", "RETURN", "EXHAUST", "FCU-3", "VERIFY ON SITE", "CHW", "LWT 7C"]), fill=0)
    return im


def sheet(rng: np.random.Generator, symbols: int) -> tuple[Image.Image, list[tuple[int, tuple[int, int, int, int]]]]:
    """One sheet and its truth: (class index, (x1, y1, x2, y2)) per symbol; symbols do not overlap, a third
    of them in crowded clusters (a few px apart)."""
    im = background(rng)
    taken: list[tuple[int, int, int, int]] = []
    truth: list[tuple[int, tuple[int, int, int, int]]] = []

    def free(b: tuple[int, int, int, int]) -> bool:
        return all(b[2] + 3 < t[0] or t[2] + 3 < b[0] or b[3] + 3 < t[1] or t[3] + 3 < b[1] for t in taken)

    cluster: tuple[int, int] | None = None
    tries = 0
    while len(truth) < symbols and tries < symbols * 50:
        tries += 1
        side = int(rng.integers(SIZE_PX[0], SIZE_PX[1] + 1))
        if cluster is not None and rng.random() < 0.8:
            x = cluster[0] + int(rng.integers(-90, 90))
            y = cluster[1] + int(rng.integers(-90, 90))
        else:
            x, y = int(rng.integers(130, WIDTH - 1200)), int(rng.integers(140, HEIGHT - 130))
            cluster = (x, y) if rng.random() < 0.35 else None
        b = (x, y, x + side, y + side)
        if b[0] < 70 or b[1] < 70 or b[2] > WIDTH - 70 or b[3] > HEIGHT - 70 or not free(b):
            continue
        k = int(rng.integers(len(CLASSES)))
        g = glyph(CLASSES[k], side)
        if rng.random() < TURNED_SHARE:
            g = g.rotate(int(rng.choice([90, 180, 270])))
        im.paste(Image.new("L", g.size, 255), b[:2])  # the symbol masks what is under it, as a CAD block does
        im.paste(g, b[:2])
        taken.append(b)
        truth.append((k, b))
    return im, truth


def scanned(im: Image.Image, rng: np.random.Generator) -> Image.Image:
    """A scanned look: paper grain, dark speckle and a slight blur."""
    a = np.asarray(im, dtype=np.int16)
    a = a - rng.integers(0, 28, size=a.shape, dtype=np.int16)
    speck = rng.random(a.shape) < 0.0004
    a[speck] = rng.integers(0, 120, size=int(speck.sum()))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.7))


def split_counts(n: int) -> dict[str, int]:
    val = max(1, round(n * SPLIT_SHARE["val"]))
    test = max(1, round(n * SPLIT_SHARE["test"]))
    return {"train": n - val - test, "val": val, "test": test}


def write_export(out: Path, sheets: int, symbols: int, seed: int) -> tuple[Path, int]:
    """The sheets written by supervision as COCO in Roboflow's layout under ``out/export``; (folder, symbols)."""
    import supervision as sv

    rng = np.random.default_rng(seed)
    originals = out / "originals"  # the drawing tool's own files
    originals.mkdir(parents=True, exist_ok=True)
    folder = out / "export"
    k = total = 0
    for split, n in split_counts(sheets).items():
        annotations: dict[str, sv.Detections] = {}
        for _ in range(n):
            k += 1
            im, truth = sheet(rng, symbols)
            if rng.random() < SCANNED_SHARE:
                im = scanned(im, rng)
            path = str(originals / f"M-{k:03d}.png")
            im.convert("RGB").save(path, compress_level=1)
            annotations[path] = sv.Detections(xyxy=np.array([b for _, b in truth], dtype=np.float64),
                                              class_id=np.array([c for c, _ in truth]))
            total += len(truth)
        where = folder / ("valid" if split == "val" else split)
        sv.DetectionDataset(classes=CLASSES, images=list(annotations), annotations=annotations).as_coco(
            images_directory_path=str(where), annotations_path=str(where / "_annotations.coco.json"))
    return folder, total


def run(argv: list[str], cwd: Path, log: list[dict[str, object]]) -> int:
    t = time.time()
    print(f"$ {' '.join(argv)}", flush=True)
    code = subprocess.run(argv, cwd=cwd).returncode
    log.append({"cmd": " ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv[:3])),
                "exit": code, "seconds": round(time.time() - t, 1)})
    print(f"[exit {code} after {time.time() - t:.0f} s]", flush=True)
    return code


def run_figures(ws: Path) -> list[dict[str, object]]:
    """Every run's train.json under the workspace: peak RAM, seconds to the first step, steps, stopped by."""
    rows = []
    for p in sorted(ws.rglob("train.json")):
        try:
            j = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        rows.append({"run": str(p.parent.parent.relative_to(ws)), "peak_mb": j.get("peak_memory_mb"), "first_step_s": j.get("startup_seconds"),
                     "steps": j.get("steps"), "stopped_by": j.get("stopped_by")})
    return rows


def predict_check(ws: Path, looper: str) -> dict[str, object]:
    """``looper predict`` on one whole test sheet with a run's weights, timed, against the boxes evaluate.py's
    MATCHES.json of that run lists for the sheet (class, box to 0.1 px, score to 1e-4). The sheet and run are
    those with the most boxes the night found on one sheet: a comparison of two empty lists proves nothing."""
    found = []
    for matches in sorted(ws.glob("runs/*/*/*/MATCHES.json")):
        weights = matches.parent / "out" / "weights.pt"
        if weights.is_file():
            found += [(len(p.get("predictions") or []), str(weights), p)
                      for p in json.loads(matches.read_text()).get("pages") or []]
    for n, where, page in sorted(found, key=lambda f: (-f[0], f[1]))[:1]:
        if not n:
            break
        weights = Path(where)
        image = next(iter(sorted(ws.glob(f"data/pages/test/{Path(page['page']).stem}.png"))), None)
        if image is None:
            return {"predict": f"no image for {page['page']}"}
        out = ws / "pred"
        t = time.time()
        done = subprocess.run([looper, "predict", str(image), "--out", str(out), "--weights", str(weights)], cwd=ws,
                              capture_output=True, text=True)
        seconds = round(time.time() - t, 1)
        if done.returncode:
            return {"predict": f"exit {done.returncode}", "predict_tail": done.stderr[-400:]}
        res = json.loads((out / "predictions.json").read_text())
        names = {c["id"]: c["name"] for c in res["categories"]}
        ours = sorted((names[a["category_id"]], tuple(round(v, 1) for v in (a["bbox"][0], a["bbox"][1],
                       a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3])), round(a["score"], 4))
                      for a in res["annotations"])
        theirs = sorted((d["class"], tuple(round(float(v), 1) for v in d["box"]), round(d["score"], 4))
                        for d in page["predictions"])
        with Image.open(image) as im:
            size = f"{im.width}x{im.height}"
        return {"predict_page": f"{image.name} {size}", "predict_s": seconds, "predict_boxes": len(ours),
                "matches_boxes": len(theirs), "fp_dropped": page.get("fp_dropped") or {},
                # MATCHES.json lists every box unless it dropped some false positives: then only its list is checked
                ("same_boxes" if not page.get("fp_dropped") else "listed_boxes_all_predicted"):
                    ours == theirs if not page.get("fp_dropped") else set(theirs) <= set(ours)}
    return {"predict": "no run with weights and a sheet with boxes in its MATCHES.json"}


def settings(given: list[str]) -> dict[str, dict[str, object]]:
    """``SECTION.KEY=VALUE`` items as looper.toml sections; VALUE read as JSON (true, 1000, 0.5), else a string."""
    out: dict[str, dict[str, object]] = {}
    for item in given:
        name, sep, text = item.partition("=")
        section, dot, key = name.strip().partition(".")
        if not (sep and dot and section and key):
            raise SystemExit(f"--set {item!r}: give SECTION.KEY=VALUE, e.g. loop.max_steps=1000")
        try:
            value: object = json.loads(text)
        except ValueError:
            value = text
        out.setdefault(section, {})[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sheets", type=int, default=40)
    ap.add_argument("--symbols", type=int, default=90, help="symbols a sheet")
    ap.add_argument("--experiments", type=int, default=3)
    ap.add_argument("--seed", type=int, default=47)
    ap.add_argument("--export-only", action="store_true", help="write the export and stop")
    ap.add_argument("--predict-only", action="store_true", help="only the predict step, on --out's workspace")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a looper.toml key set after init (VALUE as JSON, else a string); e.g. on a GPU "
                    "--set executor.require_gpu=true --set loop.max_steps=1000 --set loop.seed_jobs=4")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    looper = str(Path(sys.executable).with_name("looper"))
    if args.predict_only:
        print("firm_night: " + json.dumps(predict_check(out / "ws", looper)), flush=True)
        return 0
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t = time.time()
    export, symbols = write_export(out, args.sheets, args.symbols, args.seed)
    summary: dict[str, object] = {"sheets": args.sheets, "symbols": symbols, "export_s": round(time.time() - t, 1)}
    if args.export_only:
        print("firm_night: " + json.dumps(summary), flush=True)
        return 0
    ws = out / "ws"
    log: list[dict[str, object]] = []
    code = run([looper, "init", str(ws), "--preset", "demo", "--data", str(export)], out, log)
    if not code and args.set:
        toml_set(ws / "looper.toml", settings(args.set))
        summary["set"] = args.set
    if not code:
        code = run([looper, "data", "check"], ws, log) or run([looper, "run", "--max-experiments",
                                                               str(args.experiments)], ws, log)
        run([looper, "report"], ws, log)
    runs = run_figures(ws)
    peaks = [r["peak_mb"] for r in runs if isinstance(r["peak_mb"], (int, float))]
    firsts = [r["first_step_s"] for r in runs if isinstance(r["first_step_s"], (int, float))]
    summary.update({"commands": log, "runs": len(runs), "peak_mb_max": max(peaks, default=None),
                    "first_step_s_max": max(firsts, default=None),
                    "cut_short": sum(1 for r in runs if r["stopped_by"] == "time"), **predict_check(ws, looper)})
    (out / "firm_night.json").write_text(json.dumps({**summary, "per_run": runs}, indent=1) + "\n")
    print("firm_night: " + json.dumps(summary), flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
