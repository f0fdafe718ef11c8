"""The linear kernel built ahead of time, so a short process needs no numba.

A replay of a 3M-triplet log spends about half its ~0.6 s in numba itself: importing it
(llvmlite and ~220 modules) and, at the first call, building its target context (whose
registries import scipy.linalg for BLAS) and loading the cached machine code. Long-lived
workers never notice; a back-test started from a shell does.

`build()` compiles the very function the JIT runs (`kernels.learn_linear.py_func`) with
`numba.pycc`, under the dispatcher's own options (`nogil` -> the GIL released,
`error_model`, `fastmath`: parsed by numba exactly as the dispatcher parses them), into a
CPython extension that needs neither numba nor LLVM at run time. One export per
argument layout in `VARIANTS` (phi float32 or float64, with or without scalers, with
or without importance weights);
pycc's wrappers do not check dtypes, so `linear_kernel` hands a call to the build only
when every argument matches its export (dtype, dimensions, C order) and to the JIT
dispatcher otherwise. Same source, same options, no fast-math and a summation order
fixed in the code (`ranking.lanes`): the two give bit-identical weights
(`tests/test_aot.py`).

Where: numba's cache directory (`NUMBA_CACHE_DIR`, else `__pycache__` beside this
file), under a name keyed by the kernel sources, this module, numba, numpy, the Python
ABI and the CPU (it is built for the host CPU), so a stale build is never loaded.
Built by `python -m rankstream.ranking.aot` (make's install step; `bench replay` before
its clock); without a C compiler there is no build and the JIT serves every call.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import platform
import sys
import sysconfig
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

# numpy, numba and the build tools are imported where used: the CLI reads MODES while
# it builds its parser, for every command (`python -X importtime`, median of 3 on the
# loaded 2-core box: numpy +0.28 s, the kernels +1.0 s, numba.pycc +1.3 s).
MODES = ("auto", "aot", "jit")  # auto: the build when there is one; aot: required; jit: never
_SOURCES = ("kernels.py", "lanes.py", "rules.py", "aot.py")  # what the compiled code is made of


# The numba releases the build is tested on, [first, last) by major.minor: it reaches
# into numba.pycc's internals (`_dispatcher_flags`), which numba does not keep stable.
# pyproject.toml pins numba to the same range (tests/test_aot.py checks they agree).
TESTED_NUMBA = ((0, 68), (0, 69))


class AotUnavailableError(RuntimeError):
    """`set_mode("aot")` without a loadable build for this machine and these sources."""


class UntestedNumbaError(RuntimeError):
    """The installed numba is outside `TESTED_NUMBA`: no build (the JIT serves)."""


def check_numba_version(installed: str) -> None:
    """UntestedNumbaError unless `installed` (e.g. "0.68.1") is in `TESTED_NUMBA`.

    >>> check_numba_version("0.68.1")
    >>> check_numba_version("0.70.0")
    Traceback (most recent call last):
    ...
    rankstream.ranking.aot.UntestedNumbaError: numba 0.70.0 is outside ... (>=0.68, <0.69): ...
    """
    first, last = TESTED_NUMBA
    try:
        major_minor = tuple(int(part) for part in installed.split(".")[:2])
    except ValueError:
        major_minor = (-1,)
    if not first <= major_minor < last:
        raise UntestedNumbaError(
            f"numba {installed} is outside the range the ahead-of-time build is tested on "
            f"(>={'.'.join(map(str, first))}, <{'.'.join(map(str, last))}): it patches "
            "numba.pycc internals, so it is not built and the JIT serves every call (same "
            "weights)"
        )


@dataclass(frozen=True)
class Variant:
    """One exported layout of `learn_linear`'s arguments (p1, p2 are int32 rows)."""

    phi_dtype: str  # "float32" (as decoded from the wire) or "float64"
    scaled: bool  # scales is a (groups, d) float64 array, else None
    weighted: bool = False  # weights is an (n,) float64 array, else None

    @property
    def symbol(self) -> str:
        scaled = "scaled" if self.scaled else "unscaled"
        return f"learn_linear_{self.phi_dtype}_{scaled}{'_weighted' if self.weighted else ''}"


VARIANTS = tuple(
    Variant(dtype, bool(scaled), bool(weighted))
    for dtype in ("float32", "float64")
    for scaled in (1, 0)
    for weighted in (0, 1)
)

# learn_linear's arguments in order: (name, dtype, ndim, read-only). Inputs are handed
# over read-only (`ranking.online._readonly`); "phi" takes the variant's dtype,
# "scales" is absent (None) in an unscaled variant and "weights" in an unweighted one.
_ARGUMENTS = (
    ("rules", "int64", 1, False),
    ("params", "float64", 1, False),
    ("W", "float64", 2, False),
    ("scales", "float64", 2, False),
    ("group", "int64", 1, False),
    ("phi", None, 2, True),
    ("p1", "int32", 1, True),
    ("p2", "int32", 1, True),
    ("y", "float64", 1, True),
    ("weights", "float64", 1, True),
    ("shrink", "float64", 1, False),
    ("anchors", "float64", 2, False),
    ("n_updates", "int64", 1, False),
    ("status", "int64", 1, False),
    ("bad_row", "int64", 1, False),
)

_state: dict[str, Any] = {"mode": "auto", "module": None, "loaded": False}
_loading = threading.Lock()


def build_key() -> str:
    """What a build depends on, hashed: sources, numba, numpy, the ABI and the CPU."""
    import numpy as np

    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in _SOURCES:
        digest.update((here / name).read_bytes())

    for part in (
        importlib.metadata.version("numba"),
        np.__version__,
        sysconfig.get_config_var("EXT_SUFFIX") or "",
        platform.machine(),
        _cpu_flags(),
    ):
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def _cpu_flags() -> str:
    """The host CPU's feature flags (a host-CPU build must not run on another CPU)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def cache_dir() -> Path:
    """numba's cache directory for this package's kernels."""
    configured = os.environ.get("NUMBA_CACHE_DIR")
    if configured:
        return Path(configured) / "rankstream_aot"
    return Path(__file__).parent / "__pycache__"


def module_name(key: str | None = None) -> str:
    return f"rankstream_kernels_aot_{key or build_key()}"


def built_path(key: str | None = None) -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return cache_dir() / f"{module_name(key)}{suffix}"


def load() -> ModuleType | None:
    """The build for these sources and this machine, imported once; None if there is none."""
    with _loading:
        if not _state["loaded"]:
            _state["module"] = _import_build(build_key())
            _state["loaded"] = True
    return _state["module"]


def _import_build(key: str) -> ModuleType | None:
    path = built_path(key)
    if not path.exists():
        return None
    loader = importlib.machinery.ExtensionFileLoader(module_name(key), str(path))
    spec = importlib.util.spec_from_file_location(module_name(key), path, loader=loader)
    if spec is None:
        return None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def set_mode(mode: str) -> None:
    """auto (default), aot (the build is required: AotUnavailableError if absent) or jit."""
    if mode not in MODES:
        raise ValueError(f"kernel mode must be one of {MODES}, got {mode!r}")
    _state["mode"] = mode
    if mode == "aot" and load() is None:
        raise AotUnavailableError(
            f"no ahead-of-time kernel build at {built_path()}; "
            "build one with `python -m rankstream.ranking.aot`"
        )


def linear_kernel(*args: Any) -> Callable[..., Any]:
    """The build's export for exactly these arguments, else the JIT dispatcher."""
    if _state["mode"] != "jit":
        module = load()
        variant = _matching_variant(args) if module is not None else None
        if variant is not None:
            return getattr(module, variant.symbol)
    from rankstream.ranking.kernels import learn_linear

    return learn_linear


def _matching_variant(args: tuple[Any, ...]) -> Variant | None:
    import numpy as np

    if len(args) != len(_ARGUMENTS):
        return None
    phi, scales, weights = args[5], args[3], args[9]
    if not isinstance(phi, np.ndarray):
        return None
    variant = Variant(phi.dtype.name, scales is not None, weights is not None)
    if variant not in VARIANTS:
        return None
    for (name, dtype, ndim, _), value in zip(_ARGUMENTS, args, strict=True):
        if name in ("scales", "weights") and value is None:
            continue
        expected = variant.phi_dtype if name == "phi" else dtype
        if not (
            isinstance(value, np.ndarray)
            and value.dtype.name == expected
            and value.ndim == ndim
            and value.flags.c_contiguous
            and value.flags.aligned
        ):
            return None
    return variant


# --- building (imports numba) -----------------------------------------------------------


def _numba_signature(variant: Variant) -> Any:
    from numba import types

    def array(name: str, dtype: str, ndim: int, readonly: bool) -> Any:
        if (name == "scales" and not variant.scaled) or (
            name == "weights" and not variant.weighted
        ):
            return types.none
        element = getattr(types, variant.phi_dtype if name == "phi" else dtype)
        return types.Array(element, ndim, "C", readonly=readonly)

    return types.void(*(array(*argument) for argument in _ARGUMENTS))


@contextmanager
def _dispatcher_flags(dispatcher: Any) -> Iterator[None]:
    """pycc compiles with default Flags; give it the dispatcher's parsed options instead."""
    import numba.pycc.compiler as pycc_compiler

    default = pycc_compiler.Flags

    def flags() -> Any:
        parsed = default()
        dispatcher.targetdescr.options.parse_as_flags(parsed, dispatcher.targetoptions)
        return parsed

    pycc_compiler.Flags = flags
    try:
        yield
    finally:
        pycc_compiler.Flags = default


def build() -> Path:
    """Compile every variant into one extension in `cache_dir()`; returns its path.

    Written to a temporary name and renamed into place, so a concurrent loader never
    sees half a file; builds for older sources are removed. Needs a C compiler (pycc
    compiles its module wrapper with it) and a numba in `TESTED_NUMBA`
    (UntestedNumbaError otherwise).
    """
    # before anything reaches into numba.pycc
    check_numba_version(importlib.metadata.version("numba"))
    from numba.core.errors import NumbaPendingDeprecationWarning

    from rankstream.ranking import kernels

    with warnings.catch_warnings():  # pycc is "pending deprecation"; it is what AOT is today
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        from numba.pycc import CC

    key = build_key()
    target = built_path(key)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".aot-build-") as tmp:
        cc = CC(module_name(key))
        cc.output_dir = tmp
        cc.target_cpu = "host"
        cc.verbose = False
        for variant in VARIANTS:
            cc.export(variant.symbol, _numba_signature(variant))(kernels.learn_linear.py_func)
        with warnings.catch_warnings(), _dispatcher_flags(kernels.learn_linear):
            warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
            cc.compile()
        os.replace(Path(tmp) / target.name, target)
    for stale in target.parent.glob(module_name("*") + ".*"):  # builds of older sources
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


def main() -> int:
    """`python -m rankstream.ranking.aot`: build unless built; print the path."""
    path = built_path()
    if not path.exists():
        try:
            path = build()
        except Exception as exc:  # no compiler, no pycc: the JIT serves every call
            print(f"ahead-of-time kernels not built ({exc}); the JIT is used", file=sys.stderr)
            return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
