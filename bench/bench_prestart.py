"""How long a slot waits for its run's first step, a box started cold against one started ahead (issue 46).

Runs short training runs (``LOOPER_MAX_STEPS``, default 3) of the workspace train.py through the real local
executor and its sandbox (bubblewrap, run limits), alternately cold (the box started when the run comes) and
prestarted (``[loop] prestart``: the box started ahead, its imports done, told go when the run comes). For each
run: the seconds from the moment the slot is the run's (cold: the executor is called; prestarted: go) to the
arrival of train.py's ``LOOPER_STARTUP`` line at its first optimizer step, the box's own time to be ready, the
seconds from train.py's last line to the run's end (its interpreter's exit with torch loaded: the slot is held
through it), and whether the two kinds trained the same tensors bit for bit. Then the first run's weights are evaluated
alternately cold (evaluate.py's sandbox started when the evaluation comes) and in a box started ahead (the one
the evaluation before it asked for as it ended, ready by then): the seconds from the call to its return, and
whether both wrote the same METRICS.json and MATCHES.json. Nothing else runs beside it: on a GPU the waiting
box would import while another run trains; here it imports first and the figure is the wait it hides.

    .venv/bin/python bench/bench_prestart.py [--data DIR] [--pairs 3] [--steps 3]

``--data`` defaults to a tiny prepare.py build in a temporary folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from looper.executors.base import EvalJob, TrainJob  # noqa: E402
from looper.executors.local import LocalExecutor  # noqa: E402
from looper.executors.prestart import READY_MARK  # noqa: E402

MARK = "LOOPER_STARTUP"


def tensors(path: Path) -> str:
    from safetensors import safe_open

    h = hashlib.sha256()
    with safe_open(str(path), "pt") as f:
        for k in sorted(f.keys()):  # noqa: SIM118
            h.update(k.encode() + f.get_tensor(k).numpy().tobytes())
    return h.hexdigest()[:16]


def one(ex: LocalExecutor, ck: Path, run: Path, seed: int, steps: int, ahead: bool) -> dict:
    (run / "out").mkdir(parents=True)
    marks: dict[str, float] = {}

    def on_line(line: str) -> None:
        marks["last"] = time.monotonic()
        if MARK in line and "step" not in marks:
            marks["step"] = time.monotonic()

    def gate() -> bool:  # the box is ready before the slot is given: the case prestart is for
        while READY_MARK not in (run / "train.log").read_text():
            time.sleep(0.02)
        marks["slot"] = time.monotonic()
        return True

    job = TrainJob(checkout=ck, out_dir=run / "out", seed=seed, budget_seconds=600, grace_seconds=60,
                   stall_seconds=300, log_path=run / "train.log", max_steps=steps, prestart=ahead,
                   gate=gate if ahead else None)
    t0 = time.monotonic()
    r = ex.train(job, on_line, threading.Event())
    ended = time.monotonic()
    if r.exit_code != 0 or "step" not in marks:
        raise SystemExit(f"run {run.name}: exit {r.exit_code}\n{r.log_tail[-2000:]}")
    ready = [ln for ln in (run / "train.log").read_text().splitlines() if READY_MARK in ln]
    phases = json.loads((run / "out" / "train.json").read_text()).get("startup_phases") or {}
    return {"slot_to_step": marks["step"] - marks.get("slot", t0), "held": r.held_seconds, "phases": phases,
            "last_line_to_end": ended - marks["last"],
            "ready": ready[0].split(" in ")[1].split(" s")[0] if ready else None,
            "tensors": tensors(run / "out" / "weights.pt")}


def evaluation(ex: LocalExecutor, ck: Path, weights: Path, rd: Path, ahead: bool, first: bool = False) -> tuple[float, str]:
    """(seconds from the call to its return, a digest of METRICS.json and MATCHES.json) of one evaluation;
    ``first``: no evaluation asked for a box before it (it starts its own and asks for the next)."""
    rd.mkdir(parents=True)
    if ahead and not first:  # the box the evaluation before asked for: ready, as it is after a run's training
        deadline = time.monotonic() + 120
        while not any((b / "w").is_dir() for b in (ex.workspace / ".looper" / "boxes").glob("box-*")):  # an evaluation's
            assert time.monotonic() < deadline, "no box was started ahead of the evaluation"
            time.sleep(0.05)
        time.sleep(5.0)
    job = EvalJob(checkout=ck, weights=weights, metrics_path=rd / "METRICS.json", log_path=rd / "eval.log",
                  timeout_seconds=600, stall_seconds=300, device="cpu", prestart=ahead)
    t0 = time.monotonic()
    r = ex.evaluate(job, None, threading.Event())
    took = time.monotonic() - t0
    if r.exit_code != 0:
        raise SystemExit(f"evaluation {rd.name}: exit {r.exit_code}\n{r.log_tail[-2000:]}")
    digest = hashlib.sha256(b"".join((rd / f).read_bytes() for f in ("METRICS.json", "MATCHES.json"))).hexdigest()
    return took, digest[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, help="a prepared data folder (default: a tiny prepare.py build)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-prestart-") as d:
        tmp = Path(d)
        data = a.data
        if data is None:
            import prepare

            data = tmp / "data"
            prepare.build(data, "tiny", 0, test_seed=0)
        ws = tmp / "ws"
        ck = ws / "ck"
        ck.mkdir(parents=True)
        shutil.copy(ROOT / "train.py", ck / "train.py")
        shutil.copy(ROOT / "evaluate.py", ck / "evaluate.py")
        shutil.copytree(ROOT / "looper" / "pretrained", ws / "pretrained")
        ex = LocalExecutor(ws, python=sys.executable)
        ex.use_data(str(data.resolve()))
        rows: dict[bool, list[dict]] = {False: [], True: []}
        evals: dict[bool, list[tuple[float, str]]] = {False: [], True: []}
        try:
            for i in range(a.pairs):
                for ahead in (False, True):
                    r = one(ex, ck, tmp / f"run{i}-{'ahead' if ahead else 'cold'}", 7, a.steps, ahead)
                    rows[ahead].append(r)
                    print(f"pair {i} {'prestarted' if ahead else 'cold':>10}: slot to first step "
                          f"{r['slot_to_step']:.2f} s, last line to its end {r['last_line_to_end']:.2f} s"
                          + (f" (box ready in {r['ready']} s, held {r['held']:.1f} s)"
                                                          if ahead else "") + f"; tensors {r['tensors']}; train.py's "
                          f"own start-up (s since its first line) {r['phases']}", flush=True)
            weights = tmp / "run0-cold" / "out" / "weights.pt"
            evaluation(ex, ck, weights, tmp / "eval-first", True, first=True)  # its box started now; it asks for the next
            for i in range(a.pairs):
                for ahead in (False, True):
                    took, digest = evaluation(ex, ck, weights, tmp / f"eval{i}-{'ahead' if ahead else 'cold'}", ahead)
                    evals[ahead].append((took, digest))
                    print(f"pair {i} {'prestarted' if ahead else 'cold':>10}: evaluation {took:.2f} s; "
                          f"METRICS.json and MATCHES.json {digest}", flush=True)
        finally:
            ex.close()
    cold = [r["slot_to_step"] for r in rows[False]]
    ahead = [r["slot_to_step"] for r in rows[True]]
    same = len({r["tensors"] for r in rows[False] + rows[True]}) == 1
    tail = {k: [r["last_line_to_end"] for r in rows[k]] for k in (False, True)}
    print(f"slot to first step, median of {a.pairs}: cold {statistics.median(cold):.2f} s "
          f"({min(cold):.2f}-{max(cold):.2f}), prestarted {statistics.median(ahead):.2f} s "
          f"({min(ahead):.2f}-{max(ahead):.2f}); the same tensors every run: {same}")
    print(f"train.py's last line to the run's end (its interpreter's exit, the box's end; the slot held), median: "
          f"cold {statistics.median(tail[False]):.2f} s, prestarted {statistics.median(tail[True]):.2f} s")
    e_cold, e_ahead = ([t for t, _ in evals[k]] for k in (False, True))
    same_scores = len({d for k in (False, True) for _, d in evals[k]}) == 1
    print(f"evaluation, call to return, median of {a.pairs}: cold {statistics.median(e_cold):.2f} s "
          f"({min(e_cold):.2f}-{max(e_cold):.2f}), in a box started ahead {statistics.median(e_ahead):.2f} s "
          f"({min(e_ahead):.2f}-{max(e_ahead):.2f}); the same METRICS.json and MATCHES.json every time: {same_scores}")
    return 0 if same and same_scores else 1


if __name__ == "__main__":
    raise SystemExit(main())
