"""Offline evaluations behind `rankstream eval ...`: each returns a JSON-ready dict."""
