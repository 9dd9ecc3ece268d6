"""The HTML report opened in a REAL headless Chromium: it loads, the plots are drawn, no
console errors. The screenshot is kept under ``artifacts/`` for a person to look at.

No chromium binary is a failure naming the apt line, unless the browser tier is skipped by
name (``LOOPER_SKIP_TIERS=browser``; tests/tiers.py). Set ``LOOPER_CHROMIUM`` to use a
given binary.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tiers
from report_seed import Seeded

from looper.report import write_html

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
# Chromium logs console output as ``...:INFO:CONSOLE:1] "message", source: ...`` (older builds:
# ``CONSOLE(1)``). The report has no script, so ANY console line is a problem.
_CONSOLE_ERROR = re.compile(r"Uncaught|:CONSOLE[:(]|SyntaxError|ReferenceError|TypeError")


def _chromium() -> str:
    if "browser" in tiers.skipped():
        tiers.require("browser", [])  # opted out by name: skip even where chromium exists
    for name in (os.environ.get("LOOPER_CHROMIUM"), "chromium", "chromium-browser", "google-chrome",
                 "google-chrome-stable"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    tiers.require("browser", ["a chromium binary on PATH (or LOOPER_CHROMIUM)"])
    raise AssertionError("unreachable: tiers.require skips or fails")


def _run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
            f"--user-data-dir={tmp / 'profile'}", "--no-first-run", "--hide-scrollbars", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp)})


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if _CONSOLE_ERROR.search(line)]


def _dom(tmp: Path, page: Path) -> str:
    """The page's DOM as Chromium built it; the page loaded and logged no console error."""
    r = _run(tmp, "--dump-dom", page.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    assert not _console_errors(r.stderr), _console_errors(r.stderr)
    return r.stdout


def _keep_screenshot(tmp: Path, page: Path, name: str, height: int) -> None:
    """Screenshot the page into ``artifacts/<name>_screenshot.png`` (no console error, not blank), and keep
    the page beside it as ``artifacts/<name>.html``."""
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"{name}_screenshot.png"
    shot.unlink(missing_ok=True)
    r = _run(tmp, f"--screenshot={shot}", f"--window-size=1200,{height}", page.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    assert not _console_errors(r.stderr), _console_errors(r.stderr)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses far smaller
    shutil.copy(page, ARTIFACTS / f"{name}.html")


def test_console_error_detector_catches_a_broken_page(tmp_path: Path) -> None:
    """The check below would be a lie if it could not see an error: prove that it can."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>undefinedThing();</script></body></html>")
    r = _run(tmp_path, "--dump-dom", bad.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    assert any("Uncaught ReferenceError" in e for e in _console_errors(r.stderr)), r.stderr[-2000:]
    noisy = tmp_path / "noisy.html"
    noisy.write_text("<!DOCTYPE html><html><body><script>console.error('boom');</script></body></html>")
    r = _run(tmp_path, "--dump-dom", noisy.as_uri())
    assert any("boom" in e for e in _console_errors(r.stderr)), r.stderr[-2000:]


def test_report_loads_in_chromium_with_plots_and_no_console_errors(seeded: Seeded, tmp_path: Path) -> None:
    page = write_html(seeded.store, seeded.root, tmp_path / "report.html")
    dom = _dom(tmp_path, page)
    assert "looper morning report" in dom
    scored = [e for e in seeded.store.find_experiments(since=seeded.since) if e.score is not None]
    points = re.findall(r'<circle class="pt [a-z]+" data-id="(\d+)"', dom)
    assert sorted(int(p) for p in points) == sorted(e.id for e in scored)
    for svg_id in ("score-plot", "class-heatmap", "time-bar", "outcome-bar"):
        assert f'id="{svg_id}"' in dom, svg_id
    assert 'id="running-best"' in dom
    _keep_screenshot(tmp_path, page, "report", 3000)
