"""Walking and removing a tree that a candidate or an agent wrote (issue 48): iterative, bounded, ``lstat``-based.

A train.py or an agent controls the shape of what it leaves: a folder 1,100 levels deep, names of 255
bytes (so paths longer than ``PATH_MAX``), links to anywhere, folders without permissions, a million
entries. ``shutil.rmtree`` recurses (``RecursionError`` past ~1,000 levels, which ``ignore_errors`` does
not catch) and ``Path.rglob`` recurses too. Here nothing recurses and no link is followed:

- :func:`remove_tree` empties a folder by moving each sub-folder up to the top one (``renameat``) before
  emptying it, so it never holds more than two folders open and never builds a long path; it returns
  words when something stayed, never raises;
- :func:`walk` lists every entry (its path relative to the top, its ``lstat``) through folder
  descriptors (no path is longer than one name), depth-first, with at most ``max_depth`` folders open
  and at most ``max_entries`` entries; what it could not reach is counted, never raised.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_ENTRIES = 5_000_000  # entries removed or listed before giving up (a bound on the work, not a quota)
MAX_DEPTH = 64  # folders deep that walk() goes (each level holds one descriptor open)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(name: str, dir_fd: int | None) -> int:
    """A descriptor of the folder ``name`` (never through a link); made readable first when it is not."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=dir_fd)  # a folder left without permissions (the owner may)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _fresh_name(top: int, n: itertools.count) -> str:
    while True:
        name = f".looper-rm-{next(n)}"
        try:
            os.stat(name, dir_fd=top, follow_symlinks=False)
        except FileNotFoundError:
            return name


def _empty(fd: int, top: int, is_top: bool, moved: list[str], n: itertools.count) -> int:
    """Empty the folder ``fd``: files and links unlinked, folders moved up into ``top`` (kept in ``moved``,
    to be emptied in turn) or, in ``top`` itself, only noted in ``moved``. Returns the entries handled."""
    done = 0
    while True:
        handled = 0
        with os.scandir(fd) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    if is_top:
                        moved.append(e.name)
                    else:
                        new = _fresh_name(top, n)
                        os.rename(e.name, new, src_dir_fd=fd, dst_dir_fd=top)
                        moved.append(new)
                else:
                    os.unlink(e.name, dir_fd=fd)
                handled += 1
        done += handled
        if is_top or not handled:  # the top folder is read once (its folders stay there, noted)
            return done


def remove_tree(path: str | Path, max_entries: int = MAX_ENTRIES) -> str | None:
    """Remove ``path`` (a folder and all under it, a file or a link; a link is never followed) without
    recursion. None when it is gone (or was never there); otherwise words saying what stayed and why."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} could not be removed: {exc.strerror or exc}"
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
            return None
        top = _open_dir(str(path), None)
    except OSError as exc:
        return f"{path} could not be removed: {exc.strerror or exc}"
    done, n = 0, itertools.count()
    try:
        for _ in range(3):  # the top folder read again only if something stayed in it
            moved: list[str] = []
            done += _empty(top, top, True, moved, n)
            while moved and done <= max_entries:
                name = moved.pop()
                fd = _open_dir(name, top)
                try:
                    done += _empty(fd, top, False, moved, n)
                finally:
                    os.close(fd)
                os.rmdir(name, dir_fd=top)
            if moved:
                return f"{path} could not be removed: more than {max_entries} entries (stopped there)"
            try:
                os.rmdir(path)
                return None
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
        return f"{path} could not be removed: it was not empty after three passes"
    except OSError as exc:
        return f"{path} could not be removed entirely: {exc.strerror or exc} ({done} entries removed)"
    finally:
        os.close(top)


@dataclass
class Walk:
    """Every entry under ``root`` (not ``root`` itself) as (path relative to root, lstat), iterated once.
    After the iteration: ``entries`` listed, ``too_deep`` folders not entered (deeper than ``max_depth``),
    ``unreadable`` folders that could not be opened, ``truncated`` when ``max_entries`` stopped it."""

    root: Path
    max_entries: int = MAX_ENTRIES
    max_depth: int = MAX_DEPTH
    entries: int = 0
    too_deep: int = 0
    unreadable: int = 0
    truncated: bool = False
    _stack: list[tuple[int, str, list[str]]] = field(default_factory=list, repr=False)

    def _list(self, fd: int, rel: str) -> Iterator[tuple[str, os.stat_result]]:
        subdirs: list[str] = []
        with os.scandir(fd) as it:
            for e in it:
                if self.entries >= self.max_entries:
                    self.truncated = True
                    break
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                self.entries += 1
                if stat.S_ISDIR(st.st_mode):
                    subdirs.append(e.name)
                yield (f"{rel}/{e.name}" if rel else e.name), st
        self._stack.append((fd, rel, subdirs))

    def __iter__(self) -> Iterator[tuple[str, os.stat_result]]:
        try:
            top = os.open(self.root, _DIR_FLAGS)
        except OSError:
            self.unreadable += 1
            return
        try:
            yield from self._list(top, "")
            while self._stack and not self.truncated:
                fd, rel, subdirs = self._stack[-1]
                if not subdirs:
                    self._stack.pop()
                    os.close(fd)
                    continue
                name = subdirs.pop()
                if len(self._stack) >= self.max_depth:
                    self.too_deep += 1
                    continue
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    self.unreadable += 1
                    continue
                yield from self._list(sub, f"{rel}/{name}" if rel else name)
        finally:
            for fd, _, _ in self._stack:
                os.close(fd)
            self._stack.clear()


def read_bounded(root: Path, rel: str, limit: int) -> bytes | None:
    """The bytes of the plain file ``rel`` under ``root`` (no link followed on the way or at the end), or
    None when it is not a plain file or holds more than ``limit`` bytes (its size checked before reading)."""
    fd = -1
    try:
        fd = os.open(root, _DIR_FLAGS)
        parts = rel.split("/")
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        f = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        if fd >= 0:
            os.close(fd)
        return None
    os.close(fd)
    with os.fdopen(f, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = fh.read(limit + 1)
    return data if len(data) <= limit else None
