"""``looper history``: every experiment as a plain row, as JSON or a table."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from looper.core.verdicts.verdict import Outcome
from looper.report.fmt import clean, console, fmt
from looper.store import Store
from looper.store.queries import lean_experiments

__all__ = ["HISTORY_KEYS", "history_json", "history_rows", "history_text"]

#: The keys of every ``looper history --json`` row, in this order (stable: scripts rely on them).
HISTORY_KEYS: tuple[str, ...] = (
    "id", "tag", "kind", "commit", "parent", "status", "score", "description", "started_at",
    "finished_at", "failure_signature", "blocking",
    # runs and minutes of its decision (verdict cost; None: not recorded), and every confirmation of it on
    # fresh seeds (looper confirm): its confirmed difference over the baseline beside ``score``, the
    # selection-time figure
    "cost", "confirmations",
    # its runs: role, seed, score, device, train.py's peak memory and the harness's GPU figures of each
    # (looper.store.queries.run_figures)
    "runs",
)


def history_rows(store: Store, tag: str | None = None, status: str | Iterable[str] | None = None,
                 since: str | None = None, until: str | None = None) -> list[dict[str, Any]]:
    """Experiments as plain rows with :data:`HISTORY_KEYS` (``since`` inclusive, ``until`` exclusive,
    both on ``started_at``). ``status`` is one outcome or several; an unknown one is a clear error.
    Free text comes back redacted."""
    wanted = None
    if status is not None:
        wanted = [Outcome.parse(s) for s in ([status] if isinstance(status, str) else list(status))]
    from looper.report.confirm import costs_by_experiment
    from looper.store.queries import confirmations, run_figures

    rows = []
    costs = costs_by_experiment(store, tag=tag, since=since)
    runs = run_figures(store, tag=tag, since=since)
    confirmed: dict[int, list[dict[str, Any]]] = {}
    for c in confirmations(store, tag):
        if c.experiment_id is not None:
            d = c.to_dict()
            d["headline"] = clean(d["headline"])
            d["wall_seconds"] = round(c.wall_seconds, 3)  # its clock time; "seconds": its runs' time added up
            confirmed.setdefault(c.experiment_id, []).append(d)
    for e in lean_experiments(store, tag=tag, status=wanted, since=since, until=until, figures=False, clean=clean):
        row = {k: getattr(e, k) for k in HISTORY_KEYS if k not in ("cost", "confirmations", "runs")}
        row["status"], row["blocking"] = e.status.value, list(e.blocking)
        row["cost"], row["confirmations"] = costs.get(e.id), confirmed.get(e.id, [])
        row["runs"] = runs.get(e.id, [])
        rows.append(row)
    return rows


def history_json(rows: list[dict[str, Any]]) -> str:
    """The rows as a JSON array (keys exactly :data:`HISTORY_KEYS`, in that order)."""
    return json.dumps([{k: r.get(k) for k in HISTORY_KEYS} for r in rows], indent=1, allow_nan=False)


def history_text(rows: list[dict[str, Any]], console_width: int = 140) -> str:
    """The rows as a rich table rendered to plain text."""
    from rich.table import Table
    from rich.text import Text

    con = console(console_width)
    t = Table(show_edge=False, title=f"{len(rows)} experiment(s)", title_justify="left")
    for col in ("id", "tag", "kind", "status", "score", "commit", "started", "description", "why"):
        t.add_column(col, overflow="fold" if col in ("description", "why") else "ellipsis",
                     no_wrap=col not in ("description", "why"))
    for r in rows:
        why = r.get("failure_signature") or "; ".join(r.get("blocking") or [])
        t.add_row(f"#{r['id']}", Text(str(r["tag"])), str(r["kind"]), str(r["status"]), fmt(r.get("score")),
                  (r.get("commit") or "")[:8], (r.get("started_at") or "")[:19].replace("T", " "),
                  Text(clean(r.get("description"))), Text(clean(why)[:160]))
    con.print(t)
    return con.file.getvalue()  # type: ignore[no-any-return]
