"""Ingest: one batch of messages -> RocketMQ store files + one Delta commit.

Stages (Spark only schedules; executors read the input and write the files themselves):

0. lease     driver: ``_rocketlake/writer.lock`` (manifest.WriterLease): one writer per store; a
             second ingest fails at once with ConcurrentWriteError (exit 3) and touches nothing.
             Then: finish the publish of a committed batch a dead run left unfinished, and drop
             any staging a dead attempt left (never read).
1. encode    one task per input split: read, fill broker defaults (storelib.topics: queue ids by
             round robin / sharding key, store time), validate, encode every record once (with
             placeholder placement), stage the records and the split's per-message facts (sizes,
             queues, tags codes, store times, index key hashes), return a small summary. Bad
             input stops here, before any store file is written.
2. plan      driver: ``sequencer.plan_batch`` places every message (commitlog offsets, rolls,
             queue offsets, index positions) from the split summaries (per-message sizes are
             read back only for splits that straddle a segment boundary).
3. write     one Spark stage, no shuffle, every task reading only what stage 1 staged:
             - segment tasks (a run of consecutive segments each): read the pieces' staged
               records, patch the three placement fields (QUEUEID of round-robin rows,
               QUEUEOFFSET, PHYSICALOFFSET: ``kernels.patch_placement``), write the whole
               segment file;
             - file tasks: build whole consume-queue and index files from the placed facts of
               the splits each file draws on (``place_split`` applies the plan to a split).
4. commit    driver: checkpoint file, manifest rows, conditional Delta commits (the switch),
             then publish (staged -> final names) and remove the staging directory.

The input is read once; the records are written twice (staging, then their segment), which
costs less than reading and validating the input a second time (see bench/ and the README).

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

import collections
import hashlib
import io
import itertools
import json
import logging
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow.compute as pc

from . import checkpoint as ckpt
from . import codec, commitlog, consumequeue, indexfile, inputs, kernels, manifest, sequencer, storage
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
    segments written (estimated from the write stage's finished tasks) and msgs/s. The same thread renews
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
            # the write job is one stage: its finished tasks
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


RUN_ROWS = 200_000     # messages per unit of pipelined work (encode, read + patch) inside a task


def _writer_threads() -> int:
    return max(1, int(os.environ.get("ROCKETLAKE_WRITER_THREADS", "0") or 0) or (os.cpu_count() or 1))


def _in_order(pool, jobs, window: int):
    """Run ``jobs`` (callables) on ``pool``, at most ``window`` ahead of the consumer, and yield
    their results in order: compiled kernels, reads and writes overlap while memory stays bounded."""
    pending: collections.deque = collections.deque()
    jobs = iter(jobs)
    try:
        for job in itertools.islice(jobs, window):
            pending.append(pool.submit(job))
        while pending:
            out = pending.popleft().result()
            job = next(jobs, None)
            if job is not None:
                pending.append(pool.submit(job))
            yield out
    finally:
        for f in pending:
            f.cancel()


def _sha256_chunks(chunks) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def encode_split(ctx: dict, split_dict: dict) -> dict:
    """Stage 1 task: read one split, fill broker defaults, validate, encode; stage its records
    and its per-message facts; return its summary for the sequencer.

    The records are encoded before they are placed: QUEUEID (of round-robin rows), QUEUEOFFSET
    and PHYSICALOFFSET are placeholders the segment writer patches (``kernels.patch_placement``),
    and with enabledAppendPropCRC the CRC digits are filled in there too. Every other byte is
    final, so the input is read and encoded once.
    """
    fault("encode-split")
    split = inputs.split_from_dict(split_dict)
    cfg = StoreConfig.from_json(ctx["config"])
    tcfg = topics_mod.Topics.from_dict(ctx["topics"])
    table = None
    try:
        table, label = inputs.read_split(split)
        filled = topics_mod.fill(table, tcfg, ctx.get("queue_by"), None, ctx.get("default_store_ts"), label)
        pm = codec.prepare(filled.table, cfg, label)
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
    # Per attempt: a retried or speculative task never rewrites a file the driver may read.
    base = f"{ctx['staging']}/splits/split-{split.index:06d}-{_attempt_tag()}"
    records_path, meta_path = base + ".records", base + ".npz"
    runs = [(r0, min(pm.n, r0 + RUN_ROWS)) for r0 in range(0, pm.n, RUN_ROWS)]
    unplaced = np.zeros(pm.n, np.int64)
    threads = _writer_threads()

    def encoded(pool):
        jobs = (lambda r=r: codec.encode(pm, unplaced, unplaced, cfg.enabledAppendPropCRC, rows=r, fill_crc=False)
                for r in runs)
        for j, records in enumerate(_in_order(pool, jobs, threads + 1)):
            if j == len(runs) // 2:
                fault("mid-records-write")
            yield records

    with ThreadPoolExecutor(max_workers=threads) as pool:
        records_bytes = store.write_file(records_path, encoded(pool))
    buf = io.BytesIO()
    np.savez(buf, sizes=pm.sizes.astype(np.int32), qkey=qcode, entries=entries, queue_id=pm.queue_id,
             qkeys=np.array(json.dumps(keys)), rr_topic=filled.rr_topic, rr_rank=filled.rr_rank,
             rr_topics=np.array(json.dumps(filled.rr_topics)), tags=pm.tags_code, ts=pm.store_timestamp,
             imsg=pm.index_msg.astype(np.int32), ihash=pm.index_hash)
    store.write_file(meta_path, [buf.getvalue()])
    with_entries = np.flatnonzero(entries > 0)
    cq_rows = np.flatnonzero(pm.cq_eligible)
    ts = pm.store_timestamp
    return {
        "index": split.index, "count": pm.n, "total_bytes": int(pm.sizes.sum()), "meta_path": meta_path,
        "records_path": records_path, "records_bytes": records_bytes,
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


def _load_meta(store: storage.Store, path: str):
    return np.load(io.BytesIO(store.read(path)))


def _final_queues(meta, rr_start: dict | None, tcfg: "topics_mod.Topics"):
    """(qcode, keys, queue_id) of a split once its round-robin rows are placed: queue =
    (the topic's position at the split start + rank) % writeQueueNums (storelib.topics)."""
    keys = [tuple(k) for k in json.loads(str(meta["qkeys"]))]
    qcode = meta["qkey"].astype(np.int32)
    queue_id = meta["queue_id"].astype(np.int32)
    rr_rows = np.flatnonzero(meta["rr_topic"] >= 0)
    if len(rr_rows):
        rr_topics = json.loads(str(meta["rr_topics"]))
        t = meta["rr_topic"][rr_rows].astype(np.int64)
        nq = np.asarray([tcfg.write_queue_nums(x) for x in rr_topics], np.int64)
        start = np.asarray([int((rr_start or {}).get(x, 0)) for x in rr_topics], np.int64)
        q = (start[t] + meta["rr_rank"][rr_rows]) % nq[t]
        queue_id[rr_rows] = q
        elig = qcode[rr_rows] == -2
        uniq, inv = np.unique(t[elig] * (2**32) + q[elig], return_inverse=True)
        index_of = {k: i for i, k in enumerate(keys)}
        codes = []
        for u in uniq.tolist():            # one per round-robin topic/queue, not per message
            k = (rr_topics[u >> 32], u & 0xFFFFFFFF)
            if k not in index_of:
                index_of[k] = len(keys)
                keys.append(k)
            codes.append(index_of[k])
        qcode[rr_rows[elig]] = np.asarray(codes, np.int32)[inv]
    return qcode, keys, queue_id


def _read_detail(store: storage.Store, path: str, rr_start: dict | None = None,
                 tcfg: "topics_mod.Topics | None" = None) -> sequencer.SplitDetail:
    meta = _load_meta(store, path)
    qcode, keys, _ = _final_queues(meta, rr_start, tcfg)
    return sequencer.SplitDetail(sizes=meta["sizes"], qkey=qcode, qkeys=keys, entries=meta["entries"])


@dataclass
class PlacedSplit:
    """One split's messages where the plan put them: what the stage-3 writers need."""
    records_path: str
    starts: np.ndarray            # int64 byte offset of every record in the split's staged records
    sizes: np.ndarray             # int64
    queue_id: np.ndarray          # int32, round-robin rows placed
    qcode: np.ndarray             # int32 index into keys; -1: no queue offset (PREPARED/ROLLBACK)
    keys: list                    # [(topic, queue_id)]
    qoff: np.ndarray              # int64 queue offset (0 without one, as the broker writes it)
    phys: np.ndarray              # int64 commitlog offset
    tags: np.ndarray              # int64 tags code (CQ unit)
    ts: np.ndarray                # int64 store timestamp
    imsg: np.ndarray              # int32 message of every index entry, in dispatch order
    ihash: np.ndarray             # int32 index key hash of every entry
    entry_base: int               # batch-global position of the split's first index entry

    def rows_of_queue(self, key) -> np.ndarray:
        """Rows with a unit in queue ``key``, in order (so their queue offsets ascend)."""
        if not hasattr(self, "_by_code"):
            order = np.argsort(self.qcode, kind="stable")
            self._by_code = (order, np.searchsorted(self.qcode[order], np.arange(len(self.keys) + 1)))
        try:
            c = self.keys.index(tuple(key))
        except ValueError:
            return np.zeros(0, np.int64)
        order, bounds = self._by_code
        return order[bounds[c]:bounds[c + 1]]


def place_split(store: storage.Store, place: dict, tcfg: "topics_mod.Topics") -> PlacedSplit:
    """Apply the plan to a split's staged facts: final queue ids, queue offsets (the split's base
    per topic/queue + rank), commitlog offsets (per piece: its first offset + bytes before)."""
    meta = _load_meta(store, place["meta"])
    qcode, keys, queue_id = _final_queues(meta, place["rr_start"], tcfg)
    sizes = meta["sizes"].astype(np.int64)
    starts = np.cumsum(sizes) - sizes
    qoff = np.zeros(len(sizes), np.int64)
    elig = np.flatnonzero(qcode >= 0)
    if len(elig):
        ec = qcode[elig]
        order = np.argsort(ec, kind="stable")
        sorted_codes = ec[order]
        rank = np.empty(len(elig), np.int64)
        rank[order] = np.arange(len(elig)) - np.searchsorted(sorted_codes, sorted_codes, side="left")
        qbase = {(t, q): o for t, q, o in place["queue_base"]}
        qoff[elig] = np.asarray([qbase.get(k, 0) for k in keys], np.int64)[ec] + rank
    phys = np.full(len(sizes), -1, np.int64)
    for r0, r1, p0 in place["pieces"]:
        phys[r0:r1] = p0 + starts[r0:r1] - starts[r0]
    return PlacedSplit(place["records"], starts, sizes, queue_id, qcode, keys, qoff, phys, meta["tags"],
                       meta["ts"], meta["imsg"], meta["ihash"], place["entry_base"])


def run_write_task(ctx: dict, task: tuple):
    """Stage 3 task: ("segments", [segment payloads]) or ("files", {"cq": [...], "index": [...]})."""
    kind, payload = task
    if kind == "segments":
        yield from write_segments(ctx, payload)
    else:
        yield from write_file_group(ctx, payload)


def write_segments(ctx: dict, segs: list):
    """A run of consecutive segments (one task per segment would cost a task each)."""
    store = storage.Store(ctx["store"])
    tcfg = topics_mod.Topics.from_dict(ctx["topics"])
    uses = [p["split"] for seg in segs for p in seg["pieces"]]
    placed: dict = {}
    # A split whose every piece is in this task: its staged records are deleted once written into
    # their segment. Dirty page cache slows every later write down (on these VMs a write runs at
    # a third of its speed once a few GB are dirty), and a deleted file's dirty pages are dropped
    # unwritten. A retried attempt that finds them gone encodes those rows again from the input.
    last_use = {si: k for k, si in enumerate(uses)
                if uses.count(si) == len(ctx["split_places"][str(si)]["pieces"])}

    def get(si: int, use: int) -> PlacedSplit:
        for old in [s for s in placed if s not in uses[use:]]:
            del placed[old]              # splits of earlier segments of this task are done with
        if si not in placed:
            placed[si] = place_split(store, ctx["split_places"][str(si)], tcfg)
        return placed[si]

    use = 0
    for seg in segs:
        yield write_segment(ctx, store, seg, get, use, last_use)
        use += len(seg["pieces"])


def _reencoded(ctx: dict, cfg: StoreConfig, si: int, r0: int, r1: int) -> np.ndarray:
    """Rows r0..r1 of split ``si`` encoded again from the input, exactly as ``encode_split``
    staged them (for an attempt that finds a split's staged records already deleted)."""
    split = inputs.split_from_dict(ctx["splits"][si])
    table, label = inputs.read_split(split)
    filled = topics_mod.fill(table, topics_mod.Topics.from_dict(ctx["topics"]), ctx.get("queue_by"), None,
                             ctx.get("default_store_ts"), label)
    pm = codec.prepare(filled.table.slice(r0, r1 - r0), cfg, lambda i: label(r0 + i))
    unplaced = np.zeros(pm.n, np.int64)
    return codec.encode(pm, unplaced, unplaced, cfg.enabledAppendPropCRC, fill_crc=False)


def write_segment(ctx: dict, store: storage.Store, seg: dict, get, use: int, last_use: dict) -> dict:
    """Stage one whole commitlog segment: committed prefix, then the pieces' staged records with
    their placement patched in, then the BLANK record if the segment is full.

    A thread pool reads and patches runs of RUN_ROWS records while this thread writes them in
    order; sha256 runs in its own thread beside the writes.
    """
    cfg = StoreConfig.from_json(ctx["config"])
    F = cfg.mappedFileSizeCommitLog
    rel = commitlog.rel_path(seg["base_offset"])
    prefix = store.read(rel, 0, seg["start_pos"]) if seg["start_pos"] > 0 else None
    if prefix is not None and len(prefix) != seg["start_pos"]:
        raise IngestError(f"{rel}: expected {seg['start_pos']} committed bytes, found {len(prefix)}")
    n_runs = sum(-(-(p["row_end"] - p["row_start"]) // RUN_ROWS) for p in seg["pieces"])
    threads = _writer_threads()
    hasher = ThreadPoolExecutor(max_workers=1)       # in order, beside the writes
    sha = hashlib.sha256()
    stats = {"count": 0, "min_ts": None, "max_ts": None, "valid": 0}

    def patched(si: int, ps: PlacedSplit, r0: int, r1: int, release: str | None):
        lo = int(ps.starts[r0])
        try:
            buf = store.read_array(ps.records_path, lo, int(ps.starts[r1 - 1] + ps.sizes[r1 - 1]) - lo)
        except FileNotFoundError:
            buf = _reencoded(ctx, cfg, si, r0, r1)
        kernels.patch_placement(buf, ps.starts[r0:r1] - lo, ps.queue_id[r0:r1], ps.qoff[r0:r1], ps.phys[r0:r1])
        if cfg.enabledAppendPropCRC:
            codec.fill_crc_property(buf, ps.sizes[r0:r1])
        return buf, release

    def jobs():
        for k, piece in enumerate(seg["pieces"]):
            ps = get(piece["split"], use + k)
            r0, r1 = piece["row_start"], piece["row_end"]
            if int(ps.phys[r0]) != piece["phys_start"]:
                raise IngestError(f"{rel}: split {piece['split']} row {r0} placed at {int(ps.phys[r0])}, "
                                  f"the plan says {piece['phys_start']}")
            stats["count"] += r1 - r0
            lo, hi = int(ps.ts[r0:r1].min()), int(ps.ts[r0:r1].max())
            stats["min_ts"] = lo if stats["min_ts"] is None else min(stats["min_ts"], lo)
            stats["max_ts"] = hi if stats["max_ts"] is None else max(stats["max_ts"], hi)
            for a in range(r0, r1, RUN_ROWS):
                b = min(r1, a + RUN_ROWS)
                release = ps.records_path if b == r1 and last_use.get(piece["split"]) == use + k else None
                yield lambda si=piece["split"], ps=ps, a=a, b=b, rel_=release: patched(si, ps, a, b, rel_)

    def chunk(c):
        stats["valid"] += len(c)
        hasher.submit(sha.update, c)
        return c

    def stream(pool):
        if prefix:
            yield chunk(prefix)
        for j, (records, release) in enumerate(_in_order(pool, jobs(), threads + 1)):
            if j == n_runs // 2:
                fault("mid-segment-write")
            yield chunk(records)
            if release:
                store.delete(release)        # written: its dirty pages need never reach the disk
                fault("after-records-released")
        if seg["close"]:
            yield chunk(commitlog.blank_record(seg["end_pos"], F))

    staged = f"{ctx['staging']}/files/{_attempt_tag()}/{rel}"
    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            store.write_file(staged, stream(pool), F, durable=cfg.durable)
    finally:
        hasher.shutdown(wait=True)
    fault("after-segment-write")
    first = seg["pieces"][0]["phys_start"] if seg["pieces"] else None
    return {
        "kind": "commitlog", "path": rel, "staged_path": staged, "base_offset": seg["base_offset"],
        "file_size": F, "valid_bytes": stats["valid"], "count_new": stats["count"],
        "first_new_offset": first, "end_offset": seg["base_offset"] + seg["end_pos"],
        "min_ts": stats["min_ts"], "max_ts": stats["max_ts"], "checksum": sha.hexdigest(),
        "kept_bytes": seg["start_pos"],
    }


def write_file_group(ctx: dict, group: dict):
    """Whole consume-queue and index files, built from the placed facts of the splits they draw
    on (``sources``: worked out by the driver from the splits' queue counts and entry ranges).
    Splits are placed one at a time; only the files' own units and entries are kept."""
    cfg = StoreConfig.from_json(ctx["config"])
    store = storage.Store(ctx["store"])
    tcfg = topics_mod.Topics.from_dict(ctx["topics"])
    cqs, idxs = group["cq"], group["index"]
    units: list = [[] for _ in cqs]
    entries: list = [[] for _ in idxs]
    preds: dict = {}
    needed = {s for f in cqs + idxs for s in f["sources"]} | {f["pred_source"] for f in idxs
                                                             if f["pred_source"] is not None}
    for si in sorted(needed):
        ps = place_split(store, ctx["split_places"][str(si)], tcfg)
        for i, f in enumerate(cqs):
            if si in f["sources"]:
                p = f["plan"]
                rows = ps.rows_of_queue((p["topic"], p["queue_id"]))
                q = ps.qoff[rows]
                rows = rows[np.searchsorted(q, p["first_unit"]):np.searchsorted(q, p["first_unit"] + p["count"])]
                units[i].append({"qoff": ps.qoff[rows], "phys": ps.phys[rows], "size": ps.sizes[rows].astype(np.int32),
                                 "tags": ps.tags[rows]})
        for i, f in enumerate(idxs):
            p = f["plan"]
            if si in f["sources"]:
                a = max(0, p["first_entry"] - ps.entry_base)
                b = min(len(ps.imsg), p["first_entry"] + p["count"] - ps.entry_base)
                m = ps.imsg[a:b]
                entries[i].append({"pos": ps.entry_base + np.arange(a, b, dtype=np.int64), "hash": ps.ihash[a:b],
                                   "phys": ps.phys[m], "ts": ps.ts[m]})
            if f["pred_source"] == si:
                m = ps.imsg[p["first_entry"] - 1 - ps.entry_base]
                preds[i] = (int(ps.phys[m]), int(ps.ts[m]))
        del ps
    tag = _attempt_tag()
    for i, f in enumerate(cqs):
        yield _write_cq_file(ctx, cfg, store, f["plan"], _concat_parts(units[i], CQ_DTYPES), tag)
    for i, f in enumerate(idxs):
        yield _write_index_file(ctx, cfg, store, f["plan"], _concat_parts(entries[i], ENTRY_DTYPES),
                                preds.get(i), tag)


CQ_DTYPES = {"qoff": np.int64, "phys": np.int64, "size": np.int32, "tags": np.int64}
ENTRY_DTYPES = {"pos": np.int64, "hash": np.int32, "phys": np.int64, "ts": np.int64}


def _faulty_chunks(chunks, point):
    """Yield chunks, passing the fault point halfway (a crash in the middle of a file write)."""
    half = len(chunks) // 2
    for i, c in enumerate(chunks):
        if i == half:
            fault(point)
        yield c


def _concat_parts(parts: list, dtypes: dict) -> dict:
    if not parts:
        return {k: np.zeros(0, t) for k, t in dtypes.items()}
    return {k: np.concatenate([p[k] for p in parts]) for k in dtypes}


def _write_cq_file(ctx, cfg, store, plan, u, tag) -> dict:
    rel = consumequeue.rel_path(plan["topic"], plan["queue_id"], plan["file_start_unit"])
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
    store.write_file(staged, _faulty_chunks(chunks, "mid-file-write"), cfg.cq_file_size, durable=cfg.durable)
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


def _write_index_file(ctx, cfg, store, plan, e, pred, tag) -> dict:
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
            if pred is None:
                raise IngestError(f"index file {plan['ordinal']}: the entry before it was not found")
            header = indexfile.IndexHeader.inherited(pred[0], pred[1])
        else:
            header = indexfile.IndexHeader()
        builder = indexfile.IndexFileBuilder(cfg, header)
    expect = np.arange(plan["first_entry"], plan["first_entry"] + plan["count"], dtype=np.int64)
    if not np.array_equal(e["pos"], expect):
        raise IngestError(f"index file {plan['ordinal']}: {len(e['pos'])} entries, plan says {plan['count']}")
    builder.put_keys(e["hash"], e["phys"], e["ts"])
    chunks = builder.chunks()
    name = f"ordinal-{plan['ordinal']:06d}" if rel is None else rel.split("/")[-1]
    staged = f"{ctx['staging']}/files/{tag}/index/{name}"
    store.write_file(staged, _faulty_chunks(chunks, "mid-file-write"), cfg.index_file_size, durable=cfg.durable)
    return {
        "kind": "index", "path": rel, "ordinal": plan["ordinal"], "staged_path": staged,
        "file_size": cfg.index_file_size, "valid_bytes": builder.valid_bytes(),
        "count": builder.header.index_count - 1, "header": builder.header.to_dict(),
        "checksum": _sha256_chunks(chunks), "roll": plan["roll"],
    }


# ---------------------------------------------------------------------------- driver
def _split_places(scans: list, plan: sequencer.BatchPlan, rr_starts: dict) -> dict:
    """Per non-empty split, what the stage-3 tasks need to place its staged messages."""
    pieces: dict = {}
    for seg in plan.segments:
        for p in seg.pieces:
            pieces.setdefault(p.split, []).append([p.row_start, p.row_end, p.phys_start])
    out = {}
    for r in scans:
        if not r["count"]:
            continue
        b = plan.split_bases[r["index"]]
        out[str(r["index"])] = {
            "meta": r["meta_path"], "records": r["records_path"], "rr_start": rr_starts.get(str(r["index"]), {}),
            "queue_base": [[t, q, o] for (t, q), o in b.queue_base.items()], "entry_base": b.entry_base,
            "pieces": pieces[r["index"]]}
    return out


def _file_jobs(plan: sequencer.BatchPlan, summaries: list) -> list:
    """Every consume-queue and index file of the plan with the splits it draws on, and a weight."""
    by_queue: dict = {}
    entry_ranges = []
    for s in summaries:
        if not s.count:
            continue
        b = plan.split_bases[s.index]
        for k, c in s.queue_counts.items():
            if c:
                base = b.queue_base[k]
                by_queue.setdefault(k, []).append((s.index, base, base + c))
        if s.entries:
            entry_ranges.append((s.index, b.entry_base, b.entry_base + s.entries))
    jobs = []
    for f in plan.cq_files:
        lo, hi = f.first_unit, f.first_unit + f.count
        src = [i for i, a, b in by_queue.get((f.topic, f.queue_id), []) if a < hi and b > lo]
        jobs.append(("cq", {"plan": asdict(f), "sources": src}, f.count * 28 + (1 << 20)))
    for f in plan.index_files:
        lo, hi = f.first_entry, f.first_entry + f.count
        src = [i for i, a, b in entry_ranges if a < hi and b > lo]
        pred = next((i for i, a, b in entry_ranges if a <= lo - 1 < b), None) if f.needs_pred else None
        jobs.append(("index", {"plan": asdict(f), "sources": src, "pred_source": pred},
                     f.count * 40 + (8 << 20)))
    return jobs


def _file_groups(jobs: list, n: int) -> list:
    """Spread the file jobs over ``n`` tasks, heaviest first onto the lightest task."""
    n = max(1, min(n, len(jobs)))
    groups = [{"cq": [], "index": []} for _ in range(n)]
    load = [0] * n
    for kind, job, weight in sorted(jobs, key=lambda j: -j[2]):
        k = load.index(min(load))
        groups[k][kind].append(job)
        load[k] += weight
    return [g for g in groups if g["cq"] or g["index"]]


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
        # 1. encode
        prog.say(f"encode: {len(splits)} input split(s) of {input_path} ({fmt})")
        bctx = sc.broadcast(ctx)
        prog.stage("encode", len(splits))
        scans = sc.parallelize([s.to_dict() for s in splits], max(1, len(splits))) \
            .map(lambda s: encode_split(bctx.value, s)).collect()
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
        prog.say(f"encode done: {n_msgs} messages, {sum(s.total_bytes for s in summaries)} record bytes")
        # 2. plan
        meta_paths = {r["index"]: r["meta_path"] for r in scans}
        plan = sequencer.plan_batch(
            state, summaries,
            lambda i: _read_detail(store, meta_paths[i], rr_starts.get(str(i)), tcfg), config)
        fault("after-plan")
        prog.say(f"plan: {len(plan.segments)} commitlog segment(s), {len(plan.cq_files)} consume queue "
                 f"file(s), {len(plan.index_files)} index file(s)")
        results = []
        if plan.segments:
            # 3. write: segment tasks first (the heaviest), then consume-queue/index file tasks;
            # all read what stage 1 staged, none waits for another (no shuffle).
            bctx2 = sc.broadcast(dict(ctx, split_places=_split_places(scans, plan, rr_starts)))
            seg_tasks = _chunk_segments([_segment_payload(s) for s in plan.segments], sc.defaultParallelism,
                                        config.mappedFileSizeCommitLog)
            # File tasks run beside the segment tasks: use the cores those leave free (each file
            # task places every split it draws on, so more tasks than that only repeat work).
            file_jobs = _file_jobs(plan, summaries)
            file_bytes = sum(w for _, _, w in file_jobs)
            file_groups = _file_groups(file_jobs, max(sc.defaultParallelism - len(seg_tasks), file_bytes // (256 << 20)))
            tasks = [("segments", t) for t in seg_tasks] + [("files", g) for g in file_groups]
            prog.say(f"write: {len(plan.segments)} segment(s) in {len(seg_tasks)} task(s), "
                     f"{len(plan.cq_files) + len(plan.index_files)} consume queue/index file(s) in "
                     f"{len(file_groups)} task(s)")
            prog.stage("write", len(tasks), segments=len(plan.segments), messages=plan.messages)
            results = sc.parallelize(tasks, len(tasks)) \
                .flatMap(lambda t: run_write_task(bctx2.value, t)).collect()
            prog.stage(None)
        fault("after-files-staged")
        # 5. commit
        summary = _commit(store, snap, state, plan, summaries, results, config, batch_id, fingerprint,
                          staging, t0, prog, attempt=attempt, detail_extra={"round_robin": rr_after})
        committed = True
    except BaseException:
        # Nothing of this attempt is visible; its staged files are removed (best effort; a SIGKILL
        # leaves them for the next ingest, which deletes them before starting). Only this
        # attempt's: a writer that won a race with this one may be publishing its own staged
        # files right now (both passed the lease: best effort on object stores, or a stale lease
        # taken over), and a staged file it has not moved yet would be lost for good.
        try:
            prog.stage(None)
            if staging is not None and not _is_committed(store, batch_id, attempt):
                _quiesce(sc)     # tasks of a failed job may still be writing their staged files
                _drop_staging(store, staging)
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


def _is_committed(store, batch_id, attempt=None) -> bool:
    """Is ``batch_id`` committed (by ``attempt``, if given: a racing writer of the same batch id
    may have committed it while this attempt lost)?"""
    snap = manifest.load_snapshot(store)
    return any(b["batch_id"] == batch_id and (attempt is None or b.get("attempt_id") in (None, attempt))
               for b in snap.batches)


def _drop_staging(store: storage.Store, staging: str) -> None:
    """Remove one attempt's staging directory, then its batch directory and ``staging/`` if
    nothing else is in them. Never another attempt's files: normally the lease holder is the
    only writer, but a racing writer that got past the lease too may be staging or publishing."""
    store.delete(staging)
    for rel in (staging.rsplit("/", 1)[0], manifest.STAGING_DIR):
        if store.local:
            try:
                os.rmdir(store.path(rel))          # only if empty (atomic)
            except FileNotFoundError:
                continue
            except OSError:
                return
        else:
            if store.list_files(rel):
                return
            store.delete(rel)                      # directory markers only


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
    store.write_file(ck_staged, [ck_bytes], durable=config.durable)
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
    # Every file of the batch is on stable storage by now (the write tasks and the checkpoint
    # write fsync'd them and their directories: flushDiskType=SYNC_FLUSH), so the switch below
    # never makes visible a batch a power cut could take back.
    manifest.commit(store, snap.versions, rows, checkpoint_row, fault=fault, durable=config.durable)
    prog.say(f"committed batch {batch_id} as seq {seq}")
    fault("after-commit-before-publish")
    publish(store, rows, durable=config.durable)
    fault("after-publish-before-cleanup")
    _drop_staging(store, staging)          # ours only: see _drop_staging (dead attempts' leftovers
                                           # were removed when this run started)
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


def publish(store: storage.Store, rows: list, durable: bool = True) -> None:
    """Move staged files to their final names (redo-safe: a missing staged file is already moved).

    ``durable``: the directories the renames changed are fsync'd before staging is removed, so a
    power cut cannot take a published name back while its staged copy is already gone."""
    changed: set = set()
    for r in rows:
        if r["action"] != "add" or not r["staged_path"]:
            continue
        if store.exists(r["staged_path"]):
            changed.update(store.publish(r["staged_path"], r["path"]) or ())
            fault("mid-publish")
    if durable:
        storage.sync_dirs(changed)


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
