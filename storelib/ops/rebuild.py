"""What a store's consume-queue files, index files and checkpoint must hold, from its CommitLog alone
(the broker's dispatch, docs/FORMAT.md §2-§4, replayed in bulk): the expected side of ``repair``.

* ``dispatch_segment`` (one task per segment, in Spark or here; a segment's records in pieces on
  threads): the records of one segment
  (the compiled walk, ``codec.messages.record_starts``; the fixed fields, ``kernels.record_fields``,
  and the topics and properties gathered in one pass, nothing else decoded) and what the dispatch
  derives from each (``codec.messages.dispatch_of_records``:
  consume-queue eligibility, tagsCode with the delay rule, every index key's hash in dispatch
  order). The walk stops where a broker's recovery stops: a BLANK, a zero size, an unknown magic,
  a record whose parts do not fit inside it or whose body's crc32 is not its BODYCRC
  (``checkCRCOnRecover``, on by default).
* ``Dispatch``: the segments' results joined in commitlog order (topics by name across segments).
* ``expected_queues``: per (topic, queue id, file) the units, placed by queue offset
  (``consumequeue``'s layout); the units below a queue's first derivable offset (their records
  are gone with expired segments) are unknown here, and ``repair`` keeps what the file holds there.
* ``expected_index``: the index files in creation order, each an ``ingest.indexfile.IndexFileBuilder``
  filled by the compiled ``putKey`` replay; a file holds ``maxIndexNum - 1`` entries, a new file
  inherits the previous one's end values, and the message dispatched after a file filled up
  creates one more (possibly empty) file.
* ``expected_checkpoint``: store time of the last put that waited for its flush (ingest's rule,
  ``format.checkpoint.physic_msg_timestamp``), of the last record with a queue unit, the end time
  of the last index file that was rolled over; in the 5.5 line also the commitlog offset of
  the last record with a queue unit.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..codec import messages as codec
from ..compute import crc32, kernels
from ..compute.arrays import binary_from_numpy
from ..format import checkpoint as ckpt, consumequeue, indexfile
from ..format.config import StoreConfig
from ..ingest.indexfile import IndexFileBuilder
from ..io import storage
from ..verify.access import FileData

__all__ = ["file_data", "dispatch_segment", "dispatch_range", "Dispatch", "join_dispatch", "ExpectedQueueFile",
           "expected_queues", "expected_index", "expected_checkpoint"]


RANGE_RECORDS = 1 << 18          # records of a segment dispatched as one piece (pieces run on threads)


def file_data(store: storage.Store, rel: str) -> FileData:
    """``FileData`` of a store file as readers see it: a file a committed batch still publishes
    (``Store.map_patched``: its in-place patch not yet applied) is read through its mapping."""
    if rel in getattr(store, "assembled", {}):
        return FileData(cast(storage.Store, _Mapped(store)), rel)     # (reads through the mapping)
    return FileData(store, rel)


class _Mapped:
    """The store seen through its mappings only (no memory map of the file on disk)."""
    os_paths = False

    def __init__(self, store: storage.Store):
        self._store = store

    def size(self, rel: str):
        return self._store.size(rel)

    def path(self, rel: str) -> str:
        return self._store.path(rel)

    def read(self, rel: str, offset: int = 0, length: int | None = None) -> bytes:
        return self._store.read(rel, offset, length)


def dispatch_segment(store: storage.Store, rel: str, base: int, cfg: StoreConfig, threads: int = 1,
                     valid: int | None = None) -> list:
    """The records of one commitlog segment and what the dispatch derives from each: pieces of
    at most ``RANGE_RECORDS`` records in commitlog order (on ``threads`` threads), each a dict of
    arrays (``topics``: the piece's distinct topic names, ``topic`` indexes them). ``valid``: the
    segment's committed bytes (a manifest row's): nothing past them is read."""
    fd = file_data(store, rel)
    end = min(fd.size or 0, cfg.mappedFileSizeCommitLog, cfg.mappedFileSizeCommitLog if valid is None else valid)
    fd.populate(0, end)
    starts, stop, reason = codec.record_starts(fd.buf, 0, end)
    ranges = [(a, min(len(starts), a + RANGE_RECORDS)) for a in range(0, len(starts), RANGE_RECORDS)] or [(0, 0)]

    def piece(r):
        return dispatch_range(fd.buf, np.asarray(starts[r[0]:r[1]], np.int64), cfg)
    if threads > 1 and len(ranges) > 1:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            parts = list(pool.map(piece, ranges))
    else:
        parts = [piece(r) for r in ranges]
    out = []
    for (a, _), p in zip(ranges, parts):
        out.append(p)
        if p["cut"] is not None:                   # a damaged record: the data ends before it
            stop, reason = int(starts[a + p["cut"]]), 3
            break
    for p in out:
        p.update(rel=rel, base=base, stop=int(stop), reason=int(reason))
    return out


def dispatch_range(buf: np.ndarray, starts: np.ndarray, cfg: StoreConfig, fields: np.ndarray | None = None) -> dict:
    """The dispatch facts of the records at ``starts`` in ``buf`` (``cut``: the first damaged one);
    ``fields``: their ``kernels.record_fields``, when the caller has them already."""
    f = kernels.record_fields(buf, starts) if fields is None else fields
    ok = f[kernels.F_OK] != 0
    if ok.any():               # a body whose crc32 is not its BODYCRC ends the data (checkCRCOnRecover)
        lo = np.where(ok, f[kernels.F_BODY_POS], 0)
        crc = crc32.crc32_slices(buf, lo, lo + np.where(ok, f[kernels.F_BODY_LEN], 0)).astype(np.int64) & 0x7FFFFFFF
        ok &= crc == (f[kernels.F_BODYCRC].astype(np.int64) & 0x7FFFFFFF)
    bad = np.flatnonzero(~ok)
    cut = int(bad[0]) if len(bad) else None
    if cut is not None:
        f = f[:, :cut]
    (tv, to), (pv, po) = kernels.gather_many(buf, f, [kernels.F_TOPIC_POS, kernels.F_PROPS_POS],
                                             [kernels.F_TOPIC_LEN, kernels.F_PROPS_LEN])
    table = pa.table({"topic": _text(tv, to), "properties_string": _text(pv, po),
                      "store_timestamp": pa.array(f[kernels.F_STORETS], pa.int64()),
                      "sys_flag": pa.array(f[kernels.F_SYSFLAG].astype(np.int32), pa.int32())})
    cq, tags, key_msg, key_hash, waits = codec.dispatch_of_records(table, cfg)
    tenc = pc.dictionary_encode(table["topic"].combine_chunks())    # (a chunked one fails without records)
    return {"cut": cut, "n": table.num_rows,
            "phys": f[kernels.F_PHYS].copy(), "size": f[kernels.F_SIZE].astype(np.int32),
            "topics": tenc.dictionary.to_pylist(), "topic": tenc.indices.to_numpy(zero_copy_only=False),
            "queue_id": f[kernels.F_QUEUEID].astype(np.int32), "queue_offset": f[kernels.F_QUEUEOFFSET].copy(),
            "cq": np.asarray(cq, bool), "waits": np.asarray(waits, bool), "tags": tags,
            "store_ts": f[kernels.F_STORETS].copy(),
            "key_msg": np.asarray(key_msg, np.int64), "key_hash": np.asarray(key_hash, np.int32)}


def _text(values: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """UTF-8 strings from gathered bytes; bytes that are not UTF-8 (a damaged record) become U+FFFD
    as Java's ``new String(bytes, UTF_8)`` makes them."""
    raw = binary_from_numpy(values, offsets)
    try:
        return raw.cast(pa.large_string())
    except pa.ArrowInvalid:
        return pa.array([v.decode("utf-8", "replace") for v in raw.to_pylist()], pa.large_string())


@dataclass
class Dispatch:
    """Every record of the commitlog in order, with its dispatch facts (one array each)."""
    topics: list
    topic: np.ndarray
    phys: np.ndarray
    size: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    cq: np.ndarray
    waits: np.ndarray            # the put waited for its flush (sets the checkpoint's physicMsgTimestamp)
    tags: np.ndarray
    store_ts: np.ndarray
    key_msg: np.ndarray          # message (row) of every index entry, in dispatch order
    key_hash: np.ndarray
    segments: list               # (rel, base, records, stop, reason) per segment


def join_dispatch(parts: list) -> Dispatch:
    """The pieces of the segments' ``dispatch_segment`` results (in commitlog order) as one ``Dispatch``."""
    topics: dict = {}
    cols: dict[str, list] = {k: [] for k in ("topic", "phys", "size", "queue_id", "queue_offset", "cq", "waits", "tags", "store_ts",
                            "key_msg", "key_hash")}
    row0 = 0
    for p in parts:
        remap = np.array([topics.setdefault(t, len(topics)) for t in p["topics"]], np.int64)
        cols["topic"].append(remap[p["topic"]] if len(remap) else np.zeros(0, np.int64))
        for k in ("phys", "size", "queue_id", "queue_offset", "cq", "waits", "tags", "store_ts", "key_hash"):
            cols[k].append(p[k])
        cols["key_msg"].append(p["key_msg"] + row0)
        row0 += p["n"]
    dtypes = {"topic": np.int64, "phys": np.int64, "size": np.int32, "queue_id": np.int32,
              "queue_offset": np.int64, "cq": bool, "waits": bool, "tags": np.int64, "store_ts": np.int64, "key_msg": np.int64,
              "key_hash": np.int32}
    arrays = {k: (np.concatenate(v).astype(dtypes[k], copy=False) if v else np.zeros(0, dtypes[k]))
              for k, v in cols.items()}
    segs: list = []
    for p in parts:                                # a segment's pieces: one entry, records summed
        if segs and segs[-1][0] == p["rel"]:
            segs[-1] = (p["rel"], p["base"], segs[-1][2] + p["n"], p["stop"], p["reason"])
        else:
            segs.append((p["rel"], p["base"], p["n"], p["stop"], p["reason"]))
    return Dispatch(topics=list(topics), segments=segs, **arrays)


@dataclass
class ExpectedQueueFile:
    """One consume-queue file as the commitlog says it must be: ``units`` (bytes of its units up
    to the last one, zeros after), ``known_from`` (units before it are not derivable: their
    records are gone), ``holes`` (units inside the derivable range no record fills)."""
    rel: str
    topic: str
    queue_id: int
    base_unit: int
    units: np.ndarray            # uint8, n_units * UNIT_SIZE
    known_from: int
    holes: int

    @property
    def n_units(self) -> int:
        return len(self.units) // consumequeue.UNIT_SIZE


def expected_queues(d: Dispatch, cfg: StoreConfig) -> dict:
    """rel -> ``ExpectedQueueFile`` for every queue file the NOT/COMMIT records fill."""
    m = np.flatnonzero(d.cq)
    t, q, o = d.topic[m], d.queue_id[m], d.queue_offset[m]
    order = np.lexsort((o, q, t))
    m, t, q, o = m[order], t[order], q[order], o[order]
    per_file = cfg.cq_units_per_file
    f = o // per_file
    cut = np.flatnonzero((np.diff(t) != 0) | (np.diff(q) != 0) | (np.diff(f) != 0)) + 1
    out = {}
    for a, b in zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(m)]])):   # one step per file
        if a == b:
            continue
        base_unit = int(f[a]) * per_file
        rows, local = m[a:b], o[a:b] - base_unit
        n = int(local[-1]) + 1
        units = np.zeros(n, consumequeue.UNIT_DTYPE)
        units["phys"][local] = d.phys[rows]
        units["size"][local] = d.size[rows]
        units["tags"][local] = d.tags[rows]
        first = int(local[0])
        holes = (n - first) - len(np.unique(local))
        topic, qid = d.topics[int(t[a])], int(q[a])
        rel = consumequeue.rel_path(topic, qid, base_unit)
        out[rel] = ExpectedQueueFile(rel, topic, qid, base_unit, units.view(np.uint8), first, holes)
    return out


def expected_index(d: Dispatch, cfg: StoreConfig) -> list:
    """The index files in creation order (``IndexFileBuilder`` each); [] without records."""
    n_msgs = len(d.phys)
    if n_msgs == 0:
        return []
    per_file = cfg.maxIndexNum - 1
    phys, ts = d.phys[d.key_msg], d.store_ts[d.key_msg]
    total = len(d.key_hash)
    files = [IndexFileBuilder(cfg, indexfile.IndexHeader())]
    placed = 0
    while True:
        take = min(per_file, total - placed)
        files[-1].put_keys(d.key_hash[placed:placed + take], phys[placed:placed + take], ts[placed:placed + take])
        placed += take
        full = files[-1].room() <= 0
        more = placed < total or (full and total > 0 and int(d.key_msg[-1]) < n_msgs - 1)
        if not (full and more):
            break
        h = files[-1].header
        files.append(IndexFileBuilder(cfg, indexfile.IndexHeader.inherited(h.end_phy_offset, h.end_timestamp)))
    return files


def expected_checkpoint(d: Dispatch, index_files: list | None, keep: ckpt.Checkpoint | None = None,
                        line_5_5: bool = False) -> ckpt.Checkpoint:
    """The checkpoint after the dispatch of every record: physicMsgTimestamp by ingest's rule
    (``checkpoint.physic_msg_timestamp``: the last put that waited; without one, the value
    ``keep`` holds, whose put may have gone with expired segments); the HA fields (master flushed
    offset, confirm offset) are the ones ``keep`` holds when they lie inside the commitlog, else 0,
    and so is indexMsgTimestamp when the index files are not derivable (``index_files`` None). The
    5.5 line (``line_5_5``) has the sixth value, the commitlog offset of the last record with a
    consume-queue unit, and its own logicsMsgTimestamp rule (``checkpoint.logics_msg_timestamp``)."""
    physic = ckpt.physic_msg_timestamp(d.store_ts, d.waits, keep.physic_msg_timestamp if keep is not None else 0) or 0
    cq = np.flatnonzero(d.cq)
    logics = ckpt.logics_msg_timestamp(int(d.store_ts[cq[-1]]) if len(cq) else None, 0, line_5_5)
    index_ts = 0
    for prev in (index_files or [])[:-1]:         # each roll records the full file's end time
        if prev.header.end_timestamp > 0:
            index_ts = prev.header.end_timestamp
    if index_files is None and keep is not None:
        index_ts = keep.index_msg_timestamp
    end = int(d.phys[-1]) + int(d.size[-1]) if len(d.phys) else 0
    master = confirm = 0
    if keep is not None:
        master = keep.master_flushed_offset if 0 <= keep.master_flushed_offset <= end else 0
        confirm = keep.confirm_phy_offset if 0 <= keep.confirm_phy_offset <= end else 0
    lpo = int(d.phys[cq[-1]]) if line_5_5 and len(cq) else 0
    return ckpt.Checkpoint(physic, logics, index_ts, master, confirm, lpo)
