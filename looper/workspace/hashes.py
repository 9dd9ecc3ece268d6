"""Content hashes of the fixed files and of the data folder.

The harness pins these when a tag starts and compares them before and after every run:
train.py is untrusted code, and a change to evaluate.py, prepare.py or the data is
detected rather than trusted. The fixed files import the matching rules and the class
list from the installed looper package (``SCORING_MODULES``): those decide a score as
much as evaluate.py does, so they are pinned with the fixed files, and upgrading looper
in the middle of a tag is a harness error that names the changed module.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import secrets
from pathlib import Path

from looper.core.propose.pysource import parse
from looper.data.keyfile import create_once
from looper.errors import HarnessError

_CHUNK = 1 << 20

# The synthetic test pages' seed is a secret (prepare.py draws it with ``secrets``): prepare.py is
# told where it is kept through this variable, never on its command line (an argv is public).
TEST_SEED_ENV = "LOOPER_TEST_SEED_FILE"


def secret_seed_file(root: Path) -> Path:
    """Where a workspace (or an ssh host's remote folder) keeps the test pages' secret seed: its
    ``.looper/`` folder, which no sandbox shows; mode 600; never in the manifest, the database or a log."""
    return Path(root) / ".looper" / "test_seed"


def run_seed_key(root: Path) -> bytes:
    """The workspace's key for the values of its runs' seeds (looper.core.run.seedvalue): 32 random bytes in
    ``.looper/run_seed_key`` (mode 600, made once, never shown to a sandbox or an agent, never logged)."""
    path = Path(root) / ".looper" / "run_seed_key"
    if not path.exists():
        create_once(path, lambda: secrets.token_hex(32) + "\n")
    text = path.read_text().strip()
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise HarnessError(f"{path}: not a run seed key (64 hex digits); remove it to draw a new one (the tag's "
                         "runs then get other seed values: start a new tag)")
    return bytes.fromhex(text)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


# Ultralytics writes ``labels.cache`` next to the label folders the first time it trains on
# a data set: a derived index, not data. Everything else under the data folder is hashed.
IGNORED = ("*.cache",)


def tree_hash(root: Path, ignore: tuple[str, ...] = IGNORED) -> tuple[str, int]:
    """One hash over every file under ``root`` (path and content); returns (hash, files)."""
    root = Path(root)
    entries = []
    for p in sorted(root.rglob("*")):
        if any(p.match(pattern) for pattern in ignore):
            continue
        if p.is_file() or p.is_symlink():
            rel = p.relative_to(root).as_posix()
            digest = file_sha256(p) if p.is_file() else "symlink:" + str(p.readlink())
            entries.append(f"{rel}\0{digest}\n")
    h = hashlib.sha256("".join(entries).encode())
    return h.hexdigest(), len(entries)


# The looper modules that evaluate.py and prepare.py import (with their packages' __init__):
# page matching and metrics, and the class list. Paths relative to the folder holding the
# installed ``looper`` package; the ONE list of what, besides the fixed files, decides a score.
SCORING_MODULES = ("looper/__init__.py", "looper/core/__init__.py", "looper/core/scoring/__init__.py",
                   "looper/core/scoring/metrics.py",
                   "looper/core/scoring/tilegrid.py", "looper/core/scoring/classes.py", "looper/data/__init__.py", "looper/data/tiles.py",
                   "looper/data/keyfile.py")
PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # the folder that holds this ``looper`` package


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package that is not there
        return False


def _missing_names(module: str, names: list[str]) -> list[str]:
    """The names ``from module import ...`` asks for that this looper's module does not define (a name that
    moved to another module: tile_grid left looper.core.scoring.metrics for looper.core.scoring.tilegrid)."""
    try:
        mod = importlib.import_module(module)
    except Exception:  # its hash names the change
        return []
    return [n for n in names if n != "*" and not hasattr(mod, n) and not _importable(f"{module}.{n}")]


def stale_imports(folder: Path, names: tuple[str, ...]) -> list[str]:
    """One line for each looper module (or name from one) a fixed file in ``folder`` imports and this looper no
    longer has (a workspace made by an older looper, whose evaluate.py names what moved); [] when all are here."""
    problems = []
    for name in names:
        p = Path(folder) / name
        if not p.is_file():
            continue
        try:
            tree = parse(p.read_text(), name)  # again where another thread's parse disturbed it (core.propose.pysource)
        except (SyntaxError, UnicodeDecodeError):
            continue  # its hash names the change
        wanted: dict[str, list[str]] = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and not n.level:
                wanted.setdefault(n.module, []).extend(a.name for a in n.names)
            elif isinstance(n, ast.Import):
                for a in n.names:
                    wanted.setdefault(a.name, [])
        again = f"the workspace was made by an older looper; copy {name} from a new `looper init` and start a new tag"
        for mod in sorted(m for m in wanted if m == "looper" or m.startswith("looper.")):
            if not _importable(mod):
                problems.append(f"{name} imports {mod}, which this looper does not have: {again}")
            elif gone := _missing_names(mod, wanted[mod]):
                problems.append(f"{name} imports {', '.join(gone)} from {mod}, which this looper does not have "
                                f"there: {again}")
    return problems


def fixed_hashes(folder: Path, names: tuple[str, ...], modules: tuple[str, ...] = SCORING_MODULES,
                 package_parent: Path = PACKAGE_PARENT) -> dict[str, str | None]:
    """sha256 of each fixed file in ``folder`` and of each scoring module of the installed
    looper package (keyed by its path, e.g. ``looper/core/scoring/metrics.py``); None for a missing file."""
    out: dict[str, str | None] = {}
    for base, rels in ((Path(folder), names), (Path(package_parent), modules)):
        for name in rels:
            p = base / name
            out[name] = file_sha256(p) if p.is_file() else None
    return out


# The workspace's starting checkpoints (train.py's PRETRAINED names one): weights as data, pinned
# with the fixed files when a tag starts, keyed "pretrained/<file>". The folder sits in the
# workspace (not in the checkouts: git ignores it) and train.py reads it through LOOPER_PRETRAINED_DIR.
PRETRAINED_DIR = "pretrained"


def pretrained_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file in ``root/pretrained/`` (none: {}), keyed ``pretrained/<name>``."""
    folder = Path(root) / PRETRAINED_DIR
    if not folder.is_dir():
        return {}
    return {f"{PRETRAINED_DIR}/{p.name}": file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}
