"""Crash or harness error, failure signatures, and stuck detection (repeat and oscillation)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looper.core.fault.failure import (
    FailureEvidence,
    classify_failure,
    is_stuck,
    normalise,
    signature_of,
)
from looper.core.verdicts.verdict import Outcome

CK = "/ws/.looper/checkout"
SP = "/venv/lib/python3.11/site-packages"


def tb(*frames: str, exc: str) -> str:
    """A Python traceback; frames are (path, func) pairs written as 'path::func'."""
    lines = ["Epoch 1/3 ...", "Traceback (most recent call last):"]
    for f in frames:
        path, func = f.split("::")
        lines += [f'  File "{path}", line 42, in {func}', "    some_code()"]
    return "\n".join([*lines, exc])


TRAIN_MAIN = f"{CK}/train.py::<module>", f"{CK}/train.py::main"
LIB = f"{SP}/ultralytics/engine/model.py::train", f"{SP}/torch/nn/modules/conv.py::forward"

RUNTIME = tb(*TRAIN_MAIN, *LIB, exc="RuntimeError: Given groups=1, weight of size [16, 3, 3, 3], expected "
             "input[1, 4, 640, 640] to have 3 channels, but got 4 channels instead")
OOM = tb(*TRAIN_MAIN, *LIB, exc="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
         "GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.")
SYNTAX = f'  File "{CK}/train.py", line 12\n    x = (\n        ^\nSyntaxError: \'(\' was never closed'


def ev(log: str = "", exit_code: int | None = 1, **kw: object) -> FailureEvidence:
    return FailureEvidence(exit_code=exit_code, log_tail=log, **kw)  # type: ignore[arg-type]


C, E = Outcome.CRASH, Outcome.ERROR


@pytest.mark.parametrize(
    ("evidence", "outcome", "kind", "reason"),
    [
        # the change broke it
        (ev(RUNTIME), C, "traceback", "train.py raised RuntimeError: Given groups=1"),
        (ev(OOM), C, "oom", "out of memory (torch.OutOfMemoryError: CUDA out of memory"),
        (ev(tb(*TRAIN_MAIN, exc="MemoryError")), C, "oom", "out of memory (MemoryError"),
        # GPU memory cuBLAS or cuDNN could not get (on a shared GPU, often another run's): out of memory too
        (ev(tb(*TRAIN_MAIN, *LIB, exc="RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
                                      "`cublasCreate(handle)`")), C, "oom", "out of memory (RuntimeError: CUDA error: CUBLAS"),
        (ev(tb(*TRAIN_MAIN, *LIB, exc="RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED")), C, "oom",
         "out of memory (RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
        (ev(tb(*TRAIN_MAIN, *LIB, exc="RuntimeError: CUDA error: out of memory")), C, "oom", "out of memory (RuntimeError"),
        (ev("loading...\nKilled", exit_code=137), C, "oom", "out of memory (the log says so)"),
        (ev("", exit_code=None, signal=9), C, "oom", "killed by SIGKILL"),
        (ev("epoch 3", exit_code=-9), C, "oom", "killed by SIGKILL"),
        (ev("epoch 3", exit_code=137), C, "oom", "killed by SIGKILL"),
        (ev("epoch 3", exit_code=None, signal=15, timed_out=True), C, "over-budget", "over budget"),
        (ev("epoch 3", exit_code=None, signal=15, stalled=True), C, "hung", "hung: the log did not move"),
        (ev(SYNTAX), C, "syntax", "train.py does not parse: SyntaxError: '(' was never closed"),
        (ev(tb(*TRAIN_MAIN, exc="IndentationError: unexpected indent")), C, "syntax", "does not parse"),
        (ev(tb(*TRAIN_MAIN, exc="NameError: name 'lr' is not defined")), C, "name", "undefined name"),
        (ev(tb(*TRAIN_MAIN, exc="ModuleNotFoundError: No module named 'timm'")), C, "import",
         "train.py imports 'timm', which is not in the declared dependency set"),
        (ev(tb(*TRAIN_MAIN, "<frozen importlib._bootstrap>::_find_and_load",
               exc="ImportError: cannot import name 'YOLOv99' from 'ultralytics' (/venv/x/__init__.py)")),
         C, "import", "asks for something the installed 'ultralytics' does not have"),
        (ev(tb(*TRAIN_MAIN, exc="ModuleNotFoundError: No module named 'ultralytics.nn.fancy'")), C, "import",
         "the installed 'ultralytics' does not have"),
        (ev(tb(*TRAIN_MAIN, exc="ImportError: attempted relative import with no known parent package")),
         C, "import", "train.py's import failed"),
        (ev(tb(*TRAIN_MAIN, exc="FileNotFoundError: [Errno 2] No such file or directory: '/tmp/x.yaml'"),
            data_dir="/ws/data"), C, "traceback", "train.py raised FileNotFoundError"),
        (ev(tb(*TRAIN_MAIN, exc="ConnectionRefusedError: [Errno 111] Connection refused")), C, "traceback",
         "train.py raised ConnectionRefusedError"),
        # the harness broke
        (ev("", exit_code=255, transport_exit_code=255), E, "transport", "ssh itself failed (transport exit code 255)"),
        (ev("", exit_code=1, transport_exit_code=1), E, "transport", "executor transport failed"),
        (ev(RUNTIME, missing_paths=["/ws/data/pages"]), E, "missing-path", "required paths are missing: /ws/data/pages"),
        (ev("ssh: connect to host gpu1 port 22: Connection refused", exit_code=255), E, "harness",
         "the ssh connection failed"),
        (ev("rsync: connection failed\nConnection refused"), E, "harness", "a connection was refused"),
        (ev(tb(*TRAIN_MAIN, *LIB, exc="RuntimeError: CUDA error: unknown error")), E, "harness",
         "CUDA error: unknown error"),
        (ev("Unable to determine the device handle for GPU 0000:01:00.0: GPU is lost."), E, "harness",
         "the GPU was lost"),
        (ev(tb(*TRAIN_MAIN, exc="pynvml.NVMLError_Unknown: Unknown Error")), E, "harness", "NVML"),
        (ev("Failed to initialize NVML: Driver/library version mismatch"), E, "harness", "NVML"),
        (ev(tb(*TRAIN_MAIN, exc="RuntimeError: No CUDA GPUs are available; no CUDA-capable device is detected")),
         E, "harness", "no usable CUDA device"),
        (ev(tb(*TRAIN_MAIN, exc="OSError: [Errno 28] No space left on device")), E, "harness", "the disk is full"),
        (ev(tb(*TRAIN_MAIN, exc="OSError: [Errno 30] Read-only file system: '/ws/runs'")), E, "harness", "read-only"),
        (ev(tb(*TRAIN_MAIN, exc="RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error.")),
         E, "harness", "shared memory"),
        (ev(tb(*TRAIN_MAIN, exc="FileNotFoundError: [Errno 2] No such file or directory: '/ws/data/dataset.yaml'"),
            data_dir="/ws/data/"), E, "missing-data", "a data path is missing"),
        (ev(tb(*TRAIN_MAIN, exc="ModuleNotFoundError: No module named 'torch'")), E, "dependency",
         "declared dependency 'torch' is not importable"),
        (ev(tb(*TRAIN_MAIN, exc="ModuleNotFoundError: No module named '_ctypes'")), E, "dependency",
         "declared dependency '_ctypes'"),
        (ev(tb(*TRAIN_MAIN, f"{SP}/ultralytics/__init__.py::<module>",
               exc="ImportError: cannot import name 'Foo' from 'torch.nn' (/venv/torch/nn/__init__.py)")),
         E, "dependency", "declared dependency 'torch' fails to import"),
        (ev("ImportError: cannot import name 'Foo' from 'torch.nn'"), E, "dependency",
         "declared dependency 'torch' fails to import"),
        (ev(tb(*TRAIN_MAIN, exc="ImportError: libcuda.so.1: cannot open shared object file")), E, "harness",
         "a shared library is missing"),
        (ev(f'  File "{SP}/yaml/x.py", line 3\n    def (\nSyntaxError: invalid syntax'), E, "broken-install",
         "an installed library does not parse"),
        (ev(tb(*TRAIN_MAIN, "/opt/looper/looper/adapters/executors/local.py::run", exc="KeyError: 'LOOPER_OUT'")),
         E, "harness-bug", "looper's own code raised KeyError"),
        (ev("Epoch 2\nRuntimeError: CUDA error: unknown error", exit_code=None, signal=15, stalled=True), E,
         "harness", "the run was stopped; its log shows it"),
        (ev("done", exit_code=0), E, "not-a-failure", "not a failed run"),
        (ev(RUNTIME, canary_failed=True), E, "traceback", "the last kept train.py (canary) failed too"),
    ],
)
def test_classify_failure(evidence: FailureEvidence, outcome: Outcome, kind: str, reason: str) -> None:
    c = classify_failure(evidence)
    assert (c.outcome, c.kind) == (outcome, kind), c
    assert reason in c.reason, c.reason
    assert c.signature
    assert c.needs_canary is False


@pytest.mark.parametrize(
    "log",
    [
        "",
        "some output\n",
        tb(f"{CK}/evaluate.py::main", exc="ValueError: bad weights"),
        tb(f"{SP}/multiprocessing/spawn.py::_main", exc="EOFError: Ran out of input"),
        tb(f"{CK}/helper.py::go", exc="ValueError: hm"),
    ],
)
def test_unknown_evidence_asks_for_a_canary(log: str) -> None:
    c = classify_failure(ev(log, exit_code=1))
    assert c.outcome is Outcome.CRASH and c.needs_canary and c.kind == "unknown"
    assert "rerun the last kept train.py (canary) to decide" in c.reason
    failed = classify_failure(ev(log, exit_code=1, canary_failed=True))
    assert failed.outcome is Outcome.ERROR and not failed.needs_canary
    assert "canary) failed too, so the harness is what broke" in failed.reason
    fine = classify_failure(ev(log, exit_code=1, canary_failed=False))
    assert fine.outcome is Outcome.CRASH and not fine.needs_canary
    assert "still runs, so the change broke it" in fine.reason
    assert c.signature == failed.signature == fine.signature


def test_a_segfault_is_unknown_and_names_the_signal() -> None:
    c = classify_failure(ev("", exit_code=None, signal=11))
    assert c.needs_canary and "signal 11" in c.reason


def test_unknown_with_an_exception_names_it() -> None:
    c = classify_failure(ev(tb(f"{CK}/evaluate.py::main", exc="ValueError: bad weights")))
    assert "(last exception: ValueError: bad weights)" in c.reason


def test_a_warning_about_nvml_is_not_a_harness_error() -> None:
    log = "/venv/torch/cuda/__init__.py:129: UserWarning: Can't initialize NVML\n" + RUNTIME
    assert classify_failure(ev(log)).outcome is Outcome.CRASH


def test_chained_exceptions_use_the_last_traceback() -> None:
    log = tb(*TRAIN_MAIN, exc="KeyError: 'x'") + "\n\nDuring handling of the above exception, another " \
        "exception occurred:\n\n" + tb(*TRAIN_MAIN, exc="ValueError: second")
    c = classify_failure(ev(log))
    assert "ValueError: second" in c.reason and c.signature.startswith("ValueError: second")


# -- signatures -------------------------------------------------------------------------------


def test_repeats_of_one_failure_match() -> None:
    other_oom = OOM.replace("2.00 GiB", "512.00 MiB").replace("1.02", "0.31")
    assert signature_of(OOM) == signature_of(other_oom)
    assert signature_of(OOM).startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate <size>")
    assert signature_of(OOM).endswith("@ train.py:main")


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("NameError: name 'lr' is not defined", "NameError: name 'lr0' is not defined", True),
        ("ValueError: object at 0x7f3a2c00 is bad", "ValueError: object at 0x55aa10 is bad", True),
        ("FileNotFoundError: cannot read /tmp/run3/w.pt now", "FileNotFoundError: cannot read /tmp/run9/x.pt now", True),
        ('KeyError: "box"', 'KeyError: "cls"', True),
        ("ValueError: lr must be > 0, got -0.5e-3", "ValueError: lr must be > 0, got 12", True),
        ("ValueError: a", "TypeError: a", False),
        ("ValueError: shape mismatch", "ValueError: dtype mismatch", False),
    ],
)
def test_signature_normalisation(a: str, b: str, same: bool) -> None:
    sa, sb = signature_of(tb(*TRAIN_MAIN, exc=a)), signature_of(tb(*TRAIN_MAIN, exc=b))
    assert (sa == sb) is same, (sa, sb)


def test_the_train_py_function_is_part_of_the_signature() -> None:
    a = tb(f"{CK}/train.py::build_model", exc="ValueError: x")
    b = tb(f"{CK}/train.py::train_loop", exc="ValueError: x")
    assert signature_of(a) == "ValueError: x @ train.py:build_model"
    assert signature_of(a) != signature_of(b)


@pytest.mark.parametrize(
    ("log", "sig"),
    [
        ("", "no output"),
        ("\n  \n", "no output"),
        ("step 10 loss 1.25\nstep 20 loss 1.10\n", "log: step <n> loss <n>"),
        (SYNTAX, "SyntaxError: <str> was never closed"),
        (tb(*TRAIN_MAIN, exc="AssertionError"), "AssertionError @ train.py:main"),
        (tb(f"{SP}/a.py::f", exc="KeyboardInterrupt"), "KeyboardInterrupt"),
    ],
)
def test_signature_of(log: str, sig: str) -> None:
    assert signature_of(log) == sig


def test_normalise_is_bounded() -> None:
    assert len(normalise("word " * 500)) <= 200


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=300))
def test_signature_is_stable_and_bounded(log: str) -> None:
    s = signature_of(log)
    assert s == signature_of(log) and 0 < len(s) <= 240


# -- stuck ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sigs", "n", "stuck"),
    [
        (["A", "A", "A"], 3, "the same failure 3 times in a row: A"),
        (["B", "A", "A", "A"], 3, "the same failure 3 times in a row: A"),
        (["A", "A"], 3, None),
        (["A", "A", None, "A"], 3, None),
        (["A", "A", "", "A"], 3, None),
        (["A", "B", "A", "B", "A", "B"], 3, "two failures alternating 3 times each: A / B"),
        (["C", "A", "B", "A", "B", "A", "B"], 3, "two failures alternating 3 times each: A / B"),
        (["A", "B", "A", "B", "A"], 3, None),
        (["A", "B", "A", "B"], 2, "two failures alternating 2 times each: A / B"),
        (["A", "B", "C", "B", "A", "B"], 3, None),
        (["A", "A", "B", "B", "A", "A"], 3, None),
        (["A", "B", None, "B", "A", "B"], 3, None),
        ([None] * 6, 3, None),
        (["", "", ""], 3, None),
        (["A"], 1, "the same failure 1 times in a row: A"),
        ([], 1, None),
        ([], 3, None),
    ],
)
def test_is_stuck(sigs: list[str | None], n: int, stuck: str | None) -> None:
    assert is_stuck(sigs, n) == stuck


def test_is_stuck_needs_a_positive_count() -> None:
    with pytest.raises(ValueError, match="stuck_after must be >= 1, got 0"):
        is_stuck(["A"], 0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["A", "B", "C", None]), max_size=10), st.integers(1, 4))
def test_stuck_needs_a_failure_last(sigs: list[str | None], n: int) -> None:
    result = is_stuck(sigs, n)
    if not sigs or sigs[-1] is None:
        assert result is None
    if len(sigs) >= n and sigs[-1] is not None and all(s == sigs[-1] for s in sigs[-n:]):
        assert result is not None and result.startswith("the same failure")


@pytest.mark.parametrize("text, oom", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", True),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", True),
    ("MemoryError", True),
    ("loading...\nKilled\n", True),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", False),
    ("evaluate.py: 8 pages scored", False),
])
def test_a_log_that_ran_out_of_memory(text, oom):
    from looper.core.fault.failure import out_of_memory

    assert out_of_memory(text) is oom
