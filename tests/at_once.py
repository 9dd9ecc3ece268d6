"""Calls released together from several threads (the first runs of a night starting side by side)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def at_once(call: Callable[[], T], n: int = 8) -> tuple[list[T], list[BaseException]]:
    """``call`` from ``n`` threads held at a barrier and released together: what they returned, what they raised."""
    gate, got, errors = threading.Barrier(n), [], []

    def one() -> None:
        gate.wait()
        try:
            got.append(call())
        except BaseException as exc:  # noqa: BLE001 (SystemExit too: prepare.py's words)
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got, errors
