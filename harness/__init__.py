"""Harnesses around the product: local services for development and tests, datasets,
chaos, soak, and every benchmark (`*_bench.py`; `rankstream bench ...` parses arguments
and calls them)."""
