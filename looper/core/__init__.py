"""The pure core: verdicts, gates, failure signatures, the search plan, page metrics.

Nothing in this package touches files, subprocesses, the network or the database.
Callers read what they need and pass plain values in.
"""
