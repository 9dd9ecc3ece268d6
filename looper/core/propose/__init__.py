"""What to try next (plan, search, the knob block) and whether a change is in scope.

Pure: nothing here touches files, subprocesses, the network or the database."""
