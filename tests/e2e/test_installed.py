"""looper as a user gets it without the repository: a wheel (built from an sdist, as
``python -m build`` and an index do) installed with ``pip install --no-deps`` into a fresh venv,
then ``looper init --preset tiny`` and ``looper run --max-experiments 1`` from a folder outside
the repository, training and evaluation in their sandbox.

The fresh venv gets the project's third-party dependencies through a ``.pth`` file naming the
test interpreter's site-packages (offline: nothing is downloaded). Python does not process
``.pth`` files inside a folder added that way, so the editable looper of that environment is not
loaded; the test proves it (``import looper`` fails before the wheel is installed, and resolves
into the fresh venv after).

This is the e2e tier's one real night (module fixture, about 4 minutes on 2 cores): the real
prepare.py (tiny scale), the real train.py fine-tuning the shipped checkpoint for the tiny preset's
26 steps in the training sandbox, the real evaluate.py in the evaluation sandbox, the built-in
planner with the real program.md, and the report drawn from what the runs left. From the shipped
checkpoint the tiny baseline detects (about 100 boxes on the 2 test pages), so its candidate is
gated; a baseline that found nothing halts the night with "cannot gate", which
tests/night/test_experiment_inprocess.py checks with a real loop around a scripted train.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from looper.agents.program import load_program
from looper.workspace.create import WORKSPACE_FILES, shipped_pretrained

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SITE = Path("lib") / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
BUILD_TIMEOUT = 300
RUN_TIMEOUT = 1500  # the tiny preset: 3 baseline seeds and 3 to 5 candidate runs of 26 steps (180 s at most each), on a busy machine


@dataclass
class Installed:
    venv: Path
    site: Path
    env: dict[str, str]
    outside: Path  # a folder outside the repository to run from
    src: Path      # the copy of the source tree the wheel was built from
    wheel: Path

    def run(self, *argv: str | Path, cwd: Path, timeout: float = BUILD_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return _run([str(a) for a in argv], cwd=cwd, env=self.env, timeout=timeout)


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = BUILD_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _clean_env(venv: Path) -> dict[str, str]:
    """This process's environment without anything that points Python at the project's venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_", "COV_CORE", "COVERAGE"))}
    own_bin = Path(sys.prefix, "bin").resolve()
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != own_bin]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("installed")
    # The source tree as git sees it (tracked and new files, nothing ignored), copied: a build
    # writes build/ and *.egg-info into the tree it builds, and the repository is shared.
    src = tmp / "src"
    listed = _ok(_run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO))
    for rel in filter(None, listed.split("\0")):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    sdist_name = _ok(_run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                           "print(build_meta.build_sdist(sys.argv[1]))", str(tmp / "dist")], cwd=src))
    sdist = tmp / "dist" / sdist_name.strip().splitlines()[-1]
    _ok(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
              "--no-cache-dir", "-w", str(tmp / "wheels"), str(sdist)], cwd=tmp))
    (wheel,) = (tmp / "wheels").glob("looper-*.whl")

    venv = tmp / "venv"
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp))
    site = venv / SITE
    assert site.is_dir(), site
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "looper_test_deps.pth").write_text("".join(f"{d}\n" for d in deps))
    outside = tmp / "elsewhere"
    outside.mkdir()
    env = _clean_env(venv)
    # Before the wheel: the dependencies import, looper does not (the editable finder stays out).
    probe = _run([str(venv / "bin" / "python"), "-c", "import typer, sqlalchemy, torch, ultralytics; import looper"],
                 cwd=outside, env=env)
    assert probe.returncode == 1 and "No module named 'looper'" in probe.stderr, probe.stderr[-3000:]
    _ok(_run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
              "--no-index", "--no-cache-dir", str(wheel)], cwd=tmp, env=env))
    return Installed(venv, site, env, outside, src, wheel)


def test_wheel_carries_the_workspace_files(installed: Installed) -> None:
    """The root's workspace files ship inside the package; looper resolves to the fresh venv."""
    import zipfile

    names = set(zipfile.ZipFile(installed.wheel).namelist())
    assert {f"looper/workspace_template/{n}" for n in WORKSPACE_FILES} <= names, sorted(names)
    assert "looper/schemas/verdict.schema.json" in names
    assert "looper/pretrained/start.safetensors" in names  # the starting checkpoint `looper init` copies
    where = json.loads(_ok(installed.run(
        installed.venv / "bin" / "python", "-c",
        "import json, looper, looper.workspace.create as w; "
        "print(json.dumps({'looper': looper.__file__, 'template': str(w.template_root())}))",
        cwd=installed.outside)))
    assert Path(where["looper"]).resolve() == (installed.site / "looper" / "__init__.py").resolve(), where
    assert REPO not in Path(where["looper"]).resolve().parents, where
    assert Path(where["template"]).resolve() == (installed.site / "looper" / "workspace_template").resolve(), where


# Run by the fresh venv's python: the installed package's sandbox argv (looper/executors/sandbox.py) around a
# python that imports looper and the dependencies, for training and for evaluation; prints the result.
SANDBOXED = r"""
import json, subprocess, sys
from pathlib import Path
from looper.executors.evaluator import prepare_evaluator
from looper.executors.sandbox import eval_argv, train_argv

here = Path(sys.argv[1])
for d in ("ws", "data", "out"):
    (here / d).mkdir()
probe = "import looper, looper.core.scoring.metrics, torch, ultralytics; print(looper.__file__)"
argv = train_argv([sys.executable, "-c", probe], checkout=here / "ws", out_dir=here / "out",
                  data_dir=here / "data", env={}, python=sys.executable)
train = subprocess.run(argv, capture_output=True, text=True)
(here / "evaluator.py").write_text(
    "import sys, looper.core.scoring.metrics, torch\n"
    "open(sys.argv[sys.argv.index('--out') + 1], 'w').write(looper.core.scoring.metrics.__file__)\n")
(here / "weights.pt").write_bytes(b"")
copy, out = prepare_evaluator(here / "evaluator.py", here / "eval")
argv = eval_argv(sys.executable, copy, weights=here / "weights.pt", data_dir=here / "data", out_dir=out, env={})
ev = subprocess.run(argv, capture_output=True, text=True)
print(json.dumps({"train": [train.returncode, train.stdout.strip().splitlines()[-1:], train.stderr[-2000:]],
                  "eval": [ev.returncode, (out / "METRICS.json").read_text() if (out / "METRICS.json").is_file() else None,
                           ev.stderr[-2000:]], "bwrap": argv[0]}))
"""


def test_installed_package_runs_inside_the_sandbox(installed: Installed) -> None:
    """The training and evaluation sandboxes, built by the installed package, see the fresh venv:
    looper from its site-packages, the dependencies through the .pth file."""
    here = installed.outside / "sandboxed"
    here.mkdir()
    got = json.loads(_ok(installed.run(installed.venv / "bin" / "python", "-c", SANDBOXED, here,
                                       cwd=installed.outside)))
    assert Path(got["bwrap"]).name == "bwrap", got
    pkg = (installed.site / "looper").resolve()
    assert got["train"][0] == 0 and got["train"][1] == [str(pkg / "__init__.py")], got["train"]
    assert got["eval"][0] == 0 and got["eval"][1] == str(pkg / "core" / "scoring" / "metrics.py"), got["eval"]


@dataclass
class Night:
    ws: Path
    run: subprocess.CompletedProcess[str]
    said: str
    rows: list[dict]
    metrics: dict   # the baseline's mean metrics
    classes: int    # class rows recorded for the baseline
    halts: list[str]
    fixed: dict     # the tag's pinned fixed files

    @property
    def candidates(self) -> list[dict]:
        return [r for r in self.rows if r["kind"] == "candidate"]

    @property
    def baseline_runs(self) -> list[Path]:
        return sorted((self.ws / "runs" / "tiny").glob("00001/baseline-s*"))


@pytest.fixture(scope="module")
def night(installed: Installed) -> Night:
    """``looper init --preset tiny`` and ``looper run --max-experiments 1``, from outside the repository."""
    looper = installed.venv / "bin" / "looper"
    ws = installed.outside / "ws"
    _ok(installed.run(looper, "init", ws, "--preset", "tiny", cwd=installed.outside))
    run = installed.run(looper, "run", "--max-experiments", "1", cwd=ws, timeout=RUN_TIMEOUT)
    said = f"exit {run.returncode}\n{run.stdout[-6000:]}\n{run.stderr[-6000:]}"
    rows = json.loads(_ok(installed.run(looper, "history", "--json", cwd=ws)))
    assert rows and rows[0]["kind"] == "baseline", (rows, said)
    con = sqlite3.connect(ws / "experiments.db")
    metrics = json.loads(con.execute("SELECT metrics_json FROM experiments WHERE id=?",
                                     (rows[0]["id"],)).fetchone()[0] or "{}")
    classes = con.execute("SELECT COUNT(*) FROM class_metrics WHERE experiment_id=?", (rows[0]["id"],)).fetchone()[0]
    halts = [e[0] for e in con.execute("SELECT message FROM events WHERE kind='halt' ORDER BY id")]
    fixed = json.loads(con.execute("SELECT fixed_hashes_json FROM tags").fetchone()[0])
    con.close()
    return Night(ws, run, said, rows, metrics, classes, halts, fixed)


def test_installed_looper_inits_and_measures_a_baseline(installed: Installed, night: Night) -> None:
    """The workspace is the root's files; the baseline was trained and evaluated (in the sandbox) from
    the installed package on whole test pages, every class of the real data measured; one candidate was tried."""
    for name in WORKSPACE_FILES:
        if name != "looper.toml":  # the preset's copy
            assert (night.ws / name).read_bytes() == (installed.src / name).read_bytes(), name
    assert 'tag = "tiny"' in (night.ws / "looper.toml").read_text()
    base = night.rows[0]
    assert base["status"] == "keep" and base["score"] is not None, (night.rows, night.said)
    assert night.classes == 26  # every class of the real data set, measured on whole test pages
    assert night.metrics["pages"] == 2 and night.metrics["truth"] > 0, night.metrics
    assert (night.ws / "data" / "manifest.json").is_file()  # the real prepare.py built the data
    assert len(night.candidates) == 1, (night.rows, night.said)
    assert list((night.ws / "runs" / "tiny").glob("*/*/out/weights.pt")), night.said
    # evaluated in the sandbox: from the harness's read-only copy of evaluate.py (looper/executors/sandbox.py)
    assert list((night.ws / "runs" / "tiny").glob("*/*/eval/evaluate.py")), night.said
    # never a harness error about the data (Ultralytics writes label caches into the data folder)
    assert not [c for c in night.candidates if "data" in json.dumps(c.get("blocking") or "").lower()], night.candidates


def test_the_night_fine_tunes_the_shipped_checkpoint_for_the_presets_steps(installed: Installed, night: Night) -> None:
    """`looper init` copied the package's checkpoint (weights are data: git-ignored, pinned by hash with
    the fixed files); every baseline seed started from it in the sandbox and trained the tiny preset's
    26 steps, and the fine-tuned baseline detects."""
    start = night.ws / "pretrained" / "start.safetensors"
    assert start.read_bytes() == (installed.site / "looper" / "pretrained" / "start.safetensors").read_bytes()
    assert start.read_bytes() == shipped_pretrained().read_bytes()
    assert "/pretrained/" in (night.ws / ".gitignore").read_text()
    assert "pretrained/start.safetensors" in night.fixed, sorted(night.fixed)
    assert len(night.baseline_runs) == 3, night.baseline_runs  # the tiny preset's three baseline seeds
    for run in night.baseline_runs:
        text = (run / "train.log").read_text()
        assert "LOOPER_START weights=start.safetensors" in text, text[-2000:]
        assert "looper sandbox" not in text or "exited 0" in text, text[-2000:]
        trained = json.loads((run / "out" / "train.json").read_text())
        assert trained["pretrained"] == "start.safetensors", trained
        assert trained["steps"] == 26 and trained["stopped_by"] == "steps", trained
    # the first full-LR AdamW steps perturb every weight of the checkpoint before they improve it; after
    # 26 steps the baseline finds boxes (about 100 on the 2 test pages)
    assert night.rows[0]["score"] > 0 and night.metrics["predictions"] > 0, (night.rows[0], night.metrics)


def test_the_planners_candidate_is_gated_and_the_night_exits_0(night: Night) -> None:
    """The built-in planner's step, one knob of the real program.md's plan ("NAME old -> new"), judged
    against the baseline: keep, discard or inconclusive, with a score; no halt."""
    assert night.run.returncode == 0, night.said
    (cand,) = night.candidates
    knobs = {k.name for k in load_program(night.ws / "program.md").knobs}
    assert re.fullmatch(r"[A-Z0-9_]+ \S+ -> \S+", cand["description"]), cand["description"]
    assert cand["description"].split()[0] in knobs, (cand["description"], knobs)
    assert cand["status"] in ("keep", "discard", "inconclusive") and cand["score"] is not None, (cand, night.said)
    assert not night.halts, night.halts


def test_the_night_keeps_the_matched_boxes_and_the_report_draws_them(installed: Installed, night: Night,
                                                                        tmp_path: Path) -> None:
    """Every evaluated run (through the real evaluation sandbox) left MATCHES.json beside METRICS.json
    with the same counts, and the installed `looper report` reads it: the confusion matrix as numbers
    (``--json``) and as a picture (``--html``)."""
    from looper.core.scoring import matches as core_matches

    looper = installed.venv / "bin" / "looper"
    runs = sorted((night.ws / "runs" / "tiny").glob("*/*/METRICS.json"))
    assert runs, night.said
    for metrics_path in runs:
        matches = json.loads(metrics_path.with_name("MATCHES.json").read_text())
        assert core_matches.problems(matches) == []
        implied = core_matches.implied_counts(matches)
        for name, c in json.loads(metrics_path.read_text())["classes"].items():
            assert implied.get(name, {"tp": 0, "fp": 0, "fn": 0}) == {k: c[k] for k in ("tp", "fp", "fn")}, name
    pics = json.loads(_ok(installed.run(looper, "report", "--json", cwd=night.ws)))["pictures"]
    best = pics["best"]["confusion"]
    assert best is not None and best["labels"][-1] == "background", pics
    assert sum(map(sum, best["matrix"])) >= night.metrics["truth"]  # every truth box sits in a column
    html_path = tmp_path / "report.html"
    _ok(installed.run(looper, "report", "--html", html_path, cwd=night.ws))
    page = html_path.read_text()
    assert 'id="pictures"' in page and 'id="confusion-best"' in page


def test_the_night_measures_the_val_tuned_confidence_of_its_best(installed: Installed, night: Night) -> None:
    """At the night's end ([confirm] tuned_thresholds) the best's weights (and the baseline's) went through the
    installed threshold evaluation, evaluate.py run by the harness's copy of streameval.py in the evaluation
    sandbox, on the val and the test split; each stream bore out its METRICS.json, and `looper report --json`
    shows per class the test F1 at 0.25 beside the F1 at the val-tuned threshold (issue 47)."""
    looper = installed.venv / "bin" / "looper"
    done = sorted((night.ws / "runs" / "tiny").glob("*/threshold/THRESHOLD.json"))
    assert done and done[0].parent.parent.name == "00001", night.said  # the baseline's at least
    for path in done:
        got = json.loads(path.read_text())
        assert got["status"] == "measured", got
        assert len(got["classes"]) == 26 and got["weighted_f1_fixed"] is not None, got
        for split in ("val", "test"):
            assert (path.parent / split / "eval" / "stream_eval.py").is_file()
            assert (path.parent / split / "STREAM.json").is_file()
        tuned = [r for r in got["classes"] if r["threshold"] is not None]
        assert all(r["why"] for r in got["classes"] if r["threshold"] is None)
        assert tuned and all(0 < r["threshold"] <= 1 for r in tuned), got
    report = json.loads(_ok(installed.run(looper, "report", "--json", cwd=night.ws)))["thresholds"]
    assert report["best"]["status"] == "measured", report
