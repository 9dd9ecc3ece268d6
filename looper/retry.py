"""The one retry policy: a bounded number of tries with exponential backoff (tenacity).

Every place that retries (ssh control commands, rsync, the OpenAI-compatible agent) calls
:func:`retry_call`; none writes its own loop. The call to retry raises an exception to ask
for another try; :func:`retry_call` re-raises the last one when the tries are spent, so the
caller keeps its own words for the failure.

Waits are ``base_delay * 2**n`` capped at ``max_delay`` (n = 0, 1, 2, ...). An exception
that carries a server's wish (``hint(exc)`` returns seconds, e.g. an HTTP ``Retry-After``)
waits that long instead, capped at ``max_delay`` as well.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

T = TypeVar("T")


def retry_call(fn: Callable[[], T], *, tries: int, retry_if: Callable[[BaseException], bool],
               base_delay: float = 0.5, max_delay: float = 5.0,
               hint: Callable[[BaseException], float | None] | None = None,
               sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()`` until it returns, at most ``tries`` times while ``retry_if(exc)`` holds."""
    backoff = wait_exponential(multiplier=base_delay, max=max_delay)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        wished = hint(exc) if (hint is not None and exc is not None) else None
        if wished is not None and wished >= 0:
            return min(float(wished), max_delay)
        return backoff(state)

    retrying = Retrying(stop=stop_after_attempt(max(1, tries)), wait=wait, retry=retry_if_exception(retry_if),
                        sleep=sleep, reraise=True)
    return retrying(fn)
