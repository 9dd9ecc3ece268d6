"""bench/gpu_carry.py: what an offline GPU machine needs carried for the GPU check, from looper's requirements as
this interpreter has them installed, less what the machine holds. The download itself needs the network and is
not run here (it was run by hand: bench/RESULTS.md, "A GPU night")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import gpu_carry  # noqa: E402

DISTS = {
    "root": ("1.0", ["a>=1", "PyYAML", "held", "win-only; platform_system == 'Windows'", "old-py; python_version < '3.12'",
                     "dev-tool; extra == 'dev'", "opencv-python", "missing>=2", "pinned"]),
    "a": ("1.1", ["b_c", "root"]),  # a cycle back to the root
    "b-c": ("2.0", []),
    "pyyaml": ("6.0", []),
    "held": ("3.0", ["only-through-held"]),
    "only-through-held": ("1.0", []),
    "win-only": ("1.0", []), "old-py": ("1.0", []), "dev-tool": ("1.0", []),
    "opencv-python": ("4.10", []),
    "pinned": ("1.44", ["runtime-of-the-new-version"]),
    "runtime-of-the-new-version": ("1.44", []),
}


def test_the_carry_follows_requirements_for_the_target_and_stops_at_what_the_machine_holds() -> None:
    want, unknown = gpu_carry.needed("root", {"Held", "opencv_python_headless"}, DISTS, pins={"Pinned": "0.20"})
    assert want == {"a": "1.1", "b-c": "2.0", "pinned": "0.20", "pyyaml": "6.0"}
    assert unknown == ["missing>=2"]  # needed, not installed here: no version to carry, and said so


def test_a_machine_without_the_headless_opencv_gets_the_one_ultralytics_names() -> None:
    want, _ = gpu_carry.needed("root", set(), DISTS)
    assert want["opencv-python"] == "4.10" and want["held"] == "3.0" and want["only-through-held"] == "1.0"
    assert want["pinned"] == "1.44" and "runtime-of-the-new-version" in want  # unpinned: this version's needs


def test_markers_are_the_target_s_not_this_interpreter_s() -> None:
    dists = {"root": ("1", ["new; python_version >= '3.12'", "old; python_version < '3.12'"]),
             "new": ("1", []), "old": ("1", [])}
    assert gpu_carry.needed("root", set(), dists)[0] == {"new": "1"}  # the target is 3.12, whatever runs this


@pytest.mark.parametrize(("text", "names"), [
    ("torch, numpy scipy\nPyYAML", {"torch", "numpy", "scipy", "pyyaml"}),
    ("Package    Version\n---------- -------\ntorch      2.11.0\nopencv_python_headless 4.12.0.88\n",
     {"torch", "opencv-python-headless"}),
    ("", set()),
])
def test_the_machine_s_names_read_from_a_list_or_a_pip_list(text: str, names: set[str]) -> None:
    assert gpu_carry.names(text) == names


def test_looper_s_own_carry_holds_its_runtime_needs_and_none_of_its_dev_tools(capsys: pytest.CaptureFixture) -> None:
    """This interpreter's real metadata, a machine holding torch and the scientific stack: Ultralytics and the
    pydantic core are carried, pinned polars at its pin (without the 1.x runtime), and no test tool."""
    have = "torch torchvision numpy scipy pillow pyyaml requests psutil matplotlib opencv-python-headless typer rich"
    assert gpu_carry.main(["--have", have, "--list"]) == 0
    listed = dict(line.split("==") for line in capsys.readouterr().out.split())
    assert {"ultralytics", "pydantic-core", "sqlalchemy", "gitpython", "apprise", "openai", "tenacity"} <= set(listed)
    assert listed["polars"] == "0.20.31" and "polars-runtime-32" not in listed
    assert not {"torch", "numpy", "pytest", "ruff", "mlflow", "looper"} & set(listed)
