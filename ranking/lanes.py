"""Row operations in eight explicit vector lanes: fixed order, vectorised, no fast-math.

The compiled learners (`ranking.kernels`) spend a row gathering x = phi[p1] - phi[p2],
in dot products (w.x, |x|^2, x'Sigma x) and in w += c x. Without fast-math LLVM may
not reorder a sum, so a plain loop is one serial chain of scalar adds; and numba
switches LLVM's SLP vectoriser off (`NUMBA_SLP_VECTORIZE=0` by default), so eight
explicit partial sums written in Python stay eight scalar chains. Measured with
`rankstream bench learners` (OPAR-I, d = 36): plain numba loops with eight scalar
partial sums ran at 0.6x of the same rule in C at `-O3 -march=native -ffast-math`;
these intrinsics bring it to ~1x.

So the intrinsics here emit the vector code themselves, over float64 rows padded with
zeros to a multiple of `LANES` = 8 (one 64-byte cache line):

* `dot_rows`: sixteen partial sums in two <8 x double> accumulators: block b (entries
  8b..8b+7) goes to accumulator b mod 2, so lane k of accumulator a sums the products
  j = 8b + k, b = a, a + 2, a + 4, ... in increasing b; the accumulators are added lane
  by lane and the lanes as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). Two
  chains halve the serial adds on the path from one row's update to the next row's
  margin (d = 36: 3 adds instead of 5);
* `gather_row`: x = (phi[a] - phi[b]) / scale, eight entries at a time (masked loads
  past phi's width, so the padding comes out 0), each entry widened to float64 before
  the subtraction; returns |x|^2 and one model's w.x, summed in `dot_rows`' order in the
  same pass (a single-model pass then reads x once, as a fused C loop does);
* `add_scaled_row`: y += c x, eight entries at a time.

The order is fixed by the IR, not by the machine: AVX-512 runs an <8 x double> in one
register, AVX2 in two, SSE in four, all with the same rounding, so every run on every
x86 gives the same bits. No row or index is bounds-checked: callers (the kernels) own
the shapes. numba's on-disk cache keys a kernel on its own file only, so after a change
here, touch `ranking/kernels.py` (or clear its `__pycache__`) to recompile.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8  # partial sums per dot product; rows are padded to a multiple of this

_I32 = ir.IntType(32)
_F64 = ir.DoubleType()
_VECTOR = ir.VectorType(_F64, LANES)


def _float_rows(*arrays: types.Type) -> bool:
    """C-ordered 2-d float64 arrays: what the kernels' padded rows are."""
    return all(
        isinstance(t, types.Array) and t.ndim == 2 and t.layout == "C" and t.dtype == types.float64
        for t in arrays
    )


def _rows(*indices: types.Type) -> bool:
    return all(isinstance(t, types.Integer) for t in indices)


def _row_pointer(context, builder, array_type, array, row, row_type):  # type: ignore[no-untyped-def]
    """(pointer to row `row` of a C-ordered 2-d array, the array's width)."""
    view = context.make_array(array_type)(context, builder, array)
    width = cgutils.unpack_tuple(builder, view.shape)[1]
    row = context.cast(builder, row, row_type, types.intp)
    return builder.gep(view.data, [builder.mul(row, width)]), width


def _splat(builder, value):  # type: ignore[no-untyped-def]
    vector = ir.VectorType(value.type, LANES)
    undef = ir.Constant(vector, ir.Undefined)
    first = builder.insert_element(undef, value, ir.Constant(_I32, 0))
    zeros = ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES)
    return builder.shuffle_vector(first, undef, zeros)


def _shuffle(builder: ir.IRBuilder, vector: ir.Value, lanes: list[int]) -> ir.Value:
    mask = ir.Constant(ir.VectorType(_I32, len(lanes)), lanes)
    return builder.shuffle_vector(vector, vector, mask)


def _add_lanes(builder: ir.IRBuilder, lanes: ir.Value) -> ir.Value:
    """((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) of an <8 x double>: halves
    first, which lowers to plain extracts and adds (an even/odd order became vhaddpd,
    slower on this AMD core)."""
    quads = builder.fadd(
        _shuffle(builder, lanes, [0, 1, 2, 3]), _shuffle(builder, lanes, [4, 5, 6, 7])
    )
    pairs = builder.fadd(_shuffle(builder, quads, [0, 1]), _shuffle(builder, quads, [2, 3]))
    first, second = (builder.extract_element(pairs, ir.Constant(_I32, k)) for k in (0, 1))
    return builder.fadd(first, second)


class _Sums:
    """Two <8 x double> accumulators: block b (entries 8b..8b+7) adds into accumulator
    b mod 2, so two chains of adds run side by side; `total` adds them lane by lane, then
    the lanes. They start at -0.0, the exact identity of +, so a sum equals the one that
    starts from its first product."""

    def __init__(self, builder: ir.IRBuilder) -> None:
        self.builder = builder
        start = ir.Constant(_VECTOR, [-0.0] * LANES)
        self.accumulators = [cgutils.alloca_once_value(builder, start) for _ in range(2)]

    def add(self, which: int, value: ir.Value) -> None:
        builder, accumulator = self.builder, self.accumulators[which]
        builder.store(builder.fadd(builder.load(accumulator), value), accumulator)

    def total(self) -> ir.Value:
        first, second = (self.builder.load(a) for a in self.accumulators)
        return _add_lanes(self.builder, self.builder.fadd(first, second))


def _load(builder, pointer, j):  # type: ignore[no-untyped-def]
    return builder.load(builder.gep(pointer, [j]), typ=_VECTOR, align=8)


def _store(builder, value, pointer, j):  # type: ignore[no-untyped-def]
    builder.store(value, builder.bitcast(builder.gep(pointer, [j]), _VECTOR.as_pointer()), align=8)


def _masked_load(builder, pointer, vector, mask, fill):  # type: ignore[no-untyped-def]
    """Load the lanes of `vector` type at `pointer` where mask holds, `fill` elsewhere
    (the masked-off lanes are not read: no access past the end of a row)."""
    element = "f32" if vector.element == ir.FloatType() else "f64"
    name = f"llvm.masked.load.v{LANES}{element}.p0"
    mask_type = ir.VectorType(ir.IntType(1), LANES)
    function = builder.module.globals.get(name) or ir.Function(
        builder.module, ir.FunctionType(vector, [pointer.type, _I32, mask_type, vector]), name
    )
    return builder.call(function, [pointer, ir.Constant(_I32, 4), mask, fill])


@intrinsic
def dot_rows(typingctx, A, a, B, b):  # type: ignore[no-untyped-def]  # pragma: no cover
    """sum_j A[a, j] B[b, j] over padded float64 rows, in the fixed order above."""
    if not (_float_rows(A, B) and _rows(a, b)):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a_type, a_row, b_type, b_row = signature.args
        row_a, width = _row_pointer(context, builder, a_type, args[0], args[1], a_row)
        row_b, _ = _row_pointer(context, builder, b_type, args[2], args[3], b_row)
        sums = _Sums(builder)
        eight = ir.Constant(width.type, LANES)
        steps = builder.udiv(width, eight)

        def product(j):  # type: ignore[no-untyped-def]
            return builder.fmul(_load(builder, row_a, j), _load(builder, row_b, j))

        with cgutils.for_range(builder, builder.udiv(steps, width.type(2))) as loop:
            j = builder.mul(loop.index, width.type(2 * LANES))
            sums.add(0, product(j))
            sums.add(1, product(builder.add(j, eight)))
        with builder.if_then(builder.trunc(steps, ir.IntType(1))):  # an odd block left
            sums.add(0, product(builder.mul(builder.sub(steps, width.type(1)), eight)))
        return sums.total()

    return types.float64(A, a, B, b), codegen


@intrinsic
def gather_row(typingctx, X, g, phi, a, b, scales, s, W, m):  # type: ignore[no-untyped-def]  # pragma: no cover
    """X[g, :] = (phi[a] - phi[b]) / scales[s] widened to float64, 0 past phi's width;
    returns (|X[g]|^2, W[m].X[g]), both summed in the same pass in `dot_rows`' order
    (equal to `dot_rows(X, g, X, g)` and `dot_rows(W, m, X, g)`; W's rows as wide as X's).

    b None: phi[a] itself; scales None: unscaled. X's rows are phi's width padded to a
    multiple of `LANES` (wider rows keep their extra entries; callers keep them 0); phi
    is C-ordered float32 or float64, scales float64. Whole groups of eight entries use
    plain loads, only phi's last, partial group masked ones."""
    pair = not isinstance(b, types.NoneType)
    scaled = not isinstance(scales, types.NoneType)
    if not (
        _float_rows(X)
        and isinstance(phi, types.Array)
        and phi.ndim == 2
        and phi.layout == "C"
        and phi.dtype in (types.float32, types.float64)
        and _rows(g, a, s)
        and (not pair or _rows(b))
        and (not scaled or _float_rows(scales))
        and _float_rows(W)
        and _rows(m)
    ):
        return None
    result = types.UniTuple(types.float64, 2)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        x_type, g_type, phi_type, a_type, b_type, scales_type, s_type, w_type, m_type = (
            signature.args
        )
        out, _ = _row_pointer(context, builder, x_type, args[0], args[1], g_type)
        row_w, _ = _row_pointer(context, builder, w_type, args[7], args[8], m_type)
        row_a, d = _row_pointer(context, builder, phi_type, args[2], args[3], a_type)
        if pair:
            row_b, _ = _row_pointer(context, builder, phi_type, args[2], args[4], b_type)
        if scaled:
            row_s, _ = _row_pointer(context, builder, scales_type, args[5], args[6], s_type)
        narrow = phi_type.dtype == types.float32
        vin = ir.VectorType(ir.FloatType() if narrow else _F64, LANES)
        sums, dots = _Sums(builder), _Sums(builder)

        def step(j, inside, which):  # type: ignore[no-untyped-def]
            """Entries j..j+7 into accumulator `which`: plain loads, or masked ones
            (`inside`) for phi's last, partial block."""

            def load(row, vector, fill):  # type: ignore[no-untyped-def]
                if inside is None:
                    return builder.load(builder.gep(row, [j]), typ=vector, align=4)
                filler = ir.Constant(vector, [fill] * LANES)
                return _masked_load(builder, builder.gep(row, [j]), vector, inside, filler)

            def entries(row):  # type: ignore[no-untyped-def]
                found = load(row, vin, 0.0)
                return builder.fpext(found, _VECTOR) if narrow else found

            x = builder.fsub(entries(row_a), entries(row_b)) if pair else entries(row_a)
            if scaled:
                x = builder.fdiv(x, load(row_s, _VECTOR, 1.0))
            _store(builder, x, out, j)
            sums.add(which, builder.fmul(x, x))
            dots.add(which, builder.fmul(_load(builder, row_w, j), x))

        eight = ir.Constant(d.type, LANES)
        whole = builder.udiv(d, eight)
        with cgutils.for_range(builder, builder.udiv(whole, d.type(2))) as loop:
            j = builder.mul(loop.index, d.type(2 * LANES))
            step(j, None, 0)
            step(builder.add(j, eight), None, 1)
        odd = builder.trunc(whole, ir.IntType(1))
        with builder.if_then(odd):  # an odd whole block left: block whole - 1, even
            step(builder.mul(builder.sub(whole, d.type(1)), eight), None, 0)
        with builder.if_then(builder.icmp_unsigned("!=", builder.urem(d, eight), d.type(0))):
            j = builder.mul(whole, eight)
            lane = ir.Constant(ir.VectorType(d.type, LANES), list(range(LANES)))
            inside = builder.icmp_signed(
                "<", builder.add(lane, _splat(builder, j)), _splat(builder, d)
            )
            with builder.if_else(odd) as (then, otherwise):  # block `whole`: its parity
                with then:
                    step(j, inside, 1)
                with otherwise:
                    step(j, inside, 0)
        return context.make_tuple(builder, result, [sums.total(), dots.total()])

    return result(X, g, phi, a, b, scales, s, W, m), codegen


@intrinsic
def add_scaled_row(typingctx, Y, m, c, X, g):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Y[m, :] += c X[g, :] over padded float64 rows, eight entries at a time."""
    if not (_float_rows(Y, X) and _rows(m, g) and isinstance(c, types.Float)):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        y_type, m_type, c_type, x_type, g_type = signature.args
        out, width = _row_pointer(context, builder, y_type, args[0], args[1], m_type)
        row, _ = _row_pointer(context, builder, x_type, args[3], args[4], g_type)
        factor = _splat(builder, context.cast(builder, args[2], c_type, types.float64))
        eight = ir.Constant(width.type, LANES)
        with cgutils.for_range(builder, builder.udiv(width, eight)) as step:
            j = builder.mul(step.index, eight)
            scaled = builder.fmul(factor, _load(builder, row, j))
            _store(builder, builder.fadd(_load(builder, out, j), scaled), out, j)
        return context.get_dummy_value()

    return types.none(Y, m, c, X, g), codegen
