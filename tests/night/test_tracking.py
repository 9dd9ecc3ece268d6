"""[tracking] MLflow end to end: the real daemon (fixture train/evaluate), a real MLflow sqlite store read
back with mlflow.search_runs; looper export --mlflow twice changes nothing the second time; a tracking
server that does not answer is a journal note within the timeout and the night goes on."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from looper.core.scoring.metrics import Detection, matches_file, page_matches

pytestmark = pytest.mark.e2e
CLASSES = ["supply_diffuser", "return_grille", "vav_box", "thermostat"]


def _track(ws, uri: str, timeout: float = 5.0) -> None:  # noqa: ANN001
    with open(ws.root / "looper.toml", "a") as f:
        f.write(f'\n[tracking]\nmlflow_uri = "{uri}"\ntimeout_seconds = {timeout}\n')
    ws.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "tracking")


def _night(ws) -> None:  # noqa: ANN001
    ws.enqueue("QUALITY 0.5 -> 0.8", knobs={"QUALITY": 0.8})
    ws.enqueue("QUALITY 0.8 -> 0.3", knobs={"QUALITY": 0.3})
    r = ws.looper("run", "--max-experiments", "2")
    assert r.returncode == 0, r.stdout + r.stderr


def _runs(db: Path):  # noqa: ANN202
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    df = mlflow.search_runs(experiment_names=["looper/t"], max_results=1000)
    return df.sort_values("tags.mlflow.runName").reset_index(drop=True)


def test_each_experiment_is_an_mlflow_run_as_it_settles_with_its_seeds_nested(make_ws) -> None:
    ws = make_ws()
    # creating an MLflow sqlite store runs its schema migrations: 13 s on a loaded 2-core machine, longer
    # than this fixture night's baseline; the default 5 s would (correctly) queue the first writes instead
    _track(ws, "sqlite:///mlflow.db", timeout=40.0)
    _night(ws)
    df = _runs(ws.root / "mlflow.db")
    with ws.db() as con:
        exps = {r["id"]: dict(r) for r in con.execute("SELECT * FROM experiments")}
        runs = [dict(r) for r in con.execute("SELECT * FROM runs")]
    parents = df[df["tags.mlflow.parentRunId"].isna()]
    nested = df[df["tags.mlflow.parentRunId"].notna()]
    assert sorted(parents["tags.looper.experiment_id"].astype(int)) == sorted(exps)  # N experiments, N runs
    assert sorted(nested["tags.looper.run_id"].astype(int)) == sorted(r["id"] for r in runs)
    by_exp = {int(r["tags.looper.experiment_id"]): r for _, r in parents.iterrows()}
    for eid, exp in exps.items():
        row = by_exp[eid]
        assert row["tags.looper.status"] == exp["status"] and row["tags.looper.tag"] == "t"
        assert row["tags.looper.commit"] == (exp["commit"] or None) or not exp["commit"]
        m = json.loads(exp["metrics_json"])
        assert row["metrics.weighted_f1"] == pytest.approx(m["weighted_f1"])
        assert row["metrics.macro_f1"] == pytest.approx(m["macro_f1"])
        for c in CLASSES:
            for k in ("precision", "recall", "f1"):
                assert row[f"metrics.{k}/{c}"] == pytest.approx(m["classes"][c][k]), (eid, c, k)
        assert row["tags.looper.complete"] == "1"
        kids = nested[nested["tags.mlflow.parentRunId"] == row["run_id"]]
        assert len(kids) == sum(1 for r in runs if r["experiment_id"] == eid) > 0
    keep = next(e for e in exps.values() if e["kind"] == "candidate" and e["status"] == "keep")
    drop = next(e for e in exps.values() if e["kind"] == "candidate" and e["status"] == "discard")
    k, d = by_exp[keep["id"]], by_exp[drop["id"]]
    assert k["params.QUALITY"] == "0.8" and d["params.QUALITY"] == "0.3"  # the knob that differs from the baseline
    assert k["tags.looper.test"] and 0.0 <= float(k["tags.looper.p_value"]) <= 0.05 and float(k["tags.looper.band"]) >= 0.0
    assert d["tags.looper.reason"]  # why it was discarded
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{ws.root / 'mlflow.db'}")
    names = {a.path for a in client.list_artifacts(k["run_id"])}
    assert {"diff.patch", "verdict.json"} <= names
    assert "+QUALITY = 0.8" in Path(client.download_artifacts(k["run_id"], "diff.patch", str(ws.root))).read_text()
    assert not [e for e in ws.events("note") if "tracking" in e["message"]]


def _matches(path: Path) -> None:
    """A real MATCHES.json (looper.core.scoring.metrics) for one run folder: one found box, one confused, one missed."""
    truth = [Detection("vav_box", (0, 0, 10, 10)), Detection("thermostat", (50, 50, 60, 60)),
             Detection("return_grille", (80, 80, 90, 90))]
    preds = [Detection("vav_box", (0, 0, 10, 10), 0.9), Detection("vav_box", (50, 50, 60, 60), 0.8)]
    path.write_text(json.dumps(matches_file([page_matches("page_0000.png", preds, truth)], CLASSES)))


def test_export_mlflow_after_the_fact_is_idempotent(make_ws) -> None:
    ws = make_ws()
    _night(ws)  # no [tracking]: the night wrote nowhere
    with ws.db() as con:
        n = con.execute("SELECT COUNT(*) FROM experiments").fetchone()[0]
        keep = con.execute("SELECT id FROM experiments WHERE kind='candidate' AND status='keep'").fetchone()[0]
    (main,) = sorted((ws.root / "runs" / "t" / f"{keep:05d}").glob("main-*"))
    _matches(main / "MATCHES.json")
    db = ws.root / "elsewhere" / "m.db"
    db.parent.mkdir()
    first = ws.looper("export", "--mlflow", "--mlflow-uri", f"sqlite:///{db}")
    assert first.returncode == 0, first.stderr
    assert f"{n} run(s) created, 0 already there" in first.stdout
    before = _runs(db)
    second = ws.looper("export", "--mlflow", "--mlflow-uri", f"sqlite:///{db}")
    assert second.returncode == 0 and f"0 run(s) created, {n} already there" in second.stdout, second.stdout
    after = _runs(db)
    assert len(before) == len(after) > n
    assert before.fillna("").astype(str).equals(after.fillna("").astype(str))
    from mlflow import MlflowClient

    row = after[after["tags.looper.experiment_id"].eq(str(keep)) & after["tags.mlflow.parentRunId"].isna()].iloc[0]
    got = json.loads(Path(MlflowClient(f"sqlite:///{db}").download_artifacts(
        row["run_id"], "confusion.json", str(ws.root))).read_text())
    labels = got["labels"]
    assert got["matrix"][labels.index("vav_box")][labels.index("thermostat")] == 1  # thermostat taken for vav_box
    assert got["matrix"][labels.index("vav_box")][labels.index("vav_box")] == 1


def test_a_tracking_server_that_is_down_is_a_warning_and_the_night_goes_on(make_ws) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ws = make_ws()
    _track(ws, f"http://127.0.0.1:{port}", timeout=2.0)
    started = time.monotonic()
    _night(ws)
    took = time.monotonic() - started
    notes = [e for e in ws.events("note") if e["message"].startswith("tracking: MLflow")]
    assert len(notes) >= 3, [e["message"] for e in ws.events()]  # the baseline and both experiments
    assert all(json.loads(e["data_json"])["seconds"] <= 4.0 for e in notes), notes  # bounded: timeout 2 s
    assert "queued for the next settle" in notes[-1]["message"] and "the night goes on" in notes[-1]["message"]
    assert [r["status"] for r in ws.rows()] == ["keep", "discard"] and took < 170


def _chromium() -> str:
    import os
    import shutil

    import tiers

    if "browser" in tiers.skipped():
        tiers.require("browser", [])  # opted out by name: skip even where chromium exists
    for name in (os.environ.get("LOOPER_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    tiers.require("browser", ["a chromium binary on PATH (or LOOPER_CHROMIUM)"])
    raise AssertionError("unreachable: tiers.require skips or fails")


def test_the_mlflow_ui_shows_a_night_s_run(make_ws, tmp_path: Path) -> None:
    """`mlflow server` on loopback over the store looper wrote; a real headless Chromium opens one
    experiment's run page and finds its name, its status tag and its weighted F1."""
    import subprocess
    import sys
    import urllib.request

    chromium = _chromium()
    ws = make_ws()
    _night(ws)
    db = tmp_path / "m.db"
    assert ws.looper("export", "--mlflow", "--mlflow-uri", f"sqlite:///{db}").returncode == 0
    df = _runs(db)
    keep = df[df["tags.looper.status"].eq("keep") & df["tags.mlflow.parentRunId"].isna()
              & df["tags.looper.kind"].eq("candidate")].iloc[0]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow_bin = str(Path(sys.executable).with_name("mlflow"))
    server = subprocess.Popen([mlflow_bin, "server", "--backend-store-uri", f"sqlite:///{db}", "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "mlflow server did not come up"
            time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/#/experiments/{keep['experiment_id']}/runs/{keep['run_id']}"
        dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=15000", "--dump-dom",
                              url], capture_output=True, text=True, timeout=120, env={"HOME": str(tmp_path),
                                                                                     "PATH": "/usr/bin:/bin"})
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = dom.stdout
    assert "QUALITY 0.5 -&gt; 0.8" in page  # the run's name: "#<id> QUALITY 0.5 -> 0.8"
    assert "weighted_f1" in page and f"{float(keep['metrics.weighted_f1']):.4f}"[:5] in page
    assert "looper.status" in page


def test_a_name_mlflow_refuses_is_cleaned_or_skipped_never_the_end_of_tracking(tmp_path: Path) -> None:
    """Issue 48: a class called ``valve (2-way)`` makes a metric key the real MLflow refuses; the sink cleans
    it (or skips a name with nothing usable, naming it on the run) and the run is written."""
    from mlflow.exceptions import MlflowException

    from looper.tracking.mlflow_sink import SKIPPED, MlflowSink
    from looper.tracking.tracked import Tracked

    sink = MlflowSink(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)
    eid = sink.experiment_id("t")
    with pytest.raises(MlflowException):  # what stopped tracking before: MLflow itself refuses the name
        rid = sink.client.create_run(eid).info.run_id
        sink.client.log_metric(rid, "f1/valve (2-way)", 0.5)
    t = Tracked(name="#1", tags={"looper.experiment": "1"}, params={"LR0": "0.01"},
                metrics={"f1/valve (2-way)": 0.5, "()": 0.1, "weighted_f1": 0.7})
    rid = sink._run(eid, t)
    run = sink.client.get_run(rid)
    assert run.data.metrics == {"f1/valve _2-way_": 0.5, "weighted_f1": 0.7}
    assert run.data.tags[SKIPPED] == "()" and run.data.params == {"LR0": "0.01"}
