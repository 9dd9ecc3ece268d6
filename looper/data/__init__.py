"""Data sets: the one tiler and hash rule (``tiles``), readers of labelled exports (``formats``), the
import pipeline (``importer``), the checks' facts (``facts``) and the ``looper data`` commands (``cli``).

Kept free of imports: prepare.py (a fixed file) imports ``looper.data.tiles``, and what it imports is
pinned with the fixed files (looper.workspace.hashes.SCORING_MODULES).
"""
