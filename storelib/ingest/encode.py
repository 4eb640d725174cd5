"""Stage 1 of an ingest, encode: a task per two input splits (``encode_splits``: one split's
records go to the disk while the next is read), and what the driver makes of them.

For each split (``encode_split``) the task reads it, fills broker defaults (storelib.ingest.topics: queue ids
by round robin / sharding key, store time), validates, encodes every record once (with
placeholder placement) and stages two files under the attempt's staging directory:

* ``split-<index>-<attempt>.records``: the encoded records, back to back;
* ``split-<index>-<attempt>.facts``: the split's per-message facts (sizes, queue keys, round-robin
  ranks, tags codes, store times, index entries and key hashes), read back by the stage-3 tasks
  (``load_split_facts`` / ``final_queues``, storelib.ingest.write);
* ``split-<index>-<attempt>.plan``: what the planner needs of a split that straddles a segment
  boundary (sizes, index entries, queue codes and per-chunk checkpoints, storelib.ingest.split_facts),
  read by the driver a bounded chunk at a time (``read_detail``).

It returns a small summary; the driver checks them (``check_scans``: bad input stops here,
before any store file is written), places the round-robin rows (``round_robin_starts``) and
turns them into the sequencer's ``SplitSummary`` (``split_summaries``).

Also here: the batch's default store time (``default_store_timestamp``) and ``reencode_rows``,
which encodes rows again exactly as ``encode_split`` staged them (for a stage-3 attempt that finds
them already released). What identifies the input: storelib.ingest.identity.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import cast
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from ..codec import messages as codec
from . import inputs, sequencer, split_facts, split_staging, staged_arrays, topics as topics_mod
from ..format import checkpoint as ckpt, config as format_config
from ..io import direct_io, storage
from ..errors import IngestError, InputError
from ..runtime import warmup
from ..runtime.faults import fault
from .context import EncodeContext
from ..compute.arrays import binary_lengths, valid_mask
from .task_pipeline import attempt_tag, in_order, profiled, RUN_ROWS, writer_threads

__all__ = [
    "default_store_timestamp", "encode_split", "encode_splits", "SPLITS_PER_TASK", "encode_table", "reencode_rows", "facts_file", "load_split_facts",
    "final_queues", "read_detail", "check_scans", "round_robin_starts", "split_summaries",
]


# ---------------------------------------------------------------------------- the input
def default_store_timestamp(splits: list) -> int | None:
    """The batch's store time for rows without store_timestamp and born_timestamp: the newest
    modification time of the input files, in ms (fixed for a given input, so reruns agree)."""
    best: int | None = None
    for f in sorted({s.path for s in splits}):
        fs, p = storage.filesystem(f)
        info = fs.get_file_info(p)
        if info.mtime_ns is not None:
            ms = info.mtime_ns // 1_000_000
            best = ms if best is None else max(best, ms)
    return best


# ---------------------------------------------------------------------------- the task
def _queue_keys(pm: codec.PreparedMessages):
    """(codes, keys): per message an int code of (topic, queue_id), and the distinct keys."""
    tidx = pm.topic_index.astype(np.int64)          # prepare's dictionary of the topics
    ntopics = len(pm.topic_dictionary)
    width = int(pm.queue_id.max()) + 1 if pm.n else 0
    if 0 < width * ntopics <= 4 * pm.n + 4096:
        # Few (topic, queue) pairs with small queue ids: a lookup table over topic * width + queue
        # (np.unique's return_inverse sorts every message: ~0.1 s per 500k).
        dense = tidx * width + pm.queue_id
        seen = np.flatnonzero(np.bincount(dense, minlength=width * ntopics))
        lut = np.zeros(width * ntopics, np.int64)
        lut[seen] = np.arange(len(seen))
        codes = lut[dense]
        uniq = (seen // width) * (2**32) + seen % width
    else:
        uniq, codes = np.unique(tidx * (2**32) + pm.queue_id.astype(np.int64), return_inverse=True)
    topics = pm.topic_dictionary.to_pylist()
    keys = [(topics[int(u // 2**32)], int(u % 2**32)) for u in uniq]
    return codes.astype(np.int32), keys


def encode_split(ctx: EncodeContext, split_dict: dict, stager: ThreadPoolExecutor | None = None) -> dict | Future:
    """Stage 1 task: read one split, fill broker defaults, validate, encode; stage its records
    and its per-message facts; return its summary for the sequencer (with ``stager``: a Future of
    it, the records encoded and staged on that thread: ``encode_splits``).

    The records are encoded before they are placed: QUEUEID (of round-robin rows), QUEUEOFFSET
    and PHYSICALOFFSET are placeholders the segment writer patches (``kernels.patch_placement``),
    and with enabledAppendPropCRC the CRC digits are filled in there too. Every other byte is
    final, so the input is read and encoded once.
    """
    warmup.task_started()
    fault("encode-split")
    split = inputs.split_from_dict(split_dict)
    with profiled("encode"):
        try:
            table, label = inputs.read_split(split)
        except InputError as e:
            return {"index": split.index, "errors": e.problems, "error_total": e.total, "rows": getattr(e, "rows", None)}
        body_field = label.body_field if isinstance(label, inputs.JsonLabel) else "body"
        out = _encode_table(ctx, split.index, table, label, body_field, stager)
        del table
    # The freed heap stays mapped for the worker's next split, which needs as much again: handing
    # it back (allocator.release) and faulting it in afresh cost ~0.1 s of each task (a fifth
    # of the encode stage, measured at 10M); the write tasks release it before they start.
    return out


# Splits an encode task takes in turn (fewer when the stage would otherwise leave a slot idle).
SPLITS_PER_TASK = 2


def encode_splits(ctx: EncodeContext, split_dicts: list) -> list:
    """Stage 1 task of consecutive splits: each split's records are encoded and staged on a thread
    while the next split is read and prepared, so the task's core does not sit idle while the
    direct writes of its records reach the disk (docs/PERFORMANCE.md, "the encode stage's waits").
    One split stages at a time; the summaries come back once every split is staged."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rocketlake-stager") as stager:
        out = [encode_split(ctx, d, stager) for d in split_dicts]
        return [r.result() if isinstance(r, Future) else r for r in out]


def load_kernels() -> None:
    """Run a two-message split through what an encode task runs (the input's conversion, the
    defaults, ``prepare``, the queue keys, ``encode``), in memory: every compiled kernel the task
    calls is then loaded from numba's cache into this process. The worker daemon calls it before it
    forks (``ROCKETLAKE_DAEMON_PRELOAD``, storelib.runtime.pydaemon), so its workers inherit the
    loaded kernels instead of each loading them in its first task (~0.4 CPU-s a worker)."""
    pairs = pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())]))
    props = [[{"name": "TAGS", "value": "a"}, {"name": "KEYS", "value": "k1 k2"},
              {"name": "UNIQ_KEY", "value": "u"}, {"name": "WAIT", "value": "true"}], None]
    raw = pa.table({"topic": ["t", "t"], "queue_id": pa.array([0, None], pa.int32()),
                    "store_timestamp": pa.array([1, 2], pa.int64()),
                    "body": pa.array([b"x", b"y"], pa.large_binary()), "properties": pa.array(props, pairs)})
    label = lambda i: f"row {i}"  # noqa: E731
    cfg = format_config.StoreConfig()
    filled = topics_mod.fill(inputs.to_canonical(raw, label, "body"), topics_mod.Topics.default(), None, None,
                             None, label)
    pm = codec.prepare(filled.table, cfg, label)
    _queue_keys(pm)
    unplaced = np.zeros(pm.n, np.int64)
    codec.encode(pm, unplaced, unplaced, cfg.enabledAppendPropCRC, rows=(0, pm.n), fill_crc=False,
                 out=np.empty(int(pm.sizes.sum()), np.uint8))


EMPTY_BODY_SHOWN = 5


def empty_body_problems(table, label, field: str | Callable[[int], str] = "body") -> tuple[list, int]:
    """The rows whose body is empty (the first few, then a count): RocketMQ's producer refuses them
    (``Validators.checkMessage``: "the message body length is zero"), and a proxy serving such a
    store fails every receive. ``allow_empty_body`` (``--allow-empty-body``) writes them anyway.
    ``field``: the input's body field, or row -> the field that row gave its body in (JSON lines:
    ``inputs.JsonLabel.body_field``)."""
    body = table.column("body")
    empty = (binary_lengths(body) == 0) & valid_mask(body)
    rows = np.flatnonzero(empty)
    name = field if callable(field) else (lambda _r: field)
    out = [f"{label(int(r))}: field '{name(int(r))}': empty body (RocketMQ's producers refuse a message whose "
           f"body length is zero; --allow-empty-body writes it anyway)" for r in rows[:EMPTY_BODY_SHOWN]]
    if len(rows) > EMPTY_BODY_SHOWN:
        out.append(f"... {len(rows) - EMPTY_BODY_SHOWN} more row(s) with an empty body")
    return out, len(rows)


def encode_table(ctx: EncodeContext, index: int, table, label, body_field: str = "body") -> dict:
    """Stage 1 for one split already read as a canonical table (codec.MESSAGE_SCHEMA): what
    ``encode_split`` does after reading (also the task of a DataFrame partition, storelib.ingest.frame).
    ``label(i)`` names row i in error messages, ``body_field`` the input's body field."""
    return cast(dict, _encode_table(ctx, index, table, label, body_field, None))


def _encode_table(ctx: EncodeContext, index: int, table, label, body_field: str | Callable[[int], str],
                  stager: ThreadPoolExecutor | None) -> dict | Future:
    """``encode_table``; with ``stager``, the records are encoded and staged, and the facts
    written, on that thread: a Future of the summary (a problem found before is a summary)."""
    cfg, tcfg = ctx.config, ctx.topics
    empty, n_empty = ([], 0) if ctx.allow_empty_body else empty_body_problems(table, label, body_field)
    try:
        filled = topics_mod.fill(table, tcfg, ctx.queue_by, None, ctx.default_store_ts, label)
        pm = codec.prepare(filled.table, cfg, label)
    except InputError as e:
        return {"index": index, "errors": empty + e.problems, "error_total": n_empty + e.total,
                "rows": table.num_rows}
    if empty:
        return {"index": index, "errors": empty, "error_total": n_empty, "rows": table.num_rows}
    codes, keys = _queue_keys(pm)
    rr = filled.rr_topic >= 0
    # Round-robin rows get their queue on the driver (it needs the counts of the splits before):
    # -2 marks them (NOT/COMMIT), -1 marks PREPARED/ROLLBACK rows (no queue offset).
    qcode = np.where(pm.cq_eligible, np.where(rr, -2, codes), -1).astype(np.int32)
    counts = np.bincount(qcode[qcode >= 0], minlength=len(keys))
    entries = pm.index_counts.astype(np.int32)
    store = split_staging.staging_store(ctx.local_staging, storage.Store(ctx.store))
    # Per attempt: a retried or speculative task never rewrites a file the driver may read.
    base = f"{ctx.staging}/splits/split-{index:06d}-{attempt_tag()}"
    records_path, meta_path, plan_path = base + ".records", base + ".facts", base + ".plan"
    runs = [(r0, min(pm.n, r0 + RUN_ROWS)) for r0 in range(0, pm.n, RUN_ROWS)]
    unplaced = np.zeros(pm.n, np.int64)
    ends = np.cumsum(pm.sizes, dtype=np.int64)
    threads = writer_threads()

    def run_chunk(r0: int, r1: int):
        # encoded where the direct write takes it from (direct_io.placed): no copy into its buffers
        pos = int(ends[r0 - 1]) if r0 else 0
        return direct_io.placed(int(ends[r1 - 1]) - pos, pos)

    def run_records(r0: int, r1: int, out):
        codec.encode(pm, unplaced, unplaced, cfg.enabledAppendPropCRC, rows=(r0, r1), fill_crc=False,
                     out=out.view(np.ndarray))
        return out

    # Chunks allocated on this thread, whose heap keeps them for the next run: a pool thread's
    # arena may map each afresh, every page faulted and zeroed (docs/PERFORMANCE.md, encode CPU).
    # Staged on a stager thread, all of the split's chunks are allocated here first.
    chunks = [run_chunk(r0, r1) for r0, r1 in runs] if stager is not None else None

    def encoded(pool):
        jobs = (functools.partial(run_records, r0, r1, chunks[k] if chunks is not None else run_chunk(r0, r1))
                for k, (r0, r1) in enumerate(runs))
        for j, records in enumerate(in_order(pool, jobs, threads + 1)):
            if j == len(runs) // 2:
                fault("mid-records-write")
            yield records

    def staged() -> dict:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            # read once, by a segment writer: around the page cache (storelib.io.direct_io)
            records_bytes = store.write_file(records_path, encoded(pool), cache=False)
        if chunks is not None:
            chunks.clear()
        store.write_file(meta_path, facts_file(
            {"sizes": pm.sizes.astype(np.int32), "qkey": qcode, "entries": entries, "queue_id": pm.queue_id,
             "rr_topic": filled.rr_topic, "rr_rank": filled.rr_rank, "tags": pm.tags_code, "ts": pm.store_timestamp,
             "imsg": pm.index_msg.astype(np.int32), "ihash": pm.index_hash},
            qkeys=keys, rr_topics=filled.rr_topics))
        store.write_file(plan_path, split_facts.planner_file(pm.sizes, entries, pcode, keys, filled.rr_topics,
                                                             rr_queue_nums))
        return dict(summary, records_bytes=records_bytes)

    rr_queue_nums = [tcfg.write_queue_nums(t) for t in filled.rr_topics]
    pcode = split_facts.planner_codes(qcode, len(keys), filled.rr_topic, filled.rr_rank, rr_queue_nums)
    summary = dict(_summary(tcfg, index, pm, filled, keys, counts, entries), meta_path=meta_path,
                   plan_path=plan_path, records_path=records_path)
    return stager.submit(staged) if stager is not None else staged()


def _summary(tcfg, index: int, pm: codec.PreparedMessages, filled, keys: list, counts: np.ndarray,
             entries: np.ndarray) -> dict:
    """What the driver learns of an encoded split (``check_scans``, ``split_summaries``), its
    staged files' paths and size aside."""
    with_entries = np.flatnonzero(entries > 0)
    cq_rows = np.flatnonzero(pm.cq_eligible)
    ts = pm.store_timestamp
    return {
        "index": index, "count": pm.n, "total_bytes": int(pm.sizes.sum()),
        "queue_counts": [[k[0], k[1], int(c)] for k, c in zip(keys, counts) if c],
        "rr_topics": filled.rr_topics, "rr_total": [filled.rr_total[t] for t in filled.rr_topics],
        "placed_topics": filled.placed,
        "rr_residues": topics_mod.residue_counts(tcfg, filled, pm.cq_eligible),
        "entries": int(entries.sum()),
        "last_entry_row": int(with_entries[-1]) if len(with_entries) else -1,
        "first_store_ts": int(ts[0]) if pm.n else None,
        "last_store_ts": int(ts[-1]) if pm.n else 0,
        "last_cq_store_ts": int(ts[cq_rows[-1]]) if len(cq_rows) else None,
        "last_wait_store_ts": ckpt.physic_msg_timestamp(ts, pm.waits, None),
        "min_store_ts": int(ts.min()) if pm.n else None,
        "max_store_ts": int(ts.max()) if pm.n else None,
    }


def reencode_rows(ctx: EncodeContext, si: int, r0: int, r1: int) -> np.ndarray:
    """Rows r0..r1 of split ``si`` encoded again from the input, exactly as ``encode_split``
    staged them (for an attempt that finds a split's staged records already deleted).

    A DataFrame's partition cannot be read again from inside a task (``ctx.splits`` holds no
    files): the attempt fails with IngestError and the batch with it, leaving the store as it was."""
    if si >= len(ctx.splits):
        raise IngestError(f"input split {si}: its staged records were already written and released by an "
                          f"earlier attempt of this task, and a DataFrame partition cannot be read again "
                          f"from a task; nothing was committed, rerun the ingest")
    split = inputs.split_from_dict(ctx.splits[si])
    table, label = inputs.read_split(split)
    filled = topics_mod.fill(table, ctx.topics, ctx.queue_by, None, ctx.default_store_ts, label)
    pm = codec.prepare(filled.table.slice(r0, r1 - r0), ctx.config, lambda i: label(r0 + i))
    unplaced = np.zeros(pm.n, np.int64)
    return codec.encode(pm, unplaced, unplaced, ctx.config.enabledAppendPropCRC, fill_crc=False)


# ---------------------------------------------------------------------------- staged facts
FACTS_KIND = "split facts"


def facts_file(arrays: dict, **values) -> list:
    """A split's staged facts (name -> array, and JSON ``values``) as the chunks of one file
    (storelib.ingest.staged_arrays). Read back by ``load_split_facts`` as views of the file's
    bytes: no archive, no per-member CRC, no copy (the write tasks read a split's facts once per
    file they place)."""
    return staged_arrays.file_chunks(FACTS_KIND, arrays, **values)


def load_split_facts(store: storage.Store, path: str) -> dict:
    """The facts ``facts_file`` staged at ``path``: name -> read-only array, and its values."""
    return staged_arrays.read_arrays(store, path, FACTS_KIND)


def final_queues(meta, rr_start: dict | None, tcfg: "topics_mod.Topics"):
    """(qcode, keys, queue_id) of a split once its round-robin rows are placed: queue =
    (the topic's position at the split start + rank) % writeQueueNums (storelib.ingest.topics)."""
    keys = [tuple(k) for k in meta["qkeys"]]
    qcode = meta["qkey"].astype(np.int32)
    queue_id = meta["queue_id"].astype(np.int32)
    rr_rows = np.flatnonzero(meta["rr_topic"] >= 0)
    if len(rr_rows):
        rr_topics = meta["rr_topics"]
        t = meta["rr_topic"][rr_rows].astype(np.int64)
        nq = np.asarray([tcfg.write_queue_nums(x) for x in rr_topics], np.int64)
        start = np.asarray([int((rr_start or {}).get(x, 0)) for x in rr_topics], np.int64)
        q = (start[t] + meta["rr_rank"][rr_rows]) % nq[t]
        queue_id[rr_rows] = q
        elig = qcode[rr_rows] == -2
        uniq, inv, width = _distinct_pairs(t[elig], q[elig], len(rr_topics), int(nq.max()))
        index_of = {k: i for i, k in enumerate(keys)}
        codes = []
        for u in uniq.tolist():            # one per round-robin topic/queue, not per message
            k = (rr_topics[u // width], u % width)
            if k not in index_of:
                index_of[k] = len(keys)
                keys.append(k)
            codes.append(index_of[k])
        qcode[rr_rows[elig]] = np.asarray(codes, np.int32)[inv]
    return qcode, keys, queue_id


def _distinct_pairs(t: np.ndarray, q: np.ndarray, ntopics: int, width: int) -> tuple:
    """(distinct t * width + q ascending, each row's index into them, width) for 0 <= q < width:
    a table over every pair when there are few (np.unique's return_inverse sorts every row)."""
    dense = t * width + q
    if ntopics * width <= 4 * len(dense) + 4096:
        present = np.flatnonzero(np.bincount(dense, minlength=ntopics * width))
        lut = np.zeros(ntopics * width, np.int64)
        lut[present] = np.arange(len(present))
        return present, lut[dense], width
    uniq, inv = np.unique(dense, return_inverse=True)
    return uniq, inv, width


def read_detail(store: storage.Store, plan_path: str, rr_start: dict | None = None) -> split_facts.ChunkedDetail:
    """The planner's view of a split that straddles a segment boundary: its staged planner file,
    read a chunk at a time (the driver's memory does not grow with the split)."""
    return split_facts.ChunkedDetail(store, plan_path, rr_start)


# ---------------------------------------------------------------------------- driver
def check_scans(scans: list, splits: list) -> None:
    """InputError with the problems every split found (lines labelled as in the input), if any."""
    problems, total = [], 0
    for r in scans:
        if "errors" in r:
            problems.extend(r["errors"])
            total += r["error_total"]
    if problems:
        rows = {r["index"]: r.get("count", r.get("rows")) for r in scans}
        raise InputError(inputs.resolve_line_labels(problems, splits, rows), total)


def split_summaries(scans: list, tcfg: "topics_mod.Topics", rr_starts: dict) -> list:
    """The sequencer's view of every split: its counts, with its round-robin rows' queues placed."""
    summaries = []
    for r in scans:
        qc = {(t, q): c for t, q, c in r["queue_counts"]}
        for k, c in topics_mod.rr_queue_counts(tcfg, r.get("rr_topics", []), r.get("rr_residues", []),
                                               rr_starts[r["index"]]).items():
            qc[k] = qc.get(k, 0) + c
        summaries.append(sequencer.SplitSummary(
            index=r["index"], count=r["count"], total_bytes=r["total_bytes"],
            queue_counts=qc, entries=r["entries"],
            last_entry_row=r["last_entry_row"], last_store_ts=r["last_store_ts"],
            last_cq_store_ts=r["last_cq_store_ts"], last_wait_store_ts=r.get("last_wait_store_ts"),
            min_store_ts=r["min_store_ts"],
            max_store_ts=r["max_store_ts"], first_store_ts=r["first_store_ts"]))
    return summaries


def round_robin_starts(scans: list, prev: dict) -> tuple[dict, dict]:
    """Per split, each round-robin topic's position at its first row; and the positions after."""
    pos = dict(prev)
    starts = {}
    for r in scans:
        starts[r["index"]] = {t: pos.get(t, 0) for t in r.get("rr_topics", [])}
        for t, c in zip(r.get("rr_topics", []), r.get("rr_total", [])):
            pos[t] = pos.get(t, 0) + c
    return starts, pos
