"""What a tag pins when it starts, compared: the runtime, the starting weights.

Pure: nothing here touches files, subprocesses, the network or the database."""
