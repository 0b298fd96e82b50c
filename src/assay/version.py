"""The version of assay, written in one place (pyproject.toml reads it from here)."""

__version__ = "0.2.0"
HARNESS_VERSION = f"assay-harness/{__version__}"
"""Recorded on every run, so a stored result can be traced to the harness that made it."""
