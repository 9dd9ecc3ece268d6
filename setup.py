"""One build step: the workspace files at the repository root ship inside the built package.

`looper init` copies the workspace files (``WORKSPACE_FILES`` in looper/workspace/create.py:
program.md, train.py, prepare.py, evaluate.py, looper.toml) into a new workspace. In the
repository they sit at the root, where people read and edit them; a built wheel carries copies
in ``looper/workspace_template/`` so that a non-editable install (``pip install .``, pipx) can
make a workspace. An editable install (``pip install -e .``) gets no copies: ``looper init``
reads the files from the source tree. Everything else is configured in pyproject.toml.
"""

from __future__ import annotations

import ast
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TEMPLATE = Path("looper") / "workspace_template"  # inside the built package


def workspace_files() -> tuple[str, ...]:
    """``WORKSPACE_FILES`` of looper/workspace/create.py, read without importing looper (the build has
    none of its dependencies): the one list of what a workspace is made of."""
    tree = ast.parse((ROOT / "looper" / "workspace" / "create.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "WORKSPACE_FILES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("looper/workspace/create.py defines no WORKSPACE_FILES = (...) to ship")


class BuildPyWithWorkspace(build_py):
    """build_py, then the root's workspace files copied into the build's looper/workspace_template/."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # editable: looper init reads the source tree
            return
        dest = Path(self.build_lib) / TEMPLATE
        self.mkpath(str(dest))
        for name in workspace_files():
            src = ROOT / name
            if not src.is_file():
                raise RuntimeError(f"{name} is missing at the root of the source tree ({ROOT}); it ships as "
                                   "looper's workspace template (an sdist lists it in MANIFEST.in)")
            self.copy_file(str(src), str(dest / name), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if not self.editable_mode:
            outputs += [str(Path(self.build_lib) / TEMPLATE / name) for name in workspace_files()]
        return outputs


setup(cmdclass={"build_py": BuildPyWithWorkspace})
