"""Where the task is done: workspaces, the sandbox, stakeholders."""
