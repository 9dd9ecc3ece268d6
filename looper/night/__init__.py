"""The night: the loop over experiments (loop), one candidate's pipeline to ``settle`` (experiment), one
train.py measured (measure), the checks before a run (startcheck, measure.preflight), the canary, the
morning's confirmation (confirm), what every step shares (context), the daemon's own resources (guard),
the live display and the pager (display, notify)."""
