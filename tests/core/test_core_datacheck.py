"""The data checks as pure rules (looper.core.data.check): every bad input of issue 38, point 2, is
named with its file (and annotation id or label line), what is wrong and what to do."""

from __future__ import annotations

import pytest

from looper.core.data.check import BoxFact, DataFacts, ImageFact, data_problems, errors

CLASSES = ("duct", "vent")


def page(split: str, where: str = "", digest: str = "", boxes=None, **kw) -> ImageFact:  # noqa: ANN001
    boxes = boxes if boxes is not None else (BoxFact(f"{where or split}.json box 0", "duct", (1, 1, 5, 5)),
                                             BoxFact(f"{where or split}.json box 1", "vent", (6, 6, 9, 9)))
    return ImageFact(where or f"{split}.png", split, kw.pop("width", 100), kw.pop("height", 100),
                     digest=digest or f"h-{where or split}", boxes=boxes, **kw)


def good(*extra: ImageFact, **kw) -> DataFacts:  # noqa: ANN003
    return DataFacts("DATA", CLASSES, (page("train"), page("val"), page("test"), *extra), **kw)


def test_good_data_has_no_problem():
    assert data_problems(good()) == []


@pytest.mark.parametrize("bad, where, what", [
    (page("train", "gone.png", problem="image missing"), "gone.png", "image missing"),
    (page("train", "b.png", boxes=(BoxFact("ann.json annotation id 7", "pipe", (1, 1, 2, 2)),)),
     "ann.json annotation id 7", "class 'pipe' is not one of the data's classes"),
    (page("train", "b.png", boxes=(BoxFact("lab.txt line 3", 30, (1, 1, 2, 2)),)),
     "lab.txt line 3", "class id 30 is outside the data's 2 classes (0..1)"),
    (page("train", "b.png", boxes=(BoxFact("lab.txt line 1", -1, (1, 1, 2, 2)),)), "lab.txt line 1", "class id -1"),
    (page("train", "b.png", boxes=(BoxFact("ann.json annotation id 2", "duct", (5, 5, 5, 9)),)),
     "ann.json annotation id 2", "has zero area"),
    (page("train", "b.png", boxes=(BoxFact("ann.json annotation id 3", "duct", (90, 90, 140, 95)),)),
     "ann.json annotation id 3", "outside the 100 x 100 px image b.png"),
    (page("train", "b.png", boxes=(BoxFact("ann.json annotation id 4", "duct", (-3, 0, 5, 5)),)),
     "ann.json annotation id 4", "outside"),
    (page("train", "b.png", boxes=(BoxFact("lab.txt line 9", 0, (0, 0, 0, 0), "'x' is not 'class cx cy w h'"),)),
     "lab.txt line 9", "is not 'class cx cy w h'"),
    (page("train", "t.png", width=640, height=640, tile=True), "t.png", "tile of 640 x 640 px, train.py's input is 256"),
    (page("test", "copy.png", digest="h-train"), "copy.png", "same page (sha256 h-train) is in the train split"),
    (ImageFact("(orphans of ann.json)", "train", boxes=(BoxFact("ann.json annotation id 5", "duct", (0, 0, 1, 1),
                                                                "image_id 99 is not an image of ann.json"),),
               orphan=True), "ann.json annotation id 5", "image_id 99"),
])
def test_each_bad_input_is_an_error_naming_its_file(bad, where, what):
    got = errors(data_problems(good(bad, input_size=256)))
    assert len(got) == 1 and got[0].where == where and what in got[0].what, got
    assert got[0].fix and str(got[0]).startswith(f"{where}: ")


def test_a_box_a_pixel_past_the_edge_is_tolerated_and_a_tile_of_the_input_size_passes():
    edge = page("train", "e.png", boxes=(BoxFact("a", "duct", (-0.5, 0, 100.8, 10)),))
    tile = page("val", "t.png", width=256, height=256, tile=True)
    assert data_problems(good(edge, tile, input_size=256)) == []
    assert data_problems(good(page("val", "t.png", width=64, height=64, tile=True))) == []  # input size unknown


def test_an_empty_split_is_an_error_and_a_missing_class_warns_outside_training():
    facts = DataFacts("DATA", CLASSES, (page("train"), page("val")))
    (p,) = data_problems(facts)
    assert p.blocking and p.where == "DATA (test split)" and "the test split is empty" in p.what
    only_duct = (BoxFact("x", "duct", (1, 1, 5, 5)),)
    facts = DataFacts("DATA", CLASSES, (page("train"), page("val"), page("test", boxes=only_duct)))
    (p,) = data_problems(facts)
    assert not p.blocking and "no instance of 1 class(es): vent" in p.what and errors([p]) == []
    facts = DataFacts("DATA", CLASSES, (page("train", boxes=only_duct), page("val"), page("test")))
    (p,) = data_problems(facts)
    assert p.blocking and p.where == "DATA (train split)"


@pytest.mark.parametrize(("split", "blocking", "why"), [
    ("train", True, "label training pages holding them, or drop the classes from the export"),
    ("val", False, "the val split tunes each class's confidence for the report: a class it lacks gets no tuned"),
    ("test", False, "the class gate cannot judge a class the test split lacks"),
])
def test_a_class_missing_from_a_split_says_what_that_split_loses(split: str, blocking: bool, why: str):
    only_duct = (BoxFact("x", "duct", (1, 1, 5, 5)),)
    facts = DataFacts("DATA", CLASSES, tuple(page(s, boxes=only_duct if s == split else None)
                                             for s in ("train", "val", "test")))
    (p,) = data_problems(facts)
    assert (p.where, p.blocking) == (f"DATA ({split} split)", blocking) and why in p.fix, p


def test_many_missing_classes_are_cut_short_and_an_id_counts_for_its_class():
    many = tuple(f"c{i}" for i in range(12))
    ids = (BoxFact("l", 0, (1, 1, 2, 2)), BoxFact("l", 1, (1, 1, 2, 2)), BoxFact("l", 40, (1, 1, 2, 2)))
    facts = DataFacts("D", many, (ImageFact("t", "train", 9, 9, boxes=ids, tile=True),
                                  ImageFact("v", "val", 9, 9), ImageFact("s", "test", 9, 9)))
    problems = data_problems(facts)
    (unused,) = [p for p in problems if "declared but never labelled" in p.what]
    assert unused.what.endswith(" ...") and "10 class(es)" in unused.what and not unused.blocking
    assert "c0" not in unused.what and "c1," not in unused.what  # ids 0 and 1 count for their classes
    assert not any(p.where == "D (train split)" for p in problems)  # never labelled: warned once, not refused


def test_a_box_crossing_a_page_edge_is_clipped_and_counted_and_refused_when_strict():
    """Issue 47: exports hold boxes a few px past the page; the usual tools clip them."""
    cross = page("train", "e.png", boxes=(BoxFact("a.json annotation id 1", "duct", (90, 90, 104, 95)),
                                          BoxFact("a.json annotation id 2", "duct", (-6, 3, 8, 9))))
    off = page("train", "o.png", boxes=(BoxFact("a.json annotation id 3", "duct", (101, 10, 120, 20)),))
    (warn,) = data_problems(good(cross, clip_edges=True))
    assert not warn.blocking and warn.what.startswith("2 box(es) crossing a page edge clipped to the page (the first: "
                                                      "a.json annotation id 1)") and "--strict-bounds" in warn.fix
    strict = errors(data_problems(good(cross)))
    assert [p.where for p in strict] == ["a.json annotation id 1", "a.json annotation id 2"]
    (p,) = errors(data_problems(good(off, clip_edges=True)))  # wholly off its page: refused either way
    assert p.where == "a.json annotation id 3" and "outside the 100 x 100 px image o.png" in p.what


def test_a_class_never_labelled_warns_and_one_labelled_outside_training_is_refused():
    three = ("duct", "vent", "grille")
    facts = DataFacts("DATA", three, (page("train"), page("val"), page("test")))
    (p,) = data_problems(facts)
    assert not p.blocking and p.what == "1 class(es) declared but never labelled: grille" and "not judged" in p.fix
    grille = (BoxFact("x", "grille", (1, 1, 5, 5)),)
    facts = DataFacts("DATA", three, (page("train"), page("val"), page("test", "t2.png", boxes=grille), page("test")))
    got = errors(data_problems(facts))
    assert [(p.where, p.what) for p in got] == [("DATA (train split)", "no instance of 1 class(es): grille")]


def test_pages_listed_in_the_manifest_count_for_their_split_and_for_duplicates():
    facts = DataFacts("D", CLASSES, (page("val"), page("test")), page_digests={"train": ("h-x", "h-test")})
    (p,) = data_problems(facts)
    assert p.where == "a train page listed in the manifest" and "is in the test split as test.png" in p.what
    same_split = DataFacts("D", CLASSES, (page("train"), page("val"), page("test"), page("test", "t2.png", "h-test")))
    assert data_problems(same_split) == []


def test_a_manifest_that_does_not_verify_and_no_classes_are_named():
    facts = DataFacts("D", CLASSES, (page("train"), page("val"), page("test")),
                      manifest_problems=("tiles/train/images/a.png: content changed",))
    (p,) = data_problems(facts)
    assert p.where == "D/manifest.json" and "content changed" in p.what and "import" in p.fix
    assert [str(p) for p in data_problems(DataFacts("D", ()))] == [
        "D: lists no classes; fix the export and import it again (looper data import SOURCE --out DIR)"]


@pytest.mark.parametrize("support, named", [
    ({"duct": 1, "vent": 12}, "1 class(es) with fewer than 10 test instances: duct (1)"),
    ({"duct": 9, "vent": 3}, "2 class(es) with fewer than 10 test instances: duct (9), vent (3)"),
    ({"duct": 10, "vent": 40}, None),
    ({"duct": 0, "vent": 10}, None),  # no test instance at all: the split warning's, not this one's
])
def test_classes_with_few_test_instances_are_named_with_their_capped_weight(support, named):
    """Issue 47: a class of few test boxes keeps its gate and row; its weight in weighted_f1 is capped
    (looper.core.scoring.metrics.MIN_SUPPORT) and `looper data check` names it."""
    from looper.core.data.check import few_in_test

    boxes = tuple(BoxFact(f"t.json box {c}{i}", c, (1, 1, 5, 5)) for c, n in support.items() for i in range(n))
    tile = ImageFact("tile.png", "test", 9, 9, boxes=boxes[:1], tile=True)  # tiles never count as test truth
    got = few_in_test(DataFacts("DATA", CLASSES, (page("train"), page("val"), page("test", boxes=boxes), tile)))
    if named is None:
        assert got == []
    else:
        (p,) = got
        assert not p.blocking and p.where == "DATA (test split)" and p.what == named
        assert "keeps its class gate and its row" in p.fix and "capped at that of 10 instances" in p.fix
