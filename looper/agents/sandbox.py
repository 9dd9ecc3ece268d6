"""The agent's box: a program that proposes changes (``[agent] kind = "command"``, any coding CLI) runs in
bubblewrap, deny by default, like train.py (issue 39: an agent with the daemon's rights read the test
pages' seed, the database and the secrets, and planted a ``.pth`` that forged a score).

What the agent sees (everything else of the host is absent):

- the bare system of :func:`looper.executors.sandbox._base_args` (``/usr`` and its links, named files of ``/etc``,
  fresh ``/dev``, ``/proc``, a private ``/tmp`` that is also its ``$HOME``), read-only;
- the Python runtime (the daemon's interpreter, its site-packages, the looper package), read-only;
- its command's program and every absolute file path among the command's words, and the paths
  ``[agent] readable`` names, read-only (never anything inside the workspace);
- at the checkout's own path, a private working folder holding a copy of ``train.py`` (the only file
  taken back) and of ``program.md``; the prompt (``$LOOPER_PROMPT_FILE``) and the file for its
  description (``$LOOPER_DESCRIPTION_FILE``) in a private folder;
- the network only with ``[agent] network = true`` (then also name service and certificates);
- of the daemon's environment only the harmless :data:`looper.executors.sandbox.PASS_ENV` and the variables
  ``[agent] pass_env`` names (an API key, by name), given through bwrap's environment, never its argv.

Not there: the workspace (``experiments.db``, ``.looper/`` with the test seed, ``data/`` with the test
pages, ``runs/``, ``.git``, ``baselines/``), the real checkout, ``$HOME`` (so no ``~/.config/looper``),
other variables of the daemon (notify URLs, keys it was not told to pass). After the program ends, only
``train.py`` comes back (a plain file, at most :data:`MAX_TRAIN_BYTES`); any other file it made or
changed is named as a scope violation (a discard), never copied.

``[agent] sandbox = "none"`` is the explicit opt-out: the program runs as the daemon's user in the real
checkout, and every verdict carries :func:`opt_out_line`.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.executors.sandbox import (
    INSTALL_COMMAND,
    PASS_ENV,
    SANDBOX_ENV,
    _base_args,
    _Mounts,
    _show_runtime,
    _under,
)
from looper.workspace import trees

MODES = ("bwrap", "none")
MAX_TRAIN_BYTES = 1 << 20  # a train.py larger than 1 MiB is not taken back
MAX_OUTPUT_BYTES = 4 << 20  # stdout (and stderr) the daemon keeps of the agent; past it the agent is stopped
SHOWN_FILES = ("train.py", "program.md")  # what the agent's working folder holds
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class AgentBox:
    """``[agent] sandbox``, ``network``, ``pass_env`` and ``readable`` as one value."""

    mode: str = "bwrap"
    network: bool = False
    pass_env: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    workspace: Path | None = None  # never shown, whatever the command or readable name
    bwrap: str = "bwrap"
    python: str = field(default_factory=lambda: sys.executable)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"agent.sandbox must be one of {', '.join(MODES)} (got {self.mode!r})")
        bad = [n for n in self.pass_env if not ENV_NAME.match(n)]
        if bad:
            raise ValueError(f"agent.pass_env holds names of environment variables, not {bad[0]!r}")

    @property
    def enabled(self) -> bool:
        return self.mode == "bwrap"

    @classmethod
    def from_section(cls, section: Any, workspace: Path | None = None) -> AgentBox:
        return cls(mode=str(getattr(section, "sandbox", "bwrap") or "bwrap"),
                   network=bool(getattr(section, "network", False)),
                   pass_env=tuple(getattr(section, "pass_env", ()) or ()),
                   readable=tuple(str(p) for p in (getattr(section, "readable", ()) or ())),
                   workspace=Path(workspace) if workspace else None)

    def describe(self) -> str:
        if not self.enabled:
            return "none (explicit opt-out)"
        return "bwrap" + (", network allowed" if self.network else ", no network")


def opt_out_line(box: AgentBox) -> str | None:
    """The line every verdict carries when the command agent runs outside its box."""
    if box.enabled:
        return None
    return ('[agent] sandbox = "none": the agent command ran without its box (it could read the test pages\' '
            "seed, the database and the daemon's secrets, and write the venv)")


def missing_bwrap(box: AgentBox) -> str | None:
    """Why the box cannot be built here (bwrap absent), naming the fix; None when it can or is off."""
    if not box.enabled or shutil.which(box.bwrap):
        return None
    return (f"bubblewrap (bwrap) is not installed, so the agent command cannot run in its box: {INSTALL_COMMAND} "
            '(or opt out explicitly with [agent] sandbox = "none")')


def _shown_files(argv: Sequence[str], readable: Sequence[str], never: Sequence[Path]) -> list[Path]:
    """The command's program, every absolute path among its words that exists, and ``readable``; none
    that is (or holds) ``$HOME`` or ``/``, or lies in or holds a folder of ``never``."""
    home = Path(os.path.realpath(os.path.expanduser("~")))
    found = [Path(shutil.which(argv[0]) or argv[0])] if argv else []
    found += [Path(a) for a in argv[1:] if os.path.isabs(a)]
    found += [Path(os.path.expanduser(p)) for p in readable]
    out: list[Path] = []
    for p in found:
        q = Path(os.path.realpath(p))  # resolved once (every link, in the name or any folder above it) ...
        if (p.is_absolute() and q.exists() and not _under(home, q)
                and not any(_under(q, k) or _under(k, q) for k in never)):
            out.append(q)  # ... checked in that form and mounted as checked (issue 48)
    return out


def box_argv(box: AgentBox, argv: Sequence[str], *, work: Path, io: Path, checkout: Path,
             tmp_bytes: int = 0) -> list[str]:
    """``argv`` inside the agent's box: ``work`` (the private copy of the checkout) at ``checkout``'s
    path, writable, its working directory; ``io`` (prompt and description) writable at its own path;
    ``/tmp`` and ``/dev/shm`` of at most ``tmp_bytes`` each (``[limits] tmp_max_bytes``; 0: unsized)."""
    checkout = Path(os.path.realpath(checkout))
    home = Path(os.path.realpath(os.path.expanduser("~")))
    never = [checkout, home / ".config" / "looper"] + ([Path(os.path.realpath(box.workspace))] if box.workspace else [])
    args = [shutil.which(box.bwrap) or box.bwrap, *_base_args(box.network, tmp_bytes)]
    m = _Mounts()
    _show_runtime(m, box.python, keep_out=[home, *never])
    for p in _shown_files(argv, box.readable, never):
        m.ro_resolved(p)
    m.rw_at(work, checkout)
    m.rw(io)
    args += m.args()
    args += ["--remount-ro", "/", "--chdir", str(checkout)]
    return [*args, "--", *argv]


def box_env(box: AgentBox, values: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment the boxed program (and bwrap) starts with: the harmless variables, those
    ``pass_env`` names, ``values`` and the sandbox's own home and caches."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in (*PASS_ENV, *box.pass_env) if environ.get(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(values)
    env.update(SANDBOX_ENV)
    return env


def prepare_work(checkout: Path, work: Path) -> dict[str, bytes]:
    """The private working folder: copies of :data:`SHOWN_FILES` (those that exist); returns what was put."""
    work.mkdir(mode=0o700)
    put: dict[str, bytes] = {}
    for name in SHOWN_FILES:
        src = Path(checkout) / name
        if src.is_file() and not src.is_symlink():
            put[name] = src.read_bytes()
            (work / name).write_bytes(put[name])
    return put


def _read_plain(path: Path, limit: int) -> bytes | str:
    """The bytes of ``path`` read without following a link, its size checked before it is read, or why
    they are refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return "the agent left no train.py"
    except OSError as exc:
        return f"train.py cannot be read ({'a symbolic link' if exc.errno == 40 else exc.strerror})"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return "train.py is not a regular file"
        if st.st_size > limit:
            return f"train.py is larger than {limit} bytes ({st.st_size})"
        data = f.read(limit + 1)
    return data if len(data) <= limit else f"train.py is larger than {limit} bytes"


def take_back(work: Path, put: Mapping[str, bytes]) -> tuple[bytes | str, list[str]]:
    """(train.py's new bytes, or why they are refused; every other path the agent made or changed). The copy
    is walked iteratively, links never followed, at most ``trees.MAX_DEPTH`` deep and 100,000 entries; a
    shown file is compared by its size first and read only up to the size it had (issue 48)."""
    touched: list[str] = []
    walk = trees.Walk(work, max_entries=100_000)
    for rel, st in walk:
        if rel == "train.py" or stat.S_ISDIR(st.st_mode):
            continue
        if rel not in put or not stat.S_ISREG(st.st_mode) or st.st_size != len(put[rel]):
            touched.append(rel)
        elif trees.read_bounded(work, rel, len(put[rel])) != put[rel]:
            touched.append(rel)
    if walk.too_deep or walk.truncated:
        touched.append(f"(folders more than {walk.max_depth} levels deep or over {walk.max_entries} entries)")
    touched += [n for n in put if n != "train.py" and not os.path.lexists(work / n)]
    return _read_plain(work / "train.py", MAX_TRAIN_BYTES), sorted(set(touched))
