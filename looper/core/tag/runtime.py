"""The runtime pin compared (pure): what changed in the Python runtime, its site-packages or the looper
package since a tag pinned them (the fingerprint: looper/workspace/runtimepin.py). Each change is named; a change
is a harness error, never a candidate's fault."""

from __future__ import annotations

from collections.abc import Mapping

PREFIX = "runtime:"
MAX_NAMED = 8  # an error names at most this many changes


def pinned(fixed: Mapping[str, object]) -> dict[str, object]:
    """The runtime entries of a tag's pinned hashes ({} for a tag pinned before the runtime was)."""
    return {k: v for k, v in fixed.items() if k.startswith(PREFIX)}


def changes(pin: Mapping[str, object], now: Mapping[str, object], when: str) -> list[str]:
    """Each runtime entry added, removed or changed between ``pin`` and ``now`` (only their
    ``runtime:`` keys are read), naming it; [] when ``pin`` holds none (nothing was pinned)."""
    before, after = pinned(pin), pinned(now)
    if not before:
        return []
    out: list[str] = []
    for key in sorted(before.keys() | after.keys()):
        name = key[len(PREFIX):]
        if key not in after:
            out.append(f"runtime file {name} was removed {when}")
        elif key not in before:
            out.append(f"runtime file {name} was added {when} (not in the tag's pin)")
        elif before[key] != after[key]:
            out.append(f"runtime file {name} changed {when} (pinned {str(before[key])[:19]}, now {str(after[key])[:19]})")
    if len(out) > MAX_NAMED:
        out = [*out[:MAX_NAMED], f"... and {len(out) - MAX_NAMED} more runtime changes"]
    return out
