"""Session fixtures for the experiment files: a tiny data set and one tiny trained model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY_TRAIN_STEPS = 24  # optimizer steps of the one short real training run shared by the session: the same
# weights bit for bit on every run (a wall-clock budget gave 8 to 219 steps by the machine's load, and weights
# whose scores sat near the pinned confidence now and then)
TINY_TRAIN_BUDGET = 150  # s: a ceiling the 24 steps stay under on a loaded 2-core machine


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prepare.py at tiny scale, seed 0 (test pages too: reproducible), built once per session (about a second)."""
    sys.path.insert(0, str(REPO))
    try:
        import prepare
    finally:
        sys.path.remove(str(REPO))
    out = tmp_path_factory.mktemp("tiny_data") / "data"
    prepare.build(out, "tiny", 0, test_seed=0)
    return out


@pytest.fixture(scope="session")
def tiny_weights(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ONE real train.py run on the tiny data (TINY_TRAIN_STEPS steps); returns its LOOPER_OUT folder."""
    out = tmp_path_factory.mktemp("tiny_run") / "out"
    env = dict(os.environ, LOOPER_BUDGET_SECONDS=str(TINY_TRAIN_BUDGET), LOOPER_MAX_STEPS=str(TINY_TRAIN_STEPS),
               LOOPER_DATA=str(tiny_data),
               LOOPER_OUT=str(out), LOOPER_SEED="0", LOOPER_DEVICE="cpu",
               LOOPER_PRETRAINED_DIR=str(REPO / "looper" / "pretrained"),  # what `looper init` copies
               YOLO_CONFIG_DIR=str(tmp_path_factory.mktemp("ultralytics_cfg")))
    proc = subprocess.run([sys.executable, str(REPO / "train.py")], cwd=out.parent, env=env,
                          capture_output=True, text=True, timeout=TINY_TRAIN_BUDGET + 60)
    if proc.returncode != 0 or not (out / "weights.pt").is_file():
        raise RuntimeError(f"tiny training failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    if json.loads((out / "train.json").read_text()).get("steps") != TINY_TRAIN_STEPS:
        raise RuntimeError(f"tiny training stopped before its {TINY_TRAIN_STEPS} steps (the {TINY_TRAIN_BUDGET} s "
                           f"ceiling): {(out / 'train.json').read_text()[:400]}")
    return out


# -- tiers the user opted out of (tests/tiers.py) -----------------------------------------------

def pytest_configure(config: pytest.Config) -> None:
    import tiers

    tiers.skipped()  # an unknown tier name in LOOPER_SKIP_TIERS stops the run before any test
    _register_clock(config)
    _fast_tier_tmp_in_memory(config)
    _a_worker_s_share_of_the_cores()


def _a_worker_s_share_of_the_cores() -> None:
    """Under pytest-xdist (``make test``: two workers on two cores), each worker's torch, and the runs its tests
    start, on its share of the cores (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``: the sandbox passes them on,
    train.py and evaluate.py's torch honour them; a night's runs side by side still get their explicit share).
    Two workers' runs each on every core oversubscribed them: two tiny trainings at once took 30.2 s each where
    one thread each took 11.1 s (bench/RESULTS.md, "Threads of runs at the same time"). A value already set wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers <= 1:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(max(1, cores // workers)))


RAM_DISK = Path("/dev/shm")
RAM_DISK_MIN_FREE = 1 << 30  # bytes: the fast tier writes about 25 MB a run, pytest keeps 3 runs


def _fast_tier_tmp_in_memory(config: pytest.Config) -> None:
    """The fast tier's ``tmp_path`` folders on a RAM disk (tmpfs) when there is one with room.

    Its tests open about 130 SQLite stores and commit about 1,250 times, and experiments.db
    commits with ``synchronous = FULL``: on a disk every commit waits for an fsync (2-6 ms here),
    on tmpfs it does not. Nothing a fast test asserts depends on the disk (a crash test kills a
    process; the page cache survives it). Only for ``-m "not e2e"`` exactly: the end-to-end tier
    keeps the usual temporary folder (its sandbox mounts a private /dev/shm). ``--basetemp`` or
    ``PYTEST_DEBUG_TEMPROOT`` (pytest's own setting for the folder) win.
    """
    if " ".join(str(config.option.markexpr or "").split()) != "not e2e":
        return
    if config.option.basetemp or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        return
    try:
        st = os.statvfs(RAM_DISK)
    except OSError:
        return
    if os.access(RAM_DISK, os.W_OK) and st.f_bavail * st.f_frsize >= RAM_DISK_MIN_FREE:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(RAM_DISK)  # read when the first tmp_path is made


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (the package, scipy, hypothesis, the test modules: about 250,000 objects the
    collector tracks) lives to the end of the run: moved out of the garbage collector's sight once
    (``gc.freeze``), so that the run's full collections scan only what the tests made since; and the
    youngest generation is collected every 7,000 new objects instead of 700, so full collections come about
    four times less often (the fast tier: about 3,500 collections, 25 of them full -> about 870, 6 full).
    The fast tier's time in the collector: 2.3-2.6 s -> 1.3-1.6 s. Reference counting frees every object
    as before; only garbage in reference cycles waits longer (a frozen one, to the end of the run)."""
    import gc

    gc.collect()  # the garbage collection itself made, freed first (never frozen)
    gc.freeze()
    gc.set_threshold(7000, 10, 10)  # Python's default: 700, 10, 10


def _register_clock(config: pytest.Config) -> None:
    """scripts/pytest_clock.py: every run ends with its duration, the fast tier with its 30 s budget
    and, over it, its slowest tests (issue 26). verify_json.py loads it itself with ``-p``."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import pytest_clock
    finally:
        sys.path.remove(str(REPO / "scripts"))
    pytest_clock.register(config)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    """Name every skipped tier and how many of its tests did not run, so a skip never reads as green."""
    import tiers

    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        if tiers.SKIP_MARK in reason:
            tier = reason.rsplit(":", 1)[1].strip()
            counts[tier] = counts.get(tier, 0) + 1
    opted = tiers.skipped()
    if not opted and not counts:
        return
    terminalreporter.section("skipped tiers", sep="=", yellow=True, bold=True)
    for tier in dict.fromkeys([*opted, *counts]):
        terminalreporter.write_line(f"SKIPPED TIER {tier}: {counts.get(tier, 0)} tests not run "
                                    f"({tiers.SKIP_ENV}={','.join(opted)}); to run them, leave it out of "
                                    f"{tiers.SKIP_ENV} (its system packages: {tiers.apt_line(tier)})",
                                    yellow=True)


# A small train.py with a hyperparameter block (the core tests of the knob block, plan and search, and the agents).
TRAIN_PY = '''"""A tiny stand-in for train.py (fixture)."""

import os  # the real one imports torch; not needed here

# ==== HYPERPARAMETERS (the agent changes these) ====
MODEL = "yolov8n.yaml"   # model yaml: architecture
WIDTH = 0.25             # width multiple (x)
IMGSZ = 640              # training image size (px)
BATCH = 16               # images per step
OPTIMIZER = "SGD"        # optimizer name
LR0 = 0.01               # initial learning rate (1/step) — µ-free comment
MOSAIC = 1.0             # mosaic probability [0, 1]
COS_LR = False           # cosine LR schedule (bool)
CLS_GAIN = 0.5           # classification loss gain (x)
# ==== END HYPERPARAMETERS ====


def main() -> None:
    out = os.environ.get("LOOPER_OUT", ".")
    print("training", MODEL, LR0, IMGSZ, out)


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def train_py() -> str:
    return TRAIN_PY
