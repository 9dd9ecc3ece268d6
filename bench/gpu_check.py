#!/usr/bin/env python3
"""The GPU check: proves looper's GPU path on the machine it runs on, in about 9 minutes (`make gpu-check`).

Run it where a GPU is, from the repository's root, with the interpreter that holds torch:

    python3 bench/gpu_check.py [--wheels DIR] [--debs DIR] [--out DIR]   # on the GPU machine
    python3 bench/gpu_check.py --dry-run                                  # a rehearsal on a CPU (CI runs it)

Each step is time-boxed and appends one line to OUT/summary.txt as it ends ("ok", "FAIL", or "skipped" with
the reason); OUT/gpu_check.json holds the figures, OUT/results.tar.gz the logs, the night's database and the
GPU samples. Steps:

  facts     GPU, driver, torch and CUDA, bubblewrap (the carried Debian package unpacked under the work folder
            where the machine has none), CUDA inside looper's own training sandbox
  install   carried wheels (--wheels: what the machine lacks) and looper itself into the interpreter, offline
  tests     tests/executors/test_gpu.py and tests/e2e/test_offline.py on this machine
  amp       train.py on the GPU: in looper's sandbox (read-only checkout, no network), and outside it with every
            download made to fail (tests/offline_guard): AMP decided by train.py's own check, nothing downloaded
  determinism  one seed trained twice alone and twice side by side: are the weights identical?
  night     `looper init --preset demo`, require_gpu, the runs of a look side by side (seed_jobs) and workers on
            the one GPU; the GPU sampled through NVML: busy share, mean utilisation, peak memory, decisions/hour
  probe     train.py alone on the GPU, 1, 4 and 8 copies at once: steps a second
  tune      Ultralytics' own model.tune() on the same data, model (train.py's) and steps a run: iterations per GPU-hour

Nothing here downloads anything (the machine may be offline); a step a CPU cannot take says so in its line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_parts import (  # noqa: E402
    gpu_window,
    gpu_words,
    night_figures,
    rlimit_verdict,
    sampler,
    tail,
    toml_set,
    unpack_deb,
    weights_digest,
)

PY = sys.executable
STEPS = ("facts", "install", "tests", "amp", "determinism", "night", "probe", "tune")
# Seconds each step may take on a GPU (the whole fits 540 s) and in a dry run on 2 CPU cores.
BOX = {"facts": (30, 60), "install": (60, 30), "tests": (60, 240), "amp": (45, 120), "determinism": (80, 200),
       "night": (200, 600), "probe": (60, 200), "tune": (40, 120)}


class Check:
    """The work folder, the output folder, the summary lines and the figures of one run of the script."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.dry = args.dry_run
        self.out = Path(args.out or os.environ.get("OUT") or REPO / "bench" / "out" / "gpu-check").resolve()
        self.work = Path(args.work).resolve()
        self.wheels, self.debs = args.wheels, args.debs
        self.only = set(args.only.split(",")) if args.only else set(STEPS)
        self.device = "cpu" if self.dry else "cuda"
        self.figures: dict[str, object] = {"dry_run": self.dry}
        self.samples: list[tuple[float, float, float]] = []  # (time, GPU utilisation %, memory used MiB)
        self.t0 = time.time()
        self.deadline = self.t0 + args.total_seconds
        shutil.rmtree(self.work, ignore_errors=True)
        for d in (self.out, self.work / "logs", self.work / "home", self.work / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.txt").write_text("")
        self.env = dict(os.environ, HOME=str(self.work / "home"), TMPDIR=str(self.work / "tmp"), YOLO_OFFLINE="1",
                        YOLO_CONFIG_DIR=str(self.work / "ultralytics"), XDG_CACHE_HOME=str(self.work / "tmp"),
                        PYTHONUNBUFFERED="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
                        GIT_AUTHOR_NAME="gpu-check", GIT_AUTHOR_EMAIL="gpu@check", GIT_COMMITTER_NAME="gpu-check",
                        GIT_COMMITTER_EMAIL="gpu@check")
        self.env["PATH"] = f"{Path(PY).parent}:{self.env.get('PATH', '')}"

    def line(self, text: str) -> None:
        with open(self.out / "summary.txt", "a") as f:
            f.write(text + "\n")
        print(text, flush=True)

    def run(self, argv: list[str], seconds: float, log: str, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """A command with a time limit, its output kept in logs/LOG; a timeout is exit 124."""
        child = subprocess.Popen(argv, cwd=cwd or REPO, env=env or self.env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = child.communicate(timeout=max(5.0, seconds))
            p = subprocess.CompletedProcess(argv, child.returncode, out, err)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, 9)  # its whole group: the tuner's and the trainers' own children too
            out, err = child.communicate()
            p = subprocess.CompletedProcess(argv, 124, out, err + "\n[timed out]")
        with open(self.work / "logs" / log, "a") as f:
            f.write(f"$ {' '.join(map(str, argv))}\n{p.stdout}\n{p.stderr}\n[exit {p.returncode}]\n")
        return p

    def python(self, code: str, seconds: float, log: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return self.run([PY, "-c", code], seconds, log, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- the steps
def step_facts(c: Check, left: float) -> str:
    smi = c.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], 10,
                "facts.log") if shutil.which("nvidia-smi") else None
    torch = c.python("import torch, json; ok = torch.cuda.is_available(); print(json.dumps({'torch': "
                     "torch.__version__, 'cuda_build': torch.version.cuda, 'cuda': ok, 'device': "
                     "torch.cuda.get_device_name(0) if ok else None}))", 60, "facts.log")
    facts = json.loads(torch.stdout.strip().splitlines()[-1]) if torch.returncode == 0 else {"torch": tail(torch)}
    facts["nvidia_smi"] = smi.stdout.strip() if smi and smi.returncode == 0 else None
    facts["cores"] = os.cpu_count()
    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")  # the runs get it: it renumbers their GPUs
    facts["bwrap"] = carried(c, "bwrap", ("bubblewrap", "libcap2", "libselinux1"))
    facts["git"] = carried(c, "git", ("git",))
    facts["cuda_under_rlimit_data"] = cuda_under_rlimit(c)
    c.figures["facts"] = facts
    if not c.dry and not facts.get("cuda"):
        return f"FAIL no CUDA: {facts}"
    if facts["cuda_under_rlimit_data"].startswith("BROKEN"):  # looper's default run limits would crash every run here
        return (f"FAIL torch under looper's RLIMIT_DATA: {facts['cuda_under_rlimit_data']}; the night below runs "
                f"with [limits] run_limits = false")
    return (f"ok {facts.get('device') or 'cpu (dry run)'}; driver {facts['nvidia_smi'] or '-'}; torch "
            f"{facts.get('torch')} cuda {facts.get('cuda_build')}; {facts['cores']} cores; bwrap {facts['bwrap']}; "
            f"git {facts['git']}; torch under looper's RLIMIT_DATA: {facts['cuda_under_rlimit_data']}"
            + (f"; CUDA_VISIBLE_DEVICES={facts['cuda_visible_devices']}" if facts["cuda_visible_devices"] is not None else ""))


def night_shape(c: Check) -> tuple[int, int]:
    """(seed_jobs, workers) of the demo night this script runs."""
    return (1, 1) if c.dry else (4, 2 if (os.cpu_count() or 2) >= 16 else 1)


def cuda_under_rlimit(c: Check) -> str:
    """torch (CUDA on a GPU: a convolution's forward and backward) in a process under the RLIMIT_DATA each run of
    the night below gets ([limits] memory_max_bytes by default: its share of 75 % of physical memory with the
    night's runs at a time, looper.core.run.limits.derived): "ok (N bytes)" or what broke."""
    sys.path.insert(0, str(REPO))  # the pure core (no dependency) before looper is installed: the install step
    from looper.core.run.limits import derived  # comes after this one
    from looper.core.run.probe import PROGRAM  # the program the night's preflight runs in a run's box
    from looper.core.run.slots import host_runs

    if not shutil.which("prlimit"):
        return "no prlimit"
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    mem = derived(memory, os.cpu_count() or 1, 32768, host_runs(*night_shape(c), prestart=True))["memory_max_bytes"]
    device = "cpu" if c.dry else "cuda"  # on a GPU, CUDA itself: a fall back to the CPU would prove nothing
    p = c.run(["prlimit", f"--data={mem}:{mem}", "--", PY, "-c", PROGRAM, device], 60, "facts.log")
    verdict = rlimit_verdict(p.returncode, p.stdout, mem, device)
    return verdict if verdict.startswith("ok") else f"{verdict[:-1]}: {tail(p)[:120]})"


def carried(c: Check, tool: str, packages: tuple[str, ...]) -> str:
    """The machine's ``tool``, else the carried Debian packages (--debs) unpacked under the work folder and put first
    on PATH (a shim sets LD_LIBRARY_PATH to the carried libraries; git gets its exec path)."""
    if shutil.which(tool):
        return f"system {shutil.which(tool)}"
    debs = [d for d in sorted(Path(c.debs).glob("*.deb")) if d.name.split("_")[0] in packages] if c.debs else []
    if not debs:
        return "MISSING (not on this machine, none carried)"
    root = c.work / "sysroot"
    for d in debs:
        unpack_deb(d, root)
    shim = root / "shim" / tool
    shim.parent.mkdir(parents=True, exist_ok=True)
    libs = ":".join(str(root / p) for p in ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"))
    shim.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH={libs} exec {root}/usr/bin/{tool} "$@"\n')
    shim.chmod(0o755)
    if tool == "git":
        c.env.update(GIT_EXEC_PATH=str(root / "usr/lib/git-core"), GIT_TEMPLATE_DIR=str(root / "usr/share/git-core/templates"))
    c.env["PATH"] = f"{shim.parent}:{c.env['PATH']}"
    os.environ.update(c.env)
    v = c.run([tool, "--version"], 10, "facts.log")
    return f"carried ({(v.stdout.strip() or tail(v))[:60]})"


def step_install(c: Check, left: float) -> str:
    if c.dry:
        return "skipped: a dry run uses this interpreter's installed looper"
    pip = [PY, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
    if os.geteuid() == 0:
        pip.append("--root-user-action=ignore")
    wheels = sorted(str(w) for w in Path(c.wheels).glob("*.whl")) if c.wheels else []
    if wheels:
        p = c.run(pip + wheels, left / 2, "install.log")
        if p.returncode != 0:
            return f"FAIL wheels: {tail(p, 3)}"
    p = c.run(pip + ["--no-build-isolation", str(REPO)], left / 2, "install.log")
    if p.returncode != 0:
        return f"FAIL looper: {tail(p, 3)}"
    imp = c.python("import looper.cli, ultralytics, sqlalchemy, git, apprise, pydantic, openai, pynvml; "
                   "print('ultralytics', ultralytics.__version__)", 60, "install.log", cwd=c.work)
    return f"ok {len(wheels)} wheels + looper; {tail(imp)}" if imp.returncode == 0 else f"FAIL import: {tail(imp, 2)}"


def step_tests(c: Check, left: float) -> str:
    p = c.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--timeout", "120",
               "tests/executors/test_gpu.py", "tests/e2e/test_offline.py", "-k", "not export"], left, "tests.log")
    return ("ok " if p.returncode == 0 else "FAIL ") + tail(p)


def demo_data(c: Check) -> Path:
    data = c.work / "data"
    if not (data / "dataset.yaml").is_file():
        c.run([PY, str(REPO / "prepare.py"), "--out", str(data), "--scale", "tiny" if c.dry else "demo", "--seed", "0",
               "--test-seed", "0"], 120, "data.log")
    return data


def train_env(c: Check, data: Path, out: Path, seed: int, steps: int, **extra: str) -> dict[str, str]:
    return dict(c.env, LOOPER_DATA=str(data), LOOPER_OUT=str(out), LOOPER_SEED=str(seed), LOOPER_MAX_STEPS=str(steps),
                LOOPER_BUDGET_SECONDS="300", LOOPER_DEVICE=c.device,
                LOOPER_PRETRAINED_DIR=str(REPO / "looper" / "pretrained"), **extra)


def step_amp(c: Check, left: float) -> str:
    """train.py on the GPU twice: with every download made to fail, and inside looper's training sandbox."""
    data, steps = demo_data(c), 4 if c.dry else 30
    guard = c.work / "guard.log"
    env = train_env(c, data, c.work / "amp-guard", 0, steps, PYTHONPATH=str(REPO / "tests" / "offline_guard"),
                    LOOPER_GUARD_LOG=str(guard))
    cwd = c.work / "amp-cwd"
    cwd.mkdir()
    a = c.run([PY, str(REPO / "train.py")], left / 2, "amp.log", cwd=cwd, env=env)
    amp_a = next((x for x in a.stdout.splitlines() if x.startswith("LOOPER_AMP")), "no LOOPER_AMP line")
    tried = guard.read_text().strip() if guard.exists() else ""
    code = f"""
import sys, subprocess, pathlib
from looper.executors import sandbox
ck, out = pathlib.Path({str(c.work / 'amp-ck')!r}), pathlib.Path({str(c.work / 'amp-box')!r})
ck.mkdir(); out.mkdir()
(ck / 'train.py').write_text(pathlib.Path({str(REPO / 'train.py')!r}).read_text())
env = {{k: v for k, v in {json.dumps(train_env(c, data, c.work / 'amp-box', 0, steps))}.items() if k.startswith('LOOPER_')}}
argv = sandbox.train_argv([sys.executable, 'train.py'], checkout=ck, out_dir=out, data_dir=pathlib.Path(env['LOOPER_DATA']),
                          env=env, pretrained=pathlib.Path(env['LOOPER_PRETRAINED_DIR']))
r = subprocess.run(argv, cwd=ck, capture_output=True, text=True)
print("\\n".join(x for x in r.stdout.splitlines() if x.startswith("LOOPER_")))
print(r.stderr[-4000:], file=sys.stderr); sys.exit(r.returncode)
"""
    b = c.python(code, left / 2, "amp.log", cwd=c.work)
    amp_b = next((x for x in b.stdout.splitlines() if x.startswith("LOOPER_AMP")), "no LOOPER_AMP line")
    want = "on=False" if c.dry else "on=True"
    ok = a.returncode == 0 and b.returncode == 0 and not tried and want in amp_a and want in amp_b
    c.figures["amp"] = {"outside": amp_a, "sandbox": amp_b, "downloads_tried": tried, "exit": [a.returncode, b.returncode]}
    return (f"{'ok' if ok else 'FAIL'} outside the box (downloads fail): exit {a.returncode} {amp_a}; in looper's "
            f"sandbox: exit {b.returncode} {amp_b}; downloads tried: {tried or 'none'}"
            + ("" if b.returncode == 0 else f"; box said: {tail(b, 2)}"))


def step_determinism(c: Check, left: float) -> str:
    """Seed 3 trained alone twice, then twice side by side: the same weights each time?"""
    data, steps = demo_data(c), 2 if c.dry else 60
    digests: dict[str, str | None] = {}
    for name in ("alone1", "alone2"):
        c.run([PY, str(REPO / "train.py")], max(10.0, c.step_end - time.time()), "determinism.log", cwd=c.work,
              env=train_env(c, data, c.work / "det" / name, 3, steps))
        digests[name] = weights_digest(c.work / "det" / name)
    procs = [subprocess.Popen([PY, str(REPO / "train.py")], cwd=c.work, env=train_env(c, data, c.work / "det" / n, 3, steps),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in ("packed1", "packed2")]
    for p in procs:
        try:
            p.wait(timeout=max(5.0, c.step_end - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
    for n in ("packed1", "packed2"):
        digests[n] = weights_digest(c.work / "det" / n)
    c.figures["determinism"] = digests
    ref = digests["alone1"]
    packed = [digests[n] for n in ("packed1", "packed2")]

    def word(d: str | None) -> str:
        return "missing" if d is None or ref is None else ("same" if d == ref else "different")

    return (f"{'ok' if None not in digests.values() else 'FAIL'} {steps} steps on {c.device}, seed 3: the second run "
            f"alone {word(digests['alone2'])}, the two side by side {word(packed[0])} and {word(packed[1])} "
            f"(tensor digests {digests})")


def step_night(c: Check, left: float) -> str:
    ws = c.work / "night"
    looper = [PY, "-m", "looper.cli"]
    sized = c.run(looper + ["init", str(c.work / "night-sized"), "--preset", "demo", "--gpu"], 60, "night.log")
    c.figures["init_gpu"] = {"exit": sized.returncode, "said": (sized.stdout + sized.stderr).strip().splitlines()[:3]}
    p = c.run(looper + ["init", str(ws), "--preset", "tiny" if c.dry else "demo"], 120, "night.log")
    if p.returncode != 0:
        return f"FAIL init: {tail(p, 2)}"
    jobs, workers = night_shape(c)
    toml_set(ws / "looper.toml", {
        "loop": {"seed_jobs": jobs, "workers": workers, "baseline_seeds": max(2, jobs), "noise_reruns": max(1, jobs - 1),
                 "prestart": "on",  # boxes started ahead of their runs (auto would too on the GPU; the dry run as well)
                 "confirm_seeds": 0 if c.dry else jobs, **({"max_steps": 4} if c.dry else {})},
        "executor": {"require_gpu": not c.dry, "sandbox": "bwrap"}, "confirm": {"transfer_steps": 0}})
    limits = (c.figures.get("facts") or {}).get("cuda_under_rlimit_data", "ok")  # type: ignore[union-attr]
    if not limits.startswith("ok") and limits != "no prlimit":  # torch broke under the memory rlimit: the night without run limits
        toml_set(ws / "looper.toml", {"limits": {"run_limits": False}})
    t0 = time.time()
    stop_at = max(30.0, left - 40)
    run = [*looper, "run", "--max-experiments", "1" if c.dry else "3"]
    try:
        proc = subprocess.Popen(run, cwd=ws, env=c.env, stdout=open(c.work / "logs" / "night-run.log", "w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        rc = proc.wait(timeout=stop_at)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 2)  # SIGINT: the daemon stops at the next safe point and records what ran
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            rc = proc.wait()
    t1 = time.time()
    for cmd, name in ((["history", "--json"], "history.json"), (["report", "--json"], "report.json"),
                      (["status"], "status.txt"), (["report", "--html", str(c.work / "report.html")], "report-html.txt")):
        r = c.run(looper + cmd, 30, "night.log", cwd=ws)
        (c.work / name).write_text(r.stdout)
    night = night_figures(ws / "experiments.db", t0, t1)
    night.update(gpu=gpu_window(c.samples, night.pop("first_train_at") or t0, t1), exit=rc, wall_s=round(t1 - t0, 1),
                 seed_jobs=jobs, workers=workers)
    night["decisions_per_gpu_hour"] = round(night["decided"] / ((t1 - t0) / 3600), 1) if t1 > t0 else None
    said = {log: [ln for f in (ws / "runs").rglob(log) for ln in f.read_text(errors="replace").splitlines()
                  if ln.startswith("looper prestart: ")] for log in ("train.log", "eval.log")}
    ready = [ln for lines in said.values() for ln in lines if "looper prestart: ready" in ln]  # CUDA started?
    night["boxes_ahead"] = sum("looper prestart: ready" in ln for ln in said["train.log"])
    night["eval_boxes_ahead"] = sum("looper prestart: ready" in ln for ln in said["eval.log"])
    night["boxes_cuda_initialised"] = sum("CUDA initialised: True" in ln for ln in ready)
    # a module of the launcher's list this machine lacks: its import is left to the run, after go (not a failure)
    night["imports_left_to_runs"] = sorted({ln.split()[2] for lines in said.values() for ln in lines
                                            if ln.endswith(")") and " not imported (" in ln})
    c.figures["night"] = night
    ok = (night["runs"] > 0 and night["failed_runs"] == 0 and rc in (0, 130, -2) and night["boxes_ahead"] > 0
          and night["eval_boxes_ahead"] > 0 and night["boxes_cuda_initialised"] == 0)
    return (f"{'ok' if ok else 'FAIL'} exit {rc} in {night['wall_s']} s; {night['experiments']}; {night['runs']} runs "
            f"({night['failed_runs']} failed) on {night['devices']}; seed_jobs {jobs} x workers {workers}; per run: "
            f"slot to first step {night['startup_s']} s ({night['boxes_ahead']} runs and {night['eval_boxes_ahead']} "
            "evaluations in boxes started ahead, CUDA "
            f"initialised before go in {night['boxes_cuda_initialised']}"
            + (f", not imported before go: {', '.join(night['imports_left_to_runs'])}" if night["imports_left_to_runs"] else "")
            + f"), training {night['train_s']} s, evaluation "
            f"{night['eval_s']} s; "
            f"{night['decided']} decided, {night['decisions_per_gpu_hour']}/GPU-hour; {gpu_words(night['gpu'])}; "
            f"runs training {night['runs_training']}"
            + f"; train.py's start-up phases (s since its first line) {night['startup_phases']}"
            + ("" if limits.startswith("ok") or limits == "no prlimit" else "; run limits OFF (torch broke under RLIMIT_DATA)")
            + (f"; GPU check before the baseline: {night['device_check']}" if night.get("device_check") else "")
            + (f"; halt: {night['halt']}" if night.get("halt") else ""))


def step_probe(c: Check, left: float) -> str:
    data, steps = demo_data(c), 2 if c.dry else 150
    counts = (1, 2) if c.dry else (1, 4, 8)
    parts, rates = [], {}
    for n in counts:
        if time.time() + 15 > c.step_end:
            parts.append(f"x{n} skipped (time)")
            continue
        t0 = time.time()
        outs = [c.work / "probe" / f"x{n}" / f"s{i}" for i in range(n)]
        threads = str(max(1, (os.cpu_count() or 2) // n))
        procs = [subprocess.Popen([PY, str(REPO / "train.py")], cwd=c.work, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True,
                                  env=train_env(c, data, o, i, steps, LOOPER_THREADS=threads, OMP_NUM_THREADS=threads))
                 for i, o in enumerate(outs)]
        for p in procs:
            try:
                p.wait(timeout=max(5, c.step_end - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
        t1 = time.time()
        per = []
        for o in outs:
            try:
                j = json.loads((o / "train.json").read_text())
                per.append(j["steps"] / max(1e-6, j["seconds"] - (j.get("startup_seconds") or 0)))
            except (OSError, ValueError, KeyError):
                pass
        rates[n] = round(sum(per), 1)
        g = gpu_window(c.samples, t0, t1)
        parts.append(f"x{n} {rates[n]} steps/s ({len(per)}/{n} ok; {gpu_words(g)})")
    c.figures["probe"] = {"steps": steps, "rates": rates}
    return ("ok " if rates else "FAIL ") + "; ".join(parts)


def step_tune(c: Check, left: float) -> str:
    """Ultralytics' tuner on the same data, model and steps a run as the night: iterations per GPU-hour. The model is
    train.py's own (MODEL at WIDTH x DEPTH, as its model_yaml() builds it), at its IMGSZ and BATCH: a larger model
    would make each iteration slower and the comparison lean looper's way."""
    data = demo_data(c)
    n_train = len(list((data / "tiles" / "train" / "images").glob("*"))) if (data / "tiles").is_dir() else 0
    steps = 4 if c.dry else 169
    yaml = c.work / "tune.yaml"
    spec = (data / "dataset.yaml").read_text()
    yaml.write_text(f"path: {data}\n" + "\n".join(x for x in spec.splitlines() if not x.startswith("path:")) + "\n")
    model = c.work / "tune-model.yaml"  # not yolov8n.yaml: a scale letter in the name would override the multiples
    code = f"""
import json, pathlib, ultralytics
from ultralytics import YOLO
from ultralytics.utils import YAML
from looper.core.propose.hyperblock import read_knobs
k = read_knobs(pathlib.Path({str(REPO / 'train.py')!r}).read_text())
cfg = YAML.load(sorted((pathlib.Path(ultralytics.__file__).parent / 'cfg' / 'models').rglob(k['MODEL'] + '.yaml'))[0])
cfg.pop('scales', None)
cfg.update(depth_multiple=k['DEPTH'], width_multiple=k['WIDTH'], max_channels=1024,
           nc=len(YAML.load({str(data / 'dataset.yaml')!r})['names']))
YAML.save({str(model)!r}, cfg)
epochs = max(1, round({steps} * k['BATCH'] / max(1, {n_train})))
shape = dict(model=k['MODEL'], width=k['WIDTH'], depth=k['DEPTH'], imgsz=k['IMGSZ'], batch=k['BATCH'], epochs=epochs)
print('LOOPER_TUNE_SHAPE ' + json.dumps(shape), flush=True)
# amp off: each iteration is a subprocess whose AMP check would download
YOLO({str(model)!r}).tune(data={str(yaml)!r}, epochs=epochs, iterations={1 if c.dry else 100}, imgsz=k['IMGSZ'],
    batch=k['BATCH'], workers=1, device={'0' if not c.dry else "'cpu'"}, amp=False, plots=False, save=False,
    project={str(c.work / 'tune')!r}, name='t')
"""
    t0 = time.time()
    c.python(code, max(10.0, left - 5), "tune.log", cwd=c.work)
    t1 = time.time()
    done = [x for f in (c.work / "tune").rglob("tune_results.ndjson") for x in f.read_text().splitlines() if x.strip()]
    log = (c.work / "logs" / "tune.log").read_text()
    said = [ln.split(" ", 1)[1] for ln in log.splitlines() if ln.startswith("LOOPER_TUNE_SHAPE ")]
    shape = json.loads(said[0]) if said else {}
    iters = len(done) or max(0, log.count("Starting iteration") - 1)  # the tuner's own record of finished ones
    rate = round(iters / ((t1 - t0) / 3600), 1) if iters else 0.0
    c.figures["tune"] = {"iterations": iters, "seconds": round(t1 - t0, 1), "per_gpu_hour": rate, "train_tiles": n_train,
                         "steps": steps, **shape}
    what = (f"train.py's {shape.get('model')} at width {shape.get('width')} x depth {shape.get('depth')}, imgsz "
            f"{shape.get('imgsz')}, batch {shape.get('batch')}, {shape.get('epochs')} epochs ~ {steps} steps a run"
            if shape else "its model was never built")
    return (f"{'ok' if iters and shape else 'FAIL'} model.tune(): {iters} iterations done in {t1 - t0:.0f} s "
            f"({rate}/GPU-hour; {what}, its own validation each, amp off) {gpu_words(gpu_window(c.samples, t0, t1))}")


# ---------------------------------------------------------------------------------------------- the runner
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="a rehearsal on a CPU (tiny preset, short boxes)")
    ap.add_argument("--wheels", help="a folder of wheels to install first (what the machine lacks)")
    ap.add_argument("--debs", help="a folder of Debian packages (bubblewrap and its libraries) for a machine without")
    ap.add_argument("--out", help="where summary.txt, gpu_check.json and results.tar.gz go (default $OUT)")
    ap.add_argument("--work", default="/tmp/looper-gpu-check", help="the work folder (cleared first)")
    ap.add_argument("--total-seconds", type=float, default=540.0)
    ap.add_argument("--only", help="comma-separated steps (default all)")
    args = ap.parse_args(argv)
    c = Check(args)
    c.line(f"looper GPU check {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} dry_run={c.dry} "
           f"commit={_commit()} total={args.total_seconds:.0f}s")
    stop = threading.Event()
    threading.Thread(target=sampler, args=(c.samples, c.figures, stop), daemon=True).start()
    failed = 0
    for name in STEPS:
        if name not in c.only:
            continue
        box = BOX[name][1 if c.dry else 0]
        after = sum(BOX[n][1 if c.dry else 0] for n in STEPS[STEPS.index(name) + 1:] if n in c.only)
        if name == "night":  # the night takes what the steps before it left over, the later steps' boxes kept
            box = max(box, min(box * 1.3, c.deadline - time.time() - after - 10))
        left = min(box, c.deadline - time.time() - 10)
        if left < 10:
            c.line(f"[{time.time() - c.t0:4.0f}s] {name:<11} skipped: no time left")
            continue
        c.step_end = time.time() + left
        t = time.time()
        try:
            words = globals()[f"step_{name}"](c, left)
        except Exception as exc:  # noqa: BLE001 (a step that breaks is a FAIL line, the others still run)
            words = f"FAIL {type(exc).__name__}: {exc}"
        failed += words.startswith("FAIL")
        c.line(f"[{time.time() - c.t0:4.0f}s] {name:<11} {time.time() - t:4.0f}s  {words}")
    stop.set()
    (c.out / "gpu_check.json").write_text(json.dumps(c.figures, indent=1, default=str) + "\n")
    with open(c.work / "gpu_samples.csv", "w") as f:
        f.write("t,util_pct,mem_used_mib\n" + "".join(f"{a:.2f},{b:.0f},{m:.0f}\n" for a, b, m in c.samples))
    with tarfile.open(c.out / "results.tar.gz", "w:gz") as tar:
        for p in ("logs", "history.json", "report.json", "status.txt", "report.html", "gpu_samples.csv",
                  "night/experiments.db", "night/looper.toml"):
            if (c.work / p).exists():
                tar.add(c.work / p, arcname=p)
    c.line(f"done in {time.time() - c.t0:.0f} s: {failed} step(s) failed")
    return 1 if failed else 0


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=5).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
