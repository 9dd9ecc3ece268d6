"""What a tag's baseline was measured under, against what a night runs now: a change measures a new baseline
(its noise, its step budget and its scores were measured under the old). Pure: the configs (as
``Config.redacted_dict()``) and the GPU names come in."""

from __future__ import annotations

from collections.abc import Collection

from looper.core.run import cores as core_cores

# What a tag's baseline depends on: a change to any of these since it was measured starts a new one. A run on a
# GPU (``require_gpu``) is another regime than one on the CPU: other kernels, AMP, another speed.
BASELINE_DEPENDS_ON = (("loop", "budget_seconds"), ("loop", "max_steps"), ("data", "scale"), ("data", "seed"),
                       ("executor", "kind"), ("executor", "require_gpu"))


def baseline_drift(then: dict | None, now: dict, then_gpus: Collection[str] = (), now_gpu: str = "",
                   then_cores: int | None = None, now_cores: int | None = None) -> list[str]:
    """What changed between the config a baseline was measured under and ``now`` (both as
    ``Config.redacted_dict()``), as "section.key a -> b" lines; a key ``then`` lacks is unknown and counts as
    unchanged. The runs that train at once where they run (``[loop] seed_jobs`` x ``workers``, here or on the ssh host,
    looper.core.run.cores.side_by_side) count too: the warm-up's steps and the fit run's wall clock were measured
    under them, and a run's speed under the wall clock depends on them. So does the GPU: ``then_gpus``, the
    names of the GPUs the baseline's runs trained on (none known: unchanged), against ``now_gpu``, the GPU the
    night's runs take ("" not known): a GPU of another model trains at another speed, with other kernels. So do
    the cores: ``then_cores``, those the tag's warm-up or fit run trained on (the local executor's; None: not
    recorded), against ``now_cores``: the step budget was measured on them, and each run's threads are its share.

    >>> baseline_drift({"executor": {"require_gpu": False}}, {"executor": {"require_gpu": True}})
    ['executor.require_gpu False -> True']
    >>> baseline_drift(None, {}, ["NVIDIA H200"], "NVIDIA H100 80GB HBM3")
    ['GPU NVIDIA H200 -> NVIDIA H100 80GB HBM3']
    >>> baseline_drift(None, {}, then_cores=16, now_cores=8)
    ['cores this process may use 16 -> 8']
    """
    changed = []
    for section, key in BASELINE_DEPENDS_ON:
        old = ((then or {}).get(section) or {}).get(key)
        new = (now.get(section) or {}).get(key)
        if old is not None and new is not None and old != new:
            changed.append(f"{section}.{key} {old} -> {new}")
    old_load, new_load = _load(then), _load(now)
    if old_load is not None and new_load is not None and old_load != new_load:
        changed.append(f"runs at a time (loop.seed_jobs x loop.workers) {old_load} -> {new_load}")
    if then_gpus and now_gpu and now_gpu not in then_gpus:
        changed.append(f"GPU {' / '.join(sorted(set(then_gpus)))} -> {now_gpu}")
    if then_cores and now_cores and then_cores != now_cores:
        changed.append(f"cores this process may use {then_cores} -> {now_cores}")
    return changed


def _load(cfg: dict | None) -> int | None:
    """The runs a config trains at once on this machine; None where it does not say."""
    loop, executor = (cfg or {}).get("loop") or {}, (cfg or {}).get("executor") or {}
    if not all(isinstance(loop.get(k), int) for k in ("seed_jobs", "workers")) or "kind" not in executor:
        return None
    return core_cores.side_by_side(loop["seed_jobs"], loop["workers"], executor["kind"])
