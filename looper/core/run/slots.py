"""Runs side by side on one GPU, and which GPU a worker's runs go to (pure: the readings come in).

A small detector does not fill a GPU: on one H200, one train.py alone used 5 % of it and 4 copies at once
trained 3.7 times the steps a second (issue 46). So the runs of a night share their GPU: the seeds of one look
side by side (``[loop] seed_jobs``), and the experiments of several workers (``[loop] workers``) on the same
GPU where the machine has one. How many fit is a question of the GPU's free memory over one run's peak, and of
the CPU cores that feed them (each run's process and its data loader): :func:`gpu_slots`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_RUN_PEAK_MB = 4096.0  # a run's GPU memory before any run of the tag measured it (a demo run: < 1 GB)
# What a run's process holds on the GPU beyond train.py's own peak (torch's allocator): the CUDA context and the
# allocator's cache. Measured on an H200 (bench/RESULTS.md, "A GPU night"): 8 demo runs side by side held 7,161 MB
# of the device while each allocated 137 MB at its peak, 758 MB a process beyond it.
CUDA_CONTEXT_MB = 800.0
HEADROOM = 0.8  # the share of the GPU's free memory runs may plan on (the CUDA context and fragmentation)
CORES_PER_RUN = 2  # a run's main process and its data loader worker (train.py's WORKERS = 1)
MAX_SLOTS = 16  # more runs on one GPU than this: contention, not throughput (8 copies: 5.2x of 1, 4: 3.7x)
FILL_NOTE = "GPU slots: "  # the night's note of the slots its workers leave empty (fill_words), once a night
UNUSED_NOTE = "GPU unused: "  # the night's note of a GPU its runs leave idle, training on the CPU (unused_words)
SHARED_OOM_NOTE = "GPU memory: "  # the night's note of a run out of memory beside others, trained again alone (after_failure)


@dataclass(frozen=True)
class SlotPlan:
    """How many runs one GPU takes at a time, and what limits it."""

    slots: int
    by_memory: int
    by_cores: int
    run_peak_mb: float
    free_mb: float
    cores: int

    @property
    def limited_by(self) -> str:
        if self.slots == self.by_memory and self.by_memory <= self.by_cores:
            return "memory"
        return "cores" if self.slots == self.by_cores else "cap"

    def line(self) -> str:
        return (f"{self.slots} runs at a time (limited by {self.limited_by}: {self.free_mb:.0f} MB free / "
                f"{self.run_peak_mb:.0f} MB a run -> {self.by_memory}; {self.cores} cores / {CORES_PER_RUN} a run "
                f"-> {self.by_cores}; at most {MAX_SLOTS})")


def gpu_slots(free_mb: float, run_peak_mb: float | None, cores: int) -> SlotPlan:
    """The runs one GPU with ``free_mb`` of free memory takes side by side, each using train.py's measured peak
    ``run_peak_mb`` plus :data:`CUDA_CONTEXT_MB` (None: not measured yet, :data:`DEFAULT_RUN_PEAK_MB`), fed by
    ``cores`` CPU cores; at least 1.

    >>> gpu_slots(140_000, 137, 16).slots
    8
    >>> gpu_slots(10_000, 4096, 16).slots
    1
    """
    peak = float(run_peak_mb) + CUDA_CONTEXT_MB if run_peak_mb and run_peak_mb > 0 else DEFAULT_RUN_PEAK_MB
    by_memory = max(1, int(max(0.0, free_mb) * HEADROOM // peak))
    by_cores = max(1, cores // CORES_PER_RUN)
    return SlotPlan(slots=min(by_memory, by_cores, MAX_SLOTS), by_memory=by_memory, by_cores=by_cores,
                    run_peak_mb=peak, free_mb=float(free_mb), cores=cores)


def worker_gpu(worker: int, first: int, count: int) -> int:
    """The GPU index worker ``worker`` (0-based) trains on: the GPUs from ``first`` on, taken in turn, so
    workers share a GPU where there are fewer GPUs than workers (one GPU: every worker on ``first``).

    >>> [worker_gpu(i, 0, 1) for i in range(3)]
    [0, 0, 0]
    >>> [worker_gpu(i, 1, 3) for i in range(3)]
    [1, 2, 1]
    """
    return first + worker % max(1, count - first)


def copy_worker(copy: int, seed_jobs: int, workers: int) -> int:
    """The worker whose GPU copy ``copy`` (0-based) of a tag's warm-up or fit run trains on, the copies standing for
    the runs the night trains at once (looper.core.run.cores.side_by_side): each worker's ``seed_jobs`` seeds,
    worker by worker, so that every GPU carries the load its runs will; a copy past the workers is the last one's.

    >>> [copy_worker(i, 2, 2) for i in range(4)], [copy_worker(i, 4, 1) for i in range(4)]
    ([0, 0, 1, 1], [0, 0, 0, 0])
    """
    return min(copy // max(1, seed_jobs), max(1, workers) - 1)


#: What a failed run on a GPU becomes (:func:`after_failure`): judged as it failed, trained or evaluated again with
#: the GPU to itself, or (a warm-up's copy) the night's proof that the runs it trains at once do not fit the GPU.
AS_IT_FAILED, ALONE, NIGHT_TOO_LARGE = "as it failed", "alone", "night too large"
WARMUP_ROLE = "warmup"  # the warm-up's and the fit run's copies (looper.night.baseline)


def after_failure(kind: str, device: str, peers: int, role: str = "") -> str:
    """What a run (a training or an evaluation) that failed with ``kind`` (looper.core.fault.failure's
    classification) becomes: :data:`ALONE` when it ran out of memory (``"oom"``) on a GPU (``device`` not ``"cpu"``)
    that ``peers`` runs used at once, itself included: runs share a GPU's memory with no limit of their own, so it
    might fit alone, and sharing may change its time, never its result (looper.night.gpushare). On the CPU each
    run's memory is its own share (``[limits]``): :data:`AS_IT_FAILED`. A warm-up's copy (``role`` ``"warmup"``)
    is never rerun alone: it measures the step budget under the runs the night trains at once, so out of memory
    beside them it is :data:`NIGHT_TOO_LARGE` (the baseline halts, naming the runs at once).

    >>> after_failure("oom", "0", 2), after_failure("oom", "0", 1), after_failure("oom", "0", 2, "warmup")
    ('alone', 'as it failed', 'night too large')
    """
    if kind != "oom" or device in ("", "cpu") or peers <= 1:
        return AS_IT_FAILED
    return NIGHT_TOO_LARGE if role == WARMUP_ROLE else ALONE


def _per_worker(seed_jobs: int, prestart: bool) -> int:
    """One worker's processes at a time: its ``seed_jobs`` seeds; with ``prestart`` (``[loop] prestart``,
    looper.night.slots) twice that: a run is evaluated while the next run trains in the slot it gave back."""
    return seed_jobs * (2 if prestart and seed_jobs > 1 else 1)


def runs_per_gpu(seed_jobs: int, workers: int, first: int, count: int, prestart: bool = False) -> int:
    """The most processes at a time on any one GPU: each worker's :func:`_per_worker`, on its :func:`worker_gpu`
    (an evaluated run holds its own CUDA context on the GPU; a waiting box holds none)."""
    per_gpu: dict[int, int] = {}
    for w in range(workers):
        g = worker_gpu(w, first, count)
        per_gpu[g] = per_gpu.get(g, 0) + _per_worker(seed_jobs, prestart)
    return max(per_gpu.values(), default=0)


def host_runs(seed_jobs: int, workers: int, prestart: bool = False) -> int:
    """The most runs (trainings and evaluations) at a time on this machine, whatever their GPUs: the share
    of its memory each run gets (looper.core.run.limits.derived).

    >>> host_runs(1, 1), host_runs(2, 1), host_runs(4, 2, prestart=True)
    (1, 2, 16)
    """
    return max(1, workers) * _per_worker(max(1, seed_jobs), prestart)


BOX_BYTES = 768 << 20  # a waiting box's resident memory: torch and Ultralytics imported (about 740 MB, docs/GPU.md)
DAEMON_BYTES = 1 << 30  # the daemon's own, kept out of what the waiting boxes may take


def boxes_ahead(runs: int, memory_bytes: int, box_bytes: int = BOX_BYTES) -> int:
    """How many boxes may wait ahead of their runs ([loop] prestart) on a machine of ``memory_bytes``: one a run at
    a time, at most what a quarter of its memory holds beside the daemon. The runs' own shares take the other 75 %
    (looper.core.run.limits.derived), so boxes past that would push the machine into its OOM killer, which takes
    whichever process it finds; a run with no box waiting starts cold (slower, never wrong).

    >>> boxes_ahead(8, 128 << 30), boxes_ahead(32, 24 << 30), boxes_ahead(16, 4 << 30), boxes_ahead(4, 2 << 30)
    (8, 6, 0, 0)
    """
    room = memory_bytes // 4 - DAEMON_BYTES
    return max(0, min(max(1, runs), room // box_bytes if room > 0 else 0))


def boxes_ahead_words(runs: int, memory_bytes: int) -> str:
    """The words, where fewer boxes may wait ahead than ``runs`` at a time (:func:`boxes_ahead`), for the night's
    start (looper.executors.local) and ``looper status`` alike; "" where every run's box may wait.

    >>> boxes_ahead_words(16, 24 << 30)
    "6 of the 16 runs' boxes may wait ahead (a quarter of this machine's 24 GiB, about 768 MiB a box, beside the daemon); the others start when their runs come"
    >>> boxes_ahead_words(8, 128 << 30)
    ''
    """
    most = boxes_ahead(runs, memory_bytes)
    if most >= runs:
        return ""
    return (f"{most} of the {runs} runs' boxes may wait ahead (a quarter of this machine's "
            f"{memory_bytes / (1 << 30):.0f} GiB, about {BOX_BYTES >> 20} MiB a box, beside the daemon); the others "
            "start when their runs come")


def prestart(mode: str, require_gpu: bool) -> bool:
    """``[loop] prestart``: each run's box started while the run before it trains, and a run evaluated while the
    next trains (looper.night.slots). "on", "off", or "auto": on where the runs train on a GPU (``require_gpu``),
    which waits for a box's start-up; on a CPU the waiting boxes and the evaluations would take the cores the
    runs train on.

    >>> prestart("auto", True), prestart("auto", False), prestart("on", False), prestart("off", True)
    (True, False, True, False)
    """
    return mode == "on" or (mode == "auto" and require_gpu)


def prestart_unmet(mode: str, require_gpu: bool, executor: str, prestarts: bool) -> str:
    """What the night says once where ``[loop] prestart`` would be on (:func:`prestart`) but its executor (kind
    ``executor``) starts each run's box when the run comes (``prestarts`` False: an ssh host, SLURM); "" otherwise.

    >>> prestart_unmet("auto", True, "local", True), prestart_unmet("off", True, "ssh", False)
    ('', '')
    """
    if not prestart(mode, require_gpu) or prestarts:
        return ""
    return (f"prestart: off on the {executor} executor: each run's box starts when its run comes, its start-up "
            f"in the GPU's wait ([loop] prestart = \"{mode}\" starts boxes ahead on the local executor only; "
            "docs/GPU.md)")


def workers_to_fill(plan: SlotPlan, seed_jobs: int, workers: int, first: int, count: int,
                    prestart: bool = False) -> int:
    """The most workers (at least ``workers``) whose runs the GPUs still take at a time: on the busiest GPU its
    trainings within ``plan.slots``, and with ``prestart`` the evaluations beside them within its memory
    (``plan.by_memory``), as :func:`runs_per_gpu` counts them; and every GPU's trainings within the machine's
    cores (``plan.by_cores``: the cores feed every GPU, not each).

    >>> plan = gpu_slots(140_000, 137, 16)  # 8 slots, limited by the cores
    >>> workers_to_fill(plan, 4, 1, 0, 1), workers_to_fill(plan, 4, 1, 0, 1, prestart=True), workers_to_fill(plan, 8, 1, 0, 1)
    (2, 2, 1)
    """
    def fits(w: int) -> bool:
        return (runs_per_gpu(seed_jobs, w, first, count) <= plan.slots
                and runs_per_gpu(seed_jobs, w, first, count, prestart) <= plan.by_memory
                and seed_jobs * w <= plan.by_cores)

    most = max(1, workers)
    while most < MAX_SLOTS * max(1, count - first) and fits(most + 1):
        most += 1
    return most


def night_sizes(plan: SlotPlan, cap: int, first: int = 0, count: int = 1) -> tuple[int, int]:
    """``[loop] seed_jobs`` and ``[loop] workers`` for a night on the GPUs from ``first`` of ``count`` (``looper init
    --gpu``), which the night's own preflight allows for the same reading: a challenger's seeds side by side up
    to its ``cap`` (1 + ``noise_reruns``: one look takes them all), as many as ``plan.slots`` take and, with
    prestart (on in a GPU night), each evaluated beside the next training within the GPU's memory, a power of two
    (a challenger's looks double its seeds: each fills whole rounds); then the workers that fill the slots left
    (:func:`workers_to_fill`).

    >>> night_sizes(gpu_slots(79_000, None, 16), 4)  # an H100 before a run of the tag measured its peak
    (4, 1)
    >>> night_sizes(gpu_slots(140_000, 137, 16), 4), night_sizes(gpu_slots(140_000, 137, 16), 8)
    ((4, 2), (8, 1))
    """
    seed_jobs = 1
    while 2 * seed_jobs <= min(cap, plan.slots) and _per_worker(2 * seed_jobs, True) <= plan.by_memory:
        seed_jobs *= 2
    return seed_jobs, workers_to_fill(plan, seed_jobs, 1, first, count, prestart=True)


def fill_words(plan: SlotPlan, seed_jobs: int, workers: int, first: int, count: int, prestart: bool = False) -> str:
    """The words, where the night's runs leave a GPU's slots empty (:func:`workers_to_fill` more than
    ``workers``), naming the key that fills them; "" where they are full. One worker leaves its GPU idle while its
    agent proposes and while the last runs of each look are evaluated and judged; another worker's runs fill it.

    >>> print(fill_words(gpu_slots(140_000, 137, 16), 4, 1, 0, 1))
    the GPU takes 8 runs at a time (limited by cores: 140000 MB free / 937 MB a run -> 119; 16 cores / 2 a run -> 8; at most 16); this night trains 4 at a time on it (loop.seed_jobs 4 x loop.workers 1): loop.workers = 2 would fill it (one worker's runs train while another's agent proposes and its looks are judged)
    >>> fill_words(gpu_slots(140_000, 137, 16), 4, 2, 0, 1)
    ''
    """
    most = workers_to_fill(plan, seed_jobs, workers, first, count, prestart)
    if most <= workers:
        return ""
    gpus = max(1, count - first)
    where, on = ("the GPU", "it") if gpus == 1 else (f"each of the {gpus} GPUs from {first} on", "the busiest")
    return (f"{where} takes {plan.line()}; this night trains {runs_per_gpu(seed_jobs, workers, first, count)} at a "
            f"time on {on} (loop.seed_jobs {seed_jobs} x loop.workers {workers}): loop.workers = {most} would fill "
            f"{'it' if gpus == 1 else 'them'} (one worker's runs train while another's agent proposes and its looks "
            "are judged)")


def unused_words(count: int | None, where: str) -> str:
    """The words, where a night trains on the CPU (``[executor] require_gpu = false``) of a machine whose NVML sees
    ``count`` GPUs (``where``: this machine, or an ssh host); "" where it sees none or could not be read. A person
    who rents a GPU for a night and forgets the key would otherwise find in the morning a CPU's night: a fraction
    of the decisions, and nothing said.

    >>> unused_words(None, "this machine"), unused_words(0, "this machine")
    ('', '')
    >>> print(unused_words(1, "this machine"))
    this machine has 1 GPU and [executor] require_gpu = false: the runs train on the CPU. Set [executor] require_gpu = true to train on the GPU (docs/GPU.md), or leave it false to keep the GPU for other work
    """
    if not count:
        return ""
    gpus = "1 GPU" if count == 1 else f"{count} GPUs"
    return (f"{where} has {gpus} and [executor] require_gpu = false: the runs train on the CPU. Set [executor] "
            f"require_gpu = true to train on {'the GPU' if count == 1 else 'them'} (docs/GPU.md), or leave it false "
            f"to keep {'the GPU' if count == 1 else 'them'} for other work")


def renumbered(visible: str | None, gpus: Iterable[int], count: int = 0, where: str = "looper's environment") -> str:
    """Why the runs would train on another GPU than the one NVML's ``gpus`` name, where ``CUDA_VISIBLE_DEVICES``
    (``visible``, as the runs get it from ``where``) renumbers theirs; "" where it is unset or keeps each of
    ``gpus`` its own number. The runs number the GPUs by PCI bus (``CUDA_DEVICE_ORDER``, set for them), so an
    entry N is NVML's GPU N, and a run told ``cuda:i`` trains on the i-th entry; the preflight, the sampler and
    the slots read NVML's GPU i: the GPU checked, sampled and sized would not be the one trained on. Where NVML
    sees one GPU (``count`` 1: a container given one, whose variable often names it by UUID) there is no other to
    train on: whether a run can use ``cuda:0`` is the GPU check's to say.

    >>> renumbered(None, [0]), renumbered("0,1", [0, 1]), renumbered("0,3", [0]), renumbered("GPU-8d5c", [0], 1)
    ('', '', '', '')
    >>> print(renumbered("2", [0]))
    CUDA_VISIBLE_DEVICES=2 in looper's environment renumbers the GPUs for the runs (their cuda:0 is NVML's GPU 2) but not for NVML, by which [executor] gpu_index names the GPU the night checks, samples and sizes: unset CUDA_VISIBLE_DEVICES there and set [executor] gpu_index = 2 (nvidia-smi's index)
    """
    if visible is None:
        return ""
    entries = [e.strip() for e in visible.split(",")]

    def own(i: int) -> bool:  # the runs' cuda:i is NVML's GPU i
        return i < len(entries) and entries[i].isdigit() and int(entries[i]) == i

    moved = [i for i in sorted(set(gpus)) if not own(i)]
    if not moved or (count == 1 and moved == [0]):
        return ""
    first = moved[0]
    target = entries[first] if first < len(entries) and entries[first].isdigit() else None
    seen = f"their cuda:{first} is NVML's GPU {target}" if target is not None else \
        f"their cuda:{first} is {'no GPU' if first >= len(entries) or not entries[first] else repr(entries[first])}"
    fix = f"set [executor] gpu_index = {target} (nvidia-smi's index)" if target is not None and first == 0 else \
        "name the GPU by [executor] gpu_index alone (nvidia-smi's index)"
    return (f"CUDA_VISIBLE_DEVICES={visible} in {where} renumbers the GPUs for the runs ({seen}) but not for NVML, "
            f"by which [executor] gpu_index names the GPU the night checks, samples and sizes: unset "
            f"CUDA_VISIBLE_DEVICES there and {fix}")
