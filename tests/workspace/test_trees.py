"""looper.workspace.trees (issue 48): removing and walking a tree a candidate or an agent made, with the real
file system: 1,200 levels deep, names that make paths longer than PATH_MAX, links to what must survive,
folders without permissions, bounds on depth and entries."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from looper.workspace import trees


def _deep(root: Path, depth: int, name: str = "d", with_files: bool = True) -> None:
    """``depth`` nested folders under ``root`` (made through descriptors: no path is ever spelt out)."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            if with_files:
                os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
            os.mkdir(name, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


@pytest.fixture(autouse=True)
def _no_deep_tree_left(tmp_path: Path):  # noqa: ANN202
    """Each test's deep tree removed after it: pytest's own clean-up of old temporary folders is shutil.rmtree,
    which a 1,200-deep folder left there would crash three sessions later (RecursionError)."""
    yield
    assert trees.remove_tree(tmp_path / "t") is None


def test_shutil_rmtree_is_what_broke(tmp_path: Path) -> None:
    """The finding: rmtree recurses, and ignore_errors does not catch RecursionError."""
    _deep(tmp_path / "t", 1200, with_files=False)
    with pytest.raises(RecursionError):
        shutil.rmtree(tmp_path / "t", ignore_errors=True)
    assert trees.remove_tree(tmp_path / "t") is None and not (tmp_path / "t").exists()


@pytest.mark.parametrize("depth, name", [(1200, "d"), (40, "n" * 250)])  # 40 x 251 bytes: past PATH_MAX
def test_a_deep_tree_or_one_past_path_max_is_removed(tmp_path: Path, depth: int, name: str) -> None:
    _deep(tmp_path / "t", depth, name)
    assert trees.remove_tree(tmp_path / "t") is None
    assert not os.path.lexists(tmp_path / "t")


def test_links_are_removed_never_followed(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("x")
    t = tmp_path / "t"
    (t / "a" / "b").mkdir(parents=True)
    (t / "a" / "b" / "to_dir").symlink_to(keep)
    (t / "to_file").symlink_to(keep / "precious")
    os.mkfifo(t / "a" / "fifo")
    (t / "a" / "locked").mkdir()
    (t / "a" / "locked" / "inner").write_text("y")
    (t / "a" / "locked").chmod(0)
    (t / ".looper-rm-0").mkdir()  # a name the removal itself uses: no collision
    assert trees.remove_tree(t) is None and not t.exists()
    assert (keep / "precious").read_text() == "x"
    link = tmp_path / "link"
    link.symlink_to(keep)
    assert trees.remove_tree(link) is None and not os.path.lexists(link) and (keep / "precious").exists()


def test_a_wide_tree_and_what_is_not_there(tmp_path: Path) -> None:
    t = tmp_path / "t"
    for i in range(30):
        (t / f"d{i}" / "e").mkdir(parents=True)
        for j in range(50):
            (t / f"d{i}" / "e" / str(j)).write_text("z")
    assert trees.remove_tree(t) is None and not t.exists()
    assert trees.remove_tree(tmp_path / "never") is None


def test_remove_tree_stops_at_its_bound_and_says_so(tmp_path: Path) -> None:
    t = tmp_path / "t"
    for i in range(20):
        (t / f"d{i}").mkdir(parents=True)
        (t / f"d{i}" / "sub").mkdir()
    words = trees.remove_tree(t, max_entries=5)
    assert words and "more than 5 entries" in words


def test_walk_is_bounded_by_depth_and_entries_and_follows_no_link(tmp_path: Path) -> None:
    _deep(tmp_path / "t", 1200)
    (tmp_path / "t" / "up").symlink_to(tmp_path)  # a loop, if it were followed
    w = trees.Walk(tmp_path / "t")
    got = list(w)
    assert w.too_deep == 1 and w.entries == len(got) == 2 * trees.MAX_DEPTH + 1
    assert any(rel == "up" for rel, _ in got)
    w = trees.Walk(tmp_path / "t", max_entries=10)
    assert len(list(w)) == 10 and w.truncated
    assert list(trees.Walk(tmp_path / "none")) == []


def test_read_bounded(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"12345")
    (tmp_path / "a" / "l").symlink_to(tmp_path / "a" / "f")
    with open(tmp_path / "a" / "sparse", "wb") as f:
        f.truncate(1 << 30)
    assert trees.read_bounded(tmp_path, "a/f", 5) == b"12345"
    assert trees.read_bounded(tmp_path, "a/f", 4) is None  # its size is checked before it is read
    assert trees.read_bounded(tmp_path, "a/l", 99) is None  # a link is not followed
    assert trees.read_bounded(tmp_path, "a/sparse", 1 << 20) is None
    assert trees.read_bounded(tmp_path, "a/none", 9) is None
