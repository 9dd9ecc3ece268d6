"""A scripted agent: the :class:`looper.agents.base.Agent` Protocol, in-process.

Each proposal sets knobs of the fixture train.py (``{"QUALITY": 0.7}``); when the script is used up the
agent is exhausted (the night's stop rule)."""

from __future__ import annotations

import re
from typing import Any

from looper.agents.base import AgentContext, Proposal


class ScriptedAgent:
    name = "scripted"

    def __init__(self, *steps: dict[str, Any]) -> None:
        self.steps = list(steps)

    def propose(self, ctx: AgentContext) -> Proposal:
        if not self.steps:
            return Proposal(new_source=None, description="nothing left", exhausted=True)
        step = self.steps.pop(0)
        source, changes = ctx.train_py, {}
        for name, value in step.items():
            pattern = re.compile(rf"^{name} = (.*?)(  #.*)?$", re.M)
            found = pattern.search(source)
            assert found, f"the fixture train.py has no knob {name}"
            changes[name] = (found.group(1), value)
            source = pattern.sub(lambda m, n=name, v=value: f"{n} = {v!r}{m.group(2) or ''}", source, count=1)
        desc = ", ".join(f"{n} {old} -> {new!r}" for n, (old, new) in changes.items())
        return Proposal(new_source=source, description=desc, knobs=changes)
