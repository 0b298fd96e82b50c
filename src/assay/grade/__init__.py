"""How work is judged: contracts, rubrics, checks, judges and the evidence audit.

Nothing here ever calls the agent; graders read only the workspace, the transcript and the
ledgers kept outside the sandbox.
"""
