"""The sandbox policy: how train.py and evaluate.py are confined (bubblewrap).

train.py is written by an agent that optimises the score, so it is untrusted. Every
executor wraps its two commands with the argv built here:

- :func:`train_argv`: train.py inside ``bwrap``. The whole filesystem read-only; writable
  only ``$LOOPER_OUT`` and a private ``/tmp`` (and ``/dev/shm``), both gone with the run; the
  test pages and their truth (``$LOOPER_DATA/pages/test``) are not mounted (an empty,
  read-only folder stands in their place); the usual credential folders of ``$HOME`` and the
  host's sockets under ``/run`` are hidden; no network unless ``[executor] sandbox_network = true``; its own PID, IPC and UTS
  namespaces; ``--die-with-parent`` and ``--new-session``; every capability dropped; a
  clean environment (no secrets of the daemon). When the run's first process ends, the
  kernel kills everything else in its PID namespace, so no process outlives it, whatever it
  forked; a run that left processes behind ends with exit status 86 and a line naming
  them (a crash of the change). GPU device nodes (``/dev/nvidia*``) are bound when present.
- :func:`eval_argv`: ``python -I`` on a harness-owned copy of evaluate.py (no script folder,
  no cwd, no user site, no ``PYTHON*`` variables on ``sys.path``), in a sandbox that can
  write only its own output folder, which training never could; no network.
- :func:`preflight`: a missing or broken ``bwrap`` is an error naming the one-line install
  command. ``[executor] sandbox = "none"`` is the explicit opt-out; :func:`opt_out_line`
  is the line every verdict and the report carry then.

This module builds argument lists and checks; it starts nothing but ``bwrap``'s self-test
(through :mod:`looper.proc`).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looper.core.verdict import Verdict

MODES = ("bwrap", "none")
INSTALL_COMMAND = "sudo apt-get install -y bubblewrap"  # Fedora: dnf install bubblewrap; Arch: pacman -S bubblewrap
PRIVATE_TMP = "/tmp"
# Credential stores under $HOME that training has no business reading (hidden when they exist).
HIDDEN_HOME = (".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".netrc",
               ".git-credentials", ".pypirc")
# Variables of the daemon's own environment a training run may see (the job's env is added).
PASS_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Set inside every sandbox: everything that wants a writable home or cache gets the private tmp.
SANDBOX_ENV = {
    "HOME": PRIVATE_TMP,
    "TMPDIR": PRIVATE_TMP,
    "XDG_CACHE_HOME": f"{PRIVATE_TMP}/.cache",
    "XDG_CONFIG_HOME": f"{PRIVATE_TMP}/.config",
    "MPLCONFIGDIR": f"{PRIVATE_TMP}/matplotlib",
    "YOLO_CONFIG_DIR": f"{PRIVATE_TMP}/ultralytics",
    "TORCHINDUCTOR_CACHE_DIR": f"{PRIVATE_TMP}/torchinductor",
}
TEST_PAGES = Path("pages") / "test"  # relative to the data folder: what training must never read
LEFT_RUNNING_EXIT = 86  # train.py exited but left processes in its sandbox (they die with it)
WEIGHTS_REFUSED_EXIT = 65  # evaluate.py (WEIGHTS_REFUSED) refused weights that are not data: a crash of the change
# Runs train.py inside the sandbox, then names any process it left behind before the sandbox (and
# with it every such process) ends: a run that tried to outlive itself is a crash that says so.
WATCH = (
    "import os, subprocess, sys\n"
    "rc = subprocess.call(sys.argv[1:])\n"
    "me, left = os.getpid(), []\n"
    "for p in sorted((p for p in os.listdir('/proc') if p.isdigit()), key=int):\n"
    "    try:\n"
    "        cmd = open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode(errors='replace')\n"
    "    except OSError:\n"
    "        continue\n"
    "    if int(p) not in (1, me) and cmd.strip():\n"
    "        left.append(f'pid {p}: {cmd.strip()[:80]}')\n"
    "if left:\n"
    "    print(f'looper sandbox: train.py exited (status {rc}) but left {len(left)} process(es) running, '\n"
    "          'ended with its sandbox: ' + '; '.join(left[:5]), file=sys.stderr, flush=True)\n"
    f"    sys.exit({LEFT_RUNNING_EXIT})\n"
    "if rc != 0:\n"
    "    print(f'looper sandbox: train.py exited {rc}; writable were only '\n"
    "          f'{os.environ.get(\"LOOPER_OUT\", \"?\")} and the private /tmp', file=sys.stderr, flush=True)\n"
    "sys.exit(rc if rc >= 0 else 128 - rc)\n"
)


@dataclass(frozen=True)
class SandboxPolicy:
    """``[executor] sandbox`` and ``sandbox_network`` as one value."""

    mode: str = "bwrap"
    network: bool = False
    bwrap: str = "bwrap"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"sandbox must be one of {', '.join(MODES)} (got {self.mode!r})")

    @property
    def enabled(self) -> bool:
        return self.mode == "bwrap"

    @classmethod
    def from_section(cls, section: Any) -> SandboxPolicy:
        """From an ``[executor]`` config section (keys absent: the safe default)."""
        return cls(mode=str(getattr(section, "sandbox", "bwrap") or "bwrap"),
                   network=bool(getattr(section, "sandbox_network", False)))

    def describe(self) -> str:
        if not self.enabled:
            return "none (explicit opt-out)"
        return "bwrap" + (", network allowed" if self.network else ", no network")


def opt_out_line(policy: SandboxPolicy) -> str | None:
    """The line every verdict and the report's "needs a person" carry when the sandbox is off."""
    if policy.enabled:
        return None
    return ('[executor] sandbox = "none": train.py and evaluate.py ran without a sandbox '
            "(train.py could write the database, the checkout and the venv, and read the test pages)")


def find_bwrap(policy: SandboxPolicy) -> str | None:
    return shutil.which(policy.bwrap)


def preflight(policy: SandboxPolicy, timeout: float = 30.0) -> Verdict:
    """Pass when the sandbox can be built here (or is explicitly off); an error naming the fix otherwise."""
    if not policy.enabled:
        return Verdict.passed({"sandbox": "none", "sandbox_note": opt_out_line(policy)})
    exe = find_bwrap(policy)
    if exe is None:
        return Verdict.errored(
            f"bubblewrap (bwrap) is not installed; install it with: {INSTALL_COMMAND} "
            '(or opt out explicitly with [executor] sandbox = "none")',
            metrics={"sandbox": "bwrap"})
    from looper import proc

    argv = [exe, *_base_args(network=policy.network), "--", "true"]
    done = proc.run(argv, timeout=timeout, inherit_env=False)
    if not done.ok:
        why = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.exit_code}"]
        return Verdict.errored(
            f"bwrap is installed ({exe}) but cannot build a sandbox here: {why[0][:200]} "
            "(unprivileged user namespaces may be disabled: sysctl kernel.unprivileged_userns_clone=1, "
            "or install bwrap setuid)", metrics={"sandbox": "bwrap"})
    return Verdict.passed({"sandbox": policy.describe(), "bwrap": exe})


# ---------------------------------------------------------------------------- argv
def gpu_device_nodes(dev: Path = Path("/dev")) -> list[str]:
    """The NVIDIA device nodes present on this machine (bound into the sandbox as devices)."""
    return sorted(str(p) for p in dev.glob("nvidia*") if p.exists())


# Where the sandbox runs on another machine (a SLURM node), the nodes there are not known when
# the argv is built: every usual NVIDIA node is offered, bound only where it exists (--dev-bind-try).
NODE_GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
                    "/dev/nvidia-caps", *(f"/dev/nvidia{i}" for i in range(16)))


def _base_args(network: bool) -> list[str]:
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", PRIVATE_TMP, "--tmpfs", "/dev/shm",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    # /run holds the host's sockets (docker, dbus, munge ...): connect() works through a read-only
    # mount, so the sandbox gets an empty, read-only /run instead (DNS kept when the network is on).
    args += ["--tmpfs", "/run"]
    if network:
        args += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
    args += ["--remount-ro", "/run"]
    if not network:
        args.append("--unshare-net")
    return args


def _under(path: Path, root: str) -> bool:
    return path == Path(root) or Path(root) in path.parents


def _readable_again(paths: Sequence[Path]) -> list[str]:
    """Paths under the private /tmp that the run needs: bound read-only again over the empty tmpfs."""
    args: list[str] = []
    seen: list[Path] = []
    for p in sorted({Path(os.path.realpath(x)) for x in paths}, key=lambda q: len(q.parts)):
        if not _under(p, PRIVATE_TMP) or not p.exists() or any(s == p or s in p.parents for s in seen):
            continue
        seen.append(p)
        args += ["--ro-bind", str(p), str(p)]
    return args


def _hide(path: Path) -> list[str]:
    """Cover ``path`` with something empty and read-only: it is not there for the sandbox."""
    if path.is_dir():
        return ["--tmpfs", str(path), "--remount-ro", str(path)]
    if path.exists() or path.is_symlink():
        return ["--dev-bind", "/dev/null", str(path)]  # reads as empty; a plain ro-bind is nodev
    return []


def _env_args(env: Mapping[str, str], clear: bool = True) -> list[str]:
    """``--setenv`` for ``env`` and the sandbox's own variables; with ``clear``, nothing else (and a
    few harmless variables of this process: PATH, locale, CUDA). Never put a secret in ``env``: an
    argv is readable by every user of the machine."""
    merged: dict[str, str] = {k: os.environ[k] for k in PASS_ENV if os.environ.get(k)} if clear else {}
    if clear:
        merged.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    merged.update({k: str(v) for k, v in env.items()})
    merged.update(SANDBOX_ENV)
    args = ["--clearenv"] if clear else []
    for k, v in sorted(merged.items()):
        args += ["--setenv", k, v]
    return args


def _python_roots(python: str) -> list[Path]:
    """The interpreter's folders (venv and base install), the looper package's source, and every
    package folder on this process's import path (a .pth file can add another venv's site-packages;
    the run's python is the daemon's own for a local executor)."""
    import looper

    exe = Path(shutil.which(python) or python)
    roots = [exe.parent.parent, Path(os.path.realpath(exe)).parent.parent,
             Path(looper.__file__).resolve().parent.parent]
    roots += [Path(p) for p in sys.path if p and Path(p).name in ("site-packages", "dist-packages")]
    return roots


def train_argv(command: Sequence[str], *, checkout: Path, out_dir: Path, data_dir: Path,
               env: Mapping[str, str], policy: SandboxPolicy = SandboxPolicy(),
               python: str = "", devices: Sequence[str] | None = None,
               home: Path | None = None, bwrap: str | None = None,
               readable: Sequence[Path] = ()) -> list[str]:
    """``command`` (``[python, "train.py"]``) wrapped in the training sandbox.

    Writable: ``out_dir`` and the private tmp. Hidden: ``data_dir/pages/test`` and the
    credential folders of ``home``. ``devices``: device nodes to bind (default: the NVIDIA
    nodes present here; :data:`NODE_GPU_DEVICES` where the argv runs on another machine). ``bwrap``:
    the bwrap to call (default: the one on this machine's PATH). ``readable``: more folders to
    keep visible (read-only) when they lie under the private /tmp, e.g. the workspace. The policy must be enabled: with
    ``sandbox = "none"`` there is no argv to build.
    """
    if not policy.enabled:
        raise ValueError('train_argv: the sandbox is off (sandbox = "none"); run the command as it is')
    checkout, out_dir, data_dir = (Path(os.path.realpath(p)) for p in (checkout, out_dir, data_dir))
    python = python or command[0]
    args = [bwrap or shutil.which(policy.bwrap) or policy.bwrap, *_base_args(policy.network)]
    args += _readable_again([checkout, data_dir, *readable, *_python_roots(python)])
    for node in gpu_device_nodes() if devices is None else devices:
        args += ["--dev-bind-try", node, node]
    args += ["--bind", str(out_dir), str(out_dir)]
    args += _hide(data_dir / TEST_PAGES)
    home = Path(home or os.path.expanduser("~"))
    for name in HIDDEN_HOME:
        args += _hide(home / name)
    args += ["--chdir", str(checkout)]
    args += _env_args(env)
    return [*args, "--", python, "-I", "-c", WATCH, *command]


# ``python -I -c BOOT PACKAGE EVALUATOR ARGS...``: evaluate.py with PACKAGE (the harness's copy of
# the looper package) first on sys.path, where looper is not installed (an ssh host).
BOOT = "import runpy, sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[2:]; " \
       "runpy.run_path(sys.argv[0], run_name='__main__')"


def eval_argv(python: str, evaluator: Path, *, weights: Path, data_dir: Path, out_dir: Path,
              env: Mapping[str, str], device: str = "", policy: SandboxPolicy = SandboxPolicy(),
              devices: Sequence[str] | None = None, bwrap: str | None = None,
              package: Path | None = None) -> list[str]:
    """``python -I evaluate.py`` from the harness's copy, writable only ``out_dir``, no network.

    It keeps the environment bwrap is started with (``python -I`` ignores ``PYTHON*``), plus
    ``env`` and the sandbox's home and cache folders. ``package``: a folder holding the harness's
    copy of the looper package, put first on ``sys.path`` (where looper is not installed).

    METRICS.json is written to ``out_dir/METRICS.json``. With the sandbox off the same
    ``python -I`` command is returned without ``bwrap``.
    """
    evaluator, weights, data_dir, out_dir = (Path(os.path.realpath(p)) for p in (evaluator, weights, data_dir, out_dir))
    boot = ["-c", BOOT, os.path.realpath(package)] if package is not None else []
    cmd = [python, "-I", *boot, str(evaluator), "--weights", str(weights), "--data", str(data_dir),
           "--out", str(out_dir / "METRICS.json")]
    if device:
        cmd += ["--device", device]
    if not policy.enabled:
        return cmd
    args = [bwrap or shutil.which(policy.bwrap) or policy.bwrap, *_base_args(network=False)]
    args += _readable_again([evaluator.parent, weights, data_dir, *_python_roots(python)])  # package: in evaluator.parent
    for node in gpu_device_nodes() if devices is None else devices:
        args += ["--dev-bind-try", node, node]
    args += ["--bind", str(out_dir), str(out_dir), "--chdir", str(out_dir)]
    args += _env_args(env, clear=False)  # the harness's own code keeps the environment it is started with
    return [*args, "--", *cmd]


# ---------------------------------------------------------------------------- the evaluator
def prepare_evaluator(evaluate_py: Path, eval_dir: Path) -> tuple[Path, Path]:
    """A harness-owned copy of evaluate.py in a fresh ``eval_dir`` and its empty output folder.

    Called after the training sandbox is gone; ``eval_dir`` is outside anything training could
    write. Returns (the copy, the output folder).
    """
    eval_dir = Path(eval_dir)
    if eval_dir.exists():
        shutil.rmtree(eval_dir)
    out = eval_dir / "out"
    out.mkdir(parents=True)
    copy = eval_dir / "evaluate.py"
    shutil.copyfile(evaluate_py, copy)
    copy.chmod(0o444)
    return copy, out


def plain_file(path: Path) -> str | None:
    """None when ``path`` is a regular file (not a link, FIFO or device); a reason otherwise.

    The harness reads training's outputs (weights, train.json) only through this check: a
    link planted by train.py could point at the test truth or block a reader forever.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{Path(path).name} does not exist"
    if stat.S_ISLNK(st.st_mode):
        return f"{Path(path).name} is a symbolic link (to {os.readlink(path)}); training outputs must be plain files"
    if not stat.S_ISREG(st.st_mode):
        return f"{Path(path).name} is not a regular file"
    return None


def collect_metrics(out_dir: Path, metrics_path: Path) -> bool:
    """Move the sandboxed evaluator's METRICS.json to where the loop reads it; False when it wrote none."""
    src = Path(out_dir) / "METRICS.json"
    if plain_file(src) is not None:
        return False
    matches = Path(out_dir) / "MATCHES.json"  # the matched boxes beside it (for the report), when written
    if plain_file(matches) is None:
        os.replace(matches, Path(metrics_path).with_name("MATCHES.json"))
    os.replace(src, metrics_path)
    return True


# ---------------------------------------------------------------------------- on an ssh host
def wrap_on_host(argv: Sequence[str], run: Path, env: dict[str, str]) -> tuple[list[str], Callable[[], None]]:
    """``python -m looper.remote run``'s side: ARGV inside the sandbox the executor asked for.

    The executor asks through ``env``: ``LOOPER_SANDBOX`` = ``train`` | ``eval`` (absent: no
    sandbox), ``LOOPER_SANDBOX_NETWORK=1``; both are taken out of ``env``. The working
    directory is the host's checkout (train.py, evaluate.py and the synced looper package).
    For ``eval``, ARGV is evaluate.py's command line; the harness's copies of evaluate.py and of
    the looper package go to ``run/eval/``, and the returned callable (run after the command)
    moves METRICS.json to the ``--out`` ARGV named.
    """
    kind = env.pop("LOOPER_SANDBOX", "")
    network = env.pop("LOOPER_SANDBOX_NETWORK", "") == "1"
    argv = list(argv)
    if not kind:
        return argv, lambda: None
    checkout = Path.cwd()
    if kind == "train":
        return train_argv(argv, checkout=checkout, out_dir=run / "out",
                          data_dir=Path(env.get("LOOPER_DATA", "data")), env=env,
                          policy=SandboxPolicy(network=network), readable=[checkout.parent]), lambda: None
    if kind != "eval":
        raise ValueError(f"LOOPER_SANDBOX must be train or eval, got {kind!r}")
    opts = dict(zip(argv[2::2], argv[3::2], strict=False))  # python evaluate.py --weights W --data D --out O ...
    copy, out = prepare_evaluator(checkout / "evaluate.py", run / "eval")
    package = run / "eval" / "pkg"
    shutil.copytree(checkout / "looper", package / "looper", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wrapped = eval_argv(argv[0], copy, weights=Path(opts["--weights"]), data_dir=Path(opts["--data"]), out_dir=out,
                        env=env, device=opts.get("--device", ""), package=package)
    target = Path(opts["--out"])

    def collect() -> None:
        collect_metrics(out, target)

    return wrapped, collect
