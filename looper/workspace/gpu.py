"""`looper init --gpu`: a night sized for this machine's GPU, from NVML's reading and the cores that feed it.

The sizes are the night's own rules (looper.core.run.slots): the seeds of a look side by side as the GPU's slots
take them, and the workers that fill the rest, at the default peak a run (no run of the tag has measured one
yet); the night's preflight judges the same reading the same way, and once a run has measured its peak it says
where more workers would fill the GPU (``GPU slots: ...``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any

from looper.core.run.slots import gpu_slots, night_sizes, unused_words
from looper.errors import WorkspaceError
from looper.executors.gpu import GpuReading, NvmlProbe


@dataclass(frozen=True)
class GpuNight:
    """What ``looper init --gpu`` writes into looper.toml, and the words that say why."""

    keys: dict[str, dict[str, object]]
    words: str


def read_gpu(index: int = 0, nvml: Any = None) -> GpuReading:
    """GPU ``index`` of this machine, through NVML (``nvml``: a fake module a test injects)."""
    return NvmlProbe(index, nvml).read()


def size_night(reading: GpuReading, cores: int, toml_text: str) -> GpuNight:
    """``[executor] require_gpu = true`` and ``[loop] seed_jobs`` and ``workers`` for the workspace whose
    looper.toml is ``toml_text`` (its ``noise_reruns`` caps a look's seeds, its ``gpu_index`` names the GPU), on
    the GPU ``reading`` read with ``cores`` CPU cores; a WorkspaceError naming NVML's problem where there is no
    GPU to size a night on."""
    if not reading.ok:
        raise WorkspaceError(f"looper init --gpu: no GPU to size a night on: {reading.problem}. Without --gpu the "
                             "runs train on the CPU; for a GPU on an ssh host or SLURM, set [executor] require_gpu "
                             "= true there (docs/GPU.md)")
    cfg = tomllib.loads(toml_text)
    loop, executor = cfg.get("loop", {}), cfg.get("executor", {})
    cap = 1 + int(loop.get("noise_reruns", 7))
    first = int(executor.get("gpu_index", 0))
    plan = gpu_slots(reading.memory_free_mb, None, cores)
    seed_jobs, workers = night_sizes(plan, cap, first, reading.count)
    gpus = "1 GPU" if reading.count == 1 else f"{reading.count} GPUs"
    words = [f"GPU night: {reading.name} (GPU {first} of {gpus}, {reading.memory_free_mb:,.0f} MB free) and "
             f"{cores} cores: the GPU takes {plan.line()}, a run's default peak until a run of the tag "
             "measures its own",
             f"looper.toml: [executor] require_gpu = true; [loop] seed_jobs = {seed_jobs} (a challenger's seeds "
             f"side by side, at most {cap} with noise_reruns {cap - 1}), workers = {workers}; the night says when "
             "more workers would fill the GPU (docs/GPU.md)"]
    return GpuNight(keys={"executor": {"require_gpu": True}, "loop": {"seed_jobs": seed_jobs, "workers": workers}},
                    words="\n".join(words))


def unused_hint(reading: GpuReading) -> str:
    """Where ``looper init`` without ``--gpu`` finds a GPU on this machine: that the workspace trains on the
    CPU, and the option that sizes a night on the GPU; "" where NVML sees none or cannot be read."""
    words = unused_words(reading.count if reading.ok else None, "this machine")
    return f"{words} (looper init --gpu also sizes [loop] seed_jobs and workers for a GPU night)" if words else ""
