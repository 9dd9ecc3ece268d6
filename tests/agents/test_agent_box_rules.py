"""The agent's box (looper/agents/sandbox.py) without starting it: what comes back from the private
working folder, which variables reach the program, which paths are never shown, the config knobs.
The box itself, run for real: tests/security/test_agent_box.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from looper.agents import make_agent
from looper.agents import sandbox as ab
from looper.config import AgentConfig
from looper.errors import ConfigError


def _work(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "train.py").write_text("LR0 = 0.01\n")
    (ck / "program.md").write_text("# program\n")
    (ck / "evaluate.py").write_text("secret-ish\n")  # never copied into the box
    work = tmp_path / "work"
    return work, ab.prepare_work(ck, work)


def test_only_train_py_and_program_md_are_put_and_only_train_py_comes_back(tmp_path: Path) -> None:
    work, put = _work(tmp_path)
    assert sorted(os.listdir(work)) == ["program.md", "train.py"] and set(put) == {"program.md", "train.py"}
    (work / "train.py").write_text("LR0 = 0.02\n")
    new, touched = ab.take_back(work, put)
    assert new == b"LR0 = 0.02\n" and touched == []


def test_every_other_change_is_named(tmp_path: Path) -> None:
    work, put = _work(tmp_path)
    (work / "program.md").write_text("# mine now\n")
    (work / "notes.txt").write_text("hi")
    (work / "sub").mkdir()
    (work / "sub" / "x.py").write_text("")
    (work / "evaluate.py").symlink_to("/etc/passwd")
    _, touched = ab.take_back(work, put)
    assert touched == ["evaluate.py", "notes.txt", "program.md", "sub/x.py"]
    (work / "program.md").unlink()
    assert "program.md" in ab.take_back(work, put)[1]


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: p.symlink_to("/etc/passwd"), "a symbolic link"),
    (lambda p: p.write_bytes(b"#" * (ab.MAX_TRAIN_BYTES + 1)), "larger than"),
    (lambda p: os.mkfifo(p), "not a regular file"),
    (lambda p: None, "no train.py"),
])
def test_a_train_py_that_is_not_a_plain_bounded_file_is_refused(tmp_path: Path, make, words: str) -> None:
    work, put = _work(tmp_path)
    (work / "train.py").unlink()
    make(work / "train.py")
    new, _ = ab.take_back(work, put)
    assert isinstance(new, str) and words in new, new


def test_the_environment_holds_only_named_variables() -> None:
    box = ab.AgentBox(pass_env=("ANTHROPIC_API_KEY",))
    environ = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "ANTHROPIC_API_KEY": "k1", "OPENAI_API_KEY": "k2",
               "LOOPER_NOTIFY_URLS": "json://x", "HOME": "/root"}
    env = ab.box_env(box, {"LOOPER_CHECKOUT": "/ck"}, environ)
    assert env["ANTHROPIC_API_KEY"] == "k1" and env["LOOPER_CHECKOUT"] == "/ck" and env["HOME"] == "/tmp"
    assert "OPENAI_API_KEY" not in env and "LOOPER_NOTIFY_URLS" not in env


def test_secrets_never_reach_the_argv(tmp_path: Path) -> None:
    work, _ = _work(tmp_path)
    (tmp_path / "io").mkdir()
    argv = ab.box_argv(ab.AgentBox(pass_env=("OPENAI_API_KEY",)), ["/bin/true"], work=work, io=tmp_path / "io",
                       checkout=tmp_path / "ck")
    assert "--setenv" not in argv and "--clearenv" not in argv  # the environment travels as bwrap's own
    assert ["--bind", str(work.resolve()), str((tmp_path / "ck").resolve())] == \
        argv[argv.index(str(work.resolve())) - 1:argv.index(str(work.resolve())) + 2]
    assert "--unshare-net" in argv and argv[-1] == "/bin/true"


def test_the_workspace_home_and_looper_config_are_never_shown(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".looper").mkdir(parents=True)
    (ws / ".looper" / "test_seed").write_text("s")
    outside = tmp_path / "agent.py"
    outside.write_text("")
    home = Path(os.path.expanduser("~"))
    shown = ab._shown_files(["/bin/sh", str(ws / ".looper" / "test_seed"), str(outside)],
                            [str(ws), str(home), "/", str(tmp_path)], [ws])
    assert outside in shown
    assert not any(p == ws or ws in p.parents or p in (home, Path("/"), tmp_path) for p in shown), shown


def test_config_knobs_and_their_checks() -> None:
    cfg = AgentConfig(kind="command", command="x", network=True, pass_env=["OPENAI_API_KEY"], readable=["/opt/a"])
    box = ab.AgentBox.from_section(cfg)
    assert box.enabled and box.network and box.pass_env == ("OPENAI_API_KEY",) and box.readable == ("/opt/a",)
    assert box.describe() == "bwrap, network allowed" and ab.opt_out_line(box) is None
    off = ab.AgentBox.from_section(AgentConfig(kind="command", command="x", sandbox="none"))
    assert off.describe() == "none (explicit opt-out)" and "ran without its box" in (ab.opt_out_line(off) or "")
    with pytest.raises(ValueError, match="NAMES of environment variables"):
        AgentConfig(kind="command", command="x", pass_env=["sk-123 secret"])
    with pytest.raises(ValueError, match="agent.sandbox must be one of"):
        ab.AgentBox(mode="docker")
    with pytest.raises(ValueError, match="names of environment variables"):
        ab.AgentBox(pass_env=("a b",))


def test_a_missing_bwrap_is_a_config_error_naming_the_install_and_the_opt_out(monkeypatch) -> None:
    cfg = AgentConfig(kind="command", command="x")
    monkeypatch.setattr(ab.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match=r"apt-get install -y bubblewrap.*\[agent\] sandbox = \"none\""):
        make_agent(cfg)
    assert make_agent(AgentConfig(kind="command", command="x", sandbox="none")).box.enabled is False  # type: ignore[attr-defined]


def test_a_sparse_program_md_or_a_deep_folder_is_named_unread(tmp_path: Path) -> None:
    """Issue 48: a 1 GiB sparse program.md is named by its size, never read; a folder 1,200 levels deep in
    the copy is named and walked no deeper than trees.MAX_DEPTH (no RecursionError)."""
    work, put = _work(tmp_path)
    with open(work / "program.md", "r+b") as f:
        f.truncate(1 << 30)
    fd = os.open(work, os.O_RDONLY)
    for _ in range(1200):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    new, touched = ab.take_back(work, put)
    assert new == b"LR0 = 0.01\n"
    assert touched[0].startswith("(folders more than 64 levels deep") and "program.md" in touched
    from looper.workspace.trees import remove_tree

    assert remove_tree(work) is None


def test_a_readable_link_is_checked_where_it_leads_and_mounted_as_checked(tmp_path: Path) -> None:
    """Issue 48: a `readable` path that is a link (or has a link above it) is resolved once; the resolved
    path is what is checked and what bwrap mounts. A link to the workspace or to $HOME shows nothing."""
    ws = tmp_path / "ws"
    (ws / ".looper").mkdir(parents=True)
    tool = tmp_path / "opt" / "tool-1.2"
    tool.mkdir(parents=True)
    (tmp_path / "tool").symlink_to(tool)
    (tmp_path / "wslink").symlink_to(ws)
    (tmp_path / "homelink").symlink_to(os.path.expanduser("~"))
    (tmp_path / "prefix").symlink_to(tmp_path)  # a link in a folder above: prefix/ws is the workspace
    readable = [str(tmp_path / n) for n in ("tool", "wslink", "homelink")] + [str(tmp_path / "prefix" / "ws" / ".looper")]
    shown = ab._shown_files(["/bin/sh"], readable, [ws])
    assert tool in shown and not any(p == ws or ws in p.parents for p in shown), shown
    home = Path(os.path.realpath(os.path.expanduser("~")))
    assert home not in shown and all(p == Path(os.path.realpath(p)) for p in shown)
    (tmp_path / "io").mkdir()
    work, _ = _work(tmp_path)
    argv = ab.box_argv(ab.AgentBox(readable=tuple(readable), workspace=ws), ["/bin/true"], work=work,
                       io=tmp_path / "io", checkout=tmp_path / "ck")
    assert ["--ro-bind", str(tool), str(tool)] == argv[argv.index(str(tool)) - 1:argv.index(str(tool)) + 2]
    assert str(ws) not in argv and str(home) not in argv
    assert str(tmp_path / "wslink") not in argv and str(tmp_path / "homelink") not in argv
