"""Host addresses in records (docs/FORMAT.md §1): 'a.b.c.d:port' / '[v6]:port' <-> packed bytes.

A record stores its born and store hosts as the address bytes (4 for IPv4, 16 for IPv6) then
the port as a big-endian int32: 8 or 20 bytes (sysFlag bits 0x10 / 0x20 say which). That layout
is ``storelib.format.commitlog``'s (``HOST_V4_SIZE``, ``HOST_V6_SIZE``, ``pack_host``, ``unpack_host``);
this module converts between it and the text form. A batch has few distinct hosts, so whole
columns are parsed and formatted once per distinct value.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..compute import kernels
from ..format.commitlog import HOST_V4_SIZE, HOST_V6_SIZE, pack_host
from ..compute.arrays import binary_from_numpy, dictionary_encoded, numeric_values, single_array
from ..format.textforms import format_host

__all__ = ["parse_host", "HostColumn", "host_column", "host_strings"]


def parse_host(text: str) -> tuple[bytes, bool]:
    """'a.b.c.d:port' or '[v6]:port' -> (address bytes + int32 port, is_ipv6)."""
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or text[close + 1:close + 2] != ":":
            raise ValueError(f"cannot parse host {text!r}: expected '[ipv6]:port'")
        addr, port = text[1:close], text[close + 2:]
        try:
            ip = ipaddress.IPv6Address(addr)
        except ValueError as e:
            raise ValueError(f"cannot parse host {text!r}: {e}") from None
    else:
        addr, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(f"cannot parse host {text!r}: expected 'a.b.c.d:port'")
        try:
            ip = ipaddress.IPv4Address(addr)
        except ValueError as e:
            raise ValueError(f"cannot parse host {text!r}: {e}") from None
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"cannot parse host {text!r}: port must be 0..65535")
    return pack_host(ip.packed, int(port)), ip.version == 6




@dataclass
class HostColumn:
    """A host column as its distinct hosts' bytes and a per-row index (a batch has few hosts)."""
    raw: np.ndarray          # (k, HOST_V6_SIZE) uint8: address bytes then the int32 port, zero padded
    length: np.ndarray       # (k,) int64: HOST_V4_SIZE or HOST_V6_SIZE
    index: np.ndarray        # (n,) int64 row -> distinct host

    @property
    def is_v6(self) -> np.ndarray:
        return self.length[self.index] == HOST_V6_SIZE


def host_column(arr) -> tuple[HostColumn, list]:
    """Parse a host column once per distinct value: (the column, [(rows, error message)] for
    every distinct value that does not parse; those rows keep an all-zero IPv4 host)."""
    arr = single_array(arr)
    if pa.types.is_dictionary(arr.type) and len(arr.dictionary) == 1 and not arr.null_count \
            and arr.dictionary.is_valid()[0].as_py():
        # a dictionary of one host (a Parquet column chunk of one host): every row holds it
        uniq, index = [arr.dictionary[0].as_py()], np.zeros(len(arr), np.int64)
        row_host = index
    elif not pa.types.is_dictionary(arr.type) and len(arr) and not arr.null_count \
            and pc.all(pc.equal(arr, arr[0])).as_py():
        # one host on every row (the broker's own address, a single producer): one comparison
        # pass instead of hashing every row (a fifth of the time)
        uniq, index = [arr[0].as_py()], np.zeros(len(arr), np.int64)
        row_host = index
    else:
        enc = dictionary_encoded(arr)
        uniq, index = enc.dictionary.to_pylist(), numeric_values(enc.indices).astype(np.int64)
        row_host = np.asarray(enc.indices.fill_null(-1))
    raw = np.zeros((max(1, len(uniq)), HOST_V6_SIZE), np.uint8)
    length = np.full(max(1, len(uniq)), HOST_V4_SIZE, np.int64)
    bad = []
    for k, text in enumerate(uniq):
        try:
            b, _ = parse_host(text)
        except ValueError as e:
            bad.append((np.flatnonzero(row_host == k), str(e)))
            continue
        raw[k, :len(b)] = np.frombuffer(b, np.uint8)
        length[k] = len(b)
    return HostColumn(raw, length, index), bad


def host_strings(buf: np.ndarray, pos: np.ndarray, widths: np.ndarray, keys: np.ndarray) -> pa.Array:
    """Host columns of records as 'a.b.c.d:port' / '[v6]:port', formatted once per distinct host.

    ``pos``/``widths``: where each host's bytes are in ``buf`` and how many (8 or 20). IPv4 hosts
    are grouped by their 8 bytes read as one int64 (``keys``); IPv6 hosts by their gathered bytes."""
    n = len(pos)
    if n and (widths == HOST_V4_SIZE).all():
        enc = pa.array(keys, pa.int64()).dictionary_encode()
        names = [format_host(int(k).to_bytes(HOST_V4_SIZE, "big", signed=True)) for k in enc.dictionary.to_numpy()]
    else:
        vals, off = kernels.gather_slices(buf, pos, widths)
        enc = pc.dictionary_encode(binary_from_numpy(vals, off))
        names = [format_host(h) for h in enc.dictionary.to_pylist()]
    return pa.array(names, pa.string()).take(enc.indices)
