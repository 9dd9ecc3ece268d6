"""The seeded page split of an export without splits (looper.core.data.split): pure, table tests."""

from __future__ import annotations

import pytest

from looper.core.data.split import draw_split, missing_in_test, split_counts


def pages(n: int, rare: dict[str, int] | None = None) -> dict[str, frozenset[str]]:
    """``n`` pages holding class "a"; ``rare``: class -> how many of the first pages also hold it."""
    out = {f"p{i:02d}": {"a"} for i in range(n)}
    for c, k in (rare or {}).items():
        for i in range(k):
            out[f"p{i:02d}"].add(c)
    return {k: frozenset(v) for k, v in out.items()}


def test_the_same_pages_and_seed_give_the_same_split_whatever_their_order():
    p = pages(20, {"b": 4})
    a = draw_split(p, seed=3)
    b = draw_split(dict(reversed(list(p.items()))), seed=3)
    assert a == b and split_counts(a) == {"train": 14, "val": 2, "test": 4}
    assert draw_split(p, seed=4) != a


@pytest.mark.parametrize("n, counts", [
    (1, {"train": 1, "val": 0, "test": 0}),
    (2, {"train": 2, "val": 0, "test": 0}),
    (3, {"train": 1, "val": 1, "test": 1}),
    (10, {"train": 7, "val": 1, "test": 2}),
])
def test_small_exports_get_one_val_and_one_test_page_from_three_pages(n, counts):
    assert split_counts(draw_split(pages(n), seed=0)) == counts


@pytest.mark.parametrize("seed", range(8))
def test_every_class_on_enough_pages_has_a_test_page_and_a_rarer_one_stays_in_training(seed):
    p = pages(30, {"b": 3, "c": 2, "d": 5})
    split = draw_split(p, seed)
    assert missing_in_test(p, split) == []
    assert any("c" in p[k] and v == "train" for k, v in split.items())  # on 2 pages: not promised to test


def test_the_exports_own_splits_are_kept_and_only_missing_ones_drawn_from_its_train_pages():
    p = pages(12, {"b": 6})
    fixed = {k: "val" for k in list(p)[:2]}
    split = draw_split(p, 1, fixed=fixed)
    assert all(split[k] == "val" for k in fixed)
    assert split_counts(split)["test"] == 2 and split_counts(split)["val"] == 2
    given = {k: ("test" if i < 3 else "val" if i < 5 else "train") for i, k in enumerate(p)}
    assert draw_split(p, 1, fixed=given) == given
    no_test = draw_split(p, 1, fixed={k: "train" for k in p}, declared=("train", "test"))
    assert split_counts(no_test)["test"] == 0 and split_counts(no_test)["val"] == 1  # a named split is never drawn


def test_missing_in_test_names_classes_on_enough_pages_without_a_test_page():
    p = pages(6, {"b": 3, "c": 1})
    split = {k: "train" for k in p}
    assert missing_in_test(p, split) == ["a", "b"]


def test_shares_larger_than_the_pages_take_what_there_is():
    split = draw_split(pages(4), seed=0, test_share=1.0)
    assert split_counts(split) == {"train": 1, "val": 0, "test": 3}  # class "a" keeps a training page


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("rare", [{"r": 1}, {"r": 2}, {"r": 1, "q": 1, "b": 3}])
def test_a_rare_class_keeps_a_training_page_whatever_the_seed(seed, rare):
    """Issue 47: a class on one page fell into val or test for some seeds, and the import refused it (no
    training instance). Every class keeps a training page, and the test promise still holds."""
    p = pages(10, rare)
    split = draw_split(p, seed)
    for c in {c for cs in p.values() for c in cs}:
        assert any(c in p[k] and v == "train" for k, v in split.items()), (c, split)
    assert missing_in_test(p, split) == []
    assert split_counts(split)["test"] >= 1 and split_counts(split)["val"] >= 1


def test_a_rare_class_on_a_page_of_its_own_stays_in_training_with_the_exports_test_split_drawn():
    p = {f"p{i}": frozenset({"a"}) for i in range(6)} | {"only": frozenset({"a", "r"})}
    for seed in range(20):
        split = draw_split(p, seed, fixed={k: "train" for k in p}, declared=("train",))
        assert split["only"] == "train"
