"""The HTTP service: the app and its routes, request bodies, the model registry, OpenAPI."""
