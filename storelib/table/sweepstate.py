"""The object sweep's state: what its last completed sweep read and kept, a hint that lets the
next sweep skip (``storelib.table.objsweep``).

``_rocketlake/sweep-state.json`` (``paths.SWEEP_STATE``; docs/FORMAT.md §11.8): one header line
``{"format": "rocketlake-sweep-state", "version": 1, "encoding": "zlib", "length": N, "sha256": hex}``,
then ``N`` bytes of zlib-compressed canonical JSON (sorted keys, no spaces), ``sha256`` theirs:

    {"data_files": [names of the manifest data files the sweep read or knew, sorted],
     "kept": {"<batch_id>/<attempt>": [the rest of each key under that attempt's prefix, sorted]}}

``kept``: every object of an attempt committed when that sweep read the checkpoints table that
its listing of ``_rocketlake/objects/`` held once it had deleted the unnamed ones; each is named
by a row of a data file of ``data_files``. It is written, one PUT (atomic), only by a sweep that
completed (every unnamed object deleted, nothing refused), under the caller's lease, after its
deletes (kill point ``before-sweep-state``): a kill before it leaves the previous state, or none.

A hint that can only make a sweep delete LESS, never more: a sweep that uses it (``objsweep``'s
skip) deletes nothing at all, and whatever else it finds (a state missing, unreadable, damaged,
of another format or version, or one that does not apply) it runs the full sweep, which never
reads this file. So a state forged or stale can at worst leave objects behind while it applies,
never cause a delete; the full sweep that runs once it does not apply deletes them.
"""
from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..format import paths
from ..io import storage

__all__ = ["FORMAT", "VERSION", "State", "read", "write", "encode", "decode"]

FORMAT = "rocketlake-sweep-state"
VERSION = 1
_PREFIX = paths.OBJECTS_DIR + "/"


@dataclass(frozen=True)
class State:
    """What a completed sweep read (``data_files``: names in the manifest table's directory) and
    kept (``kept``: object keys of committed attempts, each named by a row of those files)."""
    data_files: frozenset[str]
    kept: frozenset[str]


def _split(o: str) -> tuple[str, str] | None:
    """("<batch_id>/<attempt>", the rest) of an object key under an attempt's prefix (None: not one)."""
    parts = o[len(_PREFIX):].split("/", 2) if o.startswith(_PREFIX) else []
    return (f"{parts[0]}/{parts[1]}", parts[2]) if len(parts) == 3 and all(parts) else None


def encode(data_files: Iterable[str], kept: Iterable[str]) -> bytes:
    """The file's bytes for ``data_files`` and ``kept`` (keys not under an attempt's prefix are
    left out: the sweep never counts them as kept)."""
    grouped: dict[str, list[str]] = {}
    for o in kept:
        at = _split(o)
        if at is not None:
            grouped.setdefault(at[0], []).append(at[1])
    doc = {"data_files": sorted(set(data_files)), "kept": {k: sorted(v) for k, v in grouped.items()}}
    body = zlib.compress(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode(), 6)
    head = {"format": FORMAT, "version": VERSION, "encoding": "zlib", "length": len(body),
            "sha256": hashlib.sha256(body).hexdigest()}
    return json.dumps(head, sort_keys=True, separators=(",", ":")).encode() + b"\n" + body


def decode(data: bytes) -> State | None:
    """The state ``data`` holds; None when it is not exactly a state of this format and version
    whose body matches its header (damaged, cut short, forged carelessly, another layout)."""
    line, nl, body = data.partition(b"\n")
    try:
        head = json.loads(line) if nl else None
        if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("version") != VERSION or \
                head.get("encoding") != "zlib" or head.get("length") != len(body) or \
                head.get("sha256") != hashlib.sha256(body).hexdigest():
            return None
        doc = json.loads(zlib.decompress(body))
    except (ValueError, zlib.error):
        return None
    return _state(doc)


def _state(doc: Any) -> State | None:
    if not isinstance(doc, dict) or set(doc) != {"data_files", "kept"}:
        return None
    files, kept = doc["data_files"], doc["kept"]
    if not isinstance(files, list) or not all(isinstance(f, str) and f and "/" not in f for f in files) or \
            not isinstance(kept, dict):
        return None
    out: set[str] = set()
    for at, rests in kept.items():
        if len(at.split("/")) != 2 or not isinstance(rests, list) or not all(isinstance(r, str) and r for r in rests):
            return None
        out.update(f"{_PREFIX}{at}/{r}" for r in rests)
    if any(_split(o) is None for o in out):         # (an empty batch or attempt id)
        return None
    return State(frozenset(files), frozenset(out))


def read(store: storage.Store) -> State | None:
    """The store's state; None when there is none or it cannot be read or trusted (``decode``)."""
    try:
        data = store.read(paths.SWEEP_STATE)
    except (OSError, ValueError):              # missing (FileNotFoundError), unreadable, refused path
        return None
    return decode(data)


def write(store: storage.Store, data_files: Iterable[str], kept: Iterable[str]) -> None:
    """Write the state (object stores: one PUT, readers see the old state or the new one)."""
    store.write_file(paths.SWEEP_STATE, [encode(data_files, kept)])
