"""What the GPU check (bench/gpu_check.py) reads and writes beside its steps: a carried Debian package unpacked
without dpkg, keys set in a workspace's looper.toml, the GPU sampled through NVML and a window of its samples, a
run's weights digested, a night's figures read from its database."""

from __future__ import annotations

import io
import json
import statistics
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from looper.core.run.phases import Cover


def unpack_deb(deb: Path, root: Path) -> None:
    """A Debian package's files under ``root`` (its ``ar`` archive's data.tar.*, read here: no dpkg needed)."""
    raw = deb.read_bytes()
    at = 8  # after "!<arch>\n"
    while at + 60 <= len(raw):
        name, size = raw[at:at + 16].decode().strip().rstrip("/"), int(raw[at + 48:at + 58])
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(raw[at + 60:at + 60 + size])) as tar:
                tar.extractall(root, filter="tar")
            return
        at += 60 + size + (size % 2)
    raise ValueError(f"{deb.name}: no data.tar in it")


def toml_set(path: Path, values: dict[str, dict[str, object]]) -> None:
    """Set keys in a looper.toml (section -> key -> value), keeping the rest of the file."""
    lines = path.read_text().splitlines()
    for section, keys in values.items():
        start = next((i for i, x in enumerate(lines) if x.strip() == f"[{section}]"), None)
        if start is None:
            lines += ["", f"[{section}]"]
            start = len(lines) - 1
        end = next((i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("[")), len(lines))
        for key, value in keys.items():
            text = f"{key} = {json.dumps(value) if not isinstance(value, bool) else str(value).lower()}"
            at = next((i for i in range(start + 1, end) if lines[i].split("=")[0].strip() == key), None)
            if at is None:
                lines.insert(start + 1, text)
                end += 1
            else:
                lines[at] = text
    path.write_text("\n".join(lines) + "\n")


def rlimit_verdict(returncode: int, stdout: str, limit: int, device: str) -> str:
    """What the probe of torch under RLIMIT_DATA answered (looper.core.run.probe's program, the one the night's
    preflight runs in a run's box): "ok (N bytes)" only when it exited 0 and its last line is the program's own
    ``looper-probe ok <device> True`` on the device asked for (a gradient that is not zero was computed there);
    anything else, a word "ok" somewhere included, is "BROKEN at N bytes (...)" with what it printed last."""
    from looper.core.run.probe import BOX, Attempt

    attempt = Attempt(BOX, returncode, stdout)
    if attempt.answered(device):
        return f"ok ({limit} bytes)"
    why = f"exit {returncode}" if returncode else f"its last line {attempt.last_line()!r}, not {Attempt.expected(device)!r}"
    return f"BROKEN at {limit} bytes ({why})"


def night_figures(db: Path, t0: float, t1: float) -> dict:
    import datetime as dt
    import sqlite3

    from looper.core.run.phases import night_cover

    if not db.is_file():
        return {"experiments": "no database", "device_check": None, "runs": 0, "failed_runs": 0, "devices": {}, "decided": 0,
                "startup_s": None, "train_s": None, "eval_s": None, "first_train_at": None, "startup_phases": {},
                "runs_training": None}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    exps = [dict(r) for r in con.execute("select id, kind, status, score, description from experiments order by id")]
    runs = [dict(r) for r in con.execute("select * from runs order by id")]

    def ts(s: str | None) -> float | None:
        return dt.datetime.fromisoformat(s).timestamp() if s else None

    def span(a: str | None, b: str | None) -> float | None:
        x, y = ts(a), ts(b)
        return y - x if x is not None and y is not None else None

    def mean(xs: list[float | None]) -> float | None:
        xs2 = [x for x in xs if x is not None]
        return round(statistics.fmean(xs2), 1) if xs2 else None

    devices: dict[str, int] = {}
    for r in runs:
        d = json.loads(r["train_json"] or "{}").get("device", "?")
        devices[d] = devices.get(d, 0) + 1
    statuses: dict[str, int] = {}
    for e in exps:
        statuses[e["status"]] = statuses.get(e["status"], 0) + 1
    has_events = "events" in {r[0] for r in con.execute("select name from sqlite_master")}
    halts = [r[0] for r in con.execute("select message from events where kind like '%halt%' order by id desc limit 1")] \
        if has_events else []
    checks = [r[0] for r in con.execute("select message from events where message like '% in a run''s box: %' "
                                        "order by id desc limit 1")] if has_events else []  # the night's GPU check
    starts = [ts(r["train_started_at"]) for r in runs if r["train_started_at"]]
    phases: dict[str, list[float]] = {}
    for r in runs:
        for k, v in (json.loads(r["train_json"] or "{}").get("startup_phases") or {}).items():
            phases.setdefault(k, []).append(v)
    return {"experiments": ", ".join(f"{k} {v}" for k, v in statuses.items()), "runs": len(runs),
            "failed_runs": sum(1 for r in runs if r["exit_code"] not in (0, None)), "devices": devices,
            "decided": sum(1 for e in exps if e["kind"] != "baseline" and e["status"] in ("keep", "discard", "inconclusive")),
            "startup_s": mean([span(r["started_at"], r["train_started_at"]) for r in runs]),
            "train_s": mean([span(r["train_started_at"], r["train_ended_at"]) for r in runs]),
            "eval_s": mean([span(r["train_ended_at"], r["eval_ended_at"]) for r in runs]),
            "first_train_at": min(starts) if starts else None, "halt": halts[0][:300] if halts else None,
            "device_check": checks[0][:300] if checks else None,
            "startup_phases": {k: mean(v) for k, v in phases.items()},
            "runs_training": _cover_words(night_cover((r["started_at"], r["train_started_at"], r["train_ended_at"],
                                                       r["eval_ended_at"] or r["finished_at"]) for r in runs))}


def _cover_words(c: Cover | None) -> str | None:
    """The share of the night's runs' clock some run trained (the report's "runs training" line, in short): on the
    GPU, the scheduling's part of its idle time beside NVML's busy share."""
    if c is None:
        return None
    return (f"{100 * c.share:.1f}% of {c.wall_s:.0f} s, {c.at_once:.1f} at a time, "
            f"longest stretch with none {c.longest_gap_s:.0f} s")


# -- GPU samples, weights, command output ------------------------------------------------------------------
def tail(p: subprocess.CompletedProcess[str], n: int = 1) -> str:
    """The last ``n`` lines a command printed (stdout then stderr), as one line of at most 300 characters."""
    lines = [x for x in (p.stdout + "\n" + p.stderr).splitlines() if x.strip()]
    return " | ".join(lines[-n:])[:300]


def sampler(samples: list[tuple[float, float, float]], figures: dict[str, object], stop: threading.Event) -> None:
    """GPU 0's utilisation and memory through NVML every 0.5 s into ``samples`` (time, utilisation %, memory MiB)
    until ``stop``; without NVML, none, and ``figures["sampler"]`` says why."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # noqa: BLE001 (no NVML: no samples, and the figures say so)
        figures["sampler"] = f"no NVML: {exc}"
        return
    while not stop.is_set():
        try:
            u = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
            m = pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
            samples.append((time.time(), float(u), float(m)))
        except Exception:  # noqa: BLE001, S110
            pass
        stop.wait(0.5)


def gpu_window(samples: list[tuple[float, float, float]], t0: float, t1: float) -> dict[str, float | int | None]:
    """The samples from ``t0`` to ``t1``: how many, the share busy (utilisation above 0), the mean utilisation and
    the peak memory; ``None`` for each where there is no sample (never a 0 % that was not measured)."""
    s = [x for x in samples if t0 <= x[0] <= t1]
    if not s:
        return {"samples": 0, "busy_pct": None, "mean_util_pct": None, "peak_mem_mib": None}
    return {"samples": len(s), "busy_pct": round(100 * sum(1 for x in s if x[1] > 0) / len(s), 1),
            "mean_util_pct": round(statistics.fmean(x[1] for x in s), 1),
            "peak_mem_mib": round(max(x[2] for x in s))}


def gpu_words(g: dict[str, float | int | None]) -> str:
    return (f"gpu busy {g['busy_pct']}% util {g['mean_util_pct']}% peak {g['peak_mem_mib']} MiB ({g['samples']} samples)"
            if g["samples"] else "gpu: no samples")


def weights_digest(out: Path) -> str | None:
    """A digest of the run's tensors (not of the file: its header names the run's own folder)."""
    import hashlib

    from safetensors.torch import load_file

    w = out / "weights.pt"
    if not w.is_file():
        return None
    h = hashlib.sha256()
    for name, t in sorted(load_file(str(w)).items()):
        h.update(name.encode() + t.cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
