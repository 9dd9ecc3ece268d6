"""Session fixtures for the experiment files: a tiny data set and one tiny trained model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY_TRAIN_BUDGET = 30  # s: the one short real training run shared by the session


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
    """ONE real train.py run on the tiny data (short budget); returns its LOOPER_OUT folder."""
    out = tmp_path_factory.mktemp("tiny_run") / "out"
    env = dict(os.environ, LOOPER_BUDGET_SECONDS=str(TINY_TRAIN_BUDGET), LOOPER_DATA=str(tiny_data),
               LOOPER_OUT=str(out), LOOPER_SEED="0", LOOPER_DEVICE="cpu",
               YOLO_CONFIG_DIR=str(tmp_path_factory.mktemp("ultralytics_cfg")))
    proc = subprocess.run([sys.executable, str(REPO / "train.py")], cwd=out.parent, env=env,
                          capture_output=True, text=True, timeout=TINY_TRAIN_BUDGET + 60)
    if proc.returncode != 0 or not (out / "weights.pt").is_file():
        raise RuntimeError(f"tiny training failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return out


# -- tiers the user opted out of (tests/tiers.py) -----------------------------------------------

def pytest_configure(config: pytest.Config) -> None:
    import tiers

    tiers.skipped()  # an unknown tier name in LOOPER_SKIP_TIERS stops the run before any test


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
