"""Fixtures of the report tests; the seeded database itself is built in ``report_seed.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from report_seed import Seeded, build


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[Seeded]:
    s = build(tmp_path)
    yield s
    s.store.close()
