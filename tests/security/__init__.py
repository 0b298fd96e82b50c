"""Red-team tests: real attacks mounted through the real harness (CLI, sandbox, store, web).

Each test asserts the *defended* behaviour. A failing test here is a vulnerability report,
not a flaky test: read the assertion message for what the harness did instead.
Shared machinery (work folders, host secrets, running the CLI with a time bound, searching
the store for leaked secrets) is in ``tests/security/_support.py``.
"""
