"""Deprecated (issue 39): moved to `rankstream.producers.feedback_producer`. This old name keeps
working, with a DeprecationWarning, for one release; it is removed in the next."""

import warnings

from rankstream.producers import feedback_producer as _moved

warnings.warn(f"{__name__} moved to {_moved.__name__}; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)  # fmt: skip
__getattr__ = _moved.__getattribute__
