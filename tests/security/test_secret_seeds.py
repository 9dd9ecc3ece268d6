"""Confirmation seeds cannot be told from search seeds (issue 48, finding 7): train.py is given each seed's
value under the workspace's secret (looper.core.run.seedvalue), never its number. Through a real night on the
fixture workspace (real git, a real Store, the local executor and its sandbox), with [loop] secret_seeds on
(the default; the fixture's other tests turn it off to read seeds as numbers)."""

from __future__ import annotations

import json
import stat

import pytest
from harness import make_ws, pages  # noqa: F401  (pytest fixtures)
from night.test_experiment_inprocess import night  # noqa: F401
from night.test_experiment_inprocess import ws as ws  # noqa: F401,PLC0414

from looper.core.run.seedvalue import SEED_BITS, seed_value
from looper.store.queries import confirmations

pytestmark = [pytest.mark.e2e]


def _runs(ws) -> list[tuple[int, str, int]]:
    """(experiment, role, seed number) and the LOOPER_SEED the fixture train.py wrote, for every run."""
    with ws.db() as con:
        rows = con.execute("SELECT experiment_id, role, seed, train_json FROM runs ORDER BY id").fetchall()
    return [(e, r, s, json.loads(t)["seed"]) for e, r, s, t in rows if t]


def test_each_run_sees_its_seed_s_secret_value_and_a_confirmation_looks_like_a_search(ws):
    loop = night(ws, **{"loop.secret_seeds": True, "loop.baseline_seeds": 2, "loop.noise_reruns": 1,
                        "loop.confirm_seeds": 2, "loop.max_experiments": 1})
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})  # a clear win: kept, then confirmed on fresh seeds
    assert loop.run() == 0
    key_file = ws.root / ".looper" / "run_seed_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = bytes.fromhex(key_file.read_text().strip())
    runs = _runs(ws)
    (c,) = confirmations(loop.ctx.store, "t")
    assert c.status == "confirmed" and len(c.seeds) == 2
    numbers = {s for _e, _r, s, _v in runs}
    assert set(c.seeds) - {0, 1} and max(c.seeds) >= 2  # the numbers: the confirmation's above the search's
    for _exp, _role, number, value in runs:
        assert value == seed_value(key, "t", number)  # what train.py saw: the value, never the number
        assert 0 <= value < 1 << SEED_BITS and value not in numbers
    by_number: dict[int, set[int]] = {}
    for _exp, _role, number, value in runs:
        by_number.setdefault(number, set()).add(value)
    assert all(len(v) == 1 for v in by_number.values())  # a seed's value is the same in every run of it (pairing)
    assert len({next(iter(v)) for v in by_number.values()}) == len(by_number)  # and no two seeds share one
    # Nothing in a value says which kind of run it is: each is 31 bits of an HMAC under a key no box holds, a
    # confirmation's as a search's (they are not ordered after them, as the numbers are).
