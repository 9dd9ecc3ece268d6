"""The GPUs a night's runs use, sampled the whole night: the share of it a kernel was running (issue 46).

Each run's own figures come from its sampler (looper.executors.gpu.GpuSampler); what only the whole night
says is how much of it the GPU sat idle between runs (start-up, evaluation, the agent). With ``[executor]
require_gpu`` the night asks its executor to watch the workers' GPUs (:meth:`Executor.watch_gpus`): the local
executor samples them here; the ssh executor starts ``python -m looper.executors.nightgpu watch`` on the host,
over a connection of its own, which samples there until its standard input closes, then prints its figures;
SLURM cannot (a run's node is known only once its job runs). One journal note when the night ends, each GPU
in turn: looper.report.lines shows the night's last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Collection, Iterator
from typing import Any, Protocol

from looper import proc
from looper.executors.gpu import GpuSampler

NIGHT_GPU = "GPU over the night:"  # the note's first words (looper.report.lines reads the last one)
FINISH_S = 60.0  # the host's watch: seconds to answer once told to finish


class GpuWatch(Protocol):
    def stop(self) -> list[dict[str, Any]]:
        """End the sampling; each GPU's figures (looper.executors.gpu.GpuSampler.summary, ``host`` where it is
        another machine's; ``problem`` where it was not sampled)."""
        ...


class Samplers:
    """The GPUs of this machine, sampled here every ``interval`` seconds."""

    def __init__(self, gpus: Collection[int], nvml: Any = None, interval: float = 1.0) -> None:
        self.samplers = [GpuSampler(i, nvml=nvml, interval=interval).start() for i in sorted(set(gpus))]

    def stop(self) -> list[dict[str, Any]]:
        return [s.stop() for s in self.samplers]


class RemoteWatch:
    """The host's GPUs, sampled there by ``python -m looper.executors.nightgpu watch`` (``launched``: its ssh)."""

    def __init__(self, launched: proc.Launched, host: str, gpus: Collection[int], finish_s: float = FINISH_S) -> None:
        self.launched, self.host, self.gpus, self.finish_s = launched, host, sorted(set(gpus)), finish_s

    def stop(self) -> list[dict[str, Any]]:
        done = proc.finish_launched(self.launched, self.finish_s)
        lines = done.stdout.strip().splitlines()
        figures = _figures(lines[-1]) if lines and done.ok else None
        if figures is None:
            why = (f"no answer in {self.finish_s:.0f} s" if done.timed_out else
                   f"the watch ended with exit {done.exit_code}: {' | '.join(lines[-2:]) or 'nothing printed'}")
            figures = [{"index": i, "samples": 0, "problem": why} for i in self.gpus]
        return [{**g, "host": self.host} for g in figures]


def _figures(line: str) -> list[dict[str, Any]] | None:
    """The watch's answer, ``{"figures": [{...}, ...]}``; None for anything else."""
    try:
        figures = json.loads(line).get("figures")
    except (ValueError, AttributeError):
        return None
    ok = isinstance(figures, list) and all(isinstance(g, dict) for g in figures)
    return figures if ok else None


@contextlib.contextmanager
def night_gpu(ctx: Any, gpus: Collection[int] = ()) -> Iterator[None]:
    """With ``[executor] require_gpu``: every GPU the night's runs use (``gpus``, the workers' own; none named:
    ``[executor] gpu_index``) watched while the block runs (where the executor can), and one journal note when it
    ends: for each, the share of samples a kernel was running (busy), the mean utilisation and the peak memory of
    the whole night, every run on it together; or why it was not sampled."""
    watch = ctx.executor.watch_gpus(set(gpus) or {ctx.cfg.executor.gpu_index}) if ctx.cfg.executor.require_gpu else None
    if watch is None:
        yield
        return
    try:
        yield
    finally:
        figures = watch.stop()
        if figures:
            ctx.journal.event("note", night_gpu_line(figures))


def night_gpu_line(figures: list[dict[str, Any]]) -> str:
    """One note for the night's GPUs, each said in turn."""
    def one(g: dict[str, Any]) -> str:
        where = f"GPU {g.get('index')}" + (f" of {g['host']}" if g.get("host") else "")
        if not g.get("samples"):
            return f"{where} not sampled ({g.get('problem') or 'no sample taken'})"
        return (f"busy {g.get('busy_pct')}% of {g.get('samples')} samples (1 s), mean utilisation "
                f"{g.get('mean_utilization_pct')}%, peak memory {g.get('peak_memory_mb')} MB of "
                f"{g.get('memory_total_mb')} on {where} ({g.get('name') or '?'})")

    return f"{NIGHT_GPU} " + "; ".join(one(g) for g in figures)


# -- on the host: ``python -m looper.executors.nightgpu watch --index N ...`` ----------------------------------

def main(argv: list[str] | None = None) -> int:
    """``watch``: sample the GPUs until standard input closes, then print their figures as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m looper.executors.nightgpu")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch", help="sample GPUs until stdin closes; print {'figures': [...]}")
    w.add_argument("--index", type=int, action="append", required=True)
    w.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    watch = Samplers(args.index, interval=args.interval)
    sys.stdin.read()  # the night's end (the daemon closes it; a dropped connection closes it too)
    print(json.dumps({"figures": watch.stop()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
