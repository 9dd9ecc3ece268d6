"""The command line: thin. Each command loads what it needs and calls one function.

Exit codes (docs/REFERENCE.md section 7): ``looper run`` 0 stop rule or signal, 3 harness error
(paged), 4 stuck (paged), 2 bad usage or configuration; ``looper verify --json`` 0 pass,
1 fail, 2 error. Every LooperError maps to its code in ``looper.errors.exit_code_for``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from looper.core.propose.search import STRATEGIES
from looper.data.cli import data_app
from looper.errors import EXIT_HARNESS, LooperError, UsageError, cli_errors, exit_code_for

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="looper: an autonomous experiment loop that tells the truth all night.")
baseline_app = typer.Typer(no_args_is_help=True, help="Approved baselines.")
app.add_typer(baseline_app, name="baseline")
app.add_typer(data_app, name="data")


def _root() -> Path:
    return Path(os.environ.get("LOOPER_WORKSPACE") or Path.cwd()).resolve()


def _config(root: Path, **overrides: Any):  # noqa: ANN202
    from looper.config import config_from_dict, load_config

    cfg = load_config(root / "looper.toml" if (root / "looper.toml").exists() else None)
    if overrides:
        data = cfg.model_dump()
        for key, value in overrides.items():
            if value is not None:
                section, name = key.split(".")
                data[section][name] = value
        cfg = config_from_dict(data, source="looper.toml + command line")
    return cfg


def _store(root: Path):  # noqa: ANN202
    from looper.store import Store

    return Store(root / "experiments.db")


def _require_workspace(root: Path) -> None:
    missing = [n for n in ("train.py", "evaluate.py", "prepare.py") if not (root / n).is_file()]
    if missing:
        raise UsageError(f"{root} is not a looper workspace (missing {', '.join(missing)}); "
                         "run `looper init DIR` or cd into a workspace")


def _secrets(cfg: Any) -> list[str]:
    from looper.config import notify_urls

    out = list(notify_urls(cfg, os.environ))
    key = os.environ.get(cfg.agent.api_key_env or "", "")
    if key:
        out.append(key)
    return out


def _program(root: Path) -> tuple[str, Any]:
    from looper.agents.program import parse_program

    p = root / "program.md"
    if not p.is_file():
        raise UsageError(f"{p} is missing: the agent's instruction file is required")
    text = p.read_text()
    program = parse_program(text)
    for problem in getattr(program, "problems", []) or []:
        typer.echo(f"looper: program.md: {problem}", err=True)
    return text, program


@app.command()
@cli_errors
def init(directory: Path = typer.Argument(Path("."), help="Folder for the new workspace (new or empty)."),
         preset: str | None = typer.Option(None, help="demo | tiny: a looper.toml sized for a short CPU run."),
         data: Path | None = typer.Option(None, "--data", help="A labelled export (COCO .json, Ultralytics "
                                                               "data.yaml, looper data folder) to import into data/."),
         data_format: str | None = typer.Option(None, "--format", help="The export's format (guessed when not given)."),
         images: Path | None = typer.Option(None, "--images", help="COCO: the folder of its images."),
         gpu: bool = typer.Option(False, "--gpu", help="Train on this machine's GPU: [executor] require_gpu = true, "
                                                       "[loop] seed_jobs and workers sized from its free memory and "
                                                       "cores (docs/GPU.md).")) -> None:
    """Make a new workspace: the same files as looper's root, in a new git repository."""
    from looper.night.cores import usable_cores
    from looper.workspace.create import init_workspace, template_toml
    from looper.workspace.gpu import read_gpu, size_night, unused_hint

    reading = read_gpu()
    night = size_night(reading, len(usable_cores()), template_toml(preset)) if gpu else None
    path = init_workspace(directory, preset, data=data, data_format=data_format, images=images,
                          keys=night.keys if night else None)
    if data is not None:
        typer.echo(f"data imported from {data} into {path / 'data'}")
    said = night.words if night else unused_hint(reading)
    if said:
        typer.echo(said)
    typer.echo(f"workspace ready: {path}\nnext: cd {path} && looper run")


def _require_sandbox(cfg: Any) -> None:
    """`looper run` refuses to start when training here would run unconfined without an explicit opt-out."""
    from looper.executors.sandbox import INSTALL_COMMAND, SandboxPolicy, find_bwrap

    policy = SandboxPolicy.from_section(cfg.executor)
    if cfg.executor.kind == "local" and policy.enabled and find_bwrap(policy) is None:
        raise UsageError(f"bubblewrap (bwrap) is not installed, so train.py cannot run in its sandbox: "
                         f"{INSTALL_COMMAND}  (or opt out explicitly: [executor] sandbox = \"none\")")


@contextlib.contextmanager
def _daemon(root: Path, cfg: Any) -> Iterator[tuple[Any, Any]]:
    """The commands that run experiments (run, confirm): the sandbox required, the workspace's daemon lock held
    (one daemon a workspace) while they run, with the store and the executor."""
    from looper.executors import make_executor
    from looper.workspace.lock import DaemonLock

    _require_sandbox(cfg)
    lock = DaemonLock(root / ".looper" / "daemon.lock")
    lock.acquire()
    try:
        yield _store(root), make_executor(root, cfg.executor)
    finally:
        lock.release()


@app.command()
@cli_errors
def run(max_experiments: int | None = typer.Option(None, "--max-experiments", min=0),
        until: str | None = typer.Option(None, "--until", help="HH:MM: start no experiment after this."),
        tag: str | None = typer.Option(None, "--tag")) -> None:
    """Run the loop until a stop rule, a signal, a harness error (exit 3) or a stuck loop (exit 4)."""
    import faulthandler

    try:  # a crash in native code (NVML, CUDA's driver) leaves every thread's stack on stderr
        faulthandler.enable()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation: a stderr without a file (a test runner)
        pass
    from looper.agents import make_agent
    from looper.config import notify_urls
    from looper.night.display import make_display
    from looper.night.loop import Loop
    from looper.night.notify import AppriseNotifier

    root = _root()
    _require_workspace(root)
    cfg = _config(root, **{"loop.max_experiments": max_experiments, "loop.until": until, "loop.tag": tag})
    program_text, program = _program(root)
    if cfg.agent.kind in STRATEGIES and getattr(program, "problems", None):
        raise UsageError(f"program.md cannot drive the {cfg.agent.kind} agent: " + "; ".join(program.problems))
    with _daemon(root, cfg) as (store, executor):
        agent = make_agent(cfg.agent, program, workspace=root)
        notifier = AppriseNotifier(notify_urls(cfg, os.environ), secrets=_secrets(cfg))
        log_path = root / ".looper" / "logs" / f"looper-{time.strftime('%Y%m%d')}.log"
        loop = Loop(root, cfg, store, executor, agent, notifier, make_display(log_path=log_path), secrets=_secrets(cfg),
                    program_md=program_text)
        loop.install_signals()
        code = loop.run()
    raise typer.Exit(code)


@app.command()
@cli_errors
def status() -> None:
    """What the daemon is doing now (read from the database; works while it runs)."""
    from looper.report.status import status_text
    from looper.workspace.lock import DaemonLock

    root = _root()
    lock = DaemonLock(root / ".looper" / "daemon.lock")
    typer.echo(status_text(_store(root), _config(root), lock))


@app.command()
@cli_errors
def history(as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
            status: str | None = typer.Option(None, help="Only this outcome (keep, discard, crash, ...)."),
            tag: str | None = typer.Option(None),
            since: str | None = typer.Option(None, help="ISO date or time."),
            until: str | None = typer.Option(None, help="ISO date or time.")) -> None:
    """Every experiment, oldest first."""
    from looper.report import history_json, history_rows, history_text

    if status is not None:
        from looper.core.verdicts.verdict import Outcome

        if status not in Outcome.values():
            raise UsageError(f"--status: {status!r} is not one of {', '.join(Outcome.values())}")
    rows = history_rows(_store(_root()), tag=tag, status=status, since=since, until=until)
    typer.echo(history_json(rows) if as_json else history_text(rows))


@app.command()
@cli_errors
def suggest(as_json: bool = typer.Option(False, "--json")) -> None:
    """The next experiment the planner would run, its phase, and why (from the history alone)."""
    from looper.agents.suggest import suggest as do_suggest

    root = _root()
    cfg = _config(root)
    out = do_suggest(root, cfg, _store(root))
    if as_json:
        typer.echo(json.dumps(out, indent=2, sort_keys=True, default=str))
    else:
        typer.echo(out["text"])


@app.command()
@cli_errors
def report(html: Path | None = typer.Option(None, "--html", help="Also write one self-contained HTML page."),
           since: str | None = typer.Option(None, help="ISO time; default: the last daemon run."),
           as_json: bool = typer.Option(False, "--json", help="Print the headline numbers and the confusion "
                                                              "matrices as one JSON object instead.")) -> None:
    """The morning report."""
    from looper.report import report_text, write_html

    root = _root()
    store = _store(root)
    if as_json:
        from looper.report.json_report import report_json

        typer.echo(json.dumps(report_json(store, root, since=since), indent=2, sort_keys=True, default=str))
    else:
        typer.echo(report_text(store, root, since=since))
    if html is not None:
        path = write_html(store, root, html, since=since)
        typer.echo(f"html report: {path}")


@app.command()
def verify(as_json: bool = typer.Option(False, "--json", help="Print exactly one verdict object.")) -> None:
    """One experiment of the current train.py, gated against the best, committed nowhere."""
    from looper.core.verdicts.verdict import Status, Verdict

    try:
        from looper.executors import make_executor
        from looper.night.display import Display
        from looper.night.loop import Loop
        from looper.night.notify import AppriseNotifier
        from looper.workspace.lock import DaemonLock

        root = _root()
        _require_workspace(root)
        cfg = _config(root)
        lock = DaemonLock(root / ".looper" / "daemon.lock")
        lock.acquire()
        try:
            executor = make_executor(root, cfg.executor)
            loop = Loop(root, cfg, _store(root), executor, agent=None,
                        notifier=AppriseNotifier([]), display=Display(sys.stderr), secrets=_secrets(cfg))
            try:
                v = loop.verify()
            finally:
                executor.close()  # boxes started ahead of runs ([loop] prestart)
        finally:
            lock.release()
    except LooperError as exc:
        v = Verdict.errored(str(exc))
    except Exception as exc:  # a check that cannot answer is an error, never a pass
        v = Verdict.errored(f"looper verify crashed: {type(exc).__name__}: {exc}")
    if as_json:
        typer.echo(json.dumps(v.to_json_dict(), sort_keys=True))
    else:
        typer.echo(f"{v.status.value.upper()}")
        for b in v.blocking:
            typer.echo(f"  - {b}")
        for k, val in sorted(v.metrics.items()):
            typer.echo(f"  {k}: {val}")
    raise typer.Exit({Status.PASS: 0, Status.FAIL: 1, Status.ERROR: 2}[v.status])


@app.command()
@cli_errors
def confirm(tag: str | None = typer.Option(None, "--tag"),
            transfer: bool = typer.Option(False, "--transfer", help="Then the transfer check: the best and the "
                                                                    "baseline trained at \\[confirm] transfer_steps.")) -> None:
    """Re-run the tag's best on fresh seeds and compare it with the tag's baseline (the confirmed figure)."""
    from looper.night.display import Display
    from looper.night.loop import Loop
    from looper.night.notify import AppriseNotifier
    from looper.store import queries

    root = _root()
    _require_workspace(root)
    cfg = _config(root, **{"loop.tag": tag})
    with _daemon(root, cfg) as (store, executor):
        loop = Loop(root, cfg, store, executor, agent=None, notifier=AppriseNotifier([]),
                    display=Display(sys.stderr), secrets=_secrets(cfg))
        loop.install_signals()  # a signal ends the current run; what was confirmed so far is recorded
        if transfer and cfg.confirm.transfer_steps == 0:
            raise UsageError("--transfer: [confirm] transfer_steps is 0 (off): set it to the longer step budget, "
                             "or -1 for a multiple of the night's")
        try:
            cid = loop.confirm()
            error = loop.transfer(cid, "command") if transfer else None
        finally:
            executor.close()  # boxes started ahead of runs ([loop] prestart)
    record = next(c for c in queries.confirmations(store, cfg.loop.tag) if c.id == cid)
    typer.echo(record.headline)
    typer.echo(f"{record.runs} run(s), {record.seconds / 60:.1f} min of runs, {record.wall_seconds / 60:.1f} min wall")
    if transfer:
        from looper.store.transfers import transfer_records

        done = [t for t in transfer_records(store, cfg.loop.tag) if t.confirmation_id == cid]
        if done:
            t = done[-1]
            typer.echo(f"transfer check: {t.headline}")
            typer.echo(f"{t.runs} run(s), {t.seconds / 60:.1f} min of runs, {t.wall_seconds / 60:.1f} min wall")
        else:
            typer.echo("transfer check: not run (the confirmation confirmed no gain to carry to a longer budget)")
        if error is not None:
            raise error
        if done and done[-1].status != "holds":
            raise typer.Exit(1)
    raise typer.Exit(0 if record.status == "confirmed" else 1)


def _register_export() -> None:
    from looper.ship.cli import export_command, predict_command

    app.command("export")(cli_errors(export_command))
    app.command("predict")(cli_errors(predict_command))


_register_export()


@baseline_app.command("approve")
@cli_errors
def baseline_approve(experiment_id: int = typer.Argument(..., help="A finished, measured experiment.")) -> None:
    """Write the next dated baseline file from experiment ID (never overwrites)."""
    from looper.workspace.baselines import approve

    root = _root()
    path = approve(_store(root), root / "baselines", experiment_id)
    typer.echo(f"approved experiment {experiment_id} as {path.relative_to(root)}")


def main() -> None:
    try:
        app()
    except LooperError as exc:  # pragma: no cover - _errors catches these first
        typer.echo(f"looper: {exc}", err=True)
        sys.exit(exit_code_for(exc))
    except KeyboardInterrupt:
        sys.exit(0)
    except SystemExit:
        raise
    except Exception as exc:
        typer.echo(f"looper: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_HARNESS)


if __name__ == "__main__":
    main()
