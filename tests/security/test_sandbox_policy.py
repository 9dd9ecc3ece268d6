"""The allowlist as argv (fast tier, no bwrap run): what each sandbox is built to show, and the
plumbing that feeds it (the pretrained folder, the test pages' secret seed). The real sandbox
proves the same with bwrap in test_sandbox_allowlist.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from looper.executors import evaluator, sandbox
from looper.executors.base import TrainJob
from looper.executors.common import prepare_local_data
from looper.executors.local import LocalExecutor
from looper.workspace.hashes import TEST_SEED_ENV, secret_seed_file


def _binds(argv: list[str]) -> dict[str, str]:
    """destination -> the bind option, for every --bind / --ro-bind / --tmpfs in a bwrap argv."""
    out = {}
    for i, a in enumerate(argv[:argv.index("--")]):
        if a in ("--bind", "--ro-bind"):
            out[argv[i + 2]] = a
        elif a == "--tmpfs":
            out[argv[i + 1]] = a
    return out


def _workspace(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "ws"
    for rel in ("data/tiles/train", "data/pages/val", "data/pages/test", "pretrained", ".looper/worktrees/t", "out"):
        (root / rel).mkdir(parents=True)
    (root / "data" / "dataset.yaml").write_text("x")
    (root / "data" / "manifest.json").write_text("{}")
    (root / ".looper" / "worktrees" / "t" / "train.py").write_text("x")
    return {"root": root, "data": root / "data", "checkout": root / ".looper" / "worktrees" / "t", "out": root / "out"}


def test_training_binds_only_its_allowlist(tmp_path: Path) -> None:
    w = _workspace(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    argv = sandbox.train_argv([sys.executable, "train.py"], checkout=w["checkout"], out_dir=w["out"],
                              data_dir=w["data"], env={}, home=home, pretrained=w["root"] / "pretrained")
    binds = _binds(argv)
    assert ("/", "/") not in zip(argv, argv[1:], strict=False)  # the host's root is never bound
    for dest in binds:  # nothing that holds the home, the workspace or the data is shown whole (empty tmpfs aside)
        for kept in (home, w["root"], w["data"]):
            assert not (Path(dest) == kept or Path(dest) in kept.parents) or dest in ("/tmp", "/dev/shm"), (dest, kept)
    data = {Path(d).relative_to(w["data"]).as_posix() for d in binds if Path(d).is_relative_to(w["data"])}
    assert data == set(sandbox.TRAIN_DATA_PARTS)
    assert binds[str(w["checkout"])] == "--tmpfs" and binds[str(w["checkout"] / "train.py")] == "--ro-bind"
    assert binds[str(w["root"] / "pretrained")] == "--ro-bind" and binds[str(w["out"])] == "--bind"
    assert [d for d, how in binds.items() if how == "--bind"] == [str(w["out"])]  # the one writable folder
    assert "--unshare-net" in argv and "--clearenv" in argv and "--die-with-parent" in argv


def test_the_evaluator_binds_the_manifest_and_pages_not_the_tiles(tmp_path: Path) -> None:
    w = _workspace(tmp_path)
    (w["out"] / "weights.pt").write_text("w")
    copy, eval_out = evaluator.prepare_evaluator(Path(sandbox.__file__), tmp_path / "eval")
    binds = _binds(sandbox.eval_argv(sys.executable, copy, weights=w["out"] / "weights.pt", data_dir=w["data"],
                                     out_dir=eval_out, env={}))
    data = {Path(d).relative_to(w["data"]).as_posix() for d in binds if Path(d).is_relative_to(w["data"])}
    assert data == set(sandbox.EVAL_DATA_PARTS)
    assert [d for d, how in binds.items() if how == "--bind"] == [str(eval_out)]
    assert str(w["out"] / "weights.pt") in binds and str(w["out"]) not in binds


def test_a_runtime_folder_that_holds_the_home_or_workspace_is_never_shown(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "home" / "ws"
    venv = ws / ".venv"
    kept = sandbox._safe_roots([Path("/"), tmp_path, home, venv, venv / "lib" / "site-packages", Path("/usr")],
                               keep_out=[home, ws])
    assert kept == [Path("/usr"), venv]  # not /, not the home or its parents; the venv inside it is fine


def test_the_local_executor_shows_the_pretrained_folder_and_names_it(tmp_path: Path) -> None:
    w = _workspace(tmp_path)
    ex = LocalExecutor(w["root"], python=sys.executable)
    job = TrainJob(checkout=w["checkout"], out_dir=w["out"], log_path=tmp_path / "train.log", seed=0,
                   budget_seconds=10, grace_seconds=5, stall_seconds=10)
    assert ex.train_env(job)["LOOPER_PRETRAINED_DIR"] == str(w["root"] / "pretrained")
    assert _binds(ex.train_argv(job))[str(w["root"] / "pretrained")] == "--ro-bind"
    (w["root"] / "pretrained").rmdir()
    assert "LOOPER_PRETRAINED_DIR" not in ex.train_env(job)
    assert str(w["root"] / "pretrained") not in _binds(ex.train_argv(job))


def test_prepare_is_told_where_the_secret_is_kept_through_its_environment(tmp_path: Path) -> None:
    """ensure_data: prepare.py learns the secret's file from $LOOPER_TEST_SEED_FILE, never its argv."""
    prepare = tmp_path / "prepare.py"
    prepare.write_text("import json, os, sys, pathlib\n"
                       "out = pathlib.Path(sys.argv[sys.argv.index('--out') + 1]); out.mkdir(parents=True)\n"
                       f"(out / 'manifest.json').write_text(json.dumps({{'env': os.environ.get({TEST_SEED_ENV!r}),"
                       " 'argv': sys.argv}))\n")
    root = tmp_path / "ws"
    root.mkdir()
    v = prepare_local_data(sys.executable, prepare, root / "data", "data", "tiny", 0, root, dict(os.environ))
    assert v.ok, v.blocking
    seen = json.loads((root / "data" / "manifest.json").read_text())
    assert seen["env"] == str(secret_seed_file(root)) == str(root / ".looper" / "test_seed")
    assert not any("test_seed" in a or "test-seed" in a for a in seen["argv"])
