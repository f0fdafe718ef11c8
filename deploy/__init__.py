"""Deployment files shipped with the package: the Kafka broker recipe and the Prometheus
configuration template that `rankstream services up` uses (docker compose files stay in
the repository)."""
