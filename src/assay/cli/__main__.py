"""`python -m assay.cli`: the `assay` command."""

from assay.cli import main

main()
