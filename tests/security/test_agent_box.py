"""Issue 39's agent attacks through the real daemon (``looper run`` as a subprocess), the real agent box
(looper/agents/sandbox.py: bubblewrap) and the fast fixture workspace (its train.py and evaluate.py take a
second; the fixture evaluate.py writes MATCHES.json as the real one does).

(a) a boxed ``command`` agent plants a ``.pth`` and a module in the venv's site-packages and nudges a
    knob by 1e-7: the box makes the writes impossible (read-only), nothing forged is kept;
(a') the same agent with the box's explicit opt-out, planting into a site-packages folder on the
    daemon's path (a scratch one, never the shared venv): the runtime pin halts the night naming the file;
(b) a boxed agent looks for the test seed, the test pages, the database, ``~/.config/looper`` and the
    daemon's secrets: it sees none of them (what it saw is its own report, kept in the database);
(c) a METRICS.json rewritten after evaluate.py wrote it is refused as a harness error naming both files.

Each asserts the outcome named, the database intact and the checkout clean. About 15 s each here.
"""

from __future__ import annotations

import json
import sqlite3
import stat
import sys
from pathlib import Path

import pytest
from harness import FIXTURE, make_ws, pages  # noqa: F401  (pytest fixtures)

pytestmark = [pytest.mark.e2e]

SITE = Path(next(p for p in sys.path if p.endswith("site-packages")))
PLANTED = ("zz_looper_forge.pth", "looper_forge.py")


def _agent(tmp_path: Path, body: str) -> Path:
    """An agent program: reads the prompt, does ``body``, nudges QUALITY by 1e-7, says what it saw."""
    path = tmp_path / "evil_agent.py"
    path.write_text(f"""#!{sys.executable}
import json, os, pathlib, re, sys
sys.stdin.read()
seen = {{}}
{body}
src = pathlib.Path("train.py").read_text()
old = float(re.search(r"^QUALITY = ([0-9.e-]+)", src, re.M).group(1))
pathlib.Path("train.py").write_text(re.sub(r"^QUALITY = [0-9.e-]+", f"QUALITY = {{old + 1e-7!r}}", src, flags=re.M))
print("SEEN " + json.dumps(seen, sort_keys=True))
print("QUALITY nudged by 1e-7")
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _plant(site: Path) -> str:
    return f"""
for name, text in (({PLANTED[0]!r}, "import looper_forge\\n"), ({PLANTED[1]!r}, "FORGED = 0.99\\n")):
    try:
        pathlib.Path({str(site)!r}, name).write_text(text)
        seen[name] = "written"
    except OSError as exc:
        seen[name] = exc.strerror
"""


def _intact(ws) -> None:  # noqa: ANN001
    with sqlite3.connect(ws.root / "experiments.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT COUNT(*) FROM experiments WHERE status='keep' AND score >= 0.98").fetchone()[0] == 0
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == ""


def _seen(row: dict) -> dict:
    line = next(part for part in row["rationale"].split(" / ") if part.startswith("SEEN "))
    return json.loads(line[5:])


def test_a_boxed_agent_cannot_plant_in_the_venv_and_nothing_forged_is_kept(make_ws, tmp_path: Path) -> None:  # noqa: F811
    agent = _agent(tmp_path, _plant(SITE))
    ws = make_ws(agent_command=str(agent), agent_sandbox="bwrap", loop_noise_reruns=0)
    try:
        r = ws.looper("run", "--max-experiments", "1", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        row = ws.rows()[-1]
        seen = _seen(row)
        assert seen == {PLANTED[0]: "Read-only file system", PLANTED[1]: "Read-only file system"}, seen
        assert row["status"] in ("discard", "inconclusive"), (row["status"], row["blocking_json"])
        assert row["score"] is None or row["score"] < 0.9
        _intact(ws)
    finally:
        for name in PLANTED:  # never leave a plant in the shared venv, whatever happened
            (SITE / name).unlink(missing_ok=True)
    assert not any((SITE / name).exists() for name in PLANTED)


def test_an_unboxed_agents_plant_is_a_harness_error_naming_the_file(make_ws, tmp_path: Path, pages) -> None:  # noqa: F811
    site = tmp_path / "extra" / "site-packages"  # on the daemon's import path: pinned with the runtime
    site.mkdir(parents=True)
    (site / "honest.py").write_text("X = 1\n")
    agent = _agent(tmp_path, _plant(site))
    ws = make_ws(agent_command=str(agent), agent_sandbox="none")
    env = {**ws.env(), "PYTHONPATH": str(site)}
    r = ws.looper("run", "--max-experiments", "1", timeout=300, env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    row = ws.rows()[-1]
    reasons = " ".join(json.loads(row["blocking_json"]))
    assert row["status"] == "error", (row["status"], reasons)
    assert f"runtime file {site}/{PLANTED[0]} was added since the tag began" in reasons, reasons
    assert f"runtime file {site}/{PLANTED[1]} was added" in reasons, reasons
    assert pages.pages, "the halt paged nobody"
    _intact(ws)


def test_a_boxed_agent_sees_no_test_truth_no_database_no_home_and_no_secrets(make_ws, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "home"
    (home / ".config" / "looper").mkdir(parents=True)
    (home / ".config" / "looper" / "ws.env").write_text("OPENAI_API_KEY=sk-from-env-file\n")
    probe = """
root = pathlib.Path(os.environ["LOOPER_CHECKOUT"]).parents[2]
for rel in (".looper/test_seed", "data/pages", "data/manifest.json", "experiments.db", "looper.toml", ".git"):
    seen[rel] = (root / rel).exists()
seen["home_config"] = pathlib.Path(HOME_DIR, ".config", "looper", "ws.env").exists()
seen["checkout"] = sorted(os.listdir("."))
seen["env"] = sorted(k for k in os.environ if k in ("OPENAI_API_KEY", "LOOPER_NOTIFY_URLS", "FIXTURE_QUEUE",
                                                     "FIXTURE_VISIBLE"))
seen["pid1_env"] = "sk-test-secret" in open("/proc/1/environ", "rb").read().decode(errors="replace")
""".replace("HOME_DIR", repr(str(home)))
    agent = _agent(tmp_path, probe)
    ws = make_ws(agent_command=str(agent), agent_sandbox="bwrap", agent_pass_env=["FIXTURE_VISIBLE"],
                 loop_noise_reruns=0)
    (ws.root / ".looper").mkdir(exist_ok=True)
    (ws.root / ".looper" / "test_seed").write_text("123456789\n")  # where prepare.py keeps the test pages' seed
    env = {**ws.env(), "HOME": str(home), "OPENAI_API_KEY": "sk-test-secret", "FIXTURE_VISIBLE": "1",
           "LOOPER_NOTIFY_URLS": ws.notify_url}
    r = ws.looper("run", "--max-experiments", "1", timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (ws.root / ".looper" / "test_seed").is_file() and (ws.root / "data" / "pages").is_dir()
    seen = _seen(ws.rows()[-1])
    assert seen == {".looper/test_seed": False, "data/pages": False, "data/manifest.json": False,
                    "experiments.db": False, "looper.toml": False, ".git": False, "home_config": False,
                    "checkout": ["program.md", "train.py"], "env": ["FIXTURE_VISIBLE"], "pid1_env": False}, seen
    _intact(ws)


def test_a_metrics_file_rewritten_after_evaluation_is_a_harness_error_naming_both_files(make_ws, pages) -> None:  # noqa: F811
    ws = make_ws(loop_noise_reruns=0)
    forge = '''
with open(os.path.join(out, "weights.pt"), "w") as f:  # the evaluator's stand-in for planted code rewrites METRICS.json
    json.dump({"quality": q, "weak_class": WEAK_CLASS, "weak_recall": WEAK_RECALL, "seed": seed, "forge": True}, f)
'''
    ws.enqueue("forged metrics", source=(FIXTURE / "train.py").read_text() + forge)
    r = ws.looper("run", "--max-experiments", "1", timeout=300)
    assert r.returncode == 3, r.stdout + r.stderr
    row = ws.by_description()["forged metrics"]
    reasons = " ".join(json.loads(row["blocking_json"]))
    assert row["status"] == "error" and row["score"] is None, (row["status"], reasons)
    assert "METRICS.json disagrees with MATCHES.json" in reasons, reasons
    assert "weighted_f1: 0.99 in METRICS.json" in reasons, reasons
    assert pages.pages, "the halt paged nobody"
    _intact(ws)


def _scratch_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A scratch venv (never the shared one) and its site-packages, where a test plants .pth files."""
    import subprocess

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv, next(venv.glob("lib/python3*/site-packages"))


def _run_evaluator_probe(tmp_path: Path, python: str, source: str):  # noqa: ANN202
    """``source`` as evaluate.py in the evaluation sandbox (sandbox.eval_argv) under ``python``, with an
    empty data folder and weights; the finished process."""
    from looper import proc
    from looper.executors import sandbox

    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "data" / "pages").mkdir(parents=True)
    (tmp_path / "data" / "manifest.json").write_text("{}")
    (tmp_path / "w.pt").write_text("w")
    probe = tmp_path / "eval" / "evaluate.py"
    probe.parent.mkdir()
    probe.write_text(source)
    argv = sandbox.eval_argv(python, probe, weights=tmp_path / "w.pt", data_dir=tmp_path / "data",
                             out_dir=tmp_path / "out", env={})
    return proc.run(argv, timeout=120)


def test_the_evaluator_runs_no_pth_file_where_python_dash_i_would(tmp_path: Path) -> None:
    """The root of finding 1: ``python -I`` still runs every ``.pth`` in site-packages; the evaluation
    sandbox's ``python -I -S`` with an explicit sys.path (sandbox.NOSITE) runs none, and still imports
    from that site-packages. A scratch venv (never the shared one) holds the plant."""
    from looper import proc

    venv, site = _scratch_venv(tmp_path)
    mark = tmp_path / "out" / "pth_ran"
    (site / "zz_plant.pth").write_text(f"import os; open({str(mark)!r}, 'w').write('ran')\n")
    (site / "honest_mod.py").write_text("VALUE = 42\n")
    python = str(venv / "bin" / "python")
    done = _run_evaluator_probe(tmp_path, python,
                                "import sys, honest_mod\nprint('VALUE', honest_mod.VALUE, sys.flags.no_site)\n")
    assert done.exit_code == 0 and "VALUE 42 1" in done.stdout, done.stdout + done.stderr
    assert not mark.exists(), "a .pth ran inside the evaluator"
    plain = proc.run([python, "-I", "-c", "pass"], timeout=60)  # what -I alone does with the same venv
    assert plain.exit_code == 0 and mark.read_text() == "ran"


def _ctx(tmp_path: Path):  # noqa: ANN202
    from looper.agents.base import AgentContext

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "train.py").write_text("QUALITY = 0.5\n")
    (ck / "program.md").write_text("# plan\n")
    (ck / "evaluate.py").write_text("# fixed\n")
    return AgentContext(checkout=ck, train_py="QUALITY = 0.5\n", program_md="# plan\n", prompt="p")


def test_in_the_real_box_only_train_py_comes_back_and_the_rest_is_named(tmp_path: Path) -> None:
    from looper.agents.base import ProposalRejected
    from looper.agents.command import CommandAgent
    from looper.agents.sandbox import AgentBox
    from looper.errors import HarnessError

    ctx = _ctx(tmp_path)
    agent = _agent(tmp_path, """
seen["listing"] = sorted(os.listdir("."))
pathlib.Path("notes.txt").write_text("mine")
pathlib.Path("evaluate.py").write_text("print('perfect')")  # not even there: a new file of its copy
""")
    p = CommandAgent(str(agent), box=AgentBox()).propose(ctx)
    assert p.touched == ("evaluate.py", "notes.txt")
    assert "QUALITY = 0.5000001" in (ctx.checkout / "train.py").read_text()
    assert (ctx.checkout / "evaluate.py").read_text() == "# fixed\n" and not (ctx.checkout / "notes.txt").exists()
    assert '"listing": ["program.md", "train.py"]' in p.rationale

    linker = tmp_path / "linker.sh"
    linker.write_text("#!/bin/sh\nrm train.py && ln -s /etc/passwd train.py\n")
    linker.chmod(0o755)
    with pytest.raises(ProposalRejected, match="a symbolic link"):
        CommandAgent(str(linker), box=AgentBox()).propose(ctx)
    assert "QUALITY" in (ctx.checkout / "train.py").read_text()  # the checkout's train.py untouched

    inside = ctx.checkout / "tool.sh"  # a program inside the checkout is never shown in the box
    inside.write_text("#!/bin/sh\n")
    inside.chmod(0o755)
    with pytest.raises(HarnessError, match="could not be started in its box: bwrap: execvp"):
        CommandAgent(str(inside), box=AgentBox()).propose(ctx)


def test_a_tag_pinned_before_the_runtime_pin_gets_it_at_the_next_start(make_ws) -> None:  # noqa: F811
    ws = make_ws(loop_noise_reruns=0)
    ws.enqueue("first", knobs={"QUALITY": 0.4})
    r = ws.looper("run", "--max-experiments", "1", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr

    def runtime_keys() -> list[str]:
        with ws.db() as con:
            return [k for k in json.loads(con.execute("SELECT fixed_hashes_json FROM tags").fetchone()[0])
                    if k.startswith("runtime:")]

    assert "runtime:interpreter" in runtime_keys()
    with ws.db() as con:  # as an older looper left it
        fixed = json.loads(con.execute("SELECT fixed_hashes_json FROM tags").fetchone()[0])
        con.execute("UPDATE tags SET fixed_hashes_json = ?",
                    (json.dumps({k: v for k, v in fixed.items() if not k.startswith("runtime:")}),))
    assert runtime_keys() == []
    ws.enqueue("second", knobs={"QUALITY": 0.45})
    r = ws.looper("run", "--max-experiments", "1", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "runtime:interpreter" in runtime_keys()
    assert any("pinned from now on" in e["message"] for e in ws.events("note"))
    _intact(ws)


def test_a_pth_files_folder_lines_still_count_in_the_evaluator(tmp_path: Path) -> None:
    """A venv that gets its packages through a .pth naming another folder (tests/e2e/test_installed.py
    does so) still imports them in the evaluation sandbox; only the .pth's import lines never run."""
    venv, site = _scratch_venv(tmp_path)
    deps = tmp_path / "other-venv" / "site-packages"  # the sandbox shows site-packages folders on the path
    deps.mkdir(parents=True)
    (deps / "dep_mod.py").write_text("VALUE = 7\n")
    mark = tmp_path / "out" / "pth_ran"
    (site / "zz_deps.pth").write_text(f"# deps\n{deps}\nimport os; open({str(mark)!r}, 'w')\n")
    done = _run_evaluator_probe(tmp_path, str(venv / "bin" / "python"), "import dep_mod\nprint('VALUE', dep_mod.VALUE)\n")
    assert done.exit_code == 0 and "VALUE 7" in done.stdout, done.stdout + done.stderr
    assert not mark.exists(), "a .pth's import line ran"
