"""The SSH executor's side on the remote host: ``python -m looper.remote <command> ...``.

The looper package is synced into ``<remote_dir>/checkout/`` before anything runs there, so
the host runs this module from that folder (its working directory) instead of shell
programs, and supervises a run with the same code as a local run (:func:`looper.proc.supervise`).
Every command but ``run`` prints one JSON object on its last line of output.

Remote layout under ``remote_dir`` (the parent of the working directory)::

    checkout/            train.py, prepare.py, evaluate.py and the looper package
    <data_dir>/          the prepared data set (built there once by prepare.py)
    runs/<run id>/       run.pid (process-group id while it runs), status (exit code), run.log,
                         out/ (LOOPER_OUT: weights.pt, train.json, METRICS.json), gpu.json,
                         code/ (a training's own train.py and fixed files, copied as they were checked)

Commands:

- ``root``: create ``runs/``; the absolute remote_dir.
- ``facts``: free disk under remote_dir, this Python's version, whether rsync is installed and,
  with ``--sandbox``, whether bubblewrap can build the training sandbox on this host.
- ``check FILE... [--run DIR --keep N [--code FILE]...]``: sha256 of checkout files; optionally create a run
  folder and prune old ones (never one whose run.pid is still there, nor one changed in the last
  :data:`FRESH_SECONDS`) in the same round trip; each ``--code`` file copied into ``DIR/code/`` first, its hash
  the copy's: the run's own train.py, which the next run's sync (another candidate's, a worker's) cannot change.
- ``run-dir DIR [--keep N] [--cached PATH]``: create and prune as above; whether PATH exists.
- ``data DIR [--prepare prepare.py --scale S --seed N] [--index]``: the data set's manifest hash
  (:func:`looper.workspace.hashes.tree_hash`), after building it with prepare.py when asked and missing
  (the test pages' secret seed kept in ``remote_dir/.looper/test_seed``, which no sandbox shows);
  ``--index``: and its label index (looper/data/labelindex.py), made once, kept while it matches.
- ``run DIR [--env K=V]... [--gpu-index N] [--budget S] [--code DIR/code] -- ARGV...``: run ARGV (in ``--code``,
  the run's own copy of train.py and the fixed files, the box's checkout; default this checkout) in a process
  group of its own, its id written to ``DIR/run.pid`` before it starts, its output streamed
  to stdout (the ssh client) and ``DIR/run.log``; the exit status goes to ``DIR/status`` and
  is this command's own (128+N for a signal N). ``--gpu-index``: sample that GPU into
  ``DIR/gpu.json`` meanwhile. A ``LOOPER_LIMITS`` entry it cannot read: no run, the words in
  ``DIR/refused``, exit :data:`REFUSED_CODE` (the daemon's bug: its harness error, never the candidate's).
  Where that entry says several runs at a time (the daemon's workers), the run gets its share of this host's
  cores as ``LOOPER_THREADS``, ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` (looper.core.run.cores.host_threads).
- ``check-device DEVICE [--sandbox isolated|network] --env K=V ...``: the daemon's GPU check on this host
  (looper/executors/devicecheck.py): torch on DEVICE as a run runs here, its attempts as JSON (``refused``: a
  ``LOOPER_LIMITS`` it cannot read).
- ``end DIR [--wait-for-pid] --kill-after S``: SIGTERM then SIGKILL the run's process group
  (``--wait-for-pid``: up to 2 s for a starting run's pid; none once ``status`` is written, as a
  refused run's is); what happened, the run's status and its GPU summary (and ``refused``: why ``run`` ran nothing).
- ``reap --kill-after S``: end every live run under ``runs/`` whose process still works in
  this checkout (a run a dead daemon left behind).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import signal
import stat
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import looper.executors.evaluator as evaluator
import looper.executors.limits as limits
import looper.executors.sandbox as sandbox
from looper import proc
from looper.core.run.cores import host_threads
from looper.executors.common import THREAD_VARS, label_index
from looper.workspace.hashes import TEST_SEED_ENV, file_sha256, secret_seed_file, tree_hash

REFUSED_CODE = 70  # EX_SOFTWARE: `run` refused a request it could not read; DIR/refused says why


def _say(payload: dict[str, Any]) -> int:
    print(json.dumps(payload), flush=True)
    return 0


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_group(pgid: int, kill_after: float) -> str:
    """SIGTERM a process group, SIGKILL it ``kill_after`` seconds later: GONE, TERMINATED or KILLED."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return "GONE"
    deadline = time.monotonic() + kill_after
    while _alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return "TERMINATED"
    return "KILLED"


#: A run folder changed this recently is never pruned: its run may not have started yet (no run.pid before), or
#: may have ended a moment ago with its out/ not yet fetched (``end`` removes run.pid, which touches the folder),
#: while the daemon's other runs at a time (its seeds side by side, its workers) make folders of their own. Short:
#: a GPU night ends runs by the dozen a minute, each folder with its weights.
FRESH_SECONDS = 120.0


def _make_run_dir(run: Path, keep: int) -> None:
    """Create ``run/out`` and delete all but the ``keep`` newest run folders without a run.pid and unchanged for
    :data:`FRESH_SECONDS`."""
    (run / "out").mkdir(parents=True, exist_ok=True)
    changed = {p: _mtime(p) for p in run.parent.iterdir() if p.is_dir()}
    stale = time.time() - FRESH_SECONDS
    for old in sorted(changed, key=changed.__getitem__, reverse=True)[keep:]:
        if not (old / "run.pid").exists() and old != run and changed[old] < stale:
            shutil.rmtree(old, ignore_errors=True)


def _mtime(path: Path) -> float:
    """When ``path`` last changed; gone meanwhile (another run's prune took it): infinitely long ago."""
    try:
        return path.stat().st_mtime
    except OSError:
        return float("-inf")


# -- commands -------------------------------------------------------------------------------------
def cmd_root(args: argparse.Namespace) -> int:
    root = Path.cwd().parent
    (root / "runs").mkdir(exist_ok=True)
    return _say({"root": str(root)})


def cmd_facts(args: argparse.Namespace) -> int:
    root = Path.cwd().parent
    facts: dict[str, object] = {"free_bytes": shutil.disk_usage(root).free, "python": platform.python_version(),
                                "rsync": shutil.which("rsync") is not None,
                                # the runs here get it (the sandbox passes it): it renumbers their GPUs
                                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                "cores": limits.machine()["cores"]}  # what feeds this host's GPU (the slots' plan)
    if args.sandbox:  # can this host build the sandbox train.py will run in? (a real `bwrap ... true`)
        from looper.executors.sandbox import SandboxPolicy, preflight

        v = preflight(SandboxPolicy(mode="bwrap", network=args.sandbox == "network"))
        facts["sandbox"] = {"ok": v.ok, "why": "; ".join(v.blocking)}
    return _say(facts)


def cmd_check_device(args: argparse.Namespace) -> int:
    """The GPU check of the daemon's preflight, on this host: looper.core.run.probe's program on ``args.device``
    the way a run runs here (this interpreter, the run's environment, this host's sandbox and the limits the
    request asks for), in a folder of its own under runs/ (removed after); the attempts, for the daemon to judge."""
    from looper.executors import devicecheck
    from looper.workspace import trees

    env = dict(kv.split("=", 1) for kv in args.env)
    try:
        box = limits.from_request(env, None)
    except ValueError as exc:  # the daemon's own request: never a check under fewer limits than asked
        return _say({"refused": f"looper.remote check-device refused the check: {exc}"})
    folder = Path.cwd().parent / "runs" / f"check-device-{os.getpid()}"
    policy = sandbox.SandboxPolicy(mode="bwrap", network=args.sandbox == "network") if args.sandbox else \
        sandbox.SandboxPolicy(mode="none")
    try:
        tried = devicecheck.attempts(args.device, python=sys.executable, env=env, policy=policy, caps=box.caps,
                                     folder=folder, oom_score_adj=box.oom_score_adj, min_free_bytes=box.min_free_bytes)
    finally:
        trees.remove_tree(folder)
    return _say({"tried": [dataclasses.asdict(a) for a in tried], "memory_words": box.caps.memory_words()})


def cmd_check(args: argparse.Namespace) -> int:
    """The files' sha256; with ``--run`` its folder made, and each ``--code`` file copied into ``RUN/code/`` first
    (the run's own copy, which no later sync of another run's train.py changes): its hash is the copy's."""
    if args.run:
        _make_run_dir(Path(args.run), args.keep)
    own: dict[str, Path] = {}
    if args.run and args.code:
        code = Path(args.run) / "code"
        code.mkdir(exist_ok=True)
        for name in args.code:
            if Path(name).is_file():
                shutil.copyfile(name, code / Path(name).name)
                own[name] = code / Path(name).name
    paths = {n: own.get(n, Path(n)) for n in args.files}
    return _say({"sha256": {n: (file_sha256(p) if p.is_file() else None) for n, p in paths.items()}})


def cmd_run_dir(args: argparse.Namespace) -> int:
    _make_run_dir(Path(args.run), args.keep)
    return _say({"cached": bool(args.cached) and Path(args.cached).is_file()})


def cmd_data(args: argparse.Namespace) -> int:
    data = Path(args.dir)
    given = dict(kv.split("=", 1) for kv in args.env)
    if not (data / "manifest.json").is_file():
        if data.is_dir() and any(data.iterdir()):
            return _say({"state": "dirty"})
        if not args.prepare:
            return _say({"state": "missing"})
        env = {**given, TEST_SEED_ENV: str(secret_seed_file(Path.cwd().parent))}  # this host's secret, beside runs/
        done = proc.run([sys.executable, args.prepare, "--out", str(data), "--scale", args.scale,
                         "--seed", str(args.seed)], env=env, timeout=3600)
        if not done.ok or not (data / "manifest.json").is_file():
            lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
            return _say({"state": "prepare failed", "exit": done.exit_code, "tail": " | ".join(lines[-5:])})
    digest, files = tree_hash(data)
    found: dict[str, Any] = {"state": "present", "hash": digest, "files": files}
    if args.index:  # made once per data set on this host, by the runs' own interpreter (this one)
        found["label_index"] = label_index(sys.executable, data, Path.cwd(), given)
    return _say(found)


def _print_line(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):  # the ssh client is gone; the run goes on, logged here
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces stdout for the rest of the run


# ---------------------------------------------------------------------------- this host's sandbox
def _present(path: str | None) -> Path | None:
    return Path(path) if path and Path(path).is_dir() else None


def wrap_on_host(argv: Sequence[str], run: Path, env: dict[str, str],
                 tmp_bytes: int = 0, checkout: Path | None = None) -> tuple[list[str], Callable[[], None]]:
    """``python -m looper.remote run``'s side: ARGV inside the sandbox the executor asked for, its /tmp and
    /dev/shm ``tmp_bytes`` each (the run's limits here: [limits] tmp_max_bytes; 0: unsized).

    The executor asks through ``env``: ``LOOPER_SANDBOX`` = ``train`` | ``eval`` (absent: no
    sandbox), ``LOOPER_SANDBOX_NETWORK=1``; both are taken out of ``env``. ``checkout``: the run's own
    code folder (``run/code``: its train.py and the fixed files); default the working directory, the host's
    checkout (train.py, evaluate.py and the synced looper package).
    For ``eval``, ARGV is evaluate.py's command line; the harness's copies of evaluate.py and of
    the looper package go to ``run/eval/``, and the returned callable (run after the command)
    moves METRICS.json to the ``--out`` ARGV named.
    """
    kind = env.pop("LOOPER_SANDBOX", "")
    network = env.pop("LOOPER_SANDBOX_NETWORK", "") == "1"
    argv = list(argv)
    if not kind:
        return argv, lambda: None
    checkout = checkout or Path.cwd()
    if kind == "train":
        return sandbox.train_argv(argv, checkout=checkout, out_dir=run / "out",
                          data_dir=Path(env.get("LOOPER_DATA", "data")), env=env,
                          policy=sandbox.SandboxPolicy(network=network),
                          pretrained=_present(env.get("LOOPER_PRETRAINED_DIR")), tmp_bytes=tmp_bytes), lambda: None
    if kind != "eval":
        raise ValueError(f"LOOPER_SANDBOX must be train or eval, got {kind!r}")
    opts = dict(zip(argv[2::2], argv[3::2], strict=False))  # python evaluate.py --weights W --data D --out O ...
    copy, out = evaluator.prepare_evaluator(checkout / "evaluate.py", run / "eval")
    package = run / "eval" / "pkg"
    shutil.copytree(checkout / "looper", package / "looper", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wrapped = sandbox.eval_argv(argv[0], copy, weights=Path(opts["--weights"]), data_dir=Path(opts["--data"]), out_dir=out,
                        env=env, device=opts.get("--device", ""), package=package, tmp_bytes=tmp_bytes)
    target = Path(opts["--out"])

    def collect() -> None:
        evaluator.collect_metrics(out, target)

    return wrapped, collect


def cmd_run(args: argparse.Namespace) -> int:
    run = Path(args.run)
    (run / "out").mkdir(parents=True, exist_ok=True)
    env = dict(kv.split("=", 1) for kv in args.env)
    kind = env.get("LOOPER_SANDBOX", "")
    try:
        box = limits.from_request(env, run / "out" if kind != "eval" else None)  # LOOPER_LIMITS: the run's own limits
    except ValueError as exc:  # the daemon's own request, unreadable: no run at all, never one with fewer limits
        words = f"looper.remote run refused the run: {exc}"
        (run / "refused").write_text(words + "\n")
        print(f"[looper] {words}", flush=True)
        (run / "status").write_text(f"{REFUSED_CODE}\n")
        return REFUSED_CODE
    if box.on:  # what the run runs under here (limits [limits] left at 0 are this host's own): `end` hands it back
        _write_json(run / "caps.json", dataclasses.asdict(box.caps))
    threads = 0 if "LOOPER_THREADS" in env else host_threads(limits.machine()["cores"], box.runs)
    if threads:  # the daemon's workers' runs at a time on this host: each on its share of its cores
        env.update({var: str(threads) for var in ("LOOPER_THREADS", *THREAD_VARS)})
    code = Path(args.code) if args.code else Path.cwd()  # the run's own copy of train.py (check --code)
    argv, after = wrap_on_host(args.argv, run, env, box.caps.tmp_max_bytes, code)  # LOOPER_SANDBOX=train|eval: this host's sandbox
    sampler = None
    if args.gpu_index is not None:
        from looper.executors.gpu import GpuSampler

        gpu_json = run / "gpu.json"
        sampler = GpuSampler(args.gpu_index, on_sample=lambda summary: _write_json(gpu_json, summary)).start()
        _write_json(gpu_json, sampler.summary())
    bounds = proc.Limits(budget_seconds=args.budget or None, kill_after=args.kill_after)
    try:
        with box:
            bounds.check = box.check if box.on else None
            s = proc.supervise(box.wrap(argv), cwd=code, env=env, log_path=run / "run.log", limits=bounds,
                               on_line=_print_line, on_start=lambda pid: (box.started(pid), (run / "run.pid").write_text(str(pid))))
            if box.on:  # what this host saw of the run's limits: `end` hands it to the daemon
                _write_json(run / "limits.json", dataclasses.asdict(box.seen(s.log_error, s.limit)))
    finally:
        if sampler is not None:
            _write_json(run / "gpu.json", sampler.stop())
    after()  # the sandboxed evaluator's METRICS.json to where the argv asked for it
    code = 128 + s.signal if s.signal else (s.exit_code or 0)
    (run / "status").write_text(f"{code}\n")
    return code


def cmd_end(args: argparse.Namespace) -> int:
    run = Path(args.run)
    pid_file = run / "run.pid"
    status = run / "status"
    deadline = time.monotonic() + (2.0 if args.wait_for_pid else 0.0)
    while not pid_file.exists() and not status.exists() and time.monotonic() < deadline:  # a refused run has no pid
        time.sleep(0.1)
    code = status.read_text().strip() if status.is_file() else ""
    pgid = _read_int(pid_file)
    what = end_group(pgid, args.kill_after) if pgid else "GONE"
    pid_file.unlink(missing_ok=True)
    gpu, seen, caps = (_read_json_or_none(run / name) for name in ("gpu.json", "limits.json", "caps.json"))
    refused = (run / "refused").read_text().strip() if (run / "refused").is_file() else ""
    return _say({"what": what, "status": code, "gpu": gpu, "out": out_usage(run / "out"),
                 **({"seen": seen} if seen else {}), **({"caps": caps} if caps else {}),
                 **({"refused": refused} if refused else {})})


def _read_json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def out_usage(out: Path, stop_at: int = 1_000_000) -> dict[str, Any]:
    """What a run's out/ holds, measured here before anything is fetched (issue 39): its files' apparent
    bytes, its entries, and the files that are sparse (fewer blocks on disk than their size says)."""
    from looper.workspace import trees

    total = 0
    sparse: list[str] = []
    walk = trees.Walk(out, max_entries=stop_at + 1)  # iterative, links never followed (issue 48)
    for rel, st in walk:
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
            if st.st_size > 65536 and st.st_blocks * 512 < st.st_size // 2:
                sparse.append(rel[:200])
    entries = walk.entries
    if walk.too_deep:
        sparse.append(f"(folders more than {walk.max_depth} levels deep, not measured)")
    return {"bytes": total, "entries": entries, "sparse": sparse[:5]}


def cmd_reap(args: argparse.Namespace) -> int:
    checkout = Path.cwd()
    ended = []
    for pid_file in sorted((checkout.parent / "runs").glob("*/run.pid")):
        pgid = _read_int(pid_file)
        if pgid and _alive(pgid):
            try:
                cwd = os.readlink(f"/proc/{pgid}/cwd")
            except OSError:
                cwd = str(checkout)  # no /proc (not Linux): trust the pid file
            if cwd in (str(checkout), str(pid_file.parent / "code")):  # a recycled group id is someone else's
                end_group(pgid, args.kill_after)
                ended.append([pgid, pid_file.parent.name])
        pid_file.unlink(missing_ok=True)
    return _say({"ended": ended})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m looper.remote")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("root").set_defaults(fn=cmd_root)
    p = sub.add_parser("facts")
    p.add_argument("--sandbox", choices=("", "isolated", "network"), default="",
                   help="also build the training sandbox once (isolated: no network)")
    p.set_defaults(fn=cmd_facts)
    p = sub.add_parser("check")
    p.add_argument("files", nargs="+")
    p.add_argument("--run", default="")
    p.add_argument("--keep", type=int, default=6)
    p.add_argument("--code", action="append", default=[], help="with --run: copy this file into RUN/code/")
    p.set_defaults(fn=cmd_check)
    p = sub.add_parser("run-dir")
    p.add_argument("run")
    p.add_argument("--keep", type=int, default=6)
    p.add_argument("--cached", default="")
    p.set_defaults(fn=cmd_run_dir)
    p = sub.add_parser("data")
    p.add_argument("dir")
    p.add_argument("--prepare", default="")
    p.add_argument("--scale", default="")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--index", action="store_true", help="make or keep the data set's label index")
    p.set_defaults(fn=cmd_data)
    p = sub.add_parser("run")
    p.add_argument("run")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--gpu-index", type=int, default=None)
    p.add_argument("--budget", type=float, default=0.0)
    p.add_argument("--kill-after", type=float, default=10.0)
    p.add_argument("--code", default="", help="the run's own code folder (check --code): its working directory")
    p.add_argument("argv", nargs="+")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("check-device")
    p.add_argument("device")
    p.add_argument("--sandbox", choices=("isolated", "network"), default=None)
    p.add_argument("--env", action="append", default=[])
    p.set_defaults(fn=cmd_check_device)
    p = sub.add_parser("end")
    p.add_argument("run")
    p.add_argument("--wait-for-pid", action="store_true")
    p.add_argument("--kill-after", type=float, default=10.0)
    p.set_defaults(fn=cmd_end)
    p = sub.add_parser("reap")
    p.add_argument("--kill-after", type=float, default=10.0)
    p.set_defaults(fn=cmd_reap)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
