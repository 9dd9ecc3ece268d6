"""The error hierarchy and the one place that maps it to exit codes."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any


class LooperError(Exception):
    """Base of every error looper raises on purpose."""

    exit_code = 1


class UsageError(LooperError):
    """Bad command-line usage or configuration (exit 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """looper.toml or the environment is invalid; the message names the key."""


class WorkspaceError(UsageError):
    """The directory is not a usable workspace."""


class HarnessError(LooperError):
    """The harness could not do its job: halt, page a person (exit 3)."""

    exit_code = 3


class StuckError(LooperError):
    """The same failure keeps coming back: halt, page a person (exit 4)."""

    exit_code = 4


class LockHeld(UsageError):
    """Another daemon holds this workspace."""


EXIT_OK = 0
EXIT_USAGE = 2
EXIT_HARNESS = 3


def exit_code_for(exc: BaseException) -> int:
    """The single mapping from an exception to a process exit code."""
    if isinstance(exc, LooperError):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_OK
    return EXIT_HARNESS


def cli_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A command's LooperError as its exit code (:func:`exit_code_for`) with one line naming the problem;
    every command of the command line is wrapped in it."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LooperError as exc:
            import typer  # the command line's own library, needed only where a command failed

            typer.echo(f"looper: {exc}", err=True)
            raise typer.Exit(exit_code_for(exc)) from None

    return wrapper
