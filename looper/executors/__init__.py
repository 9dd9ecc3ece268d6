"""Executors, chosen by ``[executor] kind`` from a registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from looper.errors import ConfigError
from looper.executors.base import EvalJob, Executor, RunResult, TrainJob

_REGISTRY: dict[str, Callable[..., Executor]] = {}


def register(kind: str) -> Callable[[Callable[..., Executor]], Callable[..., Executor]]:
    def deco(factory: Callable[..., Executor]) -> Callable[..., Executor]:
        _REGISTRY[kind] = factory
        return factory

    return deco


@register("local")
def _local(workspace: Path, section: Any) -> Executor:
    from looper.executors.local import LocalExecutor
    from looper.executors.sandbox import SandboxPolicy

    return LocalExecutor(workspace, python=section.python, gpu_index=getattr(section, "gpu_index", 0),
                         sandbox=SandboxPolicy.from_section(section))


@register("ssh")
def _ssh(workspace: Path, section: Any) -> Executor:
    from looper.executors.ssh.executor import SshExecutor

    return SshExecutor(workspace, section)


@register("slurm")
def _slurm(workspace: Path, section: Any) -> Executor:
    from looper.executors.slurm.executor import SlurmExecutor

    return SlurmExecutor(workspace, section)


def make_executor(workspace: Path, section: Any) -> Executor:
    kind = section.kind
    if kind not in _REGISTRY:
        raise ConfigError(f"executor.kind: unknown executor {kind!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[kind](workspace, section)


__all__ = ["EvalJob", "Executor", "RunResult", "TrainJob", "make_executor", "register"]
