"""Benchmark: the morning report and the history over 10,000 experiments.

    .venv/bin/python bench/bench_report.py [--n 10000] [--repeats 5] [--out bench/out/report]

Builds ``experiments.db`` with N experiments of one tag in ONE daemon run (so the report's
default window holds all of them, the worst case): a baseline, ~4% keeps climbing, discards
(some near misses), inconclusive ones, crashes with 5 signatures, vacuous, interrupted and
a final harness error with a halt; every measured experiment has 26 per-class rows and a
4 KB train.py source. Rows are written in bulk with sqlite3 after ``Store`` created the
schema (the CHECK constraints still apply). Then times ``report_text``, ``write_html`` and
``history_rows`` + ``history_json``, each ``--repeats`` times, and prints median and spread.
Goal: under 2 s each.

With pictures (the default; ``--no-pictures`` leaves them out) the workspace also gets the demo
test pages (prepare.py, scale demo, 8 pages of 1024 px) and a MATCHES.json for the best and the
baseline (synthetic detections from the pages' truth: the best finds ~85 %, the baseline ~70 %
and takes look-alikes for each other, both invent a few boxes), so ``write_html`` draws the
crops and the confusion matrices as the morning report does; the page's size and the
pictures' share of it are printed (goal: a demo-scale night's page under 5 MB; at 10,000
experiments the tables alone are about 5 MB).
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from looper.core.scoring.classes import CLASSES
from looper.report import history_json, history_rows, report_text, write_html
from looper.store import Store

TAG = "bench"
SIGNATURES = ["CUDA out of memory", "NameError: name 'lr' is not defined", "RuntimeError: shape mismatch",
              "hung: log silent 180 s", "over budget"]
SOURCE = ("# train.py\n" + "x = 1  # a line of a realistic training script, padded\n" * 70)[:4096]
DIFF = "--- a/train.py\n+++ b/train.py\n@@ -1,3 +1,3 @@\n-LR0 = 0.01\n+LR0 = 0.02\n" + " ctx\n" * 40


def build(root: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    db = root / "experiments.db"
    for p in root.glob("experiments.db*"):
        p.unlink()
    Store(root).close()  # creates the schema through the real migrations
    t0 = datetime(2025, 3, 14, 22, 0, tzinfo=UTC)
    config = json.dumps({"gate": {"score": "weighted_f1", "max_class_drop": 0.05}})
    supports = {c: rng.randint(0, 80) if i < 24 else 0 for i, c in enumerate(CLASSES)}
    exps, cms, events = [], [], []
    best = 0.30
    events.append((t0.isoformat(), TAG, None, "start", "daemon started (pid 1)", None))
    for i in range(1, n + 1):
        at = t0 + timedelta(seconds=i)
        if i == 1:
            status, kind, score = "keep", "baseline", best
        else:
            kind = "candidate"
            r = rng.random()
            if i == n:
                status, score = "error", None
            elif r < 0.04:
                best += rng.uniform(0.0002, 0.0015)
                status, score = "keep", best
            elif r < 0.60:
                status, score = "discard", best + rng.uniform(-0.05, 0.004)
            elif r < 0.70:
                status, score = "inconclusive", best + rng.uniform(-0.002, 0.002)
            elif r < 0.90:
                status, score = "crash", None
            elif r < 0.97:
                status, score = "vacuous", None
            else:
                status, score = "interrupted", None
        blocking: list[str] = []
        sig = None
        verdict = None
        if status == "discard":
            if score is not None and score > best - 0.0001 and rng.random() < 0.5:
                blocking = [f"recall.{rng.choice(CLASSES)} dropped 0.07 vs baseline (limit 0.05)"]
            else:
                blocking = [f"weighted_f1 {score:.4f} is below the current best {best:.4f}"]
            verdict = json.dumps({"status": "fail", "blocking": blocking, "confidence": 1.0,
                                  "metrics": {"diff": (score or 0) - best}})
        elif status == "crash":
            sig = rng.choice(SIGNATURES)
            blocking = [f"train.py crashed: {sig}"]
        elif status in ("vacuous", "interrupted", "error", "inconclusive"):
            blocking = [{"vacuous": "no weights.pt written", "interrupted": "daemon stopped",
                         "error": "GPU lost during the run", "inconclusive": "inside the noise band"}[status]]
        metrics = None
        if score is not None:
            classes = {}
            for c, s in supports.items():
                rec = None if s == 0 else min(1.0, max(0.0, 0.5 + rng.uniform(-0.3, 0.3)))
                tp = 0 if s == 0 else round(rec * s)
                fp = rng.randint(0, 8)
                rec = None if s == 0 else tp / s
                prec = (tp / (tp + fp) if tp + fp else 0.0) if (s or fp) else None
                f1 = None if rec is None else (2 * prec * rec / (prec + rec) if prec and rec else 0.0)
                classes[c] = {"tp": tp, "fp": fp, "fn": s - tp, "support": s, "precision": prec, "recall": rec,
                              "f1": f1, "count_error": (tp + fp - s) / max(s, 1)}
                cms.append((i, c, prec, rec, f1, classes[c]["count_error"], tp, fp, s - tp, s))
            metrics = json.dumps({"weighted_f1": score, "macro_f1": score, "pages": 6, "classes": classes})
        gpu = json.dumps({"name": "NVIDIA H200", "peak_memory_mb": rng.uniform(1e4, 6e4),
                          "mean_utilization_pct": rng.uniform(40, 99), "lost": status == "error"})
        exps.append((i, TAG, kind, f"{i:040x}", f"{i - 1:040x}", status, score, f"idea number {i}: tweak {i % 37}",
                     "because it might help", SOURCE, DIFF, config, 0, metrics, verdict, json.dumps(blocking), sig,
                     0 if status != "crash" else 1, rng.uniform(5, 60), rng.uniform(100, 300), rng.uniform(20, 40),
                     rng.uniform(1, 5), gpu, at.isoformat(), (at + timedelta(seconds=0.5)).isoformat()))
    events.append(((t0 + timedelta(seconds=n + 1)).isoformat(), TAG, n, "halt", "harness error: GPU lost", None))
    con = sqlite3.connect(db)
    with con:
        con.executemany(
            'INSERT INTO experiments (id, tag, kind, "commit", parent, status, score, description, rationale, '
            "source, diff, config_json, seed, metrics_json, verdict_json, blocking_json, failure_signature, "
            "exit_code, agent_seconds, train_seconds, eval_seconds, harness_seconds, gpu_json, started_at, "
            "finished_at) VALUES (" + ",".join("?" * 25) + ")", exps)
        con.executemany("INSERT INTO class_metrics VALUES (?,?,?,?,?,?,?,?,?,?)", cms)
        con.executemany("INSERT INTO events (at, tag, experiment_id, kind, message, data_json) VALUES (?,?,?,?,?,?)",
                        events)
    con.close()
    return root


def add_pictures(root: Path, seed: int = 0) -> float:
    """Demo test pages and the best's and the baseline's MATCHES.json; returns seconds taken."""
    from looper.core.scoring.classes import LOOKALIKE_GROUPS
    from looper.core.scoring.metrics import Detection, matches_file, page_matches

    t = time.perf_counter()
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    try:
        import prepare
    finally:
        sys.path.remove(str(repo))
    data = root / "data"
    if not (data / "manifest.json").is_file():
        prepare.build(data, "demo", 0)
    rng = random.Random(seed)
    twin = {c: g for g in LOOKALIKE_GROUPS.values() for c in g}
    store = Store(root)
    best = store.best(TAG)
    store.close()
    assert best is not None
    sides: dict[int, list[dict]] = {1: [], best.id: []}
    for truth_path in sorted((data / "pages" / "test").glob("page_*.json")):
        truth = [Detection(str(b["class"]), tuple(float(v) for v in b["box"]))  # type: ignore[misc]
                 for b in json.loads(truth_path.read_text())["boxes"]]
        for exp_id, found in ((best.id, 0.85), (1, 0.70)):
            preds = []
            for d in truth:
                r = rng.random()
                if r < found:
                    preds.append(Detection(d.cls, d.box, rng.uniform(0.4, 0.99)))
                elif r < found + 0.08 and d.cls in twin:
                    other = [c for c in twin[d.cls] if c != d.cls]
                    preds.append(Detection(rng.choice(other), d.box, rng.uniform(0.3, 0.8)))
            for _ in range(6):
                x, y = rng.uniform(0, 990), rng.uniform(0, 990)
                preds.append(Detection(rng.choice(CLASSES), (x, y, x + 30, y + 30), rng.uniform(0.25, 0.6)))
            sides[exp_id].append(page_matches(truth_path.with_suffix(".png").name, preds, truth))
    for exp_id, pages in sides.items():
        run = root / "runs" / TAG / f"{exp_id:05d}" / "main-s0"
        run.mkdir(parents=True, exist_ok=True)
        (run / "MATCHES.json").write_text(json.dumps(matches_file(pages, CLASSES)))
    return time.perf_counter() - t


def timed(fn, repeats: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("bench/out/report"))
    ap.add_argument("--no-pictures", dest="pictures", action="store_false",
                    help="no test pages and MATCHES.json: the report without its pictures")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    root = build(args.out, args.n)
    print(f"built {args.n} experiments in {time.perf_counter() - t:.1f} s "
          f"({(root / 'experiments.db').stat().st_size / 1e6:.1f} MB)")
    if args.pictures:
        print(f"demo test pages and MATCHES.json of the best and the baseline in {add_pictures(root):.1f} s")
    store = Store(root)
    html_path = root / "report.html"
    results = {
        "report_text": timed(lambda: report_text(store, root), args.repeats),
        "write_html": timed(lambda: write_html(store, root, html_path), args.repeats),
        "history_json": timed(lambda: history_json(history_rows(store)), args.repeats),
    }
    store.close()
    page = html_path.read_text()
    crops = page.count('<img class="crop ')
    matrices = "with" if 'id="confusion-best"' in page else "without"
    size = html_path.stat().st_size
    section = page.split('<section id="pictures">', 1)[1].split("</section>", 1)[0] if crops or matrices == "with" else ""
    print(f"pictures section: {len(section.encode()) / 1e6:.2f} MB of the page")
    print(f"HTML page: {size / 1e6:.2f} MB ({crops} crop images, {matrices} confusion matrices)")
    print("| function | median s | min s | max s | runs |")
    print("| --- | --- | --- | --- | --- |")
    worst = 0.0
    for name, ts in results.items():
        med = statistics.median(ts)
        worst = max(worst, med)
        print(f"| {name} | {med:.3f} | {min(ts):.3f} | {max(ts):.3f} | {len(ts)} |")
    print("goal < 2 s each:", "met" if worst < 2.0 else "NOT met")
    return 0 if worst < 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
