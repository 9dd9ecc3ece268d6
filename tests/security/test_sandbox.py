"""looper/executors/sandbox.py with the real bwrap: what a command inside the sandbox can and cannot do.

Each test runs a real command inside the argv the executors use and checks the effect on
the real filesystem, network and process table (no mocks).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from looper import proc, remote
from looper.executors import evaluator, sandbox
from looper.executors.sandbox import SandboxPolicy

# The end-to-end tier (a real sandbox). bubblewrap is in the base set scripts/setup_system.sh installs:
# a machine without it fails these tests (the sandbox's own error names the install), never skips them.
pytestmark = pytest.mark.e2e


@pytest.fixture()
def ws(tmp_path: Path) -> dict[str, Path]:
    """A workspace-like tree: checkout with train.py, data with tiles and test pages, an out folder."""
    checkout = tmp_path / "ws"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "experiments.db").write_text("db\n")
    data = checkout / "data"
    (data / "tiles" / "train" / "images").mkdir(parents=True)
    (data / "tiles" / "train" / "images" / "t0.png").write_text("tile\n")
    (data / "pages" / "test").mkdir(parents=True)
    (data / "pages" / "test" / "page_000.json").write_text('{"boxes": []}\n')
    out = checkout / ".looper" / "runs" / "1" / "out"
    out.mkdir(parents=True)
    return {"checkout": checkout, "data": data, "out": out, "home": checkout / "home"}  # inside the checkout: visible


def run_in_train_sandbox(ws: dict[str, Path], code: str, policy: SandboxPolicy = SandboxPolicy(),
                         env: dict[str, str] | None = None, timeout: float = 60) -> proc.Completed:
    script = ws["checkout"] / "train.py"
    script.write_text(textwrap.dedent(code))
    argv = sandbox.train_argv([sys.executable, "train.py"], checkout=ws["checkout"], out_dir=ws["out"],
                              data_dir=ws["data"], env={"LOOPER_OUT": str(ws["out"]), **(env or {})},
                              policy=policy, home=ws["home"])
    return proc.run(argv, timeout=timeout)


def test_writes_only_out_and_private_tmp(ws: dict[str, Path]) -> None:
    venv_site = Path(sys.prefix) / "lib"
    done = run_in_train_sandbox(ws, f"""
        import os, pathlib
        out = pathlib.Path(os.environ["LOOPER_OUT"])
        (out / "weights.pt").write_text("w")
        pathlib.Path("/tmp/scratch").write_text("t")
        denied = []
        for target in ["train.py", "experiments.db", ".git/hooks/post-commit", "data/tiles/x.png",
                       {str(venv_site / "evil.pth")!r}, ".looper/pids/1.pid", "/root/evil"]:
            try:
                pathlib.Path(target).write_text("x")
            except OSError as exc:
                denied.append(exc.errno)
        print("DENIED", len(denied))
        """)
    assert done.ok, done.stderr
    assert "DENIED 7" in done.stdout
    assert (ws["out"] / "weights.pt").read_text() == "w"
    assert not (ws["checkout"].parent / "escaped").exists()
    assert not (ws["checkout"] / ".git" / "hooks" / "post-commit").exists()
    assert not (ws["checkout"] / ".looper" / "pids" / "1.pid").exists()
    assert not Path("/tmp/scratch").exists() or Path("/tmp/scratch").read_text() != "t"


def test_test_pages_are_not_there_but_tiles_are(ws: dict[str, Path]) -> None:
    done = run_in_train_sandbox(ws, """
        import os
        print("TILES", os.listdir("data/tiles/train/images"))
        print("PAGES", os.path.exists("data/pages/test"), sorted(os.listdir("data")))
        try:
            open("data/pages/test/page_000.json").read()
            print("READ TRUTH")
        except OSError:
            print("NO TRUTH")
        try:
            os.makedirs("data/pages/test", exist_ok=True)
            open("data/pages/test/planted.json", "w").write("x")
            print("WROTE PAGES")
        except OSError:
            print("PAGES READ-ONLY")
        """)
    assert done.ok, done.stderr
    assert "TILES ['t0.png']" in done.stdout
    assert "PAGES False ['tiles']" in done.stdout and "NO TRUTH" in done.stdout and "PAGES READ-ONLY" in done.stdout
    assert (ws["data"] / "pages" / "test" / "page_000.json").is_file()  # hidden, not touched
    assert not (ws["data"] / "pages" / "test" / "planted.json").exists()


def test_home_is_not_there(ws: dict[str, Path]) -> None:
    """Deny by default: nothing of $HOME (credentials, ~/.config/looper/<ws>.env) is in the sandbox."""
    (ws["home"] / ".ssh").mkdir(parents=True)
    (ws["home"] / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    (ws["home"] / ".netrc").write_text("machine x password y\n")
    (ws["home"] / ".config" / "looper").mkdir(parents=True)
    (ws["home"] / ".config" / "looper" / "ws.env").write_text("OPENAI_API_KEY=sk-planted\n")
    done = run_in_train_sandbox(ws, f"""
        import os
        for p in ({str(ws["home"])!r}, {str(ws["home"] / ".ssh")!r}, {str(ws["home"] / ".netrc")!r},
                  {str(ws["home"] / ".config/looper/ws.env")!r}):
            print("SEEN" if os.path.exists(p) else "ABSENT", p)
        """)
    assert done.ok, done.stderr
    assert "SEEN" not in done.stdout and done.stdout.count("ABSENT") == 4, done.stdout


def test_environment_is_clean(ws: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    done = run_in_train_sandbox(ws, """
        import os
        print("KEY", os.environ.get("OPENAI_API_KEY"), "OUT", "LOOPER_OUT" in os.environ, "HOME", os.environ["HOME"])
        """)
    assert done.ok, done.stderr
    assert "KEY None OUT True HOME /tmp" in done.stdout


def test_no_process_in_the_sandbox_holds_the_daemons_environment(ws: dict[str, Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """bwrap's own process is pid 1 inside: it is started with an empty environment, so
    /proc/<pid>/environ of every process train.py can see holds none of the daemon's secrets."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak-via-proc")
    done = run_in_train_sandbox(ws, """
        import os
        found = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    if b"sk-should-not-leak-via-proc" in open(f"/proc/{p}/environ", "rb").read():
                        found.append(p)
                except OSError:
                    pass
        print("PIDS", len([p for p in os.listdir("/proc") if p.isdigit()]), "FOUND", found)
        """)
    assert done.ok, done.stderr
    assert "FOUND []" in done.stdout and "PIDS" in done.stdout, done.stdout


@pytest.mark.parametrize("network", [False, True])
def test_network_only_when_opted_in(ws: dict[str, Path], network: bool) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        done = run_in_train_sandbox(ws, f"""
            import socket
            s = socket.socket()
            s.settimeout(5)
            try:
                s.connect(("127.0.0.1", {port}))
                print("CONNECTED")
            except OSError as exc:
                print("REFUSED", exc)
            """, policy=SandboxPolicy(network=network))
    finally:
        server.close()
    assert done.ok, done.stderr
    assert ("CONNECTED" in done.stdout) is network, done.stdout


def test_no_process_outlives_the_run(ws: dict[str, Path]) -> None:
    marker = f"{4000 + os.getpid() % 1000}.{int(time.time()) % 997}"
    done = run_in_train_sandbox(ws, f"""
        import os, subprocess, time
        if os.fork() == 0:          # double fork, new session: out of every process group
            os.setsid()
            if os.fork() == 0:
                subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
                open("/tmp/started", "w").close()
            os._exit(0)
        while not os.path.exists("/tmp/started"):
            time.sleep(0.01)
        time.sleep(0.1)
        print("FORKED")
        """)
    assert done.exit_code == sandbox.LEFT_RUNNING_EXIT, done
    assert "process(es) running" in done.stderr and f"sleep {marker}" in done.stderr, done.stderr
    time.sleep(0.5)
    left = proc.run(["pgrep", "-f", f"sleep {marker}"], timeout=10)
    assert left.stdout.strip() == "", f"a process outlived the sandbox: {left.stdout}"


def test_cannot_see_or_signal_processes_outside(ws: dict[str, Path]) -> None:
    done = run_in_train_sandbox(ws, f"""
        import os, signal
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        print("PIDS", len(pids))
        try:
            os.kill({os.getpid()}, 0)
            print("SEES DAEMON")
        except ProcessLookupError:
            print("DAEMON INVISIBLE")
        except PermissionError:
            print("DAEMON PROTECTED")
        """)
    assert done.ok, done.stderr
    assert "PIDS" in done.stdout and int(done.stdout.split("PIDS ")[1].split()[0]) <= 3
    # the daemon's pid may exist inside the namespace by coincidence, but then it is another process
    assert "SEES DAEMON" not in done.stdout or os.getpid() <= 3


def test_no_capabilities_to_undo_the_mounts(ws: dict[str, Path]) -> None:
    done = run_in_train_sandbox(ws, """
        print([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1])
        """)
    assert done.ok, done.stderr
    assert done.stdout.strip() == "0000000000000000"
    umount = proc.run(sandbox.train_argv(["umount", str(ws["data"] / "pages" / "test")], checkout=ws["checkout"],
                                         out_dir=ws["out"], data_dir=ws["data"], env={}, home=ws["home"]),
                      timeout=30)
    assert umount.exit_code != 0


def test_evaluator_runs_isolated_from_the_checkout(ws: dict[str, Path], tmp_path: Path) -> None:
    """python -I from the harness's copy: a looper/ package planted next to evaluate.py is not imported."""
    planted = ws["checkout"] / "looper"
    planted.mkdir()
    (planted / "__init__.py").write_text("raise SystemExit('PLANTED LOOPER IMPORTED')\n")
    (ws["checkout"] / "evaluate.py").write_text(textwrap.dedent("""
        import argparse, json, pathlib, sys
        import looper.core.scoring.metrics
        ap = argparse.ArgumentParser()
        for a in ("--weights", "--data", "--out", "--device"):
            ap.add_argument(a)
        args = ap.parse_args()
        escaped = []
        for target in ("/root/evil", args.weights, args.data + "/pages/test/x.json", sys.prefix + "/evil.pth"):
            try:
                open(target, "w").write("x")
                escaped.append(target)
            except OSError:
                pass
        pathlib.Path(args.out).write_text(json.dumps({"metrics_from": looper.__file__, "escaped": escaped}))
        """))
    (ws["out"] / "weights.pt").write_text("w")
    copy, eval_out = evaluator.prepare_evaluator(ws["checkout"] / "evaluate.py", tmp_path / "eval")
    argv = sandbox.eval_argv(sys.executable, copy, weights=ws["out"] / "weights.pt", data_dir=ws["data"],
                             out_dir=eval_out, env={"PYTHONPATH": str(ws["checkout"])}, device="cpu")
    assert "-I" in argv
    done = proc.run(argv, cwd=ws["checkout"], timeout=60)
    assert done.ok, done.stderr
    metrics_path = tmp_path / "METRICS.json"
    assert evaluator.collect_metrics(eval_out, metrics_path)
    import json

    got = json.loads(metrics_path.read_text())
    assert got["escaped"] == []
    assert Path(got["metrics_from"]).resolve() != (planted / "__init__.py").resolve()
    assert (ws["out"] / "weights.pt").read_text() == "w"


def test_preflight_names_the_install_command_when_bwrap_is_missing() -> None:
    v = sandbox.preflight(SandboxPolicy(bwrap="bwrap-not-installed-here"))
    assert v.status.value == "error"
    assert sandbox.INSTALL_COMMAND in v.blocking[0]
    assert sandbox.preflight(SandboxPolicy()).ok
    off = sandbox.preflight(SandboxPolicy(mode="none"))
    assert off.ok and "without a sandbox" in off.metrics["sandbox_note"]
    assert sandbox.opt_out_line(SandboxPolicy()) is None


def test_planted_link_is_not_a_plain_file(ws: dict[str, Path]) -> None:
    (ws["out"] / "weights.pt").symlink_to(ws["data"] / "pages" / "test" / "page_000.json")
    assert "symbolic link" in (evaluator.plain_file(ws["out"] / "weights.pt") or "")
    (ws["out"] / "train.json").write_text("{}")
    assert evaluator.plain_file(ws["out"] / "train.json") is None


def test_host_sockets_under_run_are_not_reachable(ws: dict[str, Path]) -> None:
    path = Path(f"/run/looper-test-{os.getpid()}.sock")
    if not os.access("/run", os.W_OK):
        pytest.skip("/run is not writable here: cannot place a host socket to try")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(str(path))  # reachable from outside: the test can fail
        probe.close()
        done = run_in_train_sandbox(ws, f"""
            import socket
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect({str(path)!r})
                print("CONNECTED")
            except OSError as exc:
                print("NO SOCKET", type(exc).__name__)
            """)
    finally:
        server.close()
        path.unlink(missing_ok=True)
    assert done.ok, done.stderr
    assert "NO SOCKET FileNotFoundError" in done.stdout, done.stdout


def test_device_nodes_are_bound_where_they_exist(ws: dict[str, Path]) -> None:
    """GPU nodes are bound like this (``--dev-bind-try``): present ones appear, absent ones are skipped."""
    present = next((d for d in ("/dev/fuse", "/dev/kvm", "/dev/hwrng") if Path(d).exists()), None)
    if present is None:
        pytest.skip("no spare device node here to bind")
    script = ws["checkout"] / "train.py"
    script.write_text(f"import os\nprint('SEEN', os.path.exists({present!r}), os.path.exists('/dev/nvidia-absent'))\n")
    argv = sandbox.train_argv([sys.executable, "train.py"], checkout=ws["checkout"], out_dir=ws["out"],
                              data_dir=ws["data"], env={}, home=ws["home"], devices=[present, "/dev/nvidia-absent"])
    done = proc.run(argv, timeout=60)
    assert done.ok, done.stderr
    assert "SEEN True False" in done.stdout
    bare = proc.run(sandbox.train_argv([sys.executable, "train.py"], checkout=ws["checkout"], out_dir=ws["out"],
                                       data_dir=ws["data"], env={}, home=ws["home"], devices=[]), timeout=60)
    assert "SEEN False False" in bare.stdout  # not there unless bound
    assert set(sandbox.NODE_GPU_DEVICES) >= {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"}


def test_no_secret_of_the_daemon_is_written_into_an_argv(ws: dict[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An argv is readable by every user (ps): the daemon's environment never goes into one."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-in-the-daemon-only")
    train = sandbox.train_argv([sys.executable, "train.py"], checkout=ws["checkout"], out_dir=ws["out"],
                               data_dir=ws["data"], env={"LOOPER_OUT": str(ws["out"])}, home=ws["home"])
    copy, eval_out = evaluator.prepare_evaluator(Path(sandbox.__file__), tmp_path / "eval")
    ev = sandbox.eval_argv(sys.executable, copy, weights=ws["out"], data_dir=ws["data"], out_dir=eval_out,
                           env={"LOOPER_DEVICE": "cpu"})
    assert "sk-in-the-daemon-only" not in " ".join(train + ev)
    assert "--clearenv" in train and "--clearenv" not in ev  # the evaluator inherits; train.py does not


def test_on_an_ssh_host_the_evaluator_runs_from_copies_with_the_looper_package(
        ws: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """looper.remote's side (wrap_on_host): evaluate.py and the synced looper package, both copied."""
    import looper

    shutil.copytree(Path(looper.__file__).parent, ws["checkout"] / "looper",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (ws["checkout"] / "evaluate.py").write_text(textwrap.dedent("""
        import argparse, json, pathlib
        import looper.core.scoring.metrics
        ap = argparse.ArgumentParser()
        for a in ("--weights", "--data", "--out"):
            ap.add_argument(a)
        args = ap.parse_args()
        pathlib.Path(args.out).write_text(json.dumps({"looper": looper.__file__}))
        """))
    (ws["out"] / "weights.pt").write_text("w")
    run = ws["out"].parent
    monkeypatch.chdir(ws["checkout"])
    env = {"LOOPER_SANDBOX": "eval", "LOOPER_DEVICE": "cpu"}
    argv, after = remote.wrap_on_host([sys.executable, "evaluate.py", "--weights", str(ws["out"] / "weights.pt"),
                                        "--data", str(ws["data"]), "--out", str(run / "out" / "METRICS.json")],
                                       run, env)
    assert "LOOPER_SANDBOX" not in env and argv[0].endswith("bwrap") and "-I" in argv
    done = proc.run(argv, timeout=60, env={"PYTHONPATH": str(ws["checkout"])})
    assert done.ok, done.stderr
    after()
    import json

    got = json.loads((run / "out" / "METRICS.json").read_text())["looper"]
    assert got.startswith(str((run / "eval" / "pkg").resolve())), got
    (ws["checkout"] / "train.py").write_text("import os\nprint('CWD', sorted(os.listdir('.')))\n")
    train, _ = remote.wrap_on_host([sys.executable, "train.py"], run, {"LOOPER_SANDBOX": "train",
                                                                         "LOOPER_DATA": str(ws["data"])})
    assert train[:2] == [sandbox.CLEAN_START, "-i"] and train[2].startswith("PATH=") and train[3].endswith("bwrap")
    assert "--unshare-net" in train
    done = proc.run(train, timeout=60)
    assert done.ok, done.stderr
    assert "'looper'" not in done.stdout and "'evaluate.py'" not in done.stdout and "'train.py'" in done.stdout, \
        done.stdout  # the synced looper package and the fixed files of the host's checkout are not shown
    plain, _ = remote.wrap_on_host([sys.executable, "train.py"], run, {})
    assert plain == [sys.executable, "train.py"]
