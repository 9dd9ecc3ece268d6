"""The recipes of docs/AGENTS.md, run as written: the blocks marked ``<!-- recipe:NAME -->`` are
read from the document, so the doc and the test cannot drift apart.

The command recipe runs the real daemon on the fixture workspace with the doc's wrapper
script. No real coding-agent CLI is available here (no network, no login), so the ``claude``
on PATH is a stand-in (``FAKE_CLI`` below) that checks how it was called, edits train.py as a
CLI would, leaves a scratch file and prints chatter and a DESCRIPTION line.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from faults.faultkit import assert_nothing_lost
from harness import make_ws, pages  # noqa: F401  (pytest fixtures)

from looper.agents.program import load_program
from looper.config import config_from_dict
from looper.workspace.create import init_workspace

ROOT = Path(__file__).resolve().parents[2]
AGENTS_MD = (ROOT / "docs" / "AGENTS.md").read_text()


def recipe(name: str) -> str:
    """The fenced block right after ``<!-- recipe:name -->`` in docs/AGENTS.md."""
    m = re.search(rf"<!-- recipe:{re.escape(name)} -->\s*```[a-z]*\n(?P<body>.*?)^```", AGENTS_MD, re.S | re.M)
    assert m, f"docs/AGENTS.md has no recipe block {name!r}"
    return m.group("body")


FAKE_CLI = r'''#!PYTHON
"""A stand-in for `claude -p`: checks its call, edits train.py like a coding agent would."""
import json, os, pathlib, re, sys
argv = sys.argv[1:]
task = sys.stdin.read()
print("FAKE_CLI " + json.dumps({"cwd": os.getcwd(), "saw_train_py": "QUALITY = 0.5" in task,
                                 "home": os.environ.get("HOME"), "key": "ANTHROPIC_API_KEY" in os.environ}))
if "-p" not in argv or "acceptEdits" not in argv or "Edit ONLY ./train.py" not in argv[argv.index("-p") + 1]:
    print("stand-in claude: not called as the recipe says:", argv, file=sys.stderr)
    sys.exit(2)
src = pathlib.Path("train.py").read_text()
pathlib.Path("train.py").write_text(re.sub(r"^QUALITY = 0\.5", "QUALITY = 0.8", src, flags=re.M))
pathlib.Path(".scratch-notes.md").write_text("the CLI's own notes\n")  # the wrapper must clean this
print("Reading train.py ...")
print("I raised QUALITY, the knob the plan ranks first.")
print("**DESCRIPTION:** QUALITY 0.5 -> 0.8")
print("Done.")
'''


@pytest.mark.e2e  # a real `looper suggest` process (about 3 s of imports on a slow 2-core machine)
def test_planner_recipe(tmp_path: Path) -> None:
    cfg = config_from_dict(tomllib.loads(recipe("planner")))
    assert cfg.agent.kind == "planner"
    root = init_workspace(tmp_path / "ws")
    got = subprocess.run([sys.executable, "-m", "looper.cli", "suggest", "--json"], cwd=root,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LOOPER_WORKSPACE": str(root)})
    assert got.returncode == 0, got.stdout + got.stderr
    out = json.loads(got.stdout)
    knobs = {k.name for k in load_program(root / "program.md").knobs}
    assert out["phase"] == 1 and not out["exhausted"]
    assert out["changes"] and set(out["changes"]) <= knobs, (out["changes"], knobs)


def test_openai_recipe_is_a_valid_config() -> None:
    cfg = config_from_dict(tomllib.loads(recipe("openai-toml")))
    assert cfg.agent.kind == "openai" and cfg.agent.base_url.endswith("/v1")
    assert cfg.agent.api_key_env == "LOCAL_LLM_KEY"
    no_key = config_from_dict({"agent": {**tomllib.loads(recipe("openai-toml"))["agent"], "api_key_env": ""}})
    assert no_key.agent.api_key_env == ""


@pytest.mark.e2e
def test_command_recipe_with_a_coding_agent_cli(make_ws, pages, tmp_path: Path) -> None:  # noqa: F811
    ws = make_ws()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    cli = bindir / "claude"
    cli.write_text(FAKE_CLI.replace("PYTHON", sys.executable, 1))
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    wrapper = tmp_path / "looper-claude.sh"
    wrapper.write_text(recipe("claude-wrapper"))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)

    agent = tomllib.loads(recipe("command-toml"))["agent"]
    assert agent["command"] == "/home/you/bin/looper-claude.sh"
    assert agent["readable"] and agent["network"] is True and agent["pass_env"] == ["ANTHROPIC_API_KEY"]
    agent["command"] = str(wrapper)
    agent["readable"] = [str(bindir)]  # where this stand-in CLI is installed
    config_from_dict({"agent": agent})  # the doc's section is a valid config
    text = (ws.root / "looper.toml").read_text()
    start = text.index("[agent]")
    end = text.index("\n[", start + 1)
    body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in agent.items())
    (ws.root / "looper.toml").write_text(text[:start] + "[agent]\n" + body + text[end:])
    ws.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "agent: the AGENTS.md recipe")

    env = ws.env()
    env.update(PATH=f"{bindir}{os.pathsep}{env['PATH']}", ANTHROPIC_API_KEY="sk-test", OTHER_SECRET="x")
    r = ws.looper("run", "--max-experiments", "1", env=env)
    assert r.returncode == 0, r.stdout + r.stderr

    exp = ws.rows()[-1]
    line = next(p for p in (exp["rationale"] or "").split(" / ") if p.startswith("FAKE_CLI "))
    call = json.loads(line[len("FAKE_CLI "):])  # what the stand-in CLI saw in its box
    assert Path(call["cwd"]) == ws.worktree.resolve()  # run at the checkout's path
    assert call["saw_train_py"]  # looper's prompt (with the current train.py) on stdin
    assert call["home"] == "/tmp" and call["key"] is True  # a private home; the key pass_env names
    assert exp["description"] == "QUALITY 0.5 -> 0.8", exp["description"]
    assert exp["status"] == "keep", (exp["status"], exp["blocking_json"])
    assert "scope violation" not in (exp["blocking_json"] or "")
    assert "+QUALITY = 0.8" in exp["diff"]
    assert "raised QUALITY" in (exp["rationale"] or "")
    assert not (ws.worktree / ".scratch-notes.md").exists()
    assert pages.pages == []
    assert_nothing_lost(ws)
