"""A failed or empty run: crash or harness error, whose fault, its evidence, its seeds.

Pure: nothing here touches files, subprocesses, the network or the database."""
