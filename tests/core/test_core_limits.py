"""looper.core.run.limits: which run limit a run hit, from the harness's own evidence (issue 39)."""

from __future__ import annotations

import pytest

from looper.core.run.limits import (
    DERIVED,
    Caps,
    Request,
    Seen,
    agent_limit_hit,
    caps_of,
    derived,
    limit_hit,
    on_host,
    over_quota,
    quota,
    read_request,
)

CAPS = Caps(memory_max_bytes=1 << 30, pids_max=64, tmp_max_bytes=8 << 20, out_max_bytes=16 << 20, out_max_files=10)
GIB = 1 << 30


@pytest.mark.parametrize("caps, seen, tail, words", [
    # the quota watch stopped it: its words stand
    (CAPS, Seen(stopped="$LOOPER_OUT grew past its quota"), "", "$LOOPER_OUT grew past its quota"),
    # cgroup counters
    (CAPS, Seen(oom_kills=2), "", "killed 2 process(es) of the run at its memory limit ([limits] memory_max_bytes = 1073741824)"),
    (Caps(), Seen(oom_kills=2), "", None),
    (CAPS, Seen(pids_refused=3), "", "more than [limits] pids_max = 64 processes and threads (3 fork(s) refused)"),
    (Caps(), Seen(pids_refused=3), "", None),
    # the run's own error lines, each only where its limit applied
    (CAPS, Seen(), "OSError: [Errno 28] No space left on device: '/tmp/x.bin'", "filled its private /tmp ([limits] tmp_max_bytes"),
    (CAPS, Seen(), "OSError: [Errno 28] No space left on device: '/dev/shm/y'", "filled its private /dev/shm"),
    (CAPS, Seen(), "OSError: [Errno 28] No space left on device: '/tmpfoo/y'", None),
    (CAPS, Seen(), "OSError: [Errno 28] No space left on device\nlooper sandbox: /dev/shm is full (8388608 bytes)",
     "filled its private /dev/shm"),
    (CAPS, Seen(), "OSError: [Errno 28] No space left on device", None),  # words alone: the canary decides
    (Caps(), Seen(), "OSError: [Errno 28] No space left on device: '/tmp/x.bin'", None),
    (CAPS, Seen(), "OSError: [Errno 27] File too large", "larger than [limits] out_max_bytes = 16777216"),
    (Caps(), Seen(), "OSError: [Errno 27] File too large", None),
    (CAPS, Seen(), "BlockingIOError: [Errno 11] Resource temporarily unavailable", "[limits] pids_max = 64"),
    (CAPS, Seen(), "RuntimeError: can't start new thread", "[limits] pids_max = 64"),
    (Caps(), Seen(), "RuntimeError: can't start new thread", None),
    (CAPS, Seen(), "Traceback (most recent call last):\nMemoryError", "out of memory at [limits] memory_max_bytes"),
    (CAPS, Seen(), "MemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", None),  # the GPU's, not ours
    (Caps(), Seen(), "MemoryError", None),
    # a full disk: the run's only when its $LOOPER_OUT holds what is missing
    (CAPS, Seen(log_full=True, out_bytes=GIB, disk_free=10, min_free_bytes=100), "",
     "train.py filled the disk: its $LOOPER_OUT holds 1073741824 bytes"),
    (CAPS, Seen(out_bytes=GIB, disk_free=10, min_free_bytes=100), "OSError: [Errno 28] No space left on device: '/o/w'",
     "train.py filled the disk"),
    (CAPS, Seen(log_full=True, out_bytes=5, disk_free=0, min_free_bytes=0), "", "train.py filled the disk"),
    (CAPS, Seen(log_full=True, out_bytes=0, disk_free=0, min_free_bytes=0), "", None),  # an empty out/ filled nothing
    (CAPS, Seen(log_full=True, out_bytes=90, disk_free=10, min_free_bytes=100), "", None),  # nor does one short of it
    (CAPS, Seen(log_full=True, out_bytes=5, disk_free=10, min_free_bytes=100), "", None),  # something else filled it
    (CAPS, Seen(log_full=True, out_bytes=GIB, disk_free=500, min_free_bytes=100), "", None),  # the disk is fine
    (CAPS, Seen(log_full=True, out_bytes=GIB, disk_free=-1, min_free_bytes=100), "", None),  # not measured
    (CAPS, Seen(out_bytes=GIB, disk_free=10, min_free_bytes=100), "", None),  # full, but nothing failed on it
    (CAPS, Seen(), "ValueError: boom", None),
])
def test_limit_hit(caps: Caps, seen: Seen, tail: str, words: str | None) -> None:
    got = limit_hit(caps, seen, tail)
    assert (got is None) == (words is None), got
    if words is not None:
        assert words in got


@pytest.mark.parametrize("used, entries, max_bytes, max_files, words", [
    (10, 1, 100, 10, None),
    (101, 1, 100, 10, "out_max_bytes = 100 (101 bytes)"),
    (10, 11, 100, 10, "out_max_files = 10 entries (11)"),
    (10**12, 10**9, 0, 0, None),  # no quota
])
def test_over_quota(used: int, entries: int, max_bytes: int, max_files: int, words: str | None) -> None:
    got = over_quota(used, entries, max_bytes, max_files)
    assert (got is None) == (words is None) and (words is None or words in got), got


@pytest.mark.parametrize("used, held, too_deep, words", [
    (10, 0, 0, None),
    (10, 80, 0, None),  # folder and held files together still under the quota
    (10, 91, 0, "out_max_bytes = 100 (101 bytes, 91 of them in deleted files it still held open)"),
    (0, 101, 0, "(101 bytes, 101 of them in deleted files"),  # issue 48: all of it unlinked, the folder empty
    (101, 0, 0, "(101 bytes): the run"),  # nothing held: the words say nothing of it
    (10, -5, 0, None),  # a negative count (never measured) adds nothing
    (10, 0, 1, "more than 64 levels deep (1 not entered)"),  # a folder the watch would not enter
    (101, 0, 1, "out_max_bytes = 100"),  # the bytes are said first
])
def test_over_quota_counts_held_files_and_depth(used: int, held: int, too_deep: int, words: str | None) -> None:
    got = over_quota(used, 1, 100, 10, held_bytes=held, too_deep=too_deep, max_depth=64)
    assert (got is None) == (words is None) and (words is None or words in got), got


@pytest.mark.parametrize("out_max, free, min_free, expected", [
    (1000, 10_000, 100, 1000),  # the configured quota fits
    (1000, 600, 100, 500),  # never more than the disk can give
    (1000, 50, 100, 1),  # no room at all: 1 byte, never "no quota"
    (0, 600, 100, 500),  # no configured quota: the disk's room
])
def test_quota(out_max: int, free: int, min_free: int, expected: int) -> None:
    assert quota(out_max, free, min_free) == expected


@pytest.mark.parametrize("memory, cores, pid_max, expected", [
    (24 * GIB, 2, 32768, {"memory_max_bytes": 18 * GIB, "pids_max": 512, "tmp_max_bytes": 3 * GIB,
                          "out_max_bytes": 16 * GIB}),
    (GIB, 1, 32768, {"memory_max_bytes": GIB, "pids_max": 512, "tmp_max_bytes": 128 << 20, "out_max_bytes": 16 * GIB}),
    (256 * GIB, 256, 32768, {"memory_max_bytes": 192 * GIB, "pids_max": 16384, "tmp_max_bytes": 32 * GIB,
                             "out_max_bytes": 16 * GIB}),  # at most half of pid_max
    (256 << 20, 1, 1000, {"memory_max_bytes": GIB, "pids_max": 512, "tmp_max_bytes": 64 << 20,
                          "out_max_bytes": 16 * GIB}),  # floors; a tiny pid_max leaves pids as derived
])
def test_derived(memory: int, cores: int, pid_max: int, expected: dict) -> None:
    assert derived(memory, cores, pid_max) == expected
    assert derived(memory, cores, pid_max, runs=1) == expected  # one run at a time: the whole 75 %


@pytest.mark.parametrize("memory, runs, memory_max, tmp_max", [
    (24 * GIB, 2, 9 * GIB, 1536 << 20),  # two seeds side by side on 24 GiB: 9 GiB each, 18 GiB together
    (128 * GIB, 16, 6 * GIB, GIB),  # 8 slots on a GPU host, each run evaluated beside the next training
    (2 * GIB, 8, GIB, 64 << 20),  # floors: never under 1 GiB a run, 64 MiB of tmpfs
    (24 * GIB, 0, 18 * GIB, 3 * GIB),  # no runs named: one
])
def test_runs_at_a_time_share_the_memory_so_that_together_they_never_exhaust_it(memory, runs, memory_max, tmp_max):
    got = derived(memory, 2, 32768, runs=runs)
    assert (got["memory_max_bytes"], got["tmp_max_bytes"]) == (memory_max, tmp_max)
    if memory_max > GIB:  # above the floor: the shares add up to the 75 % one run alone would get
        assert runs * got["memory_max_bytes"] <= memory * 3 // 4
    assert (got["pids_max"], got["out_max_bytes"]) == (512, 16 * GIB)  # not memory: not shared


def test_a_run_over_its_share_names_the_share_and_what_sets_it():
    shared = Caps(memory_max_bytes=9 * GIB, shared_by=2)
    words = limit_hit(shared, Seen(), "Traceback\nMemoryError")
    assert words == ("train.py ran out of memory at [limits] memory_max_bytes = 9663676416, its share of 75 % of "
                     "this machine's memory with 2 runs at a time (loop.seed_jobs x loop.workers, evaluations "
                     "beside trainings with loop.prestart) (MemoryError)")
    assert "share" in limit_hit(shared, Seen(oom_kills=1), "")
    assert "share" not in limit_hit(Caps(memory_max_bytes=9 * GIB), Seen(oom_kills=1), "")  # set, or one run


@pytest.mark.parametrize("usage, words", [
    ({"bytes": 10, "entries": 2, "sparse": []}, None),
    ({"bytes": 10, "entries": 2, "sparse": ["big.bin"]}, "sparse file(s), refused unfetched: big.bin"),
    ({"bytes": 1001, "entries": 2, "sparse": []}, "1001 bytes, over [limits] out_max_bytes = 1000"),
    ({"bytes": 10, "entries": 11}, "11 entries, over [limits] out_max_files = 10"),
    (None, None),  # an older host measured nothing: rsync --max-size alone
    ({}, None),
])
def test_fetch_refused(usage: object, words: str | None) -> None:
    from looper.core.run.limits import fetch_refused

    got = fetch_refused(usage, 1000, 10)
    assert (got is None) == (words is None) and (words is None or words in got), got
    assert fetch_refused({"bytes": 10**15, "entries": 10**9}, 0, 0) is None  # no bound configured


AGENT = Caps(memory_max_bytes=100, pids_max=10, tmp_max_bytes=50, out_max_bytes=1000, out_max_files=10)


@pytest.mark.parametrize("caps, seen, tail, words", [
    (AGENT, Seen(), "Traceback\nMemoryError", "the agent ran out of memory at [limits] memory_max_bytes = 100"),
    (AGENT, Seen(), "OSError: [Errno 28] No space left on device", "the agent filled its private /tmp or /dev/shm"),
    (AGENT, Seen(), "[Errno 28] No space left on device: '/tmp/x'", "the agent filled its private /tmp ([limits]"),
    (AGENT, Seen(), "dd: error writing 'x': No space left on device", "tmp_max_bytes = 50): No space"),
    (AGENT, Seen(stopped="the agent's folders grew past its quota"), "", "the agent's folders grew past its quota"),
    (AGENT, Seen(oom_kills=1), "", "killed 1 process(es) of the run at its memory limit"),
    (Caps(), Seen(), "No space left on device", None),  # no limits: nothing is the agent's limit
    (AGENT, Seen(), "exit 1: it failed", None),
])
def test_agent_limit_hit(caps: Caps, seen: Seen, tail: str, words: str | None) -> None:
    got = agent_limit_hit(caps, seen, tail)
    assert (got is None) == (words is None) and (words is None or words in got), got


HOST = derived(128 * GIB, 16, 4_194_304)  # a GPU host's own figures, one run at a time
LAPTOP = Caps(**{k: v for k, v in derived(16 * GIB, 8, 4_194_304).items()}, out_max_files=100_000)


@pytest.mark.parametrize("derive, expected", [
    # [limits] all at 0 on the daemon (a laptop): the host's memory, processes, tmpfs and quota, one run at a time
    (list(DERIVED), Caps(memory_max_bytes=96 * GIB, pids_max=2048, tmp_max_bytes=16 * GIB, out_max_bytes=16 * GIB,
                         out_max_files=100_000, on_host=DERIVED)),
    # memory_max_bytes set by hand on the daemon: that figure is every run's, wherever it runs
    (["pids_max", "tmp_max_bytes"], Caps(memory_max_bytes=12 * GIB, pids_max=2048, tmp_max_bytes=16 * GIB,
                                         out_max_bytes=16 * GIB, out_max_files=100_000, on_host=("pids_max", "tmp_max_bytes"))),
    ([], LAPTOP),  # everything set by hand: the daemon's figures
    (None, LAPTOP),  # an older daemon asked without naming what is derived: its figures stand
    ("memory_max_bytes", LAPTOP),  # not a list: nothing is derived there
    (["out_max_files", "shared_by", "memory"], LAPTOP),  # names no [limits] key 0 stands for
])
def test_an_ssh_host_derives_the_limits_the_daemon_left_at_0_from_its_own_machine(derive, expected):
    assert on_host(LAPTOP, derive, HOST) == expected


def test_a_shared_daemon_figure_becomes_the_host_s_unshared_one_and_the_words_say_whose():
    shared = Caps(memory_max_bytes=3 * GIB, shared_by=4)
    got = on_host(shared, ["memory_max_bytes"], HOST)
    assert (got.memory_max_bytes, got.shared_by, got.on_host) == (96 * GIB, 1, ("memory_max_bytes",))
    assert got.memory_words() == (f"[limits] memory_max_bytes = {96 * GIB}, its share of 75 % of the ssh host's "
                                  "memory (the key is 0: the host derives it)")
    two = on_host(shared, ["memory_max_bytes"], derived(128 * GIB, 16, 4_194_304, 2), runs=2)  # 2 workers' runs there
    assert (two.memory_max_bytes, two.shared_by) == (48 * GIB, 2)
    assert two.memory_words() == (f"[limits] memory_max_bytes = {48 * GIB}, its share of 75 % of the ssh host's "
                                  "memory with 2 runs at a time (loop.workers) (the key is 0: the host derives it)")
    assert on_host(shared, ["pids_max"], HOST).memory_words() == (
        f"[limits] memory_max_bytes = {3 * GIB}, its share of 75 % of this machine's memory with 4 runs at a time "
        "(loop.seed_jobs x loop.workers, evaluations beside trainings with loop.prestart)")
    assert on_host(shared, ["memory_max_bytes"], {"memory_max_bytes": 0}) == shared  # no figure there: the daemon's


@pytest.mark.parametrize("raw, expected", [
    ({"memory_max_bytes": 5, "pids_max": 7, "on_host": ["memory_max_bytes", "nonsense"]},
     Caps(memory_max_bytes=5, pids_max=7, on_host=("memory_max_bytes",))),
    ({"memory_max_bytes": -1, "pids_max": True, "tmp_max_bytes": "9", "out_max_files": 3.0, "other": 1}, Caps()),
    ({"shared_by": 2, "on_host": "memory_max_bytes"}, Caps(shared_by=2)),
    (["memory_max_bytes", 5], Caps()),
    (None, Caps()),
])
def test_caps_of_takes_only_whole_counts_of_known_limits(raw, expected):
    assert caps_of(raw) == expected


@pytest.mark.parametrize("asked, expected", [
    ({}, Request()),
    ({"memory_max_bytes": 5, "pids_max": 7, "tmp_max_bytes": 0, "out_max_bytes": 9, "out_max_files": 3, "shared_by": 2,
      "on_host": [], "derive": ["memory_max_bytes", "pids_max"], "runs": 3, "oom_score_adj": -1000, "min_free_bytes": 11},
     Request(Caps(memory_max_bytes=5, pids_max=7, out_max_bytes=9, out_max_files=3, shared_by=2),
             ("memory_max_bytes", "pids_max"), runs=3, oom_score_adj=-1000, min_free_bytes=11)),
    ({"on_host": ["tmp_max_bytes"], "oom_score_adj": 1000}, Request(Caps(on_host=("tmp_max_bytes",)))),
])
def test_read_request_takes_what_the_daemon_writes(asked, expected):
    assert read_request(asked) == expected


@pytest.mark.parametrize("asked, words", [
    ([], "LOOPER_LIMITS must be a JSON object, got list"),
    ({"memory_max_bytes": 1, "memory": 2, "zz": 1}, "LOOPER_LIMITS: unknown key(s) 'memory', 'zz'"),
    ({"memory_max_bytes": -1}, "LOOPER_LIMITS: memory_max_bytes must be a whole number at least 0, got -1"),
    ({"pids_max": True}, "LOOPER_LIMITS: pids_max must be a whole number at least 0, got True"),
    ({"out_max_files": 3.0}, "LOOPER_LIMITS: out_max_files must be a whole number at least 0, got 3.0"),
    ({"shared_by": 0}, "LOOPER_LIMITS: shared_by must be a whole number at least 1, got 0"),
    ({"runs": 0}, "LOOPER_LIMITS: runs must be a whole number at least 1, got 0"),
    ({"oom_score_adj": 1001}, "LOOPER_LIMITS: oom_score_adj must be a whole number -1000 to 1000, got 1001"),
    ({"oom_score_adj": -1001}, "LOOPER_LIMITS: oom_score_adj must be a whole number -1000 to 1000, got -1001"),
    ({"derive": "memory_max_bytes"}, "LOOPER_LIMITS: derive must list names among memory_max_bytes, pids_max, "
                                     "tmp_max_bytes, out_max_bytes, got 'memory_max_bytes'"),
    ({"on_host": ["memory"]}, "LOOPER_LIMITS: on_host must list names among memory_max_bytes, pids_max, "
                              "tmp_max_bytes, out_max_bytes, got ['memory']"),
])
def test_read_request_refuses_what_it_cannot_read_and_names_it(asked, words):
    """A bad request is the daemon's bug: read leniently, it would be a run with fewer limits than asked."""
    with pytest.raises(ValueError) as caught:
        read_request(asked)
    assert str(caught.value) == words
