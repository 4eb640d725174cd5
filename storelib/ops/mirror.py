"""Mirror a running broker's store into a rocketlake store: one batch per cycle (``mirror_broker``).

A cycle copies the CommitLog records the broker added since the mirror's last batch, up to the
**safe point** (docs/DESIGN.md, "Mirroring a running broker"): whole records only, in CommitLog
order, each with a store time strictly before the broker's checkpoint ``physicMsgTimestamp``
(the store time of a record the broker had flushed when it wrote that value), so no record a
broker's recovery or a power cut could take back is ever copied. A BLANK record that closes a
segment is copied with the first safe record of the next segment.

The records' bytes are copied as they are; their consume-queue units and index entries are
derived from them as ``repair`` derives them (``ops.rebuild.dispatch_range``), continuing the
mirror's own files, so they come out byte-identical to the broker's for the same records; the
batch is staged and committed by the ingest's own machinery (``ingest.file_versions``,
``ingest.write``'s consume-queue and index writers, ``ingest.commit.commit_batch``): kill points,
the writer lease, publish and its redo are the ingest's.

The broker's directory is only read (``os.pread`` of files opened read-only: no lock, no
``abort`` file, no mapping), and only its regular files: a FIFO, a device, a socket or a directory
where a segment, a consume-queue or index file or the checkpoint is expected refuses the cycle
(``MirrorError``, exit 2) before a byte of it is read. What the broker deletes later stays in the
mirror until the mirror's own ``expire``. Divergence is never silent (``MirrorDiverged``, exit 3): the first batch records
the broker store's identity (its first record's digest); each cycle checks it, and the broker's
bytes under the mirror's last committed ones, before copying anything.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..codec import messages as codec
from ..compute import grouping, kernels
from ..errors import CorruptStore, MirrorDiverged, MirrorError, StorePathError
from ..format import commitlog, paths
from ..format.config import StoreConfig
from ..ingest import sequencer, write as write_stage
from ..ingest.commit import (StagedBatch, commit_batch, finish_pending_publish, is_committed, outcome_unknown,
                             undo_attempt)
from ..ingest.context import WriteContext
from ..ingest.driver import check_store_root, store_state
from ..ingest.file_versions import FileVersion, committed_facts
from ..ingest.staged_file import StagedFile
from ..io import checksum, extentlists, storage
from ..io.brokerlock import remove_made_dir
from ..io.condput import refuse_gs_store
from ..runtime.faults import fault
from ..runtime.progress import Progress
from ..table import rowcheck, writerlease, zonemap
from ..table.rows import FileKind, last_queue_files, recorded_config
from ..table.snapshots import StoreSnapshot, open_snapshot
from ..table.storeinfo import broker_config
from . import mirrorsource as source, rebuild
from .mirrorsource import BrokerFiles

__all__ = ["BrokerFiles", "safe_records", "mirror_broker", "WINDOW", "FIRST_WINDOW", "MAX_BATCH"]

WINDOW = 32 << 20               # bytes of a broker segment read at a time
FIRST_WINDOW = 1 << 20          # ... the first time in a cycle
MAX_BATCH = 512 << 20           # record bytes one cycle copies at most (the rest: the next cycle)
CQ_WRITERS = 4                  # consume-queue files of a cycle written at a time
DISPATCHERS = 2                 # threads dispatching a cycle's pieces
SWEEP_BYTES = 16 << 20          # committed bytes one cycle re-checks against the broker's (the rolling sweep)
_sweep_at: dict = {}            # store uri -> where this process's next sweep starts (cycles that commit nothing)


@dataclasses.dataclass
class _Piece:
    base: int                    # segment base offset
    pos: int                     # position of buf[0] in the segment
    buf: np.ndarray
    starts: np.ndarray           # record starts in buf (the safe ones)
    end: int                     # position in buf after the last safe record
    blank: bytes = b""           # the BLANK record closing the segment (with the next segment's records)
    fields: np.ndarray | None = None   # kernels.record_fields of the safe records (read once)


def safe_records(broker: BrokerFiles, start: int, safe_ts: int, file_size: int, limit: int = MAX_BATCH,
                 each=None) -> list:
    """The pieces of whole records from CommitLog offset ``start`` on whose store times are all
    in (0, ``safe_ts``), in order, at most about ``limit`` bytes; a segment's BLANK record comes
    with the first piece of the next segment (and is left out when no safe record follows).
    ``each(piece)``: called with each piece as it is read (a cycle dispatches it meanwhile)."""
    segs = dict(broker.segments())
    pieces: list = []
    pos, total, blank = start, 0, b""
    window = FIRST_WINDOW                        # a cycle that adds little reads little
    while total < limit:
        base = pos // file_size * file_size
        rel = segs.get(base)
        if rel is None:
            break
        off = pos - base
        want = min(window, file_size - off)
        raw = broker.read(rel, off, want, ahead=min(WINDOW, file_size - off - want))
        window = WINDOW
        buf = np.frombuffer(raw, np.uint8)
        starts, stop, reason = codec.record_starts(buf, 0, len(buf))
        take = len(starts)
        fields = None
        if take:
            fields = kernels.record_fields(buf, np.asarray(starts, np.int64))
            ts = fields[kernels.F_STORETS]
            bad = np.flatnonzero((ts <= 0) | (ts >= safe_ts))
            take = int(bad[0]) if len(bad) else take
        if take:
            end = int(starts[take - 1]) + int.from_bytes(raw[starts[take - 1]:starts[take - 1] + 4], "big")
            assert fields is not None                # read above whenever take > 0
            pieces.append(_Piece(base, off, buf, np.asarray(starts[:take], np.int64), end, blank,
                                 np.ascontiguousarray(fields[:, :take])))
            if each is not None:
                each(pieces[-1])
            blank, total = b"", total + end
        elif blank:
            break                                # nothing safe after the BLANK yet: it waits too
        if take < len(starts):
            break
        if reason == 1:                          # BLANK: the segment is closed, the next one follows
            blank = bytes(raw[stop:stop + commitlog.BLANK_SIZE])
            pos = base + file_size
            continue
        if reason == 2 and len(raw) == want and off + len(raw) < file_size and (stop > 0 or want < WINDOW):
            pos = base + off + stop               # a record runs past the window: read on from it
            continue
        if reason == 0 and stop > 0 and off + len(raw) < file_size:
            pos = base + off + stop
            continue
        break
    return pieces


def _sweep(broker: BrokerFiles, store: storage.Store, snap: StoreSnapshot, budget: int) -> int:
    """Re-check ``budget`` bytes (at least one checksum block) of the CommitLog range both the
    mirror and the broker still hold against the block digests the mirror committed, from where
    the last sweep ended, wrapping around at the mirror's end; MirrorDiverged naming the first
    differing offset. Returns where the next sweep starts. Damage in the middle of a range copied
    long ago is so found within (range / budget) cycles, at the cost of reading ``budget`` bytes
    of the broker (page cache, most likely) per cycle; the mirror's own bytes are read only to
    name the offset once a digest differs."""
    held = {rel for _, rel in broker.segments()}
    blocks = []                                  # (offset, row, block index, digest)
    for r in sorted(snap.of_kind(FileKind.COMMITLOG), key=lambda r: r.base_offset):
        if r.path not in held:
            continue
        digests = checksum.digests_from_detail(r.detail.get("blocks"))
        nblocks = -(-r.valid_bytes // checksum.BLOCK_SIZE)
        blocks += [(r.base_offset + i * checksum.BLOCK_SIZE, r, i, digests[i] if i < len(digests) else None)
                   for i in range(nblocks)]
    if not blocks:
        return 0
    at = _sweep_at.get(store.uri, _last_sweep(snap))
    k = next((j for j, b in enumerate(blocks) if b[0] >= at), 0)
    spent = 0
    for n in range(len(blocks)):
        off, r, i, digest = blocks[(k + n) % len(blocks)]
        lo = i * checksum.BLOCK_SIZE
        size = min(checksum.BLOCK_SIZE, r.valid_bytes - lo)
        theirs = broker.read(r.path, lo, size)
        if not theirs and not broker.holds(r.path):
            pass                                     # deleted since listed: the broker's retention
        elif digest is None or len(theirs) != size or checksum.block_digest(theirs) != digest:
            mine = source.committed_bytes(store, r, lo, size)
            if theirs != mine:
                m = min(len(theirs), len(mine))
                diff = np.flatnonzero(np.frombuffer(theirs, np.uint8, m) != np.frombuffer(mine, np.uint8, m))
                d = int(diff[0]) if len(diff) else m
                raise MirrorDiverged(f"{broker.root}: CommitLog offset {off + d} (copied by an earlier batch) differs "
                                     "from what the mirror committed there: the broker's file was damaged or "
                                     "replaced; the mirror keeps its batches (check the broker with `rocketlake "
                                     "inspect --store BROKER_DIR verify --deep`); " + source.new_mirror(broker))
        spent += size
        if spent >= budget:
            break
    nxt = blocks[(k + n + 1) % len(blocks)][0]       # (every block checked: where this sweep started)
    _sweep_at[store.uri] = nxt
    return nxt


def _last_sweep(snap: StoreSnapshot) -> int:
    """Where the newest mirror batch recorded its next sweep to start (0 without one)."""
    for b in reversed(snap.batches):
        m = b.detail.get("mirror")
        if m:
            return int(m.get("sweep", 0))
    return 0


# ---------------------------------------------------------------------------- one batch
def _continuable(snap: StoreSnapshot, state: sequencer.StoreState) -> list:
    """The rows a cycle can continue: a cycle appends at the mirror's ends only, so to its last
    segment (or closes it with a BLANK), each queue's last consume-queue file and the newest
    index file; the files behind them it never writes, nor reads their extent lists."""
    segments = snap.of_kind(FileKind.COMMITLOG)              # (by path: by start offset)
    rows = segments[-1:] + list(last_queue_files(snap.files.values()).values())
    tail = snap.files.get(state.index_tail.rel_path) if state.index_tail is not None else None
    return rows + [tail] if tail is not None else rows


class _Batch:
    """What one cycle stages: its file versions and the plan/summary ``commit_batch`` takes."""

    def __init__(self, store, snap, state, cfg: StoreConfig, batch_id: str, attempt: str):
        self.store, self.snap, self.state, self.cfg = store, snap, state, cfg
        self.staging = f"{paths.STAGING_DIR}/{batch_id}/{attempt}"
        rows = _continuable(snap, state) if snap.batch else []
        if store.objects:                 # their extent lists, read at once
            extentlists.prefetch(((r.path, r.detail) for r in rows if r.has_detail("extent_lists")),
                                 extentlists.fetcher(store))
        committed = {r.path: committed_facts(r, store) for r in rows}
        for facts in committed.values():
            facts["detail"] = facts["detail"] or {}
        # topics None: the mirror's queues come from the broker's records, no topic config shapes them
        self.ctx = WriteContext(store=store.uri, config=cfg, topics=None,  # type: ignore[arg-type]
                                staging=self.staging, committed=committed,
                                objects=store.objects, batch_id=batch_id, attempt=attempt, durable=cfg.durable)
        self.tag = "mirror"

    def write_segments(self, pieces: list) -> list:
        """Stage the segment versions: each segment's new records (a BLANK that closes a segment
        goes to that segment, after its committed or new records), sha256 beside each write;
        ``[(base, version, start, new bytes, digests, tail, (first row, end row))]`` for
        ``segment_facts``. Needs no dispatch: ``_commit`` runs it on a thread beside that."""
        F = self.cfg.mappedFileSizeCommitLog
        groups: dict = {}
        row = 0
        for p in pieces:
            if p.blank:
                g = groups.setdefault(p.base - F, {"start": self._open_end(p.base - F), "chunks": [], "rows": [row, row]})
                g["chunks"].append(p.blank)
            g = groups.setdefault(p.base, {"start": p.pos, "chunks": [], "rows": [row, row]})
            g["chunks"].append(p.buf[:p.end])          # (a view: the writer copies it once, into its buffers)
            row += len(p.starts)
            g["rows"][1] = row
        return [self._write_segment(base, g["start"], g["chunks"]) + (g["rows"],) for base, g in groups.items()]

    def _open_end(self, base: int) -> int:
        """Valid bytes of the mirror's committed segment at ``base`` (one the batch closes)."""
        r = self.snap.files.get(commitlog.rel_path(base)) if self.snap.batch else None
        return r.valid_bytes if r else 0

    def _write_segment(self, base: int, start: int, chunks: list) -> tuple:
        F = self.cfg.mappedFileSizeCommitLog
        rel = commitlog.rel_path(base)
        version = FileVersion(self.ctx, self.store, rel, start, F, self.tag, "records")
        blocks = version.hasher()
        new = sum(len(c) for c in chunks)
        with ThreadPoolExecutor(max_workers=1) as pool:      # sha256 beside the write (both release the GIL)
            def hash_all() -> None:
                for c in chunks:
                    blocks.update(c)
            hashed = pool.submit(hash_all)
            try:
                version.write_stream(iter(chunks))
            finally:
                hashed.result()
        fault("after-segment-write")
        _, digests = blocks.finish()
        return base, version, start, new, digests, blocks.tail()

    def segment_facts(self, written: list, d: rebuild.Dispatch) -> list:
        """The facts of the segment versions ``write_segments`` staged, with their records' dispatch."""
        F = self.cfg.mappedFileSizeCommitLog
        out = []
        for base, version, start, new, digests, tail, (r0, r1) in written:
            phys, ts = d.phys[r0:r1], d.store_ts[r0:r1]
            has = r1 > r0
            zones = zonemap.build(zonemap.zone_bytes(F), phys - base, ts)
            end = int(phys[-1]) + int(d.size[r1 - 1]) if has else base + start
            out.append(StagedFile.of(dict(version.facts(new, digests, tail), **{
                "kind": FileKind.COMMITLOG, "path": version.rel, "base_offset": base, "file_size": F,
                "valid_bytes": start + new, "count_new": r1 - r0, "first_new_offset": int(phys[0]) if has else None,
                "end_offset": end, "min_ts": int(ts.min()) if has else None, "max_ts": int(ts.max()) if has else None,
                "kept_bytes": start, "zones": zonemap.to_detail(zones)})))
        return out

    def queues(self, d: rebuild.Dispatch, groups: list, queue_next: dict, broker: BrokerFiles) -> tuple:
        """(facts, plans) of the consume-queue files the records' units continue or create
        (``groups``: ``_queue_groups``); the files are written on a few threads (each one's
        time is mostly its fsyncs)."""
        U = self.cfg.cq_units_per_file
        plans, units = [], []
        for key, rows in groups:
            first = queue_next.get(key, 0)
            offs = d.queue_offset[rows]
            if offs[0] != first or not np.array_equal(offs, np.arange(first, first + len(rows))):
                k = int(np.flatnonzero(offs != np.arange(first, first + len(rows)))[0])
                at = f"queue {key[0]}/{key[1]}: the record at CommitLog offset {int(d.phys[rows[k]])}"
                if int(offs[k]) == 0:
                    # a broker's deleteTopic drops the topic's queues with their offsets: the topic
                    # created again (by an admin or a producer) numbers its queues from 0
                    raise MirrorDiverged(f"{at} starts the queue over at queue offset 0 (the mirror's continues at "
                                         f"{first + k}): the broker deleted the topic and it was created again, "
                                         "which restarts its queues; a mirror cannot take a queue back to 0 (the "
                                         "mirror keeps every batch it committed), nor can a new one (it starts at "
                                         "the broker's first record and meets the same restart): " + source.ADOPT)
                raise MirrorDiverged(f"{at} has queue offset {int(offs[k])}, the mirror's queue continues at "
                                     f"{first + k}: the broker's queues no longer follow the mirror's; "
                                     + source.new_mirror(broker))
            hi = first + len(rows)
            for f in range(first // U, (hi - 1) // U + 1):
                lo_u, hi_u = max(first, f * U), min(hi, (f + 1) * U)
                sel = rows[lo_u - first:hi_u - first]
                plan = {"topic": key[0], "queue_id": key[1], "file_start_unit": f * U,
                        "kept_units": lo_u - f * U, "first_unit": lo_u, "count": hi_u - lo_u}
                units.append({"qoff": d.queue_offset[sel], "phys": d.phys[sel],
                              "size": d.size[sel].astype(np.int32), "tags": d.tags[sel]})
                plans.append(plan)
            queue_next[key] = hi
        if not plans:
            return [], plans
        with ThreadPoolExecutor(max_workers=min(CQ_WRITERS, len(plans))) as pool:
            out = list(pool.map(lambda pu: write_stage.write_cq_file(self.ctx, self.cfg, self.store, pu[0], pu[1], self.tag),
                                zip(plans, units)))
        return out, plans

    def index(self, d: rebuild.Dispatch) -> tuple:
        """(facts, plans) of the index files the records' keys continue or create."""
        n, entries = len(d.phys), len(d.key_hash)
        last_entry = int(d.key_msg[-1]) if entries else -1
        plans = sequencer.plan_index_files(self.state, entries, n, last_entry, self.cfg)
        out = []
        for p in plans:
            w = write_stage.IndexFileWrite(self.ctx, self.cfg, self.store, dataclasses.asdict(p), self.tag)
            if p.needs_pred:
                last = int(d.key_msg[p.first_entry - 1])
                w.pred = (int(d.phys[last]), int(d.store_ts[last]))
            if p.count:
                a, b = p.first_entry, p.first_entry + p.count
                m = d.key_msg[a:b]
                w.add(a, d.key_hash[a:b], d.phys[m], d.store_ts[m])
            out.append(w.finish())
        return out, plans


class _Dispatcher:
    """The pieces of a cycle dispatched (``rebuild.dispatch_range``) on ``DISPATCHERS`` threads
    (its kernels release the GIL) as ``safe_records`` reads them; ``result`` checks them in
    order: the first damaged or moved record refuses the cycle."""

    def __init__(self, cfg: StoreConfig):
        self.cfg, self.pool = cfg, ThreadPoolExecutor(max_workers=DISPATCHERS)
        self.futures: list[Future[dict]] = []

    def submit(self, p: _Piece) -> None:
        self.futures.append(self.pool.submit(rebuild.dispatch_range, p.buf, p.starts, self.cfg, p.fields))

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def result(self, pieces: list, broker: BrokerFiles) -> rebuild.Dispatch:
        return _dispatch(pieces, [f.result() for f in self.futures], broker)


def _dispatch(pieces: list, done: list, broker: BrokerFiles) -> rebuild.Dispatch:
    """The pieces' dispatch (``done``: ``rebuild.dispatch_range`` of each), checked in order and joined."""
    parts = []
    for p, part in zip(pieces, done):
        at = p.base + p.pos + p.starts
        rel = commitlog.rel_path(p.base)
        if part["cut"] is not None:
            raise CorruptStore(os.path.join(broker.root, rel), p.pos + int(p.starts[part["cut"]]),
                               "a damaged record before the broker's safe point: nothing was mirrored")
        bad = np.flatnonzero(part["phys"] != at)
        if len(bad):
            k = int(bad[0])
            raise MirrorDiverged(f"{broker.root}: the record at CommitLog offset {int(at[k])} says it is at "
                                 f"{int(part['phys'][k])}: the broker's files were replaced or damaged; nothing was "
                                 "mirrored")
        part.update(rel=rel, base=p.base, stop=p.pos + p.end, reason=0)
        parts.append(part)
    return rebuild.join_dispatch(parts)


def mirror_broker(broker_dir: str, store_uri: str, config: StoreConfig | None = None, quiet: bool = False,
                  max_bytes: int = MAX_BATCH, every: float | None = None) -> dict:
    """One mirror cycle: the broker's records past the mirror's end, up to the safe point, as one
    committed batch of ``store_uri``; the summary (``status`` ``committed`` or ``nothing-new``).
    ``every``: this process runs a cycle every so many seconds (``mirror --every``: a batch
    records it, and a second such process on this host is refused, ``mirrorsource.check_one_mirror``)."""
    refuse_gs_store(store_uri)              # before anything there is read
    t0 = time.time()
    prog = Progress(quiet)
    broker = BrokerFiles(broker_dir)
    store = storage.Store(store_uri)
    real = os.path.realpath(broker.root)      # (either may be named through a symbolic link)
    if store.os_paths and (os.path.realpath(store.root) + os.sep).startswith(real + os.sep):
        raise MirrorError(f"{store.uri}: the mirror cannot live inside the broker's directory {broker.root}")
    me = source.this_run(every)
    lease = writerlease.WriterLease(store, "mirror")
    fresh_meta = not store.exists(paths.META_DIR)
    fresh_root = store.os_paths and not os.path.exists(store.root)
    lease.acquire()
    committed = False
    dispatcher = None
    try:
        snap = open_snapshot(store, history=True, queue_offsets=False)
        rowcheck.check_snapshot(snap)        # never publishes or appends on rows verify rejects
        if snap.batch is None:
            check_store_root(store, snap)
            if not broker.segments() or config is None and not broker.shaped():
                prog.say("waiting for the broker's first CommitLog segment, consume-queue and index files (their "
                         "sizes shape the mirror's; or pass the broker's properties as config)")
                return {"status": "nothing-new", "messages": 0, "from": 0, "to": 0, "source": broker.root}
            try:
                cfg = broker_config(storage.Store(broker.root), config, config).config
            except StorePathError as e:      # a FIFO, a device, a link out where a file's size is read
                raise MirrorError(f"the broker's directory {broker.root}: {e}; nothing was mirrored by this "
                                  "cycle") from None
            ident = None                         # read once its first record is safe (final)
            source.identity(broker)                    # (a CommitLog that no longer starts at 0: refused now)
        else:
            cfg = recorded_config(snap.batch, config)
            ident = source.mirror_identity(snap, store)
            source.check_one_mirror(snap, store, me)
            source.check_only_mirrored(snap, store)
            finish_pending_publish(store, snap, cfg)
        state = store_state(snap)
        start = state.next_phys
        if snap.batch is not None:
            assert ident is not None                 # a mirror's batch recorded it
            source.check_broker(broker, store, snap, ident, start)
            sweep = _sweep(broker, store, snap, SWEEP_BYTES)
        else:
            sweep = 0
        safe_ts = broker.physic_timestamp()
        read_ms = int(time.time() * 1000)
        dispatcher = _Dispatcher(cfg)
        pieces = safe_records(broker, start, safe_ts, cfg.mappedFileSizeCommitLog, max_bytes, dispatcher.submit)
        base = {"from": start, "safe_timestamp": safe_ts, "source": broker.root}
        if not pieces:
            committed = snap.batch is not None
            prog.say(f"nothing new below the safe point (physicMsgTimestamp {safe_ts}) from offset {start}")
            return dict(base, status="nothing-new", messages=0, to=start, seconds=round(time.time() - t0, 3))
        ident = ident or source.identity(broker)
        end = pieces[-1].base + pieces[-1].pos + pieces[-1].end
        mirror_detail = {"identity": ident, "from": start, "to": end, "safe_timestamp": safe_ts, "source": broker.root,
                         "sweep": sweep, "run": me}
        out, d = _commit(store, snap, state, cfg, pieces, dispatcher, broker, mirror_detail, t0, prog, lease)
        committed = True
        now = int(time.time() * 1000)
        # lag_ms: the age of the newest record at its commit; safe_age_ms: the age of the broker's
        # safe point then; safe_read_age_ms: its age when this cycle read it (the least lag any
        # reader of flushed records could have: the rest is the cycle's own time)
        return dict(out, **base, to=end, lag_ms=now - int(d.store_ts[-1]), safe_age_ms=now - safe_ts,
                    safe_read_age_ms=read_ms - safe_ts)
    finally:
        if dispatcher is not None:
            dispatcher.close()
        lease.release()
        if not committed and fresh_meta and storage.remove_dir_if_empty(store, paths.META_DIR) and fresh_root:
            remove_made_dir(store.root)             # a refused first cycle into a new directory leaves none


def _commit(store, snap, state, cfg: StoreConfig, pieces: list, dispatcher: _Dispatcher, broker: BrokerFiles,
            mirror_detail: dict, t0: float, prog, lease) -> tuple:
    """Stage the batch's file versions and commit them (``commit_batch``): the segments' bytes
    are written on a thread while the records are dispatched (``dispatcher``: their queue units
    and index entries, and the checks that refuse damaged or moved records) and this thread
    writes the consume-queue and index files; an attempt that does not commit is undone (after
    the thread is done). (summary, dispatch)."""
    start, end = mirror_detail["from"], mirror_detail["to"]
    batch_id = f"mirror-{start:020d}-{end:020d}"
    attempt = uuid.uuid4().hex[:12]
    b = _Batch(store, snap, state, cfg, batch_id, attempt)
    committed = committing = False
    failed: BaseException | None = None
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        written = pool.submit(b.write_segments, pieces)
        d = dispatcher.result(pieces, broker)
        groups = _queue_groups(d)
        queue_next = dict(state.queue_next)
        cq, cq_plans = b.queues(d, groups, queue_next, broker)
        idx, idx_plans = b.index(d)
        results = b.segment_facts(written.result(), d) + cq + idx
        fault("after-files-staged")
        plan = sequencer.BatchPlan(segments=[r for r in results if r.kind == FileKind.COMMITLOG], cq_files=cq_plans,
                                   index_files=idx_plans, messages=len(d.phys),
                                   total_bytes=int(d.size.sum(dtype=np.int64)), entries=len(d.key_hash),
                                   next_phys=end, queue_next=queue_next,
                                   index_entry_starts=[p.first_entry for p in idx_plans])
        fingerprint = hashlib.sha256(json.dumps([mirror_detail["identity"], start, end, results[0].checksum])
                                     .encode()).hexdigest()
        staged = StagedBatch(snap, state, plan, [_summary(d, groups)], results, batch_id, fingerprint, b.staging,
                             attempt=attempt, detail_extra={"mirror": mirror_detail}, operation="mirror")
        committing = True
        out = commit_batch(store, staged, cfg, t0, prog, lease=lease)
        committed = True
        return out, d
    except BaseException as e:
        failed = e
        raise
    finally:
        pool.shutdown(wait=True)
        if not committed:
            # (a batch committed before its publish failed keeps its staging: the next cycle publishes it)
            try:
                if not outcome_unknown(store, failed, committing) and not is_committed(store, batch_id, attempt):
                    undo_attempt(store, b.staging, batch_id, attempt)
            except Exception:  # noqa: BLE001 - the next writer removes what is left
                pass


def _queue_groups(d: rebuild.Dispatch) -> list:
    """``[((topic, queue id), rows)]``: the records with a consume-queue unit by queue, in topic
    then queue id order, each queue's rows in CommitLog order (one counting pass,
    ``grouping.group_rows``, over codes made dense)."""
    m = np.flatnonzero(d.cq)
    if not len(m):
        return []
    t, q = d.topic[m].astype(np.int64), d.queue_id[m].astype(np.int64)
    q0 = int(q.min())
    span = int(q.max()) - q0 + 1
    codes, ncodes = t * span + (q - q0), len(d.topics) * span
    if ncodes > len(m):                          # sparse codes: numbered in order first
        keys, codes = np.unique(codes, return_inverse=True)
        ncodes = len(keys)
    else:
        keys = np.arange(ncodes)
    order, bounds = grouping.group_rows(codes, ncodes)
    return [((d.topics[int(keys[c]) // span], int(keys[c]) % span + q0), m[order[bounds[c]:bounds[c + 1]]])
            for c in np.flatnonzero(np.diff(bounds)).tolist()]


def _summary(d: rebuild.Dispatch, groups: list) -> sequencer.SplitSummary:
    ts = d.store_ts
    cq = np.flatnonzero(d.cq)
    counts = {key: len(rows) for key, rows in groups}
    return sequencer.SplitSummary(
        index=0, count=len(d.phys), total_bytes=int(d.size.sum(dtype=np.int64)), queue_counts=counts,
        entries=len(d.key_hash), last_entry_row=int(d.key_msg[-1]) if len(d.key_hash) else -1,
        last_store_ts=int(ts[-1]), last_cq_store_ts=int(ts[cq[-1]]) if len(cq) else None,
        last_wait_store_ts=int(ts[-1]), min_store_ts=int(ts.min()), max_store_ts=int(ts.max()),
        first_store_ts=int(ts[0]))
