"""Agents behind one protocol: ``planner`` (default, no LLM), ``random`` and ``evolve`` (search
strategies, no LLM), ``command``, ``openai``.

    make_agent(agent_cfg, program=None, **overrides) -> Agent

``agent_cfg`` is ``looper.config.AgentSection`` or any object with the attributes ``kind``,
``command``, ``base_url``, ``model``, ``api_key_env``, ``timeout_seconds``, ``max_failures``.
``overrides`` go to the agent's constructor (tests: ``runner``, ``sleep``, ``base_delay``,
``env``, ``max_tries``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looper.agents.base import (
    Agent,
    AgentContext,
    ClassScore,
    ExperimentView,
    HistoryView,
    Proposal,
    ProposalRejected,
)
from looper.agents.program import Program
from looper.errors import ConfigError, HarnessError

KINDS = ("planner", "random", "evolve", "command", "openai")

__all__ = ["Agent", "AgentContext", "ClassScore", "ExperimentView", "HistoryView", "Proposal",
           "ProposalRejected", "KINDS", "make_agent"]


def make_agent(agent_cfg: Any, program: Program | None = None, workspace: Path | None = None,
               **overrides: Any) -> Agent:
    """The agent ``agent_cfg.kind`` names; ConfigError naming the key when the section is unusable.
    A ``command`` agent gets its box (looper/agents/sandbox.py) from ``[agent] sandbox``, ``network``,
    ``pass_env`` and ``readable``; ``workspace`` is never shown in it."""
    kind = getattr(agent_cfg, "kind", None)
    timeout = getattr(agent_cfg, "timeout_seconds", 900)
    max_failures = getattr(agent_cfg, "max_failures", 2) or 2
    try:
        if kind in ("planner", "random", "evolve"):
            from looper.agents.planner import EvolveAgent, PlannerAgent, RandomAgent

            cls = {"planner": PlannerAgent, "random": RandomAgent, "evolve": EvolveAgent}[kind]
            return cls(program, seed=int(getattr(agent_cfg, "seed", 0) or 0), **overrides)
        if kind == "command":
            from looper.agents.command import CommandAgent

            if not (getattr(agent_cfg, "command", "") or "").strip():
                raise ConfigError("agent.command is empty: kind = \"command\" needs a command to run")
            from looper.agents.sandbox import AgentBox, missing_bwrap

            try:
                box = AgentBox.from_section(agent_cfg, workspace)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
            problem = missing_bwrap(box)
            if problem:
                raise ConfigError(problem)
            return CommandAgent(agent_cfg.command, timeout_seconds=timeout, max_failures=max_failures,
                                **{"box": box, **overrides})
        if kind == "openai":
            from looper.agents.openai import OpenAIAgent

            for key in ("base_url", "model"):
                if not (getattr(agent_cfg, key, "") or "").strip():
                    raise ConfigError(f"agent.{key} is empty: kind = \"openai\" needs it")
            return OpenAIAgent(agent_cfg.base_url, agent_cfg.model,
                               getattr(agent_cfg, "api_key_env", "OPENAI_API_KEY"),
                               timeout_seconds=timeout, **overrides)
    except HarnessError as exc:  # constructor checks of configuration
        raise ConfigError(str(exc)) from exc
    raise ConfigError(f"agent.kind {kind!r} is not one of {', '.join(KINDS)}")
