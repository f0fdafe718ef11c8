"""The wire and the stores: record schemas and their encoding, transports (Kafka,
embedded), model stores (Redis, embedded), recordings, the deployment's settings, and the
click join's event-time window (`click_window`)."""
