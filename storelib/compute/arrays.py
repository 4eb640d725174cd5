"""Arrow column buffers: one contiguous array, large string/binary views, zero-copy numpy access.

The codec, the properties parser and the input readers work on whole columns through these:
a column is made one contiguous ``large_string`` / ``large_binary`` array, its value bytes and
int64 offsets are read as numpy arrays without a copy, and kernel output (values + offsets) is
wrapped back into an Arrow array without a copy.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["single_array", "as_large_string", "as_large_binary", "string_buffers", "binary_from_numpy",
           "binary_lengths", "sorted_unique", "valid_mask", "numeric_values", "dictionary_encoded"]


def single_array(arr) -> pa.Array:
    """One contiguous Array; a ChunkedArray of one chunk is returned without a copy
    (``combine_chunks`` copies even then)."""
    if isinstance(arr, pa.ChunkedArray):
        return arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    return arr


def as_large_string(arr) -> pa.Array:
    arr = single_array(arr)
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    return arr


def as_large_binary(arr) -> pa.Array:
    arr = single_array(arr)
    if arr.type != pa.large_binary():
        arr = arr.cast(pa.large_binary())
    return arr


def dictionary_encoded(arr) -> pa.DictionaryArray:
    """``pc.dictionary_encode`` of the column's values: the distinct values in the order they first
    occur, int32 indices, null where the value is null. A dictionary column (a Parquet column
    read with ``read_dictionary``) is encoded from its indices, not by hashing every row's value:
    its dictionary may hold values no row uses, a value twice, nulls, in any order, and the result
    is still the one its decoded values would give."""
    arr = single_array(arr)
    if not pa.types.is_dictionary(arr.type):
        return pc.dictionary_encode(arr)
    used = pc.dictionary_encode(arr.indices)            # the codes rows use, in first-use order
    distinct = pc.dictionary_encode(arr.dictionary.take(used.dictionary))
    return pa.DictionaryArray.from_arrays(distinct.indices.take(used.indices), distinct.dictionary)


def string_buffers(arr: pa.Array):
    """(values uint8, offsets int64) of a large_string/large_binary array, honouring slicing."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    if bufs[2] is None:
        data = np.zeros(0, np.uint8)
    else:
        data = np.frombuffer(bufs[2], dtype=np.uint8)
    return data, offsets


def binary_from_numpy(values: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A large_binary array over a numpy value buffer and int64 offsets (zero copy)."""
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(values)])


def binary_lengths(arr) -> np.ndarray:
    """Byte length of every value of a string or binary column."""
    arr = as_large_binary(arr) if not pa.types.is_large_string(arr.type) else arr
    _, offsets = string_buffers(single_array(arr))
    return np.diff(offsets)


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique by sorting (numpy 2.3's hash-based np.unique is many times slower on millions of
    distinct int64 values)."""
    a = np.sort(np.asarray(a).reshape(-1))
    if len(a) > 1:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    return a


def valid_mask(arr) -> np.ndarray:
    """bool per value: not null. Read from the validity bitmap: ``Array.to_numpy`` goes through
    pyarrow's pandas conversion, whose first use imports pandas (~0.4 s in every Python worker)."""
    arr = single_array(arr)
    n = len(arr)
    if arr.null_count == 0:
        return np.ones(n, np.bool_)
    if pa.types.is_null(arr.type):
        return np.zeros(n, np.bool_)
    bits = np.frombuffer(arr.buffers()[0], np.uint8)
    return np.unpackbits(bits, count=arr.offset + n, bitorder="little")[arr.offset:].astype(np.bool_)


def numeric_values(arr) -> np.ndarray:
    """The values of an integer, floating point or boolean array without nulls as numpy (a view
    for numbers), without pyarrow's pandas conversion (see ``valid_mask``); other arrays, or
    arrays with nulls, go through ``to_numpy``."""
    arr = single_array(arr)
    t = arr.type
    if arr.null_count == 0 and len(arr):
        if pa.types.is_boolean(t):
            bits = np.frombuffer(arr.buffers()[1], np.uint8)
            return np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")[arr.offset:].astype(np.bool_)
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            kind = "f" if pa.types.is_floating(t) else ("i" if pa.types.is_signed_integer(t) else "u")
            dtype = np.dtype(f"{kind}{t.bit_width // 8}")
            return np.frombuffer(arr.buffers()[1], dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
    return arr.to_numpy(zero_copy_only=False)
