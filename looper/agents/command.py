"""The command agent: any program that edits train.py in the checkout.

How it is run (document for agent authors):

- ``[agent] command`` is split with :func:`shlex.split` (no shell) and run with the
  checkout as working directory, under ``timeout_seconds``.
- The prompt is given on stdin and also written to a file whose path is in
  ``$LOOPER_PROMPT_FILE`` (outside the checkout).
- The agent edits ``train.py`` in place. Nothing else in the checkout may change (the
  loop checks the scope).
- The description of the change is the first non-empty line of the file named by
  ``$LOOPER_DESCRIPTION_FILE`` when the agent wrote it, else the last non-empty line the
  agent printed on stdout.

Failures: a non-zero exit or a timeout is a failed attempt: :class:`ProposalRejected` the
first time, :class:`HarnessError` when ``max_failures`` attempts in a row failed. A clean
exit that leaves train.py unchanged or not compiling is rejected (not counted as a failure
of the agent process). A command that cannot be started is a HarnessError at once.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from looper import proc
from looper.agents.base import AgentContext, Proposal, ProposalRejected
from looper.core.hyperblock import HyperblockError, knob_changes
from looper.errors import HarnessError

Runner = Callable[..., proc.Completed]


def _tail(text: str, n: int = 5) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " / ".join(lines[-n:])[-600:]


def check_source(source: str, what: str) -> None:
    """ProposalRejected when train.py does not compile."""
    try:
        compile(source, "train.py", "exec")
    except SyntaxError as exc:
        raise ProposalRejected(f"{what}: train.py does not compile: line {exc.lineno}: {exc.msg}") from exc
    except ValueError as exc:  # null bytes
        raise ProposalRejected(f"{what}: train.py does not compile: {exc}") from exc


def changes_or_empty(before: str, after: str) -> dict:
    try:
        return knob_changes(before, after)
    except HyperblockError:
        return {}


class CommandAgent:
    name = "command"

    def __init__(self, command: str, timeout_seconds: float = 900, max_failures: int = 2,
                 runner: Runner = proc.run) -> None:
        self.argv = shlex.split(command or "")
        if not self.argv:
            raise HarnessError("agent.command is empty: kind=command needs a command to run")
        self.command = command
        self.timeout_seconds = float(timeout_seconds)
        self.max_failures = max(1, int(max_failures))
        self.failures = 0  # consecutive failed attempts
        self.runner = runner

    def _resolve(self, checkout: Path) -> list[str]:
        exe = self.argv[0]
        if os.sep in exe:
            path = Path(exe) if os.path.isabs(exe) else checkout / exe
            if not path.is_file() or not os.access(path, os.X_OK):
                raise HarnessError(f"agent command not found or not executable: {exe}")
            return self.argv
        if shutil.which(exe) is None:
            raise HarnessError(f"agent command not found on PATH: {exe}")
        return self.argv

    def _failed(self, why: str) -> ProposalRejected:
        self.failures += 1
        if self.failures >= self.max_failures:
            raise HarnessError(
                f"agent command failed {self.failures} times in a row (last: {why})")
        return ProposalRejected(f"agent command failed: {why}")

    def propose(self, ctx: AgentContext) -> Proposal:
        checkout = Path(ctx.checkout)
        argv = self._resolve(checkout)
        target = checkout / "train.py"
        with tempfile.TemporaryDirectory(prefix="looper-agent-") as tmp:
            prompt_file = Path(tmp) / "prompt.md"
            desc_file = Path(tmp) / "description.txt"
            prompt_file.write_text(ctx.prompt, encoding="utf-8")
            env = {"LOOPER_PROMPT_FILE": str(prompt_file), "LOOPER_DESCRIPTION_FILE": str(desc_file),
                   "LOOPER_CHECKOUT": str(checkout)}
            try:
                done = self.runner(argv, cwd=checkout, env=env, timeout=self.timeout_seconds,
                                   input_text=ctx.prompt)
            except OSError as exc:  # exec failure: permission, bad interpreter line
                raise HarnessError(f"agent command could not be started: {argv[0]}: {exc.strerror or exc}") from exc
            described = desc_file.read_text(encoding="utf-8", errors="replace") if desc_file.exists() else ""
        if done.timed_out:
            raise self._failed(f"timed out after {self.timeout_seconds:g} s")
        if done.exit_code != 0:
            detail = _tail(done.stderr) or _tail(done.stdout)
            raise self._failed(f"exit {done.exit_code}" + (f": {detail}" if detail else ""))
        self.failures = 0
        try:
            new_source = target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProposalRejected(f"agent left no readable train.py: {exc}") from exc
        if new_source == ctx.train_py:
            raise ProposalRejected("agent exited cleanly but left train.py unchanged")
        check_source(new_source, "agent edit")
        lines = [ln.strip() for ln in described.splitlines() if ln.strip()]
        if lines:
            description = lines[0]
        else:
            out = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
            description = out[-1] if out else "(the agent gave no description)"
        return Proposal(new_source=None, description=description[:300],
                        rationale=_tail(done.stdout, 20), knobs=changes_or_empty(ctx.train_py, new_source))
