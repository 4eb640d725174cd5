"""Local stores: a batch continues committed files in place, as a broker does.

A batch that continues a file (the active commitlog segment, the last consume-queue file of a
queue, the last index file) does not rewrite it. Its write task stages a **patch**: the new
bytes and where they go (``[[file_pos, length, patch_pos, phase], ...]``), at most a segment's
new records, a queue's new units, or an index file's new entries, changed slot heads and header.
The patch's place and extents go into the file version's manifest row. The patches are applied
only at publish, after the switch (storelib.ingest.commit): until a batch is committed no byte of
a store file changes, so a batch that dies before its commit leaves nothing a reader, verify or
a RocketMQ broker started on the directory could see.

``apply_patches``, for every patch of a batch:

1. phase 0: bytes past the committed end (records, units, index entries), which no reader of an
   earlier snapshot reads; fsync;
2. phase 1: bytes a reader of an earlier snapshot may reach (index slot heads and header);
   fsync. Such a reader takes the index header from its manifest row, skips entries beyond its
   ``index_count`` and follows their previous-entry links, which lead back into its own entries
   (phase 0 made them durable before any slot head pointed at them).

A publish cut short is redone from the staged patches (the same bytes at the same places), and
readers of the committed batch read its continued files through them meanwhile
(``overlay_extents``). A broker started on the directory in between sees the records in
commitlog order up to wherever the publish had got: a prefix of what was committed.
"""
from __future__ import annotations

from typing import Any, Mapping, cast

import numpy as np

from ..format import indexfile
from ..format.filekinds import DETAIL_HEADER, DETAIL_PATCH, PATCH_PIECES, PATCH_STAGED, FileKind, json_column
from ..errors import CorruptStore
from ..format.paths import STAGING_DIR

__all__ = ["PHASE_APPEND", "PHASE_LINK", "stage_patch", "overlay_reader", "row_patch", "overlay_extents", "apply_patches",
           "trim_file", "index_head_as_of", "settle_slots", "slot_extents"]

PHASE_APPEND = 0        # past the committed end: invisible to readers of committed snapshots
PHASE_LINK = 1          # index slot heads and header: written once phase 0 is durable
_COPY = 64 << 20
_PAGE = 4096


def stage_patch(store, staged_rel: str, parts: list, durable: bool) -> list:
    """Write a patch file from ``parts`` ``[(file_pos, bytes, phase), ...]``; its extents."""
    extents, pos = [], 0
    for file_pos, data, phase in parts:
        n = memoryview(data).nbytes
        extents.append([int(file_pos), n, pos, phase])
        pos += n
    store.write_file(staged_rel, [p[1] for p in parts], None, durable=durable)
    return extents


def overlay_reader(read_committed, parts: list):
    """``read_at(pos, n)`` of a file as it will be once ``parts`` ``[(file_pos, bytes, phase)]``
    are applied over its committed bytes (for the new version's checksum)."""
    def read_at(pos: int, n: int) -> bytes:
        out = bytearray(n)
        gaps = [(pos, pos + n)]              # read only what no part covers (object stores pay per byte)
        for file_pos, data, _ in parts:
            lo, hi = file_pos, file_pos + memoryview(data).nbytes
            gaps = [g for a, b in gaps for g in ((a, min(b, lo)), (max(a, hi), b)) if g[1] > g[0]]
        for a, b in gaps:
            got = read_committed(a, b - a)
            out[a - pos:a - pos + len(got)] = got
        for file_pos, data, _ in parts:
            mv = memoryview(data).cast("B")
            a, b = max(pos, file_pos), min(pos + n, file_pos + len(mv))
            if a < b:
                out[a - pos:b - pos] = mv[a - file_pos:b - file_pos]
        return bytes(out)
    return read_at


def _detail(row: Mapping[str, Any]) -> Any:
    """A manifest row's parsed ``detail``: a typed row's own (``table.rows.ManifestRow``, parsed
    once), else the column parsed here by the same convention."""
    detail = getattr(row, "detail", None)
    return detail if isinstance(detail, Mapping) else json_column(row.get("detail"))


def row_patch(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The in-place patch a manifest row's file version is published with (``{"path", "staged",
    "extents"}``; the row's detail names its extents ``pieces``, so that ``"extents"`` there
    always means an object store's), or None; a staged path outside the staging directory is
    refused."""
    if f'"{DETAIL_PATCH}"' not in (row.get("detail") or ""):     # a cheap test on every row, before any parse
        return None
    try:
        p = _detail(row)[DETAIL_PATCH]
        staged, extents = p[PATCH_STAGED], [[int(x) for x in e] for e in p[PATCH_PIECES]]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptStore(row["path"], 0, f"manifest patch of batch {row.get('batch_id')!r}: {e}") from None
    if not isinstance(staged, str) or not staged.startswith(STAGING_DIR + "/"):
        raise CorruptStore(row["path"], 0, f"manifest patch of batch {row.get('batch_id')!r} is not staged under "
                                           f"{STAGING_DIR}/: {staged!r}")
    return {"path": row["path"], "staged": staged, "extents": extents}


def overlay_extents(rel: str, file_size: int, patch: dict) -> list:
    """Extents (storelib.io.fragments: ``[file_pos, length, object_rel, object_pos]``) of the file
    ``rel`` as it is once ``patch`` is applied: the patch's pieces from its staged file, the rest
    from the file itself."""
    pieces = sorted((e[0], e[1], e[2]) for e in patch["extents"] if e[1] > 0)
    out, pos = [], 0
    for file_pos, n, patch_pos in pieces:
        if file_pos > pos:
            out.append([pos, file_pos - pos, rel, pos])
        out.append([file_pos, n, patch["staged"], patch_pos])
        pos = max(pos, file_pos + n)
    if pos < file_size:
        out.append([pos, file_size - pos, rel, pos])
    return out


def apply_patches(store, patches: list, durable: bool, fault=None, check=None) -> None:
    """Apply staged patches ``[{"path", "staged", "extents"}]`` to their files: every phase-0
    extent of every file, fsync, then every phase-1 extent, fsync. ``check()`` between the two
    (the writer's lease, checked by the caller before the first: it raises once the writer may no
    longer touch the store, whose files a writer that took over may have continued since)."""
    for phase in (PHASE_APPEND, PHASE_LINK):
        if check is not None and phase == PHASE_LINK:
            check()
        touched = []
        for p in patches:
            ext = [e for e in p["extents"] if e[3] == phase]
            if not ext:
                continue
            for file_pos, length, patch_pos, _ in ext:
                for k in range(0, length, _COPY):
                    m = min(_COPY, length - k)
                    store.write_at(p["path"], [(file_pos + k, store.read_array(p["staged"], patch_pos + k, m))])
            touched.append(p["path"])
        if durable and touched:
            store.sync_files(touched)
        if fault and phase == PHASE_APPEND:
            fault("mid-apply")


def trim_file(store, row: dict, config, durable: bool = True) -> None:
    """Bring a file holding a later version (more records, units or entries; slot heads and a
    header a later batch wrote) back to the version ``row`` describes: slot heads walked back
    into the row's entries, everything past its valid bytes cut, its header written. Export and
    verify of an earlier snapshot run it on their own copy of the file."""
    rel, kind = row["path"], row["kind"]
    if kind == FileKind.INDEX:
        header = indexfile.IndexHeader(**_detail(row)[DETAIL_HEADER])
        slots = store.read_array(rel, indexfile.slot_offset(0), config.maxHashSlotNum * indexfile.SLOT_SIZE)
        before = indexfile.decode_slots(slots)
        after = settle_slots(store, rel, config, before, header.index_count)
        store.write_at(rel, slot_extents(after, np.flatnonzero(before != after)))
        store.cut_tail(rel, indexfile.entry_offset(header.index_count, config), row["file_size"])
        store.write_at(rel, [(0, header.to_bytes(config.line_4_9))])
    elif kind in (FileKind.COMMITLOG, FileKind.CONSUMEQUEUE):
        store.cut_tail(rel, row["valid_bytes"], row["file_size"])
    else:
        return
    if durable:
        store.sync_files([rel])


def index_head_as_of(store, row: dict, config) -> bytes:
    """The header and slot table of the index file version ``row`` describes, from a file that
    may hold a later version (slot heads walked back into the row's entries, its header)."""
    rel = row["path"]
    header = indexfile.IndexHeader(**_detail(row)[DETAIL_HEADER])
    slots = indexfile.decode_slots(store.read_array(rel, indexfile.slot_offset(0),
                                                    config.maxHashSlotNum * indexfile.SLOT_SIZE))
    settled = settle_slots(store, rel, config, slots, header.index_count)
    return header.to_bytes(config.line_4_9) + bytes(indexfile.encode_slots(settled))


def settle_slots(store, rel: str, config, slots: np.ndarray, index_count: int) -> np.ndarray:
    """Slot heads with every link to an entry at or past ``index_count`` (written by a batch that
    never committed) walked back along the previous-entry links into the committed entries."""
    slots = slots.astype(np.int64)
    bad = np.flatnonzero(slots >= index_count)
    if not len(bad):
        return slots.astype(np.int32)
    top = int(slots[bad].max())
    if top >= config.maxIndexNum:
        raise CorruptStore(rel, indexfile.slot_offset(0),
                           f"slot head {top} is past the file's {config.maxIndexNum} entries")
    lo = indexfile.entry_offset(index_count, config)
    prev = indexfile.decode_entries(store.read_array(rel, lo, (top + 1 - index_count) * indexfile.ENTRY_SIZE))["prev"]
    prev = prev.astype(np.int64)
    for _ in range(top + 1 - index_count + 1):       # every step moves each head to an older entry
        if not len(bad):
            break
        nxt = prev[slots[bad] - index_count]
        if (nxt >= slots[bad]).any():
            raise CorruptStore(rel, lo, "an uncommitted entry's previous-entry link does not lead back")
        slots[bad] = nxt
        bad = bad[slots[bad] >= index_count]
    return slots.astype(np.int32)


def slot_extents(slots: np.ndarray, changed: np.ndarray) -> list:
    """``(file_pos, bytes)`` runs that write the ``changed`` slots of ``slots``: whole 4 KiB
    pages of the slot table, consecutive pages in one run (the disk writes pages anyway; one
    write per run, not per slot)."""
    if not len(changed):
        return []
    lo_all, hi_all = indexfile.slot_offset(0), indexfile.slot_offset(len(slots))
    pages = np.unique(indexfile.slot_offset(cast(Any, np.asarray(changed, np.int64))) // _PAGE)   # (elementwise)
    breaks = np.flatnonzero(np.diff(pages) != 1) + 1
    out = []
    for run in np.split(pages, breaks):
        a = max(lo_all, int(run[0]) * _PAGE)
        b = min(hi_all, (int(run[-1]) + 1) * _PAGE)
        s0 = (a - lo_all) // indexfile.SLOT_SIZE
        s1 = -(-(b - lo_all) // indexfile.SLOT_SIZE)
        a = indexfile.slot_offset(s0)
        out.append((a, indexfile.encode_slots(slots[s0:s1])))
    return out
