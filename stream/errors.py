"""The errors the transports and stores raise, whatever client library sits underneath.

Kafka's and Redis's client exceptions stop here: every public method of
`KafkaTransport` (and its producers and consumers) and of `RedisModelStore` is wrapped by
`translating`, so a caller above `stream/` sees only

* `ServiceUnavailableError` (`TransportError` for Kafka, `StoreUnavailableError` for Redis): the
  service could not be reached or did not answer in time. Transient: retry after a
  back-off (`TRANSIENT` is the tuple the workers catch);
* `CredentialsError`: the service refused our credentials or an ACL forbids the call.
  Never transient: no retry fixes a wrong password, so the process stops and says so.

Anything else (a `ValueError` for a bad argument, `FencingError`) passes through as is.
The workers therefore never import kafka or redis (`tests/test_architecture.py`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class ServiceUnavailableError(RuntimeError):
    """A broker or store could not be reached, or did not answer in time: retry later."""


class TransportError(ServiceUnavailableError):
    """A Kafka call failed after the client's own retries."""


class StoreUnavailableError(ServiceUnavailableError):
    """A Redis call failed after the client's own retries."""


class CredentialsError(RuntimeError):
    """Kafka or Redis refused our credentials (authentication or authorization).

    Deliberately *not* a ServiceUnavailableError: retrying cannot fix a wrong password or a
    missing ACL, so no retry path catches it and the process stops with this message.
    """


# What a long-running worker retries after a back-off. The builtin connection errors are
# included for implementations that raise them directly (none of ours do today).
TRANSIENT: tuple[type[BaseException], ...] = (
    ServiceUnavailableError,
    ConnectionError,
    TimeoutError,
)


def credentials_refused(service: str, exc: BaseException) -> CredentialsError:
    """The one message for refused credentials: what refused, why, and what to check."""
    return CredentialsError(
        f"{service} refused the credentials ({type(exc).__name__}: {exc}); not retrying: "
        f"check the RANKSTREAM_{service.upper()}_* user/password settings and ACLs"
    )


def translating(
    service: str,
    unavailable: type[ServiceUnavailableError],
    client_errors: Callable[[], tuple[type[BaseException], ...]],
    refused_errors: Callable[[], tuple[type[BaseException], ...]],
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A decorator: the client's refusals become CredentialsError, its other failures
    `unavailable`. The error tuples are looked up on first use (client imports are slow)."""

    def decorate(method: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> T:
            try:
                return method(*args, **kwargs)
            except (CredentialsError, ServiceUnavailableError):
                raise
            except refused_errors() as exc:
                raise credentials_refused(service, exc) from exc
            except client_errors() as exc:
                name = call.__qualname__
                raise unavailable(f"{service}: {name} failed: {type(exc).__name__}: {exc}") from exc

        return call

    return decorate


def translate_public_methods(decorator: Callable[[Callable[..., Any]], Callable[..., Any]]):
    """Class decorator: apply `decorator` to every public method of the class (constructors
    included), so a method added later cannot leak a client exception. A public method
    it inherits (a protocol's default, such as `ModelStore.save`) is wrapped too, under
    this class's name."""

    def apply(cls: type) -> type:
        names = [n for n in dir(cls) if not n.startswith("_")]
        if "__init__" in vars(cls):
            names.append("__init__")
        for name in names:
            value = inspect.getattr_static(cls, name)
            if isinstance(value, staticmethod | classmethod | property) or not callable(value):
                continue
            wrapped = decorator(value)
            wrapped.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, wrapped)
        return cls

    return apply
