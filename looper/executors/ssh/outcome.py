"""What a remote run's end means: the host's reply (or its silence) turned into a RunResult, a GPU summary,
a data verdict."""

from __future__ import annotations

from typing import Any

from looper import proc
from looper.core.verdicts.verdict import Verdict
from looper.executors.base import RunResult
from looper.executors.common import (
    NO_TOOL_CODE,
    run_result,
)
from looper.executors.ssh.transport import TransportFault


# -- what a remote run's end means ------------------------------------------------------------------
def unreachable_after(s: proc.Supervised, fault: TransportFault, drop_words: str) -> RunResult:
    """The run's result when its remote process group could not be ended (or checked) afterwards."""
    result = run_result(s)
    result.transport_exit_code = 255
    if s.stopped_by:
        result.transport_error = (f"could not end the remote run after {s.stopped_by}: {fault} "
                                  "(looper reap will end it at the next start)")
    elif s.exit_code == 255 or s.signal is not None:
        result.transport_error = (f"{drop_words}; and reconnecting failed: {fault} "
                                  "(the remote run may still be alive; looper reap will end it)")
    else:
        result.transport_error = f"the run finished but its remote process group was not checked: {fault}"
    return result


def settle_run(s: proc.Supervised, ended: dict[str, Any], host: str, drop_words: str) -> RunResult:
    """The run's result once ``looper.remote end`` answered: what the REMOTE run died of."""
    result = run_result(s)
    what, status = str(ended.get("what", "GONE")), str(ended.get("status", ""))
    ssh_failed = not s.stopped_by and (s.exit_code == 255 or s.signal is not None)
    if ended.get("refused"):  # the host ran nothing: the daemon's own request was unreadable (a harness bug)
        result.exit_code, result.signal = None, None
        result.transport_exit_code = NO_TOOL_CODE
        result.transport_error = f"on {host}: {ended['refused']}"
    elif s.stopped_by:  # not what ended the local ssh client
        result.exit_code = None
        result.signal = 9 if what == "KILLED" else 15
        result.log_tail += f"\n[looper] remote process group ended ({what.lower()}) after {s.stopped_by}"
    elif ssh_failed and status != "255":  # a 255 in the status file is the command's own
        result.transport_exit_code = 255
        alive = "; the remote run was still alive and was ended" if not status else ""
        result.transport_error = f"{drop_words} during the run{alive}"
    elif not ssh_failed:
        code = s.exit_code
        if code is not None and 128 < code < 128 + 65:
            result.exit_code, result.signal = None, code - 128  # a signal death is reported as 128+N
        if code not in (0, None) and "no space left on device" in s.log_tail.lower():
            result.transport_exit_code = NO_TOOL_CODE
            result.transport_error = f"remote disk full on {host} (the run hit 'No space left on device')"
    return result


def gpu_summary(ended: dict[str, Any], host: str) -> dict:
    data = ended.get("gpu")
    if not isinstance(data, dict):
        return {"available": False, "problem": f"the GPU sampler on {host} wrote nothing"}
    if data.get("lost"):
        data["lost_reason"] = f"on {host}: {data.get('lost_reason', 'GPU lost mid-run')}"
    return data


def data_verdict(found: dict[str, Any], data: str, host: str) -> Verdict:
    state = found.get("state")
    if state == "dirty":
        return Verdict.errored(f"data folder {data} on {host} exists but has no manifest.json: "
                               "move it away or finish preparing it")
    if state == "missing":
        return Verdict.errored(f"data missing on {host}: {data}/manifest.json does not exist")
    if state == "prepare failed":
        return Verdict.errored(f"prepare.py failed on {host} (exit {found.get('exit')}): {found.get('tail', '')}")
    index = {"label_index": str(found["label_index"])} if found.get("label_index") else {}
    return Verdict.passed({"hash": str(found["hash"]), "files": int(found["files"]), "host": host, "path": data,
                           **index})
