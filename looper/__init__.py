"""looper: an autonomous experiment loop daemon that tells the truth all night."""

__version__ = "0.1.0"
