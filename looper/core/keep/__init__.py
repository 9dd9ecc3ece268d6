"""The keep decision: the gate and its statistics, the race of seeds, the confirmation, the transfer.

Pure: nothing here touches files, subprocesses, the network or the database."""
