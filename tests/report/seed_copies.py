"""Seeded stores built ONCE per session; every test gets its own copy of the SQLite file.

Building a seed runs the real Store API (and, for ``report_seed_noise``, the real gate): 0.1 to
0.3 s each, which the fast tier paid once per test. :class:`SeedCopies` builds each distinct
seed (builder + keyword arguments) once into a session folder, closes it, and hands each test a
copy of that folder (the database file and anything beside it) at the test's own path, opened
with a fresh :class:`~looper.store.Store`. A test that writes (approves a baseline, adds a
``looper.toml``) changes only its own copy, so tests stay independent of their order.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from looper.store import Store

S = TypeVar("S")


class SeedCopies:
    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._built: dict[tuple[str, str, tuple[tuple[str, Any], ...]], Any] = {}
        self.opened: list[Store] = []

    def __call__(self, build: Callable[..., S], root: Path, **kwargs: Any) -> S:
        """A fresh copy at ``root`` (a folder, made if missing) of ``build(folder, **kwargs)``."""
        key = (build.__module__, build.__qualname__, tuple(sorted(kwargs.items())))
        template = self._built.get(key)
        if template is None:
            folder = self._factory.mktemp("seed_template")
            template = build(folder, **kwargs)
            template.store.close()  # every connection closed: the file is complete on disk
            self._built[key] = template
        root.mkdir(parents=True, exist_ok=True)
        for f in template.root.iterdir():
            if f.is_file():
                shutil.copy2(f, root / f.name)
        rest = {f.name: copy.deepcopy(getattr(template, f.name)) for f in dataclasses.fields(template)
                if f.name not in ("root", "store")}
        store = Store(root)
        self.opened.append(store)
        return type(template)(root=root, store=store, **rest)

    def close(self) -> None:
        """Close the stores handed out since the last close (the per-test fixture calls this)."""
        while self.opened:
            self.opened.pop().close()
