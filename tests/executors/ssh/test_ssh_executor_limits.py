"""The SSH executor against a real sshd on 127.0.0.1: the daemon's [limits] on the host (issue 39). The
run's limits apply there and name what was hit, keys left at 0 are the host's own, out/ is measured
before it is fetched, each of the workers' runs gets a share of the host's cores, and a request the
host cannot read runs nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from ssh_jobs import Make, _job

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_a_sparse_or_outsized_out_is_refused_unfetched(make_executor: Make, checkout: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39, finding 7: the host measures out/ before rsync fetches it; a 1 TB sparse file (a few
    blocks on its disk, 1 TB on ours) or more than [limits] out_max_bytes is the run's limit, nothing
    comes back; an honest out/ still arrives whole. The run's own limits are not sent to the host here
    (``RLIMIT_FSIZE`` there would stop both writes first): the fetch bound is the line that holds where
    they do not apply."""
    from looper.core.run.limits import Caps
    from looper.executors import limits

    monkeypatch.setattr(limits, "request", lambda: {})
    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(out_max_bytes=1 << 20, out_max_files=100))
    try:
        (checkout / "train.py").write_text(
            "import os\nout = os.environ['LOOPER_OUT']\n"
            "with open(os.path.join(out, 'weights.pt'), 'wb') as f:\n"
            "    f.truncate(1 << 40)\n")  # 1 TB on paper
        r = make_executor().train(_job(checkout, tmp_path, name="sparse"), None, None)
        assert "sparse file(s), refused unfetched: weights.pt" in r.limit and not r.clean_exit
        assert not (tmp_path / "sparse" / "out" / "weights.pt").exists()
        (checkout / "train.py").write_text(
            "import os\nout = os.environ['LOOPER_OUT']\n"
            "open(os.path.join(out, 'weights.pt'), 'wb').write(os.urandom(2 << 20))\n")
        r = make_executor().train(_job(checkout, tmp_path, name="big"), None, None)
        assert "over [limits] out_max_bytes = 1048576: refused unfetched" in r.limit
        assert not (tmp_path / "big" / "out" / "weights.pt").exists()
        (checkout / "train.py").write_text(
            "import os\nout = os.environ['LOOPER_OUT']\n"
            "open(os.path.join(out, 'weights.pt'), 'wb').write(b'w' * 1000)\n")
        r = make_executor().train(_job(checkout, tmp_path, name="fine"), None, None)
        assert r.clean_exit and r.limit == "", (r, r.log_tail)
        assert (tmp_path / "fine" / "out" / "weights.pt").stat().st_size == 1000
    finally:
        limits._SETTINGS[0] = before


def test_the_runs_limits_apply_on_the_host_and_name_what_was_hit(make_executor: Make, checkout: Path,
                                                                  tmp_path: Path) -> None:
    """Issue 39 on an ssh host: ``looper.remote run`` applies the daemon's [limits] there (oom_score_adj,
    RLIMIT_DATA, the sandbox's /tmp size) and ``end`` hands back what it saw; a 1 GiB allocation under
    256 MiB is the limit named."""
    from looper.core.run.limits import Caps
    from looper.executors import limits
    from looper.night.measure import limit_hit

    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=256 << 20, pids_max=64, tmp_max_bytes=4 << 20,
                                               out_max_bytes=8 << 20, out_max_files=100))
    try:
        (checkout / "train.py").write_text(
            "import os, resource, shutil, json\nout = os.environ['LOOPER_OUT']\n"
            "facts = {'adj': open('/proc/self/oom_score_adj').read().strip(),\n"
            "         'data': resource.getrlimit(resource.RLIMIT_DATA)[0], 'tmp': shutil.disk_usage('/tmp').total}\n"
            "open(os.path.join(out, 'facts.json'), 'w').write(json.dumps(facts))\n"
            "hog = bytearray(1 << 30)\n")
        job = _job(checkout, tmp_path, name="limited")
        r = make_executor().train(job, None, None)
        assert not r.clean_exit and "MemoryError" in r.log_tail and r.seen, r
        assert "out of memory at [limits] memory_max_bytes = 268435456" in limit_hit(r)
        facts = json.loads((job.out_dir / "facts.json").read_text())
        assert facts == {"adj": "1000", "data": 256 << 20, "tmp": 4 << 20}, facts
    finally:
        limits._SETTINGS[0] = before


def test_limits_left_at_0_are_the_host_s_own_and_the_result_says_so(make_executor: Make, checkout: Path,
                                                                      tmp_path: Path) -> None:
    """The daemon's machine (a laptop, often) says nothing of the host's memory: the [limits] left at 0 are derived
    there, from the host's own memory, cores and pid_max (looper.core.run.limits.on_host), and ``end`` hands back
    what the run ran under, so that a limit hit names the host's figure. Here the daemon asks 256 MiB as a derived
    figure; the run on the host gets 75 % of the host's memory instead, and its 1 GiB allocation succeeds."""
    from looper.core.run.limits import Caps, derived
    from looper.executors import limits

    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=256 << 20, pids_max=64, tmp_max_bytes=4 << 20,
                                               out_max_bytes=8 << 20, out_max_files=100),
                                          derived=("memory_max_bytes",))
    try:
        (checkout / "train.py").write_text(
            "import os, resource, json\nout = os.environ['LOOPER_OUT']\n"
            "hog = bytearray(1 << 30)\n"
            "open(os.path.join(out, 'facts.json'), 'w').write(json.dumps(resource.getrlimit(resource.RLIMIT_DATA)[0]))\n")
        job = _job(checkout, tmp_path, name="host-derived")
        r = make_executor().train(job, None, None)
        assert r.clean_exit, (r, r.log_tail)
        m = limits.machine()  # the host is this machine here
        host = derived(m["memory"], m["cores"], m["pid_max"])["memory_max_bytes"]
        assert json.loads((job.out_dir / "facts.json").read_text()) == host
        assert (r.caps["memory_max_bytes"], tuple(r.caps["on_host"]), r.caps["pids_max"]) == (host, ("memory_max_bytes",), 64)
        from looper.night.measure import limit_hit

        failed = dataclasses.replace(r, exit_code=1, log_tail="Traceback\nMemoryError")  # had it hit it there:
        assert limit_hit(failed) == (f"train.py ran out of memory at [limits] memory_max_bytes = {host}, its share of "
                                     "75 % of the ssh host's memory (the key is 0: the host derives it) (MemoryError)")
    finally:
        limits._SETTINGS[0] = before


@pytest.mark.parametrize("limited", [True, False], ids=["run-limits", "no-run-limits"])
@pytest.mark.parametrize("runs", [1, 2])
def test_the_workers_runs_at_a_time_on_the_host_each_get_a_share_of_its_cores(make_executor: Make, checkout: Path,
                                                                             tmp_path: Path, runs: int,
                                                                             limited: bool) -> None:
    """Two workers on one ssh host ran each run on every core of it (the daemon sets threads for its own machine
    only): the host now gives each run its share of its own cores (looper.core.run.cores.host_threads), with
    run limits and without (``[limits] run_limits = false``: the count travels alone, and no limit is set)."""
    from looper.core.run.limits import Caps
    from looper.executors import limits

    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(pids_max=512) if limited else Caps(), runs=runs)
    try:
        (checkout / "train.py").write_text(
            "import os, json\nout = os.environ['LOOPER_OUT']\nnames = ('LOOPER_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS')\n"
            "open(os.path.join(out, 'threads.json'), 'w').write(json.dumps([os.environ.get(k) for k in names]))\n")
        job = _job(checkout, tmp_path, name=f"threads-{runs}")
        r = make_executor().train(job, None, None)
        assert r.clean_exit, (r, r.log_tail)
        seen = json.loads((job.out_dir / "threads.json").read_text())
        share = str(max(1, (os.cpu_count() or 1) // 2))  # the host is this machine here
        assert seen[0] == (share if runs == 2 else None) and (runs == 1 or seen == [share] * 3), seen
        assert bool(r.caps) == limited, r.caps  # no limits asked: none set on the host, the share all the same
    finally:
        limits._SETTINGS[0] = before


def test_a_limits_request_the_host_cannot_read_is_a_harness_error_and_nothing_runs(make_executor: Make, checkout: Path,
                                                                                    tmp_path: Path) -> None:
    """The daemon writes LOOPER_LIMITS itself: one the host cannot read (here ``runs`` 0) is a harness bug. The host
    runs nothing (never the run with fewer limits than asked, as it did before) and the result is a transport
    fault in the host's words, which the failure classification calls a harness error, never the candidate's."""
    from looper.core.fault.failure import FailureEvidence, classify_failure
    from looper.core.run.limits import Caps
    from looper.core.verdicts.verdict import Outcome
    from looper.executors import limits

    before = limits.current()
    limits._SETTINGS[0] = limits.Settings(Caps(memory_max_bytes=256 << 20, pids_max=64), runs=0)
    try:
        (checkout / "train.py").write_text("import os\nopen(os.path.join(os.environ['LOOPER_OUT'], 'ran'), 'w')\n")
        job = _job(checkout, tmp_path, name="refused")
        r = make_executor().train(job, None, None)
        assert not (job.out_dir / "ran").exists()
        assert r.transport_exit_code == -1 and not r.clean_exit and r.exit_code is None
        assert r.transport_error.endswith("looper.remote run refused the run: LOOPER_LIMITS: runs must be a whole "
                                          "number at least 1, got 0"), r.transport_error
        verdict = classify_failure(FailureEvidence(exit_code=r.exit_code, log_tail=r.log_tail,
                                           transport_exit_code=r.transport_exit_code))
        assert verdict.outcome is Outcome.ERROR and verdict.reason.startswith("harness error"), verdict
    finally:
        limits._SETTINGS[0] = before
