"""The sandbox policy: how train.py and evaluate.py are confined (bubblewrap).

train.py is written by an agent that optimises the score, so it is untrusted. Every
executor wraps its two commands with the argv built here:

- :func:`train_argv`: train.py inside ``bwrap``, **deny by default**: the sandbox's root is
  empty and only what a run needs is put in it. Visible, read-only: the system's program and
  library folders (``/usr``, ``/bin``, ``/lib*``: symlinks or binds), a few named files of
  ``/etc`` (:data:`ETC_FILES`; name service and certificates only with the network on), the
  Python runtime (the interpreter's prefixes and its ``site-packages``, the looper package
  folder, never a source tree whole), its own checkout's ``train.py`` (the checkout is
  otherwise empty: no ``.git``, no other file), the data's training and validation parts
  (:data:`TRAIN_DATA_PARTS`: ``dataset.yaml``, ``tiles/``, ``pages/val/``; not the manifest,
  not the test pages), the workspace's ``pretrained/`` folder when it has one. Writable:
  ``$LOOPER_OUT``, a private ``/tmp`` and ``/dev/shm``, both gone with the run. Everything
  else is absent: ``$HOME``, the workspace (database, ``runs/``, ``.looper``, ``.git``,
  ``baselines/``, ``prepare.py``), other workers' checkouts, the host's sockets under ``/run``.
  No network unless ``[executor] sandbox_network = true``; its own PID, IPC and UTS
  namespaces; ``--die-with-parent`` and ``--new-session``; every capability dropped; a
  clean environment (no secrets of the daemon). When the run's first process ends, the
  kernel kills everything else in its PID namespace, so no process outlives it, whatever it
  forked; a run that left processes behind ends with exit status 86 and a line naming
  them (a crash of the change). GPU device nodes (``/dev/nvidia*``) are bound when present.
- :func:`eval_argv`: ``python -I -S`` on a harness-owned copy of evaluate.py (no script folder,
  no cwd, no user site, no ``.pth`` file run, no ``PYTHON*`` variables; ``sys.path`` set explicitly
  by :data:`NOSITE`), in a sandbox built the same
  way that shows only the system, the Python runtime, that copy, the weights and the data's
  ``manifest.json`` and ``pages/``, and can write only its own output folder, which training
  never could; no network.
- :func:`preflight`: a missing or broken ``bwrap`` is an error naming the one-line install
  command. ``[executor] sandbox = "none"`` is the explicit opt-out; :func:`opt_out_line`
  is the line every verdict and the report carry then.

This module builds argument lists and checks; it starts nothing but ``bwrap``'s self-test
(through :mod:`looper.proc`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import looper.executors.pyruntime as pyruntime
from looper.core.verdicts.verdict import Verdict

MODES = ("bwrap", "none")
INSTALL_COMMAND = "sudo apt-get install -y bubblewrap"  # Fedora: dnf install bubblewrap; Arch: pacman -S bubblewrap
PRIVATE_TMP = "/tmp"
# Deny by default: the sandbox's root is empty; only these parts of the host are put in it.
# The system's programs and libraries (a merged-/usr system has /bin, /lib* as symlinks into /usr).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Named files of /etc a Python program, torch and Ultralytics read (the dynamic linker's cache, the
# time zone, user and host names); nothing else of /etc (no ssh, no cron, no shadow).
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
             "/etc/timezone", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/os-release",
             "/etc/debian_version")
# Only with [executor] sandbox_network = true: name service and TLS certificates.
NETWORK_ETC_FILES = ("/etc/resolv.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/ssl", "/etc/ca-certificates",
                     "/etc/pki", "/etc/crypto-policies")
# Hardware facts the CUDA runtime and torch read (device topology, the driver's module version).
SYS_DIRS = ("/sys/block", "/sys/bus", "/sys/class", "/sys/dev", "/sys/devices", "/sys/module")
# The parts of the data folder training sees: never manifest.json, never pages/test.
TRAIN_DATA_PARTS = ("dataset.yaml", "tiles", "pages/val")
# The parts of the data folder the evaluator sees (it scores pages/test; the manifest names the classes).
EVAL_DATA_PARTS = ("manifest.json", "pages")
# Inside an installed looper package: the workspace files `looper init` copies (prepare.py among
# them), never shown to a sandbox.
PACKAGE_HIDDEN = ("workspace_template",)
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
CLEAN_START = "/usr/bin/env"  # ``env -i bwrap ...``: bwrap (pid 1 inside) holds no variable of the daemon
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
    "for d in ('/tmp', '/dev/shm'):  # a private tmpfs it filled ([limits] tmp_max_bytes): said, for the harness\n"
    "    try:\n"
    "        st = os.statvfs(d)\n"
    "    except OSError:\n"
    "        continue\n"
    "    if st.f_bavail < 16:\n"
    "        print(f'looper sandbox: {d} is full ({st.f_blocks * st.f_frsize} bytes)', file=sys.stderr, flush=True)\n"
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


def _tmpfs(path: str, size: int = 0) -> list[str]:
    """A private tmpfs at ``path``; ``size`` > 0: at most that many bytes (bwrap >= 0.8 ``--size``;
    ``[limits] tmp_max_bytes``, issue 39), so its pages, charged to no process, cannot take the host's memory."""
    return [*(["--size", str(int(size))] if size > 0 else []), "--tmpfs", path]


def _base_args(network: bool, tmp_bytes: int = 0) -> list[str]:
    """The namespaces and the bare system every sandbox starts from: ``/usr`` and its symlinks, the
    named files of ``/etc``, ``/sys`` facts, fresh ``/dev`` and ``/proc``, an empty private ``/tmp``
    and ``/dev/shm`` (each at most ``tmp_bytes``, when > 0) and ``/run``. Nothing else of the host is there."""
    args = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if not network:
        args.append("--unshare-net")
    for d in SYSTEM_DIRS:
        if os.path.islink(d):  # merged /usr: /bin -> usr/bin stays a symlink
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in ETC_FILES + (NETWORK_ETC_FILES if network else ()):
        args += ["--ro-bind-try", f, f]
    for d in SYS_DIRS:
        args += ["--ro-bind-try", d, d]
    args += ["--dev", "/dev", "--proc", "/proc", *_tmpfs(PRIVATE_TMP, tmp_bytes), *_tmpfs("/dev/shm", tmp_bytes)]
    # /run holds the host's sockets (docker, dbus, munge ...): the sandbox gets an empty, read-only
    # /run instead (DNS kept when the network is on).
    args += ["--tmpfs", "/run"]
    if network:
        args += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
    args += ["--remount-ro", "/run"]
    return args


def _under(path: Path, root: Path | str) -> bool:
    return path == Path(root) or Path(root) in path.parents


class _Mounts:
    """The allowlist of one sandbox: each path put in it, mounted shallowest first (a deeper path is
    mounted inside a shallower one, never hidden by it); read-only folders remounted at the end."""

    def __init__(self) -> None:
        self.ops: list[tuple[Path, int, list[str]]] = []
        self.readonly: list[Path] = []

    def _add(self, dest: Path, order: int, args: list[str]) -> None:
        self.ops.append((dest, order, args))

    def ro(self, path: Path | str) -> None:
        """``path`` read-only at its own place, when it exists."""
        p = Path(os.path.realpath(path))
        if p.exists():
            self._add(p, 2, ["--ro-bind", str(p), str(p)])

    def ro_resolved(self, path: Path) -> None:
        """``path``, already resolved and checked by the caller, read-only at its own place: mounted as
        checked (bwrap is given no name with a link in it to resolve again)."""
        if path.is_absolute() and os.path.realpath(path) == str(path) and path.exists():
            self._add(path, 2, ["--ro-bind", str(path), str(path)])

    def rw(self, path: Path) -> None:
        p = Path(os.path.realpath(path))
        self._add(p, 2, ["--bind", str(p), str(p)])

    def rw_at(self, src: Path, dest: Path) -> None:
        """``src`` writable, shown at ``dest`` (the agent's private copy of its checkout)."""
        self._add(Path(os.path.realpath(dest)), 2, ["--bind", os.path.realpath(src), os.path.realpath(dest)])

    def empty(self, path: Path | str) -> None:
        """An empty, read-only folder at ``path`` (what is put in it later stays as mounted)."""
        p = Path(os.path.realpath(path))
        self._add(p, 1, ["--tmpfs", str(p)])
        self.readonly.append(p)

    def args(self) -> list[str]:
        out: list[str] = []
        done: set[tuple[str, ...]] = set()
        for _dest, _order, a in sorted(self.ops, key=lambda op: (len(op[0].parts), op[1], str(op[0]))):
            if tuple(a) not in done:
                done.add(tuple(a))
                out += a
        for p in self.readonly:
            out += ["--remount-ro", str(p)]
        return out


def _safe_roots(paths: Sequence[Path], keep_out: Sequence[Path]) -> list[Path]:
    """``paths`` less any that is ``/``, or holds one of ``keep_out`` (home, workspace, checkout, data):
    a runtime folder is shown, never a folder that would show those with it."""
    safe: list[Path] = []
    for p in sorted({Path(os.path.realpath(x)) for x in paths}, key=lambda q: len(q.parts)):
        if p == Path("/") or any(_under(Path(os.path.realpath(k)), p) for k in keep_out):
            continue
        if not any(_under(p, s) for s in safe):  # inside a folder already shown
            safe.append(p)
    return safe


def _show_runtime(m: _Mounts, python: str, keep_out: Sequence[Path], not_inside: Path | None = None) -> None:
    """The Python runtime, read-only; nothing of it that lies inside ``not_inside`` (the checkout: on
    an ssh host the synced looper package sits there, and train.py sees train.py alone)."""
    roots, packages = pyruntime.runtime_paths(python)
    shown = [p for p in _safe_roots(roots, keep_out) + _safe_roots(packages, keep_out)
             if not_inside is None or not _under(p, not_inside)]
    for path in shown:
        m.ro(path)
    for pkg in {Path(os.path.realpath(p)) for p in packages}:
        for name in PACKAGE_HIDDEN:
            if (pkg / name).is_dir() and any(_under(pkg / name, s) for s in shown):
                m.empty(pkg / name)


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


def train_argv(command: Sequence[str], *, checkout: Path, out_dir: Path, data_dir: Path,
               env: Mapping[str, str], policy: SandboxPolicy = SandboxPolicy(),
               python: str = "", devices: Sequence[str] | None = None,
               home: Path | None = None, bwrap: str | None = None,
               readable: Sequence[Path] = (), pretrained: Path | None = None, tmp_bytes: int = 0,
               code_folder: bool = False) -> list[str]:
    """``command`` (``[python, "train.py"]``) wrapped in the training sandbox (deny by default).

    Shown read-only: the system (:func:`_base_args`), the Python runtime, ``checkout/train.py``
    (the working directory; nothing else of the checkout), :data:`TRAIN_DATA_PARTS` of
    ``data_dir``, ``pretrained`` when it exists, and ``readable`` (more paths to show, read-only).
    Writable: ``out_dir`` and the private tmp. Nothing else: not ``home`` (default: this user's),
    not the workspace. ``devices``: device nodes to bind (default: the NVIDIA nodes present here;
    :data:`NODE_GPU_DEVICES` where the argv runs on another machine). ``bwrap``: the bwrap to call
    (default: the one on this machine's PATH). ``tmp_bytes``: the size of ``/tmp`` and ``/dev/shm``
    each (0: unbounded). ``code_folder``: ``checkout`` is a box's own code folder (looper/executors/prestart.py),
    shown whole and read-only, so that the train.py the harness writes there once the box's run is known
    appears in it (it holds nothing else). The policy must be enabled: with
    ``sandbox = "none"`` there is no argv to build.
    """
    if not policy.enabled:
        raise ValueError('train_argv: the sandbox is off (sandbox = "none"); run the command as it is')
    checkout, out_dir, data_dir = (Path(os.path.realpath(p)) for p in (checkout, out_dir, data_dir))
    python = python or command[0]
    home = Path(os.path.realpath(home or os.path.expanduser("~")))
    # bwrap itself starts with an empty environment: its own process is pid 1 inside the sandbox,
    # and /proc/1/environ would show train.py the daemon's environment (API keys, notify URLs).
    # PATH alone (no secret) so that a bare "bwrap" (a SLURM node's) is still found where it is installed.
    args = [CLEAN_START, "-i", f"PATH={os.environ.get('PATH') or '/usr/local/bin:/usr/bin:/bin'}",
            bwrap or shutil.which(policy.bwrap) or policy.bwrap, *_base_args(policy.network, tmp_bytes)]
    m = _Mounts()
    _show_runtime(m, python, keep_out=[home, checkout, data_dir, out_dir], not_inside=checkout)
    if code_folder:
        m.ro(checkout)
    else:
        m.empty(checkout)
        m.ro(checkout / "train.py")
    for part in TRAIN_DATA_PARTS:
        m.ro(data_dir / part)
    if pretrained is not None:
        m.ro(pretrained)
    for extra in readable:
        m.ro(extra)
    m.rw(out_dir)
    args += m.args()
    for node in gpu_device_nodes() if devices is None else devices:
        args += ["--dev-bind-try", node, node]
    args += ["--remount-ro", "/", "--chdir", str(checkout)]
    args += _env_args(env)
    return [*args, "--", python, "-I", "-c", WATCH, *command]


# ``python -I -S -c NOSITE PACKAGES EVALUATOR ARGS...``: the evaluator without the site module, so no
# ``.pth`` file and no user site runs (``-I`` alone still runs every ``.pth`` in site-packages: issue 39).
# sys.path is explicit: the standard library, PACKAGES (``os.pathsep``-separated folders holding the
# harness's looper package), then the site-packages folders of the interpreter's environment, found from
# its ``pyvenv.cfg`` (and the base install's when that allows system packages), never from a ``.pth``.
# NOSITE_PATHS sets that path alone: a box started ahead of its evaluation runs it before its imports
# (looper/executors/prestart.py ``launcher``), the evaluator once told go.
NOSITE_PATHS = (pyruntime.SITE_DIRS
                + "extra = [p for p in sys.argv[1].split(os.pathsep) if p]\n"
                "sys.path[:] = list(dict.fromkeys(sys.path + extra + dirs))\n")
NOSITE = (NOSITE_PATHS + "import runpy\n"
          "sys.argv = sys.argv[2:]\n"
          "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def package_parents(package: Path | None = None) -> list[str]:
    """The folders put on the evaluator's sys.path for ``import looper``: ``package`` (the harness's copy)
    when given, else the folder holding this looper package (an editable install's source tree: in the
    sandbox only its ``looper`` folder is shown)."""
    import looper

    return [os.path.realpath(package)] if package is not None else [str(Path(looper.__file__).resolve().parent.parent)]


def eval_argv(python: str, evaluator: Path, *, weights: Path, data_dir: Path, out_dir: Path,
              env: Mapping[str, str], device: str = "", policy: SandboxPolicy = SandboxPolicy(),
              devices: Sequence[str] | None = None, bwrap: str | None = None,
              package: Path | None = None, tmp_bytes: int = 0, boot: str = NOSITE,
              weights_folder: bool = False) -> list[str]:
    """``python -I -S evaluate.py`` from the harness's copy (:data:`NOSITE`: no ``.pth``, no user site,
    an explicit ``sys.path``), writable only ``out_dir``, no network.

    ``boot``: the code ``-c`` runs instead of :data:`NOSITE` (a box started ahead of its evaluation: the
    launcher, which sets the same path, imports and waits for go); ``weights_folder``: the folder of
    ``weights`` is shown read-only, not the file (it is written there when the evaluation comes).

    It keeps the environment bwrap is started with (``python -I`` ignores ``PYTHON*``), plus
    ``env`` and the sandbox's home and cache folders. ``package``: a folder holding the harness's
    copy of the looper package, put first on ``sys.path`` (where looper is not installed).

    METRICS.json is written to ``out_dir/METRICS.json``. With the sandbox off the same
    ``python -I`` command is returned without ``bwrap``.
    """
    evaluator, weights, data_dir, out_dir = (Path(os.path.realpath(p)) for p in (evaluator, weights, data_dir, out_dir))
    cmd = [python, "-I", "-S", "-c", boot, os.pathsep.join(package_parents(package)), str(evaluator), "--weights", str(weights), "--data", str(data_dir),
           "--out", str(out_dir / "METRICS.json")]
    if device:
        cmd += ["--device", device]
    if not policy.enabled:
        return cmd
    args = [bwrap or shutil.which(policy.bwrap) or policy.bwrap, *_base_args(network=False, tmp_bytes=tmp_bytes)]
    m = _Mounts()
    _show_runtime(m, python, keep_out=[Path(os.path.realpath(os.path.expanduser("~"))), data_dir, out_dir])
    m.ro(evaluator.parent)  # the harness's copy (and, on an ssh host, its copy of the looper package)
    m.ro(weights.parent if weights_folder else weights)
    for part in EVAL_DATA_PARTS:
        m.ro(data_dir / part)
    m.rw(out_dir)
    args += m.args()
    for node in gpu_device_nodes() if devices is None else devices:
        args += ["--dev-bind-try", node, node]
    args += ["--remount-ro", "/", "--chdir", str(out_dir)]
    args += _env_args(env, clear=False)  # the harness's own code keeps the environment it is started with
    return [*args, "--", *cmd]
