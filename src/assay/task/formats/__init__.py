"""Readers: the native format and the upstream ones, each into the one Task model."""
