"""rankstream: learning image rankings from a live stream of relevance feedback."""

__version__ = "0.1.0"
