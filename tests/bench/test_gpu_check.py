"""The GPU check (bench/gpu_check.py) rehearsed on this CPU, as a person runs it on a GPU: every step answers with
one line of its own, and the steps a CPU can take pass. The figures it gathers on a GPU are in bench/RESULTS.md."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import gpu_parts  # noqa: E402


def _deb(path: Path, files: dict[str, bytes]) -> Path:
    """A Debian package as dpkg-deb writes one: an ar archive of debian-binary, control.tar, data.tar."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o755
            tar.addfile(info, io.BytesIO(content))
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b"x"), ("data.tar.xz", data.getvalue())]
    out = b"!<arch>\n"
    for name, body in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body + b"\n" * (len(body) % 2)
    path.write_bytes(out)
    return path


def test_a_carried_package_unpacks_without_dpkg(tmp_path: Path) -> None:
    deb = _deb(tmp_path / "tool_1.0_amd64.deb", {"./usr/bin/tool": b"#!/bin/sh\necho tool 1.0\n"})
    gpu_parts.unpack_deb(deb, tmp_path / "root")
    assert (tmp_path / "root" / "usr" / "bin" / "tool").read_bytes() == b"#!/bin/sh\necho tool 1.0\n"
    with pytest.raises(ValueError, match="nodata.deb: no data.tar in it"):
        gpu_parts.unpack_deb(_no_data(tmp_path / "nodata.deb"), tmp_path / "r2")


def _no_data(path: Path) -> Path:
    path.write_bytes(b"!<arch>\n" + f"{'debian-binary':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{4:<10}`\n".encode() + b"2.0\n")
    return path


def test_toml_set_changes_only_the_keys_named(tmp_path: Path) -> None:
    f = tmp_path / "looper.toml"
    f.write_text('[loop]\ntag = "demo"  # kept\nseed_jobs = 2\n\n[executor]\nkind = "local"\n')
    gpu_parts.toml_set(f, {"loop": {"seed_jobs": 4, "workers": 2}, "executor": {"require_gpu": True},
                           "confirm": {"transfer_steps": 0}})
    import tomllib

    got = tomllib.loads(f.read_text())
    assert got["loop"] == {"tag": "demo", "seed_jobs": 4, "workers": 2}
    assert got["executor"] == {"kind": "local", "require_gpu": True} and got["confirm"] == {"transfer_steps": 0}


def test_a_window_of_gpu_samples_counts_busy_samples_and_says_none_where_none_were_taken() -> None:
    """The night's and the probe's GPU figures (a CPU's dry run has no samples, so only this test reads some): the busy
    share is the samples with utilisation above 0, inside the window, ends included."""
    samples = [(10.0, 0.0, 500.0), (10.5, 80.0, 3000.0), (11.0, 40.0, 3900.0), (11.5, 0.0, 1200.0), (20.0, 99.0, 9000.0)]
    g = gpu_parts.gpu_window(samples, 10.0, 11.5)
    assert g == {"samples": 4, "busy_pct": 50.0, "mean_util_pct": 30.0, "peak_mem_mib": 3900}
    assert gpu_parts.gpu_words(g) == "gpu busy 50.0% util 30.0% peak 3900 MiB (4 samples)"
    none = gpu_parts.gpu_window(samples, 12.0, 19.9)
    assert none == {"samples": 0, "busy_pct": None, "mean_util_pct": None, "peak_mem_mib": None}
    assert gpu_parts.gpu_words(none) == "gpu: no samples"


@pytest.mark.e2e
def test_the_dry_run_answers_every_step_and_passes_what_a_cpu_can_take(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"), "--dry-run", "--out", str(out),
                        "--work", str(tmp_path / "work"), "--only", "facts,install,amp,night,probe,tune",
                        "--total-seconds", "900"], capture_output=True, text=True, timeout=1000)
    summary = (out / "summary.txt").read_text().splitlines()
    steps = {re.match(r"^\[\s*\d+s\] (\S+)", line)[1]: line for line in summary[1:-1]}  # "[ 12s] night ..."
    assert set(steps) == {"facts", "install", "amp", "night", "probe", "tune"}, summary
    assert "skipped: a dry run uses this interpreter's installed looper" in steps["install"]
    for name in ("facts", "amp", "night", "probe", "tune"):
        assert f"{name}" in steps[name] and " ok " in steps[name], steps[name]
    assert "LOOPER_AMP on=False reason=device cpu" in steps["amp"] and "downloads tried: none" in steps["amp"]
    # model.tune() on train.py's own model and shape (a larger model would lean the comparison looper's way)
    from looper.core.propose.hyperblock import read_knobs

    k = read_knobs((REPO / "train.py").read_text())
    assert (f"train.py's {k['MODEL']} at width {k['WIDTH']} x depth {k['DEPTH']}, imgsz {k['IMGSZ']}, batch {k['BATCH']}"
            in steps["tune"]), steps["tune"]
    figures = json.loads((out / "gpu_check.json").read_text())
    assert figures["tune"]["iterations"] == 1 and figures["tune"]["width"] == k["WIDTH"], figures["tune"]
    assert figures["night"]["runs"] >= 2 and figures["night"]["failed_runs"] == 0
    assert figures["night"]["devices"] == {"cpu": figures["night"]["runs"]}
    assert figures["night"]["device_check"] is None  # a CPU night makes no GPU check (on a GPU: its line)
    assert figures["night"]["boxes_ahead"] >= 2 and figures["night"]["eval_boxes_ahead"] >= 2  # prestart on, both
    assert figures["night"]["boxes_cuda_initialised"] == 0 and figures["night"]["imports_left_to_runs"] == []
    # `looper init --gpu` as this machine's NVML reads it: the sizes it writes where nvidia-smi lists a GPU, else
    # its stop naming NVML's problem
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True) if shutil.which("nvidia-smi") else None
    sized = figures["init_gpu"]
    if smi is not None and smi.returncode == 0 and "GPU " in smi.stdout:
        assert sized["exit"] == 0 and sized["said"][0].startswith("GPU night: "), sized
    else:
        assert sized["exit"] == 2 and "looper init --gpu: no GPU to size a night on: " in sized["said"][0], sized
    assert p.returncode == 0 and summary[-1].endswith("0 step(s) failed"), p.stdout[-2000:] + p.stderr[-2000:]
    with tarfile.open(out / "results.tar.gz") as tar:
        names = tar.getnames()
    assert "night/experiments.db" in names and "history.json" in names


@pytest.mark.parametrize(("rc", "stdout", "device", "verdict"), [
    (0, "looper-probe ok cuda True\n", "cuda", "ok (1024 bytes)"),
    (0, "warming up\nlooper-probe ok cpu True\n", "cpu", "ok (1024 bytes)"),
    (0, "looper-probe ok cpu True\n", "cuda",
     "BROKEN at 1024 bytes (its last line 'looper-probe ok cpu True', not 'looper-probe ok cuda True')"),
    (0, "looper-probe ok cuda False\n", "cuda",
     "BROKEN at 1024 bytes (its last line 'looper-probe ok cuda False', not 'looper-probe ok cuda True')"),
    (0, "looper-probe ok cuda True\nbroken after\n", "cuda",
     "BROKEN at 1024 bytes (its last line 'broken after', not 'looper-probe ok cuda True')"),
    (0, "", "cuda", "BROKEN at 1024 bytes (its last line '', not 'looper-probe ok cuda True')"),
    (1, "looper-probe ok cuda True\n", "cuda", "BROKEN at 1024 bytes (exit 1)"),
    (-9, "", "cuda", "BROKEN at 1024 bytes (exit -9)"),
])
def test_the_rlimit_probe_passes_only_on_its_own_last_line_on_the_device_asked_for(
        rc: int, stdout: str, device: str, verdict: str) -> None:
    assert gpu_parts.rlimit_verdict(rc, stdout, 1024, device) == verdict


def test_the_night_figures_carry_the_night_s_gpu_check_line(tmp_path: Path) -> None:
    """The GPU check the preflight makes before the baseline (docs/GPU.md), from the night's journal as the daemon
    wrote it: the check's line on a GPU; none on a CPU night (the dry run's)."""
    from looper.store import Store

    store = Store(tmp_path / "experiments.db")
    store.add_event("t", "baseline", "starting weights: none")
    assert gpu_parts.night_figures(tmp_path / "experiments.db", 0, 1)["device_check"] is None
    store.add_event("t", "baseline", "torch on cuda:0 in a run's box: ok (box)")
    store.close()
    assert gpu_parts.night_figures(tmp_path / "experiments.db", 0, 1)["device_check"] == \
        "torch on cuda:0 in a run's box: ok (box)"


def test_the_night_figures_say_how_much_of_the_runs_clock_some_run_trained(tmp_path: Path) -> None:
    """The night step's "runs training" beside NVML's busy share: the scheduling's part of the GPU's idle time,
    from the runs' phases in the night's database (the report's line, looper.core.run.phases.night_cover)."""
    from looper.store import Store

    store = Store(tmp_path / "experiments.db")
    eid = store.start_experiment(tag="t", kind="baseline", config={}, description="baseline")
    t = "2026-12-07T22:00:{:02d}.000000+00:00".format
    store.add_run(eid, role="main", seed=0, started_at=t(0), train_started_at=t(2), train_ended_at=t(12),
                  eval_ended_at=t(14), finished_at=t(14))
    store.add_run(eid, role="main", seed=1, started_at=t(14), train_started_at=t(16), train_ended_at=t(26),
                  eval_ended_at=None, finished_at=t(30))
    store.close()
    figures = gpu_parts.night_figures(tmp_path / "experiments.db", 0, 1)
    assert figures["runs_training"] == "66.7% of 30 s, 0.7 at a time, longest stretch with none 4 s"
    assert gpu_parts.night_figures(tmp_path / "none.db", 0, 1)["runs_training"] is None
