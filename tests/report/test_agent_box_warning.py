"""The morning report warns when a command agent ran outside its box ([agent] sandbox = "none"),
naming the experiments (their recorded config); a boxed agent or another kind: no warning."""

from __future__ import annotations

from types import SimpleNamespace

from looper.report.attention import _sandbox_warnings


def _night(figures: dict[int, dict]) -> SimpleNamespace:
    return SimpleNamespace(sandbox_off=[], sandbox_config=None, network_on=[], figures=figures)


def test_an_unboxed_command_agent_is_a_warning_naming_its_experiments() -> None:
    figures = {3: {"agent_kind": "command", "agent_sandbox": "none"}, 4: {"agent_kind": "command", "agent_sandbox": "none"},
               5: {"agent_kind": "command", "agent_sandbox": "bwrap"}, 6: {"agent_kind": "planner", "agent_sandbox": "none"}}
    got = _sandbox_warnings(_night(figures))  # type: ignore[arg-type]
    assert len(got) == 1 and got[0].level == "warn"
    assert 'WITHOUT its box ([agent] sandbox = "none") in 2 experiment(s): #3 #4' in got[0].text


def test_a_boxed_agent_needs_no_warning() -> None:
    assert _sandbox_warnings(_night({1: {"agent_kind": "command", "agent_sandbox": "bwrap"}})) == []  # type: ignore[arg-type]
