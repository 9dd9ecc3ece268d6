"""The workspace on disk: `looper init` and its presets (create.py), the branch and worktrees (gitops.py), one
daemon at a time (lock.py), the data tree and fixed-file hashes (hashes.py, importable without git: the ssh
host's ``python -m looper.remote`` uses it), approved baseline files (baselines.py)."""
