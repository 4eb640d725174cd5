"""What a store's consume-queue files, index files and checkpoint must hold, from its CommitLog alone
(the broker's dispatch, docs/FORMAT.md §2-§4, replayed in bulk): the expected side of ``repair``.

* ``dispatch_segment`` (one task per segment, in Spark or on a thread): the records of one segment
  (the compiled walk, ``codec.messages.record_starts``; the fields, ``decode_valid_records``
  without bodies) and what the dispatch derives from each (``codec.messages.dispatch_of_records``:
  consume-queue eligibility, tagsCode with the delay rule, every index key's hash in dispatch
  order). The walk stops where a broker's recovery stops: a BLANK, a zero size, an unknown magic
  or a record whose parts do not fit inside it.
* ``Dispatch``: the segments' results joined in commitlog order (topics by name across segments).
* ``expected_queues``: per (topic, queue id, file) the units, placed by queue offset
  (``consumequeue``'s layout); the units below a queue's first derivable offset (their records
  are gone with expired segments) are unknown here, and ``repair`` keeps what the file holds there.
* ``expected_index``: the index files in creation order, each an ``ingest.indexfile.IndexFileBuilder``
  filled by the compiled ``putKey`` replay; a file holds ``maxIndexNum - 1`` entries, a new file
  inherits the previous one's end values, and the message dispatched after a file filled up
  creates one more (possibly empty) file.
* ``expected_checkpoint``: store time of the last record, of the last record with a queue unit,
  the end time of the last index file that was rolled over.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from ..codec import messages as codec
from ..format import checkpoint as ckpt, consumequeue, indexfile
from ..format.config import StoreConfig
from ..ingest.indexfile import IndexFileBuilder
from ..io import storage
from ..verify.access import FileData

__all__ = ["dispatch_segment", "Dispatch", "join_dispatch", "ExpectedQueueFile", "expected_queues",
           "expected_index", "expected_checkpoint"]


def dispatch_segment(store: storage.Store, rel: str, base: int, cfg: StoreConfig) -> dict:
    """The records of one commitlog segment and what the dispatch derives from each (arrays in
    commitlog order; ``topics``: the segment's distinct topic names, ``topic`` indexes them)."""
    fd = FileData(store, rel)
    end = min(fd.size or 0, cfg.mappedFileSizeCommitLog)
    starts, stop, reason = codec.record_starts(fd.buf, 0, end)
    table, ok = codec.decode_valid_records(fd.buf, base, starts, body=False)
    cut = len(starts) if ok.all() else int(np.argmin(ok))
    if cut < len(starts):                        # a damaged record: the data ends before it
        stop, reason = int(starts[cut]), 3
        table = table.slice(0, cut)
    cq, tags, key_msg, key_hash = codec.dispatch_of_records(table, cfg)
    tenc = pc.dictionary_encode(table["topic"]).combine_chunks()
    return {"rel": rel, "base": base, "stop": int(stop), "reason": int(reason), "n": table.num_rows,
            "phys": table["commitlog_offset"].to_numpy(), "size": table["store_size"].to_numpy(),
            "topics": tenc.dictionary.to_pylist(), "topic": tenc.indices.to_numpy(zero_copy_only=False),
            "queue_id": table["queue_id"].to_numpy(), "queue_offset": table["queue_offset"].to_numpy(),
            "cq": np.asarray(cq, bool), "tags": tags, "store_ts": table["store_timestamp"].to_numpy(),
            "key_msg": np.asarray(key_msg, np.int64), "key_hash": np.asarray(key_hash, np.int32)}


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
    tags: np.ndarray
    store_ts: np.ndarray
    key_msg: np.ndarray          # message (row) of every index entry, in dispatch order
    key_hash: np.ndarray
    segments: list               # (rel, base, records, stop, reason) per segment


def join_dispatch(parts: list) -> Dispatch:
    """The segments' ``dispatch_segment`` results (in commitlog order) as one ``Dispatch``."""
    topics: dict = {}
    cols = {k: [] for k in ("topic", "phys", "size", "queue_id", "queue_offset", "cq", "tags", "store_ts",
                            "key_msg", "key_hash")}
    row0 = 0
    for p in parts:
        remap = np.array([topics.setdefault(t, len(topics)) for t in p["topics"]], np.int64)
        cols["topic"].append(remap[p["topic"]] if len(remap) else np.zeros(0, np.int64))
        for k in ("phys", "size", "queue_id", "queue_offset", "cq", "tags", "store_ts", "key_hash"):
            cols[k].append(p[k])
        cols["key_msg"].append(p["key_msg"] + row0)
        row0 += p["n"]
    dtypes = {"topic": np.int64, "phys": np.int64, "size": np.int32, "queue_id": np.int32,
              "queue_offset": np.int64, "cq": bool, "tags": np.int64, "store_ts": np.int64, "key_msg": np.int64,
              "key_hash": np.int32}
    arrays = {k: (np.concatenate(v).astype(dtypes[k], copy=False) if v else np.zeros(0, dtypes[k]))
              for k, v in cols.items()}
    segs = [(p["rel"], p["base"], p["n"], p["stop"], p["reason"]) for p in parts]
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


def expected_checkpoint(d: Dispatch, index_files: list | None, keep: ckpt.Checkpoint | None = None) -> ckpt.Checkpoint:
    """The checkpoint after the dispatch of every record; the HA fields (master flushed offset,
    confirm offset) are the ones ``keep`` holds when they lie inside the commitlog, else 0, and so
    is indexMsgTimestamp when the index files are not derivable (``index_files`` None)."""
    physic = int(d.store_ts[-1]) if len(d.store_ts) else 0
    cq = np.flatnonzero(d.cq)
    logics = int(d.store_ts[cq[-1]]) if len(cq) else 0
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
    return ckpt.Checkpoint(physic, logics, index_ts, master, confirm)
