"""A BLAS ``gemm`` call from numba code, through an address passed at run time.

numba's own ``np.dot`` calls SciPy's ``cython_blas`` and allocates its
result. The numba ``gemm`` algorithm calls instead the routine that
``_blas_routines`` chose (a newer OpenBLAS where installed: 10-30 % faster
on its tiles) and writes into arrays it owns. The address arrives as a
kernel argument, not as a global: numba caches compiled kernels on disk
(``cache=True``), and a global address would be baked into the cached code
and be stale (a crash) in the next process. For the same reason a plan does
not store it: the launch looks it up in the running process every time
(``KernelSpec.blas_address``), so a plan pickled to a Dask worker works.

The arrays themselves are the intrinsic's arguments, not their data
addresses: numba keeps an array alive until its last use, and a bare
address taken earlier would let it be freed before the call.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["gemm", "NO_TRANS", "TRANS"]

#: The ``transa``/``transb`` characters of the Fortran interface.
NO_TRANS = ord("N")
TRANS = ord("T")


@intrinsic
def gemm(typingctx, address, transa, transb, m, n, k, alpha, a, a_at, lda, b, b_at, ldb, beta, c, c_at, ldc):
    """Column-major ``C = alpha * op(A) @ op(B) + beta * C`` by the Fortran-interface routine at ``address``.

    ``a``, ``b``, ``c`` are arrays of one float dtype (float32 calls an
    ``sgemm``, float64 a ``dgemm``: the address must match); ``a_at``,
    ``b_at``, ``c_at`` are element offsets into them, where each matrix
    starts. The caller guarantees the extents (``lda``, ``ldb``, ``ldc`` and
    the sizes) stay inside the arrays: nothing is checked here.
    """
    arrays = (a, b, c)
    if not all(isinstance(t, types.Array) for t in arrays):
        return None
    dtype = c.dtype
    if dtype not in (types.float32, types.float64) or any(t.dtype != dtype for t in arrays):
        return None
    signature = types.void(address, transa, transb, m, n, k, alpha, a, a_at, lda, b, b_at, ldb, beta, c, c_at, ldc)

    def codegen(context, builder, sig, args):
        tys = sig.args
        int32, char = ir.IntType(32), ir.IntType(8)
        real = context.get_value_type(dtype)

        def by_ref(i, to_type, llvm_type):
            # The Fortran interface takes every scalar by address: a stack slot each,
            # allocated once in the entry block (the call may sit in a loop).
            value = context.cast(builder, args[i], tys[i], to_type)
            slot = cgutils.alloca_once(builder, llvm_type)
            builder.store(value, slot)
            return slot

        def data(i, at):
            array = context.make_array(tys[i])(context, builder, args[i])
            offset = context.cast(builder, args[at], tys[at], types.intp)
            return builder.gep(array.data, [offset])

        operands = [
            by_ref(1, types.int8, char),
            by_ref(2, types.int8, char),
            by_ref(3, types.int32, int32),
            by_ref(4, types.int32, int32),
            by_ref(5, types.int32, int32),
            by_ref(6, dtype, real),
            data(7, 8),
            by_ref(9, types.int32, int32),
            data(10, 11),
            by_ref(12, types.int32, int32),
            by_ref(13, dtype, real),
            data(14, 15),
            by_ref(16, types.int32, int32),
        ]
        fnty = ir.FunctionType(ir.VoidType(), [op.type for op in operands])
        pointer = context.cast(builder, args[0], tys[0], types.intp)
        builder.call(builder.inttoptr(pointer, fnty.as_pointer()), operands)
        return context.get_dummy_value()

    return signature, codegen
