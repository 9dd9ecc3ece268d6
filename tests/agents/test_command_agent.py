"""The command agent against real scripts written in the test."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from looper.agents import make_agent
from looper.agents.base import AgentContext, HistoryView, ProposalRejected
from looper.agents.command import CommandAgent
from looper.errors import ConfigError, HarnessError


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport os, sys, pathlib\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def ctx(tmp_path: Path, train_py: str) -> AgentContext:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "train.py").write_text(train_py)
    return AgentContext(checkout=checkout, train_py=train_py, program_md="(program)",
                        prompt="PROMPT: change LR0", history=HistoryView())


EDIT = """
prompt_file = pathlib.Path(os.environ["LOOPER_PROMPT_FILE"])
stdin = sys.stdin.read()
assert prompt_file.read_text() == stdin == "PROMPT: change LR0", (prompt_file, stdin)
assert pathlib.Path.cwd() == pathlib.Path(os.environ["LOOPER_CHECKOUT"])
src = pathlib.Path("train.py").read_text().replace("LR0 = 0.01 ", "LR0 = 0.02 ")
pathlib.Path("train.py").write_text(src)
"""


def test_success_edits_in_place_and_last_stdout_line_is_the_description(tmp_path: Path, ctx: AgentContext) -> None:
    agent = CommandAgent(str(script(tmp_path, "agent.py", EDIT + "print('thinking...')\nprint('LR0 0.01 -> 0.02')\nprint()")))
    p = agent.propose(ctx)
    assert p.new_source is None and not p.exhausted
    assert p.description == "LR0 0.01 -> 0.02"
    assert p.knobs == {"LR0": (0.01, 0.02)}
    assert "LR0 = 0.02 " in (ctx.checkout / "train.py").read_text()


def test_description_file_wins_over_stdout(tmp_path: Path, ctx: AgentContext) -> None:
    body = EDIT + "pathlib.Path(os.environ['LOOPER_DESCRIPTION_FILE']).write_text('\\nraise LR0 to 0.02\\nmore')\nprint('noise')"
    p = CommandAgent(str(script(tmp_path, "agent.py", body))).propose(ctx)
    assert p.description == "raise LR0 to 0.02"


def test_arguments_are_split_without_a_shell(tmp_path: Path, ctx: AgentContext) -> None:
    body = EDIT + "print(repr(sys.argv[1:]))"
    p = CommandAgent(f"{script(tmp_path, 'agent.py', body)} 'two words' ';' '$HOME'").propose(ctx)
    assert p.description == "['two words', ';', '$HOME']"


def test_non_zero_once_is_rejected_twice_is_a_harness_error(tmp_path: Path, ctx: AgentContext) -> None:
    agent = CommandAgent(str(script(tmp_path, "agent.py", "print('oops', file=sys.stderr)\nsys.exit(3)")))
    with pytest.raises(ProposalRejected, match="exit 3: oops"):
        agent.propose(ctx)
    with pytest.raises(HarnessError, match="failed 2 times in a row"):
        agent.propose(ctx)


def test_a_success_resets_the_failure_count(tmp_path: Path, ctx: AgentContext) -> None:
    flag = tmp_path / "fail"
    body = f"""
if pathlib.Path({str(flag)!r}).exists():
    sys.exit(1)
{EDIT}
print("ok")
"""
    agent = CommandAgent(str(script(tmp_path, "agent.py", body)))
    flag.touch()
    with pytest.raises(ProposalRejected):
        agent.propose(ctx)
    flag.unlink()
    agent.propose(ctx)
    (ctx.checkout / "train.py").write_text(ctx.train_py)
    flag.touch()
    with pytest.raises(ProposalRejected):  # not a HarnessError: the count restarted
        agent.propose(ctx)


def test_timeout_counts_as_a_failure(tmp_path: Path, ctx: AgentContext) -> None:
    agent = CommandAgent(str(script(tmp_path, "agent.py", "import time\ntime.sleep(30)")), timeout_seconds=0.1)
    with pytest.raises(ProposalRejected, match="timed out"):
        agent.propose(ctx)
    with pytest.raises(HarnessError, match="timed out"):
        agent.propose(ctx)


def test_unchanged_or_broken_train_py_is_rejected(tmp_path: Path, ctx: AgentContext) -> None:
    with pytest.raises(ProposalRejected, match="unchanged"):
        CommandAgent(str(script(tmp_path, "a.py", "print('did nothing')"))).propose(ctx)
    broken = "pathlib.Path('train.py').write_text('def broken(:\\n')"
    with pytest.raises(ProposalRejected, match="does not compile: line 1"):
        CommandAgent(str(script(tmp_path, "b.py", broken))).propose(ctx)


def test_missing_binary_is_a_harness_error(tmp_path: Path, ctx: AgentContext) -> None:
    with pytest.raises(HarnessError, match="not found on PATH: no-such-agent-xyz"):
        CommandAgent("no-such-agent-xyz --flag").propose(ctx)
    with pytest.raises(HarnessError, match="not found or not executable"):
        CommandAgent(str(tmp_path / "missing.sh")).propose(ctx)


def test_registry_builds_a_command_agent_and_names_bad_keys() -> None:
    class Cfg:
        kind = "command"
        command = "my-agent --x"
        base_url = ""
        model = ""
        api_key_env = "OPENAI_API_KEY"
        timeout_seconds = 12
        max_failures = 3

    agent = make_agent(Cfg())
    assert isinstance(agent, CommandAgent) and agent.max_failures == 3 and agent.timeout_seconds == 12
    Cfg.command = "  "
    with pytest.raises(ConfigError, match="agent.command"):
        make_agent(Cfg())
    Cfg.kind = "gpt"
    with pytest.raises(ConfigError, match="agent.kind 'gpt'"):
        make_agent(Cfg())


def test_a_dead_daemon_s_agent_copies_are_removed_and_a_live_one_s_kept(tmp_path: Path) -> None:
    """A daemon killed mid-proposal leaves its agent's working copy, prompt included, in the temp folder; the next
    daemon's start removes those of daemons that are gone, never a live daemon's, a link or another name."""
    import os
    import subprocess

    from looper.agents.command import remove_left_behind

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    dead = tmp_path / f"looper-agent-{gone.pid}-abc_12"
    (dead / "io").mkdir(parents=True)
    (dead / "io" / "prompt.md").write_text("program.md and the history")
    live = tmp_path / f"looper-agent-{os.getpid()}-xyz"
    (live / "io").mkdir(parents=True)
    old_style = tmp_path / "looper-agent-43vocm2a"  # before the daemon's pid was in the name: whose, unknown
    old_style.mkdir()
    target = tmp_path / "precious"
    target.mkdir()
    link = tmp_path / f"looper-agent-{gone.pid}-link"
    link.symlink_to(target)
    assert remove_left_behind(tmp_path) == [dead]
    assert not dead.exists() and live.is_dir() and old_style.is_dir() and link.is_symlink() and target.is_dir()
