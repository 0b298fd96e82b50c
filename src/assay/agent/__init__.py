"""Who does the task: the shared loop, the tools, model clients and policy agents."""
