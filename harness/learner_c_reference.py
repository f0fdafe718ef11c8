"""C references of the online learners' update rules, for `rankstream bench learners`.

Each rule written as a plain C loop over the same normalized data the compiled learners
read (a float32 image table phi (m, d), int32 row indices p1, p2, float64 labels y):
x = (double)phi[p1] - (double)phi[p2], then the rule's update of float64 weights.
Compiled with `cc -O3 -march=native -ffast-math` (the compiler may reorder and
vectorise every sum: the fastest honest C for the rule) into a shared library in a
temporary directory and called through ctypes in the same process, on the same arrays,
so the benchmark can print each learner's speed as a ratio to C's.

The four linear rules share one C loop body, like the compiled kernel, and are keyed
by their `ranking.rules` codes; AROW is the textbook update of Crammer, Kulesza &
Dredze (2009) with the full covariance: v = Sigma x, then Sigma -= beta v v' (two
sweeps over Sigma per update). Rows are not validated (labels are +1/-1, phi finite).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rankstream.ranking.learners import LearnerSpec
from rankstream.ranking.rules import OGDR_RULE, OPAR1_RULE, OPAR2_RULE, OPR_RULE

FLAGS = ("-O3", "-march=native", "-ffast-math")

# The step size lambda of each linear rule (C expressions of m = y w.x, loss = 1 - m,
# sq = |x|^2 and param = C or eta), as in `ranking.kernels._step_size`.
_STEPS = {
    OPR_RULE: "m <= 0.0 ? 1.0 : 0.0",
    OPAR1_RULE: "loss <= 0.0 ? 0.0 : fmin(param, loss / sq)",
    OPAR2_RULE: "loss <= 0.0 ? 0.0 : loss / (sq + 1.0 / (2.0 * param))",
    OGDR_RULE: "loss <= 0.0 ? 0.0 : param",
}

_LINEAR = """
long rule_{code}(const float *phi, const int32_t *p1, const int32_t *p2, const double *y,
                 long n, long d, double *w, double param) {{
    double x[d];
    long updates = 0;
    for (long i = 0; i < n; i++) {{
        const float *a = phi + (long)p1[i] * d, *b = phi + (long)p2[i] * d;
        double dot = 0.0, sq = 0.0;
        for (long j = 0; j < d; j++) {{
            x[j] = (double)a[j] - (double)b[j];
            dot += w[j] * x[j];
            sq += x[j] * x[j];
        }}
        if (sq == 0.0) continue;
        double m = y[i] * dot, loss = 1.0 - m;
        double lam = {step};
        if (lam != 0.0) {{
            double c = lam * y[i];
            for (long j = 0; j < d; j++) w[j] += c * x[j];
            updates++;
        }}
    }}
    return updates;
}}
"""

_AROW = """
long learner_arow(const float *phi, const int32_t *p1, const int32_t *p2, const double *y,
                  long n, long d, double *w, double *sigma, double r) {
    double x[d], v[d];
    long updates = 0;
    for (long i = 0; i < n; i++) {
        const float *a = phi + (long)p1[i] * d, *b = phi + (long)p2[i] * d;
        double dot = 0.0, sq = 0.0;
        for (long j = 0; j < d; j++) {
            x[j] = (double)a[j] - (double)b[j];
            dot += w[j] * x[j];
            sq += x[j] * x[j];
        }
        double loss = 1.0 - y[i] * dot;
        if (sq == 0.0 || loss <= 0.0) continue;
        double xsx = 0.0;
        for (long j = 0; j < d; j++) {
            double s = 0.0;
            for (long k = 0; k < d; k++) s += sigma[j * d + k] * x[k];
            v[j] = s;
            xsx += x[j] * s;
        }
        double beta = 1.0 / (xsx + r), c = loss * beta * y[i];
        for (long j = 0; j < d; j++) w[j] += c * v[j];
        for (long j = 0; j < d; j++)
            for (long k = 0; k < d; k++) sigma[j * d + k] -= beta * v[j] * v[k];
        updates++;
    }
    return updates;
}
"""


def source() -> str:
    """The C translation unit: one function per linear rule code, and AROW."""
    rules = "".join(_LINEAR.format(code=code, step=step) for code, step in _STEPS.items())
    return "#include <math.h>\n#include <stdint.h>\n" + rules + _AROW


Pass = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, int]]


@dataclass(frozen=True)
class CReference:
    """The compiled library and the command that built it."""

    library: ctypes.CDLL
    command: str

    def learner(self, spec: LearnerSpec, params: dict[str, float]) -> Pass | None:
        """A pass of `spec`'s rule from zero weights (identity Sigma), or None when C has
        no reference for it (a learner registered at run time)."""
        if spec.linear_rule is not None:
            function = getattr(self.library, f"rule_{spec.linear_rule}")
            param = params[spec.uses[0]] if spec.uses else 0.0
            return lambda phi, p1, p2, y: _linear(function, phi, p1, p2, y, param)
        # a compiled-pass learner's C twin is the library's `learner_{name}` (AROW's)
        twin = getattr(self.library, f"learner_{spec.name}", None) if spec.triplet_kernel else None
        if twin is not None:
            param = params[spec.uses[0]]
            return lambda phi, p1, p2, y: _arow(twin, phi, p1, p2, y, param)
        return None


def _subnormals_kept() -> bool:
    """The smallest subnormal survives arithmetic (no flush-to-zero / denormals-are-zero)."""
    tiny = np.nextafter(np.float64(0.0), np.float64(1.0))
    return bool(tiny * np.float64(1.0) > 0.0)


def _pointer(array: np.ndarray) -> int:
    return array.ctypes.data


def _check(phi: np.ndarray, p1: np.ndarray, p2: np.ndarray, y: np.ndarray) -> None:
    ok = (
        phi.dtype == np.float32
        and phi.flags.c_contiguous
        and p1.dtype == p2.dtype == np.int32
        and y.dtype == np.float64
    )
    if not ok:
        raise ValueError("the C reference takes float32 phi, int32 p1/p2, float64 y")


def _linear(function, phi, p1, p2, y, param: float) -> tuple[np.ndarray, int]:  # type: ignore[no-untyped-def]
    _check(phi, p1, p2, y)
    w = np.zeros(phi.shape[1])
    n = function(
        _pointer(phi), _pointer(p1), _pointer(p2), _pointer(y), len(y), phi.shape[1],
        _pointer(w), param,
    )  # fmt: skip
    return w, int(n)


def _arow(function, phi, p1, p2, y, r: float) -> tuple[np.ndarray, int]:  # type: ignore[no-untyped-def]
    _check(phi, p1, p2, y)
    d = phi.shape[1]
    w, sigma = np.zeros(d), np.eye(d)
    n = function(
        _pointer(phi), _pointer(p1), _pointer(p2), _pointer(y), len(y), d,
        _pointer(w), _pointer(sigma), r,
    )  # fmt: skip
    return w, int(n)


def build() -> CReference | str:
    """Compile and load the references; a sentence saying why not when that fails.

    Compiled with FLAGS but linked without them: linking with `-ffast-math` adds gcc's
    crtfastmath.o, whose constructor switches the whole process to flush subnormals to
    zero when the library loads, which would change every float computation after it
    (the learners' included)."""
    compiler = shutil.which("cc")
    if compiler is None:
        return "no C compiler (cc) on PATH: the C reference is skipped"
    with tempfile.TemporaryDirectory(prefix="rankstream-c-reference-") as tmp:
        src, obj, lib = (Path(tmp) / f"reference.{ext}" for ext in ("c", "o", "so"))
        src.write_text(source())
        for command in (
            [compiler, *FLAGS, "-fPIC", "-c", "-o", str(obj), str(src)],
            [compiler, "-shared", "-o", str(lib), str(obj), "-lm"],
        ):
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                return f"cc failed ({done.returncode}): {done.stderr.strip()[-500:]}"
        library = ctypes.CDLL(str(lib))  # loaded: the file may go with the directory
    if not _subnormals_kept():
        raise RuntimeError("loading the C reference made the process flush subnormals")
    pointer, long = ctypes.c_void_p, ctypes.c_long
    rows = [pointer, pointer, pointer, pointer, long, long, pointer]  # phi, p1, p2, y, n, d, w
    for code in _STEPS:
        function = getattr(library, f"rule_{code}")
        function.restype, function.argtypes = long, [*rows, ctypes.c_double]
    arow = library.learner_arow
    arow.restype, arow.argtypes = long, [*rows, pointer, ctypes.c_double]
    return CReference(library, " ".join(["cc", *FLAGS]))
