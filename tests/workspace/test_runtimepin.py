"""The runtime pin's fingerprint (looper/workspace/runtimepin.py) on real folders: a planted .pth, a planted
module, a file changed inside a package and a removed file each change what is pinned; Python's own
bytecode caches do not."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from looper.core.tag import runtime as core_runtime
from looper.workspace import runtimepin


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    (site / "pkg" / "sub").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("x = 1\n")
    (site / "pkg" / "sub" / "m.py").write_text("y = 2\n")
    (site / "good.pth").write_text("/somewhere\n")
    return site


def _fingerprint(site: Path) -> dict[str, str]:
    return {f"runtime:{site}/{n}": runtimepin._entry(str(site / n)) for n in sorted(os.listdir(site))
            if n not in runtimepin.SKIP_DIRS}


def test_plants_and_edits_are_seen_bytecode_caches_are_not(tmp_path: Path) -> None:
    site = _site(tmp_path)
    pin = _fingerprint(site)
    (site / "pkg" / "__pycache__").mkdir()
    (site / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert core_runtime.changes(pin, _fingerprint(site), "now") == []

    (site / "zz_boost.pth").write_text("import boost\n")
    (site / "boost.py").write_text("print('planted')\n")
    got = core_runtime.changes(pin, _fingerprint(site), "now")
    assert got == [f"runtime file {site}/boost.py was added now (not in the tag's pin)",
                   f"runtime file {site}/zz_boost.pth was added now (not in the tag's pin)"]

    for p in (site / "zz_boost.pth", site / "boost.py"):
        p.unlink()
    time.sleep(0.01)
    (site / "pkg" / "sub" / "m.py").write_text("y = 3\n")  # same size, new mtime
    (site / "good.pth").write_text("/elsewhere\n")  # a .pth is pinned by its bytes
    got = core_runtime.changes(pin, _fingerprint(site), "now")
    assert [g.split(" changed")[0] for g in got] == [f"runtime file {site}/good.pth", f"runtime file {site}/pkg"]


def test_a_link_is_pinned_by_its_target(tmp_path: Path) -> None:
    (tmp_path / "l").symlink_to("/etc/hostname")
    (tmp_path / "fifo").mkdir()
    assert runtimepin._entry(str(tmp_path / "l")) == "symlink:/etc/hostname"
    assert runtimepin._entry(str(tmp_path / "nothing")) == "other"
    os.mkfifo(tmp_path / "fifo" / "p")  # never opened: only its metadata
    assert runtimepin._entry(str(tmp_path / "fifo")).startswith("tree:")


@pytest.mark.e2e
def test_this_runtime_is_fingerprinted_interpreter_site_packages_and_looper() -> None:
    t0 = time.perf_counter()
    got = runtimepin.runtime_hashes()
    seconds = time.perf_counter() - t0
    assert got[runtimepin.INTERPRETER].startswith("sha256:")
    site = runtimepin.site_folders()[0]
    assert any(k.startswith(f"runtime:{site}/") and k.endswith(".pth") for k in got)  # the editable install's
    assert got["runtime:looper/core/scoring/metrics.py"].startswith("sha256:")
    assert got[f"runtime:{site}/torch"].startswith("tree:")
    assert not any("__pycache__" in k for k in got)
    assert seconds < 5.0, seconds
