"""A demo assay plugin (tests/plugins): the `demowire` provider and the `calculator` tool.

Installed, it needs no file of assay changed: `demowire/MODEL` (or an assay.toml alias with
`provider = "demowire"`) is a model spec, and a task may name `calculator` in its `tools`.
"""
