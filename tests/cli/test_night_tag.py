"""`looper export` and `looper predict` ship the last night run's tag by default (looper.ship.export.night_tag):
the latest daemon start's tag, else the latest experiment's, else looper.toml's."""

from __future__ import annotations

from pathlib import Path

from looper.ship.export import night_tag
from looper.store import Store


def test_the_last_night_runs_tag_wins_over_the_configured_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "experiments.db")
    assert night_tag(store, "from-toml") == "from-toml"  # nothing ran
    store.start_experiment(tag="n1", kind="baseline", config={}, description="baseline")
    assert night_tag(store, "from-toml") == "n1"  # no start event: the latest experiment's tag
    store.add_event("n2", "start", "daemon started")
    store.add_event("n3", "stop", "daemon stopped")
    assert night_tag(store, "from-toml") == "n2"
    store.add_event("n4", "start", "daemon started")
    assert night_tag(store, "n1") == "n4"
    store.close()
