"""A training run's memory said before a night (looper.core.data.memory, issue 47): the process part does not
grow with the data; train.py's CACHE = "ram" adds every tile decoded; the runs that fit the machine."""

from __future__ import annotations

import pytest

from looper.core.data.memory import (
    CACHE_BYTES_PER_PIXEL,
    CACHE_LIMIT_MB,
    PROCESS_MB,
    RESERVE_MB,
    held,
    run_memory,
    too_many,
)


@pytest.mark.parametrize("tiles, cache, cache_mb", [
    (744, "none", 0.0),
    (13_735, "none", 0.0),      # a firm's 40 A1 pages: no more than the demo's 744 tiles
    (13_735, "disk", 0.0),      # Ultralytics' .npy files: on disk, not held
    (744, "ram", 744 * 256 * 256 * CACHE_BYTES_PER_PIXEL / 2**20),
    (13_735, "ram", 13_735 * 256 * 256 * CACHE_BYTES_PER_PIXEL / 2**20),
])
def test_only_a_ram_cache_grows_with_the_tiles(tiles, cache, cache_mb):
    m = run_memory(tiles, 256, cache, total_mb=24_576)
    assert m.cache_mb == pytest.approx(cache_mb) and m.per_run_mb == pytest.approx(PROCESS_MB + cache_mb)


@pytest.mark.parametrize("total_mb, per_tiles, fit", [
    (24_576, 0, int((24_576 - RESERVE_MB) // PROCESS_MB)),
    (RESERVE_MB + PROCESS_MB - 1, 0, 0),  # not one run: said as 0, never rounded up
    (0, 0, 0),                            # memory not read
])
def test_the_runs_that_fit_are_the_machine_less_its_reserve_over_a_run(total_mb, per_tiles, fit):
    assert run_memory(per_tiles, 256, "none", total_mb).fit == fit


def test_the_line_names_the_cache_and_what_to_do():
    ram = run_memory(13_735, 256, "ram", 24_576).line()
    assert 'CACHE = "ram" (13735 tiles decoded in memory; CACHE = "none" reads them from disk' in ram
    assert ram.startswith("memory: about ") and "run(s) at a time fit this machine's 24.0 GB" in ram
    none = run_memory(744, 256, "none", 24_576).line()
    assert 'CACHE = "none": the 744 tiles are read from disk, not held' in none


@pytest.mark.parametrize("runs, fit, warned", [(2, 2, False), (1, 20, False), (2, 1, True), (8, 0, True)])
def test_a_night_with_more_runs_at_a_time_than_fit_is_warned_before_it_trains(runs, fit, warned):
    line = run_memory(14_520, 256, "ram", 24_576).line()
    said = too_many(runs, fit, line)
    assert (said is not None) is warned
    if said:
        assert said.startswith(f"{runs} run(s) at a time ([loop] seed_jobs x workers), but about ")
        assert 'set CACHE = "none" in train.py' in said and "memory: " not in said


@pytest.mark.parametrize("tiles, limit_mb, cache", [
    (400, CACHE_LIMIT_MB, "ram"),        # the demo's 400 tiles: 75 MB decoded, held
    (1_066, CACHE_LIMIT_MB, "ram"),      # 199.9 MB: the last size held at 200 MB
    (1_067, CACHE_LIMIT_MB, "none"),     # 200.06 MB: read from disk
    (14_520, CACHE_LIMIT_MB, "none"),    # a firm's drawings: never held, whatever the page count
    (14_520, 4_096, "ram"),              # a person who raised CACHE_LIMIT_MB gets what they asked
    (0, 0, "ram"),                       # nothing to hold fits any limit
])
def test_auto_holds_the_tiles_only_while_they_fit_the_limit(tiles, limit_mb, cache):
    assert held(tiles, 256, "auto", limit_mb) == cache
    m = run_memory(tiles, 256, "auto", 24_576, limit_mb=limit_mb)
    assert m.cache == cache and m.asked == "auto" and (m.cache_mb > 0) is (cache == "ram" and tiles > 0)


def test_auto_bounds_a_run_whatever_the_data_set():
    small, large = (run_memory(n, 256, "auto", 24_576) for n in (1_066, 1_000_000))
    assert large.per_run_mb == PROCESS_MB and small.per_run_mb < 2048  # issue 47: <= 2 GB a run
    assert 'CACHE = "auto" holds none: the 1000000 tiles are read from disk' in large.line()
    assert 'CACHE = "auto" holds ram (1066 tiles decoded in memory' in small.line()


@pytest.mark.parametrize("cache", ["ram", "none", "disk"])
def test_any_other_cache_is_what_it_says(cache):
    assert held(1_000_000, 256, cache) == cache and held(1, 256, cache) == cache
