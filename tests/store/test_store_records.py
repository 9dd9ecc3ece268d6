"""The typed store: frozen records out, keyword-only writes in, read-only queries beside them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from looper.core.verdicts.verdict import Outcome, Verdict
from looper.store import (
    ClassMetrics,
    EventRecord,
    ExperimentRecord,
    ExperimentRow,
    RunRecord,
    Store,
    StoreError,
    TagRecord,
)
from looper.store import models as m
from looper.store import queries as q

CLASSES = {
    "supply_diffuser": {"tp": 8, "fp": 2, "fn": 1, "support": 9, "precision": 0.8, "recall": 0.889, "f1": 0.842,
                        "count_error": 0.111},
}


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path)
    yield s
    s.close()


def start(store: Store, tag: str = "t", kind: str = "candidate", **kw: Any) -> int:
    return store.start_experiment(tag=tag, kind=kind, config={"gate": {"score": "weighted_f1"}}, **kw)


@pytest.mark.parametrize(("record", "table"), [
    (ExperimentRecord, m.experiments), (RunRecord, m.runs), (EventRecord, m.events), (TagRecord, m.tags),
])
def test_records_mirror_their_table(record: type, table: Any) -> None:
    """Every column is a field (JSON ones without ``_json``), and nothing else: a new column
    that the records forget, or a field no column backs, fails here."""
    names = {f.name for f in dataclasses.fields(record)}
    assert names == {c.name.removesuffix("_json") for c in table.columns}


def test_class_metrics_mirror_their_table() -> None:
    names = {f.name for f in dataclasses.fields(ClassMetrics)}
    assert names == {c.name for c in m.class_metrics.columns} - {"experiment_id"}


def test_records_are_frozen_snapshots(store: Store) -> None:
    i = start(store, description="lr 0.02")
    before = store.experiment(i)
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.description = "rewritten"  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        before.extra = 1  # type: ignore[attr-defined]  # slotted: no new attributes either
    store.record_outcome(i, outcome=Outcome.DISCARD, score=0.4, blocking=["lower"])
    after = store.experiment(i)
    assert (before.status, before.score, before.blocking) == (Outcome.RUNNING, None, ())
    assert (after.status, after.score, after.blocking) == (Outcome.DISCARD, 0.4, ("lower",))
    assert after.status == "discard" and after.status.is_terminal and not after.is_open
    assert after.gate == {"score": "weighted_f1"} and after.classes == {}


def test_records_turn_into_plain_dicts(store: Store) -> None:
    i = start(store)
    store.record_outcome(i, outcome="keep", score=0.5, metrics={"weighted_f1": 0.5, "classes": CLASSES},
                         verdict=Verdict.passed({"score": 0.5}))
    d = store.experiment(i).to_dict()
    assert d["id"] == i and d["score"] == 0.5 and d["metrics"] == {"weighted_f1": 0.5, "classes": CLASSES}
    assert d["status"] == "keep" and type(d["status"]) is str and d["blocking"] == []
    assert {n: c.figures() for n, c in store.class_scores(i).items()} == {"supply_diffuser": CLASSES["supply_diffuser"]}


def test_record_outcome_decides_once_what_an_outcome_may_carry(store: Store) -> None:
    """A measured outcome keeps its score and per-class rows (taken from ``metrics`` by
    default); an unmeasured one stores neither, whatever the caller passed."""
    kept = start(store)
    store.record_outcome(kept, outcome=Outcome.KEEP, score=0.61, metrics={"weighted_f1": 0.61, "classes": CLASSES},
                         verdict=Verdict.passed(), train_seconds=12.0)
    e = store.experiment(kept)
    assert (e.score, e.train_seconds, e.verdict["status"]) == (0.61, 12.0, "pass")  # type: ignore[index]
    assert store.class_scores(kept) == {"supply_diffuser": ClassMetrics(class_name="supply_diffuser",
                                                                        **CLASSES["supply_diffuser"])}
    crashed = start(store)
    store.record_outcome(crashed, outcome=Outcome.CRASH, score=0.2, metrics={"classes": CLASSES},
                         verdict=Verdict.failed("train.py crashed"), failure_signature="OOM")
    c = store.experiment(crashed)
    assert (c.status, c.score, c.blocking, c.failure_signature) == ("crash", None, ("train.py crashed",), "OOM")
    assert c.metrics == {"classes": CLASSES}  # what was measured stays readable
    assert store.class_scores(crashed) == {}


def test_record_outcome_refusals(store: Store) -> None:
    i = start(store)
    with pytest.raises(ValueError, match="keep outcome must carry"):
        store.record_outcome(i, outcome="keep")
    with pytest.raises(ValueError, match="not running"):
        store.record_outcome(i, outcome="running")
    with pytest.raises(ValueError, match="finite"):
        store.record_outcome(i, outcome="discard", score=float("inf"))
    with pytest.raises(TypeError):
        store.record_outcome(i, "discard", 0.3)  # type: ignore[misc]  # keyword-only
    assert store.experiment(i).is_open
    store.record_outcome(i, outcome="discard", score=0.3, verdict={"status": "fail", "blocking": ["lower"],
                                                                    "metrics": {}, "confidence": 1.0})
    assert store.experiment(i).blocking == ("lower",)  # the verdict's reasons by default
    with pytest.raises(StoreError, match="already finished as discard"):
        store.record_outcome(i, outcome="keep", score=0.9)


def test_start_experiment_is_keyword_only(store: Store) -> None:
    with pytest.raises(TypeError):
        store.start_experiment("t", "candidate", {})  # type: ignore[misc]
    i = store.start_experiment(tag="t", kind="baseline", config={}, seed=3, worker="w1")
    e = store.experiment(i)
    assert (e.tag, e.kind, e.seed, e.worker, e.parent, e.status) == ("t", "baseline", 3, "w1", None, "running")


def test_lean_rows_say_what_the_full_records_say(store: Store) -> None:
    a = start(store, description="token=abc123 in the description")
    store.record_outcome(a, outcome="discard", score=0.3, verdict={"status": "fail", "blocking": ["x"],
                                                                   "metrics": {"diff": -0.05}, "confidence": 1.0},
                         blocking=["api_key=hunter2 leaked"], gpu={"peak_memory_mb": 900.0},
                         train={"peak_memory_mb": 512.0}, agent_seconds=1.5)
    b = start(store, tag="other")
    rows = q.lean_experiments(store)
    assert [r.id for r in rows] == [a, b] and all(isinstance(r, ExperimentRow) for r in rows)
    full = store.experiment(a)
    for f in dataclasses.fields(ExperimentRow):
        if hasattr(full, f.name):
            assert getattr(rows[0], f.name) == getattr(full, f.name), f.name
    assert (rows[0].verdict_diff, rows[0].train_peak_memory_mb, rows[0].gpu) == (-0.05, 512.0, {"peak_memory_mb": 900.0})
    assert rows[0].seconds("agent") == 1.5 and rows[0].seconds("train") is None
    assert rows[0].why == "api_key=hunter2 leaked"
    lean = q.lean_experiments(store, tag="t", figures=False, clean=lambda s: re.sub(r"=\S+", "=***", s))
    assert [r.id for r in lean] == [a]
    assert lean[0].description == "token=*** in the description" and lean[0].blocking == ("api_key=*** leaked",)
    assert (lean[0].gpu, lean[0].verdict_diff) == (None, None)
    assert [r.id for r in q.lean_experiments(store, status=[Outcome.RUNNING])] == [b]


def test_running_best_and_the_tag_baseline(store: Store) -> None:
    assert q.running_best(store, "t") == [] and q.tag_baseline(store, "t") is None
    base = start(store, kind="baseline")
    store.record_outcome(base, outcome="keep", score=0.4)
    lost = start(store)
    store.record_outcome(lost, outcome="discard", score=0.9)
    canary = start(store, kind="canary")
    store.record_outcome(canary, outcome="keep", score=0.99)
    k = start(store)
    store.record_outcome(k, outcome="keep", score=0.45)
    elsewhere = start(store, tag="other")
    store.record_outcome(elsewhere, outcome="keep", score=0.7)
    assert q.running_best(store, "t") == [(base, 0.4), (k, 0.45)]
    baseline = q.tag_baseline(store, "t")
    assert baseline is not None and baseline.id == base


def test_kept_texts_and_latest_start(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [start(store, rationale=f"why {n}", diff=f"-a\n+{n}\n") for n in range(3)]
    monkeypatch.setattr(q, "_KEPT_CHUNK", 2)  # two chunks for three ids
    assert q.kept_texts(store, ids) == {i: (f"why {n}", f"-a\n+{n}\n") for n, i in enumerate(ids)}
    assert q.kept_texts(store, []) == {}
    assert q.latest_start(store) is None
    store.add_event("t", "start", "one")
    second = store.add_event("t", "start", "two")
    store.add_event("t", "stop", "done")
    latest = q.latest_start(store)
    assert latest is not None and (latest.id, latest.message) == (second, "two")


#: What only the store may touch: its table models, its engine, its connections.
_PRIVATE = re.compile(r"looper\.store\.models|from looper\.store import[^\n]*\bmodels\b|\.engine\b|\._ro\(")


def test_nothing_outside_the_store_touches_its_models_or_engine() -> None:
    root = Path(__file__).resolve().parents[2] / "looper"
    offenders = [f"{p.relative_to(root.parent)}: {mt.group(0)}"
                 for p in sorted(root.rglob("*.py")) if "store" not in p.relative_to(root).parts[:1]
                 for mt in _PRIVATE.finditer(p.read_text())]
    assert offenders == []
    # and the pattern does see a use (this check is not vacuous)
    assert _PRIVATE.search("with store.engine.connect() as conn:")
    assert _PRIVATE.search("from looper.store import Store, models as m")


def test_train_peak_memory_comes_from_the_main_run_where_train_json_is_stored_once(store: Store) -> None:
    """The daemon stores train.json once, with its run (issue 23: a 100 MB train.json was stored twice);
    the lean rows still show train.py's peak memory, from the experiment's first main run."""
    a = start(store)
    store.add_run(a, role="rerun", seed=1, train={"peak_memory_mb": 999.0})
    store.add_run(a, role="main", seed=0, train={"peak_memory_mb": 256.0})
    store.add_run(a, role="main", seed=2, train={"peak_memory_mb": 128.0})
    store.record_outcome(a, outcome="discard", score=0.3)
    b = start(store)  # no run at all
    store.record_outcome(b, outcome="crash")
    rows = {r.id: r for r in q.lean_experiments(store)}
    assert store.experiment(a).train is None
    assert rows[a].train_peak_memory_mb == 256.0 and rows[b].train_peak_memory_mb is None
