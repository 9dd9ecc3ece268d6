"""The runtime pin compared (looper/core/tag/runtime.py): every added, removed or changed entry named."""

from __future__ import annotations

import pytest

from looper.core.tag import runtime

PIN = {"train.py": "a", "runtime:interpreter": "sha256:1", "runtime:/v/site-packages/torch": "tree:2",
       "runtime:looper/core/scoring/metrics.py": "sha256:3"}

CASES = [
    ("same", {}, []),
    ("pth planted", {"runtime:/v/site-packages/zz.pth": "sha256:9"},
     ["runtime file /v/site-packages/zz.pth was added since X (not in the tag's pin)"]),
    ("torch touched", {"runtime:/v/site-packages/torch": "tree:5"},
     ["runtime file /v/site-packages/torch changed since X (pinned tree:2, now tree:5)"]),
    ("metrics removed", {"runtime:looper/core/scoring/metrics.py": None},
     ["runtime file looper/core/scoring/metrics.py was removed since X"]),
    ("a fixed file is not the runtime's business", {"train.py": "b"}, []),
]


@pytest.mark.parametrize(("name", "delta", "want"), CASES, ids=[c[0] for c in CASES])
def test_each_change_is_named(name: str, delta: dict, want: list[str]) -> None:
    now = {**PIN, **delta}
    now = {k: v for k, v in now.items() if v is not None}
    assert runtime.changes(PIN, now, "since X") == want


def test_a_tag_pinned_before_the_runtime_was_checks_nothing() -> None:
    assert runtime.changes({"train.py": "a"}, {"runtime:/x.pth": "sha256:1"}, "since X") == []


def test_many_changes_are_cut_and_counted() -> None:
    now = {**PIN, **{f"runtime:/v/site-packages/m{i}.py": "sha256:0" for i in range(11)}}
    got = runtime.changes(PIN, now, "since X")
    assert len(got) == runtime.MAX_NAMED + 1 and got[-1] == "... and 3 more runtime changes"
