"""Test tiers that need system packages: a missing part FAILS the tier's tests, naming the one
apt line that installs it, unless the user opts out of the tier by name::

    LOOPER_SKIP_TIERS=ssh,browser,slurm make test

Skipped tiers are named again at the end of the run (``pytest_terminal_summary`` in
tests/conftest.py). The tier -> package table is ``scripts/system_packages.txt``, the same one
``scripts/setup_system.sh`` installs from (``make test`` runs it first).

Two speed tiers cut across these (issue 26):

- the fast tier, ``python -m pytest -q -m "not e2e"`` (``make test-fast``, and inside
  ``make verify-json``): no torch import, no training, no sandbox, no browser; budget 30 s on
  an idle 2-core machine (``FAST_BUDGET_S`` in scripts/pytest_clock.py; verify-json's hard
  deadline is 47 s). Every run ends with one line: its duration, split into collection and
  tests, and over the budget its ten slowest tests. What collection imports counts too:
  ``python -X importtime -m pytest --collect-only -q -s -m "not e2e" 2>imp.txt`` shows it;
  a test file imports heavy libraries (torch, ultralytics) inside its tests, not at the top.
  It runs in one process: two pytest-xdist workers cost 7-8 s more CPU and, under the load of other
  work, were slower (docs/CONTRIBUTING.md has the figures).
  Its ``tmp_path`` folders are on /dev/shm when that has room (tests/conftest.py), and what
  collection imported is frozen out of the garbage collector's sight (``gc.freeze``) and the
  youngest generation is collected every 7,000 new objects, not 700 (conftest.py);
  ``make test-fast`` and ``make verify-json`` write bytecode caches (git-ignored __pycache__)
  even where PYTHONDONTWRITEBYTECODE is set: recompiling every file costs about 3 s a run.
- the end-to-end tier, ``@pytest.mark.e2e`` (a module's ``pytestmark``, or the tests/e2e
  folder): real training, real git, sandbox, sshd, slurm, chromium, torch. ``make test`` runs
  both tiers, every test once.

A test that imports torch or trains goes to the end-to-end tier; a fixture that builds a
seeded store is built once per session and copied per test (tests/report/seed_copies.py); a night
on the fake executor takes the runtime's fingerprint once per session (``runtime_taken_once``,
tests/night/conftest.py: a walk of site-packages, 0.3 s each time); a test waits for what it
asserts (a thread's sample, an event) rather than sleeping a fixed time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "scripts" / "system_packages.txt"
SKIP_ENV = "LOOPER_SKIP_TIERS"
SKIP_MARK = "tier skipped by LOOPER_SKIP_TIERS"  # the summary finds skipped tiers by this text


def packages() -> dict[str, list[str]]:
    """tier -> Debian packages, in the table's order."""
    out: dict[str, list[str]] = {}
    for line in TABLE.read_text().splitlines():
        bits = line.split()
        if bits and not bits[0].startswith("#"):
            out[bits[0]] = bits[1:]
    return out


def skipped() -> list[str]:
    """The tiers the user opted out of (LOOPER_SKIP_TIERS); an unknown name is a usage error."""
    names = [n.strip() for n in os.environ.get(SKIP_ENV, "").split(",") if n.strip()]
    known = packages()
    unknown = [n for n in names if n not in known or n == "base"]
    if unknown:
        raise pytest.UsageError(f"{SKIP_ENV} names {', '.join(unknown)}; tiers that can be skipped: "
                                f"{', '.join(t for t in known if t != 'base')}")
    return names


def apt_line(tier: str) -> str:
    return "apt-get install -y --no-install-recommends " + " ".join(packages()[tier])


def require(tier: str, missing: list[str], why: str = "") -> None:
    """Skip when the user opted out of ``tier``; else fail when anything in ``missing``.

    ``missing`` names what is absent (binaries, paths); ``why`` adds what else went wrong.
    """
    if tier in skipped():
        pytest.skip(f"{SKIP_MARK}: {tier}")
    if missing or why:
        what = f"missing {', '.join(missing)}" if missing else why
        if missing and why:
            what += f"; {why}"
        pytest.fail(f"the {tier} test tier cannot run: {what}. Install its system packages as root with "
                    f"`scripts/setup_system.sh {tier}` (or: {apt_line(tier)}), or opt out by name: "
                    f"{SKIP_ENV}={tier}", pytrace=False)


# -- machine conditions (not tiers: nothing to install) ------------------------------------------

def nvidia_gpus() -> list[str]:
    """The NVIDIA GPUs ``nvidia-smi -L`` lists: an answer independent of looper's NVML probe,
    so tests can pick their branch without asking the code under test."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return []
    try:
        got = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln for ln in got.stdout.splitlines() if ln.startswith("GPU ")] if got.returncode == 0 else []


HAS_GPU = bool(nvidia_gpus())
NEEDS_GPU = pytest.mark.skipif(not HAS_GPU, reason="machine condition: no NVIDIA GPU here (nvidia-smi -L lists "
                                                   "none); the no-GPU variant of this test ran instead")
NEEDS_NO_GPU = pytest.mark.skipif(HAS_GPU, reason="machine condition: this machine has an NVIDIA GPU "
                                                  "(nvidia-smi -L); the GPU variant of this test ran instead")
