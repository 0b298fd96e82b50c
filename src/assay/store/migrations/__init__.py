"""The store's Alembic migrations (`versions/`) and what older ones need of the code they were
written with (`summaries_0007`)."""
