"""The evaluator's MATCHES.json travels with METRICS.json out of the evaluation sandbox's output
folder (looper/executors/evaluator.collect_metrics), only as a plain file and only with a METRICS.json."""

from __future__ import annotations

from pathlib import Path

from looper.executors import evaluator


def _out(tmp_path: Path) -> Path:
    out = tmp_path / "eval" / "out"
    out.mkdir(parents=True)
    return out


def test_matches_move_with_metrics(tmp_path: Path) -> None:
    out = _out(tmp_path)
    (out / "METRICS.json").write_text("{}")
    (out / "MATCHES.json").write_text('{"schema": 1}')
    assert evaluator.collect_metrics(out, tmp_path / "METRICS.json")
    assert (tmp_path / "MATCHES.json").read_text() == '{"schema": 1}' and not (out / "MATCHES.json").exists()


def test_a_linked_matches_file_is_not_moved(tmp_path: Path) -> None:
    out = _out(tmp_path)
    (out / "METRICS.json").write_text("{}")
    (tmp_path / "secret").write_text("x")
    (out / "MATCHES.json").symlink_to(tmp_path / "secret")
    assert evaluator.collect_metrics(out, tmp_path / "METRICS.json")
    assert not (tmp_path / "MATCHES.json").exists()


def test_no_metrics_no_matches(tmp_path: Path) -> None:
    out = _out(tmp_path)
    (out / "MATCHES.json").write_text("{}")
    assert not evaluator.collect_metrics(out, tmp_path / "METRICS.json")
    assert not (tmp_path / "MATCHES.json").exists()
