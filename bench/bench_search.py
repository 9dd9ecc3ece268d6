"""Benchmark: search strategies at equal compute: looper's planner, random and evolve agents vs
Ultralytics' own ``model.tune()``, each re-measured with seeds by the same evaluate.py.

    python bench/bench_search.py [--minutes 45] [--budget 180] [--remeasure-steps 169] [--scale demo]
                                 [--repeats 1] [--arms planner,random,evolve,tune] [--reseeds 3] [--jobs 1]
                                 [--out bench/out/search] [--first-repeat 0]
    python bench/bench_search.py --gpu        # full scale, 5-minute runs, 45 min per arm, require_gpu

Every arm starts from the same pretrained weights: the starting checkpoint looper ships
(``looper/pretrained/start.safetensors``, train.py's ``PRETRAINED``), and for the Tuner the same
tensors as an Ultralytics ``.pt`` passed as ``pretrained=`` (what a YOLO user fine-tuning does).
Per arm and repeat, on the same data and the same wall clock (``--minutes``):

- ``planner``, ``random``, ``evolve``: a fresh workspace (``looper init --preset demo``: its
  baseline seeds, candidate cap and score test; the arm's ``[agent] kind``, ``seed`` = the
  repeat, ``max_steps`` = ``--remeasure-steps``, one seed at a time on the arm's one core, no
  confirmation of its own), ``looper run`` stopped by SIGTERM when the arm's wall clock is spent
  (the daemon finishes cleanly: the running experiment is marked interrupted). The best is the
  last kept train.py on ``looper/<tag>``.
- ``tune``: ``YOLO(<the baseline's model yaml>).tune(..., pretrained=<start .pt>)`` from the
  baseline train.py's settings (lr0, batch, optimizer, augmentation off as in train.py), each
  iteration trained for the same ``--budget`` (``time=``), iterations until the arm's wall clock
  is spent (the tuning process is stopped from outside at the limit). Its best weights are
  scored by evaluate.py; its best hyperparameters are re-trained like every other arm.

``--jobs N`` runs N arms at a time, each in its own process pinned to its own CPU with one compute
thread (``sched_setaffinity``; training, evaluation and the Tuner's data loader inherit it), so
arms that run side by side get the same compute and never share a core. Each arm's
re-measurement runs on its arm's CPU right after it; the baseline's is one more job.

Then every arm's final best (and the baseline train.py) is re-trained ``--reseeds`` times with
fresh seeds (1000 + 100 * repeat + i: no arm decided anything on them) for exactly
``--remeasure-steps`` steps and scored by evaluate.py: the confirmed score: the mean, the seed interval (mean
+- t * sd / sqrt(n), 95 %) and the classes with recall > 0. "Beats the baseline beyond the
noise" means the arm's lower interval end is above the baseline's upper end. A keep the
re-measurement does not confirm (its re-measured mean not above the baseline's) is counted as a
false keep caught. The Tuner's answer is also re-trained by Ultralytics' own ``model.train``
(its best hyperparameters; each seed's ``best.pt`` scored by evaluate.py), beside the baseline's
settings trained the same way (``baseline_own``): the Tuner's one ``best.pt`` is the best of its
iterations on the validation tiles, and these runs say how much of it was the draw. Outputs: ``<out>/results.json``, ``<out>/best_over_time.svg`` (best score
over wall time per arm) and a markdown block printed for bench/RESULTS.md.

The arms and the measuring live in bench/search_arms.py; the statistics, the plot and the table
in bench/search_results.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from looper.workspace.create import PRESETS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_arms import baseline_model_yaml, remeasure, remeasure_own, run_arm, sh, tune_source  # noqa: E402
from search_results import compare, markdown, plot, reproduced, summarize  # noqa: E402

DEMO = PRESETS["demo"]["loop"]
ARMS = ("planner", "random", "evolve", "tune")


def _pinned(cpu: int, out: Path, fn: Any, fargs: tuple) -> None:
    """A job's process: pinned to one CPU with one compute thread (its children inherit both)."""
    os.sched_setaffinity(0, {cpu})
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    t0 = time.time()
    r = fn(*fargs)
    out.write_text(json.dumps(r | {"cpu": cpu, "job_seconds": round(time.time() - t0, 1)}, default=str))


def run_jobs(jobs: list[tuple[str, Any, tuple]], n: int, tmp: Path):
    """Run ``(name, fn, args)`` jobs, ``n`` at a time; yield ``(name, result)`` as each ends.

    ``n == 1``: in this process, in order, on every CPU. ``n > 1``: each job in its own process
    pinned to one of the first ``n`` CPUs this process may use, so concurrent arms get the same
    compute (one core each) and do not share a core."""
    if n <= 1:
        for name, fn, fargs in jobs:
            yield name, fn(*fargs)
        return
    import multiprocessing

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < n:
        raise SystemExit(f"bench_search: --jobs {n} needs {n} CPUs; this process may use {len(cpus)}")
    tmp.mkdir(parents=True, exist_ok=True)
    ctx = multiprocessing.get_context("fork")
    free, pending, running = cpus[:n], list(jobs), {}
    while pending or running:
        while pending and free:
            name, fn, fargs = pending.pop(0)
            cpu = free.pop(0)
            out = tmp / f"{name}.json"
            out.unlink(missing_ok=True)
            proc = ctx.Process(target=_pinned, args=(cpu, out, fn, fargs), name=name)
            proc.start()
            running[name] = (proc, cpu, out)
        time.sleep(2)
        for name, (proc, cpu, out) in list(running.items()):
            if proc.is_alive():
                continue
            proc.join()
            del running[name]
            free.append(cpu)
            yield name, (json.loads(out.read_text()) if out.is_file()
                         else {"error": f"job {name} exited {proc.exitcode} without a result"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=45.0, help="wall clock per arm")
    ap.add_argument("--budget", type=int, default=DEMO["budget_seconds"],
                    help="training budget per run, s (the demo preset's budget_seconds; the Tuner's time= per iteration)")
    ap.add_argument("--scale", default="demo")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--first-repeat", type=int, default=0,
                    help="number the repeats from here and add them to the results.json already in --out "
                         "(a second repeat on a later day)")
    ap.add_argument("--reseeds", type=int, default=3)
    ap.add_argument("--remeasure-steps", type=int, default=DEMO["max_steps"],
                    help="the looper arms' [loop] max_steps and the re-measuring runs' steps (the wall clock still "
                         "caps them; default the demo preset's); 0: wall clock only, and a run's steps then depend on "
                         "what else the machine is doing")
    ap.add_argument("--remeasure-again", type=int, metavar="REPEAT",
                    help="re-measure that repeat's arms and baseline again (e.g. with --remeasure-steps); the "
                         "earlier re-measurement is kept as remeasured_before")
    ap.add_argument("--remeasure-own", type=int, metavar="REPEAT",
                    help="re-train that repeat's Tuner answer with Ultralytics' own training (--reseeds seeds, "
                         "best.pt scored by evaluate.py); a bench run today does it after the tune arm")
    ap.add_argument("--add-reseeds", type=int, metavar="REPEAT",
                    help="re-measure that repeat's baseline and each arm's final best (train.py) on --reseeds more "
                         "fresh seeds, after the ones it has (the Ultralytics re-trainings keep theirs)")
    ap.add_argument("--noise-reruns", type=int, default=None,
                    help="the looper arms' [loop] noise_reruns (default: the demo preset's, with its baseline_seeds, "
                         "pooled score test and confirm cap)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--jobs", type=int, default=1,
                    help="arms run this many at a time, each pinned to its own CPU (1 thread): equal compute")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--require-gpu", action="store_true")
    ap.add_argument("--gpu", action="store_true", help="full scale, 300 s runs, cuda, require_gpu")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "search")
    ap.add_argument("--finish", action="store_true",
                    help="compare, plot and print the results.json a stopped bench left in --out")
    ap.add_argument("--baseline-from", help="with --finish: the arm whose re-measurement is the baseline's "
                                            "(it kept nothing, so its best is train.py itself)")
    args = ap.parse_args()
    args.out = args.out.resolve()  # the arms run in their own folders: a relative --out would nest
    if args.finish:
        return finish_stopped(args.out, args.baseline_from)
    if args.remeasure_again is not None:
        return remeasure_again(args.out, args.remeasure_again, args)
    if args.remeasure_own is not None:
        return remeasure_own_again(args.out, args.remeasure_own, args)
    if args.add_reseeds is not None:
        return add_reseeds(args.out, args.add_reseeds, args)
    if args.gpu:
        args.scale, args.budget, args.device, args.require_gpu = "full", 300, "cuda", True
        args.remeasure_steps = 0  # full scale: the wall clock (the demo's 169 steps are a CPU regime)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                               "repeats": []}
    if args.first_repeat and (args.out / "results.json").is_file():
        earlier = json.loads((args.out / "results.json").read_text())
        results["repeats"] = [e for e in earlier["repeats"] if e["repeat"] < args.first_repeat]
    for rep in range(args.first_repeat, args.first_repeat + args.repeats):
        root = args.out / f"repeat{rep}"
        data = root / "data"
        if not (data / "dataset.yaml").is_file():
            done = sh([sys.executable, str(REPO / "prepare.py"), "--out", str(data), "--scale", args.scale])
            if done.returncode != 0:
                raise SystemExit(f"prepare.py failed: {done.stderr.strip()}")
        entry: dict[str, Any] = {"repeat": rep, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                 "baseline": {}, "arms": {}}

        def save(entry: dict[str, Any] = entry) -> None:
            (args.out / "results.json").write_text(json.dumps(results | {"repeats": [*results["repeats"], entry]},
                                                              indent=1, default=str))

        jobs = [(arm, run_arm, (arm, rep, root, data, args)) for arm in arms]
        jobs.append(("baseline", remeasure, ((REPO / "train.py").read_text(), data, root / "remeasure-baseline",
                                             rep, args)))
        if "tune" in arms:  # the Tuner's reference: the baseline's settings in Ultralytics' own training
            baseline_model_yaml(root / "remeasure-baseline-own", data, args)
            jobs.append(("baseline-own", remeasure_own, ({}, data, root / "remeasure-baseline-own", rep, args)))
        for name, r in run_jobs(jobs, args.jobs, root / "jobs"):
            if name == "baseline":
                entry["baseline"] = r
            elif name == "baseline-own":
                entry["baseline_own"] = r
            else:
                entry["arms"][name] = r
            save()
        compare(entry)
        entry["arms"] = {arm: entry["arms"][arm] for arm in arms if arm in entry["arms"]}
        results["repeats"].append(entry)
    return finish(results, args.out)


def best_sources(entry: dict[str, Any], root: Path, base: str, arms: list[str] | None = None) -> dict[str, str]:
    """The baseline's and each arm's final best as train.py source: the looper arms' last keep
    (``looper/bench:train.py`` in the arm's workspace), the Tuner's best hyperparameters written
    into the baseline train.py (:func:`tune_source`)."""
    sources = {"baseline": base}
    for arm in entry["arms"] if arms is None else arms:
        if arm == "tune":
            sources[arm] = tune_source(base, entry["arms"][arm]["best_hyperparameters"])
        elif arm != "baseline":
            sources[arm] = sh(["git", "-C", str(root / arm), "show", "looper/bench:train.py"]).stdout
    return sources


def remeasure_again(out: Path, rep: int, args: argparse.Namespace) -> int:
    """``--remeasure-again REPEAT``: each arm's final best (the looper arms' ``looper/bench:train.py``,
    the Tuner's best hyperparameters written into train.py) and the baseline re-measured anew."""
    results = json.loads((out / "results.json").read_text())
    entry = next(e for e in results["repeats"] if e["repeat"] == rep)
    root, base = out / f"repeat{rep}", (REPO / "train.py").read_text()
    sources = best_sources(entry, root, base)
    # Arms whose best is the baseline train.py byte for byte (they kept nothing): the first is
    # re-measured anyway (the bench's own A/A: under a step budget it must reproduce the
    # baseline's scores), the others take the baseline's re-measurement.
    same = [arm for arm, src in sources.items() if arm != "baseline" and src == base]
    sources = {arm: src for arm, src in sources.items() if arm not in same[1:]}
    tag = f"steps{args.remeasure_steps}" if args.remeasure_steps else "wallclock"
    jobs = [(arm, remeasure, (src, root / "data", root / f"remeasure-{tag}-{arm}", rep, args))
            for arm, src in sources.items()]
    for name, r in run_jobs(jobs, args.jobs, root / "jobs-again"):
        r["remeasure_steps"] = args.remeasure_steps
        if name == "baseline":
            entry["baseline_before"], entry["baseline"] = entry["baseline"], r
        else:
            arm = entry["arms"][name]
            arm["remeasured_before"], arm["remeasured"] = arm.get("remeasured"), r
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    for name in same[1:]:
        arm = entry["arms"][name]
        arm["remeasured_before"], arm["remeasured"] = arm.get("remeasured"), entry["baseline"] | {"same_as": "baseline"}
    for e in results["repeats"]:
        compare(e)
    return finish(results, out)


def add_reseeds(out: Path, rep: int, args: argparse.Namespace) -> int:
    """``--add-reseeds REPEAT``: ``--reseeds`` more fresh seeds for the baseline and every arm's
    re-measurement through train.py (seed numbers after the ones each has; an arm whose
    re-measurement is the baseline's, ``same_as``, takes the baseline's new runs)."""
    results = json.loads((out / "results.json").read_text())
    entry = next(e for e in results["repeats"] if e["repeat"] == rep)
    root, base = out / f"repeat{rep}", (REPO / "train.py").read_text()
    measured = {"baseline": entry["baseline"], **{a: r["remeasured"] for a, r in entry["arms"].items()
                                                  if r.get("remeasured") and not r["remeasured"].get("same_as")}}
    sources = best_sources(entry, root, base, list(measured))
    same = [arm for arm, src in sources.items() if arm != "baseline" and src == base]  # kept nothing
    for arm in same:  # the baseline train.py byte for byte: under the step budget its seeds are the baseline's
        mine, theirs = measured.pop(arm), entry["baseline"]
        entry["arms"][arm]["reproduced_baseline"] = reproduced(mine.get("runs", []), theirs.get("runs", []))
        entry["arms"][arm]["remeasured"] = {"same_as": "baseline"}
    tag = f"steps{args.remeasure_steps}" if args.remeasure_steps else "wallclock"
    jobs = []
    for arm, m in measured.items():
        have = len(m.get("runs", []))
        if m.get("remeasure_steps") != args.remeasure_steps:
            raise SystemExit(f"bench_search: {arm} was re-measured at {m.get('remeasure_steps')} steps, not "
                             f"--remeasure-steps {args.remeasure_steps}: its new seeds would not be comparable")
        folder = root / (f"remeasure-{arm}" if (root / f"remeasure-{arm}").is_dir() else f"remeasure-{tag}-{arm}")
        jobs += [(f"{arm}-seed{s}", remeasure, (sources[arm], root / "data", folder, rep, args, [s]))
                 for s in range(have, have + args.reseeds)]
    done = dict(run_jobs(jobs, args.jobs, root / "jobs-more"))
    for arm, m in measured.items():
        new = [run for name, r in sorted(done.items()) if name.startswith(f"{arm}-seed") for run in r.get("runs", [])]
        m.update(summarize(sorted(m["runs"] + new, key=lambda run: run["seed"])) | {"remeasure_steps": args.remeasure_steps})
    for r in entry["arms"].values():
        if (r.get("remeasured") or {}).get("same_as") == "baseline":
            r["remeasured"] = entry["baseline"] | {"same_as": "baseline"}
    for e in results["repeats"]:
        compare(e)
    return finish(results, out)


def remeasure_own_again(out: Path, rep: int, args: argparse.Namespace) -> int:
    """``--remeasure-own REPEAT``: that repeat's Tuner answer, and the baseline's settings, each
    re-trained by Ultralytics' own training (:func:`remeasure_own`), one job per seed, added to
    results.json (``remeasured_own`` of the tune arm, ``baseline_own``)."""
    results = json.loads((out / "results.json").read_text())
    entry = next(e for e in results["repeats"] if e["repeat"] == rep)
    tune = entry["arms"].get("tune") or {}
    if not tune.get("best_hyperparameters"):
        raise SystemExit(f"bench_search: repeat {rep} has no tune arm with best hyperparameters in {out}")
    data = out / f"repeat{rep}" / "data"
    what = {"tune": (tune["best_hyperparameters"], out / f"repeat{rep}" / "remeasure-tune-own"),
            "baseline": ({}, out / f"repeat{rep}" / "remeasure-baseline-own")}
    for _hyp, root in what.values():
        baseline_model_yaml(root, data, args)  # once, before jobs that would all write it
    jobs = [(f"{name}-seed{s}", remeasure_own, (hyp, data, root, rep, args, [s]))
            for name, (hyp, root) in what.items() for s in range(args.reseeds)]
    done = dict(run_jobs(jobs, args.jobs, out / f"repeat{rep}" / "jobs-own"))
    for name in what:
        runs = [run for s in range(args.reseeds) for run in done[f"{name}-seed{s}"].get("runs", [])]
        own = summarize(runs) | {"training": "ultralytics model.train, best.pt"}
        if name == "tune":
            tune["remeasured_own"] = own
        else:
            entry["baseline_own"] = own
    for e in results["repeats"]:
        compare(e)
    return finish(results, out)


def finish(results: dict[str, Any], out: Path) -> int:
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    plot(results, out / "best_over_time.svg")
    print(markdown(results))
    print(f"\nresults: {out / 'results.json'}; plot: {out / 'best_over_time.svg'}")
    return 0


def _steps_from_disk(root: Path, entry: dict[str, Any]) -> None:
    """Runs recorded before results.json kept their steps: read them from each run's train.json."""
    measured = {"baseline": entry["baseline"], **{a: r.get("remeasured", {}) for a, r in entry["arms"].items()}}
    for arm, m in measured.items():
        for i, run in enumerate(m.get("runs", [])):
            tj = root / f"remeasure-{arm}" / f"seed{i}" / "run" / "train.json"
            if "steps" not in run and not m.get("remeasure_steps") and tj.is_file():
                trained = json.loads(tj.read_text())
                if trained.get("seed") == run.get("seed"):
                    run.update(steps=trained.get("steps"), stopped_by=trained.get("stopped_by"))


def finish_stopped(out: Path, baseline_from: str | None) -> int:
    """``--finish``: a bench stopped before its last job: compare, plot and print what it saved.
    ``--baseline-from ARM``: the baseline's re-measurement is that arm's, allowed only when the
    arm kept nothing and its final best is the baseline train.py byte for byte."""
    results = json.loads((out / "results.json").read_text())
    for entry in results["repeats"]:
        _steps_from_disk(out / f"repeat{entry['repeat']}", entry)
        if not entry["baseline"] and baseline_from:
            arm = entry["arms"].get(baseline_from) or {}
            ws = out / f"repeat{entry['repeat']}" / baseline_from
            best = sh(["git", "-C", str(ws), "show", "looper/bench:train.py"]).stdout
            if arm.get("keeps") != 0 or best != (REPO / "train.py").read_text():
                raise SystemExit(f"bench_search: arm {baseline_from} kept a change or its best is not the baseline "
                                 "train.py; its re-measurement is not the baseline's")
            entry["baseline"] = arm["remeasured"] | {"from_arm": baseline_from}
        compare(entry)
    return finish(results, out)


if __name__ == "__main__":
    sys.exit(main())
