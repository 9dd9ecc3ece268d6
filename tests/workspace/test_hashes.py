"""Content hashes: any change to the data is seen; Ultralytics' label caches are not data."""

from __future__ import annotations

from pathlib import Path

from looper.workspace.hashes import file_sha256, fixed_hashes, tree_hash


def _tree(root: Path) -> None:
    (root / "tiles" / "train").mkdir(parents=True)
    (root / "tiles" / "train" / "a.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    (root / "manifest.json").write_text("{}")


def test_tree_hash_sees_content_names_and_new_files(tmp_path: Path):
    _tree(tmp_path)
    h, n = tree_hash(tmp_path)
    assert n == 2
    (tmp_path / "tiles" / "train" / "a.txt").write_text("0 0.5 0.5 0.1 0.2\n")
    h2, _ = tree_hash(tmp_path)
    assert h2 != h
    (tmp_path / "tiles" / "train" / "a.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    assert tree_hash(tmp_path)[0] == h  # same content, same hash
    (tmp_path / "tiles" / "train" / "b.txt").write_text("")
    assert tree_hash(tmp_path)[0] != h
    (tmp_path / "tiles" / "train" / "b.txt").unlink()
    (tmp_path / "tiles" / "train" / "a.txt").rename(tmp_path / "tiles" / "train" / "c.txt")
    assert tree_hash(tmp_path)[0] != h  # a rename is a change


def test_label_caches_written_by_ultralytics_are_not_data(tmp_path: Path):
    _tree(tmp_path)
    h, _ = tree_hash(tmp_path)
    (tmp_path / "tiles" / "train.cache").write_bytes(b"\x00cache")
    (tmp_path / "tiles" / "train" / "labels.cache").write_bytes(b"\x00cache")
    assert tree_hash(tmp_path)[0] == h


def test_fixed_hashes_report_a_missing_file_as_none(tmp_path: Path):
    (tmp_path / "evaluate.py").write_text("print(1)\n")
    got = fixed_hashes(tmp_path, ("evaluate.py", "prepare.py"), modules=())
    assert got == {"evaluate.py": file_sha256(tmp_path / "evaluate.py"), "prepare.py": None}


def test_pretrained_hashes_cover_every_file_of_the_folder_by_relative_name(tmp_path: Path):
    from looper.workspace.hashes import pretrained_hashes

    assert pretrained_hashes(tmp_path) == {}
    (tmp_path / "pretrained").mkdir()
    (tmp_path / "pretrained" / "start.safetensors").write_bytes(b"a")
    (tmp_path / "pretrained" / "mine.safetensors").write_bytes(b"b")
    assert pretrained_hashes(tmp_path) == {"pretrained/mine.safetensors": file_sha256(tmp_path / "pretrained" / "mine.safetensors"),
                                           "pretrained/start.safetensors": file_sha256(tmp_path / "pretrained" / "start.safetensors")}


def test_runs_starting_together_on_a_new_workspace_read_one_whole_run_seed_key(tmp_path: Path) -> None:
    """The first runs of a tag side by side (the warm-up's, the baseline's seeds) ask for the run seed key at the
    same moment: each gets the same 32 bytes, none a file still being written ("not a run seed key", a halt: `make
    demo` once halted so). 40 new workspaces, 8 threads each released together."""
    from at_once import at_once

    from looper.workspace.hashes import run_seed_key

    for i in range(40):
        root = tmp_path / f"ws{i}"
        got, errors = at_once(lambda root=root: run_seed_key(root))
        assert errors == [] and len(got) == 8 and len(set(got)) == 1 and len(got[0]) == 32, (i, errors)
        assert oct((root / ".looper" / "run_seed_key").stat().st_mode & 0o777) == "0o600"
        assert sorted(p.name for p in (root / ".looper").iterdir()) == ["run_seed_key"]  # no temporary file left
