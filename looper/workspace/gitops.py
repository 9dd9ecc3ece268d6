"""Git for the loop: a branch ``looper/<tag>`` in a worktree of its own under ``.looper/``.

The person's checkout is never touched. A kept change is a commit on the branch; a
discarded one is reset away, its commit kept reachable under ``refs/looper/discarded/<id>``.
"""

from __future__ import annotations

import atexit
import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from looper.errors import HarnessError, WorkspaceError

IDENTITY = {
    "GIT_AUTHOR_NAME": "looper",
    "GIT_AUTHOR_EMAIL": "looper@localhost",
    "GIT_COMMITTER_NAME": "looper",
    "GIT_COMMITTER_EMAIL": "looper@localhost",
}


_NO_HOOKS: Path | None = None


def no_hooks_dir() -> Path:
    """An empty folder of this process's own (0700, made once): the daemon's ``core.hooksPath``."""
    global _NO_HOOKS
    if _NO_HOOKS is None or not _NO_HOOKS.is_dir() or any(_NO_HOOKS.iterdir()):
        _NO_HOOKS = Path(tempfile.mkdtemp(prefix="looper-nohooks-"))
        atexit.register(_remove_empty, _NO_HOOKS)
    return _NO_HOOKS


def _remove_empty(folder: Path) -> None:
    """At the process's exit: its hooks folder goes (rmdir: only while still empty)."""
    with contextlib.suppress(OSError):
        folder.rmdir()


def safe_options() -> list[str]:
    """``-c`` options for every git command the daemon runs: no hook (post-commit,
    prepare-commit-msg, reference-transaction, post-checkout ... all skip ``--no-verify``) and
    no fsmonitor command, whatever the repository's hooks folder or config holds."""
    return ["-c", f"core.hooksPath={no_hooks_dir()}", "-c", "core.fsmonitor=false"]


def _harden(repo: git.Repo) -> git.Repo:
    opts = safe_options()
    repo.git.set_persistent_git_options(c=[opts[1], opts[3]])
    return repo


@dataclass(frozen=True)
class Change:
    status: str  # porcelain XY code, e.g. " M", "??", " D"
    path: str


def branch_name(tag: str) -> str:
    return f"looper/{tag}"


class Workspace:
    """The person's repository and the loop's worktrees."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        try:
            self.repo = _harden(git.Repo(self.root))
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise WorkspaceError(f"{self.root} is not a git repository (run `looper init`)") from exc
        if self.repo.bare:
            raise WorkspaceError(f"{self.root} is a bare repository")

    def worktree_path(self, tag: str) -> Path:
        return self.root / ".looper" / "worktrees" / tag

    def has_branch(self, tag: str) -> bool:
        return branch_name(tag) in [h.name for h in self.repo.heads]

    def ensure_worktree(self, tag: str) -> Worktree:
        """Create (or reuse) the tag's branch and its worktree."""
        branch = branch_name(tag)
        path = self.worktree_path(tag)
        try:
            self.repo.git.worktree("prune")
            if not self.has_branch(tag):
                try:
                    base = self.repo.head.commit.hexsha
                except ValueError as exc:
                    raise WorkspaceError(f"{self.root} has no commit yet: commit the workspace first") from exc
                self.repo.git.branch(branch, base)
            if not (path / ".git").exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                self.repo.git.worktree("add", "--force", str(path), branch)
        except git.GitCommandError as exc:
            raise HarnessError(f"git could not set up the worktree for {branch}: {exc.stderr.strip()}") from exc
        wt = Worktree(path, branch)
        current = wt.repo.active_branch.name if not wt.repo.head.is_detached else "(detached)"
        if current != branch:
            raise HarnessError(f"worktree {path} is on {current}, expected {branch}")
        return wt

    def save_ref(self, name: str, sha: str) -> None:
        self.repo.git.update_ref(name, sha)

    def ensure_detached_worktree(self, tag: str, index: int, at: str) -> Worktree:
        """A worker's own checkout, on a detached HEAD: the branch moves only on a keep."""
        path = self.root / ".looper" / "worktrees" / f"{tag}-w{index}"
        try:
            self.repo.git.worktree("prune")
            if not (path / ".git").exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                self.repo.git.worktree("add", "--force", "--detach", str(path), at)
        except git.GitCommandError as exc:
            raise HarnessError(f"git could not set up worker worktree {path}: {exc.stderr.strip()}") from exc
        wt = Worktree(path, branch_name(tag))
        wt.reset_hard(at)
        return wt


class Worktree:
    """One checkout of ``looper/<tag>``."""

    def __init__(self, path: Path, branch: str) -> None:
        self.path = Path(path)
        self.branch = branch
        self.repo = _harden(git.Repo(self.path))

    def _git(self, *args: str) -> str:
        try:
            with self.repo.git.custom_environment(**IDENTITY):
                return self.repo.git.execute(["git", *safe_options(), *args])
        except git.GitCommandError as exc:
            raise HarnessError(f"git {' '.join(args[:2])} failed in {self.path}: {exc.stderr.strip()}") from exc

    def head(self) -> str:
        return self._git("rev-parse", "HEAD").strip()

    def changes(self) -> list[Change]:
        """Everything that differs from HEAD, untracked files included (ignored ones not)."""
        out = self._git("status", "--porcelain=v1", "-uall", "--no-renames")
        changes = []
        for line in out.splitlines():
            if len(line) > 3:
                changes.append(Change(line[:2], line[3:].strip('"')))
        return changes

    def is_clean(self) -> bool:
        return not self.changes()

    def restore(self, paths: list[str]) -> None:
        """Put these paths back as HEAD has them; delete the untracked ones."""
        tracked = set(self._git("ls-files").splitlines())
        for p in paths:
            if p in tracked:
                self._git("checkout", "HEAD", "--", p)
            else:
                target = self.path / p
                if target.is_file() or target.is_symlink():
                    target.unlink()

    def commit(self, message: str, paths: tuple[str, ...] = ("train.py",)) -> str:
        self._git("add", "--", *paths)
        self._git("commit", "--no-verify", "--allow-empty", "-m", message)
        return self.head()

    def reset_hard(self, sha: str) -> None:
        self._git("reset", "--hard", sha)
        self._git("clean", "-fd")

    def diff(self, a: str, b: str, path: str = "train.py") -> str:
        return self._git("diff", a, b, "--", path)

    def show(self, sha: str, path: str) -> str:
        return self._git("show", f"{sha}:{path}")

    def save_ref(self, name: str, sha: str) -> None:
        self._git("update-ref", name, sha)

