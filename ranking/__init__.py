"""Ranking algorithms and metrics. Knows nothing of Kafka, Redis or Prometheus."""
