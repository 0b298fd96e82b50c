"""`python -m assay.web.worker_main FD`: a play worker process (`assay.web.playworker`).

A module of its own, imported by nothing: run as `-m`, `assay.web.playworker` itself would be
imported twice (the package imports it for the server's side).
"""

import sys

from assay.web.playworker import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
