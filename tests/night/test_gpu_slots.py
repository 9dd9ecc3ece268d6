"""Runs sharing one GPU, through the real Loop on the fake executor: the preflight sizes the runs at a time
against the GPU's free memory (looper.core.run.slots), and workers on a one-GPU machine all train on it."""

from __future__ import annotations

import io

import pytest
from fakes.agent import ScriptedAgent
from fakes.executor import FakeExecutor
from harness import build_ws

from looper.config import load_config
from looper.core.verdicts.verdict import Verdict
from looper.errors import HarnessError
from looper.executors.gpu import GpuReading
from looper.night.display import Display
from looper.night.integrity import preflight
from looper.night.loop import Loop
from looper.night.notify import AppriseNotifier
from looper.store import Store

pytestmark = pytest.mark.e2e  # the real Loop's setup with real git (about 1 s each)


class OneGpu:
    def __init__(self, free_mb: float) -> None:
        self.reading = GpuReading(ok=True, count=1, name="Fake GPU", memory_total_mb=143_000.0,
                                  memory_free_mb=free_mb)

    def read(self) -> GpuReading:
        return self.reading


class OneGpuExecutor(FakeExecutor):
    """The fake executor on a machine with one GPU of ``free_mb`` free memory."""

    def __init__(self, free_mb: float) -> None:
        super().__init__()
        self.probe = OneGpu(free_mb)

    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:
        super().preflight(require_gpu, gpu)
        return Verdict.passed({"executor": self.name, "gpu": self.probe.read().as_dict()})


def _loop(tmp_path, executor: FakeExecutor, stream: io.StringIO | None = None, **over: object) -> Loop:
    ws = build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none", exec_require_gpu=True, **over)
    return Loop(ws.root, load_config(ws.root / "looper.toml"), Store(ws.root / "experiments.db"), executor,
                ScriptedAgent({}), AppriseNotifier([]), display=Display(stream), program_md="")


@pytest.mark.parametrize("prestart, words", [
    ("off", "put 2 runs at a time on one GPU, which has memory for 1"),
    ("auto", "put 4 runs at a time on one GPU (training and, with loop.prestart, as many evaluated beside them), "
             "which has memory for 1"),  # require_gpu: prestart is on, each run evaluated beside the next training
])
def test_more_runs_at_a_time_than_the_gpu_has_memory_for_stops_the_preflight_naming_the_keys(tmp_path, prestart, words):
    loop = _loop(tmp_path, OneGpuExecutor(free_mb=10_000), loop_seed_jobs=2,  # 8,000 MB usable / 4,096 a run
                 loop_prestart=prestart)
    with pytest.raises(HarnessError) as caught:
        loop.setup()
    assert f"gpu_slots: loop.seed_jobs 2 x loop.workers 1 {words}" in str(caught.value)
    assert ('or set loop.prestart = "off"' in str(caught.value)) is (prestart == "auto")
    assert "limited by memory" in str(caught.value)
    assert [c for c in loop.ctx.executor.calls if c[0] == "train"] == []  # nothing trained


def test_runs_that_fit_pass_and_the_plan_is_in_the_preflight(tmp_path):
    loop = _loop(tmp_path, OneGpuExecutor(free_mb=140_000), loop_seed_jobs=2)  # 2 runs: this 2-core machine's most
    assert loop.setup() is None
    v = preflight(loop.ctx, loop.ctx.main_worker())
    assert not [b for b in v.blocking if b.startswith("gpu_slots:")], v.blocking
    assert v.metrics["gpu_slots"]["runs_per_gpu"] == 4 and v.metrics["gpu_slots"]["slots"] >= 1  # 2 + 2 evaluated
    assert v.metrics["gpu_slots"]["prestart"] is True


def test_workers_on_a_one_gpu_machine_all_train_on_that_gpu(tmp_path):
    loop = _loop(tmp_path, OneGpuExecutor(free_mb=140_000), loop_workers=2)  # a core a run: 2 on this machine
    assert loop.setup() is None
    assert [w.device for w in loop.ctx.night.workers] == ["0", "0"]  # it once asked for GPU 1


class TwoGpuExecutor(OneGpuExecutor):
    """Two GPUs; the device each training and evaluation was given."""

    def __init__(self) -> None:
        super().__init__(140_000)
        self.probe.reading = GpuReading(ok=True, count=2, name="Fake GPU", memory_total_mb=143_000.0,
                                        memory_free_mb=140_000)
        self.devices: list[tuple[str, str]] = []

    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:
        v = super().preflight(require_gpu, gpu)  # as the local executor's says of its check in a run's box
        return Verdict.passed({**v.metrics, "device_check": "torch on cuda:1 in a run's box: ok (box)"})

    def train(self, job, on_line, cancel):  # type: ignore[no-untyped-def]
        self.devices.append(("train", job.device))
        return super().train(job, on_line, cancel)

    def evaluate(self, job, on_line, cancel):  # type: ignore[no-untyped-def]
        self.devices.append(("evaluate", job.device))
        return super().evaluate(job, on_line, cancel)


def test_one_worker_trains_and_evaluates_on_the_gpu_that_gpu_index_names(tmp_path):
    """[executor] gpu_index = 1 with one worker: the baseline's runs went to device "cuda" (GPU 0: a colleague's,
    on a shared machine) while the preflight read GPU 1's free memory and the sampler watched GPU 1."""
    executor, said = TwoGpuExecutor(), io.StringIO()
    loop = _loop(tmp_path, executor, said, exec_gpu_index=1)
    assert loop.setup() is None
    assert "torch on cuda:1 in a run's box: ok (box)" in said.getvalue()  # the GPU check, said before the baseline
    assert loop.ctx.main_worker().device == "1"
    trained = [d for what, d in executor.devices if what == "train"]
    assert trained and {d for _, d in executor.devices} == {"1"}, executor.devices
    assert any(what == "evaluate" for what, _ in executor.devices)


@pytest.mark.parametrize("jobs, workers", [(2, 1), (8, 1), (12, 1), (8, 2)])
def test_as_many_boxes_may_wait_ahead_as_runs_may_be_at_a_time_as_far_as_memory_holds(tmp_path, jobs, workers):
    """The local executor's spare boxes (looper.executors.prestart.Spares): each run asks for the next run's box, so
    up to the night's runs at a time wait (seed_jobs x workers, x 2 evaluations beside them), as far as a quarter of
    this machine's memory holds them beside the daemon (the runs' shares take the rest)."""
    from looper.core.run.slots import BOX_BYTES, DAEMON_BYTES
    from looper.executors.limits import machine
    from looper.executors.local import LocalExecutor

    executor = LocalExecutor(tmp_path / "ws")
    said = io.StringIO()
    loop = _loop(tmp_path, executor, said, loop_seed_jobs=jobs, loop_workers=workers, loop_prestart="on",
                 exec_kind="local")
    runs = jobs * workers * 2
    fit = (machine()["memory"] // 4 - DAEMON_BYTES) // BOX_BYTES
    assert loop.ctx.executor.spares.most == min(runs, fit)
    words = f"prestart: {fit} of the {runs} runs' boxes may wait ahead (a quarter of this machine's"
    assert (words in said.getvalue()) == (fit < runs), said.getvalue()  # fewer boxes than runs: the night says so


class CheckedGpus(TwoGpuExecutor):
    """Two GPUs; the GPU each preflight was asked to check (a run's box check as the local executor's says it);
    ``broken``: the GPU whose runs cannot use it."""

    def __init__(self, broken: int | None = None) -> None:
        super().__init__()
        self.broken, self.asked = broken, []

    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:
        self.asked.append(gpu)
        v = super().preflight(require_gpu, gpu)
        if gpu == self.broken:
            return Verdict.errored(f"torch cannot use cuda:{gpu} in a run's box (exit 1: no CUDA here)",
                                   metrics={**v.metrics, "device_check": f"torch on cuda:{gpu} in a run's box: failed (box)"})
        return Verdict.passed({**v.metrics, "device_check": f"torch on cuda:{gpu} in a run's box: ok (box)"})


def test_every_worker_s_gpu_is_checked_before_the_baseline_and_each_experiment_checks_its_own(tmp_path):
    """Two workers on a two-GPU machine: the preflight used to check gpu_index's GPU alone (before the baseline and
    before every experiment, whichever worker's), so a second GPU the runs cannot use was found by its runs."""
    executor, said = CheckedGpus(), io.StringIO()
    loop = _loop(tmp_path, executor, said, loop_workers=2)
    assert loop.setup() is None
    assert executor.asked[:2] == [0, 1]  # both GPUs, before the baseline's first run
    first_train = next(i for i, c in enumerate(executor.calls) if c[0] == "train")
    assert [c[0] for c in executor.calls[:first_train]].count("preflight") == 2
    assert "torch on cuda:0 in a run's box: ok (box)" in said.getvalue()
    assert "torch on cuda:1 in a run's box: ok (box)" in said.getvalue()
    assert [w.device for w in loop.ctx.night.workers] == ["0", "1"]
    for w in loop.ctx.night.workers:  # the preflight before an experiment: the worker's own GPU
        assert preflight(loop.ctx, w).ok
        assert executor.asked[-1] == int(w.device)


@pytest.mark.parametrize("seed_jobs, expected", [(1, ["0", "1"]), (2, ["0", "0", "1", "1"])])
def test_the_warm_up_trains_each_worker_s_runs_on_that_worker_s_gpu(tmp_path, monkeypatch, seed_jobs, expected):
    """Two workers on two GPUs: the warm-up trains the runs the night will train at once, each on the GPU of the
    worker it stands for (looper.core.run.slots.copy_worker). It put every copy on the first GPU: twice the runs
    the first GPU will carry (fewer steps pinned than the runs fit, more memory than the preflight sized), none on
    the second. The baseline's seeds then train on the first worker's GPU."""
    import looper.night.cores as cores

    monkeypatch.setattr(cores, "usable_cores", lambda: list(range(16)))  # a GPU machine's cores (this one has 2)
    class Runs(TwoGpuExecutor):
        def train(self, job, on_line, cancel):  # type: ignore[no-untyped-def]
            runs.append((job.out_dir.parent.name.split("-s")[0], job.seed, job.device))  # .../<role>-s<seed>/out
            return super().train(job, on_line, cancel)

    runs: list[tuple[str, int, str]] = []
    loop = _loop(tmp_path, Runs(), loop_workers=2, loop_seed_jobs=seed_jobs, loop_max_steps="auto")
    assert loop.setup() is None
    (warm,) = [e.data for e in loop.ctx.store.journal(kind="baseline") if e.message.startswith("warm-up #")]
    assert len(warm["warmup"]["runs"]) == len(expected)
    assert sorted((seed, d) for role, seed, d in runs if role == "warmup") == list(enumerate(expected)), runs
    seeds = [d for role, _, d in runs if role != "warmup"]
    assert seeds and set(seeds) == {"0"}, runs  # the baseline's seeds: the first worker's


def test_a_worker_s_gpu_the_runs_cannot_use_stops_the_night_before_the_baseline_naming_it(tmp_path):
    executor = CheckedGpus(broken=1)
    loop = _loop(tmp_path, executor, loop_workers=2)
    with pytest.raises(HarnessError) as caught:
        loop.setup()
    assert str(caught.value).startswith("preflight failed before the baseline (GPU 1, a worker's): torch cannot use "
                                        "cuda:1 in a run's box")
    assert [c for c in executor.calls if c[0] == "train"] == []  # nothing trained, not even the baseline


@pytest.mark.parametrize("workers", [1, 2])
def test_a_gpu_the_night_leaves_half_empty_is_said_once_naming_the_workers_that_fill_it(tmp_path, monkeypatch, workers):
    """A GPU machine's 16 cores feed 8 runs on its GPU (looper.core.run.slots.gpu_slots); 4 seeds side by side on
    one worker train 4: the GPU waits while the agent proposes and each look is judged. The night says so once,
    naming loop.workers = 2; with 2 workers it says nothing."""
    import looper.night.cores as cores

    monkeypatch.setattr(cores, "usable_cores", lambda: list(range(16)))  # a GPU machine's cores (this one has 2)
    stream = io.StringIO()
    loop = _loop(tmp_path, OneGpuExecutor(free_mb=140_000), stream, loop_seed_jobs=4, loop_workers=workers)
    assert loop.setup() is None
    preflight(loop.ctx, loop.ctx.main_worker())  # the preflight before an experiment: not said again
    notes = [e.message for e in loop.ctx.store.journal(kind="note") if e.message.startswith("GPU slots: ")]
    if workers == 2:
        assert notes == [] and "GPU slots: " not in stream.getvalue()
        return
    words = ("GPU slots: the GPU takes 8 runs at a time (limited by cores: 140000 MB free / 4096 MB a run -> 27; "
             "16 cores / 2 a run -> 8; at most 16); this night trains 4 at a time on it (loop.seed_jobs 4 x "
             "loop.workers 1): loop.workers = 2 would fill it (one worker's runs train while another's agent "
             "proposes and its looks are judged)")
    assert notes == [words]
    assert stream.getvalue().count("GPU slots: ") == 1
    from looper.report import gather

    attention = [a for a in gather(loop.ctx.store, loop.ctx.root).attention if a.text.startswith("GPU slots: ")]
    assert [(a.level, a.text) for a in attention] == [("note", words)]  # the morning's report says it too


@pytest.mark.parametrize("gpu", [True, False])
def test_a_night_on_the_cpu_of_a_machine_with_a_gpu_says_once_that_the_gpu_is_unused(tmp_path, gpu):
    """require_gpu = false on a machine whose NVML sees a GPU: the runs train on the CPU, and the night says so once
    (journal, screen), the morning's report warns, and `looper status` shows it; a machine without one: nothing."""
    from looper.core.run.slots import UNUSED_NOTE
    from looper.report import gather
    from looper.report.status import status_text
    from looper.workspace.lock import DaemonLock

    stream = io.StringIO()
    executor = OneGpuExecutor(free_mb=140_000) if gpu else FakeExecutor()
    ws = build_ws(tmp_path / "ws", tmp_path / "queue", "", exec_sandbox="none", exec_require_gpu=False)
    loop = Loop(ws.root, load_config(ws.root / "looper.toml"), Store(ws.root / "experiments.db"), executor,
                ScriptedAgent({}), AppriseNotifier([]), display=Display(stream), program_md="")
    store, tag = loop.ctx.store, loop.ctx.cfg.loop.tag

    def status() -> list[str]:
        text = status_text(store, loop.ctx.cfg, DaemonLock(ws.root / ".looper" / "daemon.lock"))
        return [line.strip() for line in text.splitlines() if UNUSED_NOTE in line]

    store.add_event(tag, "start", "daemon started (pid 1, 1 worker(s))")  # as `looper run` journals it
    assert loop.setup() is None
    preflight(loop.ctx, loop.ctx.main_worker())  # the preflight before an experiment: not said again
    assert loop.ctx.main_worker().device == "cpu" and [c for c in executor.calls if c[0] == "train"]  # the baseline
    notes = [e.message for e in store.journal(kind="note") if e.message.startswith(UNUSED_NOTE)]
    attention = [(a.level, a.text) for a in gather(store, loop.ctx.root).attention if a.text.startswith(UNUSED_NOTE)]
    if not gpu:
        assert notes == [] and attention == [] and status() == [] and UNUSED_NOTE not in stream.getvalue()
        return
    words = ("GPU unused: this machine has 1 GPU and [executor] require_gpu = false: the runs train on the CPU. Set "
             "[executor] require_gpu = true to train on the GPU (docs/GPU.md), or leave it false to keep the GPU for "
             "other work")
    assert notes == [words] and stream.getvalue().count(UNUSED_NOTE) == 1
    assert attention == [("warn", words)]  # the morning's report
    assert status() == [words]
    store.add_event(tag, "start", "daemon started (pid 2, 1 worker(s))")  # the next night has not said it (yet)
    assert status() == []



@pytest.mark.parametrize("mode, said", [("auto", True), ("on", True), ("off", False)])
def test_prestart_an_executor_cannot_do_is_said_at_the_night_s_start(tmp_path, mode, said):
    """[loop] prestart ("auto": on with require_gpu) on an executor whose runs' boxes start when the runs come (an
    ssh host): the night says so once at its start, naming the executor, not skipping it silently."""
    from types import SimpleNamespace

    from looper.executors.ssh.executor import SshExecutor

    executor = SshExecutor(tmp_path / "ws", SimpleNamespace(host="gpu-box", remote_dir="/srv/looper", require_gpu=True))
    stream = io.StringIO()
    _loop(tmp_path, executor, stream, loop_prestart=mode)
    words = ("prestart: off on the ssh executor: each run's box starts when its run comes, its start-up in the GPU's "
             f'wait ([loop] prestart = "{mode}" starts boxes ahead on the local executor only; docs/GPU.md)')
    assert (words in stream.getvalue()) is said, stream.getvalue()


class HostGpuExecutor(OneGpuExecutor):
    """The fake executor as the ssh executor's preflight answers: one GPU on a host of ``cores`` cores."""

    def __init__(self, free_mb: float, cores: int) -> None:
        super().__init__(free_mb)
        self.cores = cores

    def preflight(self, require_gpu: bool, gpu: int | None = None) -> Verdict:
        v = super().preflight(require_gpu, gpu)
        return Verdict.passed({**v.metrics, "cores": self.cores})


def test_an_ssh_host_s_gpu_slots_are_planned_on_the_host_s_cores(tmp_path):
    """The GPU's slots are fed by the cores of the machine it is in: an ssh host's, from its preflight (before:
    the daemon's own, a laptop's 2 cores planning a 64-core GPU host's slots), and the note of the workers that
    would fill it is said there too."""
    loop = _loop(tmp_path, HostGpuExecutor(free_mb=140_000, cores=64), exec_kind="ssh", exec_host="gpu-box",
                 exec_remote_dir="/srv/looper")
    assert loop.setup() is None
    v = preflight(loop.ctx, loop.ctx.main_worker())
    slots = v.metrics["gpu_slots"]
    assert "64 cores / 2 a run -> 32" in slots["plan"] and slots["slots"] == 16, slots  # memory and cores: the cap
    assert "loop.workers = " in slots["fill"], slots  # one run at a time leaves the host's GPU empty: said
