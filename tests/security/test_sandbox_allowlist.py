"""Issue 23: the sandboxes are deny by default. With the real bwrap, a program inside each one lists
what it can reach in a workspace laid out as looper lays it out; only the allowlist is there.

Training sees: the system and the Python runtime, its checkout's train.py (nothing else of the
checkout), the data's dataset.yaml, tiles/ and pages/val/, the workspace's pretrained/ folder,
its $LOOPER_OUT (writable) and a private /tmp. Not: $HOME, the database and its -shm/-wal,
runs/, .looper (the test seed), .git, baselines/, prepare.py, the manifest, the test pages, other
workers' checkouts, the packaged workspace template. The evaluator sees the runtime, its copy of
evaluate.py, the weights, the manifest and the pages, and writes only its output folder.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from looper import proc
from looper.executors import evaluator, pyruntime, sandbox

pytestmark = pytest.mark.e2e

PROBE = """
import json, os, sys
paths = json.loads(sys.argv[-1])  # the paths to look for, as the last argument
seen = {p: os.path.exists(p) for p in paths}
print("PROBE " + json.dumps({"seen": seen, "cwd": sorted(os.listdir(".")), "root": sorted(os.listdir("/")),
                             "etc": sorted(os.listdir("/etc"))}))
"""


@pytest.fixture()
def layout(tmp_path: Path) -> dict[str, Path]:
    """A workspace as looper lays it out (files with content), a home with the secrets file, one more worker."""
    root = tmp_path / "ws"
    files = {
        "experiments.db": "db", "experiments.db-shm": "shm", "experiments.db-wal": "wal",
        "prepare.py": "# prepare", "evaluate.py": "# evaluate", "looper.toml": "[loop]", "program.md": "# p",
        ".git/config": "[core]", "baselines/2025-01-01.json": "{}", ".looper/test_seed": "0" * 32,
        ".looper/logs/daemon.log": "log", "runs/t/00001/main-s0/out/weights.pt": "old weights",
        "data/manifest.json": "{}", "data/dataset.yaml": "train: tiles/train/images",
        "data/tiles/train/images/t0.png": "tile", "data/tiles/val/images/v0.png": "tile",
        "data/pages/val/page_000.json": "{}", "data/pages/test/page_000.json": "{}",
        "pretrained/start.safetensors": "w",
        ".looper/worktrees/t/train.py": "# train", ".looper/worktrees/t/prepare.py": "# prepare copy",
        ".looper/worktrees/t/.git": "gitdir: x", ".looper/worktrees/t-w1/train.py": "# other worker",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    home = tmp_path / "home"
    (home / ".config" / "looper").mkdir(parents=True)
    (home / ".config" / "looper" / "ws.env").write_text("OPENAI_API_KEY=sk-planted\n")
    out = root / "runs" / "t" / "00002" / "main-s0" / "out"
    out.mkdir(parents=True)
    return {"root": root, "home": home, "out": out, "checkout": root / ".looper" / "worktrees" / "t",
            "data": root / "data"}


def _probe(argv: list[str], cwd: Path) -> dict:
    done = proc.run(argv, cwd=cwd, timeout=120)
    assert done.ok, done.stdout + done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])


def test_training_sees_only_its_allowlist(layout: dict[str, Path]) -> None:
    root, ck = layout["root"], layout["checkout"]
    visible = [ck / "train.py", root / "data/dataset.yaml", root / "data/tiles/train/images/t0.png",
               root / "data/tiles/val/images/v0.png", root / "data/pages/val/page_000.json",
               root / "pretrained/start.safetensors", layout["out"]]
    absent = [layout["home"], layout["home"] / ".config/looper/ws.env", root / "experiments.db",
              root / "experiments.db-shm", root / "experiments.db-wal", root / "prepare.py", root / "evaluate.py",
              root / "looper.toml", root / "program.md", root / ".git", root / "baselines", root / ".looper/test_seed",
              root / ".looper/logs", root / "runs/t/00001", root / "data/manifest.json", root / "data/pages/test",
              ck / "prepare.py", ck / ".git", root / ".looper/worktrees/t-w1"]
    (ck / "train.py").write_text(textwrap.dedent(PROBE))
    argv = sandbox.train_argv([sys.executable, "train.py", json.dumps([str(p) for p in visible + absent])],
                              checkout=ck, out_dir=layout["out"], data_dir=layout["data"], env={},
                              home=layout["home"], pretrained=root / "pretrained")
    got = _probe(argv, ck)
    assert [p for p in visible if not got["seen"][str(p)]] == [], "something training needs is missing"
    assert [p for p in absent if got["seen"][str(p)]] == [], "the sandbox shows what it must not"
    assert got["cwd"] == ["train.py"]  # the checkout holds train.py and nothing else
    allowed_top = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "tmp", "usr"}
    extra = set(got["root"]) - allowed_top
    runtime_tops = {Path(p).parts[1] for p in [sys.prefix, sys.base_prefix, str(root), sandbox.__file__]}
    assert extra <= runtime_tops, f"top-level folders that are neither system nor runtime: {extra - runtime_tops}"
    assert set(got["etc"]) <= {Path(f).name for f in sandbox.ETC_FILES}, got["etc"]
    assert "shadow" not in got["etc"] and "ssh" not in got["etc"]


def test_the_packaged_workspace_template_is_not_there(layout: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-editable install ships prepare.py in looper/workspace_template/: never shown."""
    pkg = tmp_path / "site" / "looper"
    (pkg / "workspace_template").mkdir(parents=True)
    (pkg / "workspace_template" / "prepare.py").write_text("# the generator\n")
    (pkg / "__init__.py").write_text("")
    real = pyruntime.runtime_paths
    monkeypatch.setattr(pyruntime, "runtime_paths", lambda python: (real(python)[0], [*real(python)[1], pkg]))
    ck = layout["checkout"]
    (ck / "train.py").write_text(textwrap.dedent(PROBE))
    probe = [str(pkg / "__init__.py"), str(pkg / "workspace_template" / "prepare.py")]
    argv = sandbox.train_argv([sys.executable, "train.py", json.dumps(probe)], checkout=ck, out_dir=layout["out"],
                              data_dir=layout["data"], env={}, home=layout["home"])
    got = _probe(argv, ck)
    assert got["seen"] == {probe[0]: True, probe[1]: False}


def test_the_evaluator_sees_only_its_allowlist(layout: dict[str, Path], tmp_path: Path) -> None:
    root = layout["root"]
    weights = layout["out"] / "weights.pt"
    weights.write_text("w")
    evaluate = tmp_path / "evaluate_src.py"
    evaluate.write_text(textwrap.dedent(PROBE))
    copy, eval_out = evaluator.prepare_evaluator(evaluate, layout["out"].parent / "eval")
    visible = [weights, copy, root / "data/manifest.json", root / "data/pages/test/page_000.json", eval_out]
    absent = [layout["home"], root / "experiments.db", root / "experiments.db-shm", root / ".looper/test_seed",
              root / "runs/t/00001", root / "prepare.py", root / ".git", root / "data/tiles", root / "pretrained",
              layout["checkout"] / "train.py", layout["out"] / "train.json"]
    argv = sandbox.eval_argv(sys.executable, copy, weights=weights, data_dir=layout["data"], out_dir=eval_out,
                             env={}, device="cpu")
    argv += [json.dumps([str(p) for p in visible + absent])]  # evaluate.py's argv, then the probe's list
    got = _probe(argv, tmp_path)
    assert [p for p in visible if not got["seen"][str(p)]] == []
    assert [p for p in absent if got["seen"][str(p)]] == []
