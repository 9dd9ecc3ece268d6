"""A run's box started before its slot is free: the wait hidden, nothing shared (issue 46).

A run on a GPU spends seconds before its first step that the GPU does nothing with: the sandbox, the
interpreter, ``import torch`` and Ultralytics (10.7 s a run on an H200, bench/RESULTS.md "A GPU night").
With ``[loop] prestart`` on, the run's own box is started while another run holds the slot it waits for:
the same fresh sandbox, the same fresh process as ever (one box, one run, nothing of it reused), running
:data:`LAUNCHER` instead of ``python train.py``. The launcher is the harness's code, not the candidate's:
it imports :data:`IMPORTS` (never CUDA: a module import does not initialise it, and the launcher says
whether it did), prints one line, and waits for one line on its standard input. Only then, when the slot
is the run's (:func:`looper.proc.supervise`'s ``gate``), the harness writes :data:`GO`, starts the run's
wall clock, and the launcher runs ``train.py`` as ``python train.py`` would (``__main__``, ``sys.argv``,
the script's folder first on ``sys.path``). A launcher told anything else (its slot was not given: the
night stopped, or an earlier seed failed) ends with :data:`NOT_STARTED_EXIT` without reading train.py.

What the run computes does not change: the same modules are imported either way, train.py seeds its own
random streams after go, and the step budget fixes its work (tests/executors/test_prestart.py: the same
seed's weights, bit for bit, prestarted and cold).
"""

from __future__ import annotations

from looper.proc.wallclock import GO

#: What the launcher imports before go: what train.py imports first (torch, then Ultralytics' YOLO and
#: its trainer), the bulk of a run's start-up that does not depend on the candidate's code.
IMPORTS = ("numpy", "torch", "ultralytics")
NOT_STARTED_EXIT = 75  # the launcher was not told go: train.py never ran (EX_TEMPFAIL)
READY_MARK = "looper prestart: ready"  # the launcher's line once its imports are done

LAUNCHER = (
    "import importlib, os, sys, time\n"
    "t0 = time.monotonic()\n"
    f"for name in {IMPORTS!r}:\n"
    "    try:\n"
    "        mod = importlib.import_module(name)\n"
    "        getattr(mod, 'YOLO', None)  # Ultralytics' model class and its trainer, imported lazily\n"
    "    except Exception as exc:  # train.py's own import says what is wrong, in its own run\n"
    "        print(f'looper prestart: {name} not imported ({type(exc).__name__})', flush=True)\n"
    "torch = sys.modules.get('torch')\n"
    "cuda = bool(torch is not None and torch.cuda.is_initialized())\n"
    f"print(f'{READY_MARK} in {{time.monotonic() - t0:.1f}} s (CUDA initialised: {{cuda}})', flush=True)\n"
    "line = sys.stdin.buffer.readline()\n"
    f"if line != {GO!r}:\n"
    "    print('looper prestart: not started (its slot was not given)', flush=True)\n"
    f"    sys.exit({NOT_STARTED_EXIT})\n"
    "null = os.open(os.devnull, os.O_RDONLY)\n"
    "os.dup2(null, 0)  # train.py reads nothing from the harness\n"
    "os.close(null)\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python train.py` puts it\n"
    "import runpy\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def argv(python: str, script: str = "train.py") -> list[str]:
    """The prestarted form of ``[python, script]``: the launcher, then ``script`` once told go."""
    return [python, "-c", LAUNCHER, script]
