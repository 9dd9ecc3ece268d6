"""`looper status` says what the database says: what runs now, the best, the outcomes, the last halt."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

from report_seed import TAG, Seeded

from looper.report.status import boxes_words, status_text
from looper.workspace.lock import DaemonLock


def _cfg(tag: str, seed_jobs: int = 1, workers: int = 1, require_gpu: bool = False) -> SimpleNamespace:
    from looper.config import LimitsConfig

    return SimpleNamespace(loop=SimpleNamespace(tag=tag, seed_jobs=seed_jobs, workers=workers, prestart="auto"),
                           executor=SimpleNamespace(require_gpu=require_gpu, gpu_index=0, kind="local"),
                           limits=LimitsConfig(run_limits=False))  # no limits: nothing said of memory


def _status(s: Seeded) -> str:
    cfg = _cfg(TAG)
    return status_text(s.store, cfg, DaemonLock(s.root / ".looper" / "daemon.lock"))


def test_status_reads_every_line_from_the_database(seeded: Seeded) -> None:
    running = seeded.store.start_experiment(tag=TAG, kind="candidate", config={}, description="dropout 0.1",
                                            worker="w1")
    seeded.store.set_phase(running, "training 40%")
    lines = _status(seeded).splitlines()
    assert lines[0] == "daemon: not running"
    assert lines[1] == "slots: 1 runs at a time (1 seed(s) side by side x 1 worker(s)) on the CPU"
    con = sqlite3.connect(seeded.store.path)
    try:
        started = con.execute("SELECT started_at FROM experiments WHERE id = ?", (running,)).fetchone()[0]
        best_id, best_score, best_desc = con.execute(
            "SELECT id, score, description FROM experiments WHERE tag = ? AND status = 'keep' "
            "AND kind IN ('baseline', 'candidate') ORDER BY id DESC LIMIT 1", (TAG,)).fetchone()
        counts = dict(con.execute("SELECT status, count(*) FROM experiments WHERE tag = ? "
                                  "AND status NOT IN ('pending', 'running') GROUP BY status", (TAG,)).fetchall())
        last5 = con.execute("SELECT id, status FROM experiments WHERE tag = ? AND status NOT IN ('pending', "
                            "'running') ORDER BY id DESC LIMIT 5", (TAG,)).fetchall()
        halt = con.execute("SELECT kind, at FROM events WHERE kind IN ('halt', 'stuck', 'page_failed') "
                           "ORDER BY id DESC LIMIT 1").fetchone()
    finally:
        con.close()
    assert f"now: #{running} [{TAG}] training 40% since {started} on w1: dropout 0.1" in lines
    assert f"best [{TAG}]: #{best_id} score {best_score:.4f} ({best_desc})" in lines
    assert "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) in lines
    shown = [line.split()[0] for line in lines if line.startswith("  #")]
    assert shown == [f"#{i}" for i, _ in reversed(last5)]
    for i, status in last5:
        assert any(line.startswith(f"  #{i} {status} ") for line in lines), i
    assert lines[-1].startswith(f"last {halt[0]}: {halt[1]}: ")


def test_status_of_an_empty_tag(seeded: Seeded) -> None:
    cfg = _cfg("never-run", seed_jobs=4, workers=2, require_gpu=True)
    text = status_text(seeded.store, cfg, DaemonLock(seeded.root / ".looper" / "daemon.lock"))
    assert text.splitlines()[1:] == ["slots: 8 runs at a time (4 seed(s) side by side x 2 worker(s)) on GPU from "
                                     "index 0; each run's box started while the run before it trains, evaluated "
                                     "while the next trains" + boxes_words(cfg),
                                     "best [never-run]: none yet"]  # prestart auto: on a GPU


def test_status_says_how_many_boxes_may_wait_where_memory_holds_fewer_than_the_runs() -> None:
    """4 seeds x 2 workers, each evaluated beside the next training: 16 runs at a time, whose boxes wait ahead as
    far as a quarter of the machine's memory holds them beside the daemon (looper.core.run.slots.boxes_ahead)."""
    cfg = _cfg("t", seed_jobs=4, workers=2, require_gpu=True)
    assert boxes_words(cfg, memory=128 << 30) == ""  # 41 may wait
    assert boxes_words(cfg, memory=24 << 30) == ("; 6 of the 16 runs' boxes may wait ahead (a quarter of this machine's "
                                                 "24 GiB, about 768 MiB a box, beside the daemon); the others start "
                                                 "when their runs come")
    assert boxes_words(cfg, memory=4 << 30).startswith("; 0 of the 16 runs' boxes may wait ahead (a quarter of this "
                                                       "machine's 4 GiB,")
    cfg.executor.kind = "ssh"  # boxes ahead are the local executor's
    assert boxes_words(cfg, memory=4 << 30) == ""


def test_status_says_each_run_s_share_of_the_machine_s_memory(seeded: Seeded) -> None:
    """[limits] memory_max_bytes = 0: the runs at a time share 75 % of this machine's memory (looper.core.run.limits);
    set by hand, or one run at a time, nothing is said."""
    from looper.config import LimitsConfig
    from looper.core.run.limits import derived
    from looper.executors.limits import machine

    lock = DaemonLock(seeded.root / ".looper" / "daemon.lock")
    cfg = _cfg("never-run", seed_jobs=4, workers=2, require_gpu=True)
    cfg.limits = LimitsConfig()
    m = machine()
    share = derived(m["memory"], m["cores"], m["pid_max"], 16)["memory_max_bytes"] / (1 << 30)
    assert status_text(seeded.store, cfg, lock).splitlines()[1].endswith(
        f"evaluated while the next trains{boxes_words(cfg)}; each run's memory at most {share:.1f} GiB (16 runs at a time share 75 % "
        "of this machine's)")  # 4 seeds x 2 workers, each evaluated while the next trains
    cfg.limits = LimitsConfig(memory_max_bytes=3 << 30)
    assert "each run's memory" not in status_text(seeded.store, cfg, lock).splitlines()[1]
    cfg.limits, cfg.loop.seed_jobs, cfg.loop.workers = LimitsConfig(), 1, 1
    assert "each run's memory" not in status_text(seeded.store, cfg, lock).splitlines()[1]
    cfg.executor.kind, cfg.executor.host, cfg.loop.workers = "ssh", "gpu1", 2  # the host derives its own share
    assert status_text(seeded.store, cfg, lock).splitlines()[1].endswith(
        "each run's memory: its share of 75 % of the host's (2 runs at a time there)")


def test_status_shows_the_last_night_s_gpu_slots_note_and_no_earlier_night_s(seeded: Seeded) -> None:
    """The note a night with a GPU it leaves half empty journals once (looper.core.run.slots.fill_words): shown under
    the slots while that night is the last one; a later night without it (its workers changed, say) shows none."""
    from looper.core.run.slots import FILL_NOTE

    def fill_lines() -> list[str]:
        return [x for x in _status(seeded).splitlines() if FILL_NOTE in x]

    seeded.store.add_event(TAG, "start", "daemon started (pid 1, 1 worker(s))")
    assert fill_lines() == []
    seeded.store.add_event(TAG, "note", "say GPU slots: only at the beginning")
    seeded.store.add_event(TAG, "note", FILL_NOTE + "the GPU takes 8 runs at a time; loop.workers = 2 would fill it")
    lines = _status(seeded).splitlines()
    assert lines[2] == "  GPU slots: the GPU takes 8 runs at a time; loop.workers = 2 would fill it", lines
    seeded.store.add_event(TAG, "start", "daemon started (pid 2, 2 worker(s))")
    assert fill_lines() == []

