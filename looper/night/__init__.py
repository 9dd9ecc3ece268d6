"""The night: the loop over experiments (loop), one candidate's pipeline (experiment) through its seeds and
the gate's looks (race) to ``settle`` (settle), the records it hands forward (records), the tag's baseline and
``looper verify`` (baseline), one train.py measured (measure), the checks before and after a run (checks,
startcheck), the canary, the record of a run (runs), the morning's confirmation and transfer check (confirm,
transfer), what every step shares (context, tag), the daemon's own resources (guard), the live display and
the pager (display, notify)."""
