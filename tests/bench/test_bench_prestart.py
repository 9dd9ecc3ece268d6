"""bench/bench_prestart.py runs to its end on this CPU (its figures are in bench/RESULTS.md): cold and prestarted
runs train the same tensors, cold and boxed-ahead evaluations write the same METRICS.json and MATCHES.json. No
timing is asserted here; a bench that no longer runs is what this catches (its first evaluation once waited for
a box no one had asked for)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_the_prestart_bench_runs_and_both_kinds_of_box_give_the_same_results() -> None:
    p = subprocess.run([sys.executable, str(REPO / "bench" / "bench_prestart.py"), "--pairs", "1", "--steps", "1"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = p.stdout.splitlines()
    runs = [ln for ln in lines if re.match(r"pair 0 +(cold|prestarted): slot to first step [\d.]+ s, last line", ln)]
    assert len(runs) == 2 and "box ready in" in runs[1], lines
    assert len({ln.split("tensors ")[1].split(";")[0] for ln in runs}) == 1  # the same weights, bit for bit
    assert any(ln.startswith("slot to first step") and ln.endswith("the same tensors every run: True") for ln in lines)
    assert any(ln.startswith("train.py's last line to the run's end") for ln in lines)
    assert any(ln.startswith("evaluation, call to return") and ln.endswith("every time: True") for ln in lines)
