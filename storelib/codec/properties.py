"""The message properties string (docs/FORMAT.md §1.3): parsing and building it.

A record stores its properties as one UTF-8 string, ``name U+0001 value U+0002`` per entry
(MessageDecoder.messageProperties2String). The broker reads it back with
MessageDecoder.string2messageProperties: split on U+0002; a segment counts only when its first
U+0001 leaves a non-empty name and a non-empty value; a later duplicate name wins.

* one string -> dict is ``format.textforms.parse_properties_string`` (plain Python: the shell
  lookup path loads no numba);
* ``parse_properties``: a column -> ``map<string,string>`` plus the chosen properties' values
  (the message tables of range scans, the data source, key lookups), over ``property_pairs``;
* ``property_values``: a column -> the chosen properties' values (topic/queue routing);
* ``property_spans``: where the chosen properties' values are in the column's bytes (the
  encoder's and verify's pass for TAGS, KEYS, UNIQ_KEY, DELAY);
* ``properties_from_pairs`` / ``join_pairs``: ordered (name, value) pairs -> the string (and
  which pairs hold a separator: the input checks);
* ``delete_property``: MessageUtils.deleteProperty on one string.

``property_spans`` (over ``value_spans``, the one copy of the wanted-values loop, also called by
verify's scan) and ``property_pairs`` are compiled (numba): one pass over the column's bytes, no
Python loop per message. This module imports ``kernels``; ``kernels`` never imports it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit
from ..compute import kernelcache  # noqa: F401  (before the kernels: numba picks their cache location then)

from ..compute import kernels
from ..compute.arrays import as_large_string, binary_from_numpy, single_array, string_buffers
from ..format import consumequeue as cq
from ..format.textforms import PROPERTY_NAME_VALUE_SEP, PROPERTY_SEP

__all__ = ["MAP_TYPE", "parse_properties",
           "property_values", "property_spans", "property_spans_between", "value_spans", "encode_names",
           "property_pairs", "second_or_empty", "properties_from_pairs",
           "join_pairs", "PAIR_NAME_SOH", "PAIR_NAME_STX", "PAIR_VALUE_STX", "PAIR_NAME_EMPTY", "delete_property",
           "lmq_queue_offsets"]

MAP_TYPE = pa.map_(pa.string(), pa.string())

# join_pairs' flags per (name, value) pair: what would make the stored string read back differently.
PAIR_NAME_SOH = 1       # the name holds U+0001
PAIR_NAME_STX = 2       # the name holds U+0002
PAIR_VALUE_STX = 4      # the value holds U+0002
PAIR_NAME_EMPTY = 8     # the name is empty




# ----------------------------------------------------------------------------- compiled passes
@njit(cache=True, nogil=True, inline="always")
def _segment(data, i, end):
    """(j, sep) of the segment starting at ``i``: it ends at ``j`` (its U+0002 or ``end``), its
    first U+0001 is at ``sep`` (``j`` if none). Both property loops walk segments with it."""
    j = i
    while j < end and data[j] != 2:
        j += 1
    sep = i
    while sep < j and data[sep] != 1:
        sep += 1
    return j, sep


@njit(cache=True, nogil=True)
def value_spans(data, i, end, names, name_offsets, spans):
    """MessageDecoder.string2messageProperties of the properties data[i:end], for a few wanted
    names only: spans[2w], spans[2w + 1] = the value bytes of name w (-1 when absent).

    Segments end at U+0002; a segment counts when its first U+0001 leaves a non-empty name and
    a non-empty value; the later duplicate wins. (The one copy of this loop: the encoder's
    tags/keys, the readers and verify's scan all call it.) The wanted names are distinct
    (``encode_names``).
    """
    nw = name_offsets.shape[0] - 1
    for w in range(nw):
        spans[2 * w] = -1
        spans[2 * w + 1] = -1
    while i < end:
        # One pass over the bytes (``_segment`` reads a name twice): up to the segment's first
        # U+0001 or its U+0002; a segment without U+0001 counts for nothing.
        sep = i
        while sep < end and data[sep] != 1 and data[sep] != 2:
            sep += 1
        if sep == end or data[sep] == 2:
            i = sep + 1
            continue
        j = sep + 1
        while j < end and data[j] != 2:
            j += 1
        if i < sep and sep < j - 1:
            for w in range(nw):
                a = name_offsets[w]
                b = name_offsets[w + 1]
                if b - a == sep - i:
                    same = True
                    for t in range(b - a):
                        if data[i + t] != names[a + t]:
                            same = False
                            break
                    if same:
                        spans[2 * w] = sep + 1
                        spans[2 * w + 1] = j
                        break           # the names are distinct: no other can match
        i = j + 1


@njit(cache=True, nogil=True)
def _property_spans(data, firsts, lasts, names, name_offsets, starts, ends):
    """``value_spans`` of data[firsts[k]:lasts[k]] for every k into starts/ends[w, k]."""
    nw = name_offsets.shape[0] - 1
    spans = np.empty(2 * nw, np.int64)
    for k in range(firsts.shape[0]):
        value_spans(data, firsts[k], lasts[k], names, name_offsets, spans)
        for w in range(nw):
            starts[w, k] = spans[2 * w]
            ends[w, k] = spans[2 * w + 1]


def encode_names(names: list):
    """(name bytes, offsets) of ``names`` in UTF-8, as ``value_spans`` takes them (distinct)."""
    if len(set(names)) != len(names):
        raise ValueError(f"wanted property names must be distinct: {names!r}")
    enc = [nm.encode("utf-8") for nm in names]
    name_buf = np.frombuffer(b"".join(enc), dtype=np.uint8) if enc else np.zeros(0, np.uint8)
    name_off = np.concatenate([[0], np.cumsum([len(e) for e in enc])]).astype(np.int64)
    return name_buf, name_off


def property_spans_between(data: np.ndarray, firsts: np.ndarray, lasts: np.ndarray, names: list):
    """(starts, ends) arrays of shape (len(names), n): the value byte ranges of each name in the
    properties strings data[firsts[k]:lasts[k]], positions in ``data``, -1 where absent."""
    n = len(firsts)
    name_buf, name_off = encode_names(names)
    starts = np.full((len(names), n), -1, dtype=np.int64)
    ends = np.full((len(names), n), -1, dtype=np.int64)
    if n:
        _property_spans(data, np.asarray(firsts, np.int64), np.asarray(lasts, np.int64), name_buf, name_off,
                        starts, ends)
    return starts, ends


def property_spans(data: np.ndarray, offsets: np.ndarray, names: list):
    """(starts, ends) arrays of shape (len(names), n): value byte ranges, -1 where absent, of the
    properties strings data[offsets[k]:offsets[k + 1]]."""
    offsets = np.asarray(offsets, np.int64)
    return property_spans_between(data, offsets[:-1], offsets[1:], names)


@njit(cache=True, nogil=True)
def _property_pairs(data, offsets, ns, ne, vs, ve, row):
    """Every (name, value) of string2messageProperties, later duplicates of a name winning (the
    kept entry sits where the last one was). Returns the number of pairs written."""
    m = 0
    for k in range(offsets.shape[0] - 1):
        first = m
        i = offsets[k]
        end = offsets[k + 1]
        while i < end:
            j, sep = _segment(data, i, end)
            if i < sep and sep < j - 1:
                # an earlier entry of the same name in this message is dropped
                ln = sep - i
                for q in range(first, m):
                    if ns[q] >= 0 and ne[q] - ns[q] == ln:
                        same = True
                        for t in range(ln):
                            if data[ns[q] + t] != data[i + t]:
                                same = False
                                break
                        if same:
                            ns[q] = -1
                ns[m] = i
                ne[m] = sep
                vs[m] = sep + 1
                ve[m] = j
                row[m] = k
                m += 1
            i = j + 1
    return m


def property_pairs(data: np.ndarray, offsets: np.ndarray):
    """(name starts, name ends, value starts, value ends, row) of every kept property entry."""
    cap = int(np.count_nonzero(data == 2)) + len(offsets)
    ns, ne, vs, ve, row = (np.empty(cap, np.int64) for _ in range(5))
    m = _property_pairs(data, np.asarray(offsets, np.int64), ns, ne, vs, ve, row) if len(offsets) > 1 else 0
    keep = ns[:m] >= 0
    return ns[:m][keep], ne[:m][keep], vs[:m][keep], ve[:m][keep], row[:m][keep]


# ----------------------------------------------------------------------------- Arrow columns
def parse_properties(props: pa.Array, wanted=("TAGS", "KEYS", "UNIQ_KEY")):
    """Vectorized string2messageProperties: (map array, {name: string array of that property}).

    One compiled pass (``property_pairs``) finds every kept entry: segments split on U+0002,
    name and value on the first U+0001, both non-empty, a later duplicate name winning."""
    props = single_array(props)
    props = props.cast(pa.large_string()) if props.type != pa.large_string() else props
    props = props.fill_null("") if props.null_count else props
    n = len(props)
    data, off = string_buffers(props)
    ns, ne, vs, ve, par = property_pairs(data, off)
    names_s = binary_from_numpy(*kernels.gather_slices(data, ns, ne - ns)).cast(pa.string())
    values_s = binary_from_numpy(*kernels.gather_slices(data, vs, ve - vs)).cast(pa.string())
    counts = np.bincount(par, minlength=n) if n else np.zeros(0, np.int64)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    mapped = pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), names_s, values_s, type=MAP_TYPE)
    extra = {}
    for w in wanted:
        m = np.asarray(pc.equal(names_s, w))
        idx = np.full(n, -1, np.int64)
        idx[par[m]] = np.flatnonzero(m)
        extra[w] = values_s.take(pa.array(idx, mask=idx < 0)) if n else pa.array([], pa.string())
    return mapped, extra


def property_values(props, names: tuple[str, ...]) -> dict[str, pa.Array]:
    """Values of the named properties, parsed the way the broker's dispatch parses them.

    MessageDecoder.string2messageProperties: split on U+0002; a segment counts only when its
    first U+0001 leaves a non-empty name and a non-empty value; later duplicates win.
    Returns one string column per name, null where absent.
    """
    props = as_large_string(props)
    n = len(props)
    segs = pc.split_pattern(props, PROPERTY_SEP)
    parent = pc.list_parent_indices(segs).to_numpy()
    flat = pc.list_flatten(segs)
    kv = pc.split_pattern(flat, PROPERTY_NAME_VALUE_SEP, max_splits=1)
    has_sep = pc.equal(pc.list_value_length(kv), 2).to_numpy(zero_copy_only=False)
    name = pc.list_element(kv, 0)
    value = second_or_empty(kv)
    out = {}
    nonempty = has_sep & (pc.binary_length(name).to_numpy(zero_copy_only=False) > 0) \
        & (pc.binary_length(value).to_numpy(zero_copy_only=False) > 0)
    for nm in names:
        hit = np.flatnonzero(nonempty & pc.equal(name, nm).to_numpy(zero_copy_only=False))
        result = np.full(n, -1, dtype=np.int64)
        # Later duplicates win: assigning in ascending order leaves the last one.
        result[parent[hit]] = hit
        mask = result < 0
        taken = value.take(pa.array(np.where(mask, 0, result))) if len(value) else \
            pa.nulls(n, pa.large_string())
        out[nm] = pc.if_else(pa.array(mask), pa.scalar(None, pa.large_string()), taken) if n else taken
    return out


def second_or_empty(kv: pa.Array) -> pa.Array:
    """Element 1 of each [name, value] list, "" for lists of length 1."""
    padded = pc.list_slice(kv, 0, 2)
    lengths = pc.list_value_length(padded).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(padded)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    idx = np.where(lengths >= 2, starts + 1, -1)
    vals = flat.take(pa.array(np.where(idx < 0, 0, idx))) if len(flat) else pa.nulls(len(kv), pa.large_string())
    return pc.if_else(pa.array(idx < 0), pa.scalar("", pa.large_string()), vals.cast(pa.large_string()))


@njit(cache=True, nogil=True)
def _join_pairs(ndata, noff, vdata, voff, out, flags):
    """name U+0001 value U+0002 for every pair, back to back, and each pair's PAIR_* flags."""
    p = 0
    for k in range(noff.shape[0] - 1):
        f = 0
        a = noff[k]
        b = noff[k + 1]
        if a == b:
            f |= PAIR_NAME_EMPTY
        for i in range(a, b):
            c = ndata[i]
            if c == 1:
                f |= PAIR_NAME_SOH
            elif c == 2:
                f |= PAIR_NAME_STX
            out[p] = c
            p += 1
        out[p] = 1
        p += 1
        for i in range(voff[k], voff[k + 1]):
            c = vdata[i]
            if c == 2:
                f |= PAIR_VALUE_STX
            out[p] = c
            p += 1
        out[p] = 2
        p += 1
        flags[k] = f
    return p


def join_pairs(names: pa.Array, values: pa.Array, list_offsets: np.ndarray):
    """messageProperties2String over ordered (name, value) pairs (message k owns pairs
    list_offsets[k]..list_offsets[k+1]): (the strings, PAIR_* flags per pair).

    One compiled pass copies the pairs and finds the separators in them (pyarrow needs a join
    and a substring search per separator: 3-4x the time)."""
    names = as_large_string(names)
    values = as_large_string(values)
    ndata, noff = string_buffers(names)
    vdata, voff = string_buffers(values)
    ends = np.zeros(len(names) + 1, np.int64)
    np.cumsum(np.diff(noff) + np.diff(voff) + 2, out=ends[1:])
    msg_off = ends[np.asarray(list_offsets, np.int64)]
    out = np.empty(int(ends[-1]), np.uint8)
    flags = np.zeros(len(names), np.uint8)
    if len(names):
        _join_pairs(ndata, noff, vdata, voff, out, flags)
    # UTF-8 strings joined with ASCII separators are UTF-8: no validation pass needed.
    joined = pa.Array.from_buffers(pa.large_string(), len(msg_off) - 1,
                                   [None, pa.py_buffer(msg_off), pa.py_buffer(out)])
    return joined, flags


def properties_from_pairs(names: pa.Array, values: pa.Array, list_offsets: np.ndarray) -> pa.Array:
    """messageProperties2String over ordered (name, value) pairs: name U+0001 value U+0002 ..."""
    return join_pairs(names, values, list_offsets)[0]


def delete_property(props: str, name: str) -> str:
    """MessageUtils.deleteProperty: drop every ``name`` U+0001 ... entry (through its U+0002)."""
    out, idx0 = [], 0
    while True:
        start = idx0
        while True:
            idx1 = props.find(name, start)
            if idx1 < 0:
                break
            start = idx1 + len(name)
            if (idx1 == 0 or props[idx1 - 1] == PROPERTY_SEP) and props[start:start + 1] == PROPERTY_NAME_VALUE_SEP:
                break
        if idx1 < 0:
            out.append(props[idx0:])
            break
        out.append(props[idx0:idx1])
        idx2 = props.find(PROPERTY_SEP, idx1 + len(name) + 1)
        if idx2 < 0:
            break
        idx0 = idx2 + 1
    return "".join(out)


def lmq_queue_offsets(props, queue: str) -> np.ndarray:
    """Per properties string: the queue offset ``queue`` (a light message queue) got where the
    record's INNER_MULTI_DISPATCH names it (the value at the same place of INNER_MULTI_QUEUE_OFFSET,
    docs/FORMAT.md §2.1), -1 where it is not named or the lists do not pair up."""
    pv = property_values(props, (cq.PROPERTY_LMQ_NAMES, cq.PROPERTY_LMQ_OFFSETS))
    n = len(props)
    out = np.full(n, -1, dtype=np.int64)
    names = pc.split_pattern(pv[cq.PROPERTY_LMQ_NAMES].fill_null(""), cq.LMQ_SEPARATOR)
    offs = pc.split_pattern(pv[cq.PROPERTY_LMQ_OFFSETS].fill_null(""), cq.LMQ_SEPARATOR)
    n_len = pc.list_value_length(names).to_numpy(zero_copy_only=False)
    o_len = pc.list_value_length(offs).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(names)
    parent = pc.list_parent_indices(names).to_numpy()
    hit = np.flatnonzero(pc.equal(flat, queue).fill_null(False).to_numpy(zero_copy_only=False))
    if not len(hit):
        return out
    starts = np.concatenate([[0], np.cumsum(n_len)])[:-1]
    rows, first = np.unique(parent[hit], return_index=True)     # a queue named twice: its first place
    place = hit[first] - starts[rows]
    paired = n_len[rows] == o_len[rows]
    rows, place = rows[paired], place[paired]
    o_starts = np.concatenate([[0], np.cumsum(o_len)])[:-1]
    vals = pc.list_flatten(offs).take(pa.array(o_starts[rows] + place))
    digits = np.asarray(pc.match_substring_regex(vals, r"^-?[0-9]{1,18}$").fill_null(False))
    rows, vals = rows[digits], vals.filter(pa.array(digits))
    out[rows] = pc.cast(vals, pa.int64()).to_numpy(zero_copy_only=False)
    return out
