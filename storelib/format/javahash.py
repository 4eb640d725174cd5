"""Java arithmetic the readers replay one value at a time: ``String.hashCode``, the index key hash,
``long`` division (docs/FORMAT.md §3: ``keyHash = abs(javaHash(topic#key))``, MIN_VALUE -> 0).

The column-at-a-time versions the writer and the Spark readers use are ``codec.java_hash`` /
``codec.index_key_hash`` (compiled kernels); these are the scalar ones, checked against them in
tests/read/test_query_golden.py.
"""
from __future__ import annotations

__all__ = ["java_string_hash", "index_key_hash", "java_div"]

_INT_MIN = -2**31


def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode() (signed 32-bit) over UTF-16 code units."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def index_key_hash(key_string: str) -> int:
    """IndexFile.indexKeyHashMethod: abs(hashCode), Integer.MIN_VALUE -> 0."""
    h = java_string_hash(key_string)
    return 0 if h == _INT_MIN else abs(h)


def java_div(a: int, b: int) -> int:
    """Java integer division (truncates toward zero, not floor)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q
