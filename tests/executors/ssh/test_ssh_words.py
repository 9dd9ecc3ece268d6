"""Fast checks of the SSH executor's pure parts: option parsing and transport faults in words.

No sshd needed: these build the executor and feed it ssh's own messages.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from looper import proc
from looper.executors.ssh.executor import SshExecutor
from looper.executors.ssh.transport import parse_options


def _ex(tmp_path: Path) -> SshExecutor:
    return SshExecutor(tmp_path, {"host": "gpu-box", "remote_dir": "~/looper"})


def _done(stderr: str, code: int | None = 255, timed_out: bool = False) -> proc.Completed:
    return proc.Completed(("ssh",), code, "", stderr, timed_out, 12.0)


def test_parse_options_keeps_flags_and_wraps_key_values() -> None:
    assert parse_options(["-F /etc/looper/ssh_config", "Compression=yes", " "]) == [
        "-F", "/etc/looper/ssh_config", "-o", "Compression=yes"]
    assert parse_options("ProxyJump=bastion") == ["-o", "ProxyJump=bastion"]
    assert parse_options(None) == []


@pytest.mark.parametrize("stderr,words", [
    ("ssh: connect to host 10.0.0.9 port 22: Connection refused", "connection refused"),
    ("root@10.0.0.9: Permission denied (publickey).", "authentication to gpu-box failed"),
    ("ssh: Could not resolve hostname gpu-box: Name or service not known", "does not resolve"),
    ("ssh: connect to host 10.0.0.9 port 22: No route to host", "unreachable"),
    ("ssh: connect to host 10.0.0.9 port 22: Connection timed out", "timed out"),
    ("Host key verification failed.", "host key"),
    ("rsync: write failed on \"/x/weights.pt\": No space left on device (28)", "remote disk full on gpu-box"),
    ("Connection to 10.0.0.9 closed by remote host.", "dropped"),
    ("Timeout, server gpu-box not responding.", "dropped"),
    ("something odd", "ssh to gpu-box failed: something odd"),
])
def test_transport_faults_are_described_naming_the_host(tmp_path: Path, stderr: str, words: str) -> None:
    text = _ex(tmp_path).describe(_done(stderr))
    assert words in text and "gpu-box" in text


def test_a_command_that_hangs_is_described_as_no_answer(tmp_path: Path) -> None:
    assert "did not answer within 12 s" in _ex(tmp_path).describe(_done("", None, timed_out=True))


def test_drop_words_ignore_the_training_log(tmp_path: Path) -> None:
    ex = _ex(tmp_path)
    assert ex.link.drop_words("epoch 3 loss 1.2\nstep 40") == (
        "the connection to gpu-box dropped (ssh exited 255 without a message)")
    assert "dropped" in ex.link.drop_words("epoch 3\nConnection to 1.2.3.4 closed by remote host.")


def test_control_path_stays_short_enough_for_a_unix_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    path = SshExecutor(deep, {"host": "gpu-box", "remote_dir": "/r"}).link.control_path_for()
    assert len(str(path)) + 18 <= 104 and path.parent.is_dir()
    near = SshExecutor(tmp_path, {"host": "gpu-box", "remote_dir": "/r"}).link.control_path_for()
    if len(str(tmp_path)) < 60:
        assert near.parent == tmp_path / ".looper" / "ssh"
