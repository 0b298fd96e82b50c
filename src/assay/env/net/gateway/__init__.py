"""The company LLM gateway: the only way code in a workspace reaches a model, metered and capped.

An OpenAI-compatible HTTP/1.1 endpoint served on a Unix socket in the run directory (outside
the workspace), bound read-only into the sandbox at `/run/assay/`. Inside the sandbox a
forwarder (`assay.env.net.forwarder`) listens on the sandbox's own loopback and relays to the
socket, so `system/llm_client.py` and unmodified case code can use `http://127.0.0.1:PORT`.

By job: `server` (the endpoint: `LLMGateway`, its socket, HTTP/1.1 framing and routes),
`rules` (what a request may carry upstream and the bound of what it can be billed), `budget`
(each phase's allowance: reserve, then settle; the record of every request), `upstream` (the
raw pass-through to the provider), `scenario` (a scenario's gateway: its model resolved, the
engagement's budgets).
"""
