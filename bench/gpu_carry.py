#!/usr/bin/env python3
"""What an offline GPU machine needs carried for the GPU check (bench/gpu_check.py): the wheels of looper's runtime
dependencies its Python lacks, and the Debian packages of the tools it may lack (bubblewrap, git).

    python bench/gpu_carry.py --have "torch numpy scipy ..." --wheels .whl --debs .deb
    python bench/gpu_carry.py --have-file NAMES --list          # what it would fetch, nothing downloaded

``--have`` names the distributions the GPU machine's Python already holds (its ``pip list``, or its image's
package list). The rest of looper's runtime requirements, followed from this interpreter's installed metadata with
their markers evaluated for the target (CPython 3.12 on Linux x86_64, extras left out), are downloaded at this
interpreter's versions, the ones looper's tests pass with, as cp312 manylinux wheels (``pip download --no-deps
--only-binary=:all:``); a requirement of a distribution the machine has is its own (not followed). The Debian
packages come from this machine's apt (``apt-get download``). The wheels are what ``gpu_check.py --wheels`` installs
(with ``--no-deps``: nothing else is resolved there), so one version of each: the folder's other wheels are removed
first. It prints each thing fetched and the bytes, and exits 1 naming what it could not fetch.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = "looper"
# The target's interpreter (the GPU machines' image: Python 3.12, Linux x86_64): markers are evaluated for it.
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
# A distribution the machine may hold under another name that provides the same import (pip --no-deps never asks).
PROVIDED_BY = {"opencv-python": ("opencv-python-headless", "opencv-contrib-python", "opencv-contrib-python-headless")}
DEBS = ("bubblewrap", "libcap2", "libselinux1")  # what gpu_check's facts step unpacks where bwrap is missing (--deb
# adds more: git's is 7 MB, and the GPU machines' image has git)
# Versions carried instead of this interpreter's: polars 1.x needs a 50 MB runtime wheel (polars-runtime-32) that
# does not fit a 64 MiB carry beside the rest; Ultralytics asks for polars >= 0.20, and 0.20.31 is one wheel of 27 MB
# with no requirements (a pinned distribution's own requirements are not followed: name them with --pin too).
PINS = ("polars==0.20.31",)


def needed(root: str, have: Iterable[str], dists: Mapping[str, tuple[str, list[str]]],
           env: Mapping[str, str] = TARGET, pins: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The distributions ``root`` needs that ``have`` lacks, with their versions in ``dists`` (canonical name ->
    (version, requirement strings)), following requirements whose markers hold in ``env`` with no extra; and the
    requirements needed but not in ``dists`` (cannot be fetched at a known version). ``root`` itself is not listed.
    A distribution in ``pins`` (canonical name -> version) is carried at that version, its requirements not
    followed (``dists`` holds another version's)."""
    pins = {canonicalize_name(n): v for n, v in (pins or {}).items()}
    held = {canonicalize_name(n) for n in have}
    held |= {n for n, others in PROVIDED_BY.items() if held & {canonicalize_name(o) for o in others}}
    out: dict[str, str] = {}
    unknown: list[str] = []
    todo, seen = [canonicalize_name(root)], {canonicalize_name(root)}
    while todo:
        name = todo.pop()
        for text in dists[name][1]:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(dict(env)):
                continue
            dep = canonicalize_name(req.name)
            if dep in seen or dep in held:
                continue
            seen.add(dep)
            if dep in pins:
                out[dep] = pins[dep]
            elif dep not in dists:
                unknown.append(str(req))
            else:
                out[dep] = dists[dep][0]
                todo.append(dep)
    return dict(sorted(out.items())), sorted(unknown)


def installed() -> dict[str, tuple[str, list[str]]]:
    """This interpreter's distributions: canonical name -> (version, requirement strings)."""
    return {canonicalize_name(d.metadata["Name"]): (d.version, list(d.requires or [])) for d in md.distributions()}


def names(text: str) -> set[str]:
    """Distribution names from a ``pip list`` or a list separated by commas or white space (versions dropped)."""
    out = set()
    for word in re.split(r"[,\s]+", text):
        word = word.strip()
        if word and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", word) and not re.fullmatch(r"[\d.]+\w*", word) \
                and word.lower() not in ("package", "version"):
            out.add(canonicalize_name(word))
    return out


def download_wheel(name: str, version: str, into: Path) -> str | None:
    """pip's cp312 manylinux wheel of ``name==version`` into ``into``; None, or why not."""
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
            "3.12", "--implementation", "cp", *(a for p in PLATFORMS for a in ("--platform", p)), "-d", str(into),
            f"{name}=={version}"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    return None if p.returncode == 0 else (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:200]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--have", default="", help="the distributions the GPU machine's Python holds")
    ap.add_argument("--have-file", type=Path, help="the same, read from a file (a pip list, or names)")
    ap.add_argument("--wheels", type=Path, default=Path(".whl"), help="where the wheels go (default .whl)")
    ap.add_argument("--debs", type=Path, help="where the Debian packages go (default: none fetched)")
    ap.add_argument("--pin", action="append", default=list(PINS), help="NAME==VERSION to carry instead of this "
                    f"interpreter's (repeatable; default {', '.join(PINS)})")
    ap.add_argument("--deb", action="append", default=list(DEBS), help=f"a Debian package more (default {DEBS})")
    ap.add_argument("--list", action="store_true", help="print what would be fetched; download nothing")
    args = ap.parse_args(argv)
    have = names(args.have) | (names(args.have_file.read_text()) if args.have_file else set())
    pins = dict(pin.split("==", 1) for pin in args.pin)
    want, unknown = needed(ROOT, have, installed(), pins=pins)
    for line in unknown:
        print(f"not installed here, so no version to carry: {line}")
    if args.list:
        print("\n".join(f"{n}=={v}" for n, v in want.items()))
        return 1 if unknown else 0
    args.wheels.mkdir(parents=True, exist_ok=True)
    for old in args.wheels.glob("*.whl"):  # one version of each: pip install of two stops the whole install
        old.unlink()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda nv: download_wheel(*nv, args.wheels), want.items()))
    failed = {n: why for n, why in zip(want, answers, strict=True) if why}
    for n, why in failed.items():
        print(f"no wheel for {n}=={want[n]}: {why}")
    if args.debs:
        args.debs.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(["apt-get", "download", *args.deb], cwd=args.debs, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            failed["debs"] = p.stderr.strip()[-200:]
            print(f"apt-get download failed: {failed['debs']}")
    wheels = sorted(args.wheels.glob("*.whl"))
    debs = sorted(args.debs.glob("*.deb")) if args.debs else []
    size = sum(f.stat().st_size for f in [*wheels, *debs])
    print(f"{len(wheels)} wheels in {args.wheels}, {len(debs)} Debian packages; {size / 2**20:.1f} MiB in all")
    return 1 if failed or unknown else 0


if __name__ == "__main__":
    sys.exit(main())
