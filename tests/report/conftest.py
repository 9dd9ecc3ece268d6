"""Fixtures of the report tests; the seeded database itself is built in ``report_seed.py``.

Seeds are built once per session and copied per test (``seed_copies.py``): each test gets its
own database file, as if it had built the seed itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from report_seed import Seeded, build
from seed_copies import SeedCopies


@pytest.fixture(scope="session")
def _seed_templates(tmp_path_factory: pytest.TempPathFactory) -> SeedCopies:
    return SeedCopies(tmp_path_factory)


@pytest.fixture
def seed_copy(_seed_templates: SeedCopies) -> Iterator[SeedCopies]:
    """``seed_copy(build, root, **kwargs)``: this test's own copy of a seeded store at ``root``;
    closed after the test."""
    yield _seed_templates
    _seed_templates.close()


@pytest.fixture
def seeded(tmp_path: Path, seed_copy: SeedCopies) -> Seeded:
    return seed_copy(build, tmp_path)
