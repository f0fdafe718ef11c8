"""The HTTP service (`rankstream serve`): the app and its routes, request bodies, OpenAPI,
the registry's snapshot of loaded models, the once-only delivery of feedback and clicks,
the `/v1/models` listing, and the workers it runs in-process in the embedded default."""
