"""Raw loads and stores for the cleaner's numba kernels: several bytes of a ``uint8`` array as one machine word.

The offset map's table and the MD5 digests stay ``uint8`` arrays in Kafka's byte layout; these intrinsics read
and write 4 or 8 of their bytes at once (any alignment, native or little-endian byte order) and prefetch a cache
line, which numba cannot express in Python. They are called from ``md5`` and ``offset_map`` kernels only.
"""

from __future__ import annotations

import sys

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# --------------------------------------------------------------------------------------------------------------
# Raw loads and stores. The table and the digests stay uint8 arrays in Kafka's byte layout; these read and write
# several of their bytes as one machine word (any alignment, native byte order), which numba cannot express.

_LITTLE_ENDIAN = sys.byteorder == "little"


def _is_u8_array(array) -> bool:
    return isinstance(array, types.Array) and array.dtype == types.uint8


def _byte_ptr(context, builder, array_type, array, index, width):
    ary = context.make_array(array_type)(context, builder, array)
    return builder.bitcast(builder.gep(ary.data, [index]), ir.IntType(width).as_pointer())


def _word_load(name: str, width: int, result, swap: bool, doc: str):
    """An intrinsic ``name(array, index)``: the ``width``-bit word at bytes ``array[index:]`` of a uint8 array (no
    bounds check), byte-swapped when ``swap``."""

    def typer(typingctx, array, index):
        if not (_is_u8_array(array) and isinstance(index, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            value = builder.load(_byte_ptr(context, builder, signature.args[0], args[0], args[1], width), align=1)
            return builder.bswap(value) if swap else value

        return result(array, index), codegen

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


def _word_store(name: str, width: int, value_type, swap: bool, doc: str):
    """An intrinsic ``name(array, index, value)``: store the ``width``-bit ``value`` at bytes ``array[index:]`` of a
    uint8 array, byte-swapped first when ``swap``."""

    def typer(typingctx, array, index, value):
        if not (_is_u8_array(array) and isinstance(index, types.Integer) and value == value_type):
            return None

        def codegen(context, builder, signature, args):
            word = builder.bswap(args[2]) if swap else args[2]
            builder.store(word, _byte_ptr(context, builder, signature.args[0], args[0], args[1], width), align=1)
            return context.get_dummy_value()

        return types.void(array, index, value), codegen

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


load_u32le = _word_load("load_u32le", 32, types.uint32, not _LITTLE_ENDIAN, "The little-endian uint32 at array[i:i+4].")
store_u32le = _word_store("store_u32le", 32, types.uint32, not _LITTLE_ENDIAN, "Store a uint32 LE at array[i:].")
load_i64 = _word_load("load_i64", 64, types.int64, False, "The native-order int64 at array[i:i+8].")
store_i64 = _word_store("store_i64", 64, types.int64, False, "Store an int64 in native order at array[i:].")


@intrinsic
def swap_be64(typingctx, value):
    """int64 to or from its big-endian representation: a byte swap on a little-endian host, else nothing."""
    if value != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bswap(args[0]) if _LITTLE_ENDIAN else args[0]

    return types.int64(value), codegen


@intrinsic
def prefetch(typingctx, array, index):
    """Prefetch the cache line of the uint8 ``array[index]`` (llvm.prefetch: a hint that never faults)."""
    if not (_is_u8_array(array) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        # LLVM auto-upgrades the unsuffixed name to the overload for the pointer type, typed or opaque.
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch")  # fmt: skip
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, keep in all levels, data cache
        return context.get_dummy_value()

    return types.void(array, index), codegen


# --------------------------------------------------------------------------------------------------------------
