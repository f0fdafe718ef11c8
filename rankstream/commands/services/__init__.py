"""`rankstream services ...`: local Kafka, Redis and Prometheus."""
