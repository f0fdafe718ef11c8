"""Harnesses: local services for development and tests, chaos, soak and benchmarks."""
