"""Runs side by side on one GPU (looper.core.run.slots): sized by free memory over a run's peak and by cores."""

from __future__ import annotations

import pytest

from looper.core.run.slots import (
    ALONE,
    AS_IT_FAILED,
    BOX_BYTES,
    CORES_PER_RUN,
    CUDA_CONTEXT_MB,
    DEFAULT_RUN_PEAK_MB,
    MAX_SLOTS,
    NIGHT_TOO_LARGE,
    after_failure,
    boxes_ahead,
    boxes_ahead_words,
    copy_worker,
    fill_words,
    gpu_slots,
    host_runs,
    night_sizes,
    prestart,
    prestart_unmet,
    renumbered,
    runs_per_gpu,
    unused_words,
    worker_gpu,
    workers_to_fill,
)


@pytest.mark.parametrize("free_mb, peak, cores, slots, limited_by", [
    (140_000, 900, 16, 8, "cores"),        # an H200 and 16 cores: the cores decide
    (140_000, 900, 64, MAX_SLOTS, "cap"),  # memory for 124 and cores for 32: the cap
    (20_000, 3200, 16, 4, "memory"),       # 16,000 MB usable / (3,200 + 800 CUDA context) a run
    (10_000, 3296, 16, 1, "memory"),       # room for 1.95: one
    (1_000, 4096, 16, 1, "memory"),        # not even one fits: still one (a run alone says so when it fails)
    (140_000, None, 16, 8, "cores"),       # not measured: the default peak
    (40_000, 0, 2, 1, "cores"),            # a 2-core host: one run
])
def test_slots_follow_memory_cores_and_the_cap(free_mb, peak, cores, slots, limited_by):
    plan = gpu_slots(free_mb, peak, cores)
    assert plan.slots == slots and plan.limited_by == limited_by
    assert plan.slots == min(plan.by_memory, plan.by_cores, MAX_SLOTS) and plan.slots >= 1
    assert f"{plan.slots} runs at a time (limited by {limited_by}" in plan.line()


def test_an_unmeasured_peak_is_the_stated_default():
    assert gpu_slots(100_000, None, 8).run_peak_mb == DEFAULT_RUN_PEAK_MB
    assert gpu_slots(100_000, -5, 8).run_peak_mb == DEFAULT_RUN_PEAK_MB
    assert gpu_slots(100_000, 0, 2 * CORES_PER_RUN).by_cores == 2
    assert gpu_slots(100_000, 137, 8).run_peak_mb == 137 + CUDA_CONTEXT_MB  # a measured peak: plus the context


@pytest.mark.parametrize("first, count, expected", [
    (0, 1, [0, 0, 0, 0]),   # one GPU: every worker shares it (it asked for GPUs 1, 2, 3 that do not exist)
    (0, 2, [0, 1, 0, 1]),
    (1, 3, [1, 2, 1, 2]),   # from gpu_index 1 on
    (0, 0, [0, 0, 0, 0]),   # no count known: the first
    (2, 2, [2, 2, 2, 2]),   # gpu_index past the count: still the one asked for (preflight names it)
])
def test_workers_take_the_gpus_in_turn(first, count, expected):
    assert [worker_gpu(i, first, count) for i in range(4)] == expected


@pytest.mark.parametrize("kind, device, peers, role, then", [
    ("oom", "0", 2, "main", ALONE),            # out of memory beside another run on GPU 0: it might fit alone
    ("oom", "1", 8, "rerun", ALONE),
    ("oom", "0", 2, "", ALONE),                # an evaluation: the same
    ("oom", "0", 1, "main", AS_IT_FAILED),     # alone already: its own
    ("oom", "cpu", 4, "main", AS_IT_FAILED),   # a CPU run's memory is its own share ([limits])
    ("oom", "", 4, "main", AS_IT_FAILED),      # no device said: the CPU
    ("hung", "0", 4, "main", AS_IT_FAILED),    # another failure: sharing does not explain it
    ("", "0", 4, "main", AS_IT_FAILED),
    ("oom", "0", 2, "warmup", NIGHT_TOO_LARGE),  # the warm-up measures the night's load: it does not fit
    ("oom", "0", 1, "warmup", AS_IT_FAILED),   # a warm-up alone out of memory: its own
    ("hung", "0", 2, "warmup", AS_IT_FAILED),
])
def test_a_run_out_of_memory_beside_others_on_its_gpu_trains_again_alone(kind, device, peers, role, then):
    assert after_failure(kind, device, peers, role) == then


@pytest.mark.parametrize("seed_jobs, workers, copies, expected", [
    (2, 2, 4, [0, 0, 1, 1]),        # two workers' seeds: each GPU the runs its worker will train
    (4, 1, 4, [0, 0, 0, 0]),        # one worker
    (1, 3, 3, [0, 1, 2]),           # a seed at a time, three workers
    (2, 1, 4, [0, 0, 0, 0]),        # more copies than one worker's seeds: none past the last worker
    (0, 2, 2, [0, 1]),              # seed_jobs unset (0) counts as 1
    (2, 0, 2, [0, 0]),              # no workers said: the first
])
def test_the_warm_up_copies_train_on_the_gpus_of_the_workers_they_stand_for(seed_jobs, workers, copies, expected):
    assert [copy_worker(i, seed_jobs, workers) for i in range(copies)] == expected


@pytest.mark.parametrize("seed_jobs, workers, first, count, expected", [
    (4, 1, 0, 1, 4), (4, 2, 0, 1, 8), (4, 3, 0, 2, 8), (2, 4, 0, 4, 2), (1, 0, 0, 1, 0),
])
def test_runs_per_gpu_is_the_busiest_gpu(seed_jobs, workers, first, count, expected):
    assert runs_per_gpu(seed_jobs, workers, first, count) == expected


@pytest.mark.parametrize("seed_jobs, workers, count, expected", [
    (4, 1, 1, 8),   # 4 training, 4 evaluated beside them
    (4, 2, 1, 16),
    (1, 2, 1, 2),   # one seed at a time: nothing overlaps
    (2, 4, 4, 4),
])
def test_with_prestart_a_gpu_holds_the_evaluations_beside_the_trainings(seed_jobs, workers, count, expected):
    assert runs_per_gpu(seed_jobs, workers, 0, count, prestart=True) == expected


@pytest.mark.parametrize("mode, require_gpu, on", [
    ("auto", False, False),  # a CPU: the waiting boxes would take the cores the runs train on
    ("auto", True, True),    # a GPU waits for a box's start-up
    ("on", False, True),
    ("off", True, False),
])
def test_prestart_auto_is_on_where_the_runs_train_on_a_gpu(mode, require_gpu, on):
    assert prestart(mode, require_gpu) is on


@pytest.mark.parametrize("seed_jobs, workers, prestart_on, expected", [
    (1, 1, False, 1),
    (2, 1, False, 2),   # the demo: two seeds side by side
    (4, 1, True, 8),    # 4 training, 4 evaluated beside them
    (4, 2, True, 16),   # every worker on this machine, whatever its GPU
    (1, 3, True, 3),    # one seed at a time: nothing overlaps
    (0, 0, False, 1),   # never fewer than one
])
def test_host_runs_counts_every_run_at_a_time_on_this_machine(seed_jobs, workers, prestart_on, expected):
    assert host_runs(seed_jobs, workers, prestart=prestart_on) == expected


GIB = 1 << 30


@pytest.mark.parametrize("runs, memory, expected", [
    (8, 128 * GIB, 8),     # a GPU host: every run's next box waits
    (64, 128 * GIB, 41),   # (32 - 1) GiB / 768 MiB
    (32, 24 * GIB, 6),     # this 2-core machine: (6 - 1) GiB / 768 MiB
    (4, 24 * GIB, 4),
    (0, 24 * GIB, 1),      # one run at a time at least
    (16, 4 * GIB, 0),      # a quarter of 4 GiB is the daemon's: every box starts cold
    (4, 2 * GIB, 0),       # nothing left at all
    (4, 6 * GIB, 0),       # 1.5 - 1 GiB: less than one box
    (4, 7 * GIB, 1),       # 1.75 - 1 GiB: one box
])
def test_boxes_wait_ahead_one_a_run_as_far_as_a_quarter_of_the_memory_holds_them(runs, memory, expected):
    assert boxes_ahead(runs, memory) == expected
    assert boxes_ahead(runs, memory) * BOX_BYTES <= max(0, memory // 4 - GIB)
    words = boxes_ahead_words(runs, memory)  # said where, and only where, fewer boxes wait than runs
    assert words == ("" if expected >= runs else
                     f"{expected} of the {runs} runs' boxes may wait ahead (a quarter of this machine's "
                     f"{memory // GIB} GiB, about 768 MiB a box, beside the daemon); the others start when their "
                     "runs come")


@pytest.mark.parametrize("free_mb, peak, cores, seed_jobs, workers, count, overlap, expected", [
    (140_000, 137, 16, 4, 1, 1, False, 2),    # 8 slots by the cores, 4 a worker: two workers fill them
    (140_000, 137, 16, 4, 1, 1, True, 2),     # with prestart: 16 processes, memory for 119
    (140_000, 137, 16, 4, 2, 1, True, 2),     # full already: the workers asked
    (140_000, 137, 16, 8, 1, 1, False, 1),    # one worker of 8 seeds fills 8 slots
    (140_000, 137, 16, 4, 3, 1, False, 3),    # more than fill them (the preflight judges it): never fewer
    (140_000, 137, 16, 4, 1, 2, False, 2),    # two GPUs, 8 slots each, but 16 cores feed both: 8 runs in all
    (140_000, 137, 32, 4, 1, 2, False, 4),    # two GPUs and 32 cores: 2 workers a GPU
    (140_000, 137, 16, 1, 1, 1, False, 8),    # one seed at a time: 8 workers
    (140_000, 137, 64, 1, 1, 1, False, MAX_SLOTS),  # the cap
    (20_000, 3200, 16, 2, 1, 1, True, 1),     # memory for 4 processes: 2 training + 2 evaluated beside them
    (20_000, 3200, 16, 2, 1, 1, False, 2),    # the same without prestart: 4 trainings
])
def test_workers_to_fill_the_slots(free_mb, peak, cores, seed_jobs, workers, count, overlap, expected):
    plan = gpu_slots(free_mb, peak, cores)
    assert workers_to_fill(plan, seed_jobs, workers, 0, count, prestart=overlap) == expected


@pytest.mark.parametrize("free_mb, peak, cores, cap, count, expected", [
    (79_000, None, 16, 4, 1, (4, 1)),    # an H100 before any run measured: 8 slots; 2 x 4 processes fit 15
    (140_000, 137, 16, 4, 1, (4, 2)),    # measured: two workers of 4 seeds fill 8 slots
    (140_000, 137, 16, 8, 1, (8, 1)),    # a cap of 8 (noise_reruns 7): one look of 8 seeds fills them
    (79_000, None, 16, 8, 1, (4, 1)),    # 8 and their evaluations would need 16 processes' memory, 15 fit
    (140_000, 137, 16, 3, 1, (2, 4)),    # a cap of 3: a power of two, 2 (looks of 2, then 3 seeds)
    (140_000, 137, 12, 8, 1, (4, 1)),    # 6 slots: 4 side by side, a second worker would need 8
    (140_000, 137, 16, 2, 1, (2, 4)),    # a cap of 2: four workers
    (20_000, 3200, 16, 4, 1, (2, 1)),    # memory for 4 processes: 2 training + 2 evaluated beside them
    (10_000, 4096, 16, 4, 1, (1, 1)),    # memory for one: one run at a time
    (140_000, 137, 2, 4, 1, (1, 1)),     # 2 cores: one run
    (140_000, 137, 16, 4, 2, (4, 2)),    # two GPUs fed by 16 cores: 8 runs in all, one worker a GPU
    (140_000, 137, 64, 4, 2, (4, 8)),    # two GPUs, 64 cores: 16 slots each
])
def test_init_sizes_a_gpu_night_the_preflight_allows_and_fills(free_mb, peak, cores, cap, count, expected):
    plan = gpu_slots(free_mb, peak, cores)
    seed_jobs, workers = night_sizes(plan, cap, 0, count)
    assert (seed_jobs, workers) == expected
    assert runs_per_gpu(seed_jobs, workers, 0, count) <= plan.slots  # the trainings fit the slots
    assert runs_per_gpu(seed_jobs, workers, 0, count, prestart=True) <= plan.by_memory  # and with evaluations
    assert seed_jobs * workers <= max(1, cores // CORES_PER_RUN)  # and the machine's cores
    assert fill_words(plan, seed_jobs, workers, 0, count, prestart=True) == ""  # the night asks for no more


def test_the_words_name_the_workers_that_fill_a_gpu_and_say_nothing_where_it_is_full():
    plan = gpu_slots(140_000, 137, 16)
    words = fill_words(plan, 4, 1, 0, 1)
    assert words.startswith(f"the GPU takes {plan.line()}; this night trains 4 at a time on it "
                            "(loop.seed_jobs 4 x loop.workers 1): loop.workers = 2 would fill it"), words
    many = fill_words(plan, 4, 1, 0, 2)
    assert many.startswith("each of the 2 GPUs from 0 on takes 8 runs at a time") and "loop.workers = 2 would fill them" in many
    assert fill_words(plan, 4, 2, 0, 1) == "" and fill_words(plan, 8, 1, 0, 1) == ""


@pytest.mark.parametrize("visible, count", [("GPU-8d5c9b7e-aaaa", 1), ("1", 1), ("", 1), ("2", 0)])
def test_one_gpu_nvml_sees_is_the_only_one_a_run_can_train_on(visible, count):
    """A container given one GPU (often by UUID): no other GPU to train on; the GPU check says whether cuda:0 works.
    An unknown count (0) is not one GPU."""
    assert (renumbered(visible, [0], count) == "") is (count == 1)


@pytest.mark.parametrize("visible, gpus, seen, fix", [
    (None, [0], None, None),           # unset: the runs number the GPUs as NVML does
    ("0", [0], None, None),
    ("0,1,2", [0, 2], None, None),     # every GPU the workers use keeps its number
    ("0,3", [0], None, None),          # cuda:0 is NVML's 0; cuda:1 (NVML's 3) is not used
    ("2", [0], "their cuda:0 is NVML's GPU 2", "set [executor] gpu_index = 2"),
    ("1,0", [0], "their cuda:0 is NVML's GPU 1", "set [executor] gpu_index = 1"),
    ("0,3", [0, 1], "their cuda:1 is NVML's GPU 3", "name the GPU by [executor] gpu_index alone"),
    ("0", [1], "their cuda:1 is no GPU", "name the GPU by [executor] gpu_index alone"),
    ("", [0], "their cuda:0 is no GPU", "name the GPU by [executor] gpu_index alone"),  # every GPU hidden
    ("GPU-8d5c9b7e-aaaa", [0], "their cuda:0 is 'GPU-8d5c9b7e-aaaa'", "name the GPU by [executor] gpu_index alone"),
    ("MIG-1234,0", [0], "their cuda:0 is 'MIG-1234'", "name the GPU by [executor] gpu_index alone"),
])
def test_a_cuda_visible_devices_that_renumbers_the_runs_gpus_is_named_with_the_key_to_set(visible, gpus, seen, fix):
    words = renumbered(visible, gpus, count=4, where="the environment of gpu-box")
    if seen is None:
        assert words == ""
        return
    assert words.startswith(f"CUDA_VISIBLE_DEVICES={visible} in the environment of gpu-box renumbers the GPUs for "
                            f"the runs ({seen}) but not for NVML"), words
    assert words.endswith(f"unset CUDA_VISIBLE_DEVICES there and {fix} (nvidia-smi's index)"), words


@pytest.mark.parametrize(("count", "where", "words"), [
    (None, "this machine", ""),  # NVML not read (no driver, no library): nothing said
    (0, "this machine", ""),
    (1, "this machine", "this machine has 1 GPU and [executor] require_gpu = false: the runs train on the CPU. Set "
                        "[executor] require_gpu = true to train on the GPU (docs/GPU.md), or leave it false to keep "
                        "the GPU for other work"),
    (2, "the ssh host gpu1", "the ssh host gpu1 has 2 GPUs and [executor] require_gpu = false: the runs train on the "
                             "CPU. Set [executor] require_gpu = true to train on them (docs/GPU.md), or leave it false "
                             "to keep them for other work"),
])
def test_a_gpu_the_runs_leave_idle_is_named_with_the_key_that_uses_it(count: int | None, where: str,
                                                                       words: str) -> None:
    assert unused_words(count, where) == words



@pytest.mark.parametrize("mode, gpu, executor, prestarts, said", [
    ("auto", True, "ssh", False, True),     # "auto" is on with a GPU: an ssh host cannot start boxes ahead
    ("on", False, "slurm", False, True),    # asked for outright
    ("auto", False, "ssh", False, False),   # "auto" on a CPU: off, nothing to say
    ("off", True, "ssh", False, False),
    ("on", True, "local", True, False),     # the local executor does it
])
def test_prestart_asked_of_an_executor_that_cannot_is_said(mode, gpu, executor, prestarts, said):
    words = prestart_unmet(mode, gpu, executor, prestarts)
    assert bool(words) is said
    assert not said or words.startswith(f"prestart: off on the {executor} executor: each run's box starts when")
