"""The night: set the tag up, recover what a stopped daemon left, claim experiments for the
workers, halt and page. One experiment is :func:`looper.night.experiment.run_candidate`:

preflight -> agent proposes -> scope check -> commit on looper/<tag> -> train under the
budget -> integrity check -> evaluate (old metrics deleted first) -> gate -> keep or reset
-> record. Errors halt the loop and page a person; a stuck loop halts too.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from looper import proc, tracking
from looper.agents.base import Agent
from looper.config import Config
from looper.core.run.slots import worker_gpu
from looper.core.verdicts.verdict import Outcome, Verdict
from looper.errors import HarnessError, StuckError
from looper.executors import Executor
from looper.executors.gpu import device_index
from looper.executors.nightgpu import night_gpu
from looper.night.baseline import measure_baseline, verify
from looper.night.candidate import Halted
from looper.night.clock import now_iso
from looper.night.confirm import confirm, record_nothing, run_confirm
from looper.night.context import Context, Worker
from looper.night.display import Display
from looper.night.experiment import run_candidate
from looper.night.integrity import preflight
from looper.night.notify import Notifier
from looper.night.tagstart import check_data, pin_tag, recover, restore_last_kept
from looper.night.tuned import measure_thresholds
from looper.store import EventRecord, Store

ADVICE = {
    "halt": "Fix the harness problem named above (GPU, data, host, fixed files, database), then start "
            "`looper run` again: the loop resumes from the last kept commit.",
    "stuck": "The same failure keeps repeating. Read the failure signature, adjust program.md "
             "(exclusions, search plan) or train.py by hand, then start `looper run` again.",
}


def open_daemon(root: Path, cfg: Config) -> None:
    """What the daemon sets before its first run: every run's log and line caps and its own limits (memory,
    processes, tmpfs, the out/ quota: ``[limits]``), the disk reserve a daemon killed on a full disk left
    behind released, and the agent working copies (each with its prompt) a daemon killed mid-proposal left removed."""
    import looper.executors.limits as run_limits
    from looper.agents.command import remove_left_behind
    from looper.night.guard import release_reserve

    proc.set_output_caps(cfg.limits.log_max_bytes, cfg.limits.line_max_bytes)
    run_limits.configure(cfg.limits, run_limits.sharing(cfg))  # the runs at a time share this machine's memory
    release_reserve(Path(root), cfg.limits.reserve_bytes)
    remove_left_behind()


class Loop:
    """One daemon's night on one workspace and tag."""

    def __init__(self, root: Path, cfg: Config, store: Store, executor: Executor, agent: Agent,
                 notifier: Notifier, display: Display | None = None, secrets: list[str] | None = None,
                 program_md: str = "") -> None:
        self.ctx = Context.build(root, cfg, store, executor, agent, display or Display(), list(secrets or []),
                                 program_md)
        open_daemon(root, cfg)
        self.notifier = notifier
        import looper.executors.limits as run_limits
        from looper.core.run.slots import prestart, prestart_unmet

        said = executor.plan(cfg.data.dir, run_limits.sharing(cfg))
        if said and prestart(cfg.loop.prestart, cfg.executor.require_gpu):
            self.ctx.display.note(said)
        unmet = prestart_unmet(cfg.loop.prestart, cfg.executor.require_gpu, executor.name, executor.prestarts)
        if unmet:  # asked for (or "auto" on a GPU) where the executor cannot: said, not silently skipped
            self.ctx.display.note(unmet)
        self.halted: Halted | None = None
        self._noted: set[str] = set()

    def install_signals(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            self.ctx.display.note(f"signal {signal.Signals(signum).name}: stopping after cleanup")
            self.ctx.night.cancel.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    # ------------------------------------------------------------------ the tag
    def setup(self) -> Halted | None:
        """Worktree, data, pinned hashes, recovery, and the tag's baseline (a halt when it fails)."""
        ctx = self.ctx
        ctx.tag.open()
        recover(ctx)
        v = ctx.executor.ensure_data(ctx.root / "prepare.py", ctx.cfg.data.dir, ctx.cfg.data.scale, ctx.cfg.data.seed)
        if not v.ok:
            raise HarnessError("data: " + "; ".join(v.blocking))
        if v.metrics.get("label_index"):  # made once per data set: the runs read it, not scan again (issue 47)
            ctx.journal.event("note", f"label index: {v.metrics['label_index']}")
        bad = check_data(ctx)
        if bad is not None:
            return bad
        changed = pin_tag(ctx, v.metrics["hash"])
        main = ctx.main_worker()
        devices = ctx.night.devices = self.worker_devices()  # the baseline's warm-up trains on each one's GPU
        if changed or not ctx.tag.kept_baselines():
            pre = preflight(ctx, main)  # nothing trains, not even the baseline, on a broken harness
            if not pre.ok:
                raise HarnessError("preflight failed before the baseline: " + "; ".join(pre.blocking))
            # the other workers' GPUs too: a GPU a run cannot use is found before the baseline, not after it
            others = [self.other_gpu(int(d)) for d in sorted(set(devices) - {main.device, "cpu"}, key=int)]
            for line in [pre.metrics.get("device_check"), *others]:
                if line:
                    ctx.journal.event("baseline", line)
                    ctx.display.note(line)
            if pre.metrics.get("transfer"):
                ctx.journal.event("baseline", f"starting weights: {pre.metrics['transfer']}")
                ctx.display.note(f"starting weights: {pre.metrics['transfer']}")
            result = measure_baseline(ctx, main)
            if result.halt_error is not None:
                return Halted(result.halt_error, result.exp_id, result.advice)
        if len(devices) == 1:
            ctx.night.workers = [main]
        else:
            ctx.night.workers = [Worker(i, ctx.tag.ws.ensure_detached_worktree(ctx.tag.name, i, ctx.tag.wt.head()), ctx.executor,
                                  device, detached=True) for i, device in enumerate(devices)]
        return None

    def worker_devices(self) -> list[str]:
        """Each worker's device (``LOOPER_DEVICE``): ``cpu``, or the GPU it takes in turn from ``[executor]
        gpu_index`` on among those a run's machine shows (looper.core.run.slots.worker_gpu; not known: one each)."""
        cfg = self.ctx.cfg
        n, first = cfg.loop.workers, cfg.executor.gpu_index
        if n == 1:
            return [self.ctx.main_worker().device]
        if not cfg.executor.require_gpu:
            return ["cpu"] * n
        count = self.ctx.executor.gpu_count() or first + n
        return [str(worker_gpu(i, first, count)) for i in range(n)]

    def other_gpu(self, index: int) -> str:
        """A worker's GPU that is not the main worker's, as the preflight checks it (NVML, then a run's box); its
        check's line. A GPU the runs cannot use stops the night here, before the baseline."""
        v = self.ctx.executor.preflight(True, gpu=index)
        if not v.ok:
            raise HarnessError(f"preflight failed before the baseline (GPU {index}, a worker's): "
                               + "; ".join(v.blocking))
        return str(v.metrics.get("device_check") or "")

    # ------------------------------------------------------------------ the night
    def deadline(self) -> datetime | None:
        until = self.ctx.cfg.loop.until
        if not until:
            return None
        hh, mm = (int(x) for x in until.split(":"))
        now = datetime.now()
        target = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if now - target > timedelta(minutes=1):  # already past today (not just now): tomorrow's
            target += timedelta(days=1)
        return target

    def claim(self, limit: int, deadline: datetime | None) -> bool:
        """May one more experiment start? Counts it when yes."""
        ctx = self.ctx
        with ctx.night.count_lock:
            if ctx.night.cancel.is_set() or ctx.night.exhausted or self.halted is not None:
                return False
            self.check_display()
            if limit and ctx.night.stats.experiments >= limit:
                self._note_once("limit", f"max_experiments reached ({limit})")
                return False
            if deadline and datetime.now() >= deadline:
                self._note_once("until", f"until {ctx.cfg.loop.until} reached")
                return False
            ctx.night.stats.experiments += 1
            return True

    def check_display(self) -> None:
        """A display that failed (it never raises itself) halts the night like any internal error."""
        broken = self.ctx.display.broken
        if broken:
            raise HarnessError(f"internal error in looper's display: {broken}")

    def _note_once(self, key: str, message: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            self.ctx.journal.event("stop", message)

    def stop(self, halted: Halted) -> None:
        """The first halt wins; the other workers stop and their experiments are marked interrupted."""
        with self.ctx.night.count_lock:
            self.halted = self.halted or halted
        self.ctx.night.cancel.set()

    def worker_loop(self, w: Worker, limit: int, deadline: datetime | None) -> None:
        try:
            while self.claim(limit, deadline):
                result = run_candidate(self.ctx, w)
                if result is None or result.outcome is Outcome.INTERRUPTED:
                    break
                if result.halt_error is not None:
                    self.stop(Halted(result.halt_error, result.exp_id, result.advice))
                    break
        except (HarnessError, StuckError) as exc:
            self.stop(Halted(exc))
        except Exception as exc:  # a bug in the harness is a harness error: halt and page
            traceback.print_exc()
            self.stop(Halted(HarnessError(f"internal error in looper ({w.label}): {type(exc).__name__}: {exc}")))

    def run(self, max_experiments: int = 0) -> int:
        """The night. Returns the process exit code (0 stop rule/signal, 3 error, 4 stuck)."""
        ctx = self.ctx
        ctx.journal.event("start", f"daemon started (pid {os.getpid()}, {ctx.cfg.loop.workers} worker(s))")
        tracking.warm(ctx.cfg, ctx.root)  # [tracking]: open MLflow in the background while the baseline runs
        reaped = proc.reap_trail(ctx.root / ".looper" / "pids")  # before anything new is noted there
        proc.set_trail(ctx.root / ".looper" / "pids")
        for line in reaped:
            ctx.journal.event("recover", line)
        deadline = self.deadline()
        limit = max_experiments or ctx.cfg.loop.max_experiments
        try:
            halted = self.setup()
            if halted is not None:
                return self.halt(halted)
            with night_gpu(ctx, {device_index(w.device, ctx.cfg.executor.gpu_index) for w in ctx.night.workers}):
                # [executor] require_gpu: the workers' GPUs sampled the whole night (each one's busy share)
                self.run_workers(limit, deadline)
            ctx.display.finish()  # the live panel's last render: its failure still halts, with a page
            if self.halted is not None:  # leave everything as it is for the person
                code = self.halt(self.halted)  # the page first: the record below may find the database broken
                record_nothing(ctx, f"the night halted before its confirmation: {self.halted.error}")
                return code
            self.check_display()
            if ctx.night.cancel.is_set():
                ctx.journal.event("interrupted", "stopped by a signal; checkout restored to the last kept commit")
                restore_last_kept(self.ctx)
                record_nothing(ctx, "the night was stopped by a signal before its confirmation")
                return 0
            cid, error = confirm(ctx, "night_end")  # a stop rule ended the night: confirm its best
            if error is None and not ctx.night.cancel.is_set():
                error = self.transfer(cid, "night_end")  # [confirm] transfer_steps: does it hold trained longer?
            if error is not None:
                return self.halt(Halted(error))
            if ctx.cfg.confirm.tuned_thresholds and not ctx.night.cancel.is_set():
                measure_thresholds(ctx)  # report only: never raises, never halts (looper/night/tuned.py)
            if ctx.night.cancel.is_set():
                restore_last_kept(self.ctx)
            return 0
        except (HarnessError, StuckError) as exc:
            return self.halt(Halted(exc))
        except Exception as exc:  # a bug in the harness is a harness error: halt and page
            traceback.print_exc()
            return self.halt(Halted(HarnessError(f"internal error in looper: {type(exc).__name__}: {exc}")))
        finally:
            ctx.executor.close()  # boxes started ahead of runs that will not come ([loop] prestart)
            ctx.journal.event("stop", f"{EventRecord.DAEMON_STOPPED} {ctx.night.stats.experiments} experiment(s)")
            ctx.display.close()

    def run_workers(self, limit: int, deadline: datetime | None) -> None:
        workers = self.ctx.night.workers
        if len(workers) == 1:
            self.worker_loop(workers[0], limit, deadline)
            return
        threads = [threading.Thread(target=self.worker_loop, args=(w, limit, deadline), name=w.label, daemon=True)
                   for w in workers]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):  # join in slices: signals reach the main thread
            for t in threads:
                t.join(timeout=0.5)

    # ------------------------------------------------------------------ halts and pages
    def page(self, title: str, body: str, exp_id: int | None = None) -> None:
        ctx = self.ctx
        title, body = ctx.journal.redact(title), ctx.journal.redact(body)
        try:
            ok, problem = self.notifier.page(title, body)
        except Exception as exc:  # a failing notifier never hides the halt
            ok, problem = False, f"{type(exc).__name__}: {exc}"
        if ok:
            ctx.journal.safe("page", title, exp_id)
        else:
            ctx.journal.safe("page_failed", f"{title} -- NOT DELIVERED: {problem}", exp_id)
            print(f"looper: PAGE NOT DELIVERED ({problem}). The halt stands:\n{title}\n{body}",
                  file=sys.stderr, flush=True)

    def halt(self, halted: Halted) -> int:
        """Page a person exactly once; the page goes out even when the database cannot be used."""
        ctx, err = self.ctx, halted.error
        kind = "stuck" if isinstance(err, StuckError) else "halt"
        body = self.halt_page(halted, kind)
        ctx.display.note(f"HALT ({kind}): {err}")
        self.page(f"looper {kind}: {ctx.tag.name}: {str(err)[:120]}", body, halted.exp_id)
        blocking = self._facts(halted.exp_id)[0] or [str(err)]
        ctx.journal.safe(kind, str(err), halted.exp_id, {"blocking": blocking})
        return err.exit_code

    def _facts(self, exp_id: int | None) -> tuple[list[str], str, str, str]:
        """(blocking reasons, status, run-log tail, database problem) of the experiment a halt came from."""
        if exp_id is None:
            return [], "", "", ""
        try:
            exp = self.ctx.store.experiment(exp_id)
            runs = self.ctx.store.run_records(exp_id)
        except Exception as exc:  # the database itself may be what broke
            return [], "", "", f"(the database could not be read: {type(exc).__name__}: {exc})"
        tail = "\n".join((runs[-1].log_tail or "").splitlines()[-15:]) if runs else ""
        return list(exp.blocking), exp.status.value, tail, ""

    def halt_page(self, halted: Halted, kind: str) -> str:
        """Only the facts of the failure this halt reports: nothing of an earlier experiment."""
        ctx, err = self.ctx, halted.error
        blocking, status, tail, store_problem = self._facts(halted.exp_id)
        stats = ctx.night.stats
        lines = [f"looper {kind} on tag {ctx.tag.name} at {now_iso()}", "", f"What happened: {err}"]
        if blocking:
            lines += ["", f"Experiment #{halted.exp_id} ({status}); blocking reasons:", *(f"- {b}" for b in blocking)]
        lines.append("")
        if stats.finished:
            done = ", ".join(f"{n} {o}" for o, n in sorted(stats.outcomes.items()))
            lines.append(f"Experiments finished this run: {stats.finished} ({done})")
        else:
            lines.append("No experiment finished this run.")
        if store_problem:
            lines.append(store_problem)
        if tail:
            lines += ["", f"Last lines of experiment #{halted.exp_id}'s run log:", tail]
        lines += ["", f"What to do next: {halted.advice or ADVICE[kind]}", ""]
        return "\n".join(lines)

    # ------------------------------------------------------------------ looper confirm
    def confirm(self) -> int:
        """The tag's best on fresh seeds, compared with its baseline (looper.night.confirm); the confirmation id."""
        return run_confirm(self.ctx)

    def transfer(self, cid: int | None, trigger: str) -> HarnessError | None:
        """The transfer check after confirmation ``cid`` (looper.night.transfer); a person is told when the
        gain does not hold at the longer budget. Returns the harness error that ended it, if any."""
        from looper.night import transfer

        record, error = transfer.check(self.ctx, trigger, cid)
        if record is not None and record.flagged:
            self.page(f"looper: {self.ctx.tag.name}: #{record.experiment_id}'s confirmed gain {record.status} when "
                      f"trained longer ({record.steps} steps)", record.headline, record.experiment_id)
        return error

    # ------------------------------------------------------------------ looper verify
    def verify(self) -> Verdict:
        """One experiment of the workspace's current train.py, gated, committed nowhere."""
        return verify(self.ctx)
