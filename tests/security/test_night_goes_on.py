"""Issue 48: nothing a candidate or an agent does takes the night down. Through the real daemon (``looper run``
as a subprocess), the real agent box (bubblewrap) and the real training sandbox, in one fixture workspace.

A boxed ``command`` agent reads which attack to make from a control folder it is shown read-only
(``[agent] readable``); the test rewrites it between nights. Agent attacks: 768 MiB on stdout, a 1 GiB sparse
program.md, a folder 1,200 levels deep in its copy, a full private /tmp, 4 GiB of memory, its folders past
the quota, and a look through ``readable`` links to the workspace and to $HOME. Candidate attacks (the agent
appends them to train.py): a 1,100-deep folder in $LOOPER_OUT then past the quota, and files deleted and
written on past the quota. Each ends as a rejected proposal (a discard naming the limit), a scope
violation naming what it made, or the candidate's crash naming the limit; every night exits 0, no halt,
no page; the database, the checkout and the host's temp dir as they should be; an honest change is then
kept; the daemon's own resident memory stays under 300 MiB through every attack (sampled every 0.2 s).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
from faults.faultkit import assert_nothing_lost, patch_config
from harness import make_ws, pages  # noqa: F401  (pytest fixtures)

from security.test_run_limits import DAEMON_RSS_MAX, _sample_rss

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")]

MIB = 1 << 20

AGENT = r'''#!PYTHON
import json, os, pathlib, re, sys, time
sys.stdin.read()
ctl = pathlib.Path(CTL)
attack = (ctl / "attack").read_text().strip()
seen = {}
src = pathlib.Path("train.py").read_text()
quality = 0.5 + 2e-7  # a change, so that the scope check looks at the rest
if attack == "prints":
    line = "x" * (1 << 20) + "\n"
    for _ in range(768):
        sys.stdout.write(line)
elif attack == "sparse program.md":
    with open("program.md", "r+b") as f:
        f.truncate(1 << 30)
elif attack == "deep folder":
    here = os.getcwd()
    for _ in range(1200):
        os.mkdir("d")
        os.chdir("d")
    pathlib.Path("bottom.bin").write_bytes(b"b" * (1 << 20))
    os.chdir(here)
elif attack == "fills /tmp":
    with open("/tmp/big.bin", "wb") as f:
        for _ in range(64):
            f.write(b"t" * (1 << 20))
elif attack == "memory":
    hog = bytearray(4 << 30)
elif attack == "fills its copy":
    for i in range(200):
        pathlib.Path(f"junk{i}.bin").write_bytes(b"j" * (1 << 20))
        time.sleep(0.02)
elif attack == "looks":
    for name, rel in (("ws_db", "wslink/experiments.db"), ("ws_seed", "wslink/.looper/test_seed"),
                      ("ws_toml", "wslink/looper.toml"), ("home_env", "homelink/.config/looper/ws.env")):
        seen[name] = (ctl.parent / rel).exists()
    quality = 0.5 + 1e-7
elif attack.startswith("train:"):
    src += "\nimport time\n" + (ctl / attack[6:]).read_text()
else:
    quality = 0.9
src = re.sub(r"^QUALITY = [0-9.e-]+", f"QUALITY = {quality!r}", src, flags=re.M)
pathlib.Path("train.py").write_text(src)
print("SEEN " + json.dumps(seen, sort_keys=True))
print(f"attack {attack}")
'''

TRAIN_ATTACKS = {
    "deep_then_quota.py": '''
d = out
for _ in range(1100):
    d = os.path.join(d, "d")
    os.mkdir(d)
for i in range(200):  # then past the 64 MiB quota, slowly enough for the watch
    with open(os.path.join(out, f"q{i}.bin"), "wb") as f:
        f.write(b"q" * (1 << 20))
    time.sleep(0.02)
''',
    "unlinks.py": '''
held = []
for i in range(16):  # 16 x 8 MiB, each deleted at once and written on: the folder stays empty
    path = os.path.join(out, f"u{i}.bin")
    f = open(path, "wb")
    os.unlink(path)
    for _ in range(8):
        f.write(os.urandom(1 << 20))
    f.flush()
    held.append(f)
    time.sleep(0.1)
time.sleep(5)
''',
}

# attack -> (the row's status, words its description or blocking reasons must hold)
ROWS = {
    "prints": ("discard", "agent command stopped at a limit: it printed more than 4194304 bytes on stdout"),
    # RLIMIT_FSIZE at the quota refuses the 1 GiB truncate (a size under it is named unread by the scope
    # check: tests/agents/test_agent_box_rules.py::test_a_sparse_program_md_or_a_deep_folder_is_named_unread)
    "sparse program.md": ("discard", "the agent wrote a file larger than [limits] out_max_bytes = 67108864"),
    "deep folder": ("discard", "scope violation: the agent changed (folders more than 64 levels deep"),
    "fills /tmp": ("discard", "the agent filled its private /tmp or /dev/shm ([limits] tmp_max_bytes = 8388608)"),
    "memory": ("discard", "the agent ran out of memory at [limits] memory_max_bytes = 402653184"),
    "fills its copy": ("discard", "the agent's folders (its copy, prompt and description) grew past its quota"),
    "train:deep_then_quota.py": ("crash", "the run was stopped"),
    "train:unlinks.py": ("crash", "in deleted files it still held open"),
}


def test_no_candidate_or_agent_attack_takes_the_night_down(make_ws, pages, tmp_path: Path) -> None:  # noqa: F811
    ctl, home, host_tmp = tmp_path / "ctl", tmp_path / "home", tmp_path / "hosttmp"
    for d in (ctl, home / ".config" / "looper", host_tmp):
        d.mkdir(parents=True)
    (home / ".config" / "looper" / "ws.env").write_text("OPENAI_API_KEY=sk-from-env-file\n")
    for name, text in TRAIN_ATTACKS.items():
        (ctl / name).write_text(text)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT.replace("PYTHON", sys.executable).replace("CTL", repr(str(ctl))))
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    ws = make_ws(agent_command=str(agent), agent_sandbox="bwrap", loop_noise_reruns=0, loop_stuck_after=50,
                 agent_readable=[str(ctl), str(tmp_path / "wslink"), str(tmp_path / "homelink")])
    (tmp_path / "wslink").symlink_to(ws.root)
    (tmp_path / "homelink").symlink_to(home)
    (ws.root / ".looper").mkdir(exist_ok=True)
    (ws.root / ".looper" / "test_seed").write_text("123456789\n")
    patch_config(ws, "limits", memory_max_bytes=384 * MIB, pids_max=64, tmp_max_bytes=8 * MIB,
                 out_max_bytes=64 * MIB, min_free_bytes=0)
    env = {**ws.env(), "HOME": str(home), "TMPDIR": str(host_tmp)}
    (ctl / "attack").write_text("none-yet")
    ws.baseline_only(env=env)
    rss: list[int] = []
    for attack in [*ROWS, "looks", "a fine change"]:
        (ctl / "attack").write_text(attack)
        daemon = ws.start("--max-experiments", "1", env=env)
        samples = _sample_rss(daemon.pid)
        out, _ = daemon.communicate(timeout=300)
        rss += samples
        assert daemon.returncode == 0, (attack, out[-6000:])  # the stop rule's, never 3 (a halt)
        row = ws.rows()[-1]
        said = row["description"] + " " + " ".join(json.loads(row["blocking_json"] or "[]"))
        if attack in ROWS:
            status, words = ROWS[attack]
            assert row["status"] == status and words in said, (attack, row["status"], said)
            assert "internal error" not in said, (attack, said)
            if status == "crash":
                assert not (ws.root / "runs" / "t" / f"{row['id']:05d}" / "main-s0" / "out").exists(), attack
        left = [n for n in os.listdir(host_tmp) if n.startswith("looper-agent-")]
        assert left == [], (attack, left)  # the agent's folders are gone from the host's temp dir
    by = {r["description"]: r for r in ws.rows()}
    looked = next(r for r in ws.rows() if "SEEN " in (r["rationale"] or "") and "ws_db" in r["rationale"])
    seen = json.loads(next(p for p in looked["rationale"].split(" / ") if p.startswith("SEEN "))[5:])
    assert seen == {"ws_db": False, "ws_seed": False, "ws_toml": False, "home_env": False}, seen
    assert by["attack a fine change"]["status"] == "keep"  # the night went on past every attack
    assert ws.events("halt") == [] and pages.pages == []
    assert len(rss) > 10 and max(rss) < DAEMON_RSS_MAX, (max(rss), len(rss))
    with ws.db() as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert ws.git("status", "--porcelain", cwd=ws.worktree) == ""
    assert (ws.root / ".looper" / "test_seed").read_text() == "123456789\n"
    assert_nothing_lost(ws)
    print("issue 48 nights: daemon RSS MiB (min, max):", min(rss) >> 20, max(rss) >> 20,
          {r["description"][:60]: r["status"] for r in ws.rows()})
