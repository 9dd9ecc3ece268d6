"""The tag's state, as the store has it: its checkout, what it pinned when it began, the noise its
baseline measured and the step budget its warm-up fitted. Every write goes through :class:`TagState`,
which refreshes what it holds from the store, so no caller keeps a stale copy."""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looper.core.run.seedvalue import seed_value
from looper.core.verdicts.verdict import Outcome
from looper.errors import HarnessError
from looper.store import ExperimentRecord, Store, TagRecord
from looper.workspace import trees
from looper.workspace.gitops import Workspace, Worktree
from looper.workspace.hashes import run_seed_key


@dataclass(frozen=True)
class TagNoise:
    """What the tag's baseline measured over its seeds: the score's seed sd (None: unmeasured), the
    seed scores and seeds, and each class's recall spread."""

    sigma: float | None = None
    scores: tuple[float, ...] = ()
    seeds: tuple[int, ...] = ()
    class_recall_sd: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> TagNoise:
        s = stored or {}
        return cls(sigma=s.get("sigma"), scores=tuple(s.get("scores") or ()), seeds=tuple(s.get("seeds") or ()),
                   class_recall_sd=dict(s.get("class_recall_sd") or {}))

    def as_dict(self) -> dict[str, Any]:
        return {"sigma": self.sigma, "scores": list(self.scores), "seeds": list(self.seeds),
                "class_recall_sd": dict(self.class_recall_sd)}


@dataclass(frozen=True)
class TagBudget:
    """The step budget the tag's warm-up fitted (``[loop] max_steps = "auto"``; 0: none pinned) and the
    warm-up run it came from; with a fixed step budget, what its fit run said (``fit``: core.run.budget's
    WallClockFit) and the wall clock its runs get (``wall_seconds``; 0: ``[loop] budget_seconds``)."""

    max_steps: int = 0
    warmup: dict[str, Any] | None = None
    wall_seconds: int = 0
    fit: dict[str, Any] | None = None

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> TagBudget:
        s = stored or {}
        return cls(max_steps=int(s.get("max_steps") or 0), warmup=s.get("warmup"),
                   wall_seconds=int(s.get("wall_seconds") or 0), fit=s.get("fit"))

    def as_dict(self) -> dict[str, Any]:
        out = {"max_steps": self.max_steps, "warmup": self.warmup} if self.max_steps or self.warmup else {}
        return {**out, "wall_seconds": self.wall_seconds, "fit": self.fit} if self.fit else out


class TagState:
    """One tag of a workspace: its branch's checkout (``wt``, once :meth:`open`), its pinned record
    (``pinned``), its noise and budget, and the store queries that read them."""

    def __init__(self, name: str, root: Path, store: Store, cfg_max_steps: int | str) -> None:
        self.name = name
        self.root = Path(root)
        self.ws = Workspace(self.root)
        self.wt: Worktree | None = None
        self._store = store
        self._cfg_max_steps = cfg_max_steps
        self._pinned: TagRecord | None = None
        self._seed_key: bytes | None = None

    # ------------------------------------------------------------------ the checkout and the record
    def open(self) -> Worktree:
        """The branch's own checkout (made when missing); the record as the store has it."""
        self.wt = self.ws.ensure_worktree(self.name)
        self.refresh()
        return self.wt

    @property
    def pinned(self) -> TagRecord | None:
        """What the tag pinned when it began (fixed files, data hash), None before it began."""
        return self._pinned

    def refresh(self) -> TagRecord | None:
        self._pinned = self._store.tag_record(self.name)
        return self._pinned

    def pin(self, *, branch: str, base_commit: str, fixed_hashes: dict[str, Any], data_hash: str,
            started_at: str | None = None) -> TagRecord | None:
        """Pin (or re-pin) the tag's fixed files and data; a new pin forgets the noise and the budget."""
        self._store.put_tag(self.name, branch=branch, base_commit=base_commit, fixed_hashes=fixed_hashes,
                            data_hash=data_hash, noise=None, started_at=started_at)
        return self.refresh()

    # ------------------------------------------------------------------ noise and budget
    def noise(self) -> TagNoise:
        return TagNoise.of(self._pinned.noise if self._pinned else None)

    def budget(self) -> TagBudget:
        return TagBudget.of(self._pinned.noise if self._pinned else None)

    def set_budget(self, budget: TagBudget) -> None:
        """A new step budget: the noise measured under the old one is forgotten with it."""
        self._store.set_tag_noise(self.name, budget.as_dict())
        self.refresh()

    def set_noise(self, noise: TagNoise) -> None:
        """The baseline's noise, beside the step budget it was measured under."""
        self._store.set_tag_noise(self.name, {**self.budget().as_dict(), **noise.as_dict()})
        self.refresh()

    def max_steps(self) -> int:
        """The step budget every run of the tag trains (LOOPER_MAX_STEPS; 0: the wall clock alone):
        ``[loop] max_steps``, or with ``"auto"`` the one the tag's warm-up measured (0 until then)."""
        if self._cfg_max_steps != "auto":
            return int(self._cfg_max_steps)
        return self.budget().max_steps

    def wall_seconds(self, budget_seconds: float) -> float:
        """The wall clock every run of the tag trains under: ``[loop] budget_seconds`` (given), or what the tag's
        fit run raised it to (a fixed step budget that needs more on this machine: core.run.budget)."""
        return float(self.budget().wall_seconds or budget_seconds)

    def with_max_steps(self, steps: int) -> TagState:
        """The same tag whose runs train ``steps`` steps (the transfer check's longer budget); the checkout,
        the record and the store are shared."""
        other = copy.copy(self)
        other._cfg_max_steps = int(steps)
        return other

    # ------------------------------------------------------------------ queries
    def best(self) -> ExperimentRecord:
        best = self._store.best(self.name)
        if best is None:
            raise HarnessError(f"tag {self.name} has no baseline or kept experiment to compare against")
        return best

    def kept_baselines(self) -> list[ExperimentRecord]:
        return self._store.find_experiments(tag=self.name, kind="baseline", status=Outcome.KEEP)

    def last_kept_commit(self) -> str | None:
        commits = [r.commit for r in self._store.find_experiments(tag=self.name, status=Outcome.KEEP) if r.commit]
        return commits[-1] if commits else None

    def branch_tip(self) -> str:
        assert self.wt is not None
        return self.ws.repo.git.rev_parse(f"refs/heads/{self.wt.branch}").strip()

    def seed_value(self, seed: int) -> int:
        """The tag's seed number ``seed`` as train.py sees it (looper.core.run.seedvalue; the key read once)."""
        if self._seed_key is None:
            self._seed_key = run_seed_key(self.root)
        return seed_value(self._seed_key, self.name, seed)

    def runs_dir(self, exp_id: int, role: str, seed: int) -> Path:
        """A new, empty run folder ``runs/<tag>/<exp>/<role>-s<seed>`` (an old one is removed)."""
        d = self.root / "runs" / self.name / f"{exp_id:05d}" / f"{role}-s{seed}"
        if os.path.lexists(d) and trees.remove_tree(d):  # a tree an earlier run made: moved aside if it stays
            os.rename(d, d.with_name(f"{d.name}.left-{time.time_ns()}"))
        d.mkdir(parents=True)
        return d
