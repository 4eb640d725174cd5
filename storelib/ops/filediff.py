"""What differs between a file on disk and the bytes it should hold (``ops.repair``'s comparison):
its state (``missing``, ``truncated``, ``differing`` or ``ok``) and, for a differing one, what lies
at the first differing byte, named as the file's layout names it (a consume-queue unit, an index
file's header field, slot or entry, a checkpoint field) with what it holds and should hold."""
from __future__ import annotations

import numpy as np

from ..format import checkpoint as ckpt, consumequeue, indexfile
from ..format.config import StoreConfig

__all__ = ["judge", "name_unit", "index_namer", "name_checkpoint"]


def _first_diff(have: np.ndarray, want: np.ndarray) -> int | None:
    n = min(len(have), len(want))
    d = np.flatnonzero(have[:n] != want[:n])
    return int(d[0]) if len(d) else None


def judge(fd, want: np.ndarray, file_size: int, name_at) -> tuple:
    """(state, detail) of a file against its expected valid bytes ``want`` (zeros after, up to
    ``file_size``); ``name_at(offset, have, want)`` names what lies at a differing byte."""
    if not fd.exists:
        return "missing", f"should be {file_size} bytes"
    d = _first_diff(fd.buf, want)
    if d is not None:
        return "differing", name_at(d, fd.buf, want)
    nz = fd.first_nonzero(len(want), file_size)
    if nz is not None:
        return "differing", name_at(nz, fd.buf, np.zeros(nz + 64, np.uint8) if len(want) <= nz else want)
    if fd.size < file_size:
        intact = "all data present" if fd.size >= len(want) else f"data ends at byte {fd.size} of {len(want)}"
        return "truncated", f"{fd.size} of {file_size} bytes ({intact})"
    if fd.size > file_size:
        return "differing", f"{fd.size} bytes, longer than the file size {file_size}"
    return "ok", ""


def _unit_text(buf: np.ndarray, u: int) -> str:
    raw = bytes(buf[u * consumequeue.UNIT_SIZE:(u + 1) * consumequeue.UNIT_SIZE])
    if len(raw) < consumequeue.UNIT_SIZE:
        return "(past the end)"
    p, s, t = consumequeue.parse_unit(raw)
    return f"(phys {p}, size {s}, tags {t})"


def name_unit(d: int, have: np.ndarray, want: np.ndarray) -> str:
    u = d // consumequeue.UNIT_SIZE
    return f"unit {u} (byte {d}) is {_unit_text(have, u)}, should be {_unit_text(want, u)}"


def index_namer(cfg: StoreConfig):
    ent_at = indexfile.entries_offset(cfg)
    fields = ["begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
              "index_count"]

    def name(d: int, have: np.ndarray, want: np.ndarray) -> str:
        if d < indexfile.HEADER_SIZE:
            h_have = indexfile.IndexHeader.parse(bytes(have[:indexfile.HEADER_SIZE]).ljust(indexfile.HEADER_SIZE, b"\0"))
            h_want = indexfile.IndexHeader.parse(bytes(want[:indexfile.HEADER_SIZE]).ljust(indexfile.HEADER_SIZE, b"\0"))
            f = fields[min(5, d // 8 if d < 32 else 4 + (d - 32) // 4)]
            return f"header {f} is {getattr(h_have, f)}, should be {getattr(h_want, f)}"
        if d < ent_at:
            s = (d - indexfile.HEADER_SIZE) // indexfile.SLOT_SIZE
            at = indexfile.slot_offset(s)

            def slot(b):
                return indexfile.parse_slot(bytes(b[at:at + 4])) if len(b) >= at + 4 else 0
            return f"slot {s} is {slot(have)}, should be {slot(want)}"
        p = (d - ent_at) // indexfile.ENTRY_SIZE
        at = ent_at + p * indexfile.ENTRY_SIZE

        def entry(b):
            raw = bytes(b[at:at + indexfile.ENTRY_SIZE])
            if len(raw) < indexfile.ENTRY_SIZE:
                return "(none)"
            h, ph, td, prev = indexfile.parse_entry(raw)
            return f"(hash {h}, phys {ph}, timeDiff {td}, prevPos {prev})"
        return f"entry {p} is {entry(have)}, should be {entry(want)}"
    return name


def name_checkpoint(d: int, have: np.ndarray, want: np.ndarray) -> str:
    names = ["physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp", "masterFlushedOffset",
             "confirmPhyOffset"]
    if d >= ckpt.LAYOUT_SIZE:
        return f"byte {d} is not zero"
    a = ckpt.Checkpoint.from_bytes(bytes(have[:ckpt.LAYOUT_SIZE]).ljust(ckpt.LAYOUT_SIZE, b"\0"))
    b = ckpt.Checkpoint.from_bytes(bytes(want[:ckpt.LAYOUT_SIZE]))
    k = d // 8
    return f"{names[k]} is {list(a.to_dict().values())[k]}, should be {list(b.to_dict().values())[k]}"
