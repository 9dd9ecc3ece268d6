"""The Store API: one transaction per change, frozen records back, secrets refused."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from looper.config import Config
from looper.core.verdicts.verdict import Outcome, Verdict
from looper.store import EventRecord, ExperimentNotFound, Store, StoreError, TagRecord


def classes(**over: Any) -> dict[str, dict[str, Any]]:
    base = {
        "supply_diffuser": {"tp": 8, "fp": 2, "fn": 1, "support": 9, "precision": 0.8, "recall": 0.889,
                            "f1": 0.842, "count_error": 0.111, "weight": 0.5},
        "damper": {"tp": 0, "fp": 1, "fn": 0, "support": 0, "precision": 0.0, "recall": None, "f1": None,
                   "count_error": 1.0, "weight": 0.0},
    }
    base["damper"].update(over)
    return base


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path)
    yield s
    s.close()


def new(store: Store, tag: str = "t", kind: str = "candidate", **kw: Any) -> int:
    return store.start_experiment(tag=tag, kind=kind, parent="abc123", seed=0, config={"loop": {"budget_seconds": 5}},
                                  **kw)


def test_create_experiment_is_running_with_rising_ids(store: Store) -> None:
    a = new(store, description="lr 0.01", rationale="why", source="print(1)\n", diff="-x\n+y\n", worker="w0")
    b = new(store)
    assert b > a
    e = store.experiment(a)
    assert e.status == "running" and e.score is None and e.finished_at is None
    assert (e.tag, e.kind, e.parent, e.seed) == ("t", "candidate", "abc123", 0)
    assert (e.description, e.rationale, e.source, e.diff, e.worker) == (
        "lr 0.01", "why", "print(1)\n", "-x\n+y\n", "w0")
    assert e.config == {"loop": {"budget_seconds": 5}} and e.blocking == ()
    assert dt.datetime.fromisoformat(e.started_at).tzinfo is not None
    # ids keep rising even after the newest row is gone (AUTOINCREMENT)
    con = sqlite3.connect(store.path)
    con.execute("DELETE FROM experiments WHERE id = ?", (b,))
    con.commit()
    assert new(store) > b


def test_create_rejects_unknown_kind(store: Store) -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        new(store, kind="experiment")


def test_phase_updates_and_finish(store: Store) -> None:
    i = new(store)
    assert store.set_phase(i, "training 40%") is True
    store.update_experiment(i, commit="c0ffee", train_seconds=12.5, gpu={"peak_mb": 900}, exit_code=0)
    verdict = Verdict.passed(metrics={"score": 0.61})
    store.record_outcome(i, outcome=Outcome.KEEP, score=0.61, metrics={"weighted_f1": 0.61, "pages": 6},
                         class_metrics=classes(), verdict=verdict, blocking=[], eval_seconds=3.0,
                         failure_signature=None)
    e = store.experiment(i)
    assert (e.status, e.score, e.commit, e.phase) == ("keep", 0.61, "c0ffee", "training 40%")
    assert e.metrics == {"weighted_f1": 0.61, "pages": 6}
    assert e.verdict is not None
    assert e.verdict["status"] == "pass" and e.verdict["metrics"] == {"score": 0.61}
    assert (e.train_seconds, e.eval_seconds, e.gpu) == (12.5, 3.0, {"peak_mb": 900})
    assert e.finished_at is not None and e.finished_at >= e.started_at
    cm = store.class_scores(i)
    assert set(cm) == {"supply_diffuser", "damper"}
    assert cm["supply_diffuser"].figures() == {"precision": 0.8, "recall": 0.889, "f1": 0.842,
                                               "count_error": 0.111, "tp": 8, "fp": 2, "fn": 1, "support": 9}
    assert cm["damper"].recall is None and cm["damper"].precision == 0.0
    # finished is final
    assert store.set_phase(i, "late callback") is False
    assert store.experiment(i).phase == "training 40%"
    with pytest.raises(StoreError, match="already finished as keep"):
        store.update_experiment(i, description="rewrite history")
    with pytest.raises(StoreError, match="already finished as keep"):
        store.record_outcome(i, outcome="discard", score=0.1, blocking=["x"])


@pytest.mark.parametrize("status", ["crash", "vacuous", "error", "interrupted"])
def test_an_unmeasured_outcome_stores_no_score(store: Store, status: str) -> None:
    """record_outcome is the one place that decides what an outcome may carry: a score
    passed with an unmeasured outcome is not stored (nothing was measured that counts)."""
    i = new(store)
    store.record_outcome(i, outcome=status, score=0.0, class_metrics=classes(),
                         verdict=Verdict.errored("gpu gone"), blocking=["gpu gone"])
    e = store.experiment(i)
    assert e.status == status and e.score is None and e.blocking == ("gpu gone",)
    assert store.class_scores(i) == {}


def test_finish_argument_checks(store: Store) -> None:
    i = new(store)
    with pytest.raises(ValueError, match="keep outcome must carry"):
        store.record_outcome(i, outcome="keep", blocking=[])
    with pytest.raises(ValueError, match="not running"):
        store.record_outcome(i, outcome="running", blocking=[])
    with pytest.raises(ValueError, match="finite"):
        store.record_outcome(i, outcome="discard", score=float("nan"), blocking=["x"])
    with pytest.raises(TypeError, match="score must be a number"):
        store.record_outcome(i, outcome="discard", score="0.5", blocking=["x"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="metrics: cannot store as JSON"):
        store.record_outcome(i, outcome="discard", score=0.2, metrics={"f1": float("inf")}, blocking=["x"])
    with pytest.raises(ValueError, match="cannot set status"):
        store.update_experiment(i, status="keep")
    with pytest.raises(ExperimentNotFound, match="no experiment 999"):
        store.record_outcome(999, outcome="crash", blocking=["x"])
    assert store.experiment(i).status == "running"


def test_finish_is_atomic_when_a_class_row_is_bad(store: Store) -> None:
    i = new(store)
    store.set_phase(i, "evaluating")
    before = store.experiment(i)
    with pytest.raises(StoreError, match="CHECK constraint failed"):
        # the experiment UPDATE runs first in the transaction, then this row is refused
        store.record_outcome(i, outcome="discard", score=0.4, metrics={"weighted_f1": 0.4},
                             class_metrics=classes(tp=-3), blocking=["lost"], commit="abc", failure_signature="sig")
    assert store.experiment(i) == before
    assert store.class_scores(i) == {}
    # and the experiment can still be finished properly afterwards
    store.record_outcome(i, outcome="discard", score=0.4, metrics={"weighted_f1": 0.4}, class_metrics=classes(),
                         blocking=["lost"])
    assert store.experiment(i).status == "discard" and len(store.class_scores(i)) == 2


def test_finish_refuses_a_class_without_counts(store: Store) -> None:
    i = new(store)
    with pytest.raises(ValueError, match=r"class_metrics\['damper'\]: missing tp"):
        store.record_outcome(i, outcome="discard", score=0.4, class_metrics=classes(tp=None), blocking=["lost"])


def test_secrets_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match=r"config\.agent\.api_key"):
        store.start_experiment(tag="t", kind="candidate", seed=0, config={"agent": {"api_key": "sk-123"}})
    with pytest.raises(ValueError, match=r"config\.notify\[0\]\.token"):
        store.start_experiment(tag="t", kind="candidate", seed=0, config={"notify": [{"token": "abc"}]})
    i = new(store)
    with pytest.raises(ValueError, match=r"config\.db_password"):
        store.update_experiment(i, config={"db_password": "hunter2"})
    with pytest.raises(ValueError, match=r"config\.x\.Secret"):
        store.add_event("t", "note", "hi", data={"x": {"Secret": "s"}})
    # names of variables, empty values and numbers are not secrets
    j = store.start_experiment(tag="t", kind="candidate", seed=0, config={"api_key_env": "OPENAI_API_KEY",
                                                                          "token": "", "max_tokens": 512})
    assert store.experiment(j).config["max_tokens"] == 512
    # the redacted config is storable as is
    cfg = Config.model_validate({"agent": {"kind": "openai", "base_url": "https://u:p@h/v1", "model": "m"},
                                 "notify": {"urls": ["tgram://bot:tok/1"]}})
    k = store.start_experiment(tag="t", kind="candidate", seed=0, config=cfg.redacted_dict())
    assert "tok" not in str(store.experiment(k).config)
    assert store.find_experiments() and all(e.status == "running" for e in store.find_experiments())


def test_runs_are_recorded_per_experiment(store: Store) -> None:
    i = new(store)
    r1 = store.add_run(i, "main", seed=0, exit_code=0, score=0.5, metrics={"weighted_f1": 0.5},
                       train={"steps": 10}, log_tail="done\n")
    r2 = store.add_run(i, "rerun", seed=1, exit_code=0, score=0.48,
                       started_at=dt.datetime(2025, 1, 1, 2, 0, tzinfo=dt.UTC))
    runs = store.run_records(i)
    assert [r.id for r in runs] == [r1, r2]
    assert runs[0].metrics == {"weighted_f1": 0.5} and runs[0].train == {"steps": 10}
    assert (runs[0].role, runs[0].log_tail, runs[1].role, runs[1].seed) == ("main", "done\n", "rerun", 1)
    assert runs[1].started_at == "2025-01-01T02:00:00.000000+00:00"
    with pytest.raises(ValueError, match="role must be one of"):
        store.add_run(i, "warmup")
    with pytest.raises(ExperimentNotFound):
        store.add_run(12345, "main")
    with pytest.raises(ValueError, match="without a timezone"):
        store.add_run(i, "main", started_at=dt.datetime(2025, 1, 1))


def finish(store: Store, i: int, status: str, score: float | None = None, sig: str | None = None) -> None:
    store.record_outcome(i, outcome=status, score=score, blocking=[] if status == "keep" else [status],
                         failure_signature=sig)


def _best_id(store: Store, tag: str) -> int | None:
    best = store.best(tag)
    return None if best is None else best.id


def test_best_experiment(store: Store) -> None:
    assert store.best("t") is None
    b = new(store, kind="baseline")
    assert store.best("t") is None  # still running: not measured
    finish(store, b, "inconclusive", 0.30)
    assert _best_id(store, "t") == b
    k1 = new(store)
    finish(store, k1, "keep", 0.35)
    d = new(store)
    finish(store, d, "discard", 0.9)
    other = new(store, tag="other")
    finish(store, other, "keep", 0.99)
    c = new(store, kind="canary")
    finish(store, c, "keep", 0.99)
    assert _best_id(store, "t") == k1
    k2 = new(store)
    finish(store, k2, "keep", 0.40)
    assert _best_id(store, "t") == k2
    assert _best_id(store, "other") == other
    assert store.best("t") == store.experiment(k2)  # the whole record, not just its id


def test_experiments_filters(store: Store) -> None:
    ids = [new(store) for _ in range(4)]
    finish(store, ids[0], "crash", sig="E1")
    finish(store, ids[1], "keep", 0.5)
    o = new(store, tag="other", kind="baseline")
    def found(**kw: Any) -> list[int]:
        return [e.id for e in store.find_experiments(**kw)]

    assert found() == [*ids, o]
    assert found(tag="t") == ids
    assert found(status="keep") == [ids[1]]
    assert found(status=[Outcome.CRASH, "keep"]) == ids[:2]
    assert found(kind="baseline") == [o]
    assert found(tag="t", limit=2) == ids[2:]
    first = store.experiment(ids[0]).started_at
    last = store.experiment(o).started_at
    assert found(since=last) == [o]
    assert found(since=first, until=last) == ids  # until is exclusive
    future = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    assert store.find_experiments(since=future) == []
    assert [e.id for e in store.open_experiments()] == [ids[2], ids[3], o]
    with pytest.raises(ValueError):
        store.find_experiments(status="finished")


def test_recent_signatures_newest_last(store: Store) -> None:
    b = new(store, kind="baseline")
    finish(store, b, "crash", sig="BASE")  # not a candidate
    for status, sig in [("crash", "E1"), ("keep", None), ("crash", "E2"), ("interrupted", None),
                        ("vacuous", "no weights"), ("crash", "E2")]:
        i = new(store)
        if status == "interrupted":
            store.mark_interrupted(i, "daemon stopped")
        else:
            finish(store, i, status, 0.5 if status == "keep" else None, sig)
    new(store)  # still running: not finished
    assert store.recent_signatures("t", 3) == ["E2", "no weights", "E2"]
    assert store.recent_signatures("t", 10) == ["E1", None, "E2", "no weights", "E2"]
    assert store.recent_signatures("t", 0) == []
    assert store.recent_signatures("nope", 3) == []


def test_mark_interrupted_finishes_and_journals_once(store: Store) -> None:
    i = new(store)
    store.set_phase(i, "training")
    assert store.mark_interrupted(i, "daemon died at 03:12") is True
    e = store.experiment(i)
    assert (e.status, e.score, e.blocking) == ("interrupted", None, ("daemon died at 03:12",))
    assert e.finished_at is not None
    assert store.mark_interrupted(i, "again") is False
    evs = store.journal(tag="t")
    assert [(ev.kind, ev.experiment_id, ev.message) for ev in evs] == [("interrupted", i, "daemon died at 03:12")]
    assert store.open_experiments() == []
    with pytest.raises(ExperimentNotFound):
        store.mark_interrupted(777, "x")


def test_events_journal(store: Store) -> None:
    i = new(store)
    e1 = store.add_event("t", "start", "night begins", data={"budget": 300})
    e2 = store.add_event("t", "page_failed", "ntfy unreachable", experiment_id=i)
    store.add_event("other", "note", "elsewhere")
    assert e2 > e1
    evs = store.journal(tag="t")
    assert all(isinstance(e, EventRecord) for e in evs)
    assert [(e.kind, e.data) for e in evs] == [("start", {"budget": 300}), ("page_failed", None)]
    assert [e.kind for e in store.journal(kind=["note", "start"])] == ["start", "note"]
    assert [e.id for e in store.journal(limit=1)] == [e2 + 1]
    assert store.journal(since=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)) == []
    with pytest.raises(ValueError, match="event kind must be one of"):
        store.add_event("t", "party", "x")
    with pytest.raises(ExperimentNotFound):
        store.add_event("t", "note", "x", experiment_id=4242)


def test_the_journal_filters_on_a_message_s_beginning_taken_literally(store: Store) -> None:
    store.add_event("t", "note", "GPU slots: 8 at a time")
    store.add_event("t", "note", "GPU slotsX: a wildcard would match this")
    store.add_event("t", "note", "100% of it")
    store.add_event("t", "note", "10 of it")
    store.add_event("t", "note", "said of GPU slots: not at the beginning")
    assert [e.message for e in store.journal(startswith="GPU slots: ")] == ["GPU slots: 8 at a time"]
    assert [e.message for e in store.journal(startswith="GPU slots_")] == []  # "_" is no one-character wildcard
    assert [e.message for e in store.journal(startswith="10")] == ["100% of it", "10 of it"]
    assert [e.message for e in store.journal(startswith="10%")] == []  # "%" is no wildcard either
    assert [e.message for e in store.journal(startswith="10", limit=1)] == ["10 of it"]


def test_tags_pin_what_was_true_at_start(store: Store) -> None:
    assert store.tag_record("t") is None
    store.put_tag("t", branch="looper/t", base_commit="abc", fixed_hashes={"evaluate.py": "h1"},
                  data_hash="d1", started_at="2025-01-01T00:00:00+00:00")
    assert store.tag_record("t") == TagRecord(tag="t", branch="looper/t", base_commit="abc",
                                              fixed_hashes={"evaluate.py": "h1"}, data_hash="d1", noise=None,
                                              started_at="2025-01-01T00:00:00.000000+00:00")
    tag = store.tag_record("t")
    assert tag is not None and tag.to_dict() == {"tag": "t", "branch": "looper/t", "base_commit": "abc",
                   "fixed_hashes": {"evaluate.py": "h1"}, "data_hash": "d1", "noise": None,
                   "started_at": "2025-01-01T00:00:00.000000+00:00"}
    store.set_tag_noise("t", {"sigma": 0.01, "runs": 3})
    noisy = store.tag_record("t")
    assert noisy is not None and noisy.noise == {"sigma": 0.01, "runs": 3}
    store.put_tag("t", branch="looper/t", base_commit="def", fixed_hashes={}, data_hash="d2")
    again = store.tag_record("t")
    assert again is not None
    assert (again.base_commit, again.started_at) == ("def", "2025-01-01T00:00:00.000000+00:00")
    with pytest.raises(StoreError, match="no tag 'zzz'"):
        store.set_tag_noise("zzz", {})


def test_two_stores_on_one_file_see_each_other(tmp_path: Path) -> None:
    a, b = Store(tmp_path), Store(tmp_path / "experiments.db")
    i = new(a)
    b.set_phase(i, "from b")
    assert a.experiment(i).phase == "from b"
    a.close()
    b.close()


def test_given_times_are_stored_as_utc_text(store: Store) -> None:
    i = new(store)
    store.update_experiment(i, started_at="2025-03-01T03:00:00+02:00")
    store.record_outcome(i, outcome="crash", blocking=["boom"], finished_at="2025-03-01T01:30:00Z")
    e = store.experiment(i)
    assert (e.started_at, e.finished_at) == ("2025-03-01T01:00:00.000000+00:00", "2025-03-01T01:30:00.000000+00:00")
    # filters take aware times in any zone, or a plain date prefix
    assert [x.id for x in store.find_experiments(since="2025-03-01T02:59:00+02:00")] == [i]
    assert [x.id for x in store.find_experiments(since="2025-03-01", until="2025-03-02")] == [i]
    assert store.find_experiments(until="2025-03-01T02:00:00+02:00") == []
    j = new(store)
    for bad in ("2025-03-01T03:00:00", "last tuesday"):
        with pytest.raises(ValueError, match="started_at"):
            store.update_experiment(j, started_at=bad)
