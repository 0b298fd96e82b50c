"""Talking to models: provider-neutral messages, prices, the SDK clients, one spec resolver,
and near-JSON repair of model replies. Agents, judges, routers and the company LLM gateway
all go through this package."""
