"""SHA-256 of two buffers at once: two SHA-NI streams interleaved, from numba code.

``digest_pair(a, b)`` returns ``(hashlib.sha256(a).digest(), hashlib.sha256(b).digest())`` for
two contiguous 1-D uint8 arrays (read-only ones too) of any lengths, with the GIL released.

Why two at once. With the SHA extensions one 64-byte block is 32 ``sha256rnds2`` (two rounds
each), every one waiting for the previous one's result: a single message runs at that
instruction's latency (hashlib/OpenSSL: 1.8 GB/s on this machine), while the unit could start
another one before the first is done. Two independent messages, their instructions interleaved,
fill that gap (``_compress2``).

The algorithm (FIPS 180-4) in the layout of the instructions (Intel SDM, SHA256RNDS2, SHA256MSG1,
SHA256MSG2). The working variables a..h live in two xmm registers, as 32-bit lanes from lane 0:
``ABEF`` = (f, e, b, a) and ``CDGH`` = (h, g, d, c). ``sha256rnds2(CDGH, ABEF, WK)`` runs two
rounds with ``W[t] + K[t]`` in lanes 0 and 1 of ``WK`` and returns the new ``ABEF`` (a2, a1 in
lanes 3, 2; e2, e1 in lanes 1, 0); the new ``CDGH`` is the old ``ABEF`` (c, d, g, h after two
rounds are the old a, b, e, f), so no lane moves are needed between rounds. The message schedule
``W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16]`` (t = 16..63) four words at a time, with
W[t..t+3] as a vector: ``sha256msg1(W[t-16..t-13], W[t-12..])`` gives ``W[t-16+j] + σ0(W[t-15+j])``,
adding ``W[t-7..t-4]`` (lanes 1..3 of one vector and lane 0 of the next: a palignr) leaves only the
σ1 terms, and ``sha256msg2(that, W[t-4..t-1])`` adds them (the last two of them from its own
first two results). Message words are big-endian: each 16 bytes loaded are byte-swapped per word.

The same round/schedule sequence (``_block_steps``) is written once against a small set of
operations: one implementation emits LLVM IR (``_IROps``: the llvm.x86.sha256* intrinsics,
shufflevector for byte swaps and lane moves), another computes them in Python integers
(``_PyOps``, from the SDM's definitions) so the layout reasoning is testable on any CPU.

A message is its whole 64-byte blocks read in place, then one or two padding blocks built in a
scratch buffer (the last ``len % 64`` bytes, 0x80, zeros, the bit length big-endian). The kernel
hashes both messages' blocks in pairs while both have blocks left (the shorter one's padding
blocks paired with the longer one's next blocks), then the rest of the longer one single-stream.

``HAVE_SHA_NI`` says whether numba compiles for an x86-64 CPU with the SHA extensions (its target
features: NUMBA_CPU_FEATURES when set, else the host's) and ``ROCKETLAKE_SHA`` is not ``hashlib``;
without them ``digest_pair`` calls hashlib (same results; hashlib also releases the GIL).
"""
from __future__ import annotations

import hashlib
import math
import os

import numpy as np
from llvmlite import ir
from numba import njit
from . import kernelcache  # noqa: F401  (before the kernels: numba picks their cache location then)
from numba.core import cgutils, types
from numba.extending import intrinsic, models, register_model

from .intrinsics import x86_features

__all__ = ["HAVE_SHA_NI", "digest_pair"]

# ---- constants (FIPS 180-4 4.2.2, 5.3.3), derived here ----


def _primes(n: int) -> list:
    """The first n primes."""
    out: list[int] = []
    k = 2
    while len(out) < n:
        if all(k % p for p in out if p * p <= k):
            out.append(k)
        k += 1
    return out


def _icbrt(x: int) -> int:
    """floor(cube root of x) for an integer x >= 1 (Newton's method from above, exact)."""
    r = 1 << -(-x.bit_length() // 3)        # >= the root
    while True:
        s = (2 * r + x // (r * r)) // 3
        if s >= r:
            return r
        r = s


# The first 32 bits of the fractional parts of the cube roots of the first 64 primes:
# floor(cbrt(p) * 2^32) mod 2^32 = floor(cbrt(p * 2^96)) mod 2^32. And of the square roots of
# the first 8 primes for the initial hash value.
_K = tuple(_icbrt(p << 96) & 0xFFFFFFFF for p in _primes(64))
_H0 = tuple(math.isqrt(p << 64) & 0xFFFFFFFF for p in _primes(8))
if (_K[0], _K[1], _K[62], _K[63]) != (0x428A2F98, 0x71374491, 0xBEF9A3F7, 0xC67178F2) \
        or (_H0[0], _H0[7]) != (0x6A09E667, 0x5BE0CD19):
    raise AssertionError("SHA-256 constants derived wrongly")

# the initial state as (ABEF, CDGH) lanes from lane 0
_H0_ABEF = (_H0[5], _H0[4], _H0[1], _H0[0])
_H0_CDGH = (_H0[7], _H0[6], _H0[3], _H0[2])


# ---- one block's compression, written once against a set of vector operations ----

def _block_steps(ops, abef, cdgh, load):
    """The SHA-256 compression of one block from state (``abef``, ``cdgh``): a generator that
    emits four rounds per step (so two blocks can be interleaved) and returns the new state.
    ``load(k)`` gives message words 4k..4k+3 as a vector (lane j = W[4k+j])."""
    abef0, cdgh0 = abef, cdgh
    w = []
    for g in range(16):                      # rounds 4g .. 4g+3
        if g < 4:
            w.append(load(g))
        else:
            # W[4g+j] = (W[4g+j-16] + σ0(W[4g+j-15])) + W[4g+j-7] + σ1(W[4g+j-2])
            t = ops.add(ops.msg1(w[g - 4], w[g - 3]), ops.alignr4(w[g - 2], w[g - 1]))
            w.append(ops.msg2(t, w[g - 1]))
        wk = ops.add(w[g], ops.const(_K[4 * g:4 * g + 4]))
        abef, cdgh = ops.rnds2(cdgh, abef, wk), abef
        abef, cdgh = ops.rnds2(cdgh, abef, ops.high_pair(wk)), abef
        yield
    return ops.add(abef, abef0), ops.add(cdgh, cdgh0)


def _interleave(*steps) -> list:
    """Run generators from ``_block_steps`` in turn, one step each; their return values."""
    results, live = [None] * len(steps), list(range(len(steps)))
    while live:
        for i in list(live):
            try:
                next(steps[i])
            except StopIteration as stop:
                results[i] = stop.value
                live.remove(i)
    return results


_M32 = 0xFFFFFFFF


def _rotr(x: int, n: int) -> int:
    return ((x >> n) | (x << (32 - n))) & _M32


class _PyOps:
    """The operations in Python integers, vectors as 4-tuples (lane 0 first), from the SDM's
    definitions of the instructions and FIPS 180-4's functions: a model to test the layout."""

    @staticmethod
    def load_block(data: bytes):
        return lambda k: tuple(int.from_bytes(data[16 * k + 4 * j:16 * k + 4 * j + 4], "big") for j in range(4))

    @staticmethod
    def const(lanes):
        return tuple(lanes)

    @staticmethod
    def add(x, y):
        return tuple((p + q) & _M32 for p, q in zip(x, y))

    @staticmethod
    def alignr4(lo, hi):
        """palignr by 4 bytes: lanes 1..3 of ``lo`` then lane 0 of ``hi``."""
        return lo[1:] + hi[:1]

    @staticmethod
    def high_pair(x):
        """lanes 2, 3 moved to lanes 0, 1 (pshufd 0x0E; lanes 2, 3 of the result unused)."""
        return x[2:] + x[2:]

    @staticmethod
    def msg1(x, y):
        w = x + y[:1]
        s0 = [_rotr(v, 7) ^ _rotr(v, 18) ^ (v >> 3) for v in w]
        return tuple((w[j] + s0[j + 1]) & _M32 for j in range(4))

    @staticmethod
    def msg2(x, y):
        def s1(v):
            return _rotr(v, 17) ^ _rotr(v, 19) ^ (v >> 10)
        w16 = (x[0] + s1(y[2])) & _M32
        w17 = (x[1] + s1(y[3])) & _M32
        return w16, w17, (x[2] + s1(w16)) & _M32, (x[3] + s1(w17)) & _M32

    @staticmethod
    def rnds2(cdgh, abef, wk):
        h, g, d, c = cdgh
        f, e, b, a = abef
        for i in range(2):
            ch = (e & f) ^ (~e & g)
            maj = (a & b) ^ (a & c) ^ (b & c)
            t1 = (ch + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + wk[i] + h) & _M32
            a, b, c, d, e, f, g, h = ((t1 + maj + (_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22))) & _M32,
                                      a, b, c, (t1 + d) & _M32, e, f, g)
        return f, e, b, a


def _model_digest(message: bytes) -> bytes:
    """SHA-256 by ``_block_steps`` with ``_PyOps`` (slow; for tests of the layout)."""
    n = len(message)
    data = message + b"\x80" + b"\x00" * ((55 - n) % 64) + (8 * n).to_bytes(8, "big")
    abef, cdgh = _H0_ABEF, _H0_CDGH
    for i in range(0, len(data), 64):
        (abef, cdgh), = _interleave(_block_steps(_PyOps, abef, cdgh, _PyOps.load_block(data[i:i + 64])))
    f, e, b, a = abef
    h, g, d, c = cdgh
    return b"".join(v.to_bytes(4, "big") for v in (a, b, c, d, e, f, g, h))


# ---- code generation: numba intrinsics ----
#
# The state vectors are a numba type of their own, ``V4``, lowered as LLVM's <4 x i32> (one xmm
# register); block addresses are int64 (a message's bytes or the scratch buffer's padding blocks
# go through the same variable).

_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_V4 = ir.VectorType(_I32, 4)
_V16 = ir.VectorType(_I8, 16)
_BSWAP32 = ir.Constant(ir.VectorType(_I32, 16), [4 * (j // 4) + 3 - j % 4 for j in range(16)])


class V4Type(types.Type):
    """Four uint32 lanes in an xmm register (a state half, ABEF or CDGH)."""

    def __init__(self):
        super().__init__(name="sha256.V4")


V4 = V4Type()


@register_model(V4Type)
class _V4Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _V4)


def _lanes_mask(lanes):
    return ir.Constant(ir.VectorType(_I32, len(lanes)), list(lanes))


class _IROps:
    """The operations as LLVM IR at ``builder``."""

    def __init__(self, builder):
        self.b = builder
        mod = builder.module
        self._rnds2 = cgutils.get_or_insert_function(mod, ir.FunctionType(_V4, [_V4, _V4, _V4]), "llvm.x86.sha256rnds2")
        self._msg1 = cgutils.get_or_insert_function(mod, ir.FunctionType(_V4, [_V4, _V4]), "llvm.x86.sha256msg1")
        self._msg2 = cgutils.get_or_insert_function(mod, ir.FunctionType(_V4, [_V4, _V4]), "llvm.x86.sha256msg2")
        self._undef = ir.Constant(_V4, ir.Undefined)

    def load_block(self, address):
        """Message words of the 64 bytes at ``address`` (i64): unaligned loads, byte-swapped."""
        def load(k):
            at = self.b.add(address, ir.Constant(_I64, 16 * k)) if k else address
            v = self.b.load(self.b.inttoptr(at, _V16.as_pointer()), align=1)
            v = self.b.shuffle_vector(v, ir.Constant(_V16, ir.Undefined), _BSWAP32)
            return self.b.bitcast(v, _V4)
        return load

    def const(self, lanes):
        return ir.Constant(_V4, list(lanes))

    def add(self, x, y):
        return self.b.add(x, y)

    def alignr4(self, lo, hi):
        return self.b.shuffle_vector(lo, hi, _lanes_mask((1, 2, 3, 4)))

    def high_pair(self, x):
        return self.b.shuffle_vector(x, self._undef, _lanes_mask((2, 3, 2, 3)))

    def msg1(self, x, y):
        return self.b.call(self._msg1, [x, y])

    def msg2(self, x, y):
        return self.b.call(self._msg2, [x, y])

    def rnds2(self, cdgh, abef, wk):
        return self.b.call(self._rnds2, [cdgh, abef, wk])


@intrinsic
def _address(typingctx, ary):
    """The address of an array's first byte, as int64."""
    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.ptrtoint(data, _I64)
    return (types.int64(ary), codegen) if isinstance(ary, types.Array) else None


@intrinsic
def _initial_state(typingctx):
    """The initial hash value H(0) as (ABEF, CDGH)."""
    def codegen(context, builder, sig, args):
        return context.make_tuple(builder, sig.return_type, [ir.Constant(_V4, list(_H0_ABEF)),
                                                             ir.Constant(_V4, list(_H0_CDGH))])
    return types.UniTuple(V4, 2)(), codegen


@intrinsic
def _compress1(typingctx, abef, cdgh, address):
    """One stream: the state after the 64-byte block at ``address``."""
    def codegen(context, builder, sig, args):
        ops = _IROps(builder)
        out, = _interleave(_block_steps(ops, args[0], args[1], ops.load_block(args[2])))
        return context.make_tuple(builder, sig.return_type, list(out))
    return types.UniTuple(V4, 2)(V4, V4, types.int64), codegen


@intrinsic
def _compress2(typingctx, abef_a, cdgh_a, address_a, abef_b, cdgh_b, address_b):
    """Two streams interleaved four rounds at a time: both states after their blocks."""
    def codegen(context, builder, sig, args):
        ops = _IROps(builder)
        out_a, out_b = _interleave(_block_steps(ops, args[0], args[1], ops.load_block(args[2])),
                                   _block_steps(ops, args[3], args[4], ops.load_block(args[5])))
        return context.make_tuple(builder, sig.return_type, list(out_a) + list(out_b))
    return types.UniTuple(V4, 4)(V4, V4, types.int64, V4, V4, types.int64), codegen


@intrinsic
def _store_digest(typingctx, address, abef, cdgh):
    """Write the digest of state (``abef``, ``cdgh``) to the 32 bytes at ``address``:
    a, b, c, d, e, f, g, h big-endian."""
    def codegen(context, builder, sig, args):
        at, abef, cdgh = args
        # lanes 0..3 = abef (f, e, b, a), 4..7 = cdgh (h, g, d, c)
        for k, lanes in enumerate(((3, 2, 7, 6), (1, 0, 5, 4))):
            v = builder.bitcast(builder.shuffle_vector(abef, cdgh, _lanes_mask(lanes)), _V16)
            v = builder.shuffle_vector(v, ir.Constant(_V16, ir.Undefined), _BSWAP32)
            ptr = builder.inttoptr(builder.add(at, ir.Constant(_I64, 16 * k)), _V16.as_pointer())
            builder.store(v, ptr, align=1)
        return context.get_dummy_value()
    return types.none(types.int64, V4, V4), codegen


# ---- the kernel ----

@njit(cache=True, nogil=True, inline="always")
def _pad_tail(d, n, buf, off):
    """The padding blocks of a message ``d`` of ``n`` bytes at ``buf[off:off + 128]``: its last
    ``n % 64`` bytes, 0x80, zeros, the length in bits (big-endian, 8 bytes). Their number (1, 2)."""
    r = n & 63
    start = n - r
    for j in range(r):
        buf[off + j] = d[start + j]
    buf[off + r] = 0x80
    t = 1 if r < 56 else 2
    end = off + 64 * t
    for j in range(off + r + 1, end - 8):
        buf[j] = 0
    bits = n * 8
    for j in range(8):
        buf[end - 1 - j] = (bits >> (8 * j)) & 0xFF
    return t


@njit(cache=True, nogil=True)
def _pair_kernel(a, b, buf):
    """Digests of ``a`` and ``b`` to ``buf[0:32]`` and ``buf[32:64]``; ``buf`` (320 bytes) also
    holds their padding blocks (``buf[64:192]``, ``buf[192:320]``)."""
    na, nb = a.size, b.size
    base = _address(buf)
    pad_a, pad_b = base + 64, base + 192
    end_a = (na >> 6) + _pad_tail(a, na, buf, 64)          # blocks in all
    end_b = (nb >> 6) + _pad_tail(b, nb, buf, 192)
    whole_a, whole_b = na >> 6, nb >> 6
    at_a, at_b = _address(a), _address(b)
    abef_a, cdgh_a = _initial_state()
    abef_b, cdgh_b = _initial_state()
    k = 0
    common = min(whole_a, whole_b)
    while k < common:
        abef_a, cdgh_a, abef_b, cdgh_b = _compress2(abef_a, cdgh_a, at_a + 64 * k, abef_b, cdgh_b, at_b + 64 * k)
        k += 1
    # both have blocks left: the shorter one's padding with the longer one's next blocks
    while k < end_a and k < end_b:
        xa = at_a + 64 * k if k < whole_a else pad_a + 64 * (k - whole_a)
        xb = at_b + 64 * k if k < whole_b else pad_b + 64 * (k - whole_b)
        abef_a, cdgh_a, abef_b, cdgh_b = _compress2(abef_a, cdgh_a, xa, abef_b, cdgh_b, xb)
        k += 1
    ka = k
    while ka < end_a:
        abef_a, cdgh_a = _compress1(abef_a, cdgh_a, at_a + 64 * ka if ka < whole_a else pad_a + 64 * (ka - whole_a))
        ka += 1
    kb = k
    while kb < end_b:
        abef_b, cdgh_b = _compress1(abef_b, cdgh_b, at_b + 64 * kb if kb < whole_b else pad_b + 64 * (kb - whole_b))
        kb += 1
    _store_digest(base, abef_a, cdgh_a)
    _store_digest(base + 32, abef_b, cdgh_b)


# ---- selection and the Python entry point ----

_NEEDED_FEATURES = ("sha", "ssse3")     # SHA256*, PSHUFB/PALIGNR (every SHA CPU has SSSE3 and SSE4.1)


def _sha_ni_available() -> bool:
    """Whether numba compiles for an x86-64 CPU with the SHA extensions (and ROCKETLAKE_SHA is not
    ``hashlib``)."""
    if os.environ.get("ROCKETLAKE_SHA", "").strip().lower() == "hashlib":
        return False
    return x86_features(*_NEEDED_FEATURES)


HAVE_SHA_NI: bool = _sha_ni_available()


def _as_bytes(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        if x.ndim != 1 or x.dtype != np.uint8 or not x.flags.c_contiguous:
            raise ValueError(f"a contiguous 1-D uint8 array is needed, not {x.dtype} {x.shape} "
                             f"(contiguous: {x.flags.c_contiguous})")
        return x
    return np.frombuffer(x, np.uint8)          # bytes, bytearray, contiguous memoryview


def digest_pair(a, b) -> tuple[bytes, bytes]:
    """``(hashlib.sha256(a).digest(), hashlib.sha256(b).digest())`` of two contiguous 1-D uint8
    arrays (or bytes-like objects) of any lengths, hashed two at a time with SHA-NI where
    ``HAVE_SHA_NI`` (else by hashlib); the GIL is released while hashing."""
    a, b = _as_bytes(a), _as_bytes(b)
    if not HAVE_SHA_NI:
        return hashlib.sha256(a).digest(), hashlib.sha256(b).digest()
    buf = np.empty(320, np.uint8)
    _pair_kernel(a, b, buf)
    return buf[:32].tobytes(), buf[32:64].tobytes()
