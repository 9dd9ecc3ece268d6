"""The morning report and the history: what the night did, read back from ``experiments.db``.

Everything here only reads. :func:`gather` collects the facts of one window (by default
the last daemon run, from its latest ``start`` event) into a :class:`Night`;
:func:`report_text` renders it for a terminal, :func:`write_html` as ONE self-contained
HTML page (inline CSS and hand-written inline SVG; no script, no external URL).
Every number shown names the experiment it comes from (``#id``).

:func:`history_rows` / :func:`history_text` / :func:`history_json` are ``looper history``.

No secret is ever shown: the store holds none, configuration values are never printed,
and every free text (event messages, blocking reasons, descriptions, rationales, diffs)
goes through :func:`looper.adapters.notify.redact` on its way out.
"""

from __future__ import annotations

import bisect
import importlib
import io
import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from looper.adapters.notify import redact
from looper.core.classes import CLASSES
from looper.core.verdict import Outcome
from looper.store import Store
from looper.store import models as m
from looper.store.repo import to_utc_iso

__all__ = [
    "HISTORY_KEYS",
    "Attention",
    "CrashGroup",
    "KeptChange",
    "NearMiss",
    "Night",
    "gather",
    "history_json",
    "history_rows",
    "history_text",
    "report_text",
    "write_html",
]

#: The keys of every ``looper history --json`` row, in this order (stable: scripts rely on them).
HISTORY_KEYS: tuple[str, ...] = (
    "id", "tag", "kind", "commit", "parent", "status", "score", "description", "started_at",
    "finished_at", "failure_signature", "blocking",
)

#: Outcomes in the order the report lists them.
OUTCOME_ORDER: tuple[str, ...] = (
    "keep", "discard", "inconclusive", "crash", "vacuous", "error", "interrupted", "running", "pending",
)

TIME_PARTS: tuple[str, ...] = ("agent", "train", "eval", "harness")

_DEFAULT_SCORE = "weighted_f1"
#: How many items of one kind the attention list and the text report show before summing up.
_MAX_ATTENTION = 5
_MAX_TEXT_ROWS = 15
_DEFAULT_MAX_CLASS_DROP = 0.05


# --------------------------------------------------------------------------- the facts


@dataclass(frozen=True)
class Attention:
    """One thing a person should look at, most urgent first. ``level``: halt | warn | note."""

    level: str
    text: str
    exp_id: int | None = None
    command: str | None = None


@dataclass(frozen=True)
class KeptChange:
    id: int
    tag: str
    commit: str | None
    description: str
    rationale: str
    diff: str
    score: float
    best_before: float | None
    best_before_id: int | None

    @property
    def delta(self) -> float | None:
        return None if self.best_before is None else self.score - self.best_before


@dataclass(frozen=True)
class NearMiss:
    id: int
    description: str
    score: float
    best_before: float | None
    best_before_id: int | None
    diff: float
    class_reasons: tuple[str, ...]

    @property
    def command(self) -> str:
        return f"looper baseline approve {self.id}"


@dataclass(frozen=True)
class CrashGroup:
    signature: str
    ids: tuple[int, ...]
    example_reason: str
    descriptions: tuple[str, ...]


@dataclass
class Night:
    """The facts of one report window. Experiment dicts are the store's rows."""

    since: str | None
    tag: str | None
    score_name: str
    experiments: list[dict[str, Any]]
    events: list[dict[str, Any]]
    counts: dict[str, int]
    baseline: dict[str, Any] | None            # the tag-start baseline experiment (measured)
    baseline_source: str                        # "approved:<file> (#id)" | "tag-start #id" | "none"
    baseline_score: float | None
    baseline_id: int | None                     # the experiment the compared baseline came from
    baseline_classes: dict[str, dict[str, Any]]
    best: dict[str, Any] | None
    best_classes: dict[str, dict[str, Any]]
    kept: list[KeptChange]
    near_misses: list[NearMiss]
    crash_groups: list[CrashGroup]
    vacuous: list[dict[str, Any]]
    inconclusive: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    interrupted: list[dict[str, Any]]
    exclusions: list[str]
    dead_gates: list[str]
    attention: list[Attention]
    time: dict[str, float]
    time_ids: dict[str, int]                    # how many experiments reported each part
    gpu: dict[str, Any]
    best_before: dict[int, tuple[float | None, int | None]] = field(default_factory=dict)
    running_best: list[tuple[int, float]] = field(default_factory=list)  # (keep id, score) for the tag

    @property
    def scored(self) -> list[dict[str, Any]]:
        return [e for e in self.experiments if e.get("score") is not None]

    @property
    def rare_classes(self) -> set[str]:
        return rare_classes(self.baseline_classes or self.best_classes)


#: Lower-case substrings at least one of which every match of the pager's redaction patterns
#: (``looper.adapters.notify._SECRET_PATTERNS``) contains. Text holding none of them cannot be
#: changed by ``redact``, so it skips the regexes: redacting 10,000 rows stays cheap. A test
#: pins the pager's patterns: change them, and it says to revisit this list.
_TRIGGERS: tuple[str, ...] = ("://", "bearer", "api", "token", "secret", "passw", "sk-", "pk-", "rk-", "xox")
#: The pager's patterns this list was checked against (a test compares them with the live ones).
_TRIGGERS_FOR: tuple[str, ...] = (
    r"(?i)\b(sk|pk|rk|xox[abp])-[A-Za-z0-9_\-]{8,}",
    r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}",
    r"(?i)\b(api[_-]?key|token|secret|password|passwd)\b(\s*[=:]\s*)\S+",
    r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@]+@",
)


def _t(text: Any) -> str:
    """Free text on its way out: a string, secrets redacted."""
    s = "" if text is None else str(text)
    low = s.lower()
    for k in _TRIGGERS:
        if k in low:
            return redact(s)
    return s


def _ids(ids: Iterable[int], limit: int = 12) -> str:
    """``#3 #7 #9 ... (+N)``: experiment ids, the first ``limit`` of them."""
    items = list(ids)
    shown = " ".join(f"#{i}" for i in items[:limit])
    return shown + (f" ... (+{len(items) - limit})" if len(items) > limit else "")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def rare_classes(classes: dict[str, dict[str, Any]]) -> set[str]:
    """Classes with truth whose support is below the median support (of classes with truth)."""
    supports = {c: int(v.get("support") or 0) for c, v in classes.items()}
    present = [s for s in supports.values() if s > 0]
    if not present:
        return set()
    median = statistics.median(present)
    return {c for c, s in supports.items() if 0 < s < median}


def _score_name(exp: dict[str, Any] | None) -> str:
    cfg = (exp or {}).get("config") or {}
    gate = cfg.get("gate") if isinstance(cfg, dict) else None
    name = gate.get("score") if isinstance(gate, dict) else None
    return name if isinstance(name, str) and name else _DEFAULT_SCORE


def _max_class_drop(exp: dict[str, Any] | None) -> float:
    cfg = (exp or {}).get("config") or {}
    gate = cfg.get("gate") if isinstance(cfg, dict) else None
    value = _num(gate.get("max_class_drop")) if isinstance(gate, dict) else None
    return _DEFAULT_MAX_CLASS_DROP if value is None else value


def _exclusions_module() -> Any | None:
    try:
        return importlib.import_module("looper.core.exclusions")
    except ImportError:
        return None


def _exclusion_lines(experiments: Iterable[dict[str, Any]]) -> list[str]:
    mod = _exclusions_module()
    lines: list[str] = []
    for e in experiments:
        outcome = Outcome(e["status"])
        if not outcome.is_exclusion:
            continue
        blocking = [str(b) for b in (e.get("blocking") or [])]
        if mod is not None:
            line = mod.exclusion_for(e.get("description") or "", outcome, blocking)
        else:
            reason = blocking[0] if blocking else outcome.value
            line = f"{e.get('description') or '(no description)'}: {reason}"
        if line:
            lines.append(f"{line} (#{e['id']})")
    if mod is not None:
        return list(mod.dedupe(lines))
    return list(dict.fromkeys(lines))


def _class_reasons(blocking: Iterable[str]) -> list[str]:
    out = []
    for reason in blocking:
        r = str(reason)
        if r.startswith("recall.") or any(c in r for c in CLASSES):
            out.append(r)
    return out


#: Columns the report reads (never ``source``, ``config`` or the big ``metrics`` JSON of every row).
_LEAN = ("id", "tag", "kind", "commit", "parent", "status", "score", "description", "started_at",
         "finished_at", "failure_signature", "exit_code", "agent_seconds", "train_seconds", "eval_seconds",
         "harness_seconds", "worker")
_LEAN_JSON = ("blocking_json", "gpu_json")


def _bound(value: str, what: str) -> str:
    """An aware time normalised to stored UTC text; a bare date or prefix compared as text
    (the same rule as :meth:`Store.experiments`)."""
    try:
        return to_utc_iso(value, what)
    except ValueError:
        return value


def lean_experiments(store: Store, *, tag: str | None = None, status: Iterable[str] | None = None,
                     since: str | None = None, until: str | None = None, kind: Iterable[str] | None = None,
                     extra: Iterable[str] = (), figures: bool = True) -> list[dict[str, Any]]:
    """Experiments by id, with only the columns a report needs (read-only, one query).

    Like :meth:`Store.experiments` but without decoding every row's source, config and
    metrics: 10,000 experiments stay well under a second. ``blocking`` and ``gpu`` come
    decoded; ``verdict_diff`` (the gate's ``metrics.diff``) and ``train_peak_memory_mb``
    are pulled out of their JSON by SQLite (``figures=False`` leaves out gpu and these).
    ``extra`` names further plain columns. Free text (description, blocking, failure
    signature, rationale, diff) comes back already redacted.
    """
    t = m.experiments
    cols = [t.c[name] for name in (*_LEAN, *extra)] + [t.c.blocking_json]
    if figures:
        cols += [t.c.gpu_json,
                 func.json_extract(t.c.verdict_json, "$.metrics.diff").label("verdict_diff"),
                 func.json_extract(t.c.train_json, "$.peak_memory_mb").label("train_peak_memory_mb")]
    q = select(*cols)
    if tag is not None:
        q = q.where(t.c.tag == tag)
    if status is not None:
        q = q.where(t.c.status.in_(list(status)))
    if kind is not None:
        q = q.where(t.c.kind.in_(list(kind)))
    if since is not None:
        q = q.where(t.c.started_at >= _bound(since, "since"))
    if until is not None:
        q = q.where(t.c.started_at < _bound(until, "until"))
    q = q.order_by(t.c.id)
    with store.engine.connect() as conn:
        result = conn.execute(q)
        names = list(result.keys())
        rows = result.all()
    out = []
    loads = json.loads
    texts = [k for k in ("description", "failure_signature", "rationale", "diff") if k in (*_LEAN, *extra)]
    for r in rows:
        d = dict(zip(names, r, strict=True))
        b = d.pop("blocking_json")
        d["blocking"] = [_t(x) for x in loads(b)] if b and b != "[]" else []
        if figures:
            g = d.pop("gpu_json")
            d["gpu"] = loads(g) if g else None
        for k in texts:
            if d[k] is not None:
                d[k] = _t(d[k])
        out.append(d)
    return out


def _default_since(store: Store) -> tuple[str | None, str | None]:
    starts = store.events(kind="start", limit=1)
    if not starts:
        return None, None
    return starts[-1]["at"], starts[-1]["tag"]


def gather(store: Store, root: Path, since: str | None = None) -> Night:
    """The facts of the window starting at ``since`` (default: the latest ``start`` event)."""
    start_tag: str | None = None
    if since is None:
        since, start_tag = _default_since(store)
    experiments = lean_experiments(store, since=since, tag=start_tag)
    events = store.events(since=since, tag=start_tag)
    tag = start_tag or (experiments[-1]["tag"] if experiments else None)
    if tag is None:
        last = store.experiments(limit=1)
        tag = last[-1]["tag"] if last else None

    counts: dict[str, int] = {}
    for e in experiments:
        counts[e["status"]] = counts.get(e["status"], 0) + 1

    # the running best of every tag in the window (keeps before the window count too)
    keeps_by_tag: dict[str, list[tuple[int, float]]] = {}
    for t in sorted({e["tag"] for e in experiments} | ({tag} if tag else set())):
        with store.engine.connect() as conn:
            ks = conn.execute(
                select(m.experiments.c.id, m.experiments.c.score)
                .where(m.experiments.c.tag == t, m.experiments.c.status == Outcome.KEEP.value,
                       m.experiments.c.kind.in_(("baseline", "candidate")), m.experiments.c.score.is_not(None))
                .order_by(m.experiments.c.id)).all()
        keeps_by_tag[t] = [(int(i), float(v)) for i, v in ks]
    best_before: dict[int, tuple[float | None, int | None]] = {}
    for e in experiments:
        ks = keeps_by_tag.get(e["tag"], [])
        i = bisect.bisect_left(ks, (e["id"], float("-inf")))
        best_before[e["id"]] = (ks[i - 1][1], ks[i - 1][0]) if i > 0 else (None, None)

    # baseline: the tag-start measurement, and the one the gates compare against
    baseline: dict[str, Any] | None = None
    if tag is not None:
        base_rows = store.experiments(tag=tag, kind="baseline", status="keep", limit=1)
        baseline = base_rows[-1] if base_rows else None  # the full row: config and metrics
    score_name = _score_name(baseline or (store.get_experiment(experiments[-1]["id"]) if experiments else None))
    baseline_classes: dict[str, dict[str, Any]] = {}
    baseline_score: float | None = None
    baseline_id: int | None = None
    baseline_metrics: dict[str, Any] | None = None
    from looper.baselines import newest_baseline

    approved = newest_baseline(Path(root) / "baselines")
    if approved is not None:
        name, data = approved
        baseline_id = data.get("experiment_id") if isinstance(data.get("experiment_id"), int) else None
        baseline_source = f"approved:{name}" + (f" (#{baseline_id})" if baseline_id is not None else "")
        baseline_metrics = data.get("metrics") or {}
        baseline_score = _num(data.get("score"))
        if baseline_score is None:
            baseline_score = _num(baseline_metrics.get(score_name))
        classes = baseline_metrics.get("classes")
        baseline_classes = {str(k): dict(v) for k, v in classes.items()} if isinstance(classes, dict) else {}
    elif baseline is not None:
        baseline_id = baseline["id"]
        baseline_source = f"tag-start #{baseline_id}"
        baseline_score = _num(baseline.get("score"))
        baseline_metrics = baseline.get("metrics") or {}
        baseline_classes = store.class_metrics(baseline_id)
    else:
        baseline_source = "none"

    best = store.best_experiment(tag) if tag else None
    best_classes = store.class_metrics(best["id"]) if best else {}

    # kept changes (their rationale and diff: one more query), near misses, crashes, the rest
    kept_ids = [e["id"] for e in experiments if e["status"] == "keep" and e["kind"] == "candidate"]
    texts: dict[int, tuple[str, str]] = {}
    t = m.experiments
    with store.engine.connect() as conn:
        for chunk in range(0, len(kept_ids), 500):
            q = select(t.c.id, t.c.rationale, t.c.diff).where(t.c.id.in_(kept_ids[chunk:chunk + 500]))
            texts.update({int(i): (r or "", d or "") for i, r, d in conn.execute(q)})
    kept: list[KeptChange] = []
    near: list[NearMiss] = []
    crashes: dict[str, list[dict[str, Any]]] = {}
    vacuous, inconclusive, errors, interrupted = [], [], [], []
    for e in experiments:
        status = e["status"]
        bb, bb_id = best_before[e["id"]]
        if status == "keep" and e["kind"] == "candidate":
            kept.append(KeptChange(
                id=e["id"], tag=e["tag"], commit=e.get("commit"), description=_t(e.get("description")),
                rationale=_t(texts[e["id"]][0]), diff=_t(texts[e["id"]][1]), score=float(e["score"]),
                best_before=bb, best_before_id=bb_id))
        elif status == "discard" and e.get("score") is not None:
            reasons = _class_reasons(e.get("blocking") or [])
            diff = _num(e.get("verdict_diff"))
            if diff is None and bb is not None:
                diff = float(e["score"]) - bb
            if reasons and diff is not None and diff > 0:
                near.append(NearMiss(id=e["id"], description=_t(e.get("description")), score=float(e["score"]),
                                     best_before=bb, best_before_id=bb_id, diff=diff,
                                     class_reasons=tuple(_t(r) for r in reasons)))
        elif status == "crash":
            crashes.setdefault(e.get("failure_signature") or "(no signature)", []).append(e)
        elif status == "vacuous":
            vacuous.append(e)
        elif status == "inconclusive":
            inconclusive.append(e)
        elif status == "error":
            errors.append(e)
        elif status == "interrupted":
            interrupted.append(e)
    crash_groups = [
        CrashGroup(signature=_t(sig), ids=tuple(x["id"] for x in rows),
                   example_reason=_t(next(iter(rows[0].get("blocking") or []), "")),
                   descriptions=tuple(dict.fromkeys(_t(x.get("description")) for x in rows)))
        for sig, rows in sorted(crashes.items(), key=lambda kv: (-len(kv[1]), kv[1][0]["id"]))
    ]

    # dead gates of the baseline the gates compare against
    dead: list[str] = []
    if baseline_metrics:
        try:
            from looper.core.gate import dead_gates

            dead = list(dead_gates(baseline_metrics, _max_class_drop(baseline)))
        except Exception:  # noqa: BLE001 - fall back to what the daemon journaled
            dead = []
    if not dead:
        for ev in reversed(events):
            if ev["kind"] == "baseline" and isinstance(ev.get("data"), dict) and ev["data"].get("dead_gates"):
                dead = [str(x) for x in ev["data"]["dead_gates"]]
                break

    # time and GPU
    time: dict[str, float] = {}
    time_ids: dict[str, int] = {}
    for part in TIME_PARTS:
        vals = [_num(e.get(f"{part}_seconds")) for e in experiments]
        known = [v for v in vals if v is not None]
        time[part] = float(sum(known))
        time_ids[part] = len(known)
    gpu = _gpu_summary(experiments)

    night = Night(
        since=since, tag=tag, score_name=score_name, experiments=experiments, events=events, counts=counts,
        baseline=baseline, baseline_source=baseline_source, baseline_score=baseline_score,
        baseline_id=baseline_id, baseline_classes=baseline_classes, best=best, best_classes=best_classes,
        kept=kept, near_misses=near, crash_groups=crash_groups, vacuous=vacuous, inconclusive=inconclusive,
        errors=errors, interrupted=interrupted, exclusions=[_t(x) for x in _exclusion_lines(experiments)],
        dead_gates=dead, attention=[], time=time, time_ids=time_ids, gpu=gpu, best_before=best_before,
        running_best=keeps_by_tag.get(tag, []) if tag else [],
    )
    night.attention = _attention(night, approved is not None)
    return night


def _gpu_summary(experiments: list[dict[str, Any]]) -> dict[str, Any]:
    names: dict[str, int] = {}
    peak: tuple[float, int] | None = None
    train_peak: tuple[float, int] | None = None
    utils: list[float] = []
    lost: list[int] = []
    xid: list[int] = []
    ecc: list[int] = []
    for e in experiments:
        g = e.get("gpu") if isinstance(e.get("gpu"), dict) else None
        if g:
            if g.get("name"):
                names[str(g["name"])] = names.get(str(g["name"]), 0) + 1
            p = _num(g.get("peak_memory_mb"))
            if p is not None and (peak is None or p > peak[0]):
                peak = (p, e["id"])
            u = _num(g.get("mean_utilization_pct"))
            if u is not None:
                utils.append(u)
            if g.get("lost"):
                lost.append(e["id"])
            if g.get("xid"):
                xid.append(e["id"])
            s, f = _num(g.get("ecc_uncorrected_start")), _num(g.get("ecc_uncorrected_end"))
            if s is not None and f is not None and f > s:
                ecc.append(e["id"])
        p = _num(e.get("train_peak_memory_mb"))
        if p is not None and (train_peak is None or p > train_peak[0]):
            train_peak = (p, e["id"])
    return {
        "names": names, "peak_memory_mb": peak, "train_peak_memory_mb": train_peak,
        "mean_utilization_pct": statistics.fmean(utils) if utils else None, "utilization_samples": len(utils),
        "lost": lost, "xid": xid, "ecc": ecc,
    }


def _attention(n: Night, approved: bool) -> list[Attention]:
    out: list[Attention] = []
    halted_ids: set[int] = set()
    for ev in n.events:
        if ev["kind"] in ("halt", "stuck"):
            what = "HALTED (harness error)" if ev["kind"] == "halt" else "HALTED (stuck loop)"
            out.append(Attention("halt", f"{what} at {ev['at'][:19]}: {_t(ev['message'])}", ev.get("experiment_id")))
            if ev.get("experiment_id") is not None:
                halted_ids.add(int(ev["experiment_id"]))
    for e in n.errors:
        if e["id"] in halted_ids:
            continue
        reason = "; ".join(_t(b) for b in (e.get("blocking") or [])) or "(no reason recorded)"
        out.append(Attention("halt", f"harness error in #{e['id']}: {reason}", e["id"]))
    for ev in n.events:
        if ev["kind"] == "page_failed":
            out.append(Attention("halt", f"a page was NOT delivered at {ev['at'][:19]}: {_t(ev['message'])}",
                                 ev.get("experiment_id")))
    starts = [ev for ev in n.events if ev["kind"] == "start"]
    if starts:
        after = [ev for ev in n.events if ev["id"] > starts[-1]["id"] and ev["kind"] in ("stop", "halt", "stuck")]
        if not after:
            out.append(Attention("warn", f"no stop or halt since the daemon started at {starts[-1]['at'][:19]}: "
                                         "it is still running, or it died"))
    if n.dead_gates:
        shown = ", ".join(n.dead_gates[:10]) + (f" and {len(n.dead_gates) - 10} more" if len(n.dead_gates) > 10 else "")
        src = f"#{n.baseline_id}" if n.baseline_id is not None else n.baseline_source
        out.append(Attention("warn", f"{len(n.dead_gates)} class gate(s) are dead (baseline {src} recall not above "
                                     f"the drop limit; they can never fire): {shown}", n.baseline_id))
    ranked = sorted(n.near_misses, key=lambda x: -x.diff)
    for nm in ranked[:_MAX_ATTENTION]:
        out.append(Attention(
            "warn", f"near miss #{nm.id} beat the best by {nm.diff:+.4f} but failed a class gate: "
                    f"{'; '.join(nm.class_reasons)}", nm.id, nm.command))
    if len(ranked) > _MAX_ATTENTION:
        rest = ranked[_MAX_ATTENTION:]
        out.append(Attention("warn", f"{len(rest)} more near miss(es): {_ids(x.id for x in rest)}"))
    for e in n.interrupted[:_MAX_ATTENTION]:
        reason = "; ".join(_t(b) for b in (e.get("blocking") or [])) or "interrupted"
        out.append(Attention("note", f"#{e['id']} was interrupted: {reason}", e["id"]))
    if len(n.interrupted) > _MAX_ATTENTION:
        rest_i = n.interrupted[_MAX_ATTENTION:]
        out.append(Attention("note", f"{len(rest_i)} more interrupted: {_ids(e['id'] for e in rest_i)}"))
    if not approved and n.baseline is not None:
        out.append(Attention("note", f"no approved baseline yet: the gates compare against the tag-start baseline "
                                     f"#{n.baseline['id']}", n.baseline["id"],
                             f"looper baseline approve {n.baseline['id']}"))
    return out


# --------------------------------------------------------------------------- text


def _fmt(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _signed(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:+.{digits}f}"


def _secs(v: float) -> str:
    if v >= 3600:
        return f"{v / 3600:.1f} h"
    if v >= 60:
        return f"{v / 60:.1f} min"
    return f"{v:.0f} s"


def _console(width: int) -> Any:
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False,
                   no_color=True, highlight=False, emoji=False, soft_wrap=False, legacy_windows=False)


def _line_of(e: dict[str, Any], width: int = 70) -> str:
    d = _t(e.get("description")) or "(no description)"
    return d if len(d) <= width else d[: width - 1] + "…"


def report_text(store: Store, root: Path, since: str | None = None, console_width: int = 100) -> str:
    """The morning report for a terminal (rich, rendered to plain text)."""
    return render_text(gather(store, root, since), console_width)


def render_text(n: Night, console_width: int = 100) -> str:
    from rich.table import Table
    from rich.text import Text

    con = _console(console_width)
    window = f"since {n.since[:19]}" if n.since else "all history"
    con.print(Text(f"looper morning report: tag {n.tag or '-'}, {window}", style="bold"))
    con.print()

    # FIRST: anything that needs a person
    needs = [a for a in n.attention if a.level in ("halt", "warn")]
    con.print(Text(f"NEEDS A PERSON ({len(needs)})" if needs else "Needs a person: nothing", style="bold"))
    for a in n.attention:
        mark = {"halt": "!!", "warn": " !", "note": " -"}[a.level]
        con.print(Text(f"{mark} {a.text}"))
        if a.command:
            con.print(Text(f"     -> {a.command}"))
    con.print()

    # at a glance
    con.print(Text("At a glance", style="bold"))
    total = len(n.experiments)
    by = ", ".join(f"{s} {n.counts[s]}" for s in OUTCOME_ORDER if n.counts.get(s))
    con.print(Text(f"{total} experiment(s): {by or 'none'}"))
    kept_ids = _ids(k.id for k in n.kept)
    con.print(Text(f"kept improvements: {len(n.kept)}" + (f" ({kept_ids})" if kept_ids else "")))
    best_line = "best: -"
    if n.best is not None:
        best_line = f"best {n.score_name}: {_fmt(n.best.get('score'))} (#{n.best['id']})"
        if n.baseline_score is not None:
            best_line += (f" vs baseline {_fmt(n.baseline_score)} ({n.baseline_source}): "
                          f"{_signed((n.best.get('score') or 0.0) - n.baseline_score)}")
    con.print(Text(best_line))
    halts = [a for a in n.attention if a.level == "halt"]
    con.print(Text(f"halts and undelivered pages: {len(halts)}"))
    con.print()

    if n.kept:
        t = Table(title="Kept changes", title_justify="left", show_edge=False)
        for col in ("id", n.score_name, "change", "description"):
            t.add_column(col)
        for k in n.kept[-_MAX_TEXT_ROWS:]:
            before = f" vs #{k.best_before_id}" if k.best_before_id is not None else ""
            t.add_row(f"#{k.id}", _fmt(k.score), Text(_signed(k.delta) + before), Text(k.description))
        con.print(t)
        if len(n.kept) > _MAX_TEXT_ROWS:
            con.print(Text(f"  ({len(n.kept) - _MAX_TEXT_ROWS} earlier kept change(s): looper history, "
                           "or the HTML report)"))
        con.print()

    if n.near_misses:
        t = Table(title="Near misses (beat the best, failed a class gate)", title_justify="left", show_edge=False)
        for col in ("id", n.score_name, "vs best", "failed", "approve with"):
            t.add_column(col)
        for nm in sorted(n.near_misses, key=lambda x: -x.diff)[:_MAX_TEXT_ROWS]:
            t.add_row(f"#{nm.id}", _fmt(nm.score), _signed(nm.diff), Text("; ".join(nm.class_reasons)),
                      Text(nm.command))
        con.print(t)
        if len(n.near_misses) > _MAX_TEXT_ROWS:
            con.print(Text(f"  ({len(n.near_misses) - _MAX_TEXT_ROWS} more: the HTML report lists them all)"))
        con.print()

    if n.crash_groups or n.vacuous:
        t = Table(title="Crashes by failure signature", title_justify="left", show_edge=False)
        for col in ("count", "signature", "experiments", "example"):
            t.add_column(col)
        for g in n.crash_groups[:_MAX_TEXT_ROWS]:
            t.add_row(str(len(g.ids)), Text(g.signature), _ids(g.ids, 8), Text(g.example_reason))
        if len(n.crash_groups) > _MAX_TEXT_ROWS:
            rest = n.crash_groups[_MAX_TEXT_ROWS:]
            t.add_row(str(sum(len(g.ids) for g in rest)), f"({len(rest)} more signatures)", "", "")
        if n.vacuous:
            t.add_row(str(len(n.vacuous)), "(vacuous: no evidence)", _ids((e["id"] for e in n.vacuous), 8),
                      Text(_t(next(iter(n.vacuous[0].get("blocking") or []), ""))))
        con.print(t)
        con.print()

    if n.inconclusive:
        con.print(Text("Inconclusive ideas (inside the noise band; may be retried)", style="bold"))
        for e in n.inconclusive[-_MAX_TEXT_ROWS:]:
            con.print(Text(f"  #{e['id']} {_fmt(e.get('score'))}  {_line_of(e)}"))
        if len(n.inconclusive) > _MAX_TEXT_ROWS:
            con.print(Text(f"  ({len(n.inconclusive) - _MAX_TEXT_ROWS} earlier: looper history --json)"))
        con.print()

    if n.exclusions:
        con.print(Text(f"Exclusions learned ({len(n.exclusions)})", style="bold"))
        for line in n.exclusions[-_MAX_TEXT_ROWS:]:
            con.print(Text(f"  {line}"))
        if len(n.exclusions) > _MAX_TEXT_ROWS:
            con.print(Text(f"  ({len(n.exclusions) - _MAX_TEXT_ROWS} earlier: the HTML report lists them all)"))
        con.print()

    rows = class_rows(n)
    if rows:
        best_id = f"#{n.best['id']}" if n.best else "-"
        t = Table(title=f"Per class: baseline {n.baseline_source} vs best {best_id} (biggest recall changes)",
                  title_justify="left", show_edge=False)
        for col in ("class", "support", "P base", "P best", "dP", "R base", "R best", "dR"):
            t.add_column(col)
        shown = sorted(rows, key=lambda r: -abs(r["d_recall"] or 0.0))[:12]
        for r in shown:
            name = r["class"] + (" (rare)" if r["rare"] else "")
            t.add_row(name, str(r["support"]), _fmt(r["p_base"], 2), _fmt(r["p_best"], 2), _signed(r["d_precision"], 2),
                      _fmt(r["r_base"], 2), _fmt(r["r_best"], 2), _signed(r["d_recall"], 2))
        con.print(t)
        con.print()

    con.print(Text("Where the time went", style="bold"))
    total_s = sum(n.time.values())
    for part in TIME_PARTS:
        share = 100.0 * n.time[part] / total_s if total_s else 0.0
        con.print(Text(f"  {part:<8} {_secs(n.time[part]):>10}  {share:5.1f}%  ({n.time_ids[part]} experiment(s))"))
    con.print(Text(gpu_line(n)))
    workers = worker_lines(n)
    if len(workers) > 1:
        con.print(Text("Workers", style="bold"))
        for line in workers:
            con.print(Text("  " + line))
    return con.file.getvalue()


def worker_lines(n: Night) -> list[str]:
    """One line per worker: how many experiments, their outcomes, the last one and when."""
    by: dict[str, list[dict[str, Any]]] = {}
    for e in n.experiments:
        if e.get("kind") == "candidate":
            by.setdefault(e.get("worker") or "w0", []).append(e)
    lines = []
    for worker, rows in sorted(by.items()):
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        last = rows[-1]
        lines.append(f"{worker}: {len(rows)} experiment(s) ("
                     + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                     + f"); last #{last['id']} {last['status']} since {last.get('started_at') or '?'}")
    return lines


def gpu_line(n: Night) -> str:
    g = n.gpu
    parts = []
    if g["names"]:
        parts.append("GPU " + ", ".join(f"{k} ({v})" for k, v in g["names"].items()))
    if g["peak_memory_mb"]:
        parts.append(f"peak memory {g['peak_memory_mb'][0]:.0f} MB (#{g['peak_memory_mb'][1]})")
    if g["mean_utilization_pct"] is not None:
        parts.append(f"mean utilisation {g['mean_utilization_pct']:.1f}% over {g['utilization_samples']} run(s)")
    if g["train_peak_memory_mb"]:
        parts.append(f"train.py peak memory {g['train_peak_memory_mb'][0]:.0f} MB (#{g['train_peak_memory_mb'][1]})")
    if g["lost"]:
        parts.append("GPU LOST in " + " ".join(f"#{i}" for i in g["lost"]))
    if g["xid"]:
        parts.append("Xid errors in " + " ".join(f"#{i}" for i in g["xid"]))
    if g["ecc"]:
        parts.append("new uncorrected ECC errors in " + " ".join(f"#{i}" for i in g["ecc"]))
    return "  " + ("; ".join(parts) if parts else "no GPU figures recorded")


def class_rows(n: Night) -> list[dict[str, Any]]:
    """Per class: baseline vs best precision and recall with deltas, rare classes marked."""
    names = [c for c in CLASSES if c in n.baseline_classes or c in n.best_classes]
    names += sorted((set(n.baseline_classes) | set(n.best_classes)) - set(names))
    rare = n.rare_classes
    rows = []
    for c in names:
        b, k = n.baseline_classes.get(c, {}), n.best_classes.get(c, {})
        pb, pk, rb, rk = _num(b.get("precision")), _num(k.get("precision")), _num(b.get("recall")), _num(k.get("recall"))
        rows.append({
            "class": c, "support": int(b.get("support") or k.get("support") or 0), "rare": c in rare,
            "p_base": pb, "p_best": pk, "d_precision": None if pb is None or pk is None else pk - pb,
            "r_base": rb, "r_best": rk, "d_recall": None if rb is None or rk is None else rk - rb,
        })
    return rows


# --------------------------------------------------------------------------- HTML


def write_html(store: Store, root: Path, out: Path, since: str | None = None) -> Path:
    """Write the morning report as ONE self-contained HTML page; returns ``out``."""
    from looper.report_html import render_html

    page = render_html(gather(store, root, since))
    out = Path(out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out


# --------------------------------------------------------------------------- history


def history_rows(store: Store, tag: str | None = None, status: str | Iterable[str] | None = None,
                 since: str | None = None, until: str | None = None) -> list[dict[str, Any]]:
    """Experiments as plain rows with :data:`HISTORY_KEYS` (``since`` inclusive, ``until`` exclusive,
    both on ``started_at``). ``status`` is one outcome or several; an unknown one is a clear error."""
    if status is not None:
        items = [status] if isinstance(status, str) else list(status)
        status = [Outcome.parse(s).value for s in items]
    rows = []
    for e in lean_experiments(store, tag=tag, status=status, since=since, until=until, figures=False):
        rows.append({k: e[k] for k in HISTORY_KEYS})
    return rows


def history_json(rows: list[dict[str, Any]]) -> str:
    """The rows as a JSON array (keys exactly :data:`HISTORY_KEYS`, in that order)."""
    return json.dumps([{k: r.get(k) for k in HISTORY_KEYS} for r in rows], indent=1, allow_nan=False)


def history_text(rows: list[dict[str, Any]], console_width: int = 140) -> str:
    """The rows as a rich table rendered to plain text."""
    from rich.table import Table
    from rich.text import Text

    con = _console(console_width)
    t = Table(show_edge=False, title=f"{len(rows)} experiment(s)", title_justify="left")
    for col in ("id", "tag", "kind", "status", "score", "commit", "started", "description", "why"):
        t.add_column(col, overflow="fold" if col in ("description", "why") else "ellipsis",
                     no_wrap=col not in ("description", "why"))
    for r in rows:
        why = r.get("failure_signature") or "; ".join(r.get("blocking") or [])
        t.add_row(f"#{r['id']}", Text(str(r["tag"])), str(r["kind"]), str(r["status"]), _fmt(r.get("score")),
                  (r.get("commit") or "")[:8], (r.get("started_at") or "")[:19].replace("T", " "),
                  Text(_t(r.get("description"))), Text(_t(why)[:160]))
    con.print(t)
    return con.file.getvalue()
