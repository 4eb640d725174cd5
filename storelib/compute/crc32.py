"""zlib's CRC-32 (RocketMQ's BODYCRC before its 31-bit mask) for numba code: the one CRC of the
encoder and verify.

* ``crc32_one(d, i, end, T)``: zlib.crc32 of ``d[i:end]`` (``d`` a contiguous uint8 array,
  0 <= i, end <= len(d); ``T`` = ``CRC_TABLES``) as np.uint32, callable from ``@njit`` code: by
  carry-less multiplication (PCLMULQDQ) folding where the CPU has it (``crc32_clmul``, 9 GB/s on
  256-byte bodies here), else by tables (``crc32_table``, slicing-by-16, 2 GB/s);
* ``crc32_slices``: the CRCs of many slices of one buffer in one call.

The math. Read a message's bits in order (each byte least significant bit first) as the
coefficients of a polynomial M(x), first bit highest. The raw CRC (no initial or final XOR) is
M(x)·x^32 mod P(x), P being zlib's polynomial, so it is linear and only depends on M mod P:
any part of the message may be replaced by something congruent mod P at the same position.
A 16-byte block A = a0·x^64 + a1 (a0 its first 8 bytes) followed by 16 bytes C is then
A·x^128 + C ≡ a0·(x^192 mod P) + a1·(x^128 mod P) + C, two 64×32-bit carry-less products
(< 96 bits, one PCLMULQDQ each) XORed into C: 16 bytes less to go ("folding"). Four
accumulators folded 64 bytes at a time (x^576, x^512) keep four multiplications in flight on
longer inputs. The last < 16 bytes are folded in the same way after a byte shuffle
(``_fold_tail``); the 16 bytes left have the message's raw CRC, which one slicing-by-16 step
of the table CRC (state 0) computes. zlib's initial 0xFFFFFFFF is, by linearity, the same as
XORing it into the first 4 bytes and starting from 0; its final XOR is applied at the end.
Inputs under 16 bytes use the tables only.

Bits are reflected throughout (bit 0 of a word is its highest coefficient), so the constants
are bit-reversed and carry an extra factor (``_fold_constant``).

``crc32_one`` is the clmul kernel when numba compiles for an x86-64 CPU with PCLMULQDQ (and
``ROCKETLAKE_CRC`` is not ``table``), else the table kernel (``HAVE_CLMUL`` says which). Compiled callers bake in the one they were compiled with (numba's cache does not follow
the choice); test the fallback in a fresh process with its own NUMBA_CACHE_DIR.
"""
from __future__ import annotations

import os

import numpy as np
from llvmlite import ir
from numba import njit
from . import kernelcache  # noqa: F401  (before the kernels: numba picks their cache location then)
from numba.core import cgutils, types
from numba.extending import intrinsic, models, register_model

from .intrinsics import x86_features

__all__ = ["CRC_TABLES", "HAVE_CLMUL", "crc32_one", "crc32_clmul", "crc32_table", "crc32_slices"]

# ---- the table CRC: every CPU, and the clmul kernel's short inputs and last step ----

def _make_crc_tables() -> np.ndarray:
    """Slicing-by-16 tables for the reflected CRC-32 polynomial 0xEDB88320 (zlib's CRC)."""
    tables = np.zeros((16, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        tables[0, i] = c
    for i in range(256):
        c = int(tables[0, i])
        for t in range(1, 16):
            c = int(tables[0, c & 0xFF]) ^ (c >> 8)
            tables[t, i] = c
    # flat (table t at t * 256): numba indexes a 1-D table 20-40% faster than a 2-D one here
    return tables.reshape(-1)


CRC_TABLES = _make_crc_tables()


@njit(cache=True, nogil=True, inline="always")
def _le32(d, i):
    return np.uint32(d[i]) | (np.uint32(d[i + 1]) << 8) | (np.uint32(d[i + 2]) << 16) | (np.uint32(d[i + 3]) << 24)


@njit(cache=True, nogil=True)
def crc32_table(d, i, end, T):
    """zlib.crc32 of d[i:end] with ``CRC_TABLES`` (16 tables of 256, flat): 16 bytes per step
    (slicing-by-16, 10-20% faster than by-8 on 300-byte bodies), the tail byte by byte."""
    crc = np.uint32(0xFFFFFFFF)
    while i + 16 <= end:
        a = crc ^ _le32(d, i)
        b = _le32(d, i + 4)
        c = _le32(d, i + 8)
        e = _le32(d, i + 12)
        crc = (T[3840 + (a & 0xFF)] ^ T[3584 + ((a >> 8) & 0xFF)] ^ T[3328 + ((a >> 16) & 0xFF)] ^ T[3072 + (a >> 24)]
               ^ T[2816 + (b & 0xFF)] ^ T[2560 + ((b >> 8) & 0xFF)] ^ T[2304 + ((b >> 16) & 0xFF)] ^ T[2048 + (b >> 24)]
               ^ T[1792 + (c & 0xFF)] ^ T[1536 + ((c >> 8) & 0xFF)] ^ T[1280 + ((c >> 16) & 0xFF)] ^ T[1024 + (c >> 24)]
               ^ T[768 + (e & 0xFF)] ^ T[512 + ((e >> 8) & 0xFF)] ^ T[256 + ((e >> 16) & 0xFF)] ^ T[e >> 24])
        i += 16
    while i < end:
        crc = T[(crc ^ np.uint32(d[i])) & 0xFF] ^ (crc >> 8)
        i += 1
    return crc ^ np.uint32(0xFFFFFFFF)


# ---- folding ----

POLY = 0x104C11DB7      # zlib's P(x) = x^32 + x^26 + ... + x + 1, bit k = coefficient of x^k (0xEDB88320 reflected)


def _x_pow_mod_p(n: int) -> int:
    """x^n mod P(x) in normal bit order (bit k = coefficient of x^k)."""
    r = 1
    for _ in range(n):
        r <<= 1
        if r >> 32:
            r ^= POLY
    return r


def _reflect32(v: int) -> int:
    return int(f"{v:032b}"[::-1], 2)


def _fold_constant(n: int) -> np.uint64:
    """The 32-bit constant that multiplies a 64-bit word by x^n (mod P) with one PCLMULQDQ.

    In reflected order a 64-bit word w stands for sum w_i·x^(63-i), a 32-bit constant k for
    sum k_j·x^(31-j), and a 128-bit result r for sum r_m·x^(127-m). The integer product has
    r_m = XOR of w_i·k_j over i + j = m, whose term is x^(94-m) = x^(127-m) / x^33 (m <= 94):
    read as a 128-bit reflected value the product is w·k·x^33. (With two 64-bit operands the factor is x:
    the "one-bit shift" of reflected clmul.) So k = reflect(x^(n-33) mod P) gives w·x^n (mod P).
    """
    return np.uint64(_reflect32(_x_pow_mod_p(n - 33)))


# A 16-byte block A = a0·x^64 + a1 moved forward over the next 16 bytes: a0·x^192 + a1·x^128;
# over the next 64 bytes (four accumulators): a0·x^576 + a1·x^512.
K192, K128 = _fold_constant(192), _fold_constant(128)
K576, K512 = _fold_constant(576), _fold_constant(512)


# ---- code generation: PCLMULQDQ and unaligned loads, inlined into the caller by numba ----
#
# The fold state is a numba type of its own, ``Block``, lowered as LLVM's <2 x i64> (one xmm
# register): two uint64 words would cost a move to and from general registers on every fold.

_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_V2 = ir.VectorType(_I64, 2)
_PCLMUL_TYPE = ir.FunctionType(_V2, [_V2, _V2, _I8])


class BlockType(types.Type):
    """16 message bytes (or a polynomial of degree < 128) in an xmm register, as two
    little-endian uint64 lanes: lane 0 = bytes 0..7."""

    def __init__(self):
        super().__init__(name="crc32.Block")


Block = BlockType()


@register_model(BlockType)
class _BlockModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _V2)


def _is_bytes(d) -> bool:
    """The loads below address d's data directly: a contiguous 1-D uint8 array."""
    return isinstance(d, types.Array) and d.ndim == 1 and d.layout in "CF" and d.dtype == types.uint8


def _pointer(context, builder, aryty, ary, idx, llty):
    """Pointer to ``ary[idx]`` as ``llty*`` (no bounds or negative-index handling)."""
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [idx]), llty.as_pointer())


def _splat(builder, value, n):
    """<n x value.type> with every element ``value``."""
    v = ir.Constant(ir.VectorType(value.type, n), ir.Undefined)
    for k in range(n):
        v = builder.insert_element(v, value, ir.Constant(_I32, k))
    return v


def _vector(builder, lane0, lane1):
    """<2 x i64> of two i64 values."""
    v = builder.insert_element(ir.Constant(_V2, ir.Undefined), lane0, ir.Constant(_I32, 0))
    return builder.insert_element(v, lane1, ir.Constant(_I32, 1))


def _load_codegen(llty):
    """Codegen of an unaligned load of ``llty`` at ``&d[i]`` (x86 is little-endian)."""
    def codegen(context, builder, sig, args):
        return builder.load(_pointer(context, builder, sig.args[0], args[0], args[1], llty), align=1)
    return codegen


@intrinsic
def _load_u64(typingctx, d, i):
    """The 8 bytes d[i:i+8] as a little-endian uint64 (one unaligned load)."""
    return (types.uint64(d, types.int64), _load_codegen(_I64)) if _is_bytes(d) else None


@intrinsic
def _load_u32(typingctx, d, i):
    """The 4 bytes d[i:i+4] as a little-endian uint32 (one unaligned load)."""
    return (types.uint32(d, types.int64), _load_codegen(_I32)) if _is_bytes(d) else None


@intrinsic
def _load_block(typingctx, d, i):
    """The 16 bytes d[i:i+16] as a Block (one unaligned load)."""
    return (Block(d, types.int64), _load_codegen(_V2)) if _is_bytes(d) else None


@intrinsic
def _make_block(typingctx, lane0, lane1):
    """A Block of two uint64 lanes (lane 0 = the first 8 bytes)."""
    def codegen(context, builder, sig, args):
        return _vector(builder, *args)
    return Block(types.uint64, types.uint64), codegen


@intrinsic
def _block_lanes(typingctx, block):
    """A Block's two uint64 lanes (lane 0 = its first 8 bytes)."""
    def codegen(context, builder, sig, args):
        lanes = [builder.extract_element(args[0], ir.Constant(_I32, k)) for k in (0, 1)]
        return context.make_tuple(builder, sig.return_type, lanes)
    return types.UniTuple(types.uint64, 2)(Block), codegen


def _fold_ir(builder, state, nxt, k_hi, k_lo):
    """IR of ``state`` moved forward over ``nxt`` and added to it (<2 x i64> values)."""
    pclmul = cgutils.get_or_insert_function(builder.module, _PCLMUL_TYPE, "llvm.x86.pclmulqdq")
    consts = _vector(builder, k_hi, k_lo)
    # imm 0x00: lane 0 of both operands; 0x11: lane 1 of both
    p0 = builder.call(pclmul, [state, consts, ir.Constant(_I8, 0x00)])
    p1 = builder.call(pclmul, [state, consts, ir.Constant(_I8, 0x11)])
    return builder.xor(builder.xor(p0, p1), nxt)


@intrinsic
def _fold(typingctx, state, nxt, k_hi, k_lo):
    """``state`` moved forward over the Block ``nxt`` and added to it:
    lane0·k_hi XOR lane1·k_lo XOR nxt (carry-less; ``k_hi``, ``k_lo`` from ``_fold_constant``)."""
    def codegen(context, builder, sig, args):
        return _fold_ir(builder, *args)
    return Block(Block, Block, types.uint64, types.uint64), codegen


@intrinsic
def _fold_tail(typingctx, state, d, end, t):
    """``state`` followed by the t < 16 bytes d[end-t:end] (``end`` >= 16), as one Block.

    As bytes, state || tail is head || rest with head = state's first t bytes and rest = its
    last 16 - t bytes then the tail; head·x^128 + rest is one fold (head padded with leading
    zero bytes, which do not change a polynomial). PSHUFB moves the bytes: with
    m[j] = j + t - 16, byte j of head is state[m[j]] (zero where m[j] < 0: PSHUFB zeroes bytes
    whose index has the top bit set), byte j of rest is state[j + t] for m[j] < 0 (index m[j]
    with its top bit flipped: the low 4 bits are j + t) and the last 16 bytes of d[:end] else."""
    def codegen(context, builder, sig, args):
        state, ary, end, t = args
        v16 = ir.VectorType(_I8, 16)
        pshufb = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [v16, v16]),
                                                "llvm.x86.ssse3.pshuf.b.128")
        entry = builder.basic_block
        with builder.if_then(builder.icmp_signed("!=", t, ir.Constant(_I64, 0))):
            iota = ir.Constant(v16, list(range(16)))
            top = ir.Constant(v16, [0x80] * 16)
            m = builder.add(iota, _splat(builder, builder.trunc(builder.sub(t, ir.Constant(_I64, 16)), _I8), 16))
            last = builder.load(_pointer(context, builder, sig.args[1], ary,
                                         builder.sub(end, ir.Constant(_I64, 16)), v16), align=1)
            s16 = builder.bitcast(state, v16)
            head = builder.call(pshufb, [s16, m])
            rest = builder.or_(builder.call(pshufb, [s16, builder.xor(m, top)]),
                               builder.call(pshufb, [last, builder.or_(iota, builder.and_(m, top))]))
            folded = _fold_ir(builder, builder.bitcast(head, _V2), builder.bitcast(rest, _V2),
                              ir.Constant(_I64, int(K192)), ir.Constant(_I64, int(K128)))
            tail_block = builder.basic_block
        result = builder.phi(_V2)
        result.add_incoming(state, entry)
        result.add_incoming(folded, tail_block)
        return result
    return (Block(Block, d, types.int64, types.int64), codegen) if _is_bytes(d) else None


# ---- the kernels ----

@njit(cache=True, nogil=True, inline="always")
def _table_update(crc, d, i, end, T):
    """The table CRC (reflected, no final XOR) from state ``crc`` over d[i:end], for inputs under
    16 bytes: 8 bytes per step (slicing-by-8, tables 7..0 of ``T``), then 4, then byte by byte."""
    while i + 8 <= end:
        a = np.uint32(np.uint64(crc) ^ (_load_u64(d, i) & np.uint64(0xFFFFFFFF)))
        b = np.uint32(_load_u64(d, i) >> np.uint64(32))
        crc = (T[1792 + (a & 0xFF)] ^ T[1536 + ((a >> 8) & 0xFF)] ^ T[1280 + ((a >> 16) & 0xFF)] ^ T[1024 + (a >> 24)]
               ^ T[768 + (b & 0xFF)] ^ T[512 + ((b >> 8) & 0xFF)] ^ T[256 + ((b >> 16) & 0xFF)] ^ T[b >> 24])
        i += 8
    if i + 4 <= end:
        a = crc ^ _load_u32(d, i)
        crc = T[768 + (a & 0xFF)] ^ T[512 + ((a >> 8) & 0xFF)] ^ T[256 + ((a >> 16) & 0xFF)] ^ T[a >> 24]
        i += 4
    while i < end:
        crc = T[(crc ^ np.uint32(d[i])) & 0xFF] ^ (crc >> 8)
        i += 1
    return crc


@njit(cache=True, nogil=True, inline="always")
def _reduce_block(block, T):
    """The raw CRC (state 0) of a Block's 16 bytes: one slicing-by-16 step (tables 15..0)."""
    lane0, lane1 = _block_lanes(block)
    a, b = np.uint32(lane0 & np.uint64(0xFFFFFFFF)), np.uint32(lane0 >> np.uint64(32))
    c, e = np.uint32(lane1 & np.uint64(0xFFFFFFFF)), np.uint32(lane1 >> np.uint64(32))
    return (T[3840 + (a & 0xFF)] ^ T[3584 + ((a >> 8) & 0xFF)] ^ T[3328 + ((a >> 16) & 0xFF)] ^ T[3072 + (a >> 24)]
            ^ T[2816 + (b & 0xFF)] ^ T[2560 + ((b >> 8) & 0xFF)] ^ T[2304 + ((b >> 16) & 0xFF)] ^ T[2048 + (b >> 24)]
            ^ T[1792 + (c & 0xFF)] ^ T[1536 + ((c >> 8) & 0xFF)] ^ T[1280 + ((c >> 16) & 0xFF)] ^ T[1024 + (c >> 24)]
            ^ T[768 + (e & 0xFF)] ^ T[512 + ((e >> 8) & 0xFF)] ^ T[256 + ((e >> 16) & 0xFF)] ^ T[e >> 24])


@njit(cache=True, nogil=True)
def crc32_clmul(d, i, end, T):
    """zlib.crc32 of d[i:end] by PCLMULQDQ folding (x86-64 with PCLMULQDQ only)."""
    if end - i < 16:
        return _table_update(np.uint32(0xFFFFFFFF), d, i, end, T) ^ np.uint32(0xFFFFFFFF)
    # zlib's initial 0xFFFFFFFF, XORed into the first 4 bytes
    acc = _make_block(_load_u64(d, i) ^ np.uint64(0xFFFFFFFF), _load_u64(d, i + 8))
    i += 16
    if end - i >= 112:
        # four accumulators over consecutive 16-byte blocks, each folded 64 bytes forward per step
        acc1, acc2, acc3 = _load_block(d, i), _load_block(d, i + 16), _load_block(d, i + 32)
        i += 48
        while i + 64 <= end:
            acc = _fold(acc, _load_block(d, i), K576, K512)
            acc1 = _fold(acc1, _load_block(d, i + 16), K576, K512)
            acc2 = _fold(acc2, _load_block(d, i + 32), K576, K512)
            acc3 = _fold(acc3, _load_block(d, i + 48), K576, K512)
            i += 64
        # then each into the next: acc·x^128 + acc1, ...
        acc = _fold(_fold(_fold(acc, acc1, K192, K128), acc2, K192, K128), acc3, K192, K128)
    while i + 16 <= end:
        acc = _fold(acc, _load_block(d, i), K192, K128)
        i += 16
    # _fold_tail skips an empty tail itself: under an ``if`` here, numba's reference-count pruning
    # kept an NRT incref/decref of d and T in this function (+3 ns a call)
    return _reduce_block(_fold_tail(acc, d, end, end - i), T) ^ np.uint32(0xFFFFFFFF)


_NEEDED_FEATURES = ("pclmul", "ssse3")      # PCLMULQDQ, PSHUFB (every PCLMULQDQ CPU has SSSE3)


def _clmul_available() -> bool:
    """Whether numba compiles for an x86-64 CPU with PCLMULQDQ (and ROCKETLAKE_CRC is not ``table``)."""
    if os.environ.get("ROCKETLAKE_CRC", "").strip().lower() == "table":
        return False
    return x86_features(*_NEEDED_FEATURES)


HAVE_CLMUL: bool = _clmul_available()
crc32_one = crc32_clmul if HAVE_CLMUL else crc32_table


@njit(cache=True, nogil=True)
def _crc32_slices(data, starts, ends, tables, out):
    for k in range(starts.shape[0]):
        out[k] = crc32_one(data, starts[k], ends[k], tables)


def crc32_slices(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """zlib.crc32 of ``data[starts[k]:ends[k]]`` for every k, as uint32."""
    out = np.empty(len(starts), dtype=np.uint32)
    if len(starts):
        _crc32_slices(data, starts.astype(np.int64), ends.astype(np.int64), CRC_TABLES, out)
    return out
