"""The hardened file primitives every layer shares, one module per job.

The harness runs as root, so a careless `open()` on an agent-chosen path could read or
overwrite anything on the host, and a careless read of a FIFO blocks forever. Each mechanism
exists once, here: path checks and no-follow resolution (`paths`), reads that follow no link
and never block (`reads`), content digests (`digests`), copying a tree an agent could write
(`copying`), writes by a new inode renamed into place (`writes`), and acting as a run's uid
(`fsuid`). The agent's file tools are built on them in `assay.agent.file_tools`.
"""

# Public API: docs/extending.md tells a tool's author to raise `assay.fs.PathError`, so that
# name stays importable from here; everything else is imported from its own module.
from assay.fs.paths import PathError

__all__ = ["PathError"]
