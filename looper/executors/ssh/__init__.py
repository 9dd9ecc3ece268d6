"""The ssh executor: each run on an SSH host with the local supervisor in charge (executor.py), the host
and its command line (host.py), what a run's end means (outcome.py), the ssh transport (transport.py).
docs/REMOTE.md."""
