"""Ingest: one batch of messages -> RocketMQ store files + one Delta commit.

Stages (Spark only schedules; executors read the input and write the files themselves):

0. lease     driver: ``_rocketlake/writer.lock`` (manifest.WriterLease): one writer per store; a
             second ingest fails at once with ConcurrentWriteError (exit 3) and touches nothing.
             Then: finish the publish of a committed batch a dead run left unfinished, and drop
             any staging a dead attempt left (never read).
1. scan      one task per input split: read, fill broker defaults (storelib.topics: queue ids by
             round robin / sharding key, store time), validate, compute record sizes, queue counts and
             index entry counts. Per-message sizes go to staging (read back by the driver only
             for splits that straddle a segment boundary). Bad input stops here, before any
             store file is written.
2. plan      driver: ``sequencer.plan_batch`` places every message (commitlog offsets, rolls,
             queue offsets, index positions) from the split summaries.
3. segments  one task per run of consecutive commitlog segments: re-read its pieces of the
             input, encode, write each whole segment file to staging; emit consume-queue units
             and index entries keyed by the file they belong to.
4. files     after a shuffle of those (small) records: one task per consume-queue / index file
             builds and stages the whole file.
5. commit    driver: checkpoint file, manifest rows, conditional Delta commits (the switch),
             then publish (staged -> final names) and remove the staging directory.

Every task attempt writes to its own staging path (``_rocketlake/staging/<batch>/<attempt>/files/
<stage-partition-attempt-uuid>/``) and returns it; only the driver's commit makes a file part of
the store, so task retries and speculative attempts cannot corrupt a file. A rerun of the same
batch id after a crash starts over from the committed state (or, if the commit happened, finishes
publishing), so the bytes are the same as an uninterrupted run.

Batches and readers. A batch appends: it continues the last commitlog segment, the last consume
queue file of every queue it touches and the last index file, by writing whole new versions of
those files (committed prefix + new data) and publishing them over the old names with an atomic
rename (local/HDFS; object stores replace the object in one PUT/COPY). Committed bytes never
change: the new version's first ``valid_bytes`` are the old version's. A reader of an earlier
snapshot therefore keeps working if it trusts only what its manifest rows say: ``valid_bytes``
of a segment / consume queue file and ``max_phy_offset`` of its checkpoint row. (An index file
republished by a later batch may hold entries and a header of that batch: readers of an older
snapshot take the header from the manifest row's ``detail`` and ignore entries whose physical
offset is at or beyond their ``max_phy_offset``.) Batch ids are idempotency keys: a committed
id with the same input fingerprint is a no-op ("already-committed", exit 0), with other input an
error. The default id is derived from the input's fingerprint (``auto-<sha256 prefix>``).
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import sys
import time
import uuid
import zlib
from dataclasses import asdict

import numpy as np
import pyarrow.compute as pc

from . import checkpoint as ckpt
from . import codec, commitlog, consumequeue, indexfile, inputs, manifest, sequencer, storage
from . import topics as topics_mod
from .codec import InputError
from .config import ConfigError, StoreConfig
from .faults import fault

log = logging.getLogger("rocketlake.ingest")


class IngestError(RuntimeError):
    pass


class AlreadyCommitted(Exception):
    """The batch id is committed with the same input: nothing to do."""


# ---------------------------------------------------------------------------- progress
class Progress:
    """Driver-side progress: stage lines, and while a Spark job runs a line every ``interval``
    seconds from a polling thread (``sc.statusTracker()``, no listener): tasks done of total,
    segments written (estimated from finished segment tasks) and msgs/s. The same thread renews
    the writer lease."""

    def __init__(self, quiet: bool = False, sc=None, interval: float = 5.0):
        self.t0 = time.time()
        self.quiet = quiet
        self.sc = sc
        self.interval = interval
        self.lease = None
        self._stage = None
        self._stage_t0 = 0.0
        self._stop = None
        self._thread = None

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(f"[rocketlake {time.time() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    def warn(self, msg: str) -> None:
        print(f"[rocketlake] warning: {msg}", file=sys.stderr, flush=True)

    def stage(self, name: str | None, tasks: int = 0, **info) -> None:
        """Start (name) or end (None) a Spark stage of the ingest; polling runs in between."""
        import threading
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
        self._stage = None
        if name is None:
            return
        self._stage = dict(info, name=name, tasks=tasks)
        self._stage_t0 = time.time()
        if self.sc is None or (self.quiet and self.lease is None):
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="rocketlake-progress", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        last_beat = time.time()
        while not self._stop.wait(min(self.interval, 5.0)):
            if self.lease is not None and time.time() - last_beat >= manifest.LEASE_RENEW_S:
                try:
                    self.lease.renew()
                except Exception as e:  # noqa: BLE001 - progress must never kill the job
                    self.warn(f"could not renew the writer lease: {e}")
                last_beat = time.time()
            if not self.quiet:
                try:
                    self.say(self.line())
                except Exception:  # noqa: BLE001
                    pass

    def line(self) -> str:
        st = self._stage or {}
        tracker = self.sc.statusTracker()
        done = total = 0
        stages = []
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is None:
                continue
            done += info.numCompletedTasks
            total += info.numTasks
            stages.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks "
                          f"({info.numActiveTasks} running)")
        el = time.time() - self._stage_t0
        text = f"{st.get('name')}: " + ("; ".join(stages) if stages else "between stages")
        if st.get("name") == "write" and st.get("segments"):
            # the first stage of the write job is the segment stage: its finished tasks
            seg_tasks = max(1, st["tasks"])
            ids = sorted(tracker.getActiveStageIds())
            first = tracker.getStageInfo(ids[0]) if ids else None
            if first is not None and first.numTasks == seg_tasks:
                frac = first.numCompletedTasks / seg_tasks
            else:
                frac = 1.0 if ids else 0.0
            segs = int(round(frac * st["segments"]))
            rate = st.get("messages", 0) * frac / el if el > 0 else 0
            text += f"; segments written ~{segs}/{st['segments']}, {rate:,.0f} msgs/s"
        return text + f" [{el:.0f}s]"


# ---------------------------------------------------------------------------- store state
def store_state(snap: manifest.Snapshot) -> sequencer.StoreState:
    if snap.batch is None:
        return sequencer.StoreState()
    b = snap.batch
    queue_next = {(q["topic"], q["queue_id"]): q["max_offset"] for q in (b["queue_offsets"] or [])}
    idx = snap.of_kind("index")
    tail = None
    if idx:
        last = idx[-1]
        header = json.loads(last["detail"])["header"]
        tail = sequencer.IndexTail(last["path"], header, header["index_count"] >= json.loads(b["config"])["maxIndexNum"])
    return sequencer.StoreState(next_phys=b["max_phy_offset"], queue_next=queue_next, index_tail=tail,
                                index_files=len(idx), messages=b["total_messages"])


def check_store_root(store: storage.Store, snap: manifest.Snapshot) -> None:
    """A store without our tables must not already hold RocketMQ files (import those instead)."""
    if snap.batch is not None:
        return
    for d in ("commitlog", "consumequeue", "index"):
        if store.list_files(d):
            raise IngestError(f"{store.uri} already holds RocketMQ files ({d}/) but no rocketlake manifest: "
                              f"adopt it with `jobs/ingest.py --store {store.uri} --from-store {store.uri}`")


def check_config(snap: manifest.Snapshot, config: StoreConfig) -> None:
    if snap.batch is None:
        return
    stored = json.loads(snap.batch["config"])
    mine = config.file_shaping()
    diff = {k: (stored.get(k), v) for k, v in mine.items() if stored.get(k) != v}
    if diff:
        raise ConfigError("configuration differs from the one this store was written with: "
                          + ", ".join(f"{k} store={a!r} given={b!r}" for k, (a, b) in diff.items()))


def input_fingerprint(path: str, fmt: str, splits: list) -> str:
    """Identity of the input: files, sizes and modification times (content hash for small files)."""
    h = hashlib.sha256(fmt.encode())
    for f in sorted({s.path for s in splits}):
        fs, p = storage.filesystem(f)
        info = fs.get_file_info(p)
        h.update(f"{f}\0{info.size}\0".encode())
        if info.size is not None and info.size <= (64 << 20):
            with fs.open_input_file(p) as fh:
                h.update(hashlib.sha256(fh.read()).digest())
        else:
            h.update(str(info.mtime_ns).encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------- executor side
def _attempt_tag() -> str:
    try:
        from pyspark import TaskContext
        tc = TaskContext.get()
    except ImportError:
        tc = None
    if tc is None:
        return f"local-{uuid.uuid4().hex[:8]}"
    return f"s{tc.stageId()}-p{tc.partitionId()}-a{tc.attemptNumber()}-{uuid.uuid4().hex[:6]}"


def _queue_keys(pm: codec.PreparedMessages):
    """(codes, keys): per message an int code of (topic, queue_id), and the distinct keys."""
    tenc = pc.dictionary_encode(pm.topic)
    tidx = tenc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    combo = tidx * (2**32) + pm.queue_id.astype(np.int64)
    uniq, codes = np.unique(combo, return_inverse=True)
    topics = tenc.dictionary.to_pylist()
    keys = [(topics[int(u // 2**32)], int(u % 2**32)) for u in uniq]
    return codes.astype(np.int32), keys


def scan_split(ctx: dict, split_dict: dict) -> dict:
    """Stage 1 task: validate a split and summarize it; per-message detail goes to staging."""
    fault("scan-split")
    split = inputs.split_from_dict(split_dict)
    cfg = StoreConfig.from_json(ctx["config"])
    tcfg = topics_mod.Topics.from_dict(ctx["topics"])
    table = None
    try:
        table, label = inputs.read_split(split)
        filled = topics_mod.fill(table, tcfg, ctx.get("queue_by"), None, ctx.get("default_store_ts"), label)
        pm = codec.prepare(filled.table, cfg, label, scan=True)   # sizes and counts only
    except InputError as e:
        rows = table.num_rows if table is not None else getattr(e, "rows", None)
        return {"index": split.index, "errors": e.problems, "error_total": e.total, "rows": rows}
    codes, keys = _queue_keys(pm)
    rr = filled.rr_topic >= 0
    # Round-robin rows get their queue on the driver (it needs the counts of the splits before):
    # -2 marks them (NOT/COMMIT), -1 marks PREPARED/ROLLBACK rows (no queue offset).
    qcode = np.where(pm.cq_eligible, np.where(rr, -2, codes), -1).astype(np.int32)
    counts = np.bincount(qcode[qcode >= 0], minlength=len(keys))
    entries = pm.index_counts.astype(np.int32)
    store = storage.Store(ctx["store"])
    buf = io.BytesIO()
    np.savez(buf, sizes=pm.sizes.astype(np.int64), qkey=qcode, entries=entries,
             qkeys=np.array(json.dumps(keys)), rr_topic=filled.rr_topic, rr_rank=filled.rr_rank,
             rr_topics=np.array(json.dumps(filled.rr_topics)))
    # Per attempt: a retried or speculative scan task never rewrites a file the driver may read.
    detail_path = f"{ctx['staging']}/scan/split-{split.index:06d}-{_attempt_tag()}.npz"
    store.write_file(detail_path, [buf.getvalue()])
    with_entries = np.flatnonzero(entries > 0)
    cq_rows = np.flatnonzero(pm.cq_eligible)
    ts = pm.store_timestamp
    return {
        "index": split.index, "count": pm.n, "total_bytes": int(pm.sizes.sum()), "detail_path": detail_path,
        "queue_counts": [[k[0], k[1], int(c)] for k, c in zip(keys, counts) if c],
        "rr_topics": filled.rr_topics, "rr_total": [filled.rr_total[t] for t in filled.rr_topics],
        "rr_residues": topics_mod.residue_counts(tcfg, filled, pm.cq_eligible),
        "entries": int(entries.sum()),
        "last_entry_row": int(with_entries[-1]) if len(with_entries) else -1,
        "first_store_ts": int(ts[0]) if pm.n else None,
        "last_store_ts": int(ts[-1]) if pm.n else 0,
        "last_cq_store_ts": int(ts[cq_rows[-1]]) if len(cq_rows) else None,
        "min_store_ts": int(ts.min()) if pm.n else None,
        "max_store_ts": int(ts.max()) if pm.n else None,
    }


def _sha256_chunks(chunks) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def _route(key) -> str:
    return json.dumps(key)


def write_segments(ctx: dict, segs: list):
    """Stage 3 task: a run of consecutive segments (one per task would cost a task each)."""
    cache: dict = {}
    for seg in segs:
        yield from write_segment(ctx, seg, cache)


def _read_filled(ctx: dict, si: int):
    """A split with the broker defaults filled in exactly as the scan did (queues now placed)."""
    split = inputs.split_from_dict(ctx["splits"][si])
    table, label = inputs.read_split(split)
    rr_start = ctx.get("rr_starts", {}).get(str(si), {})
    filled = topics_mod.fill(table, topics_mod.Topics.from_dict(ctx["topics"]), ctx.get("queue_by"), rr_start,
                             ctx.get("default_store_ts"), label)
    return filled.table, label


SUB_PIECE_ROWS = 200_000     # rows per unit of parallel work inside a segment task


def _writer_threads() -> int:
    return max(1, int(os.environ.get("ROCKETLAKE_WRITER_THREADS", "0") or 0) or (os.cpu_count() or 1))


def _piece_outputs(pm, phys_start: int, qbase_by_key: dict, entry_base: int, U: int, idx_starts,
                   pred_targets: dict, crc_property: bool):
    """Encode one run of messages and route its consume-queue units and index entries."""
    ends = np.cumsum(pm.sizes)
    phys = phys_start + ends - pm.sizes
    codes, keys = _queue_keys(pm)
    cq_parts: dict = {}
    idx_parts: dict = {}
    # Queue offsets: the run's base per topic/queue + rank among its NOT/COMMIT messages.
    qoff = np.zeros(pm.n, dtype=np.int64)
    elig = np.flatnonzero(pm.cq_eligible)
    if len(elig):
        ec = codes[elig]
        order = np.argsort(ec, kind="stable")
        sorted_codes = ec[order]
        group_start = np.searchsorted(sorted_codes, sorted_codes, side="left")
        rank = np.empty(len(elig), dtype=np.int64)
        rank[order] = np.arange(len(elig)) - group_start
        base = np.asarray([qbase_by_key.get(k, 0) for k in keys], dtype=np.int64)
        qoff[elig] = base[ec] + rank
        for code in np.unique(ec):
            topic, qid = keys[code]
            sel = elig[ec == code]
            fidx = qoff[sel] // U
            for f in np.unique(fidx):
                s2 = sel[fidx == f]
                cq_parts.setdefault(_route(["cq", topic, qid, int(f * U)]), []).append(
                    {"qoff": qoff[s2], "phys": phys[s2], "size": pm.sizes[s2].astype(np.int32),
                     "tags": pm.tags_code[s2]})
    records = codec.encode(pm, phys, qoff, crc_property=crc_property)
    # Index entries, routed to their index file by batch-global position.
    if len(pm.index_msg):
        gpos = entry_base + np.arange(len(pm.index_msg), dtype=np.int64)
        ords = np.searchsorted(idx_starts, gpos, side="right") - 1 if len(idx_starts) else gpos * 0
        eph = phys[pm.index_msg]
        ets = pm.store_timestamp[pm.index_msg]
        for o in np.unique(ords):
            sel = ords == o
            idx_parts.setdefault(_route(["idx", int(o)]), []).append(
                {"pos": gpos[sel], "hash": pm.index_hash[sel], "phys": eph[sel], "ts": ets[sel]})
        lo, hi = int(gpos[0]), int(gpos[-1])
        for gp, targets in pred_targets.items():
            if lo <= gp <= hi:
                k = gp - lo
                for o in targets:
                    idx_parts.setdefault(_route(["idx", int(o)]), []).append({"pred": [int(eph[k]), int(ets[k])]})
    return records, cq_parts, idx_parts


def write_segment(ctx: dict, seg: dict, cache: dict | None = None):
    """Encode and stage one whole commitlog segment; emit CQ units and index entries.

    The segment's pieces are cut into runs of SUB_PIECE_ROWS rows. A thread pool reads the
    splits, validates (prepare) and encodes the runs (the compiled kernels, pyarrow, file writes
    and sha256 all release the GIL), while this thread writes the file in order as runs
    complete: encoding, hashing and disk writes overlap, and only a window of runs is held in
    memory. Queue, offset and index bases of each run follow from the sizes and counts of the
    runs before it.
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
    cfg = StoreConfig.from_json(ctx["config"])
    store = storage.Store(ctx["store"])
    F = cfg.mappedFileSizeCommitLog
    U = cfg.cq_units_per_file
    idx_starts = np.asarray(ctx["index_entry_starts"], dtype=np.int64)
    pred_targets = {int(k): v for k, v in ctx["pred_targets"].items()}
    cache = {} if cache is None else cache
    needed = {p["split"] for p in seg["pieces"]}
    for si in list(cache):
        if si not in needed:
            del cache[si]       # splits of earlier segments of this task are done with
    runs = []      # (piece, row_start, row_end)
    for piece in seg["pieces"]:
        for r0 in range(piece["row_start"], piece["row_end"], SUB_PIECE_ROWS):
            runs.append((piece, r0, min(piece["row_end"], r0 + SUB_PIECE_ROWS)))
    rel = commitlog.rel_path(seg["base_offset"])
    prefix = store.read(rel, 0, seg["start_pos"]) if seg["start_pos"] > 0 else None
    if prefix is not None and len(prefix) != seg["start_pos"]:
        raise IngestError(f"{rel}: expected {seg['start_pos']} committed bytes, found {len(prefix)}")
    threads = _writer_threads()
    pool = ThreadPoolExecutor(max_workers=threads)
    hasher = ThreadPoolExecutor(max_workers=1)       # in order, beside the writes
    sha = hashlib.sha256()
    cq_parts: dict = {}
    idx_parts: dict = {}
    stats = {"count": 0, "min_ts": None, "max_ts": None, "valid": 0}

    def table_of(si):
        fut = cache[si]
        return fut.result() if hasattr(fut, "result") else fut

    def prep(run):
        piece, r0, r1 = run
        table, label = table_of(piece["split"])
        return codec.prepare(table.slice(r0, r1 - r0), cfg, lambda i, b=r0, lb=label: lb(b + i))

    preps: dict = {}

    def schedule_prep(j):
        if j < len(runs) and j not in preps:
            si = runs[j][0]["split"]
            if si not in cache:
                cache[si] = pool.submit(_read_filled, ctx, si)
            preps[j] = pool.submit(prep, runs[j])

    def chunk(c):
        stats["valid"] += len(c)
        hasher.submit(sha.update, c)
        return c

    def stream():
        if prefix:
            yield chunk(prefix)
        encs = []
        written = 0
        prev_piece, phys, ebase, qbase = None, 0, 0, {}

        def take():
            rec, cq, idx = encs[written].result()
            encs[written] = None
            for k, v in cq.items():
                cq_parts.setdefault(k, []).extend(v)
            for k, v in idx.items():
                idx_parts.setdefault(k, []).extend(v)
            return rec

        for j, (piece, r0, r1) in enumerate(runs):
            for jj in range(j, j + threads + 1):       # a window of runs ahead, not the whole segment
                schedule_prep(jj)
            while not preps[j].done():                 # write finished runs while waiting
                if written < len(encs) and encs[written].done():
                    if written == len(runs) // 2:
                        fault("mid-segment-write")
                    rec = take()
                    written += 1
                    if len(rec):
                        yield chunk(rec)
                    continue
                wait([preps[j]] + ([encs[written]] if written < len(encs) else []), return_when=FIRST_COMPLETED)
            pm = preps.pop(j).result()
            if piece is not prev_piece:
                prev_piece = piece
                phys, ebase = piece["phys_start"], piece["entry_base"]
                qbase = {(t, q): o for t, q, o in piece["queue_base"]}
            encs.append(pool.submit(_piece_outputs, pm, phys, dict(qbase), ebase, U, idx_starts, pred_targets,
                                    cfg.enabledAppendPropCRC))
            phys += int(pm.sizes.sum())
            ebase += len(pm.index_msg)
            codes, keys = _queue_keys(pm)
            counts = np.bincount(codes[pm.cq_eligible], minlength=len(keys))
            for k, c in zip(keys, counts):
                if c:
                    qbase[k] = qbase.get(k, 0) + int(c)
            stats["count"] += pm.n
            if pm.n:
                lo, hi = int(pm.store_timestamp.min()), int(pm.store_timestamp.max())
                stats["min_ts"] = lo if stats["min_ts"] is None else min(stats["min_ts"], lo)
                stats["max_ts"] = hi if stats["max_ts"] is None else max(stats["max_ts"], hi)
        while written < len(encs):
            if written == len(runs) // 2:
                fault("mid-segment-write")
            rec = take()
            written += 1
            if len(rec):
                yield chunk(rec)
        if seg["close"]:
            yield chunk(commitlog.blank_record(seg["end_pos"], F))

    staged = f"{ctx['staging']}/files/{_attempt_tag()}/{rel}"
    try:
        store.write_file(staged, stream(), F)
    finally:
        for f in preps.values():
            f.cancel()
        pool.shutdown(wait=True)
        hasher.shutdown(wait=True)
    for si in list(cache):
        if hasattr(cache[si], "result"):
            cache[si] = cache[si].result()
    fault("after-segment-write")
    first = seg["pieces"][0]["phys_start"] if seg["pieces"] else None
    result = {
        "kind": "commitlog", "path": rel, "staged_path": staged, "base_offset": seg["base_offset"],
        "file_size": F, "valid_bytes": stats["valid"], "count_new": stats["count"],
        "first_new_offset": first, "end_offset": seg["base_offset"] + seg["end_pos"],
        "min_ts": stats["min_ts"], "max_ts": stats["max_ts"], "checksum": sha.hexdigest(),
        "kept_bytes": seg["start_pos"],
    }
    yield _route(["seg", seg["base_offset"]]), result
    for key, parts in cq_parts.items():
        yield key, {"units": _concat_parts(parts)}
    for key, parts in idx_parts.items():
        for p in parts:
            if "pred" in p:
                yield key, {"pred": p["pred"]}
        data = [p for p in parts if "pred" not in p]
        if data:
            yield key, {"entries": _concat_parts(data)}


def _faulty_chunks(chunks, point):
    """Yield chunks, passing the fault point halfway (a crash in the middle of a file write)."""
    half = len(chunks) // 2
    for i, c in enumerate(chunks):
        if i == half:
            fault(point)
        yield c


def _concat_parts(parts: list) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def write_files(ctx: dict, items):
    """Stage 4 task: build and stage whole consume-queue and index files from shuffled records."""
    fault("after-segments-staged")     # the shuffle is done: every segment task has staged its files
    cfg = StoreConfig.from_json(ctx["config"])
    store = storage.Store(ctx["store"])
    groups: dict = {}
    for key, value in items:
        groups.setdefault(key, []).append(value)
    tag = None
    for key, values in groups.items():
        kind = json.loads(key)[0]
        if kind == "seg":
            for v in values:
                yield v
            continue
        tag = tag or _attempt_tag()
        plan = next((v["plan"] for v in values if "plan" in v), None)
        if plan is None:
            raise IngestError(f"no plan for {key}")
        if kind == "cq":
            yield _write_cq_file(ctx, cfg, store, plan, [v["units"] for v in values if "units" in v], tag)
        else:
            preds = [v["pred"] for v in values if "pred" in v]
            yield _write_index_file(ctx, cfg, store, plan, [v["entries"] for v in values if "entries" in v],
                                    preds, tag)


def _sorted_parts(parts: list, by: str, dtypes: dict) -> dict:
    """Column arrays shuffled in from several segment tasks, concatenated and ordered by ``by``."""
    if not parts:
        return {k: np.zeros(0, t) for k, t in dtypes.items()}
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.argsort(cols[by], kind="stable")
    return {k: v[order] for k, v in cols.items()}


def _write_cq_file(ctx, cfg, store, plan, parts, tag) -> dict:
    rel = consumequeue.rel_path(plan["topic"], plan["queue_id"], plan["file_start_unit"])
    u = _sorted_parts(parts, "qoff", {"qoff": np.int64, "phys": np.int64, "size": np.int32, "tags": np.int64})
    expect = np.arange(plan["first_unit"], plan["first_unit"] + plan["count"], dtype=np.int64)
    if len(u["qoff"]) != plan["count"] or not np.array_equal(u["qoff"], expect):
        raise IngestError(f"{rel}: units {len(u['qoff'])} do not match the plan ({plan['count']} from "
                          f"{plan['first_unit']})")
    kept = plan["kept_units"] * 20
    prefix = store.read(rel, 0, kept) if kept else b""
    if len(prefix) != kept:
        raise IngestError(f"{rel}: expected {kept} committed bytes, found {len(prefix)}")
    body = consumequeue.encode_units(u["phys"], u["size"], u["tags"]).tobytes()
    chunks = [prefix, body]
    staged = f"{ctx['staging']}/files/{tag}/{rel}"
    store.write_file(staged, _faulty_chunks(chunks, "mid-file-write"), cfg.cq_file_size)
    prev = consumequeue.decode_units(prefix) if kept else None
    phys_all = np.concatenate([prev["phys"].astype(np.int64), u["phys"]]) if kept else u["phys"]
    return {
        "kind": "consumequeue", "path": rel, "staged_path": staged, "topic": plan["topic"],
        "queue_id": plan["queue_id"], "base_offset": plan["file_start_unit"] * 20,
        "file_size": cfg.cq_file_size, "valid_bytes": kept + len(body),
        "count": plan["kept_units"] + plan["count"],
        "min_offset": plan["file_start_unit"], "max_offset": plan["first_unit"] + plan["count"] - 1,
        "min_phys": int(phys_all.min()) if len(phys_all) else None,
        "max_phys": int(phys_all.max()) if len(phys_all) else None,
        "checksum": _sha256_chunks(chunks),
    }


def _write_index_file(ctx, cfg, store, plan, parts, preds, tag) -> dict:
    if plan["extend"]:
        rel = plan["extend"]
        head = store.read(rel, 0, indexfile.INDEX_HEADER_SIZE)
        hdr = indexfile.IndexHeader.from_bytes(head)
        valid = indexfile.entries_offset(cfg) + hdr.index_count * 20
        builder = indexfile.IndexFileBuilder.from_bytes(cfg, store.read(rel, 0, valid))
    else:
        rel = None
        if plan["inherit"]:
            header = indexfile.IndexHeader.inherited(plan["inherit"]["end_phy_offset"],
                                                     plan["inherit"]["end_timestamp"])
        elif plan["needs_pred"]:
            if not preds:
                raise IngestError(f"index file {plan['ordinal']}: the entry before it was not delivered")
            header = indexfile.IndexHeader.inherited(preds[0][0], preds[0][1])
        else:
            header = indexfile.IndexHeader()
        builder = indexfile.IndexFileBuilder(cfg, header)
    e = _sorted_parts(parts, "pos", {"pos": np.int64, "hash": np.int32, "phys": np.int64, "ts": np.int64})
    expect = np.arange(plan["first_entry"], plan["first_entry"] + plan["count"], dtype=np.int64)
    if not np.array_equal(e["pos"], expect):
        raise IngestError(f"index file {plan['ordinal']}: {len(e['pos'])} entries, plan says {plan['count']}")
    builder.put_keys(e["hash"], e["phys"], e["ts"])
    chunks = builder.chunks()
    name = f"ordinal-{plan['ordinal']:06d}" if rel is None else rel.split("/")[-1]
    staged = f"{ctx['staging']}/files/{tag}/index/{name}"
    store.write_file(staged, _faulty_chunks(chunks, "mid-file-write"), cfg.index_file_size)
    return {
        "kind": "index", "path": rel, "ordinal": plan["ordinal"], "staged_path": staged,
        "file_size": cfg.index_file_size, "valid_bytes": builder.valid_bytes(),
        "count": builder.header.index_count - 1, "header": builder.header.to_dict(),
        "checksum": _sha256_chunks(chunks), "roll": plan["roll"],
    }


# ---------------------------------------------------------------------------- driver
def _partitioner(assign: dict):
    def part(key):
        return assign.get(key, zlib.crc32(key.encode()) % max(1, len(set(assign.values()))))
    return part


def _read_detail(store: storage.Store, path: str, rr_start: dict | None = None,
                 tcfg: "topics_mod.Topics | None" = None) -> sequencer.SplitDetail:
    data = np.load(io.BytesIO(store.read(path)))
    keys = [tuple(k) for k in json.loads(str(data["qkeys"]))]
    qkey = data["qkey"].astype(np.int32)
    rr_rows = np.flatnonzero(qkey == -2)
    if len(rr_rows):
        # Round-robin rows: queue = (the topic's position at the split start + rank) % queues.
        rr_topics = json.loads(str(data["rr_topics"]))
        t = data["rr_topic"][rr_rows]
        nq = np.asarray([tcfg.write_queue_nums(x) for x in rr_topics], np.int64)
        start = np.asarray([int((rr_start or {}).get(x, 0)) for x in rr_topics], np.int64)
        q = (start[t] + data["rr_rank"][rr_rows]) % nq[t]
        index_of = {k: i for i, k in enumerate(keys)}
        for row, ti, qi in zip(rr_rows.tolist(), t.tolist(), q.tolist()):
            k = (rr_topics[ti], int(qi))
            if k not in index_of:
                index_of[k] = len(keys)
                keys.append(k)
            qkey[row] = index_of[k]
    return sequencer.SplitDetail(sizes=data["sizes"], qkey=qkey, qkeys=keys, entries=data["entries"])


def _round_robin_starts(scans: list, prev: dict) -> tuple[dict, dict]:
    """Per split, each round-robin topic's position at its first row; and the positions after."""
    pos = dict(prev)
    starts = {}
    for r in scans:
        starts[str(r["index"])] = {t: pos.get(t, 0) for t in r.get("rr_topics", [])}
        for t, c in zip(r.get("rr_topics", []), r.get("rr_total", [])):
            pos[t] = pos.get(t, 0) + c
    return starts, pos


def default_store_timestamp(splits: list) -> int | None:
    """The batch's store time for rows without store_timestamp and born_timestamp: the newest
    modification time of the input files, in ms (fixed for a given input, so reruns agree)."""
    best = None
    for f in sorted({s.path for s in splits}):
        fs, p = storage.filesystem(f)
        info = fs.get_file_info(p)
        if info.mtime_ns is not None:
            ms = info.mtime_ns // 1_000_000
            best = ms if best is None else max(best, ms)
    return best


def _load_topics(topics, config: StoreConfig) -> "topics_mod.Topics":
    if isinstance(topics, topics_mod.Topics):
        return topics
    if topics:
        return topics_mod.Topics.load(topics, config.defaultTopicQueueNums)
    return topics_mod.Topics.default(config.defaultTopicQueueNums)


def _chunk_segments(payloads: list, parallelism: int, file_size: int) -> list:
    """Consecutive runs of segments, one run per task: enough tasks to keep every core busy (and
    about one task per 256 MiB), without paying a task's overhead for every small segment."""
    if not payloads:
        return []
    by_size = -(-len(payloads) * file_size // (256 << 20))
    n = max(1, min(len(payloads), max(parallelism, by_size)))
    return [payloads[len(payloads) * k // n: len(payloads) * (k + 1) // n] for k in range(n)]


def run_ingest(spark, store_uri: str, input_path: str, fmt: str, config: StoreConfig,
               batch_id: str | None = None, target_splits: int = 0, quiet: bool = False,
               split_bytes: int = 128 << 20, topics=None, queue_by: str | None = None,
               store_timestamp: int | None = None, progress_interval: float = 5.0) -> dict:
    """Ingest one batch; returns the summary dict.

    Raises InputError/ConfigError/IngestError, ``manifest.ConcurrentWriteError`` when another
    writer holds the store (or committed first). ``topics``: a topics.json path or ``Topics``
    (default conf/topics.json if present); ``queue_by`` / ``store_timestamp``: see storelib.topics.
    """
    t0 = time.time()
    sc = spark.sparkContext
    prog = Progress(quiet, sc, progress_interval)
    store = storage.Store(store_uri)
    splits = inputs.plan_splits(input_path, fmt, target_splits or sc.defaultParallelism, split_bytes)
    fingerprint = input_fingerprint(input_path, fmt, splits)
    batch_id = _safe(batch_id or f"auto-{fingerprint[:16]}")
    tcfg = _load_topics(topics, config)
    for w in tcfg.warnings():
        prog.warn(w)
    lease = manifest.WriterLease(store, batch_id)
    lease.acquire()          # ConcurrentWriteError: another ingest holds the store
    fault("after-lease")
    prog.lease = lease
    committed = False
    staging = None
    try:
        snap = manifest.load_snapshot(store)
        prior = [b for b in snap.batches if b["batch_id"] == batch_id]
        if prior:
            finish_pending_publish(store, snap)
            if prior[-1]["input_fingerprint"] != fingerprint:
                raise IngestError(f"batch id {batch_id!r} is already committed with different input "
                                  f"(fingerprint {prior[-1]['input_fingerprint'][:16]}, this input "
                                  f"{fingerprint[:16]}); use another --batch-id for new data")
            prog.say(f"batch {batch_id} is already committed (seq {prior[-1]['batch_seq']}): nothing to do")
            committed = True
            return {"batch_id": batch_id, "status": "already-committed", "batch_seq": prior[-1]["batch_seq"],
                    "messages": prior[-1]["messages"]}
        finish_pending_publish(store, snap)
        check_store_root(store, snap)
        check_config(snap, config)
        state = store_state(snap)
        # We hold the lease and the last batch is fully published: anything under staging/ is a
        # leftover of a dead attempt. It is never read; remove it.
        store.delete(manifest.STAGING_DIR)
        attempt = uuid.uuid4().hex[:12]
        staging = f"{manifest.STAGING_DIR}/{batch_id}/{attempt}"
        prev_detail = json.loads(snap.batch["detail"] or "{}") if snap.batch else {}
        default_ts = store_timestamp if store_timestamp is not None else default_store_timestamp(splits)
        ctx = {"store": store_uri, "config": config.to_json(), "staging": staging,
               "splits": [s.to_dict() for s in splits], "topics": tcfg.to_dict(), "queue_by": queue_by,
               "default_store_ts": default_ts}
        # 1. scan
        prog.say(f"scan: {len(splits)} input split(s) of {input_path} ({fmt})")
        bctx = sc.broadcast(ctx)
        prog.stage("scan", len(splits))
        scans = sc.parallelize([s.to_dict() for s in splits], max(1, len(splits))) \
            .map(lambda s: scan_split(bctx.value, s)).collect()
        prog.stage(None)
        scans.sort(key=lambda r: r["index"])
        problems, total = [], 0
        for r in scans:
            if "errors" in r:
                problems.extend(r["errors"])
                total += r["error_total"]
        if problems:
            rows = {r["index"]: r.get("count", r.get("rows")) for r in scans}
            raise InputError(inputs.resolve_line_labels(problems, splits, rows), total)
        fault("after-scan")
        rr_starts, rr_after = _round_robin_starts(scans, prev_detail.get("round_robin", {}))
        summaries = []
        for r in scans:
            qc = {(t, q): c for t, q, c in r["queue_counts"]}
            for k, c in topics_mod.rr_queue_counts(tcfg, r.get("rr_topics", []), r.get("rr_residues", []),
                                                   rr_starts[str(r["index"])]).items():
                qc[k] = qc.get(k, 0) + c
            summaries.append(sequencer.SplitSummary(
                index=r["index"], count=r["count"], total_bytes=r["total_bytes"],
                queue_counts=qc, entries=r["entries"],
                last_entry_row=r["last_entry_row"], last_store_ts=r["last_store_ts"],
                last_cq_store_ts=r["last_cq_store_ts"], min_store_ts=r["min_store_ts"],
                max_store_ts=r["max_store_ts"], first_store_ts=r["first_store_ts"]))
        n_msgs = sum(s.count for s in summaries)
        prog.say(f"scan done: {n_msgs} messages, {sum(s.total_bytes for s in summaries)} record bytes")
        # 2. plan
        detail_paths = {r["index"]: r["detail_path"] for r in scans}
        plan = sequencer.plan_batch(
            state, summaries,
            lambda i: _read_detail(store, detail_paths[i], rr_starts.get(str(i)), tcfg), config)
        fault("after-plan")
        prog.say(f"plan: {len(plan.segments)} commitlog segment(s), {len(plan.cq_files)} consume queue "
                 f"file(s), {len(plan.index_files)} index file(s)")
        results = []
        if plan.segments:
            ctx2 = dict(ctx, index_entry_starts=plan.index_entry_starts, rr_starts=rr_starts,
                        pred_targets={str(k): v for k, v in plan.pred_targets().items()})
            bctx2 = sc.broadcast(ctx2)
            seg_payloads = [_segment_payload(s) for s in plan.segments]
            seg_tasks = _chunk_segments(seg_payloads, sc.defaultParallelism, config.mappedFileSizeCommitLog)
            markers = [(_route(["cq", f.topic, f.queue_id, f.file_start_unit]), {"plan": asdict(f)})
                       for f in plan.cq_files]
            markers += [(_route(["idx", f.ordinal]), {"plan": asdict(f)}) for f in plan.index_files]
            keys = [k for k, _ in markers] + [_route(["seg", s.base_offset]) for s in plan.segments]
            file_bytes = (len(plan.cq_files) * config.cq_file_size + len(plan.index_files) * config.index_file_size
                          + len(plan.segments) * 64)
            n_parts = max(1, min(len(keys), max(sc.defaultParallelism, -(-file_bytes // (256 << 20)))))
            # Big files first, spread round-robin: index files and segments weigh most.
            assign = {k: i % n_parts for i, k in enumerate(keys)}
            seg_rdd = sc.parallelize(seg_tasks, len(seg_tasks)) \
                .flatMap(lambda segs: write_segments(bctx2.value, segs))
            n_marker_parts = 1          # a few small plan records
            marker_rdd = sc.parallelize(markers, n_marker_parts)
            prog.say(f"write: {len(seg_payloads)} segment(s) in {len(seg_tasks)} task(s), then {n_parts} "
                     f"consume queue/index file task(s)")
            prog.stage("write", len(seg_tasks) + n_marker_parts, segments=len(seg_payloads),
                       messages=plan.messages, file_tasks=n_parts)
            results = seg_rdd.union(marker_rdd).partitionBy(n_parts, _partitioner(assign)) \
                .mapPartitions(lambda it: write_files(bctx2.value, it)).collect()
            prog.stage(None)
        fault("after-files-staged")
        # 5. commit
        summary = _commit(store, snap, state, plan, summaries, results, config, batch_id, fingerprint,
                          staging, t0, prog, attempt=attempt, detail_extra={"round_robin": rr_after})
        committed = True
    except BaseException:
        # Nothing of this batch is visible; staged files of this attempt are removed (best effort;
        # a SIGKILL leaves them for the rerun, which deletes them before starting).
        try:
            prog.stage(None)
            if staging is not None and not _is_committed(store, batch_id):
                _quiesce(sc)     # tasks of a failed job may still be writing their staged files
                store.delete(manifest.STAGING_DIR)
        except Exception:  # noqa: BLE001
            pass
        raise
    finally:
        prog.lease = None
        lease.release()
        if not committed:
            try:
                _remove_empty_meta(store)
            except Exception:  # noqa: BLE001
                pass
    return summary


def _quiesce(sc, timeout: float = 60.0) -> None:
    """Cancel this application's jobs and wait (bounded) until no task runs any more."""
    try:
        sc.cancelAllJobs()
        deadline = time.time() + timeout
        while sc.statusTracker().getActiveStageIds() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)            # a killed Python worker may still flush a file
    except Exception:  # noqa: BLE001 - best effort; leftovers are removed by the next ingest
        pass


def _safe(batch_id: str) -> str:
    if not batch_id or any(c in batch_id for c in "/\\\0") or batch_id in (".", ".."):
        raise IngestError(f"invalid batch id {batch_id!r}: no '/', '\\' or empty ids")
    return batch_id


def _is_committed(store, batch_id) -> bool:
    snap = manifest.load_snapshot(store)
    return any(b["batch_id"] == batch_id for b in snap.batches)


def _remove_empty_meta(store: storage.Store) -> None:
    """Leave no trace: drop _rocketlake/ (and the root) if a failed first batch created them."""
    if store.list_files(manifest.META_DIR):
        return
    store.delete(manifest.META_DIR)
    if store.local and os.path.isdir(store.root) and not os.listdir(store.root):
        os.rmdir(store.root)


def _segment_payload(s: sequencer.SegmentPlan) -> dict:
    return {"base_offset": s.base_offset, "start_pos": s.start_pos, "end_pos": s.end_pos, "close": s.close,
            "pieces": [{"split": p.split, "row_start": p.row_start, "row_end": p.row_end,
                        "phys_start": p.phys_start, "entry_base": p.entry_base,
                        "queue_base": [[k[0], k[1], v] for k, v in p.queue_base.items()]} for p in s.pieces]}


def _commit(store, snap, state, plan, summaries, results, config, batch_id, fingerprint, staging, t0, prog,
            attempt=None, detail_extra=None):
    seq = snap.batch_seq + 1
    now = manifest.now_ms()
    segs = [r for r in results if r["kind"] == "commitlog"]
    cqs = [r for r in results if r["kind"] == "consumequeue"]
    idxs = sorted((r for r in results if r["kind"] == "index"), key=lambda r: r["ordinal"])
    if len(segs) != len(plan.segments) or len(cqs) != len(plan.cq_files) or len(idxs) != len(plan.index_files):
        raise IngestError(f"incomplete write stage: {len(segs)}/{len(plan.segments)} segments, "
                          f"{len(cqs)}/{len(plan.cq_files)} consume queue files, "
                          f"{len(idxs)}/{len(plan.index_files)} index files")
    # Index file names: creation order, strictly increasing (RocketMQ loads them sorted by name).
    existing_idx = snap.of_kind("index")
    prev_ms = indexfile.name_millis(existing_idx[-1]["path"].split("/")[-1]) if existing_idx else 0
    prev_ms = prev_ms or 0
    first_ts = next((s.first_store_ts for s in summaries if s.count), None) or now
    for r in idxs:
        if r["path"] is None:
            h = r["header"]
            t = h["begin_timestamp"] if h["begin_timestamp"] > 0 else first_ts
            ms = max(prev_ms + 1, t)
            r["path"] = f"{indexfile.DIR}/{indexfile.file_name(ms)}"
            prev_ms = ms
    # Checkpoint file: last message, last consume-queue message, last rolled index file's end.
    prev_ck = ckpt.Checkpoint(snap.batch["physic_msg_timestamp"], snap.batch["logics_msg_timestamp"],
                              snap.batch["index_msg_timestamp"]) if snap.batch else ckpt.Checkpoint()
    nonempty = [s for s in summaries if s.count]
    physic = nonempty[-1].last_store_ts if nonempty else prev_ck.physic_msg_timestamp
    cq_last = [s.last_cq_store_ts for s in summaries if s.last_cq_store_ts is not None]
    logics = cq_last[-1] if cq_last else prev_ck.logics_msg_timestamp
    index_ts = prev_ck.index_msg_timestamp
    prev_header = state.index_tail.header if state.index_tail else None
    for r in idxs:
        if r["roll"] and prev_header is not None and prev_header["end_timestamp"] > 0:
            index_ts = prev_header["end_timestamp"]
        prev_header = r["header"]
    ck = ckpt.Checkpoint(physic, logics, index_ts)
    ck_bytes = ck.to_bytes()
    ck_staged = f"{staging}/files/driver/{ckpt.FILE_NAME}"
    store.write_file(ck_staged, [ck_bytes])
    # Manifest rows.
    rows = []

    def row(kind, path, staged, **kw):
        base = dict.fromkeys(manifest.MANIFEST_SCHEMA.names)
        base.update(batch_id=batch_id, batch_seq=seq, action="add", kind=kind, path=path, staged_path=staged,
                    committed_at=now, attempt_id=attempt)
        base.update(kw)
        rows.append(base)

    prev_seg = {r["path"]: r for r in snap.of_kind("commitlog")}
    for r in segs:
        old = prev_seg.get(r["path"])
        count = r["count_new"] + (old["count"] if old and r["kept_bytes"] else 0)
        min_off = old["min_offset"] if old and r["kept_bytes"] else r["first_new_offset"]
        mins = [x for x in (r["min_ts"], old["min_store_ts"] if old and r["kept_bytes"] else None) if x is not None]
        maxs = [x for x in (r["max_ts"], old["max_store_ts"] if old and r["kept_bytes"] else None) if x is not None]
        row("commitlog", r["path"], r["staged_path"], base_offset=r["base_offset"], file_size=r["file_size"],
            valid_bytes=r["valid_bytes"], count=count, min_offset=min_off,
            max_offset=r["end_offset"], min_store_ts=min(mins) if mins else None,
            max_store_ts=max(maxs) if maxs else None, checksum=r["checksum"])
    for r in cqs:
        row("consumequeue", r["path"], r["staged_path"], topic=r["topic"], queue_id=r["queue_id"],
            base_offset=r["base_offset"], file_size=r["file_size"], valid_bytes=r["valid_bytes"],
            count=r["count"], min_offset=r["min_offset"], max_offset=r["max_offset"],
            checksum=r["checksum"], detail=manifest.dumps({"min_phys": r["min_phys"], "max_phys": r["max_phys"]}))
    for r in idxs:
        h = r["header"]
        row("index", r["path"], r["staged_path"], file_size=r["file_size"], valid_bytes=r["valid_bytes"],
            count=r["count"], min_offset=h["begin_phy_offset"], max_offset=h["end_phy_offset"],
            min_store_ts=h["begin_timestamp"], max_store_ts=h["end_timestamp"], checksum=r["checksum"],
            detail=manifest.dumps({"header": h}))
    row("checkpoint", ckpt.FILE_NAME, ck_staged, file_size=ckpt.FILE_SIZE, valid_bytes=ckpt.FILE_SIZE, count=0,
        checksum=hashlib.sha256(ck_bytes).hexdigest(), detail=manifest.dumps(ck.to_dict()))
    wall = int((time.time() - t0) * 1000)
    mins = [s.min_store_ts for s in summaries if s.min_store_ts is not None]
    maxs = [s.max_store_ts for s in summaries if s.max_store_ts is not None]
    if snap.batch:
        mins += [snap.batch["min_store_ts"]] if snap.batch["min_store_ts"] is not None else []
        maxs += [snap.batch["max_store_ts"]] if snap.batch["max_store_ts"] is not None else []
    checkpoint_row = {
        "batch_id": batch_id, "batch_seq": seq, "operation": "ingest", "committed_at": now,
        "input_fingerprint": fingerprint, "messages": plan.messages, "bytes": plan.total_bytes,
        "index_entries": plan.entries, "total_messages": state.messages + plan.messages,
        "min_phy_offset": snap.batch["min_phy_offset"] if snap.batch else 0,
        "max_phy_offset": plan.next_phys,
        "queue_offsets": [{"topic": t, "queue_id": q, "max_offset": o}
                          for (t, q), o in sorted(plan.queue_next.items())],
        "physic_msg_timestamp": ck.physic_msg_timestamp, "logics_msg_timestamp": ck.logics_msg_timestamp,
        "index_msg_timestamp": ck.index_msg_timestamp,
        "min_store_ts": min(mins) if mins else None, "max_store_ts": max(maxs) if maxs else None,
        "wall_time_ms": wall, "config": manifest.dumps(config.file_shaping()),
        "detail": manifest.dumps(dict({"segments": len(segs), "consumequeue_files": len(cqs),
                                       "index_files": len(idxs)}, **(detail_extra or {}))),
        "attempt_id": attempt,
    }
    fault("before-delta-commit")
    manifest.commit(store, snap.versions, rows, checkpoint_row, fault=fault)
    prog.say(f"committed batch {batch_id} as seq {seq}")
    fault("after-commit-before-publish")
    publish(store, rows)
    fault("after-publish-before-cleanup")
    store.delete(manifest.STAGING_DIR)     # we hold the lease: everything staged is ours or garbage
    elapsed = time.time() - t0
    summary = {
        "batch_id": batch_id, "batch_seq": seq, "status": "committed", "messages": plan.messages,
        "record_bytes": plan.total_bytes, "index_entries": plan.entries,
        "segments": len(segs), "consumequeue_files": len(cqs), "index_files": len(idxs),
        "max_phy_offset": plan.next_phys, "seconds": round(elapsed, 3),
        "msgs_per_s": round(plan.messages / elapsed, 1) if elapsed > 0 else None,
    }
    prog.say(f"done: {summary['messages']} messages, {summary['segments']} segment(s), "
             f"{summary['record_bytes']} bytes in {elapsed:.1f}s ({summary['msgs_per_s']} msgs/s)")
    return summary


def publish(store: storage.Store, rows: list) -> None:
    """Move staged files to their final names (redo-safe: a missing staged file is already moved)."""
    for r in rows:
        if r["action"] != "add" or not r["staged_path"]:
            continue
        if store.exists(r["staged_path"]):
            store.publish(r["staged_path"], r["path"])
            fault("mid-publish")


def finish_pending_publish(store: storage.Store, snap: manifest.Snapshot) -> None:
    """A crash after a commit and before its publish finished: redo the publish, drop staging."""
    if snap.batch is None:
        return
    staging = f"{manifest.STAGING_DIR}/{snap.batch['batch_id']}"
    if not store.exists(staging):
        return
    rows = [r for r in snap.files.values() if r["batch_id"] == snap.batch["batch_id"]]
    publish(store, rows)
    store.delete(manifest.STAGING_DIR)
