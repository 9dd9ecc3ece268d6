"""evaluate.py run unchanged, plus the ranked stream it scores AP50 from (STREAM.json beside METRICS.json).

    python stream_eval.py --weights W --data D --out METRICS.json --split val [--device cpu]

The harness copies this file beside its fresh copy of evaluate.py (looper/executors/evaluator.py) and runs
it in the same evaluation sandbox. It loads that evaluate.py as a module and runs its own ``main`` with the
same arguments: METRICS.json and MATCHES.json are byte for byte what evaluate.py writes. The one thing
added: each page's match result, which evaluate.py hands to ``page_matches``, is read on its way there,
and every ranked prediction (class, full-precision score, matched or not, down to the stream confidence)
is pooled per class with the class's truth count, for the tuned-threshold report
(looper/core/scoring/threshold.py). Nothing here decides a score; the gate never reads STREAM.json.

It exits with evaluate.py's status, or 70 when evaluate.py has no ``main`` or ``page_matches`` it can hook
(another evaluate.py than looper's), writing no STREAM.json then.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

STREAM_NAME = "STREAM.json"
NO_HOOK = 70


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("looper_workspace_evaluate", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--split", default="test")
    known, _ = ap.parse_known_args(argv)
    ev = _load(Path(__file__).resolve().with_name("evaluate.py"))
    if ev is None or not callable(getattr(ev, "main", None)) or not callable(getattr(ev, "page_matches", None)):
        print("stream_eval.py: evaluate.py has no main and page_matches to hook", file=sys.stderr)
        return NO_HOOK
    ranked: dict[str, list[list[Any]]] = {}
    support: dict[str, int] = {}
    original = ev.page_matches

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = kwargs.get("result")
        if result is None:
            raise SystemExit("stream_eval.py: evaluate.py did not hand page_matches its match result")
        for c, rows in result.ranked.items():
            ranked.setdefault(c, []).extend([float(s), bool(m)] for s, m in rows)
        for c, flags in result.found.items():
            support[c] = support.get(c, 0) + len(flags)
        return original(*args, **kwargs)

    ev.page_matches = spy
    code = ev.main(argv)
    if code:
        return int(code)
    metrics = json.loads(known.out.read_text())
    stream = {"schema": 1, "split": known.split, "confidence": metrics.get("confidence"),
              "ap_confidence": metrics.get("ap_confidence"), "pages": metrics.get("pages"),
              "classes": list(metrics.get("classes") or {}), "support": support, "ranked": ranked}
    tmp = known.out.with_name(STREAM_NAME + ".tmp")
    tmp.write_text(json.dumps(stream, separators=(",", ":")) + "\n")
    tmp.replace(known.out.with_name(STREAM_NAME))
    print(f"stream_eval.py: {sum(map(len, ranked.values()))} ranked predictions of {len(ranked)} classes -> "
          f"{STREAM_NAME}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
