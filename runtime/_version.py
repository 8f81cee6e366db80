"""raygent's version, in the base so that any module may name it."""

__version__ = "0.1.0"
