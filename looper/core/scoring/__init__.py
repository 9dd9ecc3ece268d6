"""The score of a model: page matching, tiles, classes, MATCHES.json, the run that ships.

Pure: nothing here touches files, subprocesses, the network or the database."""
