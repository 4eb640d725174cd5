"""Text forms of one record's fields in plain Python (no numba, no pyarrow): the host text and
the properties dict (docs/FORMAT.md §1.3, §1.8).

The in-process readers (``records``, and through it ``query``) decode one record at a time and
only need these two conversions; ``hosts`` and ``properties`` hold the vectorized column
versions, whose modules load numba and pyarrow at import (0.4 s: more than a whole shell lookup
may take). ``tests/table/test_snapcache.py`` checks both against those modules' ``format_host`` and
``parse_properties_string``.
"""
from __future__ import annotations

from .commitlog import IPV4_ADDR_SIZE, unpack_host

__all__ = ["PROPERTY_NAME_VALUE_SEP", "PROPERTY_SEP", "format_host", "parse_properties_string"]

PROPERTY_NAME_VALUE_SEP = "\x01"      # MessageDecoder.NAME_VALUE_SEPARATOR
PROPERTY_SEP = "\x02"                 # MessageDecoder.PROPERTY_SEPARATOR


def format_host(raw: bytes) -> str:
    """Java InetAddress.getHostAddress() form: IPv6 uncompressed, e.g. [0:0:0:0:0:0:0:1]:5000."""
    addr, port = unpack_host(raw)
    if len(addr) == IPV4_ADDR_SIZE:
        return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}:{port}"
    groups = (addr[i] << 8 | addr[i + 1] for i in range(0, len(addr), 2))
    return "[" + ":".join(f"{g:x}" for g in groups) + f"]:{port}"


def parse_properties_string(props: str) -> dict[str, str]:
    """MessageDecoder.string2messageProperties for one string: split on U+0002; a segment counts
    when its first U+0001 leaves a non-empty name and value; a later duplicate name wins."""
    out: dict[str, str] = {}
    i, n = 0, len(props)
    while i < n:
        j = props.find(PROPERTY_SEP, i)
        if j < 0:
            j = n
        if j - i >= 3:
            k = props.find(PROPERTY_NAME_VALUE_SEP, i)
            if i < k < j - 1:
                out[props[i:k]] = props[k + 1:j]
        i = j + 1
    return out
