"""Machine operations numba does not name, for the compiled kernels (LLVM intrinsics).

* ``prefetch(arr, i)``: ask the CPU to bring ``arr[i]``'s cache line in ahead of its use. A loop
  whose reads land at random in a table larger than the caches (an index file's 5M hash slots:
  20 MB) waits for memory on almost every read; prefetching the slot of an entry some steps
  ahead overlaps those waits (``verify.kernels.index_summary``: 0.5 s -> 0.2 s for 20M entries).
  A hint only: no fault for any address, no effect on what the loop computes.
* ``x86_features(*names)``: whether numba compiles for an x86-64 CPU with these LLVM target
  features (``crc32``'s PCLMULQDQ, ``sha256``'s SHA extensions): the kernels that use them are
  chosen at import.
"""
from __future__ import annotations

import platform

from llvmlite import binding as llvm, ir
from numba.core import cgutils, config, types
from numba.extending import intrinsic

__all__ = ["prefetch", "x86_features"]

# LLVM names an overloaded intrinsic after its pointer type: ``p0`` since opaque pointers (LLVM 15).
_PREFETCH = "llvm.prefetch.p0" if llvm.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"
_READ, _LOCALITY_HIGH, _DATA_CACHE = 0, 3, 1       # llvm.prefetch's rw, locality and cache type


@intrinsic
def prefetch(typingctx, arr, idx):
    """Prefetch the element ``arr[idx]`` (a 1-D array, an integer index) for reading."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(idx, types.Integer):
        return None
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False,
                                       boundscheck=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            _PREFETCH)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(_READ), i32(_LOCALITY_HIGH), i32(_DATA_CACHE)])
        return context.get_dummy_value()
    return sig, codegen



def x86_features(*names: str) -> bool:
    """Whether numba compiles for an x86-64 CPU with every LLVM target feature ``names``: numba's
    target features are NUMBA_CPU_FEATURES when set (empty for NUMBA_CPU_NAME=generic), else
    the host's."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    features = config.CPU_FEATURES  # type: ignore[attr-defined]  # numba.config sets it from the environment
    if features is not None:
        enabled = set(features.split(","))
        return all(f"+{name}" in enabled for name in names)
    try:
        host = llvm.get_host_cpu_features()
    except RuntimeError:                # LLVM cannot read this host's features
        return False
    return all(host.get(name, False) for name in names)
