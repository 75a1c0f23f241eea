"""Reproducible benchmarks; results in benchmarks/README.md."""
