"""The tier rule (tests/tiers.py): a missing system part fails with the apt line, an opted-out
tier skips and is named; scripts/setup_system.sh installs from the same table."""

from __future__ import annotations

import subprocess

import pytest
import tiers


def test_a_missing_part_fails_naming_the_apt_line_and_the_opt_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tiers.SKIP_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception) as got:
        tiers.require("ssh", ["/usr/sbin/sshd"])
    msg = str(got.value)
    assert "missing /usr/sbin/sshd" in msg
    assert "apt-get install -y --no-install-recommends openssh-server openssh-client rsync" in msg
    assert "scripts/setup_system.sh ssh" in msg and "LOOPER_SKIP_TIERS=ssh" in msg


def test_nothing_missing_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tiers.SKIP_ENV, raising=False)
    tiers.require("browser", [])


def test_an_opted_out_tier_skips_with_the_marker_the_summary_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tiers.SKIP_ENV, "browser, slurm")
    assert tiers.skipped() == ["browser", "slurm"]
    with pytest.raises(pytest.skip.Exception) as got:
        tiers.require("slurm", ["slurmctld"])
    assert str(got.value) == f"{tiers.SKIP_MARK}: slurm"
    tiers.require("ssh", [])  # not opted out, nothing missing


@pytest.mark.parametrize("names", ["sshh", "base", "ssh,gpu"])
def test_an_unknown_or_unskippable_tier_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, names: str) -> None:
    monkeypatch.setenv(tiers.SKIP_ENV, names)
    with pytest.raises(pytest.UsageError):
        tiers.skipped()


def test_setup_script_installs_from_the_same_table() -> None:
    got = subprocess.run(["bash", str(tiers.ROOT / "scripts" / "setup_system.sh"), "--line"],
                         capture_output=True, text=True, timeout=30, check=True)
    want = [p for pkgs in tiers.packages().values() for p in pkgs]
    assert got.stdout.split()[4:] == want
    assert {"openssh-server", "rsync", "chromium", "slurm-wlm", "munge", "python3-venv", "git",
            "bubblewrap"} <= set(want)
