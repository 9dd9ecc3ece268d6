"""Run every bench/bench_*.py and (re)write the generated section of bench/RESULTS.md.

    .venv/bin/python bench/run_all.py [--all] [--only NAME ...] [--timeout 1800] [--dry-run]

Each benchmark runs as its own process with the arguments listed in ``COMMANDS`` (a new
bench_*.py not listed there runs with none). Its exit status, wall time and output are put
between the markers ``<!-- run_all:begin -->`` and ``<!-- run_all:end -->`` of RESULTS.md
(added at the end when missing); everything outside the markers -- the hand-written
sections of other authors -- is kept byte for byte. A benchmark that fails or times out is
written as FAILED with its exit status and the end of its output, never left out. The slow
ML benchmarks (real training) run only with ``--all`` (or ``--only``); without it their
last generated result is kept as it was, or, when there is none, they are listed as skipped
with the command that runs them. ``--only`` refreshes the named benchmarks and
keeps the other entries of the previous generated section as they were.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "RESULTS.md"
BEGIN = "<!-- run_all:begin -->"
END = "<!-- run_all:end -->"
ENTRY = re.compile(r"^<!-- run_all:entry (?P<name>[\w.]+) -->$", re.M)


@dataclass(frozen=True)
class Command:
    args: tuple[str, ...] = ()
    slow: bool = False  # real training / minutes of CPU: only with --all


# Arguments per benchmark (paths relative to the repository root). Not listed: no arguments.
COMMANDS: dict[str, Command] = {
    "bench_overhead.py": Command(("--experiments", "12")),
    "bench_report.py": Command(("--repeats", "5")),
    "bench_fault_to_page.py": Command(("--runs", "5")),
    "bench_baseline.py": Command(("--data", "data", "--budget", "180", "--out", "bench/out/baseline"), slow=True),
    "bench_eval.py": Command(("--weights", "bench/out/baseline/budget180_seed0/weights.pt", "--data", "data",
                              "--pages", "6"), slow=True),
    "bench_noise.py": Command(("--scale", "tiny", "--steps", "200", "--clock-budget", "70"), slow=True),
    "bench_calibration.py": Command(("--scale", "demo", "--aa", "10", "--planted", "3", "--paired"), slow=True),
    "bench_startup.py": Command(("--data", "data", "--pairs", "3"), slow=True),
    "bench_prestart.py": Command(("--pairs", "3"), slow=True),
    "bench_memory.py": Command(("--data", "data", "--steps", "6"), slow=True),
    "bench_search.py": Command(("--minutes", "45"), slow=True),  # four arms of 45 minutes: hours
}
# Run order: listed ones first (bench_eval needs bench_baseline's weights), then the rest by name.
ORDER = ["bench_overhead.py", "bench_report.py", "bench_fault_to_page.py", "bench_baseline.py", "bench_eval.py"]


@dataclass
class Outcome:
    name: str
    command: str
    status: str  # "ok" | "FAILED" | "skipped"
    seconds: float
    output: str
    detail: str = ""


def discover() -> list[str]:
    found = sorted(p.name for p in HERE.glob("bench_*.py"))
    return [n for n in ORDER if n in found] + [n for n in found if n not in ORDER]


def command_line(name: str) -> list[str]:
    return [sys.executable, f"bench/{name}", *COMMANDS.get(name, Command()).args]


def shown(argv: list[str]) -> str:
    return " ".join([".venv/bin/python" if a == sys.executable else a for a in argv])


def run_one(name: str, timeout: float) -> Outcome:
    argv = command_line(name)
    t0 = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, errors="replace", timeout=timeout,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or "") if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
        return Outcome(name, shown(argv), "FAILED", time.monotonic() - t0, out,
                       f"timed out after {timeout:g} s")
    seconds = time.monotonic() - t0
    if done.returncode != 0:
        return Outcome(name, shown(argv), "FAILED", seconds, done.stdout + ("\n" if done.stdout else "") + done.stderr,
                       f"exit status {done.returncode}")
    return Outcome(name, shown(argv), "ok", seconds, done.stdout)


def tail(text: str, lines: int) -> str:
    kept = text.rstrip("\n").splitlines()
    cut = len(kept) - lines
    body = "\n".join(kept[-lines:])
    return (f"... ({cut} earlier lines left out)\n" if cut > 0 else "") + body


def render_entry(o: Outcome, when: str) -> str:
    head = f"<!-- run_all:entry {o.name} -->\n"
    title = f"### {o.name}: {o.status}" + (f" ({o.detail})" if o.detail else "")
    meta = f"run {when}, {o.seconds:.1f} s wall" if o.status != "skipped" else f"not run {when}"
    body = f"{head}{title}\n\n{meta}\n\n    {o.command}\n\n"
    if o.output.strip():
        fence = "```"
        body += f"{fence}\n{tail(o.output, 40 if o.status == 'ok' else 25)}\n{fence}\n\n"
    return body


def split_entries(section: str) -> dict[str, str]:
    """The previous generated section's entries by benchmark name."""
    marks = list(ENTRY.finditer(section))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(section)
        out[m.group("name")] = section[m.start():end].rstrip("\n") + "\n\n"
    return out


def write_results(entries: dict[str, str], order: list[str], path: Path = RESULTS) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    body = ("## generated by bench/run_all.py\n\n"
            "Do not edit between the run_all markers: `bench/run_all.py` rewrites this part. "
            "Everything else in this file is hand-written and kept.\n\n"
            + "".join(entries[n] for n in order if n in entries))
    block = f"{BEGIN}\n{body.rstrip()}\n{END}"
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        _, after = rest.split(END, 1)
        text = before + block + after
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def previous_entries(path: Path = RESULTS) -> dict[str, str]:
    if not path.exists():
        return {}
    text = path.read_text()
    if BEGIN not in text or END not in text:
        return {}
    return split_entries(text.split(BEGIN, 1)[1].split(END, 1)[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="also run the slow ML benchmarks")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these (bench_x.py or x)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per benchmark")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    names = discover()
    if args.only:
        wanted = {n if n.startswith("bench_") else f"bench_{n}" for n in args.only}
        wanted = {n if n.endswith(".py") else n + ".py" for n in wanted}
        unknown = wanted - set(names)
        if unknown:
            ap.error(f"no such benchmark: {', '.join(sorted(unknown))} (have: {', '.join(names)})")
        selected = [n for n in names if n in wanted]
    else:
        selected = names
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    previous = previous_entries()
    entries = dict(previous) if args.only else {}
    failed = 0
    for name in selected:
        cmd = COMMANDS.get(name, Command())
        if args.dry_run:
            print(shown(command_line(name)) + ("   # slow: only with --all" if cmd.slow else ""))
            continue
        if cmd.slow and not args.all and not args.only:
            if name in previous and "### " + name + ": skipped" not in previous[name]:
                entries[name] = previous[name]  # the last real result stays, with its own date
                print(f"kept the previous result of {name} (slow; refresh with --all or --only)")
                continue
            o = Outcome(name, shown(command_line(name)), "skipped", 0.0, "", "slow ML benchmark; run_all.py --all")
        else:
            print(f"running {name} ...", flush=True)
            o = run_one(name, args.timeout)
            print(f"  {o.status} in {o.seconds:.1f} s" + (f" ({o.detail})" if o.detail else ""), flush=True)
            failed += o.status == "FAILED"
        entries[name] = render_entry(o, when)
    if args.dry_run:
        return 0
    write_results(entries, names)
    print(f"wrote {RESULTS.relative_to(REPO)} ({failed} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
