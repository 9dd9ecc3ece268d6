"""looper.core.verdicts.trackname: tracking names MLflow accepts (issue 48), a table."""

from __future__ import annotations

import pytest

from looper.core.verdicts.trackname import key, keys


@pytest.mark.parametrize("name, expected", [
    ("weighted_f1", "weighted_f1"),
    ("f1/valve (2-way)", "f1/valve _2-way_"),
    ("recall/Ventil ä", "recall/Ventil _"),
    ("a.b-c d/e", "a.b-c d/e"),
    ("x" * 300, "x" * 250),
    ("()", None),  # nothing usable left
    ("", None),
    ("/abs", None),
    ("a//b", None),
    ("f1/../x", None),
])
def test_key(name: str, expected: str | None) -> None:
    assert key(name) == expected


def test_keys_cleans_and_skips_collisions_and_empty_names() -> None:
    got, skipped = keys({"f1/valve (2-way)": 0.5, "f1/valve _2-way_": 0.6, "()": 1.0, "ok": 2.0})
    assert got == {"f1/valve _2-way_": 0.5, "ok": 2.0}
    assert skipped == ["()", "f1/valve _2-way_"]
