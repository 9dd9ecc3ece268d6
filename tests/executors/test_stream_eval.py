"""The threshold evaluation's seam (looper/executors/streameval.py through LocalExecutor.evaluate_stream), on a
stand-in evaluate.py: evaluate.py's own main runs with the arguments given (the split too), each page's match
result is pooled into STREAM.json beside METRICS.json and MATCHES.json, and an evaluate.py it cannot hook or
one that fails leaves no STREAM.json. The real evaluator: tests/e2e/test_threshold.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from looper.executors import EvalJob
from looper.executors.local import LocalExecutor
from looper.executors.sandbox import SandboxPolicy
from looper.executors.streameval import NO_HOOK

STAND_IN = '''
import argparse, json, sys
from types import SimpleNamespace
from pathlib import Path


def page_matches(name, preds, gt, iou, conf, result=None):
    return {"page": name}


def main(argv):
    ap = argparse.ArgumentParser()
    for a in ("--weights", "--data", "--out", "--device"):
        ap.add_argument(a)
    ap.add_argument("--split", default="test")
    args = ap.parse_args(argv)
    if args.split == "boom":
        print("evaluate.py: no such split", file=sys.stderr)
        return 2
    for k in range(2):
        res = SimpleNamespace(ranked={"a": [(0.9 - k / 10, True), (0.125, False)]}, found={"a": [True, False]})
        page_matches(f"p{k}", [], [], 0.5, 0.25, result=res)
    out = Path(args.out)
    out.with_name("MATCHES.json").write_text("{}")
    out.write_text(json.dumps({"confidence": 0.25, "ap_confidence": 0.001, "pages": 2,
                               "classes": {"a": {}, "b": {}}, "split": args.split}))
    return 0
'''


def _run(tmp_path: Path, source: str, split: str):  # noqa: ANN202
    ck = tmp_path / "ck"
    ck.mkdir(exist_ok=True)
    (ck / "evaluate.py").write_text(source)
    (tmp_path / "w.pt").write_bytes(b"w")
    ex = LocalExecutor(tmp_path, python=sys.executable, sandbox=SandboxPolicy(mode="none"))
    metrics = tmp_path / "tuned" / split / "METRICS.json"
    metrics.parent.mkdir(parents=True)
    r = ex.evaluate_stream(EvalJob(checkout=ck, weights=tmp_path / "w.pt", metrics_path=metrics,
                                   log_path=metrics.with_name("eval.log"), timeout_seconds=60, stall_seconds=60), split)
    return r, metrics


def test_the_stream_is_pooled_beside_evaluate_pys_own_output(tmp_path: Path) -> None:
    r, metrics = _run(tmp_path, STAND_IN, "val")
    assert r.clean_exit, r.log_tail
    assert json.loads(metrics.read_text())["split"] == "val"  # evaluate.py's main saw --split val
    assert metrics.with_name("MATCHES.json").read_text() == "{}"
    stream = json.loads(metrics.with_name("STREAM.json").read_text())
    assert stream == {"schema": 1, "split": "val", "confidence": 0.25, "ap_confidence": 0.001, "pages": 2,
                      "classes": ["a", "b"], "support": {"a": 4},
                      "ranked": {"a": [[0.9, True], [0.125, False], [0.8, True], [0.125, False]]}}


@pytest.mark.parametrize(("source", "split", "code", "words"), [
    (STAND_IN, "boom", 2, "no such split"),
    ("def main(argv):\n    return 0\n", "val", NO_HOOK, "has no main and page_matches to hook"),
    (STAND_IN.replace("result=res)", "result=None)"), "val", 1, "did not hand page_matches its match result"),
])
def test_what_it_cannot_measure_leaves_no_stream(tmp_path: Path, source: str, split: str, code: int,
                                                 words: str) -> None:
    r, metrics = _run(tmp_path, source, split)
    assert r.exit_code == code and words in r.log_tail
    assert not metrics.with_name("STREAM.json").exists()


def test_weights_that_are_not_a_plain_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "w.pt").symlink_to("/etc/hostname")
    ex = LocalExecutor(tmp_path, python=sys.executable, sandbox=SandboxPolicy(mode="none"))
    r = ex.evaluate_stream(EvalJob(checkout=tmp_path, weights=tmp_path / "w.pt", metrics_path=tmp_path / "M.json",
                                   log_path=tmp_path / "eval.log", timeout_seconds=60, stall_seconds=60), "val")
    assert r.exit_code == 65 and "symbolic link" in r.log_tail
