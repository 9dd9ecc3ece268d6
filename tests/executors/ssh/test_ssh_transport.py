"""The ssh transport's one retry policy, observed with the real ssh client and rsync.

``looper-closed`` (from the test sshd's config) is a port nothing listens on: ssh exits 255
at once, so every try is real and only the waits are recorded instead of slept.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from looper.executors.ssh.transport import SshTransport, TransportFault

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _link(sshd, tmp_path: Path, host: str, sleeps: list[float]) -> SshTransport:  # noqa: ANN001
    return SshTransport(tmp_path, host, [f"-F {sshd.ssh_config}"], retries=3, sleep=sleeps.append)


def test_a_refused_control_command_is_tried_three_times_then_described(sshd, tmp_path: Path) -> None:  # noqa: ANN001
    sleeps: list[float] = []
    with pytest.raises(TransportFault, match="cannot reach looper-closed: connection refused") as info:
        _link(sshd, tmp_path, "looper-closed", sleeps).control("true")
    assert info.value.code == 255 and sleeps == [0.5, 1.0]


def test_a_remote_command_failing_by_itself_is_not_retried(sshd, tmp_path: Path) -> None:  # noqa: ANN001
    sleeps: list[float] = []
    got = _link(sshd, tmp_path, "looper-test", sleeps).control("echo out; exit 3")
    assert (got.exit_code, got.stdout.strip(), sleeps) == (3, "out", [])


def test_rsync_retries_a_link_failure_but_not_a_missing_file(sshd, tmp_path: Path) -> None:  # noqa: ANN001
    src = tmp_path / "w.pt"
    src.write_bytes(b"w")
    sleeps: list[float] = []
    closed = _link(sshd, tmp_path, "looper-closed", sleeps)
    # rsync says 255 (ssh's own) or 12 (protocol stream closed), as its race goes: both mean the link
    with pytest.raises(TransportFault, match=r"rsync exit (255|12)\b.*connection refused") as info:
        closed.rsync([str(src), closed.spec(str(tmp_path / "dst"))], "copying w.pt")
    assert info.value.code in (255, 12) and sleeps == [0.5, 1.0]
    sleeps.clear()
    link = _link(sshd, tmp_path, "looper-test", sleeps)
    with pytest.raises(TransportFault, match="rsync exit 23"):  # partial transfer: a file is missing
        link.rsync([str(tmp_path / "missing.pt"), link.spec(str(tmp_path / "dst"))], "copying missing.pt")
    assert sleeps == []
    link.rsync([str(src), link.spec(str(tmp_path / "dst.pt"))], "copying w.pt")
    assert (tmp_path / "dst.pt").read_bytes() == b"w" and sleeps == []
    link.close()
