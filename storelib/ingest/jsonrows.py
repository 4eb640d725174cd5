"""JSON lines the vectorized reader could not take, read row by row: every bad row named, or the
rows in the reader's schema.

``inputs.read_split`` reads a split with pyarrow's JSON reader against ``inputs.JSONL_SCHEMA``;
it stops at the first row it cannot convert and says so in Arrow's words (``Column(/x) changed
from number to string``). Only then does this module read the split's lines one by one: each
bad line is a problem naming the file, line and field in the words of the input schema
(docs/DESIGN.md#input-schema), up to ``SHOWN`` of them and the count of the rest. Two forms
the reader's schema has no room for are accepted here: an ISO-8601 ``store_timestamp`` /
``born_timestamp`` (as ``--store-timestamp`` takes it) and ``properties`` as a JSON object
(its keys in the order written). A split without a bad row comes back as the table the reader
would have made, so everything after reading is the same code.
"""
from __future__ import annotations

import json

import pyarrow as pa

from ..errors import InputError
from ..format.times import TIME_FORMS, time_ms

__all__ = ["SHOWN", "read_rows"]

SHOWN = 20          # problems listed at most (as InputError shows them); the rest are counted

_INT_FIELDS = {"queue_id": "int32", "flag": "int32", "sys_flag": "int32", "reconsume_times": "int32",
               "prepared_transaction_offset": "int64"}
_TIME_FIELDS = ("store_timestamp", "born_timestamp")
_TEXT_FIELDS = ("topic", "born_host", "store_host", "body_b64", "properties_string", "body")


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), "null")


def _integer(value):
    """The integer a JSON value stands for (an integral number), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _row(obj: dict, schema: pa.Schema) -> tuple[dict, list]:
    """(the row in the reader's schema, [(field, what is wrong)])."""
    out, bad = {}, []
    for name in schema.names:
        if name not in obj or obj[name] is None:
            continue
        v = obj[name]
        if name in _INT_FIELDS:
            i = _integer(v)
            if i is None:
                bad.append((name, f"expected an integer ({_INT_FIELDS[name]}), got {_kind(v)} {_shown(v)}"))
            out[name] = i
        elif name in _TIME_FIELDS:
            i = _integer(v)
            if i is None and isinstance(v, str):
                try:
                    i = time_ms(v)
                except ValueError:
                    pass
            if i is None:
                bad.append((name, f"expected {TIME_FORMS}, got {_kind(v)} {_shown(v)}"))
            out[name] = i
        elif name == "properties":
            pairs = _pairs(v)
            if pairs is None:
                bad.append((name, "expected [name, value] pairs or an object of names to values (strings), "
                                  f"got {_shown(v)}"))
            out[name] = pairs
        elif name in _TEXT_FIELDS:
            if not isinstance(v, str):
                bad.append((name, f"expected a string, got {_kind(v)} {_shown(v)}"))
            out[name] = v if isinstance(v, str) else None
    return out, bad


def _pairs(v):
    """Properties as [[name, value], ...]: given so, or as an object (its key order kept)."""
    if isinstance(v, dict):
        v = list(v.items())
    elif not isinstance(v, list):
        return None
    pairs = []
    for p in v:
        # a pair's own problems (not two entries, a null name...) are the canonical step's
        if isinstance(p, (list, tuple)) and all(x is None or isinstance(x, str) for x in p):
            pairs.append(list(p))
        else:
            return None
    return pairs


def read_rows(data: bytes, schema: pa.Schema, label) -> pa.Table:
    """The split's lines (``data``) as a table of ``schema``, or InputError naming every bad row
    (``label(i)``: line i of the split, counted as the reader counts rows: blank lines skipped)."""
    rows: list[dict] = []
    problems: list[str] = []
    total = 0
    i = -1
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        i += 1
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            bad = [(None, f"invalid JSON ({getattr(e, 'msg', e)} at column {getattr(e, 'colno', '?')})")]
        else:
            if isinstance(obj, dict):
                row, bad = _row(obj, schema)
                rows.append(row)
            else:
                bad = [(None, f"expected a JSON object, got {_kind(obj)}")]
        for field, what in bad:
            total += 1
            if len(problems) < SHOWN:
                problems.append(f"{label(i)}: " + (f"field '{field}': " if field else "") + what)
    if total:
        if total > len(problems):
            problems.append(f"... {total - len(problems)} more problem(s) in these lines")
        err = InputError(problems, total)
        err.rows = i + 1        # the split's rows: later splits' line numbers count on from them
        raise err
    return pa.Table.from_pylist(rows, schema=schema)
