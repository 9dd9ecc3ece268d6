"""looper.core.scoring.ship: which run of an experiment ``looper export`` ships."""

from __future__ import annotations

import pytest

from looper.core.scoring.ship import RunView, pick_run


def run(i: int, seed: int | None, score: float | None, *, role: str = "main", hashed: bool = True) -> RunView:
    return RunView(i, role, seed, score, f"runs/t/00001/{role}-s{seed}/out/weights.pt" if hashed else None,
                   "ab" * 32 if hashed else None)


@pytest.mark.parametrize(("runs", "seed", "want", "reason_has"), [
    ([run(1, 0, 0.5), run(2, 1, 0.7), run(3, 2, 0.6)], None, 2, "seed 1 scored 0.7000, the highest of 3"),
    ([run(1, 0, 0.7), run(2, 1, 0.7)], None, 1, "highest of 2"),  # a tie: the first recorded
    ([run(1, 0, 0.9, hashed=False), run(2, 1, 0.4)], None, 2, "highest of 1"),  # unhashed never ships
    ([run(1, 0, 0.9, role="canary"), run(2, 1, 0.4)], None, 2, "seed 1"),  # a canary never ships
    ([run(1, 0, None), run(2, 1, 0.4)], None, 2, "seed 1"),  # an unscored run never ships
    ([run(1, 0, 0.5), run(2, 1, 0.7)], 0, 1, "seed 0 scored 0.5000"),
    ([run(1, 0, 0.5), run(2, 1, 0.7)], 5, None, "no run of seed 5 with weights the harness recorded (seeds that have: 0, 1)"),
    ([run(1, 0, 0.5, hashed=False)], 0, None, "(seeds that have: none)"),
    ([run(1, 0, 0.5, hashed=False), run(2, 1, 0.2, hashed=False)], None, None, "2 scored run(s), none with weights"),
    ([run(1, 0, None), run(2, 0, 0.3, role="canary")], None, None, "no scored run"),
    ([], None, None, "no scored run"),
])
def test_pick_run(runs: list[RunView], seed: int | None, want: int | None, reason_has: str) -> None:
    pick = pick_run(runs, seed)
    assert (pick.run.run_id if pick.run else None) == want
    assert reason_has in pick.reason
