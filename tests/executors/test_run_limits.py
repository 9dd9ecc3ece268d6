"""Issue 39, the fast parts: a full disk under the run's log never raises out of proc.supervise,
run outputs are read with O_NOFOLLOW, and a run's limits wrap its argv (real files, /dev/full)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from looper import proc
from looper.core.run.limits import Caps
from looper.executors import limits
from looper.night.guard import read_json


def test_a_full_disk_under_the_run_log_is_evidence_not_an_exception() -> None:
    """/dev/full answers every write with ENOSPC: the run still ends, its tail is kept, the failure said."""
    s = proc.supervise([sys.executable, "-c", "print('line one'); print('line two')"], cwd="/", env=None,
                       log_path="/dev/full", limits=proc.Limits(budget_seconds=30))
    assert s.exit_code == 0 and "line two" in s.log_tail
    assert "No space left on device" in s.log_error and "full" in s.log_error


def test_a_limit_check_stops_the_run_with_its_words(tmp_path: Path) -> None:
    calls = []

    def check() -> str | None:
        calls.append(1)
        return "over its quota" if len(calls) > 1 else None

    s = proc.supervise([sys.executable, "-c", "import time; time.sleep(30)"], cwd=tmp_path, env=None,
                       log_path=tmp_path / "log", limits=proc.Limits(budget_seconds=60, check=check, check_every=0.1,
                                                                       kill_after=1))
    assert s.stopped_by == "limit" and s.limit == "over its quota" and s.seconds < 10
    assert not s.timed_out and not s.stalled


def test_read_json_refuses_a_link_unread_naming_it(tmp_path: Path) -> None:
    truth = tmp_path / "MATCHES.json"
    truth.write_text(json.dumps({"matched": [[1, 2, 3, 4]]}))
    (tmp_path / "train.json").symlink_to(truth)
    value, problem = read_json(tmp_path / "train.json", 1 << 20, 64)
    assert value is None and "train.json is a symbolic link" in problem and "not followed" in problem
    os.mkfifo(tmp_path / "fifo.json")  # never blocks the daemon
    assert read_json(tmp_path / "fifo.json", 1 << 20, 64) == (None, "fifo.json is not a plain file")
    (tmp_path / "ok.json").write_text('{"steps": 3}')
    assert read_json(tmp_path / "ok.json", 1 << 20, 64) == ({"steps": 3}, None)


def test_the_box_wraps_the_argv_with_its_limits(tmp_path: Path) -> None:
    caps = Caps(memory_max_bytes=1 << 30, pids_max=100, tmp_max_bytes=1 << 20, out_max_bytes=1 << 20, out_max_files=5)
    with limits.Box(caps, tmp_path, oom_score_adj=1000) as box:
        argv = box.wrap(["python", "train.py"])
        assert argv[-3:] == ["--", "python", "train.py"]
        assert "--data=1073741824:1073741824" in argv and "--fsize=1048576:1048576" in argv
        assert argv[argv.index("sh") + 1] == "1000"  # oom_score_adj
        assert box.check() is None
        for i in range(7):
            (tmp_path / f"f{i}").write_text("x")
        assert "out_max_files = 5" in box.check()
    assert limits.Box(Caps(), tmp_path).wrap(["a"]) == ["a"]  # run_limits = false: the argv as it is


def test_every_sandbox_gets_size_limited_tmpfs_when_asked() -> None:
    from looper.executors import sandbox

    args = sandbox._base_args(network=False, tmp_bytes=1 << 20)
    for where in ("/tmp", "/dev/shm"):
        i = args.index(where)
        assert args[i - 3:i + 1] == ["--size", "1048576", "--tmpfs", where], args[i - 3:i + 1]
    assert "--size" not in sandbox._base_args(network=False)  # 0: unbounded, as before


def test_only_a_gone_daemons_run_cgroups_are_removed_at_start() -> None:
    """A daemon starting beside another never removes the other's run cgroups (its runs could not join them)."""
    from looper.config import LimitsConfig

    parents = limits.cgroup_parents()
    if not parents:
        pytest.skip("no cgroup this daemon may make here (the rlimits path): nothing to leave behind")
    parent = next(iter(parents.values()))
    mine, gone = parent / f"looper-run-{os.getpid()}-999999", parent / "looper-run-4194304-1"  # above pid_max
    before = limits.current()
    try:
        mine.mkdir()
        gone.mkdir()
        limits.configure(LimitsConfig())
        assert mine.is_dir() and not gone.exists()
    finally:
        limits._SETTINGS[0] = before
        for d in (mine, gone):
            if d.exists():
                d.rmdir()


@pytest.mark.parametrize("over, runs, shared", [
    ({"loop.seed_jobs": 2}, 2, True),  # two seeds side by side share the memory
    ({"loop.seed_jobs": 4, "loop.prestart": "on"}, 8, True),  # and the evaluations beside them
    ({"loop.seed_jobs": 1, "loop.workers": 3}, 3, True),
    ({"loop.seed_jobs": 2, "limits.memory_max_bytes": 3 << 30}, 2, False),  # set by hand: as set
    ({"loop.workers": 3, "executor.kind": "ssh", "executor.host": "gpu1", "executor.remote_dir": "/w"}, 3,
     "host"),  # the runs are on another host: it derives their share of its own memory (3 workers' runs there)
    ({"loop.workers": 2, "executor.kind": "slurm", "executor.partition": "gpu"}, 1, False),  # the job's --mem
])
def test_the_daemon_gives_each_run_its_share_of_the_memory(over, runs, shared) -> None:
    """looper.night.loop.open_daemon: the runs a night puts at a time on this machine share 75 % of its memory,
    so that together they never exhaust it; a run alone gets the same share (its result never depends on the
    packing)."""
    from looper.config import config_from_dict
    from looper.core.run.limits import derived
    from looper.night.loop import open_daemon

    data: dict = {}
    for key, value in over.items():
        section, name = key.split(".")
        data.setdefault(section, {})[name] = value
    from looper.proc.runlog import CAPS

    before, caps = limits.current(), dict(CAPS)
    try:
        open_daemon(Path("/nonexistent-root"), config_from_dict(data))
        got = limits.current()
        m = limits.machine()
        assert got.runs == runs
        if shared == "host":  # the host is asked to derive the memory, for the runs it gets at a time
            asked = json.loads(limits.request()[limits.REQUEST])
            assert "memory_max_bytes" in asked["derive"] and asked["runs"] == runs
            # what runs on this machine, the command agent's box (looper/agents/command.py: limits.box), gets its
            # share of this machine's memory: one agent a worker, so `runs` at a time here too
            assert limits.box(None).caps.memory_max_bytes == derived(m["memory"], m["cores"], m["pid_max"],
                                                                     runs)["memory_max_bytes"]
        elif shared:
            assert got.caps.memory_max_bytes == derived(m["memory"], m["cores"], m["pid_max"], runs)["memory_max_bytes"]
            assert got.caps.memory_max_bytes < derived(m["memory"], m["cores"], m["pid_max"])["memory_max_bytes"]
            assert got.caps.shared_by == runs and "runs at a time" in got.caps.memory_words()
        elif "limits.memory_max_bytes" in over:
            assert (got.caps.memory_max_bytes, got.caps.shared_by) == (3 << 30, 1)
        else:
            assert got.caps == limits.caps_from(config_from_dict(data).limits)  # unshared, as one run at a time
    finally:
        limits._SETTINGS[0] = before
        CAPS.update(caps)


@pytest.mark.parametrize("section, derive", [
    ({}, ["memory_max_bytes", "pids_max", "tmp_max_bytes", "out_max_bytes"]),
    ({"memory_max_bytes": 3 << 30, "tmp_max_bytes": 8 << 20}, ["pids_max", "out_max_bytes"]),
])
def test_an_ssh_host_derives_from_its_own_machine_what_the_daemon_left_at_0(section, derive) -> None:
    """request() (the daemon) names the [limits] left at 0; from_request() (looper.remote run on the host) puts
    the host's own figures there, one run at a time. The daemon here asks as a 16 GiB laptop would."""
    from looper.config import config_from_dict
    from looper.core.run.limits import derived

    before = limits.current()
    try:
        limits.configure(config_from_dict({"limits": section}).limits)
        assert limits.current().derived == tuple(derive)
        laptop = derived(16 << 30, 8, 4_194_304)
        asked = dataclasses.replace(limits.current().caps, **{k: laptop[k] for k in derive})
        limits._SETTINGS[0] = dataclasses.replace(limits.current(), caps=asked)
        env = {"PATH": "/usr/bin", **limits.request()}
        assert json.loads(env[limits.REQUEST])["derive"] == derive
        box = limits.from_request(env, None)
        assert limits.REQUEST not in env  # taken out: the run never sees it
        m = limits.machine()
        here = derived(m["memory"], m["cores"], m["pid_max"])
        assert box.caps.on_host == tuple(derive)
        for key in ("memory_max_bytes", "pids_max", "tmp_max_bytes", "out_max_bytes"):
            assert getattr(box.caps, key) == (here[key] if key in derive else section[key]), key
    finally:
        limits._SETTINGS[0] = before


def test_run_limits_off_ask_the_host_for_no_limit_only_the_runs_at_a_time() -> None:
    from looper.config import config_from_dict

    before = limits.current()
    try:
        limits.configure(config_from_dict({"limits": {"run_limits": False}}).limits)
        assert limits.current().derived == () and limits.request() == {}
        assert limits.from_request({}, None).caps == Caps()
        limits.configure(config_from_dict({"limits": {"run_limits": False}}).limits, runs=2)
        asked = limits.request()  # two workers on the host: the count alone (each run's share of its cores)
        assert json.loads(asked[limits.REQUEST]) == {"runs": 2}
        box = limits.from_request(dict(asked), None)
        assert box.caps == Caps() and not box.on and box.runs == 2
    finally:
        limits._SETTINGS[0] = before
