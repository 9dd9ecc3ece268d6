"""A data set's checks (the rules over gathered facts) and its seeded page split.

Pure: nothing here touches files, subprocesses, the network or the database."""
