"""Threads for runs side by side (looper.core.run.cores): an equal share of the cores, never zero."""

from __future__ import annotations

import pytest

from looper.core.run.cores import TooFewCores, host_threads, side_by_side, threads_per_run


@pytest.mark.parametrize("cores, runs, expected", [
    (2, 1, 2), (2, 2, 1), (3, 2, 1), (4, 2, 2), (16, 3, 5), (1, 1, 1),
])
def test_each_run_gets_an_equal_share_of_the_cores_rounded_down(cores, runs, expected):
    got = threads_per_run(cores, runs)
    assert got == expected
    assert 1 <= got and got * runs <= cores  # never oversubscribed, never no thread


@pytest.mark.parametrize("cores, runs", [(2, 3), (0, 1), (1, 2)])
def test_more_runs_than_cores_is_refused_naming_both(cores, runs):
    with pytest.raises(TooFewCores, match=f"{runs} runs side by side need a core each, but this process may use "
                                          f"{cores}$"):
        threads_per_run(cores, runs)


@pytest.mark.parametrize("runs", [0, -1])
def test_no_runs_is_not_a_share(runs):
    with pytest.raises(ValueError, match="must be >= 1"):
        threads_per_run(2, runs)


@pytest.mark.parametrize("seed_jobs, workers, executor, runs", [
    (1, 1, "local", 1), (2, 1, "local", 2), (1, 2, "local", 2), (2, 2, "local", 4), (4, 2, "local", 8),
    (1, 2, "ssh", 2), (2, 2, "ssh", 4),  # every worker's seeds on the one ssh host
    (1, 4, "slurm", 1),  # each SLURM job an allocation of its own
    (0, 2, "local", 1), (2, 0, "local", 1),  # nothing said: still one run
])
def test_the_runs_at_once_here_count_every_worker_s_seeds(seed_jobs, workers, executor, runs):
    """Two workers each running one seed at a time were counted as one run (each took every core); on an ssh
    host, where every worker's runs train too, as well."""
    assert side_by_side(seed_jobs, workers, executor) == runs


@pytest.mark.parametrize("cores, runs, threads", [(16, 2, 8), (16, 3, 5), (2, 2, 1), (2, 3, 1), (1, 4, 1),
                                                  (8, 1, 0), (8, 0, 0)])
def test_an_ssh_host_s_runs_get_a_share_of_its_own_cores_and_at_least_one(cores, runs, threads):
    assert host_threads(cores, runs) == threads
