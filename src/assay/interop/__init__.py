"""Interop with other evaluation frameworks: assay tasks out as an Inspect AI task file
(`export`), Inspect AI logs in as stored runs (`inspect_import`).

Inspect AI is an optional extra (`pip install -e '.[inspect]'`): only `inspect_task` (the
module an exported task file imports, run by Inspect itself) and the log reader import it,
and the reader does so lazily, so the plain install runs every other command.
"""
