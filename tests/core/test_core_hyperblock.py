from __future__ import annotations

import pytest

from looper.core.propose.hyperblock import HyperblockError, knob_changes, read_knobs, rewrite_knobs


def test_read_knobs_reads_values_from_the_file(train_py: str) -> None:
    knobs = read_knobs(train_py)
    assert knobs["LR0"] == 0.01 and knobs["IMGSZ"] == 640 and knobs["COS_LR"] is False
    assert knobs["MODEL"] == "yolov8n.yaml"
    assert list(knobs)[:3] == ["MODEL", "WIDTH", "IMGSZ"]


def test_rewrite_changes_only_the_value_tokens(train_py: str) -> None:
    out = rewrite_knobs(train_py, {"LR0": 0.006, "IMGSZ": 800, "COS_LR": True, "OPTIMIZER": "AdamW"})
    before, after = train_py.splitlines(keepends=True), out.splitlines(keepends=True)
    assert len(before) == len(after)
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert len(changed) == 4
    for b, a in changed:
        # the comment (and the alignment before it) is byte-identical
        assert b[b.index("#"):] == a[a.index("#"):]
    assert 'LR0 = 0.006               # initial learning rate (1/step) — µ-free comment\n' in out
    assert 'OPTIMIZER = "AdamW"' in out  # keeps the double quotes
    assert read_knobs(out)["COS_LR"] is True


def test_rewrite_with_no_changes_is_identity(train_py: str) -> None:
    assert rewrite_knobs(train_py, {}) == train_py


def test_int_for_float_knob_is_written_as_float(train_py: str) -> None:
    out = rewrite_knobs(train_py, {"MOSAIC": 0})
    assert "MOSAIC = 0.0 " in out and read_knobs(out)["MOSAIC"] == 0.0


def test_missing_knob_is_named(train_py: str) -> None:
    with pytest.raises(HyperblockError, match="no knob DROPOUT"):
        rewrite_knobs(train_py, {"DROPOUT": 0.1})


def test_wrong_type_is_refused(train_py: str) -> None:
    with pytest.raises(HyperblockError, match="COS_LR"):
        rewrite_knobs(train_py, {"COS_LR": 1})
    with pytest.raises(HyperblockError, match="IMGSZ"):
        rewrite_knobs(train_py, {"IMGSZ": "big"})


def test_missing_block_is_a_clear_error() -> None:
    with pytest.raises(HyperblockError, match="no hyperparameter block"):
        read_knobs("import os\nlr = 0.1\nX = os.environ['A']\n")


def test_second_binding_is_refused(train_py: str) -> None:
    src = train_py + "\nLR0 = LR0 * 2\n"
    with pytest.raises(HyperblockError, match="LR0 at lines"):
        rewrite_knobs(src, {"LR0": 0.02})


def test_syntax_error_is_reported() -> None:
    with pytest.raises(HyperblockError, match="does not parse"):
        read_knobs("LR0 = (\n")


def test_crlf_and_negative_values_survive() -> None:
    src = "A = -1.5  # neg\r\nB = 'x'  # s\r\nprint(A)\r\n"
    out = rewrite_knobs(src, {"A": 2.5})
    assert out == "A = 2.5  # neg\r\nB = 'x'  # s\r\nprint(A)\r\n"


def test_knob_changes(train_py: str) -> None:
    out = rewrite_knobs(train_py, {"LR0": 0.02})
    assert knob_changes(train_py, out) == {"LR0": (0.01, 0.02)}


def test_rewrite_property_random_values(train_py: str) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None)
    @given(lr=st.floats(min_value=1e-9, max_value=1e3, allow_nan=False), size=st.integers(1, 10_000),
           name=st.text(alphabet="abcXYZ_-.0189 '\"", min_size=1, max_size=12))
    def check(lr: float, size: int, name: str) -> None:
        out = rewrite_knobs(train_py, {"LR0": lr, "IMGSZ": size, "MODEL": name})
        knobs = read_knobs(out)
        assert knobs["LR0"] == lr and knobs["IMGSZ"] == size and knobs["MODEL"] == name
        changed = {i for i, (a, b) in enumerate(zip(train_py.splitlines(), out.splitlines(), strict=True)) if a != b}
        lines = train_py.splitlines()
        assert all(lines[i].split(" =")[0] in {"LR0", "IMGSZ", "MODEL"} for i in changed)

    check()
