"""How code inside a sandbox reaches what it may reach: Unix-socket relays, the in-sandbox
forwarder's host side, and the metered company LLM gateway."""
