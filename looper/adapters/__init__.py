"""Adapters: the parts of looper that touch the world (processes, git, network, pager).

Each adapter sits behind a small protocol so that the orchestration in ``looper.loop`` can
be tested with fakes and the pure rules in ``looper.core`` never see I/O.
"""
