"""Wire schema, transports (Kafka, embedded) and model stores (Redis, embedded)."""
