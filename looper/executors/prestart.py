"""Boxes started ahead of their runs: the wait hidden, nothing shared (issue 46, ``[loop] prestart``).

A run on a GPU spends seconds before its first step that the GPU does nothing with: the sandbox, the
interpreter, ``import torch`` and Ultralytics (10.7 s a run on an H200, bench/RESULTS.md "A GPU night").
With prestart on, the local executor keeps *spare* boxes: each is the same fresh sandbox and the same fresh
process a run has always had, started before the run it will serve is known, running :data:`LAUNCHER`
instead of ``python train.py``. The launcher is the harness's code, not the candidate's: it imports
:data:`IMPORTS` (never CUDA: the launcher says whether it was initialised), prints :data:`READY_MARK`, and
waits for one line on its standard input. A run takes a spare that is ready (:class:`Spares`), and one
more is started for the run after it at once, in the background. Then the harness writes the run's
``train.py`` into the box's own code folder (read-only inside), sends ``go`` with the run's own variables
(:data:`GO_VARS`: seed, ``$LOOPER_OUT``, budget, step budget) and starts the run's wall clock; the launcher
runs ``train.py`` as ``python train.py`` would (``__main__``, ``sys.argv``, the script's folder first on
``sys.path``). Its ``$LOOPER_OUT`` is the box's own, moved to the run's folder when it ends. A box serves
one run and ends with it: no interpreter, ``/tmp`` or CUDA context passes from one run to the next. A box
told anything but go ends with :data:`NOT_STARTED_EXIT` without reading train.py.

What the run computes does not change: the same modules are imported either way, train.py seeds its own
random streams after go, and the step budget fixes its work (tests/executors/test_prestart.py: the same
seed's weights, bit for bit, prestarted and cold).

An evaluation's box is started ahead the same way (:data:`EVAL_LAUNCHER`, the evaluator's own sandbox from
looper/executors/sandbox.py ``eval_argv``): it imports, waits, and on go runs the harness's copy of evaluate.py
on the run's weights, both written into its folders at go; each evaluation asks for the next one's box as it
ends (looper/executors/local.py ``_evaluate_in_box``).
"""

from __future__ import annotations

import json
import os
import queue
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper import proc
from looper.executors.sandbox import NOSITE_PATHS
from looper.proc.wallclock import GO

#: What the launcher imports before go: what train.py imports first (torch, then Ultralytics' YOLO), then
#: what Ultralytics' trainer imports lazily before a run's first step (the optimizer's ``torch._dynamo`` and
#: sympy, torchvision's ops, the detection trainer, its data and plotting libraries): library code only,
#: never the candidate's, and modules the run imports anyway. Without the second part a prestarted run
#: still imported 1,400 modules after go: 1.2 of its 1.9 s to the first step on a 2-core CPU
#: (bench/RESULTS.md, "Start-up out of the way"). A name that cannot be imported is said and skipped.
IMPORTS = ("numpy", "torch", "ultralytics",
           "torch._dynamo", "torchvision", "ultralytics.models.yolo.detect.train", "polars", "requests",
           "matplotlib.font_manager", "thop", "psutil", "safetensors.torch")
NOT_STARTED_EXIT = 75  # the launcher was not told go: train.py never ran (EX_TEMPFAIL)
READY_MARK = "looper prestart: ready"  # the launcher's line once its imports are done
#: The variables of one run, sent with go; every other variable is the box's from its start (the threads,
#: the data, the device: what the interpreter and torch read as they start).
GO_VARS = ("LOOPER_SEED", "LOOPER_OUT", "LOOPER_BUDGET_SECONDS", "LOOPER_MAX_STEPS")
READY_LINES = 20  # lines the launcher may print before it is ready (an import it could not do, each one)
READY_SECONDS = 300.0  # a box not ready by then is ended unused (a night's end waits for no more than this)

#: What an evaluation's box imports before go: evaluate.py's own imports (it keeps torchvision's package out).
EVAL_IMPORTS = ("numpy", "torch", "ultralytics.nn.tasks", "yaml", "PIL.Image", "PIL.PngImagePlugin",
                "safetensors.torch", "looper.core.scoring.metrics", "looper.core.scoring.tilegrid")


def launcher(imports: tuple[str, ...] = IMPORTS, *, setup: str = "", shift: int = 1, script_first: bool = True) -> str:
    """The launcher's code: ``setup`` (the evaluator's explicit ``sys.path``), ``imports``, the ready line, then
    on go the script ``sys.argv[shift]`` with the arguments after it, as ``python script ...`` runs it
    (``script_first``: its folder first on ``sys.path``; the evaluator's path is set by ``setup`` alone)."""
    return (
        setup
        + "import importlib, json, os, sys, time\n"
        "t0 = time.monotonic()\n"
        "own_threads = os.environ.get('OMP_NUM_THREADS')  # the box's own; Ultralytics' import sets 1 where unset\n"
        f"for name in {imports!r}:\n"
        "    try:\n"
        "        mod = importlib.import_module(name)\n"
        "        getattr(mod, 'YOLO', None)  # Ultralytics' model class and its trainer, imported lazily\n"
        "    except Exception as exc:  # the script's own import says what is wrong, in its own run\n"
        "        print(f'looper prestart: {name} not imported ({type(exc).__name__})', flush=True)\n"
        "torch = sys.modules.get('torch')\n"
        "cuda = bool(torch is not None and torch.cuda.is_initialized())\n"
        f"print(f'{READY_MARK} in {{time.monotonic() - t0:.1f}} s (CUDA initialised: {{cuda}})', flush=True)\n"
        "line = sys.stdin.buffer.readline()\n"
        f"if not line.startswith({GO.strip()!r}):\n"
        "    print('looper prestart: not started (no run was given to this box)', flush=True)\n"
        f"    sys.exit({NOT_STARTED_EXIT})\n"
        "job = json.loads(line[2:]) if line[2:].strip() else {}\n"
        "os.environ.pop('OMP_NUM_THREADS', None)  # the script reads the box's own, as started cold it does\n"
        "os.environ.update({} if own_threads is None else {'OMP_NUM_THREADS': own_threads})\n"
        f"os.environ.update({{k: str(v) for k, v in job.get('env', {{}}).items() if k in {GO_VARS!r}}})\n"
        "null = os.open(os.devnull, os.O_RDONLY)\n"
        "os.dup2(null, 0)  # the script reads nothing from the harness\n"
        "os.close(null)\n"
        f"sys.argv = sys.argv[{shift}:]\n"
        + ("sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python train.py` puts it\n"
           if script_first else "")
        + "import runpy\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )


LAUNCHER = launcher()
#: An evaluation's box: the evaluator's own explicit ``sys.path`` (``python -I -S -c``, no ``.pth``), its
#: imports, then on go the harness's copy of evaluate.py (looper/executors/sandbox.py ``eval_argv``).
EVAL_LAUNCHER = launcher(EVAL_IMPORTS, setup=NOSITE_PATHS, shift=2, script_first=False)


def argv(python: str, script: str = "train.py") -> list[str]:
    """The prestarted form of ``[python, script]``: the launcher, then ``script`` once told go."""
    return [python, "-c", LAUNCHER, script]


def go_line(env: Mapping[str, str]) -> bytes:
    """The go line for a run: its :data:`GO_VARS` from ``env``."""
    return GO.strip() + b" " + json.dumps({"env": {k: env[k] for k in GO_VARS if k in env}}).encode() + b"\n"


def split_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the box's variables from its start, the run's :data:`GO_VARS`)."""
    return ({k: v for k, v in env.items() if k not in GO_VARS}, {k: v for k, v in env.items() if k in GO_VARS})


@dataclass
class Spare:
    """A started box waiting for its run: the launched process, its run limits (entered), its folder with
    ``code/`` (train.py goes there, read-only inside) and ``out/`` (the run's ``$LOOPER_OUT``)."""

    key: str
    launched: proc.Launched
    limits: Any  # looper.executors.limits.Box, entered when the box started
    folder: Path
    said: list[str] = field(default_factory=list)  # the launcher's lines up to and including its ready line

    @property
    def code(self) -> Path:
        return self.folder / "code"

    @property
    def out(self) -> Path:
        return self.folder / "out"

    @property
    def alive(self) -> bool:
        return self.launched.proc.poll() is None


def read_ready(launched: proc.Launched, timeout: float = READY_SECONDS) -> list[str]:
    """The launcher's lines up to its ready line, waiting at most ``timeout`` seconds for it; [] or lines without
    it: the box ended, said something else first, or took too long (it is not used). Read from the pipe's
    descriptor, not its buffer: the launcher says nothing more until go, and the run's log reads the rest."""
    stdout = launched.proc.stdout
    assert stdout is not None
    fd, got, deadline = stdout.fileno(), b"", time.monotonic() + timeout
    while READY_MARK.encode() not in got and got.count(b"\n") < READY_LINES:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        got += chunk
    return [ln for ln in got.decode("utf-8", "replace").splitlines() if ln.strip()][:READY_LINES]


class Spares:
    """The spare boxes of one executor. :meth:`take` hands a run the oldest box started for the same
    variables (waiting for it to be ready: it is never slower than starting one then), and :meth:`request`
    asks for one more. Boxes are started by one long-lived thread of this class, not the runs' threads:
    bubblewrap's ``--die-with-parent`` follows the thread that started it, and a look's threads end with it."""

    def __init__(self, start: Callable[[str, Any], Spare | None], end: Callable[[Spare], None], most: int = 16) -> None:
        self._start, self._end, self.most = start, end, most
        self._waiting: deque[tuple[str, Future]] = deque()
        self._lock = threading.Lock()
        self._orders: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def request(self, key: str, plan: Any) -> None:
        """Start one more box for ``key`` (``plan``: what :func:`start` needs), unless ``most`` are waiting."""
        with self._lock:
            if self._closed or len(self._waiting) >= self.most:
                return
            fut: Future = Future()
            self._waiting.append((key, fut))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="looper-boxes", daemon=True)
                self._thread.start()
        self._orders.put((key, plan, fut))

    def take(self, key: str) -> Spare | None:
        """The oldest box for ``key``, once ready and still alive; None: none was asked for (or it failed)."""
        with self._lock:
            found = next((i for i, (k, _f) in enumerate(self._waiting) if k == key), None)
            if found is None:
                return None
            _k, fut = self._waiting[found]
            del self._waiting[found]
        spare = fut.result()
        if spare is not None and not spare.alive:
            self._end(spare)
            return None
        return spare

    def _serve(self) -> None:
        while True:
            order = self._orders.get()
            if order is None:
                return
            key, plan, fut = order
            try:
                spare = None if self._closed else self._start(key, plan)
            except Exception:  # a box that could not start: the run starts its own, as without prestart
                spare = None
            fut.set_result(spare)

    def close(self) -> None:
        """End every waiting box (the night is over); boxes in use end with their runs."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = list(self._waiting), deque()
        self._orders.put(None)
        for _key, fut in waiting:
            spare = fut.result()
            if spare is not None:
                self._end(spare)
