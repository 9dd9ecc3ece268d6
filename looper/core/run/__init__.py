"""A run's resources: its step budget, where its time went, its cores, the limits it hit.

Pure: nothing here touches files, subprocesses, the network or the database."""
