"""Operator runbook commands behind ``scripts/`` (erasure lifecycle, and later the pipeline)."""
