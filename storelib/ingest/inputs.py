"""Input formats -> canonical message table (codec.MESSAGE_SCHEMA), and input splits.

Input order is commitlog order: files in path order, then rows in file order. Executors read
their split of the input directly with pyarrow (Spark only schedules), so the input does not
make a JVM -> Python round trip.

* ``jsonl``: the golden ``messages.jsonl`` format: ``body_b64`` (base64), ``properties`` as
  ordered ``[name, value]`` pairs, optional ``properties_string`` (must agree with the pairs).
  ``.gz`` files are read whole (one split each). Splits are byte ranges cut at line starts.
* ``parquet``: same field names, ``body`` binary, ``properties`` as ``list<struct<name,value>>``
  (order kept) or ``map<string,string>``. Splits are row ranges.
* ``delta``: the Parquet files of a Delta table's current version, in the order the Delta log
  lists them (``deltalake``), read like ``parquet``.
"""
from __future__ import annotations

import gzip
import io
import os
import re
from typing import Callable
from dataclasses import dataclass, asdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from ..compute import kernels
from ..io import storage
from ..compute.arrays import (as_large_binary, as_large_string, binary_from_numpy, numeric_values, single_array,
                     string_buffers, valid_mask)
from ..codec.messages import DICTIONARY_FIELDS, MESSAGE_SCHEMA, TEXT_DICTIONARY, message_schema
from ..errors import InputError
from ..codec.properties import (PAIR_NAME_EMPTY, PAIR_NAME_SOH, PAIR_NAME_STX, PAIR_VALUE_STX, join_pairs,
                                 second_or_empty)
from ..format.textforms import PROPERTY_NAME_VALUE_SEP, PROPERTY_SEP

__all__ = ["FORMATS", "JSONL_SCHEMA", "JsonLabel", "detect_format", "check_format", "Split", "list_input_files", "plan_splits", "b64decode_column", "to_canonical",
           "read_split", "resolve_line_labels", "jsonl_to_table", "canonical_to_parquet_input", "read_all",
           "split_from_dict"]

FORMATS = ("jsonl", "parquet", "delta")

JSONL_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue_id", pa.int64()), ("flag", pa.int64()), ("sys_flag", pa.int64()),
    ("born_timestamp", pa.int64()), ("store_timestamp", pa.int64()),
    ("born_host", pa.string()), ("store_host", pa.string()),
    ("reconsume_times", pa.int64()), ("prepared_transaction_offset", pa.int64()),
    ("body_b64", pa.large_string()), ("properties", pa.list_(pa.list_(pa.string()))),
    ("properties_string", pa.large_string()),
    ("body", pa.large_string()),          # the body as UTF-8 text, for rows without body_b64
])

INT32_FIELDS = ("queue_id", "flag", "sys_flag", "reconsume_times")


@dataclass(frozen=True)
class Split:
    """A contiguous piece of the input: a byte range of a JSON lines file or rows of a Parquet file."""
    index: int
    path: str
    fmt: str
    start: int          # jsonl: byte offset; parquet: first row
    end: int            # jsonl: byte offset (exclusive); parquet: row (exclusive)
    first_line: int = 0  # jsonl: 1-based line number of the split's first line, if known (0 = unknown)

    def to_dict(self):
        return asdict(self)


# ---------------------------------------------------------------------------- discovery
def list_input_files(path: str, fmt: str) -> list[str]:
    if fmt not in FORMATS:
        raise InputError([f"unknown input format {fmt!r}: expected one of {', '.join(FORMATS)}"])
    fs, root = storage.filesystem(path)
    if fmt == "delta":
        from deltalake import DeltaTable
        try:
            dt = DeltaTable(path, storage_options=storage.delta_storage_options(path))
        except Exception as e:  # noqa: BLE001 - deltalake raises several types
            raise InputError([f"{path}: not a readable Delta table ({e})"]) from None
        return list(dt.file_uris())
    info = fs.get_file_info(root)
    if info.type == storage.FileType.NotFound:
        raise InputError([f"{path}: input not found"])
    if info.type == storage.FileType.File:
        return [path]
    if fs.get_file_info(storage.join(root, DELTA_LOG)).type == storage.FileType.Directory:
        raise InputError([f"{path}: a Delta table: its current version is --format delta (or leave --format out); "
                          f"as {fmt} its log and its removed files would be read too"])
    files = _data_files(fs, root, SUFFIXES[fmt])
    if not files:
        raise InputError([f"{path}: no {fmt} files found"])
    return [storage.rejoin(path, root, f) for f in files]


SUFFIXES = {"jsonl": (".jsonl", ".json", ".jsonl.gz", ".json.gz"), "parquet": (".parquet",)}
DELTA_LOG = "_delta_log"
PARQUET_MAGIC = b"PAR1"


def _data_files(fs, root: str, suffixes: tuple) -> list:
    """Files under ``root`` ending in ``suffixes``, sorted; none in or under a directory whose name
    starts with "_" or "." (Spark's and Delta's metadata: ``_delta_log/``, ``_SUCCESS``, ``.crc``)."""
    sel = storage.FileSelector(root, recursive=True)
    out = []
    for f in fs.get_file_info(sel):
        rel = os.path.relpath(f.path, root) if f.path.startswith(root) else f.path
        if f.type == storage.FileType.File and f.path.endswith(suffixes) \
                and not any(part.startswith(("_", ".")) for part in rel.replace("\\", "/").split("/")):
            out.append(f.path)
    return sorted(out)


def detect_format(path: str) -> tuple[str, str]:
    """(format, why) of an input given without --format: a directory holding ``_delta_log/`` is a
    Delta table; a file starting with Parquet's magic, or a directory of ``.parquet`` files, is
    Parquet; anything else is JSON lines (``.jsonl`` / ``.json``, ``.gz`` too)."""
    fs, root = storage.filesystem(path)
    info = fs.get_file_info(root)
    if info.type == storage.FileType.NotFound:
        raise InputError([f"--input {path}: no such file or directory"])
    if info.type == storage.FileType.Directory:
        if fs.get_file_info(storage.join(root, DELTA_LOG)).type == storage.FileType.Directory:
            return "delta", f"a directory with {DELTA_LOG}/"
        parquet, jsonl = _data_files(fs, root, SUFFIXES["parquet"]), _data_files(fs, root, SUFFIXES["jsonl"])
        if parquet and jsonl:
            raise InputError([f"--input {path}: holds both .parquet and JSON lines files: give --format "
                              f"(or one directory per format)"])
        if parquet:
            return "parquet", "a directory of .parquet files"
        return "jsonl", "a directory of .jsonl/.json files"
    with fs.open_input_file(root) as fh:
        head = fh.read(4)
    if head == PARQUET_MAGIC:
        return "parquet", "the file starts with Parquet's magic bytes"
    suffix = next((s for s in SUFFIXES["jsonl"] if path.endswith(s)), None)
    return "jsonl", f"a {suffix} file" if suffix else "not a Parquet file"


def check_format(path: str, fmt: str) -> None:
    """An explicit --format jsonl for a Parquet file is refused before its bytes are read as lines."""
    if fmt != "jsonl":
        return
    fs, root = storage.filesystem(path)
    if fs.get_file_info(root).type == storage.FileType.File:
        with fs.open_input_file(root) as fh:
            if fh.read(4) == PARQUET_MAGIC:
                raise InputError([f"--input {path}: a Parquet file, not JSON lines: --format parquet "
                                  f"(or leave --format out)"])


def plan_splits(path: str, fmt: str, target_splits: int = 0, split_bytes: int = 128 << 20) -> list[Split]:
    """Cut the input into ordered splits: at least ``target_splits`` when the input allows."""
    files = list_input_files(path, fmt)
    out: list[Split] = []
    if fmt == "jsonl":
        sizes = []
        for f in files:
            fs, p = storage.filesystem(f)
            sizes.append(fs.get_file_info(p).size)
        total = max(1, sum(sizes))
        for f, size in zip(files, sizes):
            if f.endswith(".gz") or size == 0:
                out.append(Split(len(out), f, fmt, 0, size, 1))
                continue
            parts = max(1, -(-size // split_bytes))
            if target_splits:
                parts = max(parts, round(target_splits * size / total) or 1)
            bounds = [size * k // parts for k in range(parts + 1)]
            for k in range(parts):
                if bounds[k] < bounds[k + 1]:
                    out.append(Split(len(out), f, fmt, bounds[k], bounds[k + 1], 1 if k == 0 else 0))
        return out
    groups = []
    for f in files:
        fs, p = storage.filesystem(f)
        with fs.open_input_file(p) as fh:
            try:
                md = pq.ParquetFile(fh).metadata
            except (pa.ArrowInvalid, OSError) as e:       # (--format parquet on another kind of file)
                raise InputError([f"{f}: not a readable Parquet file ({e})"], 1) from None
            groups.append([md.row_group(g).num_rows for g in range(md.num_row_groups)])
    total = max(1, sum(sum(g) for g in groups))
    for f, group_rows in zip(files, groups):
        nrows = sum(group_rows)
        if nrows == 0:
            continue
        parts = max(1, -(-nrows // PARQUET_SPLIT_ROWS))
        if target_splits:
            parts = max(parts, round(target_splits * nrows / total) or 1)
        bounds = _parquet_bounds(nrows, min(parts, nrows), group_rows)
        for k in range(len(bounds) - 1):
            out.append(Split(len(out), f, "parquet", bounds[k], bounds[k + 1]))
    return out


# Rows of a Parquet split at most (about: a split is whole row groups when they fit). An encode
# task holds its split decoded, its canonical form and per-message arrays, ~2 KB a message of
# 256-byte bodies: two tasks of 300k rows and the processes around them stay under 3 GB.
PARQUET_SPLIT_ROWS = 300_000


def _parquet_bounds(nrows: int, parts: int, group_rows: list) -> list:
    """Row bounds of ``parts`` splits (or a few more): at row-group boundaries when no group is
    much larger than a split, so a split decodes only its own groups (a bound inside a group
    decodes the group twice, once for each split holding part of it); else even row ranges."""
    size = -(-nrows // parts)
    if not group_rows or max(group_rows) > size + size // 4:
        return [nrows * k // parts for k in range(parts + 1)]
    bounds, row = [0], 0
    for g in group_rows:
        if row > bounds[-1] and row + g - bounds[-1] > size:
            bounds.append(row)
        row += g
    bounds.append(nrows)
    return bounds


# ---------------------------------------------------------------------------- reading
def _read_range(path: str, start: int, end: int) -> bytes:
    fs, p = storage.filesystem(path)
    with fs.open_input_file(p) as fh:
        fh.seek(start)
        return fh.read(end - start)


def _jsonl_block(split: Split) -> tuple[bytes, int]:
    """Whole lines of the split: those that start in [start, end). Returns (bytes, skipped)."""
    if split.path.endswith(".gz"):
        return gzip.decompress(_read_range(split.path, 0, split.end)), 0
    fs, p = storage.filesystem(split.path)
    size = fs.get_file_info(p).size
    with fs.open_input_file(p) as fh:
        begin = split.start
        if begin > 0:
            # A line belongs to the split its first byte is in: skip the partial line.
            fh.seek(begin - 1)
            probe = b""
            while True:
                chunk = fh.read(1 << 16)
                if not chunk:
                    return b"", 0
                nl = chunk.find(b"\n")
                if nl >= 0:
                    begin = begin - 1 + len(probe) + nl + 1
                    break
                probe += chunk
        if begin >= split.end:
            return b"", 0
        fh.seek(begin)
        data = fh.read(split.end - begin)
        if data and not data.endswith(b"\n") and split.end < size:
            rest = io.BytesIO()
            while True:
                chunk = fh.read(1 << 16)
                if not chunk:
                    break
                nl = chunk.find(b"\n")
                if nl >= 0:
                    rest.write(chunk[:nl + 1])
                    break
                rest.write(chunk)
            data += rest.getvalue()
        return data, begin


def b64decode_column(arr: pa.Array, label) -> pa.Array:
    """Vectorized base64 decoding of a whole string column (every value is a whole 4-char group
    sequence, so the concatenated values decode in one pass)."""
    arr = as_large_string(arr)
    data, off = string_buffers(arr)
    off = off - off[0]
    data = data[int(string_buffers(arr)[1][0]):][: int(off[-1])] if len(off) else data
    lens = np.diff(off)
    lut = np.full(256, 255, np.uint8)
    for i, ch in enumerate(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"):
        lut[ch] = i
    lut[ord("=")] = 0
    vals = lut[data]
    bad_rows = set()
    if (lens % 4).any():
        bad_rows |= set(np.flatnonzero(lens % 4).tolist())
    if (vals == 255).any():
        pos = np.flatnonzero(vals == 255)
        bad_rows |= set((np.searchsorted(off, pos, side="right") - 1).tolist())
    # '=' only as the last one or two characters of a value
    eq = data == ord("=")
    if eq.any():
        pos = np.flatnonzero(eq)
        row = np.searchsorted(off, pos, side="right") - 1
        okpos = (pos >= off[row + 1] - 2)
        bad_rows |= set(row[~okpos].tolist())
        # "xy=z": padding must run to the end of the value
        second = okpos & (pos == off[row + 1] - 2) & (data[np.minimum(pos + 1, len(data) - 1)] != ord("="))
        bad_rows |= set(row[second].tolist())
    if bad_rows:
        rows = sorted(bad_rows)
        raise InputError([f"{label(r)}: field 'body_b64': not valid base64" for r in rows[:20]], len(rows))
    pad = np.zeros(len(lens), np.int64)
    nz = lens > 0
    last = off[1:] - 1
    pad[nz] = (data[last[nz]] == ord("=")).astype(np.int64) + (data[last[nz] - 1] == ord("=")).astype(np.int64)
    q = vals.reshape(-1, 4).astype(np.uint32) if len(vals) else np.zeros((0, 4), np.uint32)
    word = (q[:, 0] << 18) | (q[:, 1] << 12) | (q[:, 2] << 6) | q[:, 3]
    raw: np.ndarray = np.empty((len(word), 3), np.uint8)
    raw[:, 0] = word >> 16
    raw[:, 1] = (word >> 8) & 0xFF
    raw[:, 2] = word & 0xFF
    raw = raw.reshape(-1)
    out_start = off[:-1] // 4 * 3
    out_len = lens // 4 * 3 - pad
    vals_out, off_out = kernels.gather_slices(raw, out_start, out_len)
    result = binary_from_numpy(vals_out, off_out)
    if arr.null_count:
        result = pc.if_else(arr.is_valid(), result, pa.scalar(None, pa.large_binary()))
    return result


def _properties_to_string(props: pa.Array, given: pa.Array | None, label) -> pa.Array:
    """Ordered properties (pairs / struct list / map) -> properties string; check the given one."""
    n = len(props)
    props = single_array(props)
    typ = props.type
    if pa.types.is_map(typ):
        # map<string,string> -> list<struct<name,value>>: entry order kept, slicing honoured
        # (MapArray.keys/.items ignore the array offset).
        props = props.cast(pa.list_(pa.struct([("name", typ.key_type), ("value", typ.item_type)])))
        typ = props.type
    problems = []
    if pa.types.is_null(typ):
        built = None
    else:
        lists = props.fill_null(pa.scalar([], typ)) if props.null_count else props
        offsets = numeric_values(lists.offsets).astype(np.int64)
        offsets = offsets - offsets[0]
        flat = pc.list_flatten(lists)
        if pa.types.is_struct(flat.type):
            names, values = flat.field("name"), flat.field("value")
        else:  # list<list<string>> pairs
            pair_len = pc.list_value_length(flat).to_numpy(zero_copy_only=False)
            badpair = np.flatnonzero(pair_len != 2)
            parent = np.repeat(np.arange(n), np.diff(offsets))
            for r in sorted(set(parent[badpair].tolist()))[:20]:
                problems.append(f"{label(r)}: field 'properties': every entry must be a [name, value] pair")
            if problems:
                raise InputError(problems)
            names = pc.list_element(flat, 0)
            values = pc.list_element(flat, 1)
        names = as_large_string(names)
        values = as_large_string(values)
        built, flags = join_pairs(names, values, offsets)
        problems = _pair_problems(names, values, flags, np.repeat(np.arange(n), np.diff(offsets)), label)
        if problems:
            raise InputError(problems)
    if given is None or (isinstance(given, (pa.Array, pa.ChunkedArray)) and given.null_count == len(given)):
        return built if built is not None else pa.array([""] * n, pa.large_string())
    given = as_large_string(given)
    if built is None:
        return given.fill_null("")
    # Agree: the same string, or the same without the final U+0002 (stored verbatim either way).
    same = pc.equal(built, given)
    trimmed = pc.equal(pc.utf8_slice_codeunits(built, 0, -1), given)
    ends = pc.ends_with(built, PROPERTY_SEP)
    agree = pc.or_(same, pc.and_(trimmed, ends))
    agree = pc.or_(pc.fill_null(agree, False), given.is_null()).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(~agree)
    if len(bad):
        raise InputError([f"{label(int(r))}: field 'properties_string': does not agree with 'properties'"
                          for r in bad[:20]], len(bad))
    return pc.coalesce(given, built)


def _pair_problems(names: pa.Array, values: pa.Array, flags: np.ndarray, parent: np.ndarray, label) -> list:
    """Null names and values, separators inside them, empty names (``join_pairs`` flags): at most
    10 rows of each kind, in this order."""
    problems = []
    name_ok = valid_mask(names)
    for field_name, valid, seps in (("name", name_ok, ((PAIR_NAME_SOH, "\x01"), (PAIR_NAME_STX, "\x02"))),
                                    ("value", valid_mask(values), ((PAIR_VALUE_STX, "\x02"),))):
        for r in sorted(set(parent[~valid].tolist()))[:10]:
            problems.append(f"{label(r)}: field 'properties': property {field_name} is null")
        for bit, ch in seps:
            for r in sorted(set(parent[valid & ((flags & bit) != 0)].tolist()))[:10]:
                problems.append(f"{label(r)}: field 'properties': property {field_name} contains "
                                f"U+{ord(ch):04X}, which separates properties in the stored string")
    for r in sorted(set(parent[name_ok & ((flags & PAIR_NAME_EMPTY) != 0)].tolist()))[:10]:
        problems.append(f"{label(r)}: field 'properties': empty property name")
    return problems


def _castable(one: pa.Array, typ) -> bool:
    try:
        one.cast(typ)
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


def _text_body_rows(raw: pa.Table) -> np.ndarray | None:
    """JSON lines: the rows that give their body as text in ``body`` (no ``body_b64``), as
    ``_text_bodies`` takes it; None when no row does."""
    if "body" not in raw.column_names or raw.column("body").null_count == raw.num_rows:
        return None
    b64 = raw.column("body_b64") if "body_b64" in raw.column_names else pa.nulls(raw.num_rows)
    return np.asarray(pc.and_(pc.is_null(b64), pc.is_valid(raw.column("body"))))


def _text_bodies(decoded: pa.Array, raw: pa.Table, label, problems: list) -> pa.Array:
    """JSON lines: a row without ``body_b64`` may give its body as UTF-8 text in ``body``; a row
    with neither is a problem naming both fields."""
    if "body" in raw.column_names:
        text = single_array(raw.column("body"))
        if text.null_count < len(text):
            decoded = pc.if_else(pc.is_null(decoded), text.cast(pa.large_binary()), decoded)
    if decoded.null_count:
        for r in np.flatnonzero(np.asarray(pc.is_null(decoded)))[:20]:
            problems.append(f"{label(int(r))}: field 'body' / 'body_b64': missing (the body as UTF-8 text in "
                            "'body', or base64-encoded in 'body_b64')")
    return decoded


def _times_from_text(src: pa.Array, name: str, label, problems: list) -> pa.Array:
    """A time column given as text (Parquet, Delta, a DataFrame): ISO-8601 with a zone, cast in one
    pass; only if that fails, value by value (``format.times``: epoch ms, a date, no zone = UTC),
    each bad value a problem."""
    try:
        return pc.cast(src, pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    from ..format.times import TIME_FORMS, time_ms
    out, bad = [], []
    for r, v in enumerate(src.to_pylist()):
        try:
            out.append(None if v is None else time_ms(v))
        except ValueError:
            out.append(None)
            bad.append(r)
    for r in bad[:10]:
        problems.append(f"{label(r)}: field '{name}': expected {TIME_FORMS}, got {src[r].as_py()!r}")
    if len(bad) > 10:
        problems.append(f"... field '{name}': {len(bad) - 10} more row(s) with the same problem")
    return pa.array(out, pa.int64())


def to_canonical(raw: pa.Table, label, body_field: str) -> pa.Table:
    """Raw input columns -> MESSAGE_SCHEMA (types checked, properties serialized)."""
    raw = _wide_dictionaries(raw)
    n = raw.num_rows
    cols = {}
    problems: list[str] = []
    for field in MESSAGE_SCHEMA:
        name = field.name
        if name == "body":
            if body_field == "body_b64":
                src = raw.column("body_b64") if "body_b64" in raw.column_names else pa.nulls(n, pa.large_string())
                cols[name] = _text_bodies(b64decode_column(single_array(src), label), raw, label, problems)
            else:
                src = raw.column("body") if "body" in raw.column_names else pa.nulls(n, pa.large_binary())
                cols[name] = as_large_binary(src)
            continue
        if name == "properties_string":
            props = raw.column("properties") if "properties" in raw.column_names else pa.nulls(n)
            given = raw.column("properties_string") if "properties_string" in raw.column_names else None
            cols[name] = _properties_to_string(props, given, label)
            continue
        if name not in raw.column_names:
            cols[name] = pa.nulls(n, field.type)
            continue
        src = raw.column(name)
        src = single_array(src)
        if name in DICTIONARY_FIELDS and pa.types.is_dictionary(src.type) and _is_text(src.type.value_type):
            cols[name] = src.cast(TEXT_DICTIONARY) if src.type != TEXT_DICTIONARY else src
            continue
        if name in ("store_timestamp", "born_timestamp") and \
                (pa.types.is_string(src.type) or pa.types.is_large_string(src.type)):
            cols[name] = _times_from_text(src, name, label, problems)
            continue
        try:
            if pa.types.is_integer(field.type) and pa.types.is_integer(src.type) and field.type == pa.int32():
                v = numeric_values(src)
                valid = valid_mask(src)
                vi = np.where(valid, v if v.dtype.kind in "iu" else 0, 0).astype(np.int64)
                out_of_range = valid & ((vi > 2**31 - 1) | (vi < -2**31))
                for r in np.flatnonzero(out_of_range)[:10]:
                    problems.append(f"{label(int(r))}: field '{name}': {vi[r]} does not fit a 32-bit int")
            # safe cast: a fractional or out-of-range double must not be truncated or wrapped silently
            cols[name] = src.cast(field.type) if src.type != field.type else src
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            if not any(f"field '{name}'" in p for p in problems):      # not already reported above
                rows = [r for r in range(len(src)) if not _castable(src.slice(r, 1), field.type)][:10] or [0]
                for r in rows:
                    problems.append(f"{label(r)}: field '{name}': cannot convert {src.type} "
                                    f"value {src[r].as_py()!r} to {field.type} ({e})")
    if problems:
        raise InputError(problems)
    return pa.table(cols, schema=message_schema({name: col.type for name, col in cols.items()}))


def _wide_dictionaries(raw: pa.Table) -> pa.Table:
    """``raw`` with its dictionary columns of narrow indices (a Parquet file's stored Arrow type,
    e.g. int8) widened to int32: a split of several row groups holds one dictionary per group,
    and joining them into one array needs room for every group's values."""
    for k, f in enumerate(raw.schema):
        if pa.types.is_dictionary(f.type) and f.type.index_type.bit_width < 32:
            raw = raw.set_column(k, f.name, raw.column(k).cast(pa.dictionary(pa.int32(), f.type.value_type)))
    return raw


def _is_text(typ) -> bool:
    return pa.types.is_string(typ) or pa.types.is_large_string(typ)


class JsonLabel:
    """How problem lines name the rows of a JSON lines split: ``label(i)`` its file and line, and
    ``body_field(i)`` the field the line gave its body in (``body`` as UTF-8 text, else
    ``body_b64``), so a refusal of the body names the field the user wrote."""

    def __init__(self, name: Callable[[int], str]):
        self._name = name
        self.text_rows: np.ndarray | None = None      # True: the row's body came from 'body'

    def __call__(self, i: int) -> str:
        return self._name(i)

    def body_field(self, i: int) -> str:
        return "body" if self.text_rows is not None and bool(self.text_rows[i]) else "body_b64"


def read_split(split: Split) -> tuple[pa.Table, Callable[[int], str]]:
    """Read one split into the canonical table; returns (table, label function for errors: a
    ``JsonLabel`` for JSON lines)."""
    if split.fmt == "jsonl":
        data, begin = _jsonl_block(split)
        base_name, line0, k = split.path, split.first_line, split.index

        def line_of(i: int) -> str:
            # The split's first line number is known only once earlier splits are counted:
            # without it the driver rewrites "line +i@split" with resolve_line_labels.
            return f"{base_name} line {line0 + i}" if line0 else f"{base_name} line +{i}@{k}"
        lines = JsonLabel(line_of)
        if not data.strip():
            return MESSAGE_SCHEMA.empty_table(), lines
        try:
            raw = pajson.read_json(io.BytesIO(data), read_options=pajson.ReadOptions(block_size=max(1 << 20, len(data) + 1)),
                                   parse_options=pajson.ParseOptions(explicit_schema=JSONL_SCHEMA,
                                                                     unexpected_field_behavior="ignore",
                                                                     newlines_in_values=False))
        except pa.ArrowInvalid:
            # A row the vectorized reader cannot convert (or an ISO-8601 time, properties as an
            # object): the split's lines one by one, every bad row named (ingest.jsonrows).
            from .jsonrows import read_rows
            raw = read_rows(data, JSONL_SCHEMA, lines)
        lines.text_rows = _text_body_rows(raw)
        try:
            return to_canonical(raw, lines, "body_b64"), lines
        except InputError as e:
            e.rows = raw.num_rows
            raise
    fs, p = storage.filesystem(split.path)
    # A local file is memory-mapped: Arrow then decodes straight from the page cache. Read
    # through a file handle, every column chunk is first copied into a fresh buffer (measured:
    # ~80k page faults and 0.3-0.7 CPU-s in the kernel per 350 MB split, against 3k and 0.02).
    opener = (lambda: pa.memory_map(p)) if storage.is_local(split.path) else (lambda: fs.open_input_file(p))
    with opener() as fh:
        pf = pq.ParquetFile(fh)
        md = pf.metadata
        groups, row0, first = [], 0, None
        for g in range(md.num_row_groups):
            gr = md.row_group(g).num_rows
            if row0 + gr > split.start and row0 < split.end:
                groups.append(g)
                if first is None:
                    first = row0
            row0 += gr
        names = [n for n in pf.schema_arrow.names if n in MESSAGE_SCHEMA.names or n == "properties"]
        # The topics and hosts as dictionaries: Arrow keeps the column chunk's dictionary instead
        # of building a string per row, and prepare takes the distinct values from it.
        texts = [n for n in DICTIONARY_FIELDS if n in names and _is_text(pf.schema_arrow.field(n).type)]
        if texts:
            pf = pq.ParquetFile(fh, metadata=md, read_dictionary=texts)
        # One thread: a task owns one core (spark.task.cpus), and Arrow's pool on top of it costs
        # 3-4x the CPU of a single-threaded read of the same row groups (measured, 2 cores).
        raw = pf.read_row_groups(groups, columns=names, use_threads=False) if groups \
            else pf.schema_arrow.empty_table()
    raw = raw.slice(split.start - (first or 0), split.end - split.start)
    label = lambda i, b=split.path, s=split.start: f"{b} row {s + i}"  # noqa: E731
    return to_canonical(raw, label, "body"), label


_RELATIVE_LINE = re.compile(r" line \+(\d+)@(\d+)")


def resolve_line_labels(problems: list, splits: list, rows_by_split: dict) -> list:
    """Turn "line +i@k" (row i of split k) into absolute line numbers of the split's file."""
    def first_line(k: int) -> int | None:
        sp = splits[k]
        n = 1
        for other in splits[:k]:
            if other.path == sp.path:
                rows = rows_by_split.get(other.index)
                if rows is None:
                    return None
                n += rows
        return n

    def fix(m):
        i, k = int(m.group(1)), int(m.group(2))
        base = first_line(k)
        return f" line {base + i}" if base is not None else f" record {i + 1} of input split {k}"
    return [_RELATIVE_LINE.sub(fix, p) for p in problems]


def jsonl_to_table(path: str) -> pa.Table:
    """Read a whole golden-format JSON lines file (tests, tools)."""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as fh:
        data = fh.read()
    raw = pajson.read_json(io.BytesIO(data), read_options=pajson.ReadOptions(block_size=len(data) + 1),
                           parse_options=pajson.ParseOptions(explicit_schema=JSONL_SCHEMA,
                                                             unexpected_field_behavior="ignore"))
    return to_canonical(raw, lambda i: f"{path} line {i + 1}", "body_b64")


def canonical_to_parquet_input(table: pa.Table) -> pa.Table:
    """The Parquet input layout (body binary, properties as list<struct<name,value>>)."""
    props = single_array(table.column("properties_string"))
    segs = pc.split_pattern(props, PROPERTY_SEP)
    # Drop the empty tail segment after a final separator.
    flat = pc.list_flatten(segs)
    parent = pc.list_parent_indices(segs).to_numpy()
    keep = pc.binary_length(flat).to_numpy(zero_copy_only=False) > 0
    kv = pc.split_pattern(flat.filter(pa.array(keep)), PROPERTY_NAME_VALUE_SEP, max_splits=1)
    names = pc.list_element(kv, 0)
    values = second_or_empty(kv)
    counts = np.bincount(parent[keep], minlength=len(props))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    struct = pa.StructArray.from_arrays([names.cast(pa.string()), values.cast(pa.string())], ["name", "value"])
    plist = pa.ListArray.from_arrays(pa.array(offsets), struct)
    cols = {n: table.column(n) for n in MESSAGE_SCHEMA.names if n != "properties_string"}
    cols["properties"] = plist
    cols["properties_string"] = table.column("properties_string")
    return pa.table(cols)


def read_all(path: str, fmt: str) -> pa.Table:
    """Every message of an input, in input order (small inputs, tests)."""
    tables = [_decoded(read_split(s)[0]) for s in plan_splits(path, fmt)]
    return pa.concat_tables(tables) if tables else MESSAGE_SCHEMA.empty_table()


def _decoded(table: pa.Table) -> pa.Table:
    """The canonical table with its dictionary columns decoded: exactly MESSAGE_SCHEMA."""
    return table.cast(MESSAGE_SCHEMA)


def split_from_dict(d: dict) -> Split:
    return Split(**d)
