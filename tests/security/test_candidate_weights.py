"""Issue 23, finding 4, on real weights: the real evaluate.py refuses weights whose header names the
classes in another order (or another count) with the ONE exit status for bad weights (65,
``WEIGHTS_REFUSED``), which the loop records as the candidate's crash. It used to exit 2, and
any exit but 65 was a harness error: a halt and a page.

The train.py is test_attacks.py's honest part (a few real optimiser steps of a tiny YOLO detector,
saved as looper-weights/1) in the real training sandbox, then the header rewritten; evaluation runs
in the real evaluation sandbox. tests/security/test_candidate_faults.py shows the daemon side.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from looper import proc
from looper.executors import evaluator, sandbox
from looper.executors.sandbox import WEIGHTS_REFUSED_EXIT
from security.test_attacks import HONEST, train_in_sandbox, workspace  # noqa: F401  (the fixture)

pytestmark = [
    pytest.mark.e2e,
]

REWRITE = '''
names2 = {names}
cfg["nc"] = len(names2)
model2 = DetectionModel(cfg, ch=3, nc=len(names2), verbose=False)  # tensors that fit the header's classes
tensors2 = {{k: v.detach().clone().contiguous() for k, v in model2.state_dict().items()}}
save_file(tensors2, str(OUT / "weights.pt"), metadata={{
    "format": "looper-weights/1", "model_yaml": yaml.safe_dump(dict(model2.yaml), sort_keys=False),
    "names": json.dumps(names2)}})
'''


@pytest.mark.parametrize("how", ["another order", "one class short"])
def test_real_evaluate_refuses_class_names_that_differ_with_exit_65(how: str, workspace: dict[str, Path]) -> None:  # noqa: F811
    root, data, out = workspace["root"], workspace["data"], workspace["out"]
    names = "list(reversed(names))" if how == "another order" else "names[:-1]"
    (root / "train.py").write_text(HONEST + textwrap.dedent(REWRITE.format(names=names)))
    run = train_in_sandbox(workspace)
    assert run.exit_code == 0, run.log_tail
    copy, eval_out = evaluator.prepare_evaluator(root / "evaluate.py", out.parent / "eval")
    ev = proc.supervise(sandbox.eval_argv(sys.executable, copy, weights=out / "weights.pt", data_dir=data,
                                          out_dir=eval_out, env={"YOLO_OFFLINE": "1"}, device="cpu"),
                        cwd=out.parent, env=None, log_path=out.parent / "eval.log",
                        limits=proc.Limits(budget_seconds=400, stall_seconds=200))
    assert ev.exit_code == WEIGHTS_REFUSED_EXIT == 65, ev.log_tail
    assert "weights refused" in ev.log_tail
    assert "the model's classes" in ev.log_tail and "differ from the data set's" in ev.log_tail, ev.log_tail
    assert not (eval_out / "METRICS.json").exists()
