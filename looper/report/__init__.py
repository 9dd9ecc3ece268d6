"""The morning report and the history: what the night did, read back from ``experiments.db``.

Everything here only reads, through the store's records and queries. The layers, each
importing only the ones above it (no circle):

- :mod:`~looper.report.fmt`: redaction of free text, numbers, durations, id lists;
- :mod:`~looper.report.facts`: :func:`gather` collects the facts of one window (by default
  the last daemon run, from its latest ``start`` event) into a :class:`Night`;
  :mod:`~looper.report.night` (the values), :mod:`~looper.report.attention`,
  :mod:`~looper.report.classes`, :mod:`~looper.report.noise` and :mod:`~looper.report.lines`
  (what the pages derive from them) sit below it;
- :mod:`~looper.report.text`: :func:`report_text` renders it for a terminal;
- :mod:`~looper.report.svg`: the plots, hand-written inline SVG;
- :mod:`~looper.report.html_page`: :func:`write_html` writes ONE self-contained HTML page
  (inline CSS and SVG; no script, no external URL);
- :mod:`~looper.report.history`: ``looper history`` (:func:`history_rows`, ``_text``, ``_json``).

Every number shown names the experiment it comes from (``#id``). The gate's statistics are
read from each verdict's metrics (:class:`~looper.report.night.Judgement`): the noise band and
the score test in words per judged experiment, why a night kept nothing, error bars (mean ±
band) on the score plot and 95 % Wilson intervals of the per-class recall. No secret is ever shown:
the store holds none, configuration values are never printed, and every free text (event
messages, blocking reasons, descriptions, rationales, diffs) goes through
:func:`looper.core.verdicts.untrusted.redact` on its way out.
"""

from looper.report.facts import gather
from looper.report.history import HISTORY_KEYS, history_json, history_rows, history_text
from looper.report.html_page import render_html, write_html
from looper.report.night import Attention, CrashGroup, KeptChange, NearMiss, Night
from looper.report.text import render_text, report_text

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
    "render_html",
    "render_text",
    "report_text",
    "write_html",
]
