"""assay: measure what language agents are worth on real professional work."""

__version__ = "0.1.0"
HARNESS_VERSION = "assay-harness/0.1.0"
