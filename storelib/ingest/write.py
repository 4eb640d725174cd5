"""Stage 3 of an ingest, write: one Spark stage, no shuffle, every task reading only what stage 1
staged (storelib.ingest.encode) and writing whole files under its attempt's staging directory.

* segment tasks (``write_segments``: a run of consecutive segments each): read the pieces'
  staged records, patch the three placement fields (QUEUEID of round-robin rows, QUEUEOFFSET,
  PHYSICALOFFSET: ``kernels.patch_placement``), write the whole segment file (committed prefix
  + new records + BLANK record if it is full);
* file tasks (``write_file_group``): build whole consume-queue and index files from the placed
  facts of the splits each file draws on (``place_split`` applies the plan to a split).

Every task returns one ``StagedFile`` per staged file (kind, final and staged path, sizes, counts,
checksum, ...; storelib.ingest.staged_file): the commit (storelib.ingest.commit) turns them into
manifest rows. The driver
side of the stage is here too: ``split_places`` (what a task needs to place a split) and
``write_tasks`` (the tasks: segment runs and balanced groups of files).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np

from ..codec import messages as codec
from ..format import commitlog, consumequeue, indexfile
from . import encode as encode_stage, file_versions, paged_index, sequencer, split_staging, topics as topics_mod
from ..compute import allocator, grouping, kernels
from ..io import extentlists, fragments, patches, storage
from ..table import zonemap
from ..format.config import StoreConfig
from ..runtime import warmup
from ..runtime.faults import fault
from .context import WriteContext
from .file_versions import FileVersion
from ..errors import ContinuedFileDamaged, IngestError
from .indexfile import IndexFileBuilder
from .task_pipeline import attempt_tag, in_order, profiled_iter, RUN_ROWS, writer_threads
from ..table.rows import FileKind
from .staged_file import DamagedFile, StagedFile

__all__ = [
    "PlacedSplit", "place_split", "run_write_task", "write_segments", "write_segment", "write_file_group",
    "CQ_DTYPES", "split_places", "write_tasks", "version_context",
]


# ---------------------------------------------------------------------------- executor side
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
            self._by_code = grouping.group_rows(self.qcode, len(self.keys))
        try:
            c = self.keys.index(tuple(key))
        except ValueError:
            return np.zeros(0, np.int64)
        order, bounds = self._by_code
        return order[bounds[c]:bounds[c + 1]]


def place_split(store: storage.Store, place: dict, tcfg: "topics_mod.Topics") -> PlacedSplit:
    """Apply the plan to a split's staged facts: final queue ids, queue offsets (the split's base
    per topic/queue + rank), commitlog offsets (per piece: its first offset + bytes before)."""
    meta = encode_stage.load_split_facts(store, place["meta"])
    qcode, keys, queue_id = encode_stage.final_queues(meta, place["rr_start"], tcfg)
    sizes = meta["sizes"].astype(np.int64)
    starts = np.cumsum(sizes) - sizes
    qoff = np.zeros(len(sizes), np.int64)
    if len(keys):
        qbase = {(t, q): o for t, q, o in place["queue_base"]}
        base = np.asarray([qbase.get(k, 0) for k in keys], np.int64)
        rank = grouping.ranks_in_group(qcode, len(keys))
        elig = rank >= 0
        qoff[elig] = base[qcode[elig]] + rank[elig]
    phys = np.full(len(sizes), -1, np.int64)
    for r0, r1, p0 in place["pieces"]:
        phys[r0:r1] = p0 + starts[r0:r1] - starts[r0]
    return PlacedSplit(place["records"], starts, sizes, queue_id, qcode, keys, qoff, phys, meta["tags"],
                       meta["ts"], meta["imsg"], meta["ihash"], place["entry_base"])


def run_write_task(ctx: WriteContext, task: tuple):
    """Stage 3 task: ("segments", [segment payloads]) or ("files", {FileKind.CONSUMEQUEUE: [...],
    FileKind.INDEX: [...]})."""
    warmup.task_started()
    kind, payload = task
    allocator.release()          # what the encode tasks left mapped in this worker: not this task's shape
    try:
        yield from profiled_iter(kind, write_segments(ctx, payload) if kind == "segments"
                                 else write_file_group(ctx, payload))
    except ContinuedFileDamaged as e:
        # Deterministic: a retry would find the same damage. The driver stops the batch with it.
        yield DamagedFile(e.path, e.offset, e.what)
    finally:
        allocator.release()


def write_segments(ctx: WriteContext, segs: list):
    """A run of consecutive segments (one task per segment would cost a task each)."""
    store = storage.Store(ctx.store)
    splits = split_staging.staging_store(ctx.local_staging, store)
    tcfg = ctx.topics
    uses = [p["split"] for seg in segs for p in seg["pieces"]]
    placed: dict = {}
    # A split whose every piece is in this task: its staged records are deleted once written into
    # their segment. Staged with O_DIRECT (storelib.io.direct_io) that frees its disk space; staged
    # through the page cache (where O_DIRECT is refused) a deleted file's dirty pages are dropped
    # unwritten, and dirty cache slows every later write down. A retried attempt that finds them gone encodes those rows again from the input.
    last_use = {si: k for k, si in enumerate(uses)
                if uses.count(si) == len(ctx.split_places[si]["pieces"])}

    def get(si: int, use: int) -> PlacedSplit:
        for old in [s for s in placed if s not in uses[use:]]:
            del placed[old]              # splits of earlier segments of this task are done with
        if si not in placed:
            placed[si] = place_split(splits, ctx.split_places[si], tcfg)
        return placed[si]

    use = 0
    for seg in segs:
        yield write_segment(ctx, store, splits, seg, get, use, last_use)
        use += len(seg["pieces"])


def write_segment(ctx: WriteContext, store: storage.Store, splits, seg: dict, get, use: int, last_use: dict) -> StagedFile:
    """Stage one whole commitlog segment: committed prefix, then the pieces' staged records with
    their placement patched in, then the BLANK record if the segment is full.

    A thread pool reads and patches runs of RUN_ROWS records while this thread writes them in
    order; sha256 runs in its own thread beside the writes.
    """
    cfg = ctx.config
    F = cfg.mappedFileSizeCommitLog
    rel = commitlog.rel_path(seg["base_offset"])
    version = FileVersion(ctx, store, rel, seg["start_pos"], F, attempt_tag(), "records")
    n_runs = sum(-(-(p["row_end"] - p["row_start"]) // RUN_ROWS) for p in seg["pieces"])
    threads = writer_threads()
    hasher = ThreadPoolExecutor(max_workers=1)       # in order, beside the writes
    blocks = version.hasher()
    stats: dict[str, Any] = {"count": 0, "min_ts": None, "max_ts": None, "new": 0, "zones": []}
    zone = zonemap.zone_bytes(F)

    def patched(si: int, ps: PlacedSplit, r0: int, r1: int, release: str | None):
        lo = int(ps.starts[r0])
        try:
            buf = splits.read_array(ps.records_path, lo, int(ps.starts[r1 - 1] + ps.sizes[r1 - 1]) - lo,
                                    cache=False)
        except FileNotFoundError:
            buf = encode_stage.reencode_rows(ctx, si, r0, r1)
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
            stats["zones"].append(zonemap.build(zone, ps.phys[r0:r1] - seg["base_offset"], ps.ts[r0:r1]))
            lo, hi = int(ps.ts[r0:r1].min()), int(ps.ts[r0:r1].max())
            stats["min_ts"] = lo if stats["min_ts"] is None else min(stats["min_ts"], lo)
            stats["max_ts"] = hi if stats["max_ts"] is None else max(stats["max_ts"], hi)
            for a in range(r0, r1, RUN_ROWS):
                b = min(r1, a + RUN_ROWS)
                release = ps.records_path if b == r1 and last_use.get(piece["split"]) == use + k else None
                yield lambda si=piece["split"], ps=ps, a=a, b=b, rel_=release: patched(si, ps, a, b, rel_)

    def chunk(c):
        stats["new"] += len(c)
        hasher.submit(blocks.update, c)
        return c

    def stream(pool):
        for j, (records, release) in enumerate(in_order(pool, jobs(), threads + 1)):
            if j == n_runs // 2:
                fault("mid-segment-write")
            yield chunk(records)
            if release:
                splits.delete(release)       # written: its space freed (staged buffered: its dirty pages dropped unwritten)
                fault("after-records-released")
        if seg["close"]:
            yield chunk(commitlog.blank_record(seg["end_pos"], F))

    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            version.write_stream(stream(pool))
    finally:
        hasher.shutdown(wait=True)
    fault("after-segment-write")
    first = seg["pieces"][0]["phys_start"] if seg["pieces"] else None
    _, digests = blocks.finish()
    none = np.zeros(0, np.int64)
    zones = cast(zonemap.ZoneMap, zonemap.merge(zonemap.build(zone, none, none), *stats["zones"]))
    return StagedFile.of(dict(version.facts(stats["new"], digests, blocks.tail()), **{
        "kind": FileKind.COMMITLOG, "path": rel, "base_offset": seg["base_offset"],
        "file_size": F, "valid_bytes": seg["start_pos"] + stats["new"], "count_new": stats["count"],
        "first_new_offset": first, "end_offset": seg["base_offset"] + seg["end_pos"],
        "min_ts": stats["min_ts"], "max_ts": stats["max_ts"], "kept_bytes": seg["start_pos"],
        "zones": zonemap.to_detail(zones)}))


def write_file_group(ctx: WriteContext, group: dict):
    """Whole consume-queue and index files, built from the placed facts of the splits they draw
    on (``sources``: worked out by the driver from the splits' queue counts and entry ranges).
    Splits are placed one at a time; only the files' own units and entries are kept."""
    cfg = ctx.config
    store = storage.Store(ctx.store)
    splits = split_staging.staging_store(ctx.local_staging, store)
    tcfg = ctx.topics
    cqs, idxs = group[FileKind.CONSUMEQUEUE], group[FileKind.INDEX]
    units: list = [[] for _ in cqs]
    tag = attempt_tag()
    # Index entries go into their file's builder split by split (only the builder's slot table
    # and entry blocks are held, not every entry's facts, then their concatenation).
    index_files = [_IndexFileWrite(ctx, cfg, store, f["plan"], tag) for f in idxs]
    needed = {s for f in cqs + idxs for s in f["sources"]} | {f["pred_source"] for f in idxs
                                                             if f["pred_source"] is not None}
    for si in sorted(needed):
        ps = place_split(splits, ctx.split_places[si], tcfg)
        for i, f in enumerate(cqs):
            if si in f["sources"]:
                p = f["plan"]
                rows = ps.rows_of_queue((p["topic"], p["queue_id"]))
                q = ps.qoff[rows]
                rows = rows[np.searchsorted(q, p["first_unit"]):np.searchsorted(q, p["first_unit"] + p["count"])]
                units[i].append({"qoff": ps.qoff[rows], "phys": ps.phys[rows], "size": ps.sizes[rows].astype(np.int32),
                                 "tags": ps.tags[rows]})
        for w, f in zip(index_files, idxs):
            p = f["plan"]
            if f["pred_source"] == si:              # before this split's entries: it may hold both
                m = ps.imsg[p["first_entry"] - 1 - ps.entry_base]
                w.pred = (int(ps.phys[m]), int(ps.ts[m]))
            if si in f["sources"]:
                a = max(0, p["first_entry"] - ps.entry_base)
                b = min(len(ps.imsg), p["first_entry"] + p["count"] - ps.entry_base)
                m = ps.imsg[a:b]
                w.add(ps.entry_base + a, ps.ihash[a:b], ps.phys[m], ps.ts[m])
        del ps
    def cq_file(i: int, f: dict):
        return lambda: _write_cq_file(ctx, cfg, store, f["plan"], _concat_parts(units[i], CQ_DTYPES), tag)

    # Each file's write ends waiting on the disk (its fsync, behind the segment tasks' streams):
    # a few at once wait together rather than one after another.
    with ThreadPoolExecutor(max_workers=CQ_WRITES) as pool:
        yield from in_order(pool, (cq_file(i, f) for i, f in enumerate(cqs)), CQ_WRITES)
    for w in index_files:
        yield w.finish()


CQ_DTYPES = {"qoff": np.int64, "phys": np.int64, "size": np.int32, "tags": np.int64}
CQ_WRITES = 4        # consume-queue files a file task writes at once (a few MB each at most)


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


def _write_cq_file(ctx, cfg, store, plan, u, tag) -> StagedFile:
    rel = consumequeue.rel_path(plan["topic"], plan["queue_id"], plan["file_start_unit"])
    expect = np.arange(plan["first_unit"], plan["first_unit"] + plan["count"], dtype=np.int64)
    if len(u["qoff"]) != plan["count"] or not np.array_equal(u["qoff"], expect):
        raise IngestError(f"{rel}: units {len(u['qoff'])} do not match the plan ({plan['count']} from "
                          f"{plan['first_unit']})")
    kept = plan["kept_units"] * consumequeue.UNIT_SIZE
    version = FileVersion(ctx, store, rel, kept, cfg.cq_file_size, tag, "units")
    body = consumequeue.encode_units(u["phys"], u["size"], u["tags"]).tobytes()
    blocks = version.hasher()
    blocks.update(body)
    version.write_stream(_faulty_chunks([body], "mid-file-write"))
    _, digests = blocks.finish()
    # the committed units' physical offset range is their row's (no need to read them back)
    prior = version.prior["detail"] if version.prior else {}
    phys = [x for x in (prior.get("min_phys"), prior.get("max_phys")) if x is not None]
    if len(u["phys"]):
        phys += [int(u["phys"].min()), int(u["phys"].max())]
    return StagedFile.of(dict(version.facts(len(body), digests, blocks.tail()), **{
        "kind": FileKind.CONSUMEQUEUE, "path": rel, "topic": plan["topic"],
        "queue_id": plan["queue_id"], "base_offset": plan["file_start_unit"] * consumequeue.UNIT_SIZE,
        "file_size": cfg.cq_file_size, "valid_bytes": kept + len(body),
        "count": plan["kept_units"] + plan["count"],
        "min_offset": plan["file_start_unit"], "max_offset": plan["first_unit"] + plan["count"] - 1,
        "min_phys": min(phys) if phys else None, "max_phys": max(phys) if phys else None}))


class _IndexFileWrite:
    """One index file of the plan, filled split by split: ``add`` the entries (positions must
    follow on), then ``finish`` writes it (new: whole; continued: in place or as objects)."""

    def __init__(self, ctx, cfg, store, plan, tag):
        self.ctx, self.cfg, self.store, self.plan, self.tag = ctx, cfg, store, plan, tag
        self.pred = None               # (phys, ts) of the entry before the file (needs_pred)
        self.builder = None
        self.next_pos = plan["first_entry"]
        self.version = None

    def _start(self) -> IndexFileBuilder:
        plan, cfg = self.plan, self.cfg
        if plan["extend"]:
            self.builder, self.version = _continued_index_builder(self.ctx, cfg, self.store, plan, self.tag)
            return self.builder
        if plan["inherit"]:
            header = indexfile.IndexHeader.inherited(plan["inherit"]["end_phy_offset"], plan["inherit"]["end_timestamp"])
        elif plan["needs_pred"]:
            if self.pred is None:
                raise IngestError(f"index file {plan['ordinal']}: the entry before it was not found")
            header = indexfile.IndexHeader.inherited(*self.pred)
        else:
            header = indexfile.IndexHeader()
        self.builder = IndexFileBuilder(cfg, header)
        return self.builder

    def add(self, pos: int, key_hash, phys, ts) -> None:
        if pos != self.next_pos:
            raise IngestError(f"index file {self.plan['ordinal']}: entries from {pos}, expected {self.next_pos}")
        (self.builder or self._start()).put_keys(key_hash, phys, ts)
        self.next_pos += len(key_hash)

    def finish(self) -> StagedFile:
        plan = self.plan
        if self.next_pos != plan["first_entry"] + plan["count"]:
            raise IngestError(f"index file {plan['ordinal']}: {self.next_pos - plan['first_entry']} entries, "
                              f"plan says {plan['count']}")
        builder = self.builder or self._start()
        if plan["extend"]:
            return _continue_index_file(self.version, builder, self.cfg, plan)
        # a new file's name is given at the commit (creation order): stage it under its ordinal
        rel = f"{indexfile.DIR}/ordinal-{plan['ordinal']:06d}"
        version = FileVersion(self.ctx, self.store, rel, 0, self.cfg.index_file_size, self.tag, "file")
        if version.mode == "object":           # a paged head (storelib.ingest.paged_index)
            facts = paged_index.write_new(version, builder, self.cfg, lambda cs: _faulty_chunks(cs, "mid-file-write"))
        else:
            facts = version.write_whole(_faulty_chunks(builder.chunks(), "mid-file-write"))
        return StagedFile.of(dict(facts, **_index_facts(self.cfg, plan, builder), path=None))


def _continued_index_builder(ctx, cfg, store, plan, tag) -> tuple:
    """(builder, FileVersion) of a committed index file the batch continues: its committed header
    (the manifest's) and slot table; the committed entries stay where they are."""
    rel = plan["extend"]
    header = indexfile.IndexHeader(**ctx.committed[rel]["detail"]["header"])
    start = indexfile.entry_offset(header.index_count, cfg)
    version = FileVersion(ctx, store, rel, start, cfg.index_file_size, tag, "entries")
    if paged_index.is_paged(version.prior):             # only the pages the batch's keys touch
        paged = paged_index.PagedHead(version, cfg)
        builder = paged.builder(header)
        builder.paged = paged
        return builder, version
    raw = version.read_committed(indexfile.slot_offset(0), cfg.maxHashSlotNum * indexfile.SLOT_SIZE)
    slots = patches.settle_slots(store, rel, cfg, indexfile.decode_slots(raw), header.index_count)
    return IndexFileBuilder.for_append(cfg, header, slots), version


def _continue_index_file(version: FileVersion, builder: IndexFileBuilder, cfg, plan) -> StagedFile:
    """A committed index file continued: new entries after the committed ones, then the changed
    slot heads and the header (a patch, applied in that order; storelib.io.patches), or on object
    stores an object with the new entries and the new head (storelib.io.fragments)."""
    if getattr(builder, "paged", None) is not None:
        fault("mid-file-write")
        return StagedFile.of(dict(builder.paged.finish(builder), **_index_facts(cfg, plan, builder), path=version.rel))
    start = version.start
    entries = builder.new_entries()
    if version.mode == "object":
        # one head replaces the committed one: a row's extents stay few however many batches come
        parts = [(0, builder.header.to_bytes(cfg.line_4_9) + indexfile.encode_slots(builder.slots), patches.PHASE_LINK),
                 (start, entries, patches.PHASE_APPEND)]
    else:
        changed = np.flatnonzero(builder.slots != builder.committed_slots)
        parts = [(start, entries, patches.PHASE_APPEND)]
        parts += [(pos, data, patches.PHASE_LINK) for pos, data in patches.slot_extents(builder.slots, changed)]
        parts.append((0, builder.header.to_bytes(cfg.line_4_9), patches.PHASE_LINK))
    fault("mid-file-write")
    facts = version.write_parts(parts, builder.valid_bytes())
    return StagedFile.of(dict(facts, **_index_facts(cfg, plan, builder), path=version.rel))


def _index_facts(cfg, plan, builder) -> dict:
    return {"kind": FileKind.INDEX, "ordinal": plan["ordinal"], "file_size": cfg.index_file_size,
            "valid_bytes": builder.valid_bytes(), "count": builder.header.index_count - 1,
            "header": builder.header.to_dict(), "roll": plan["roll"]}


# ---------------------------------------------------------------------------- driver side
def version_context(store: storage.Store, snap, plan: sequencer.BatchPlan, config: StoreConfig, batch_id: str,
                    attempt: str) -> dict:
    """What every write task needs to place file versions (storelib.ingest.file_versions): the store's
    kind, this attempt, and the committed facts of every file the plan continues."""
    continued = [commitlog.rel_path(s.base_offset) for s in plan.segments if s.start_pos]
    continued += [consumequeue.rel_path(f.topic, f.queue_id, f.file_start_unit) for f in plan.cq_files if f.kept_units]
    continued += [f.extend for f in plan.index_files if f.extend]
    committed = {}
    if store.objects and snap is not None:      # the continued files' extent lists, read at once
        extentlists.prefetch(((r.path, r.detail) for r in (snap.files.get(rel) for rel in continued)
                              if r is not None and r.has_detail("extent_lists")), extentlists.fetcher(store))
    for rel in continued:
        row = snap.files.get(rel) if snap is not None else None
        if row is None:
            raise IngestError(f"{rel}: the plan continues it, but the committed snapshot does not list it")
        committed[rel] = file_versions.committed_facts(row, store)
    if store.objects:      # this batch's share of extent merges (storelib.io.fragments), file by file
        plan_m = fragments.plan_merges({rel: c["extents"] for rel, c in committed.items() if c["extents"]},
                                       int(fragments.MERGE_SHARE * plan.total_bytes))
        for rel, c in committed.items():
            c["merge"] = plan_m.get(rel, 0)
    return {"committed": committed, "objects": store.objects, "batch_id": batch_id, "attempt": attempt,
            "durable": config.durable}


def split_places(scans: list, plan: sequencer.BatchPlan, rr_starts: dict) -> dict:
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
        out[r["index"]] = {
            "meta": r["meta_path"], "records": r["records_path"], "rr_start": rr_starts.get(r["index"], {}),
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
        jobs.append((FileKind.CONSUMEQUEUE, {"plan": asdict(f), "sources": src}, f.count * 28 + (1 << 20)))
    for f in plan.index_files:
        lo, hi = f.first_entry, f.first_entry + f.count
        src = [i for i, a, b in entry_ranges if a < hi and b > lo]
        pred = next((i for i, a, b in entry_ranges if a <= lo - 1 < b), None) if f.needs_pred else None
        payload: dict[str, Any] = {"plan": asdict(f), "sources": src, "pred_source": pred}
        jobs.append((FileKind.INDEX, payload,
                     f.count * 40 + (8 << 20)))
    return jobs


# A file task places every split it draws on (``place_split``: its staged facts read and applied)
# once, whatever number of its files draw on it: in the weights of the file jobs, about this
# much per message of such a split.
PLACE_WEIGHT = 32


def _file_groups(jobs: list, n: int, split_weight: dict | None = None) -> list:
    """Spread the file jobs over at most ``n`` tasks, heaviest first. A job's cost in a task is
    its weight plus ``split_weight`` of each split it draws on that the task does not place
    already. It goes to the task where the task's load after it, plus twice its cost there, is
    least: an even spread, but files drawing on the same splits share a task rather than each
    task placing every split again (work added counts for more than an even spread: the cores
    are busy with the segment tasks meanwhile)."""
    n = max(1, min(n, len(jobs)))
    split_weight = split_weight or {}
    groups: list[dict[str, list]] = [{FileKind.CONSUMEQUEUE: [], FileKind.INDEX: []} for _ in range(n)]
    load = [0] * n
    drawn: list[set] = [set() for _ in range(n)]
    for kind, job, weight in sorted(jobs, key=lambda j: -j[2]):
        srcs = set(job["sources"]) | ({job["pred_source"]} if job.get("pred_source") is not None else set())
        cost = [weight + sum(split_weight.get(s, 0) for s in srcs - drawn[k]) for k in range(n)]
        k = min(range(n), key=lambda k: load[k] + 3 * cost[k])
        groups[k][kind].append(job)
        load[k] += cost[k]
        drawn[k] |= srcs
    return [g for g in groups if any(g.values())]


def _segment_payload(s: sequencer.SegmentPlan) -> dict:
    return {"base_offset": s.base_offset, "start_pos": s.start_pos, "end_pos": s.end_pos, "close": s.close,
            "pieces": [{"split": p.split, "row_start": p.row_start, "row_end": p.row_end,
                        "phys_start": p.phys_start, "entry_base": p.entry_base,
                        "queue_base": [[k[0], k[1], v] for k, v in p.queue_base.items()]} for p in s.pieces]}


def _chunk_segments(payloads: list, parallelism: int, file_size: int) -> list:
    """Consecutive runs of segments, one run per task: enough tasks to keep every core busy (and
    about one task per 256 MiB), without paying a task's overhead for every small segment."""
    if not payloads:
        return []
    by_size = -(-len(payloads) * file_size // (256 << 20))
    n = max(1, min(len(payloads), max(parallelism, by_size)))
    return [payloads[len(payloads) * k // n: len(payloads) * (k + 1) // n] for k in range(n)]


def write_tasks(plan: sequencer.BatchPlan, summaries: list, parallelism: int, file_size: int) -> tuple:
    """(segment tasks, file groups): runs of consecutive segments (the heaviest tasks), and the
    plan's consume-queue and index files spread over the cores the segment tasks leave free."""
    seg_tasks = _chunk_segments([_segment_payload(s) for s in plan.segments], parallelism, file_size)
    # File tasks run beside the segment tasks: use the cores those leave free (each file
    # task places every split it draws on, so more tasks than that only repeat work).
    jobs = _file_jobs(plan, summaries)
    file_bytes = sum(w for _, _, w in jobs)
    split_weight = {s.index: s.count * PLACE_WEIGHT for s in summaries}
    return seg_tasks, _file_groups(jobs, max(parallelism - len(seg_tasks), file_bytes // (256 << 20)), split_weight)


# Files of a batch whose records a broker placed (storelib.ops.mirror): the same writers.
write_cq_file = _write_cq_file
IndexFileWrite = _IndexFileWrite
__all__ += ["write_cq_file", "IndexFileWrite"]
