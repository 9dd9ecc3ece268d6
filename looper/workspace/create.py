"""`looper init`: a new workspace from the same files as the project's own root."""

from __future__ import annotations

import shutil
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import git

from looper.errors import WorkspaceError
from looper.workspace.gitops import IDENTITY

WORKSPACE_FILES = ("program.md", "train.py", "prepare.py", "evaluate.py", "looper.toml")

GITIGNORE = """\
# looper: built data, run outputs, daemon state and the database are not committed
/data/
/runs/
/.looper/
/pretrained/
experiments.db
experiments.db-*
__pycache__/
"""

PRESETS = {
    # A short night on this CPU: what `make demo` runs (under 20 minutes on 2 cores, set-up included); the
    # figures behind each value are in bench/RESULTS.md ("Demo night", "Calibration", "Search strategies").
    # max_steps 169: the fixed step regime the gate was calibrated in ("auto" followed the machine's hour);
    # budget_seconds 180 is only the wall clock's ceiling. seed_jobs 2: two one-thread runs side by side, the
    # calibration pools' regime and about 1.3 x the runs an hour. baseline_seeds 8: noise is measured, and the
    # baseline's seeds are what the gate and the confirmation lean on; noise_reruns 3: 2 then 4 seeds a
    # candidate. score_test "pooled": paired seeds barely correlate at this budget. confirm_seeds 4 and the
    # transfer check (2 x the steps, 3 fresh seeds a side): a gain at 169 steps can shrink when trained longer.
    "demo": {"loop": {"tag": "demo", "budget_seconds": 180, "grace_seconds": 30, "stall_seconds": 120,
                      "baseline_seeds": 8, "noise_reruns": 3, "max_steps": 169, "confirm_seeds": 4, "seed_jobs": 2},
             "gate": {"score_test": "pooled"},
             "confirm": {"transfer_steps": -1},  # a confirmed gain trained 2 x longer on 3 fresh seeds a side
             "data": {"scale": "demo"}},
    # What the test suite uses: seconds, not minutes, and 3 baseline seeds. max_steps 26 (two epochs of the
    # tiny data) with budget_seconds 180 as the ceiling: a run ends when its steps are done, so the same seed
    # scores the same on a loaded test machine as on an idle one (a wall clock or "auto" would not).
    "tiny": {"loop": {"tag": "tiny", "budget_seconds": 180, "grace_seconds": 15, "stall_seconds": 60,
                      "baseline_seeds": 3, "noise_reruns": 1, "max_steps": 26},
             "data": {"scale": "tiny"}},
}


def template_root() -> Traversable:
    """Where the workspace files come from: ``looper/workspace_template/`` in an installed package
    (setup.py copies the root's files there at build time), else the source tree that holds the
    package (an editable install)."""
    packaged = resources.files("looper") / "workspace_template"
    source = Path(__file__).resolve().parents[2]  # looper/workspace/create.py -> the source tree
    for root in (packaged, source):
        if all((root / n).is_file() for n in WORKSPACE_FILES):
            return root
    missing = [n for n in WORKSPACE_FILES if not (source / n).is_file()]
    raise WorkspaceError(f"looper's workspace files are neither in the installed package ({packaged}) nor next "
                         f"to it ({source}: missing {', '.join(missing)}); reinstall looper from its source "
                         "tree (pip install . or pip install -e .)")


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def set_keys(toml_text: str, keys: dict[str, dict[str, object]]) -> str:
    """Each ``[section] key = value`` of ``keys`` set in a looper.toml text, keeping its comments; a key the text
    does not hold is an error (the template holds every key looper writes)."""
    lines = toml_text.splitlines()
    for section, values in keys.items():
        for key, value in values.items():
            now = ""
            for i, line in enumerate(lines):
                s = line.strip()
                if s.startswith("["):
                    now = s
                elif now == f"[{section}]" and s.split("=")[0].strip() == key:
                    comment = line[line.index("#"):] if "#" in line else ""
                    lines[i] = f"{key} = {_toml_value(value)}" + (f"  {comment}" if comment else "")
                    break
            else:
                raise WorkspaceError(f"looper.toml template has no {section}.{key} to set")
    return "\n".join(lines) + "\n"


def apply_preset(toml_text: str, preset: str) -> str:
    """Set the preset's keys in a looper.toml text, keeping its comments."""
    if preset not in PRESETS:
        raise WorkspaceError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    return set_keys(toml_text, PRESETS[preset])


def shipped_pretrained() -> Traversable:
    """The starting checkpoint looper ships (package data, made by ``python -m looper.pretrain``)."""
    return resources.files("looper") / "pretrained" / "start.safetensors"


def _guess(data: Path) -> str:
    from looper.data.formats import guess_format

    return guess_format(data)


def _import_into(target: Path, data: Path, source: object) -> None:
    """The export into ``target/data`` (``[data] dir`` is "data" in the template), set explicitly."""
    from looper.data.importer import copy_looper, import_source

    out = target / "data"
    done = copy_looper(Path(data), out) if source is None else import_source(source, out)  # type: ignore[arg-type]
    p = target / "looper.toml"
    p.write_text(set_data_dir(p.read_text(), "data"))
    prog = target / "program.md"
    prog.write_text(program_data_facts(prog.read_text(), done.classes, done.instances, done.pages))


SYNTHETIC_FACT = "- 26 symbol classes of HVAC drawings"
START_CLASSES = "the same 26\n  classes)"


def program_data_facts(text: str, classes: tuple[str, ...], instances: dict[str, int] | None,
                       pages: dict[str, int]) -> str:
    """program.md's domain facts for imported data: the class list and counts of the data instead of
    the synthetic data set's 26 HVAC classes, and, when the classes differ from the shipped checkpoint's,
    that train.py fine-tunes it as a transfer. A program.md without the template's sentences is kept."""
    from looper.core.scoring.classes import CLASSES

    counts = ", ".join(f"{c} {instances[c]}" if instances else c for c in classes)
    fact = (f"- {len(classes)} classes, imported from a labelled export (`looper data import`): {counts} "
            f"(instances over every split); pages: {pages.get('train', 0)} train, {pages.get('val', 0)} val, "
            f"{pages.get('test', 0)} test.")
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(SYNTHETIC_FACT):
            j = i + 1
            while j < len(lines) and lines[j].startswith("  "):
                j += 1
            lines[i:j] = [fact]
            break
    text = "\n".join(lines)
    if tuple(classes) != CLASSES:
        text = text.replace(START_CLASSES, "looper's 26 synthetic HVAC\n  classes, not this data's: train.py "
                                           "loads every tensor that fits and starts the class layer fresh, a "
                                           "transfer)")
    return text


def set_data_dir(toml_text: str, value: str) -> str:
    """``[data] dir = value`` in a looper.toml text, keeping its comments."""
    return set_keys(toml_text, {"data": {"dir": value}})


def template_toml(preset: str | None = None) -> str:
    """The looper.toml ``looper init`` writes, with ``preset``'s keys."""
    text = (template_root() / "looper.toml").read_text()
    return apply_preset(text, preset) if preset else text


def init_workspace(target: Path, preset: str | None = None, data: Path | None = None,
                   data_format: str | None = None, images: Path | None = None,
                   keys: dict[str, dict[str, object]] | None = None) -> Path:
    """A new workspace in ``target``; with ``data``, that export imported into its data/ folder (the
    default ``[data] dir``; looper.data.importer) before anything is written when it has errors; ``keys``
    (``[section] key = value``, as ``looper init --gpu`` sizes them) set in its looper.toml after the preset's."""
    target = Path(target).resolve()
    if target.exists() and any(target.iterdir()):
        raise WorkspaceError(f"{target} exists and is not empty: choose a new folder")
    source = None
    if data is not None:
        from looper.data.formats import read_source

        fmt = data_format or _guess(data)
        source = None if fmt == "looper" else read_source(data, fmt, images)
    src = template_root()
    target.mkdir(parents=True, exist_ok=True)
    try:
        for name in WORKSPACE_FILES:
            (target / name).write_bytes((src / name).read_bytes())
        if preset or keys:
            p = target / "looper.toml"
            p.write_text(set_keys(template_toml(preset), keys or {}))
        (target / ".gitignore").write_text(GITIGNORE)
        start = shipped_pretrained()  # train.py's PRETRAINED: weights as data, outside git like data/
        if not start.is_file():
            raise WorkspaceError(f"looper's starting checkpoint {start} is missing: reinstall looper, or make it with "
                                 "python -m looper.pretrain")
        (target / "pretrained").mkdir()
        (target / "pretrained" / "start.safetensors").write_bytes(start.read_bytes())
        (target / "baselines").mkdir()
        (target / "baselines" / ".gitkeep").write_text("")
        if data is not None:
            _import_into(target, data, source)
        repo = git.Repo.init(target, initial_branch="main")
        with repo.git.custom_environment(**IDENTITY):
            repo.git.add("--all")
            repo.git.commit("--no-verify", "-m", "looper workspace")
    except Exception:
        shutil.rmtree(target, ignore_errors=True)  # no half-made workspace
        raise
    return target
