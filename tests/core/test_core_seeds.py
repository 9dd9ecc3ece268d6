"""looper.core.fault.seeds: a candidate that ignores LOOPER_SEED (bit-identical weights on two seeds) is
caught; with one seed the check has not run and says so (table tests)."""

from __future__ import annotations

import pytest

from looper.core.fault.seeds import SIGNATURE, check

A, B, C = "a" * 64, "b" * 64, "c" * 64

ROWS = [
    # (name, runs, status, words in the reason, seeds)
    ("no run", [], "not_run", "weights of 0 seeds;", ()),
    ("one seed", [(0, A)], "not_run", "weights of 1 seed (0); a train.py that ignores LOOPER_SEED is caught only "
                                      "when a second seed runs", (0,)),
    ("one seed hashed, one without weights", [(0, A), (1, None)], "not_run",
     "weights of 1 seed (0); no weights to hash for seed(s) 1", (0,)),
    ("two without weights", [(0, None), (1, "")], "not_run", "0 seeds; no weights to hash for seed(s) 0, 1", ()),
    ("one seed run twice", [(0, A), (0, A)], "not_run", "1 seed (0)", (0,)),
    ("two seeds, different weights", [(0, A), (1, B)], "pass", "seeds 0, 1 gave different weights", (0, 1)),
    ("three seeds, different weights", [(2, C), (0, A), (1, B)], "pass", "seeds 0, 1, 2 gave different", (0, 1, 2)),
    ("two seeds, identical weights", [(0, A), (1, A)], "fail",
     f"ignores LOOPER_SEED: seeds 0 and 1 gave identical weights sha256 {A[:16]}", (0, 1)),
    ("the pair is named in seed order", [(5, B), (3, A), (4, B)], "fail", "seeds 4 and 5 gave identical", (3, 4, 5)),
    ("a rerun of one seed keeps its first weights", [(0, A), (0, B), (1, A)], "fail", "seeds 0 and 1", (0, 1)),
    ("missing weights do not hide a match", [(0, A), (1, None), (2, A)], "fail", "seeds 0 and 2", (0, 2)),
]


@pytest.mark.parametrize(("name", "runs", "status", "words", "seeds"), ROWS, ids=[r[0] for r in ROWS])
def test_seed_check_table(name: str, runs: list, status: str, words: str, seeds: tuple) -> None:
    got = check(runs)
    assert got.status == status
    assert words in got.reason, got.reason
    assert got.seeds == seeds
    assert got.ignores_seed is (status == "fail")
    assert got.as_metrics() == {"status": status, "reason": got.reason, "seeds": list(seeds)}


def test_the_signature_names_the_seed() -> None:
    assert "LOOPER_SEED" in SIGNATURE
