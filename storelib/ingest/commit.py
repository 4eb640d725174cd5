"""Stage 4 of an ingest, commit (driver): the moment a batch becomes part of the store.

In order (``commit_batch``):

1. the write stage's file facts are checked complete, and new index files get their names
   (creation order, strictly increasing millis: RocketMQ loads them sorted by name);
2. the checkpoint file (last message, last consume-queue message, last rolled index file's end)
   is staged beside the batch's other files;
3. one manifest row per staged file and the batch's checkpoint row (``manifest.file_row`` /
   ``manifest.checkpoint_row``);
4. the conditional Delta commits (``manifest.commit``), each right after a check that the
   writer still holds its lease: manifest rows, then the checkpoint row, the switch that makes
   the batch visible;
5. publish (``publish``), driven by the batch's manifest rows: patches applied to the files the
   batch continues in place (storelib.io.patches), staged new files renamed to their names; then
   this attempt's staging directory is removed (``drop_staging``), and what attempts that never
   committed left behind (``clear_dead_attempts``).

Until the switch no byte of a store file outside ``_rocketlake/`` changes, so a batch killed
before it leaves nothing a reader or a broker could see. A crash after the switch leaves a
committed batch whose publish is unfinished: its staging directory is still there, readers read
its files through it (storelib.table.storefiles), and the next operation that takes the lease redoes
the publish (``finish_pending_publish``) before anything else. Staging of attempts that never
committed is removed only by a writer whose own commit went through: a stalled writer's switch
can then no longer succeed (the tables moved on), so nothing a committed row needs is deleted.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from typing import Any, Callable, Union

import numpy as np

from ..format import checkpoint as ckpt, indexfile, paths
from ..table import deltacommit, manifest, snapcache, staged_deletes, writerlease, zonemap
from ..table.rows import BatchRow, FileKind, ManifestRow, batch_rows, manifest_rows
from ..table.snapshots import StoreSnapshot, open_snapshot
from ..io import checksum, fragments, patches, storage
from . import sequencer
from .staged_file import DamagedFile, StagedFile, staged_files
from ..format.config import StoreConfig
from ..errors import ConcurrentWriteError, CorruptStore, IngestError, LeaseLost
from ..runtime.faults import fault
from ..runtime import interrupts
from ..runtime.milestones import mark
from ..runtime.progress import Progress

# A committed snapshot as a writer holds it (open_snapshot's, or the Delta tables' own read).
Snap = Union[manifest.Snapshot, StoreSnapshot]

__all__ = ["StagedBatch", "commit_batch", "after_commit", "let_go", "publish", "pending_publishes",
           "finish_pending_publish", "clear_dead_attempts",
           "outcome_unknown", "abandon_attempt", "undo_attempt", "drop_staging", "is_committed"]


@dataclass(frozen=True)
class StagedBatch:
    """A batch whose files the write stage staged, as ``commit_batch`` takes it."""
    snap: Snap                        # the committed snapshot it continues
    state: sequencer.StoreState       # that snapshot's state (``driver.store_state``)
    plan: sequencer.BatchPlan
    summaries: list                   # the encode stage's split summaries
    results: list                     # the staged files' facts (the write tasks')
    batch_id: str
    fingerprint: str
    staging: str                      # where this attempt staged them
    attempt: str | None = None
    detail_extra: dict | None = None  # more of the checkpoint row's detail (topics, mirror)
    operation: str = "ingest"         # what its checkpoints row records (``mirror`` for a mirror cycle's)


def commit_batch(store: storage.Store, batch: StagedBatch, config: StoreConfig, t0: float, prog,
                 lease: writerlease.WriterLease | None = None) -> dict:
    """Commit and publish ``batch``; returns the batch's summary. ``prog``: a
    ``progress.Progress``; ``lease``: the writer's lease, checked before each commit."""
    snap, state, plan, summaries, staging = batch.snap, batch.state, batch.plan, batch.summaries, batch.staging
    seq = snap.batch_seq + 1
    now = manifest.now_ms()
    segs, cqs, idxs = _written_files(plan, batch.results)
    idxs = _name_index_files(snap, summaries, idxs, now)
    ck = _checkpoint(snap, state, summaries, idxs, cqs if config.line_5_5 else None)
    ck_bytes = ck.to_bytes()
    key = dict(batch_id=batch.batch_id, batch_seq=seq, committed_at=now, attempt_id=batch.attempt)
    rows = _file_rows(snap, segs, cqs, idxs, key)
    rows.append(_checkpoint_file_row(store, batch, ck, ck_bytes, config, key))
    counts = (len(segs), len(cqs), len(idxs))
    del segs, cqs, idxs                   # (their rows say it all: not held through the commit)
    detail = dict({"segments": counts[0], "consumequeue_files": counts[1], "index_files": counts[2]},
                  **(batch.detail_extra or {}))
    checkpoint_row = _checkpoint_row(batch, ck, config, t0, key, detail)
    # Every file of the batch is staged on stable storage by now (the write tasks and the
    # checkpoint write fsync'd them: flushDiskType=SYNC_FLUSH), and so is every directory that
    # leads to them (a directory some task created without fsync included), so the switch below
    # never makes visible a batch a power cut could take back.
    mark("commit sync-tree")
    if config.durable:
        store.sync_tree(staging)
    mark("commit delta")
    fault("before-delta-commit")
    assert snap.versions is not None, "a writer continues a snapshot read from the Delta tables (open_snapshot history=True)"
    committed = manifest.commit(store, snap.versions, rows, checkpoint_row, fault=fault, durable=config.durable,
                                lease=lease)
    interrupts.committed()                 # a SIGTERM from here on lets the job finish (exit 0)
    prog.say(f"committed batch {batch.batch_id} as seq {seq}")
    fault("after-commit-before-publish")
    summary = _summary(batch, seq, counts, t0, prog)

    def settle() -> None:
        mark("commit publish")
        publish(store, rows, durable=config.durable, lease=lease)
        fault("after-publish-before-cleanup")
        mark("commit drop-staging")
        drop_staging(store, staging, durable=config.durable)
        clear_dead_attempts(store, [*snap.batches, checkpoint_row], lease)
    published = after_commit(batch.batch_id, lease, settle)
    mark("commit snapcache")
    if published:
        snapcache.refresh(store, committed)    # readers open this snapshot without Delta/pyarrow
    let_go(snap, committed)
    return summary if published else dict(summary, published=False)


def after_commit(batch_id: str, lease: writerlease.WriterLease | None, steps: Callable[[], None]) -> bool:
    """Run a committed batch's publish and clean-up (``steps``) while this writer still holds the
    store's lease (checked first; ``publish`` and ``clear_dead_attempts`` check it again); whether
    they all ran. A writer that stalled past its lease after the switch stops there with a warning,
    its batch committed: the writer that took the store over finishes the publish first thing
    (``finish_pending_publish``), as after a crash at that point, and this one must not touch the
    store again (it could clear the attempt that writer is staging)."""
    try:
        if lease is not None:
            lease.check()
        steps()
        return True
    except LeaseLost as e:
        Progress.warn(f"batch {batch_id!r} is committed, but this writer lost the store's lease after its "
                      f"commit ({e}); the rest of its publish (an expiry's: its deletes) is the next writer's")
        return False


def let_go(*snaps: Any) -> None:
    """Break the cycle each of ``snaps`` is in (its ``versions.latest`` is itself: what a commit on
    top of it needs), once no commit is made on top of it again: the snapshot the batch opened,
    the one its commit returned. The driver's memory is then freed by reference counting as soon
    as the caller lets them go, not by some later full collection: at 10^10 messages each holds
    ~165,000 rows, and both were still alive when the next batch read the table's 330,000."""
    for s in snaps:
        versions = getattr(s, "versions", None)
        if versions is not None:
            versions.latest = None


def _written_files(plan: sequencer.BatchPlan, results: list[Any]) -> tuple[list[StagedFile], ...]:
    """(segments, consume-queue files, index files in plan order) the write stage staged; every
    file of the plan, or IngestError (``CorruptStore`` if a write task found a continued file
    damaged)."""
    files = staged_files(results)
    damaged = [r for r in files if isinstance(r, DamagedFile)]
    if damaged:
        raise CorruptStore(damaged[0].path, damaged[0].offset, damaged[0].what)
    staged = [r for r in files if isinstance(r, StagedFile)]
    segs = [r for r in staged if r.kind == FileKind.COMMITLOG]
    cqs = [r for r in staged if r.kind == FileKind.CONSUMEQUEUE]
    idxs = sorted((r for r in staged if r.kind == FileKind.INDEX), key=lambda r: r.ordinal or 0)
    if len(segs) != len(plan.segments) or len(cqs) != len(plan.cq_files) or len(idxs) != len(plan.index_files):
        raise IngestError(f"incomplete write stage: {len(segs)}/{len(plan.segments)} segments, "
                          f"{len(cqs)}/{len(plan.cq_files)} consume queue files, "
                          f"{len(idxs)}/{len(plan.index_files)} index files")
    return segs, cqs, idxs


def _name_index_files(snap: Snap, summaries: list, idxs: list[StagedFile], now: int) -> list[StagedFile]:
    """``idxs`` with the new files named: creation order, strictly increasing (RocketMQ loads them
    sorted by name)."""
    existing_idx = snap.of_kind(FileKind.INDEX)
    prev_ms = indexfile.name_millis(existing_idx[-1].path.split("/")[-1]) if existing_idx else 0
    prev_ms = prev_ms or 0
    first_ts = next((s.first_store_ts for s in summaries if s.count), None) or now
    named = []
    for r in idxs:
        if r.path is None:
            begin = _header(r).begin_timestamp
            ms = indexfile.name_time(prev_ms, begin if begin > 0 else first_ts)
            r = r.named(f"{indexfile.DIR}/{indexfile.file_name(ms)}")
            prev_ms = ms
        named.append(r)
    return named


def _header(r: StagedFile) -> indexfile.IndexHeader:
    return indexfile.IndexHeader(**(r.header or {}))


def _checkpoint(snap: Snap, state: sequencer.StoreState, summaries: list, idxs: list,
                cqs: list | None = None) -> ckpt.Checkpoint:
    """Checkpoint file: last waiting put (a put without WAIT=true flushes without setting
    physicMsgTimestamp), last consume-queue message, last rolled index file's end."""
    prev_ck = ckpt.Checkpoint(snap.batch.physic_msg_timestamp, snap.batch.logics_msg_timestamp,
                              snap.batch.index_msg_timestamp) if snap.batch else ckpt.Checkpoint()
    waited = np.array([s.last_wait_store_ts or 0 for s in summaries], np.int64)     # each split's, in order
    physic = ckpt.physic_msg_timestamp(waited, np.array([s.last_wait_store_ts is not None for s in summaries]),
                                       prev_ck.physic_msg_timestamp) or 0
    cq_last = [s.last_cq_store_ts for s in summaries if s.last_cq_store_ts is not None]
    logics = ckpt.logics_msg_timestamp(cq_last[-1] if cq_last else None, prev_ck.logics_msg_timestamp,
                                       line_5_5=cqs is not None)
    index_ts = prev_ck.index_msg_timestamp
    prev_end = state.index_tail.header["end_timestamp"] if state.index_tail else None
    for r in idxs:
        if r.roll and prev_end is not None and prev_end > 0:
            index_ts = prev_end
        prev_end = _header(r).end_timestamp
    if cqs is None:
        return ckpt.Checkpoint(physic, logics, index_ts)
    prev_row = snap.files.get(ckpt.FILE_NAME) if snap.batch else None
    prev_lpo = prev_row.detail.get("logics_physical_offset", 0) if prev_row else 0
    new = [r.max_phys for r in cqs if r.max_phys is not None]
    return ckpt.Checkpoint(physic, logics, index_ts, logics_physical_offset=max(new) if new else prev_lpo)


def _checkpoint_file_row(store: storage.Store, batch: StagedBatch, ck: ckpt.Checkpoint, ck_bytes: bytes,
                         config: StoreConfig, key: dict) -> ManifestRow:
    """The checkpoint file, staged (local: renamed at publish) or as an object of this attempt
    (object stores: the row's extents), and its row."""
    detail: dict[str, Any] = dict(ck.to_dict())
    if store.atomic_rename:
        where = f"{batch.staging}/files/driver/{ckpt.FILE_NAME}"
    else:
        where = fragments.object_rel(batch.batch_id, batch.attempt or "driver", "driver", ckpt.FILE_NAME, "file")
        detail["extents"] = [[0, len(ck_bytes), where, 0]]
    store.write_file(where, [ck_bytes], durable=config.durable)
    return _row(FileKind.CHECKPOINT, ckpt.FILE_NAME, staged_path=where if store.atomic_rename else None,
                file_size=ckpt.FILE_SIZE, valid_bytes=ckpt.FILE_SIZE, count=0,
                checksum=checksum.checksum_of_bytes(ck_bytes), detail=manifest.dumps(detail), **key)


def _row(kind: str, path: str, **columns: Any) -> ManifestRow:
    """``manifest.file_row`` as the ``ManifestRow`` the commit holds (built typed, so the commit's
    compaction and the snapshot it returns take these rows, not a copy of each: 160,000 rows a
    batch at 10^10 messages)."""
    return ManifestRow(manifest.file_row(kind, path, **columns))


def _file_detail(r: StagedFile, **extra: Any) -> str:
    """A written file's row detail: its block digests (and the running state of the last,
    unfinished one: ``tail``), its extents (object stores), the patch that
    continues it in place (local stores: applied at publish, from the staged file), ``extra``."""
    d = dict(extra, blocks=r.blocks)
    if r.tail is not None:
        d["tail"] = r.tail
    if r.head is not None:
        d["head"] = r.head
    if r.extents is not None:
        d["extents"] = r.extents
    if r.extent_lists:
        d["extent_lists"] = r.extent_lists
    if r.patch:
        d["patch"] = {"staged": r.patch["staged"], "pieces": r.patch["extents"]}
    return manifest.dumps(d)


def _file_rows(snap: Snap, segs: list[StagedFile], cqs: list[StagedFile], idxs: list[StagedFile],
               key: dict[str, Any]) -> list[ManifestRow]:
    """Manifest rows of the staged segments, consume-queue and index files (``key``: batch_id,
    batch_seq, committed_at, attempt_id)."""
    prev_seg = {r.path: r for r in snap.of_kind(FileKind.COMMITLOG)}
    rows = [_segment_row(r, prev_seg.get(r.path or ""), key) for r in segs]
    for r in cqs:
        rows.append(_row(
            FileKind.CONSUMEQUEUE, str(r.path), staged_path=r.staged_path, topic=r.topic, queue_id=r.queue_id,
            base_offset=r.base_offset, file_size=r.file_size, valid_bytes=r.valid_bytes,
            count=r.count, min_offset=r.min_offset, max_offset=r.max_offset,
            checksum=r.checksum, detail=_file_detail(r, min_phys=r.min_phys, max_phys=r.max_phys),
            **key))
    for r in idxs:
        h = _header(r)
        rows.append(_row(
            FileKind.INDEX, str(r.path), staged_path=r.staged_path, file_size=r.file_size, valid_bytes=r.valid_bytes,
            count=r.count, min_offset=h.begin_phy_offset, max_offset=h.end_phy_offset,
            min_store_ts=h.begin_timestamp, max_store_ts=h.end_timestamp, checksum=r.checksum,
            detail=_file_detail(r, header=r.header), **key))
    return rows


def _segment_row(r: StagedFile, old: ManifestRow | None, key: dict[str, Any]) -> ManifestRow:
    """A segment's row: its counts and ranges include the committed prefix it continues (``old``:
    the segment's current row, if the batch kept its bytes)."""
    kept = old if old and r.kept_bytes else None
    count = r.count_new + ((kept.count or 0) if kept else 0)
    min_off = kept.min_offset if kept else r.first_new_offset
    mins = [x for x in (r.min_ts, kept.min_store_ts if kept else None) if x is not None]
    maxs = [x for x in (r.max_ts, kept.max_store_ts if kept else None) if x is not None]
    zones = zonemap.from_detail(r.zones)
    if kept:                # the prefix's map, cut at the bytes kept (a repair may have shortened it)
        old_zones = zonemap.of_row(kept)
        zones = zonemap.merge(old_zones.clip(r.kept_bytes) if old_zones is not None else None, zones)
    extra = {"zones": zonemap.to_detail(zones)} if zones is not None else {}
    return _row(
        FileKind.COMMITLOG, str(r.path), staged_path=r.staged_path, base_offset=r.base_offset, file_size=r.file_size,
        valid_bytes=r.valid_bytes, count=count, min_offset=min_off,
        max_offset=r.end_offset, min_store_ts=min(mins) if mins else None,
        max_store_ts=max(maxs) if maxs else None, checksum=r.checksum, detail=_file_detail(r, **extra), **key)


def _checkpoint_row(batch: StagedBatch, ck: ckpt.Checkpoint, config: StoreConfig, t0: float, key: dict,
                    detail: dict) -> dict:
    """The batch's checkpoints-table row (``batch.operation``: ingest or mirror): the store's state after it."""
    snap, state, plan, summaries, fingerprint = batch.snap, batch.state, batch.plan, batch.summaries, batch.fingerprint
    wall = int((time.time() - t0) * 1000)
    mins = [s.min_store_ts for s in summaries if s.min_store_ts is not None]
    maxs = [s.max_store_ts for s in summaries if s.max_store_ts is not None]
    if snap.batch:
        mins += [snap.batch.min_store_ts] if snap.batch.min_store_ts is not None else []
        maxs += [snap.batch.max_store_ts] if snap.batch.max_store_ts is not None else []
    return manifest.checkpoint_row(
        operation=batch.operation, input_fingerprint=fingerprint, messages=plan.messages, bytes=plan.total_bytes,
        index_entries=plan.entries, total_messages=state.messages + plan.messages,
        min_phy_offset=snap.batch.min_phy_offset if snap.batch else 0,
        max_phy_offset=plan.next_phys, queue_offsets=manifest.queue_offsets(plan.queue_next),
        physic_msg_timestamp=ck.physic_msg_timestamp, logics_msg_timestamp=ck.logics_msg_timestamp,
        index_msg_timestamp=ck.index_msg_timestamp,
        min_store_ts=min(mins) if mins else None, max_store_ts=max(maxs) if maxs else None,
        wall_time_ms=wall, config=manifest.config_column(config), detail=manifest.dumps(detail), **key)


def _summary(batch: StagedBatch, seq: int, files: tuple[int, int, int], t0: float, prog) -> dict:
    """The committed batch's summary; ``files``: its (segments, consume-queue files, index files)."""
    plan, batch_id, (segments, cq_files, index_files) = batch.plan, batch.batch_id, files
    elapsed = time.time() - t0
    rate = round(plan.messages / elapsed, 1) if elapsed > 0 else None
    prog.say(f"done: {plan.messages} messages, {segments} segment(s), "
             f"{plan.total_bytes} bytes in {elapsed:.1f}s ({rate} msgs/s)")
    return {
        "batch_id": batch_id, "batch_seq": seq, "status": "committed", "messages": plan.messages,
        "record_bytes": plan.total_bytes, "index_entries": plan.entries,
        "segments": segments, "consumequeue_files": cq_files, "index_files": index_files,
        "max_phy_offset": plan.next_phys, "seconds": round(elapsed, 3), "msgs_per_s": rate,
    }


# ---------------------------------------------------------------------------- publish
def publish(store: storage.Store, rows: list, durable: bool = True, lease: Any = None) -> None:
    """Publish a committed batch from its manifest rows (redo-safe, and safe while another writer
    redoes the same publish): the patches of the files it continues in place, then its staged
    new files renamed to their names.

    A staged file that is gone must have been published: its file must be there with at least
    the row's valid bytes, else ``CorruptStore`` (a committed batch is never half published in
    silence). ``durable``: the patched files and the directories the renames changed are fsync'd
    before the caller removes the staging directory. ``lease``: the writer's, checked between the
    two phases of the patches and before a file that is gone is judged: a writer that stalled past it
    may find its batch published, and the files continued, by the writer that took over
    (``LeaseLost``, not damage)."""
    typed = manifest_rows(rows)
    todo, gone = [], []
    for r in typed:
        if r.action != "add":
            continue
        p = patches.row_patch(r)
        if p is None:
            continue
        if store.exists(p["staged"]):
            todo.append(p)
        else:
            gone.append(r)
    if todo:
        patches.apply_patches(store, todo, durable, fault=fault, check=lease.check if lease is not None else None)
    changed: set = set()
    for r in typed:
        if r.action != "add" or not r.staged_path:
            continue
        if store.exists(r.staged_path):
            changed.update(store.publish(r.staged_path, r.path) or ())
            fault("mid-publish")
        else:
            gone.append(r)
    if gone and lease is not None:
        lease.check()
    for r in gone:
        _check_published(store, r)
    if durable:
        storage.sync_dirs(changed)


def _check_published(store: storage.Store, row: ManifestRow) -> None:
    """A row whose staged copy or patch is gone: its file must hold the row's version (size, and
    the digest of its last checksum block), else ``CorruptStore``."""
    size, valid = store.size(row.path), row.valid_bytes
    blocks = checksum.digests_from_detail(row.detail.get("blocks"))
    ok = size is not None and size >= valid
    if ok and blocks and valid:
        i = (valid - 1) // checksum.BLOCK_SIZE
        lo = i * checksum.BLOCK_SIZE
        ok = i < len(blocks) and checksum.block_digest(store.read(row.path, lo, valid - lo)) == blocks[i]
    if not ok:
        raise CorruptStore(row.path, 0, f"committed by batch {row.batch_id!r}, but neither its staged copy "
                                           f"nor the file ({size} bytes) holds its version of {valid} valid bytes")


def pending_publishes(store: storage.Store, snap: Snap) -> list:
    """Committed batches of ``snap`` whose staging directory is still there: their publish may be
    unfinished (oldest first)."""
    try:
        staged = set(store.list_dirs(paths.STAGING_DIR))
    except OSError:
        return []
    return [b for b in snap.batches if b.batch_id in staged
            and (b.attempt_id is None or store.exists(_attempt_dir(b)))]


def _attempt_dir(batch: BatchRow) -> str:
    return f"{paths.STAGING_DIR}/{batch.batch_id}/{batch.attempt_id}"


def finish_pending_publish(store: storage.Store, snap: Snap, config: StoreConfig | None = None) -> int:
    """Redo the publish of every committed batch a crash (or a lost lease) left unfinished (the
    caller holds the lease), driven by the manifest rows of ``snap``, or, for an expiry, by the
    deletes its attempt staged (checked against ``snap`` first); returns how many there were.
    Finding them costs a listing of ``staging/``: the manifest table is not read."""
    pending = pending_publishes(store, snap)
    durable = config.durable if config is not None else True
    for b in pending:
        # an expiry's publish is the deletes its staged document lists (storelib.table.staged_deletes)
        if b.attempt_id is None or not staged_deletes.finish(store, _attempt_dir(b), b, snap, durable):
            rows = [r for r in snap.files.values() if r.batch_id == b.batch_id]
            publish(store, rows, durable=durable)
        if b.attempt_id is not None:
            drop_staging(store, _attempt_dir(b), durable=durable)
    committed = {b.batch_id for b in snap.batches}
    for batch_dir in store.list_dirs(paths.STAGING_DIR):
        if batch_dir in committed:             # a published batch's directory a cut left empty
            storage.remove_dir_if_empty(store, f"{paths.STAGING_DIR}/{batch_dir}")
    storage.remove_dir_if_empty(store, paths.STAGING_DIR)
    return len(pending)


def clear_dead_attempts(store: storage.Store, batches: list, lease: writerlease.WriterLease | None = None) -> None:
    """Remove what attempts that never committed left behind: their staging (local stores), their
    objects (object stores), scratch Delta tables. Only by a writer whose commit just went
    through (``batches``: every committed checkpoint row, its own included) and that still holds
    the store's ``lease`` (checked first: ``LeaseLost``): no attempt staged before that commit can
    commit any more, so none of this is needed by a committed row, while a writer that took the
    store over since may be staging one that can. Staging of a committed batch whose publish is
    unfinished is kept.

    Runs after a commit went through, so it never fails the command: a storage error here (a
    racing writer that lost removing its own attempt at the same moment, an outage) leaves the
    garbage for the next writer to clear, with a warning."""
    if lease is not None:
        lease.check()
    try:
        _clear_dead_attempts(store, {(b.batch_id, b.attempt_id) for b in batch_rows(batches)})
    except OSError as e:
        Progress.warn(f"what attempts that never committed left behind is kept for the next writer to clear ({e})")


def _clear_dead_attempts(store: storage.Store, committed: set) -> None:
    for batch_dir in store.list_dirs(paths.STAGING_DIR):
        for attempt in store.list_dirs(f"{paths.STAGING_DIR}/{batch_dir}"):
            if (batch_dir, attempt) not in committed:
                drop_staging(store, f"{paths.STAGING_DIR}/{batch_dir}/{attempt}", durable=False)
        for leftover in store.list_files(f"{paths.STAGING_DIR}/{batch_dir}", recursive=False):
            store.delete(leftover)              # a file directly in a batch directory: never staged by us
        storage.remove_dir_if_empty(store, f"{paths.STAGING_DIR}/{batch_dir}")
    storage.remove_dir_if_empty(store, paths.STAGING_DIR)
    if store.objects:
        for batch_dir in store.list_dirs(paths.OBJECTS_DIR):
            for attempt in store.list_dirs(f"{paths.OBJECTS_DIR}/{batch_dir}"):
                if (batch_dir, attempt) not in committed:
                    store.delete(fragments.object_prefix(batch_dir, attempt))
    deltacommit.clear_scratch(store)


def is_committed(store: storage.Store, batch_id: str, attempt: str | None = None) -> bool:
    """Is ``batch_id`` committed (by ``attempt``, if given: a racing writer of the same batch id
    may have committed it while this attempt lost)?"""
    snap = open_snapshot(store, history=True, queue_offsets=False)
    return any(b.batch_id == batch_id and (attempt is None or b.attempt_id in (None, attempt))
               for b in snap.batches)


def outcome_unknown(store: storage.Store, error: BaseException | None, committing: bool) -> bool:
    """Whether an attempt that failed with ``error`` (``committing``: in its Delta commits) may
    still commit, so that nothing of it may be undone (the next writer decides from the tables):
    on an object store, a commit that failed other than by a refused conditional put
    (``ConcurrentWriteError``: that version exists, whoever's; ``LeaseLost``: raised before a PUT)
    may have sent a PUT whose answer was lost and that lands after any read of the table. A local
    store's commit is a ``link``, done or not when it returns: a read of the table decides."""
    return committing and not store.atomic_rename and not isinstance(error, ConcurrentWriteError)


def abandon_attempt(store: storage.Store, staging: str, batch_id: str, attempt: str, error: BaseException,
                    committing: bool, lease: Any, what: str) -> None:
    """A driver-side attempt (an expiry's, a repair's: ``what``) that failed with ``error``
    (``committing``: in its Delta commits): its staging is removed only when it surely did not
    commit and this writer still holds the lease; otherwise it is left as it is, for the next
    writer, which decides from the tables (a committed batch's publish is finished,
    ``finish_pending_publish``; a dead attempt's staging is cleared after that writer's commit,
    ``clear_dead_attempts``). Left, for that reason:

    * a lost lease (``LeaseLost``): the store is another writer's now, and this one touches nothing;
    * a commit whose outcome is unknown (``outcome_unknown``: on object stores, a PUT whose answer
      was lost may land after a read of the table found no commit), where dropping the staging
      would leave a committed batch without its publish for good;
    * a read of the table that fails (``is_committed``): nothing is known.

    Never raises: the caller raises ``error``, whatever happens here."""
    if isinstance(error, LeaseLost) or outcome_unknown(store, error, committing):
        return
    try:
        if lease is not None:
            lease.check()
        if not is_committed(store, batch_id, attempt):
            undo_attempt(store, staging, batch_id, attempt)
    except Exception as failed:  # noqa: BLE001 - the next writer decides from the tables
        Progress.warn(f"{what} {batch_id!r}: its attempt's staging is left for the next writer ({failed})")


def undo_attempt(store: storage.Store, staging: str, batch_id: str, attempt: str) -> None:
    """A failed attempt that did not commit: delete its objects (object stores) and its staging.
    It never touched a store file (nothing changes before the switch), and never another
    attempt's files."""
    if store.objects:
        store.delete(fragments.object_prefix(batch_id, attempt))
    drop_staging(store, staging, durable=False)


def drop_staging(store: storage.Store, staging: str, durable: bool = True) -> None:
    """Remove one attempt's staging directory, then its batch directory and ``staging/`` if
    nothing else is in them. Never another attempt's files: normally the lease holder is the
    only writer, but a racing writer that got past the lease too may be staging or publishing.

    Local stores: the directory is first renamed out of ``staging/`` (atomic; with ``durable``
    that rename is fsync'd), then deleted, so a power cut never leaves a staging directory with
    some of its files gone: one that is still there is whole, and a publish redone from it
    finds every patch."""
    if store.atomic_rename:
        src = store.path(staging)
        if os.path.isdir(src):
            trash = store.path(f"{paths.TMP_DIR}/{paths.TMP_DROP_PREFIX}{os.path.basename(src)}-{os.getpid()}-{time.time_ns()}")
            moved = _rename_into_tmp(src, trash)
            if moved:
                if durable:
                    storage.sync_dirs([os.path.dirname(src), os.path.dirname(trash)])
                shutil.rmtree(trash, ignore_errors=True)
            storage.remove_dir_if_empty(store, paths.TMP_DIR)
        else:
            store.delete(staging)
    else:
        store.delete(staging)
    for rel in (staging.rsplit("/", 1)[0], paths.STAGING_DIR):
        if not storage.remove_dir_if_empty(store, rel):
            return


def _rename_into_tmp(src: str, trash: str, tries: int = 16) -> bool:
    """Rename ``src`` to ``trash`` under ``_rocketlake/tmp``; False when ``src`` is gone. Another
    writer may remove that directory while it is empty, between its making and the rename: the
    rename then fails for the target's parent, and is tried again."""
    for _ in range(tries):
        storage.make_dirs(os.path.dirname(trash))
        try:
            os.rename(src, trash)
            return True
        except FileNotFoundError:
            if not os.path.exists(src):
                return False
    return False
