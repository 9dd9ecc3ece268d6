"""The runtime pin: the Python runtime, its site-packages and the looper package, fingerprinted when a
tag starts and compared before each evaluation (issue 39: an agent planted a ``.pth`` file and a module
in site-packages, and the evaluator ran them).

One entry per thing a change can be named by, keyed ``runtime:<folder>/<name>``:

- ``runtime:interpreter``: the interpreter binary's sha256 (the file ``sys.executable`` resolves to);
- every top-level entry of every ``site-packages`` folder on this process's import path and of the
  standard library folder: a plain file there (a ``.pth``, ``sitecustomize.py``, ``usercustomize.py``,
  any top-level module) by the sha256 of its bytes; a folder (a package, ``*.dist-info``) by a digest
  of the path, size, mtime_ns, inode and mode of every file under it (not its bytes: torch alone is
  gigabytes); a symbolic link by its target;
- every file of the looper package (the harness's own code) by the sha256 of its bytes.

``__pycache__`` folders are left out (Python writes them as modules are first imported; the sandboxes
show the runtime read-only, and the evaluator runs with ``-I -S``). A file rewritten in place with
its size, mtime and inode all kept (``touch -d``, same length) is not seen inside a folder; see
docs/SECURITY.md for what this pin does and does not prove.

The comparison is pure: :func:`looper.core.tag.runtime.changes`.
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
from pathlib import Path

from looper.workspace.hashes import file_sha256

PREFIX = "runtime:"
INTERPRETER = PREFIX + "interpreter"
SKIP_DIRS = frozenset({"__pycache__"})
SITE_NAMES = ("site-packages", "dist-packages")


def _folder_digest(folder: str) -> str:
    """A digest of the metadata of every file and link under ``folder`` (no file is read)."""
    h = hashlib.sha256()
    stack = [folder]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            h.update(f"{top}\0unreadable {exc.errno}\n".encode())
            continue
        rows: list[tuple] = [top]  # type: ignore[list-item]
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if e.name not in SKIP_DIRS:
                    stack.append(e.path)
                continue
            st = e.stat(follow_symlinks=False)
            rows.append((e.name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode,
                         os.readlink(e.path) if e.is_symlink() else ""))
        h.update(repr(rows).encode())
    return h.hexdigest()


def _entry(path: str) -> str:
    if os.path.islink(path):
        return "symlink:" + os.readlink(path)
    if os.path.isdir(path):
        return "tree:" + _folder_digest(path)
    if os.path.isfile(path):
        return "sha256:" + file_sha256(Path(path))
    return "other"


def site_folders() -> list[str]:
    """The site-packages folders on this process's import path, and the standard library's folder."""
    found = [p for p in sys.path if p and os.path.isabs(p) and os.path.basename(p) in SITE_NAMES
             and os.path.isdir(p)]
    stdlib = sysconfig.get_paths().get("stdlib")
    found += [stdlib] if stdlib and os.path.isdir(stdlib) else []
    return list(dict.fromkeys(os.path.realpath(p) for p in found))


def package_folder() -> Path:
    import looper

    return Path(looper.__file__).resolve().parent


def runtime_hashes() -> dict[str, str]:
    """The fingerprint of this process's runtime (see the module's doc), keyed ``runtime:...``."""
    out = {INTERPRETER: "sha256:" + file_sha256(Path(os.path.realpath(sys.executable)))}
    folders = site_folders()
    for folder in folders:
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name in SKIP_DIRS or name in SITE_NAMES:  # a site-packages on the path is its own folder; one
                continue  # inside the standard library's folder that is not on the path is never imported from
            out[f"{PREFIX}{path}"] = _entry(path)
    pkg = package_folder()
    for p in sorted(pkg.rglob("*")):
        if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(pkg).parts):
            out[f"{PREFIX}looper/{p.relative_to(pkg).as_posix()}"] = "sha256:" + file_sha256(p)
    return out
