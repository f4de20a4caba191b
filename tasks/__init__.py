"""Prefect task wrappers around the pure stage logic in ``tasks.core``."""
