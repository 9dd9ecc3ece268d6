"""``looper.store.queries.json_fields``: the one query the report reads the gate's figures and
the sandbox setting through, checked against the decoded records."""

from __future__ import annotations

from pathlib import Path

import pytest
import report_seed_noise as seed
from seed_copies import SeedCopies

from looper.store.queries import json_fields


def test_json_fields_match_the_records(tmp_path: Path, seed_copy: SeedCopies) -> None:
    s = seed_copy(seed.build, tmp_path / "ws")
    try:
        got = json_fields(s.store, {"band": ("verdict", "$.metrics.noise_band"),
                                    "test": ("verdict", "$.metrics.score_test"),
                                    "cand": ("verdict", "$.metrics.candidate_scores"),
                                    "source": ("verdict", "$.metrics.baseline"),
                                    "sandbox": ("config", "$.executor.sandbox"),
                                    "net": ("config", "$.executor.sandbox_network"),
                                    "nothing": ("metrics", "$.no_such_key")},
                          tag=seed.TAG, since=s.since)
        records = s.store.find_experiments(tag=seed.TAG, since=s.since)
        assert sorted(got) == [r.id for r in records]
        for r in records:
            m = (r.verdict or {}).get("metrics") or {}
            assert got[r.id] == {"band": m.get("noise_band"), "test": m.get("score_test"),
                                 "cand": m.get("candidate_scores"), "source": m.get("baseline"),
                                 "sandbox": r.config["executor"]["sandbox"], "nothing": None, "net": False}
            assert got[r.id]["net"] is False  # a boolean, not SQLite's 0
            assert got[r.id]["band"] is None or got[r.id]["band"] == m["noise_band"]  # exact, not 15 digits
        assert any(v["band"] is not None and isinstance(v["test"], dict) for v in got.values())
        assert json_fields(s.store, {}, tag="no-such-tag") == {}
        with pytest.raises(ValueError, match="JSON path"):
            json_fields(s.store, {"x": ("source", "$.a")})
        with pytest.raises(ValueError, match="JSON path"):
            json_fields(s.store, {"x": ("verdict", "metrics.a")})
    finally:
        s.store.close()
