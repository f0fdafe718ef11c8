"""The one exception the service harness raises."""

from __future__ import annotations


class ServiceError(RuntimeError):
    """A local service could not be installed, started, reached or stopped.

    The message says which service and why (with the tail of its log when it died),
    so the CLI can print it as is and the test fixture can skip or fail with it.
    """
