"""Fast (no cluster): scontrol text -> outcome, the batch script, the slurm config keys.

The scontrol lines are captured from the single-node cluster of scripts/slurm_up.sh
(SLURM 22.05), trimmed of fields that do not matter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from looper.config import ExecutorConfig, load_config
from looper.core.fault.failure import FailureEvidence, classify_failure
from looper.core.verdicts.verdict import Outcome
from looper.errors import ConfigError
from looper.executors import make_executor
from looper.executors.slurm.executor import SlurmExecutor
from looper.executors.slurm.scheduler import job_end, parse_exit_code, parse_scontrol, time_limit_minutes

_HEAD = "JobId={id} JobName=looper-556d0810-r1-train UserId=root(0) GroupId=root(0) Priority=4294901759 "
_TAIL = (" RunTime=00:00:01 TimeLimit=00:01:00 Partition=debug NodeList=vm BatchHost=vm "
         "WorkDir=/tmp/h8x Comment=looper:abc  StdErr=/tmp/h8x/ok.out StdIn=/dev/null StdOut=/tmp/h8x/ok.out Power= ")
COMPLETED = _HEAD.format(id=5) + "JobState=COMPLETED Reason=None Dependency=(null) ExitCode=0:0" + _TAIL
FAILED_3 = _HEAD.format(id=1) + "JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=3:0" + _TAIL
CGROUP_OOM = _HEAD.format(id=4) + "JobState=OUT_OF_MEMORY Reason=OutOfMemory Dependency=(null) ExitCode=0:125" + _TAIL
POLL_OOM = _HEAD.format(id=2) + "JobState=FAILED Reason=JobLaunchFailure Dependency=(null) ExitCode=0:9" + _TAIL
CANCELLED = _HEAD.format(id=3) + "JobState=CANCELLED Reason=None Dependency=(null) ExitCode=0:15" + _TAIL
NODE_FAIL = _HEAD.format(id=9) + "JobState=NODE_FAIL Reason=NodeDown Dependency=(null) ExitCode=0:0" + _TAIL
PREEMPTED = _HEAD.format(id=10) + "JobState=PREEMPTED Reason=None Dependency=(null) ExitCode=0:15" + _TAIL
TIMEOUT = _HEAD.format(id=11) + "JobState=TIMEOUT Reason=TimeLimit Dependency=(null) ExitCode=0:15" + _TAIL
SEGV = _HEAD.format(id=12) + "JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=0:11" + _TAIL
POLL_OOM_LOG = ("slurmstepd-vm: error: StepId=2.batch exceeded memory limit (298012672 > 52428800), being killed\n"
                "slurmstepd-vm: error: Exceeded job memory limit")


def _end(text: str, **kw: str):  # noqa: ANN202 - JobEnd
    f = parse_scontrol(text)
    return job_end(f, job_id=f["JobId"], **kw)


def test_parse_scontrol_keeps_values_with_spaces() -> None:
    f = parse_scontrol(CANCELLED)
    assert (f["JobId"], f["JobState"], f["ExitCode"], f["Comment"]) == ("3", "CANCELLED", "0:15", "looper:abc")
    spaced = parse_scontrol("JobId=7 Comment=a long comment JobState=RUNNING Reason=None")
    assert (spaced["Comment"], spaced["JobState"]) == ("a long comment", "RUNNING")
    assert parse_exit_code("3:0") == (3, None) and parse_exit_code("0:125") == (0, 125)
    assert parse_exit_code("") == (None, None)


def test_success_and_own_exit_code() -> None:
    ok = _end(COMPLETED)
    assert (ok.kind, ok.exit_code, ok.signal, ok.oom) == ("done", 0, None, False)
    bad = _end(FAILED_3)
    assert (bad.kind, bad.exit_code, bad.signal) == ("done", 3, None)
    segv = _end(SEGV)
    assert (segv.kind, segv.exit_code, segv.signal) == ("done", None, 11)


@pytest.mark.parametrize(("text", "output"), [(CGROUP_OOM, ""), (POLL_OOM, POLL_OOM_LOG)])
def test_out_of_memory_is_the_changes_crash(text: str, output: str) -> None:
    end = _end(text, output=output)
    assert end.kind == "done" and end.oom and end.exit_code is None and end.signal == 9
    assert end.reason.startswith("slurm: OUT_OF_MEMORY")
    c = classify_failure(FailureEvidence(exit_code=end.exit_code, signal=end.signal, timed_out=False,
                                         stalled=False, log_tail="step 1\n" + end.reason))
    assert c.outcome is Outcome.CRASH and c.kind == "oom", c


def test_launch_failure_without_memory_words_is_the_harness() -> None:
    assert _end(POLL_OOM, output="step 1").kind == "harness"


@pytest.mark.parametrize(("text", "word"), [(CANCELLED, "CANCELLED by someone other than looper"),
                                            (NODE_FAIL, "NODE_FAIL"), (PREEMPTED, "PREEMPTED")])
def test_cluster_faults_are_harness(text: str, word: str) -> None:
    end = _end(text)
    assert end.kind == "harness" and word in end.reason, end


def test_looper_own_stop_is_not_a_harness_fault() -> None:
    end = _end(CANCELLED, stopped_by="budget")
    assert (end.kind, end.exit_code, end.signal) == ("done", None, 15)
    timeout = _end(TIMEOUT)
    assert timeout.kind == "done" and timeout.timed_out


def test_unknown_state_is_harness() -> None:
    end = job_end({"JobState": "WEIRD", "ExitCode": "0:0"}, job_id="1")
    assert end.kind == "harness" and "WEIRD" in end.reason


def test_time_limit_rounds_up_to_minutes() -> None:
    assert [time_limit_minutes(s) for s in (1, 60, 61, 130, 0)] == [1, 1, 2, 3, 1]


def test_batch_script_directives(tmp_path: Path) -> None:
    ex = SlurmExecutor(tmp_path, ExecutorConfig(kind="slurm", partition="gpu", gres="gpu:1", account="lab",
                                                sbatch_extra=["--mem=16G", "--qos=low"]))
    text = ex.batch.script("looper-x-r1-train", tmp_path / "o.out", tmp_path / "ck dir", ["python", "train.py"],
                         {"LOOPER_SEED": "3", "ODD": "a b'c"}, 125)
    lines = text.splitlines()
    for want in ["#SBATCH --partition=gpu", "#SBATCH --gres=gpu:1", "#SBATCH --account=lab", "#SBATCH --mem=16G",
                 "#SBATCH --qos=low", "#SBATCH --time=3", f"#SBATCH --comment={ex.batch.comment}",
                 "export LOOPER_SEED=3", "exec python train.py"]:
        assert want in lines, (want, text)
    assert "export ODD='a b'\"'\"'c'" in lines and f"cd '{tmp_path / 'ck dir'}'" in text
    # every directive comes before the first command (sbatch stops reading at the first one)
    first_cmd = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    assert all(not ln.startswith("#SBATCH") for ln in lines[first_cmd:])
    other = SlurmExecutor(tmp_path / "other", ExecutorConfig(kind="slurm"))
    assert other.batch.comment != ex.batch.comment and other.name_prefix != ex.name_prefix


def test_registry_builds_slurm(tmp_path: Path) -> None:
    ex = make_executor(tmp_path, ExecutorConfig(kind="slurm", requeue_limit=0, start_timeout=5))
    assert ex.name == "slurm" and isinstance(ex, SlurmExecutor)
    assert (ex.requeue_limit, ex.start_timeout) == (0, 5)


def test_every_worker_s_slurm_job_uses_its_own_allocation_s_gpu(tmp_path: Path) -> None:
    """Each job sees the GPUs of its own allocation, numbered from 0: workers 0, 1, 2 all take gpu_index there
    (0), where they once asked for GPUs 1 and 2 of a one-GPU allocation (a crash blamed on the candidate)."""
    from looper.core.run.slots import worker_gpu

    ex = make_executor(tmp_path, ExecutorConfig(kind="slurm", require_gpu=True))
    assert [worker_gpu(i, 0, ex.gpu_count()) for i in range(3)] == [0, 0, 0]


def test_config_slurm_keys(tmp_path: Path) -> None:
    d = ExecutorConfig().model_dump()
    assert "partition" not in d and "requeue_limit" not in d  # other kinds keep their dump
    c = ExecutorConfig(kind="slurm")
    assert (c.partition, c.gres, c.account, c.sbatch_extra, c.start_timeout, c.requeue_limit) == \
        ("", "", "", [], 600, 2)
    assert c.model_dump()["requeue_limit"] == 2
    toml = tmp_path / "looper.toml"
    toml.write_text('[executor]\nkind = "slurm"\npartition = "gpu"\ngres = "gpu:a100:2"\n'
                    'sbatch_extra = ["--mem=8G"]\nstart_timeout = 30\nrequeue_limit = 0\n')
    cfg = load_config(toml)
    assert (cfg.executor.gres, cfg.executor.start_timeout, cfg.executor.requeue_limit) == ("gpu:a100:2", 30, 0)


@pytest.mark.parametrize(("body", "key"), [
    ('gres = "gpu 1"', "executor.gres"),
    ('sbatch_extra = ["mem=1G"]', "executor.sbatch_extra"),
    ('start_timeout = 0', "executor.start_timeout"),
    ('requeue_limit = -1', "executor.requeue_limit"),
    ('partition = "a b"', "executor.partition"),
])
def test_config_slurm_errors_name_the_key(tmp_path: Path, body: str, key: str) -> None:
    toml = tmp_path / "looper.toml"
    toml.write_text(f'[executor]\nkind = "slurm"\n{body}\n')
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(toml)


@pytest.mark.parametrize("entry", ["mem=16G", "--mem=16G\n#SBATCH --uid=0"])
def test_an_sbatch_extra_entry_that_is_not_one_option_is_refused_naming_it(tmp_path: Path, entry: str) -> None:
    """A plain dict section skips the config file's own check: the executor refuses it too."""
    with pytest.raises(ConfigError, match="not one sbatch option"):
        SlurmExecutor(tmp_path, {"kind": "slurm", "sbatch_extra": [entry]})
    assert SlurmExecutor(tmp_path, {"kind": "slurm", "sbatch_extra": ["--mem=16G"]}).batch.extra == ("--mem=16G",)
