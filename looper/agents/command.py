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

The box (looper/agents/sandbox.py, issue 39): unless ``[agent] sandbox = "none"``, the command runs in
bubblewrap, deny by default. It works in a private copy of the checkout (``train.py`` and
``program.md``) at the checkout's path; only ``train.py`` comes back, and any other file it made or
changed is named in the scope check (a discard). It sees the system, the Python runtime, its own
program and ``[agent] readable``; not the workspace, the database, the test pages, ``.looper/`` or
``$HOME``; the network only with ``[agent] network = true``; of the daemon's environment only the
variables ``[agent] pass_env`` names.

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

import looper.agents.sandbox as agent_sandbox
import looper.executors.limits as run_limits
from looper import proc
from looper.agents.base import AgentContext, Proposal, ProposalRejected
from looper.agents.sandbox import AgentBox
from looper.core.propose.hyperblock import HyperblockError, knob_changes
from looper.core.run import limits as limits_core
from looper.errors import HarnessError
from looper.workspace import trees

Runner = Callable[..., proc.Completed]


WORKDIR_PREFIX = "looper-agent-"  # the agent's working copy and prompt: <tmp>/looper-agent-<daemon pid>-<random>


def remove_left_behind(tmp_root: Path | None = None) -> list[Path]:
    """Remove the agent working copies (each with the prompt: program.md and the history) that a daemon killed
    mid-proposal left in the temporary folder; only those whose daemon is gone, never a live one's. Returns them."""
    removed = []
    for left in Path(tmp_root or tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*-*"):
        pid = left.name[len(WORKDIR_PREFIX):].split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and left.is_dir() and not left.is_symlink():
            if trees.remove_tree(left) is None:
                removed.append(left)
    return removed


def _tail(text: str, n: int = 5) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " / ".join(lines[-n:])[-600:]


def _read_description(path: Path, limit: int = 64 * 1024) -> str:
    """The first ``limit`` bytes of the agent's description file ('' when it wrote none or a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        return f.read(limit).decode("utf-8", errors="replace")


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
                 runner: Runner = proc.run, box: AgentBox | None = None) -> None:
        self.argv = shlex.split(command or "")
        if not self.argv:
            raise HarnessError("agent.command is empty: kind=command needs a command to run")
        self.command = command
        self.timeout_seconds = float(timeout_seconds)
        self.max_failures = max(1, int(max_failures))
        self.failures = 0  # consecutive failed attempts
        self.runner = runner
        self.box = box  # make_agent always passes the configured one; None here: no box (unit tests)

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

    def _run(self, ctx: AgentContext, argv: list[str], tmp: Path) -> tuple[proc.Completed, list[str], str]:
        """Run the agent once in ``tmp`` (its prompt, description and, boxed, its working copy and limits):
        (what it did, what else it touched, its description). A limit it hit is a rejected proposal."""
        checkout = Path(ctx.checkout)
        io = tmp / "io"
        io.mkdir()
        prompt_file, desc_file = io / "prompt.md", io / "description.txt"
        prompt_file.write_text(ctx.prompt, encoding="utf-8")
        env = {"LOOPER_PROMPT_FILE": str(prompt_file), "LOOPER_DESCRIPTION_FILE": str(desc_file),
               "LOOPER_CHECKOUT": str(checkout)}
        boxed = self.box is not None and self.box.enabled
        work, put, touched = tmp / "work", {}, []
        # the box's limits (issue 48): memory, processes, oom_score_adj, its copy's quota and tmpfs sizes
        lim = run_limits.box(tmp) if boxed else run_limits.Box(run_limits.core.Caps())
        if boxed:
            assert self.box is not None
            put = agent_sandbox.prepare_work(checkout, work)
            argv = lim.wrap(agent_sandbox.box_argv(self.box, argv, work=work, io=io, checkout=checkout,
                                                   tmp_bytes=lim.caps.tmp_max_bytes))
            run_env, inherit = agent_sandbox.box_env(self.box, env), False
        else:
            run_env, inherit = env, True
        with lim:
            if lim.out_dir is not None:
                lim.label = "the agent's folders (its copy, prompt and description)"
            try:
                done = self.runner(argv, cwd=checkout, env=run_env, timeout=self.timeout_seconds,
                                   input_text=ctx.prompt, max_output=agent_sandbox.MAX_OUTPUT_BYTES,
                                   **({"check": lim.check, "on_start": lim.started} if boxed else {}),
                                   **({} if inherit else {"inherit_env": False}))
            except OSError as exc:  # exec failure: permission, bad interpreter line
                raise HarnessError(f"agent command could not be started: {argv[0]}: {exc.strerror or exc}") from exc
            seen = lim.seen("", done.limit)
        hit = done.limit or (None if done.ok or not boxed else limits_core.agent_limit_hit(
            lim.caps, seen, done.stderr[-8000:]))
        if hit:  # the agent's limit: its proposal's failure, never the night's (not counted as a failed run)
            raise ProposalRejected(f"agent command stopped at a limit: {hit}")
        if boxed and done.exit_code == 1 and "bwrap: execvp" in done.stderr:
            raise HarnessError(f"agent command could not be started in its box: {_tail(done.stderr, 2)} "
                               "(a program outside the system folders and the runtime must be named in "
                               "[agent] readable)")
        if boxed and not done.timed_out and done.exit_code == 0:
            new, touched = agent_sandbox.take_back(work, put)
            if isinstance(new, str):
                raise ProposalRejected(f"agent edit refused: {new}")
            (checkout / "train.py").write_bytes(new)  # the one file that comes back
        return done, touched, _read_description(desc_file)

    def propose(self, ctx: AgentContext) -> Proposal:
        checkout = Path(ctx.checkout)
        argv = self._resolve(checkout)
        target = checkout / "train.py"
        tmp = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))  # the daemon's pid: see remove_left_behind
        try:
            done, touched, described = self._run(ctx, argv, tmp)
        finally:
            left = trees.remove_tree(tmp)  # iterative: a tree of the agent's making (issue 48)
        if left:
            raise ProposalRejected(f"the agent's working copy could not be removed: {left}")
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
                        rationale=_tail(done.stdout, 20), knobs=changes_or_empty(ctx.train_py, new_source),
                        touched=tuple(touched))
