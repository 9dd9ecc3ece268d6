"""What issue 39's checks cost per experiment (bench/RESULTS.md, "Run limits and the runtime pin").

    .venv/bin/python bench/pin_cost.py [--repeat 10]

- the runtime pin (looper/workspace/runtimepin.py): one fingerprint of this interpreter, its site-packages
  and the looper package, taken twice per measured run (preflight, after training);
- the recount (looper/core/scoring/recount.py) of a METRICS.json from a MATCHES.json of 50 pages with
  about 100 boxes each (the full preset's scale is 50 test pages);
- the agent's box (looper/agents/sandbox.py): one command agent call that edits train.py with
  sed, boxed and with the opt-out, side by side.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _timed(fn, repeat: int) -> list[float]:  # noqa: ANN001
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _say(what: str, times: list[float]) -> None:
    print(f"{what}: median {statistics.median(times) * 1000:.0f} ms, min {min(times) * 1000:.0f} ms, "
          f"max {max(times) * 1000:.0f} ms over {len(times)}")


def _matches_pair() -> tuple[dict, dict]:
    from looper.core.scoring.metrics import Detection, evaluate_pages, matches_file, page_matches

    rng = random.Random(0)
    classes = [f"c{i}" for i in range(20)]
    pages = []
    for p in range(50):
        truth = [Detection(rng.choice(classes), (x, y, x + 30, y + 30))
                 for x, y in ((rng.uniform(0, 2000), rng.uniform(0, 2000)) for _ in range(80))]
        preds = [Detection(t.cls if rng.random() < 0.8 else rng.choice(classes),
                           (t.box[0] + 3, t.box[1] + 3, t.box[2] + 3, t.box[3] + 3), rng.random()) for t in truth]
        pages.append((f"page_{p:03d}.png", preds, truth))
    metrics = evaluate_pages([(pr, t) for _, pr, t in pages], classes)
    return metrics, matches_file([page_matches(n, pr, t) for n, pr, t in pages], classes)


def _agent_call(boxed: bool) -> float:
    from looper.agents.base import AgentContext
    from looper.agents.command import CommandAgent
    from looper.agents.sandbox import AgentBox

    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "ck"
        ck.mkdir()
        (ck / "train.py").write_text("LR0 = 0.01\n")
        agent = CommandAgent("sed -i s/0.01/0.02/ train.py", box=AgentBox(mode="bwrap" if boxed else "none"))
        t = time.perf_counter()
        agent.propose(AgentContext(checkout=ck, train_py="LR0 = 0.01\n", program_md="", prompt="p"))
        return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    from looper.core.scoring.recount import disagreements
    from looper.workspace.runtimepin import SITE_NAMES, runtime_hashes, site_folders

    got = runtime_hashes()
    files = 0
    for folder in site_folders():
        for top, dirs, fs in os.walk(folder):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not (top == folder and d in SITE_NAMES)]
            files += len(fs)
    print(f"runtime pin: {len(got)} entries over {files} files in {len(site_folders())} folders")
    _say("runtime pin, one check", _timed(runtime_hashes, a.repeat))
    metrics, matches = _matches_pair()
    assert disagreements(metrics, matches) == []
    _say("recount, 50 pages x 80 boxes", _timed(lambda: disagreements(metrics, matches), a.repeat))
    _say("command agent, boxed", [_agent_call(True) for _ in range(a.repeat)])
    _say("command agent, sandbox = none", [_agent_call(False) for _ in range(a.repeat)])


if __name__ == "__main__":
    main()
