"""A cache-line prefetch hint for numba loops that jump between examples' blocks of solver state."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, array, index):
    """Ask the CPU to bring the cache line of ``array[index]`` in (a hint: results are unchanged)."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = builder.module.declare_intrinsic(
            "llvm.prefetch", [byte_pointer], ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]))
        # read access, high temporal locality, data cache
        builder.call(function, [builder.bitcast(builder.gep(data, [args[1]]), byte_pointer), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, types.intp), codegen
