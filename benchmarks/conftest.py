"""Benchmarks live outside the test paths: run them with ``python -m pytest benchmarks --benchmark-only``."""
