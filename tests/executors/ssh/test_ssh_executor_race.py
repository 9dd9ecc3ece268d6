"""Runs side by side on one ssh host (``[loop] seed_jobs`` > 1, ``[loop] workers`` > 1) share its checkout/:
each run trains its own candidate's train.py, and no sync of one breaks another's (a real sshd on 127.0.0.1)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from ssh_jobs import Make, _job

pytestmark = pytest.mark.e2e


def _who(checkout: Path, name: str) -> None:
    """A train.py that writes ``name`` to its out/ (every candidate's of the same size)."""
    (checkout / "train.py").write_text(
        f"import os, pathlib\npathlib.Path(os.environ['LOOPER_OUT'], 'who').write_text({name!r})\n")


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
def test_two_candidates_runs_at_once_on_one_host_each_train_their_own_train_py(make_executor: Make, checkout: Path,
                                                                                tmp_path: Path, sandbox: str) -> None:
    """8 runs at once, of two candidates in turn (two workers' seeds): before, rsyncs into checkout/ at once failed
    (files vanished under --delete: a transport fault, the night's halt) or a run found another's train.py there."""
    other = tmp_path / "other"
    shutil.copytree(checkout, other)
    _who(checkout, "A")
    _who(other, "B")
    ex = make_executor(sandbox=sandbox)
    results: dict[int, tuple] = {}

    def run(i: int) -> None:
        job = _job(checkout if i % 2 == 0 else other, tmp_path, name=f"r{i}")
        results[i] = (ex.train(job, None, None), job)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = {i: (job.out_dir / "who").read_text() if (job.out_dir / "who").is_file() else f"none: {r.transport_error}"
           for i, (r, job) in results.items()}
    assert got == {i: "AB"[i % 2] for i in range(8)}, got
    assert all(r.clean_exit for r, _job in results.values())


def test_a_train_py_of_the_same_size_and_second_as_the_last_is_synced_by_content(make_executor: Make, checkout: Path,
                                                                                 tmp_path: Path) -> None:
    """Two candidates' train.py of one size written in the same second (LR0 0.003 and 0.002): rsync's quick check
    (size and time) took the second for the first and skipped it; the hash check then stopped the night."""
    ex = make_executor(sandbox="none")
    _who(checkout, "A")
    first = ex.train(_job(checkout, tmp_path, name="a"), None, None)
    stamp = (checkout / "train.py").stat()
    _who(checkout, "B")
    os.utime(checkout / "train.py", ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    job = _job(checkout, tmp_path, name="b")
    second = ex.train(job, None, None)
    assert first.clean_exit and second.clean_exit, second.transport_error
    assert (job.out_dir / "who").read_text() == "B"
