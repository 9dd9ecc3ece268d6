"""Daemon git runs with hooks off: a hook planted in the workspace repository never runs.

``git commit --no-verify`` skips only pre-commit and commit-msg; post-commit,
prepare-commit-msg, reference-transaction and post-checkout still run in the daemon's process
tree unless ``core.hooksPath`` points at an empty folder (looper/workspace/gitops.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from looper.workspace.gitops import Workspace, no_hooks_dir

pytestmark = pytest.mark.e2e  # the end-to-end tier: real git

HOOKS = ("post-commit", "prepare-commit-msg", "reference-transaction", "post-checkout", "post-merge",
         "pre-auto-gc", "post-rewrite", "pre-commit", "commit-msg")


def make_repo(root: Path) -> None:
    root.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    (root / "train.py").write_text("print('v1')\n")
    subprocess.run(["git", "-C", str(root), "add", "train.py"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "init"], check=True, env=env)


def plant_hooks(root: Path, marker: Path) -> None:
    hooks = root / ".git" / "hooks"
    for name in HOOKS:
        h = hooks / name
        h.write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        h.chmod(0o755)


def test_planted_hooks_never_run_in_daemon_git(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    make_repo(root)
    marker = tmp_path / "hooks-ran.txt"
    plant_hooks(root, marker)
    # the hooks are live: plain git runs them (so this test can fail)
    subprocess.run(["git", "-C", str(root), "update-ref", "refs/test/probe", "HEAD"], check=True)
    assert "reference-transaction" in marker.read_text()
    marker.unlink()

    ws = Workspace(root)
    wt = ws.ensure_worktree("night")
    first = wt.head()
    (wt.path / "train.py").write_text("print('v2')\n")
    sha = wt.commit("experiment 1")
    wt.save_ref("refs/looper/discarded/1", sha)
    wt.reset_hard(first)
    ws.save_ref("refs/looper/kept", first)
    w1 = ws.ensure_detached_worktree("night", 1, first)
    (w1.path / "train.py").write_text("print('v3')\n")
    w1.commit("experiment 2")
    assert not marker.exists(), f"a planted hook ran: {marker.read_text()}"
    assert list(no_hooks_dir().iterdir()) == []


def test_the_hooks_folder_goes_with_the_process(tmp_path: Path) -> None:
    """Each looper process made one empty folder in /tmp for its hooks and left it there (687 after a
    day of tests): it is removed when the process exits."""
    import sys

    code = ("from looper.workspace.gitops import no_hooks_dir, safe_options; "
            "safe_options(); print(no_hooks_dir())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    folder = Path(out.stdout.strip())
    assert folder.name.startswith("looper-nohooks-"), out.stdout
    assert not folder.exists(), f"{folder} left behind"
    assert no_hooks_dir().is_dir()  # this process's own folder stays while it runs
