"""A run out of memory on a GPU it shared trains again with the GPU to itself (looper.night.gpushare,
looper.core.run.slots.after_failure): sharing may change a run's time, never its result (issue 46). The real Loop,
real git and a real Store on a fake one-GPU machine whose memory holds one large run: a candidate whose seed fits
alone is measured, not called a crash of the change; one out of memory alone too is its crash, saying so."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sqlite3
import threading
import time
from collections.abc import Iterator

import pytest
from fakes.agent import ScriptedAgent
from fakes.executor import knobs
from harness import build_ws

from looper.config import load_config
from looper.core.verdicts.verdict import Outcome
from looper.executors.base import RunResult
from looper.night.display import Display
from looper.night.experiment import run_candidate
from looper.night.loop import Loop
from looper.night.notify import AppriseNotifier
from looper.store import Store
from night.test_gpu_baseline import ModelGpu

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("runtime_taken_once")]

OOM = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.19 GiB of which 1.02 GiB is free.\n")
FIRST_TRY_SECONDS = 5.0  # what a try out of memory beside another run says it took (a try that ran: 0.01 s)


class TightGpu(ModelGpu):
    """One GPU whose memory holds one large run: train.py's ``SCENARIO = "oom_shared"`` runs out of its memory
    when another run trains or is evaluated on it, ``"oom"`` always. Each training and evaluation takes 0.3 s, so
    the seeds of a look overlap; ``tries``: (seed, the runs on the GPU beside it when it started)."""

    def __init__(self, prestarts: bool = False) -> None:
        super().__init__("Fake GPU")
        self.on, self.tries, self.lock = 0, [], threading.Lock()
        self.evaluating, self.evals = 0, []  # evaluations at once; (seed, the runs on the GPU when it started)
        self.prestarts = prestarts  # as the local executor: the run's box first, then it waits for its slot (job.gate)

    def train(self, job, on_line, cancel):  # type: ignore[no-untyped-def]
        if job.gate is not None and not job.gate():
            return RunResult(exit_code=None, started=False)
        job = dataclasses.replace(job, gate=None)
        scenario = knobs(job.checkout / "train.py").get("SCENARIO")
        with self.busy("on") as beside:
            self.tries.append((job.seed, beside))
            if scenario == "oom" or (scenario == "oom_shared" and beside):
                job.out_dir.mkdir(parents=True, exist_ok=True)
                job.log_path.write_text(OOM)
                return RunResult(exit_code=1, seconds=FIRST_TRY_SECONDS, log_tail=OOM)
            return super().train(job, on_line, cancel)

    def evaluate(self, job, on_line, cancel):  # type: ignore[no-untyped-def]
        """``SCENARIO = "eval_oom_shared"``: the evaluation runs out of memory when another run or evaluation is on
        the GPU."""
        scenario = knobs(job.checkout / "train.py").get("SCENARIO")
        with self.busy("evaluating") as beside:
            self.evals.append((json.loads(job.weights.read_text())["seed"], beside))
            if scenario == "eval_oom_shared" and beside:
                job.log_path.write_text(OOM)
                return RunResult(exit_code=1, seconds=FIRST_TRY_SECONDS, log_tail=OOM)
            return super().evaluate(job, on_line, cancel)

    @contextlib.contextmanager
    def busy(self, count: str) -> Iterator[int]:
        """A training (``"on"``) or an evaluation (``"evaluating"``) on the GPU for 0.3 s at least; the runs and
        evaluations beside it as it starts."""
        with self.lock:
            setattr(self, count, getattr(self, count) + 1)
            beside = self.on + self.evaluating - 1
        try:
            time.sleep(0.3)
            yield beside
        finally:
            with self.lock:
                setattr(self, count, getattr(self, count) - 1)


def night(tmp_path, scenario: str, seed_jobs: int = 2, prestarts: bool = False) -> tuple[Loop, TightGpu, io.StringIO]:
    ws = build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none", exec_require_gpu=True,
                  loop_seed_jobs=seed_jobs)
    executor, said = TightGpu(prestarts), io.StringIO()
    loop = Loop(ws.root, load_config(ws.root / "looper.toml"), Store(ws.root / "experiments.db"), executor,
                ScriptedAgent({"SCENARIO": scenario}), AppriseNotifier([]), display=Display(said), program_md="")
    assert loop.setup() is None
    executor.tries.clear()
    return loop, executor, said


@pytest.mark.parametrize("prestarts", [False, True])
def test_a_seed_out_of_memory_beside_another_trains_again_alone_and_is_measured(tmp_path, prestarts):
    """With ``prestarts`` the executor starts each run's box and then waits for its slot itself (the local
    executor's ``job.gate``): the GPU's share is taken there, once the slot is given."""
    loop, executor, said = night(tmp_path, "oom_shared", prestarts=prestarts)
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r is not None and r.outcome is not Outcome.CRASH and r.halt_error is None, r
    with sqlite3.connect(loop.ctx.root / "experiments.db") as con:
        scored = con.execute("SELECT seed FROM runs WHERE experiment_id=? AND score IS NOT NULL ORDER BY seed",
                             (r.exp_id,)).fetchall()
    assert len(scored) >= 2, scored  # both seeds of the first look measured
    shared = [s for s, beside in executor.tries if beside]
    assert shared, executor.tries  # a seed started beside the other and ran out of memory
    again = [s for s, beside in executor.tries if not beside and s in shared]
    assert again == shared, executor.tries  # and trained again with nothing beside it
    notes = [e.message for e in loop.ctx.store.journal(kind="note") if "ran out of memory on GPU 0" in e.message]
    assert len(notes) == len(shared)
    assert f"GPU memory: seed {shared[0]} ran out of memory on GPU 0 beside 1 other run training on it: trained again with " \
           "the GPU to itself" in notes[0] and "CUDA out of memory" in notes[0]
    assert notes[0] in said.getvalue()
    from looper.report import gather

    (morning,) = [a for a in gather(loop.ctx.store, loop.ctx.root).attention if "out of GPU memory" in a.text]
    assert (morning.level, morning.exp_id) == ("note", r.exp_id)
    assert morning.text == (f"{len(shared)} run(s) ran out of GPU memory beside other runs and ran again with the "
                            f"GPU to themselves (#{r.exp_id}): these changes need more memory than the GPU's share; "
                            "fewer runs at a time (loop.seed_jobs x loop.workers) would spare the reruns")
    first_try = next(loop.ctx.root.glob(f"runs/t/*/shared-oom-*-s{shared[0]}"))
    assert "CUDA out of memory" in (first_try / "train.log").read_text()  # its first try kept for the morning
    assert cost(loop, r.exp_id, "train_seconds") == pytest.approx(len(shared) * FIRST_TRY_SECONDS + 0.01 * runs(loop, r.exp_id))


def runs(loop: Loop, exp_id: int) -> int:
    with sqlite3.connect(loop.ctx.root / "experiments.db") as con:
        return con.execute("SELECT COUNT(*) FROM runs WHERE experiment_id=?", (exp_id,)).fetchone()[0]


def cost(loop: Loop, exp_id: int, column: str) -> float:
    """A candidate's recorded seconds (``train_seconds`` or ``eval_seconds``): every try of its runs (issue 46)."""
    (row,) = [x for x in loop.ctx.store.find_experiments(tag="t", kind="candidate") if x.id == exp_id]
    return getattr(row, column)


def test_a_seed_out_of_memory_alone_too_is_the_change_s_crash_saying_so(tmp_path):
    loop, executor, _ = night(tmp_path, "oom")
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r is not None and r.outcome is Outcome.CRASH and r.halt_error is None
    (row,) = [x for x in Store(loop.ctx.root / "experiments.db").find_experiments(tag="t", kind="candidate")]
    reasons = json.dumps(row.verdict)
    assert "out of memory" in reasons and "with GPU 0 to itself as well, after it ran out of memory beside 1" in reasons


def test_one_run_at_a_time_out_of_memory_is_the_change_s_crash_at_once(tmp_path):
    loop, executor, _ = night(tmp_path, "oom", seed_jobs=1)
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r is not None and r.outcome is Outcome.CRASH
    assert executor.tries == [(0, 0)]  # nothing beside it: no second try
    assert not [e for e in loop.ctx.store.journal(kind="note") if "ran out of memory" in e.message]
    from looper.report import gather

    assert not [a for a in gather(loop.ctx.store, loop.ctx.root).attention if "out of GPU memory" in a.text]


def test_a_warm_up_out_of_memory_beside_its_copies_halts_naming_the_runs_at_once(tmp_path):
    """The warm-up trains the runs the night will train at once to measure the step budget under them: out of
    memory there, the night's load does not fit the GPU (no rerun alone: that would budget a run alone)."""
    ws = build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none", exec_require_gpu=True,
                  loop_seed_jobs=2, loop_max_steps="auto")
    p = ws.root / "train.py"
    p.write_text(p.read_text().replace('SCENARIO = "ok"', 'SCENARIO = "oom_shared"'))
    ws.git("commit", "-qam", "a train.py two of which do not fit the GPU")
    executor = TightGpu()
    loop = Loop(ws.root, load_config(ws.root / "looper.toml"), Store(ws.root / "experiments.db"), executor,
                ScriptedAgent({}), AppriseNotifier([]), display=Display(io.StringIO()), program_md="")
    halted = loop.setup()
    assert halted is not None and "could not train its warm-up run (crash)" in str(halted.error), halted
    assert "beside 1 other run on GPU 0: the runs the night trains at once do not fit its memory; lower " \
           "loop.seed_jobs or loop.workers" in str(halted.error)
    assert len(executor.tries) == 2  # the two copies, no rerun


def test_an_evaluation_out_of_memory_beside_another_is_evaluated_again_alone(tmp_path):
    """Evaluations hold a share of the GPU too: one out of memory beside another run is evaluated again with the GPU
    to itself (it was the change's crash: the best's weights, evaluated as the canary, fitted)."""
    loop, executor, said = night(tmp_path, "eval_oom_shared")
    executor.evals.clear()
    r = run_candidate(loop.ctx, loop.ctx.night.workers[0])
    assert r is not None and r.outcome is not Outcome.CRASH and r.halt_error is None, r
    shared = [s for s, beside in executor.evals if beside]
    assert shared and all((s, 0) in executor.evals for s in shared), executor.evals  # again, alone
    notes = [e.message for e in loop.ctx.store.journal(kind="note") if "evaluation ran out of memory" in e.message]
    assert len(notes) == len(shared) and notes[0] in said.getvalue()
    assert notes[0].startswith(f"GPU memory: seed {shared[0]}'s evaluation ran out of memory on GPU 0 beside 1 other "
                               "run on it: evaluated again with the GPU to itself")
    first = next(loop.ctx.root.glob(f"runs/t/{r.exp_id:05d}/*-s{shared[0]}/shared-oom-eval.log"))
    assert "CUDA out of memory" in first.read_text()
    assert cost(loop, r.exp_id, "eval_seconds") == pytest.approx(len(shared) * FIRST_TRY_SECONDS + 0.01 * runs(loop, r.exp_id))
