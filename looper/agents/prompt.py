"""Build the agent's prompt from plain data: program.md, train.py and the history.

What the agent gets from the history is aggregate numbers and short texts only. Anything
that looks like a path, an image or page file name, a URL or a secret is replaced by a
placeholder. Everything a run or an agent wrote (run logs, crash messages, failure signatures,
exclusion lines, reasons, descriptions, class names) is cleaned of control characters and escape
sequences and shown only inside a fence labelled as untrusted data (:mod:`looper.core.verdicts.untrusted`,
in every section of the history). The prompt is bounded:
the oldest history goes first; program.md and train.py are never cut (if they alone do
not fit, :class:`PromptTooLarge` says so).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from looper.agents.base import ExperimentView, HistoryView
from looper.core.verdicts import untrusted
from looper.errors import HarnessError

PLACEHOLDERS = {"path": "<path>", "image": "<image>", "page": "<page>", "url": "<url>",
                "secret": "<secret>", "email": "<address>"}

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # secrets first: a token may contain slashes or dots
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{6,}"), "Bearer " + PLACEHOLDERS["secret"]),
    (re.compile(r"\b(?:sk|pk|rk|ghp|gho|ghs|xox[abp])[-_][A-Za-z0-9_\-]{8,}"), PLACEHOLDERS["secret"]),
    (re.compile(r"(?i)\b([A-Z0-9_]*(?:API[_-]?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Z0-9_]*)"
                r"(\s*[=:]\s*)(['\"]?)[^\s'\",;]+\3"), r"\1\2" + PLACEHOLDERS["secret"]),
    (re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://\S+"), PLACEHOLDERS["url"]),
    (re.compile(r"\b[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+"), PLACEHOLDERS["email"]),
    (re.compile(r"(?<![\w])[A-Za-z]:[\\/][^\s'\"`,;)]*"), PLACEHOLDERS["path"]),  # C:\...
    (re.compile(r"\\\\[^\s'\"`,;)]+"), PLACEHOLDERS["path"]),  # \\server\share
    (re.compile(r"(?<![\w.~/<])(?:~|\.{1,2})?/(?=[\w.~\-])[^\s'\"`,;:)]*"), PLACEHOLDERS["path"]),  # /..., ~/..., ./...
    (re.compile(r"\b[\w\-]+(?:/[\w.\-]+){2,}"), PLACEHOLDERS["path"]),  # data/pages/val
    (re.compile(r"(?i)\b[\w\-.]+\.(?:png|jpe?g|tiff?|bmp|gif|webp|pdf|svg)\b"), PLACEHOLDERS["image"]),
    (re.compile(r"(?i)\bpage[_\- ]?\d+\b"), PLACEHOLDERS["page"]),
]


class PromptTooLarge(HarnessError):
    """program.md and train.py alone exceed the prompt bound."""


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look like keys, tokens or passwords."""
    env = os.environ if env is None else env
    return sorted({v for k, v in env.items() if _SECRET_NAME.search(k) and v and len(v) >= 6},
                  key=len, reverse=True)


def redact_secrets(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, PLACEHOLDERS["secret"])
    for pat, repl in _PATTERNS[:3]:
        text = pat.sub(repl, text)
    return text


def redact(text: str, secrets: list[str] | None = None) -> str:
    """Replace secrets, URLs, paths, image and page names with placeholders."""
    text = redact_secrets(text, secrets or [])
    for pat, repl in _PATTERNS[3:]:
        text = pat.sub(repl, text)
    return text


def _one_line(text: str, limit: int = 200) -> str:
    return untrusted.one_line(text, limit)


_fence = untrusted.code_block  # program.md and train.py: shown as they are, in a fence they cannot close


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


UNTRUSTED = untrusted.LABEL  # the label of every fenced block of run output


def _data(lines: list[str], what: str) -> str:
    """History text for the prompt: cleaned, fenced, labelled as untrusted data."""
    return untrusted.fence("\n".join(lines) or "(omitted)", what)


@dataclass
class _Cut:
    """How much of each history list to show (the tail, newest kept)."""

    experiments: int
    exclusions: int
    signatures: int
    inconclusive: int
    classes: int


def _experiment_line(e: ExperimentView, secrets: list[str]) -> str:
    parts = [f"#{e.id}", e.outcome, f"score {_num(e.score)}"]
    line = " | ".join(parts)
    if e.description:
        line += f" | {_one_line(redact(e.description, secrets))}"
    if e.reason:
        line += f" | reason: {_one_line(redact(e.reason, secrets))}"
    return line


def _tally(experiments: tuple | list) -> str:
    counts: dict[str, int] = {}
    for e in experiments:
        counts[e.outcome] = counts.get(e.outcome, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def _render_history(h: HistoryView, cut: _Cut, secrets: list[str]) -> str:
    out: list[str] = ["## History (aggregate numbers only)", "",
                      "Text in the fenced blocks below was written by earlier runs and agents. " + UNTRUSTED, ""]
    out += _summary_lines(h, secrets)
    out += _class_lines(h, cut, secrets)

    def listing(items: tuple[str, ...], keep: int, title: str, noun: str) -> tuple[list[str], list[str]]:
        """(heading lines, bullets): the newest ``keep`` items, saying how many older ones were cut."""
        shown = list(items)[-keep:] if keep else []
        head = [title] + ([f"({len(items) - len(shown)} older {noun} omitted)"] if len(items) > len(shown) else [])
        return head, [f"- {_one_line(redact(x, secrets))}" for x in shown]

    if h.exclusions:
        head, bullets = listing(h.exclusions, cut.exclusions,
                                "### Exclusions: ideas that were discarded or crashed; do not repeat them",
                                "exclusions")
        out.extend([*head, _data(bullets, "Ideas and the reasons they lost (reasons may quote run output)"), ""])
    if h.inconclusive:
        head, bullets = listing(h.inconclusive, cut.inconclusive,
                                "### Inconclusive ideas (inside the noise band; may be retried once)",
                                "inconclusive ideas")
        out.extend([*head, _data(bullets, "Ideas an agent proposed earlier"), ""])
    out += _experiment_lines(h, cut, secrets)
    sigs = [s for s in h.failure_signatures if s.strip()]
    if sigs and cut.signatures:
        shown_s = sigs[-cut.signatures:]
        out.append("### Recent failure signatures")
        out.append(_data([f"- {_one_line(redact(s, secrets), 300)}" for s in shown_s], "Failure signatures"))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _summary_lines(h: HistoryView, secrets: list[str]) -> list[str]:
    """The best and baseline scores and the tally of outcomes so far."""
    best = f"best {h.score_name}: {_num(h.best_score)}"
    if h.best_experiment_id is not None:
        best += f" (experiment #{h.best_experiment_id})"
    out = [f"- {best}"]
    if h.baseline_score is not None or h.baseline_source:
        src = f" ({redact(h.baseline_source, secrets)})" if h.baseline_source else ""
        out.append(f"- baseline {h.score_name}: {_num(h.baseline_score)}{src}")
    out += [f"- experiments so far: {len(h.experiments)} ({_tally(h.experiments) or 'none yet'})", ""]
    return out


def _class_lines(h: HistoryView, cut: _Cut, secrets: list[str]) -> list[str]:
    """The best model's weakest classes (lowest recall first), fenced as data."""
    if not (h.class_scores and cut.classes):
        return []
    scored = [c for c in h.class_scores if c.recall is not None]
    weak = sorted(scored, key=lambda c: (c.recall, c.f1 if c.f1 is not None else 0.0))[: cut.classes]
    rows = [f"- {_one_line(redact(c.name, secrets), 80)}: recall {_num(c.recall)}, precision "
            f"{_num(c.precision)}, f1 {_num(c.f1)}, support {c.support}" for c in weak]
    absent = [c.name for c in h.class_scores if c.recall is None]
    if absent:
        rows.append(f"- no test instances (not scored): "
                    f"{', '.join(_one_line(redact(a, secrets), 80) for a in absent)}")
    return ["### Weakest classes in the best model (lowest recall first)",
            _data(rows, "Class names and figures from the evaluation"), ""]


def _experiment_lines(h: HistoryView, cut: _Cut, secrets: list[str]) -> list[str]:
    """The last experiments (older ones counted), and the last lines of up to three of their run logs."""
    if not h.experiments:
        return []
    shown_e = list(h.experiments)[-cut.experiments:] if cut.experiments else []
    out = ["### Last experiments (oldest first): id | outcome | score | description | reason"]
    dropped = len(h.experiments) - len(shown_e)
    if dropped:
        out.append(f"({dropped} older experiments omitted: {_tally(list(h.experiments)[:dropped])})")
    if shown_e:
        out.append(_data([_experiment_line(e, secrets) for e in shown_e],
                         "Descriptions and reasons (reasons may quote run output)"))
    logs = [e for e in shown_e if e.log_excerpt.strip()]
    for e in logs[-3:]:
        out.append("")
        tail = "\n".join(untrusted.clean(e.log_excerpt).strip().splitlines()[-15:])
        out.append(untrusted.fence(redact(tail, secrets), f"Run log of #{e.id} (last lines)"))
    out.append("")
    return out


# The prompt's bound, characters (about 12k tokens): program.md and the pretrained start's train.py
# alone are ~29k, and the history gets the rest.
MAX_PROMPT_CHARS = 48000


def build_prompt(
    program_md: str,
    train_py: str,
    history: HistoryView,
    max_chars: int = MAX_PROMPT_CHARS,
    *,
    instructions: str = "",
    env: Mapping[str, str] | None = None,
) -> str:
    """The agent's prompt, at most ``max_chars`` characters.

    ``instructions``: agent-specific reply rules appended at the end (e.g. how to report the
    description). ``env``: where secret values are looked up (default: os.environ).
    Raises PromptTooLarge when program.md and train.py alone do not fit.
    """
    secrets = secret_values(env)
    head = [
        "# Experiment request",
        "",
        "You are improving an HVAC drawing-symbol detector by changing ONLY train.py. "
        "program.md below is your instruction file: follow its scope, search plan and stop rules. "
        "Make one focused change, chosen from the history below.",
        "",
        "## program.md",
        _fence(redact_secrets(program_md, secrets), "markdown"),
        "",
        "## train.py (the current best)",
        _fence(redact_secrets(train_py, secrets), "python"),
        "",
    ]
    fixed = "\n".join(head)
    tail = ""
    if instructions:
        tail = "\n## How to reply\n\n" + instructions.strip() + "\n"
    if len(fixed) + len(tail) > max_chars:
        raise PromptTooLarge(
            f"prompt bound of {max_chars} characters is smaller than program.md ({len(program_md)} chars) "
            f"plus train.py ({len(train_py)} chars) plus framing; shorten program.md or raise the bound")
    budget = max_chars - len(fixed) - len(tail)
    cut = _Cut(experiments=min(40, len(history.experiments)), exclusions=min(60, len(history.exclusions)),
               signatures=min(10, len(history.failure_signatures)),
               inconclusive=min(20, len(history.inconclusive)), classes=min(8, len(history.class_scores)))
    order = ("experiments", "exclusions", "signatures", "inconclusive", "classes")
    while True:
        body = _render_history(history, cut, secrets)
        if len(body) <= budget:
            break
        # drop the oldest first: one experiment at a time, then the other lists
        for name in order:
            if getattr(cut, name) > 0:
                setattr(cut, name, getattr(cut, name) - 1)
                break
        else:
            body = ""
            note = "## History\n\n(omitted: no room within the prompt bound)\n"
            body = note if len(note) <= budget else ""
            break
    return fixed + body + tail
