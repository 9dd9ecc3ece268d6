"""The Python runtime a sandbox shows: which folders an interpreter needs, found without running its
site module (so no ``.pth`` file's code runs in the harness's process tree).

:func:`runtime_paths` answers for one interpreter (its prefixes, the ``site-packages`` on its import
path, the looper package folder); :data:`SITE_DIRS` is the code that finds the ``site-packages`` folders,
shared with the evaluator's start-up (``looper.executors.sandbox.NOSITE``).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

# The site-packages folders of the running interpreter's environment, found without the site module
# (so without running any ``.pth`` file): its ``pyvenv.cfg`` names a venv; the base install's folders
# count only where that allows system packages; a ``.pth`` file's folder lines are added as site adds
# them, its ``import`` lines (code) never run. Defines ``dirs``; shared by :data:`ASK` and :data:`NOSITE`.
SITE_DIRS = (
    "import os, sys, sysconfig\n"
    "env, v = os.path.dirname(os.path.dirname(sys.executable)), 'python%d.%d' % sys.version_info[:2]\n"
    "cfg, dirs, system = os.path.join(env, 'pyvenv.cfg'), [], True\n"
    "if os.path.isfile(cfg):\n"
    "    system = 'include-system-site-packages=true' in open(cfg).read().replace(' ', '').lower()\n"
    "    dirs += [os.path.join(env, lib, v, 'site-packages') for lib in (sys.platlibdir, 'lib')]\n"
    "if system:  # the base install's folders (Debian's dist-packages too); no .pth is read by asking\n"
    "    import site\n"
    "    dirs += [sysconfig.get_paths()[k] for k in ('purelib', 'platlib')] + site.getsitepackages()\n"
    "dirs = [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]\n"
    "for d in list(dirs):  # a .pth's folder lines, as site adds them; its import lines are never run\n"
    "    for name in sorted(n for n in os.listdir(d) if n.endswith('.pth')):\n"
    "        for line in open(os.path.join(d, name), errors='replace').read().splitlines():\n"
    "            line = line.rstrip()\n"
    "            extra_dir = os.path.join(d, line)\n"
    "            if line and not line.startswith(('#', 'import ', 'import\\t')) and os.path.isdir(extra_dir):\n"
    "                dirs.append(os.path.abspath(extra_dir))\n"
    "dirs = list(dict.fromkeys(dirs))\n"
)
# ``python -I -S -c`` run once per interpreter (no site module: a planted ``.pth`` never runs in the
# harness's own process tree): where its runtime lives and where it finds the looper package.
ASK = (SITE_DIRS + "import importlib.util, json\n"
        "sys.path += dirs\n"
        "s = importlib.util.find_spec('looper')\n"
        "print(json.dumps({'prefixes': [env if os.path.isfile(cfg) else sys.prefix, sys.prefix, sys.base_prefix,"
        " sys.exec_prefix, sys.base_exec_prefix], 'path': sys.path,"
        " 'looper': list(s.submodule_search_locations or []) if s else []}))\n")


@functools.lru_cache(maxsize=16)
def interpreter(python: str) -> dict[str, list[str]] | None:
    """What ``python`` reports of itself, or None where it cannot be asked here (a node-only path)."""
    import json

    from looper import proc

    exe = shutil.which(python) or python
    if not os.path.isfile(exe):
        return None
    try:
        done = proc.run([exe, "-I", "-S", "-c", ASK], inherit_env=False, timeout=60, cwd="/")
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.ok else None
    except (OSError, ValueError, IndexError):
        return None
    return found if isinstance(found, dict) else None


def runtime_paths(python: str) -> tuple[list[Path], list[Path]]:
    """(folders of the Python runtime, looper package folders) to show, read-only.

    The interpreter's own prefixes (a venv and its base install), the ``site-packages`` folders on
    its import path (a ``.pth`` can add another venv's), and the looper package folder wherever it
    is found (an editable install maps it into a source tree: only the package folder is shown,
    never the tree). Where the interpreter cannot be asked here (it exists only on a compute node),
    its folder's parent and this process's ``site-packages`` stand in."""
    import looper

    exe = Path(shutil.which(python) or python)
    roots = [exe.parent.parent, Path(os.path.realpath(exe)).parent.parent]
    packages = [Path(looper.__file__).resolve().parent]
    asked = interpreter(python)
    entries = list(sys.path) if asked is None else list(asked.get("path", []))
    if asked is not None:
        roots += [Path(p) for p in asked.get("prefixes", []) if p]
        packages += [Path(p) for p in asked.get("looper", []) if p]
    roots += [Path(p) for p in entries if p and os.path.isabs(p) and Path(p).name in ("site-packages", "dist-packages")]
    roots += [Path(p) for p in entries if p and p.endswith(".zip") and os.path.isfile(p)]
    return roots, packages
