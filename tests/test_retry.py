"""The one retry policy (looper/retry.py): tries, waits, the server's wish, what is not retried."""

from __future__ import annotations

import pytest

from looper.retry import retry_call


class Again(Exception):
    def __init__(self, wait: float | None = None) -> None:
        super().__init__("again")
        self.wait = wait


def _flaky(failures: list[Exception], calls: list[int]):  # noqa: ANN202
    def fn() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "done"

    return fn


def test_waits_double_up_to_the_cap_then_it_succeeds() -> None:
    sleeps: list[float] = []
    calls: list[int] = []
    got = retry_call(_flaky([Again() for _ in range(5)], calls), tries=6, retry_if=lambda e: isinstance(e, Again),
                     base_delay=0.5, max_delay=5.0, sleep=sleeps.append)
    assert got == "done" and len(calls) == 6 and sleeps == [0.5, 1.0, 2.0, 4.0, 5.0]


def test_the_last_failure_is_raised_when_tries_are_spent() -> None:
    sleeps: list[float] = []
    calls: list[int] = []
    with pytest.raises(Again):
        retry_call(_flaky([Again() for _ in range(9)], calls), tries=3, retry_if=lambda e: isinstance(e, Again),
                   sleep=sleeps.append)
    assert len(calls) == 3 and sleeps == [0.5, 1.0]


def test_a_failure_that_is_not_retryable_is_raised_at_once() -> None:
    sleeps: list[float] = []
    calls: list[int] = []
    with pytest.raises(KeyError):
        retry_call(_flaky([KeyError("x")], calls), tries=5, retry_if=lambda e: isinstance(e, Again),
                   sleep=sleeps.append)
    assert len(calls) == 1 and sleeps == []


def test_a_hint_replaces_the_backoff_and_is_capped() -> None:
    sleeps: list[float] = []
    retry_call(_flaky([Again(7.0), Again(None), Again(99.0)], []), tries=4, retry_if=lambda e: isinstance(e, Again),
               base_delay=1.0, max_delay=30.0, hint=lambda e: getattr(e, "wait", None), sleep=sleeps.append)
    assert sleeps == [7.0, 2.0, 30.0]
