"""Can a run use its GPU in its box? The night's answer before its first run (pure: the attempts come in).

On a GPU a run is three things at once: torch on CUDA, inside the training sandbox (bwrap: the GPU's device
nodes bound in), under its run limits (``RLIMIT_DATA`` at the run's memory share, a memory cgroup where one can
be made). Each can break CUDA where a CPU never notices, and then every run of the night crashes, blamed on
nothing useful (issue 46: on an H200 every sandboxed run crashed before the first experiment). So with
``[executor] require_gpu`` the preflight runs :data:`PROGRAM` (a convolution's forward and backward on the
run's device) the way a run runs, and only where that fails, again without the memory limit and then without
the sandbox, so that :func:`verdict` names which part breaks CUDA and what to change.
"""

from __future__ import annotations

from dataclasses import dataclass

MARK = "looper-probe"
#: ``python -c PROGRAM DEVICE``: its last line is ``looper-probe ok DEVICE True`` when a gradient that is not zero was
#: computed on DEVICE (CUDA synchronised: a kernel that fails late fails here).
PROGRAM = (
    "import sys\n"
    "d = sys.argv[1]\n"
    "import torch\n"
    "x = torch.randn(8, 3, 256, 256, device=d)\n"
    "conv = torch.nn.Conv2d(3, 16, 3).to(d)\n"
    "conv(x).square().mean().backward()\n"
    "if d.startswith('cuda'):\n"
    "    torch.cuda.synchronize(d)\n"
    f"print('{MARK} ok', d, float(conv.weight.grad.abs().sum()) > 0, flush=True)\n"
)
TIMEOUT_S = 180.0  # torch's import and CUDA's start-up in a fresh box (seconds; 5-15 s is usual)
# The attempts, in their order, each taking one more part away: as a run runs; without the memory limit
# (RLIMIT_DATA, the memory cgroup); without the sandbox too; without any run limit (processes, /tmp sizes) too.
BOX, NO_MEMORY_LIMIT, NO_SANDBOX, BARE = "box", "no memory limit", "no sandbox", "bare"
_WITHOUT = {NO_MEMORY_LIMIT: "without its memory limit", NO_SANDBOX: "outside the sandbox",
            BARE: "without any run limit"}


@dataclass(frozen=True)
class Attempt:
    """One run of :data:`PROGRAM` (``where``: one of the attempts above), its exit code (None: it did not end in
    :data:`TIMEOUT_S`) and its output."""

    where: str
    exit_code: int | None
    output: str

    @staticmethod
    def expected(device: str) -> str:
        """The program's own last line where it computed a gradient that is not zero on ``device``."""
        return f"{MARK} ok {device} True"

    def answered(self, device: str) -> bool:
        """Exit 0 and its last line the program's own, for ``device``, with a gradient that is not zero."""
        return self.exit_code == 0 and self.last_line() == self.expected(device)

    def last_line(self) -> str:
        return (self.output.strip().splitlines() or [""])[-1].strip()

    def said(self, limit: int = 300) -> str:
        """Its last lines, for the words (a timeout, an exit code or a silence said as such)."""
        if self.exit_code is None:
            return f"no answer in {TIMEOUT_S:.0f} s"
        lines = [ln.strip() for ln in self.output.splitlines() if ln.strip()]
        tail = " | ".join(ln if len(ln) <= limit // 3 else ln[:limit // 3 - 3] + "..." for ln in lines[-3:])
        return f"exit {self.exit_code}: {tail}" if tail else f"exit {self.exit_code}, nothing printed"


def next_attempt(device: str, tried: tuple[Attempt, ...], memory_limited: bool, sandboxed: bool,
                 limited: bool) -> str | None:
    """The attempt after ``tried`` (None: the answer is known): the box first; while they fail, the next of the
    parts there are to take away (``memory_limited``: a memory limit; ``sandboxed``: bwrap; ``limited``: any run
    limit).

    >>> next_attempt("cuda:0", (), True, True, True)
    'box'
    >>> next_attempt("cuda:0", (Attempt("box", 0, "looper-probe ok cuda:0 True"),), True, True, True) is None
    True
    >>> next_attempt("cuda:0", (Attempt("box", 1, ""),), True, True, True)
    'no memory limit'
    >>> next_attempt("cuda:0", (Attempt("box", 1, ""),), False, False, True)
    'bare'
    """
    if not tried:
        return BOX
    if tried[-1].answered(device):
        return None
    parts = ((NO_MEMORY_LIMIT, memory_limited), (NO_SANDBOX, sandboxed), (BARE, limited))
    done = {a.where for a in tried}
    return next((where for where, there in parts if there and where not in done), None)


def verdict(device: str, tried: tuple[Attempt, ...], memory_words: str) -> str:
    """"" where a run can use ``device`` in its box (the first attempt answered); else the problem: the part whose
    taking away made it answer, and the setting that changes it. ``memory_words``: the run's memory limit and what
    sets it (looper.core.run.limits.Caps.memory_words)."""
    if not tried or tried[0].where != BOX:
        return f"the {device} check in a run's box never ran"
    box = tried[0]
    if box.answered(device):
        return ""
    head = f"torch cannot use {device} in a run's box ({box.said()})"
    works = next((a.where for a in tried[1:] if a.answered(device)), None)
    if works == NO_MEMORY_LIMIT:
        return (f"{head}; without the run's memory limit it can: torch on {device} needs more memory mapped than "
                f"{memory_words} lets a run map (RLIMIT_DATA). Raise [limits] memory_max_bytes, or run fewer at a "
                "time (loop.seed_jobs, loop.workers) so that each run's share is larger")
    if works == NO_SANDBOX:
        return (f"{head}; outside the sandbox it can: the sandbox does not give runs this GPU here (its device "
                "nodes /dev/nvidia* are bound where they exist; docs/GPU.md). Fix the sandbox, or run trusted code "
                'only with [executor] sandbox = "none"')
    if works == BARE:
        return (f"{head}; without any run limit it can: the process limit ([limits] pids_max: CUDA and torch start "
                "threads, and threads count) or the /tmp size ([limits] tmp_max_bytes) is too small for it here")
    if len(tried) == 1:
        return head
    return (f"{head}; not {', not '.join(_WITHOUT[a.where] for a in tried[1:])} either ({tried[-1].said()}): torch "
            f"here cannot use {device} at all (its CUDA build, the driver, CUDA_VISIBLE_DEVICES)")


def summary(device: str, tried: tuple[Attempt, ...], problem: str, where: str = "") -> str:
    """The check in one line, for the night's journal: ``torch on DEVICE in a run's box[ on WHERE]: ok|failed
    (the attempts)``."""
    on = f" on {where}" if where else ""
    return f"torch on {device} in a run's box{on}: {'failed' if problem else 'ok'} ({', '.join(a.where for a in tried)})"
