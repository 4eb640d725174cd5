"""Retention like RocketMQ's ``fileReservedTime`` (docs/FORMAT.md §10), as one Delta commit.

Plan (driver only, from the manifest):

* commitlog (``MappedFileQueue.deleteExpiredFileByTime``): walk the segments oldest first,
  never the last one; a segment expires when ``max_store_ts + reservedHours*3600000 <= now``
  (the newest message in it, from the manifest, instead of the file's mtime); stop at the first
  segment that is kept (only a prefix goes). No batch limit (a broker's repeated runs remove the
  same prefix ten files at a time).
* minOffset = start of the first kept segment (``CommitLog.getMinOffset``).
* consume queues (``deleteExpiredFileByOffset``): per queue, all files but the last, oldest
  first, while the file's last unit points below minOffset.
* index (``IndexService.deleteExpiredFile``): oldest first while ``endPhyOffset < minOffset``,
  never the newest file.

Commit: manifest rows ``action=remove`` (detail ``{"reason", "when"}``) and a checkpoint row
``operation=expire`` that copies the previous one with ``min_phy_offset`` moved; conditional on
the table versions read, like an ingest batch, and made by one attempt (``attempt_id``) that
first staged its publish: the files (and on object stores the objects) the rows remove, listed
durably in the attempt's staging directory (storelib.table.staged_deletes). Only after the commit
are they deleted, then the staging dropped; deletes a crash or a lost lease cut short are
finished by whichever writer takes the lease next (``commit.finish_pending_publish``). Then Delta
housekeeping on both tables: a checkpoint, expired log cleanup and a vacuum; then, on object
stores, the sweep of the objects no row of the manifest's remaining data files names
(``storelib.table.objsweep``).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Callable, cast

from ..format import paths
from ..table import (deltacommit, deltalog, manifest, objsweep, rowcheck, snapcache, staged_deletes, storefiles,
                     writerlease)
from ..table.rows import FILE_KINDS, BatchRow, FileKind, ManifestRow, check_batch_id, manifest_rows
from ..table.snapshots import StoreSnapshot, open_snapshot
from ..errors import ExpireError
from ..ingest import commit as commit_stage
from ..io import storage
from ..io.condput import refuse_gs_store
from ..runtime.faults import fault
from ..runtime.progress import Progress
from . import topic_retention

__all__ = ["HOUR_MS", "Expiry", "plan_expiry", "finish_pending", "finish_pending_deletes", "expire",
           "delta_housekeeping"]

HOUR_MS = 3600 * 1000


def plan_expiry(snap: StoreSnapshot, reserved_hours: float, now_ms: int) -> dict:
    segs = sorted(snap.of_kind(FileKind.COMMITLOG), key=lambda r: r.base_offset)
    reserved = int(reserved_hours * HOUR_MS)
    gone_cl = []
    for r in segs[:-1]:
        newest = r.max_store_ts
        if newest is None or now_ms < newest + reserved:
            break
        gone_cl.append(r)
    min_offset = topic_retention.min_phy_offset_after(snap, segs, gone_cl)
    gone_cq = []
    queues: dict = {}
    for r in snap.of_kind(FileKind.CONSUMEQUEUE):
        queues.setdefault((r.topic, r.queue_id), []).append(r)
    for key in sorted(queues):
        files = sorted(queues[key], key=lambda r: r.base_offset)
        for r in files[:-1]:
            last_phys = _last_unit_phys(r)
            if last_phys is None or last_phys >= min_offset:
                break
            gone_cq.append(r)
    return topic_retention.expiry_plan(snap, gone_cl, gone_cq, min_offset, now_ms, reserved_hours)


def _last_unit_phys(r: ManifestRow) -> int | None:
    """Commitlog offset of the file's last unit (units ascend, so the file's max)."""
    try:
        return r.max_phys
    except ValueError:
        return None


def finish_pending_deletes(store: storage.Store, snap: StoreSnapshot, every: bool = False) -> list:
    """Files (and on object stores objects) a committed expiry removed that are still there,
    deleted; returns them. An expiry of this version stages its deletes and every writer finishes
    them (``commit.finish_pending_publish``); an older version's staged nothing, so an
    interrupted one's are found from the snapshot's rows. Only its latest expiry's can be
    unfinished (every expire, of that version or this, finishes them before its own commit), and
    only while no expiry of this version (``attempt_id`` set) committed after it: else nothing is
    looked at, nothing read. ``every``: each file any committed expiry removed (repair: one an
    older repair wrote back too)."""
    last = next((b for b in reversed(snap.batches) if b.operation == "expire"), None)
    if not every and (last is None or last.attempt_id is not None):
        return []
    of = None if every or last is None else last.batch_id
    removed = {p for p, r in snap.removed.items() if of is None or r.batch_id == of} - set(snap.files)
    for p in removed:
        store.path(p)                       # never delete outside the store (StorePathError)
    left = sorted(p for p in removed if store.exists(p))
    for p in left:
        store.delete(p)
    if store.objects:
        objects = [o for o in staged_deletes.objects_of(store, removed) if store.exists(o)]
        for o in objects:
            store.delete(o)
        left += objects
    return left


def finish_pending(store: storage.Store, snap: StoreSnapshot, say, config=None, every: bool = True, *,
                   check: Callable[[StoreSnapshot], object]) -> StoreSnapshot:
    """A writer holding the lease first finishes what a crash cut short: the publish of a committed
    batch (an expiry's: its staged deletes), then the deletes of committed expiries that staged
    none (``finish_pending_deletes``: ``every`` for repair, only an older version's for expire);
    returns the snapshot to go on from. ``snap``: checked by the caller; the snapshot read afresh
    once a publish was finished is given to ``check`` (``CorruptStore`` for rows verify rejects)
    before anything, those deletes included, is built on it."""
    if commit_stage.finish_pending_publish(store, snap, config):
        say("finished the publish of a committed batch a crash had interrupted")
        snap = open_snapshot(store, history=True)
        check(snap)
    left = finish_pending_deletes(store, snap, every)
    if left:
        say(f"deleted {len(left)} file(s) an earlier expiry had committed as removed")
    return snap


def expire(store: str | storage.Store, reserved_hours: float | None, now_ms: int | None = None, dry_run: bool = False,
           batch_id: str | None = None, vacuum_retention_hours: int = 168, housekeeping: bool = True,
           quiet: bool = False, topic_rules: dict | None = None, snapshot: StoreSnapshot | None = None) -> dict:
    """``reserved_hours``: the store-wide rule (None: none, with ``topic_rules`` only);
    ``topic_rules``: {topic: hours} (``ops.topic_retention``); ``snapshot``: the one the command
    read before it took the lease (from the Delta tables), used when no table moved since."""
    t0 = time.time()
    say = Progress(quiet).say
    if not dry_run:                         # before anything there is read (a dry run only reads), and
        refuse_gs_store(store if isinstance(store, str) else store.uri)     # before GCS is asked (gcsreach)
    store = storage.Store(store) if isinstance(store, str) else store     # a path or URI, or an open Store
    if reserved_hours is None and not topic_rules:
        raise ExpireError("give --reserved-hours, or a topic's rule (--topic T --reserved-hours N, topicRetention)")
    if batch_id is not None:
        check_batch_id(batch_id)
    req = Expiry(reserved_hours, now_ms, dry_run, batch_id, vacuum_retention_hours, housekeeping, topic_rules)
    if dry_run:
        return _expire(store, req, say, t0, None, snapshot)
    lease = writerlease.WriterLease(store, batch_id or "expire")
    lease.acquire()          # ConcurrentWriteError: an ingest (or another expiry) holds the store
    fault("after-lease")
    try:
        return _expire(store, req, say, t0, lease, snapshot)
    finally:
        lease.release()


@dataclass(frozen=True)
class Expiry:
    """What one ``expire`` call asks (its parameters, as ``expire`` documents them)."""
    reserved_hours: float | None
    now_ms: int | None = None
    dry_run: bool = False
    batch_id: str | None = None
    vacuum_retention_hours: int = 168
    housekeeping: bool = True
    topic_rules: dict | None = None


def _expire(store: storage.Store, req: Expiry, say, t0: float, lease,
            read: StoreSnapshot | None = None) -> dict:
    """``expire`` once the lease is held (``lease`` None: a dry run, which changes nothing)."""
    reserved_hours, now_ms, dry_run, batch_id, rules = req.reserved_hours, req.now_ms, req.dry_run, req.batch_id, \
        req.topic_rules
    vacuum_retention_hours, housekeeping = req.vacuum_retention_hours, req.housekeeping
    # The snapshot read before the lease serves unless a writer committed in between (none can
    # now; the commit below is conditional on its versions all the same).
    snap = read if read is not None and read.versions is not None and not deltalog.tables_moved(store, read.versions) \
        else open_snapshot(store, history=True, queue_offsets=False)
    if snap.batch is None:
        raise ExpireError(f"{store.uri} has no rocketlake manifest: adopt it first "
                          f"(jobs/ingest.py --store {store.uri} --from-store {store.uri})")
    opened = _checked(store, snap, rules)
    now = manifest.now_ms() if now_ms is None else int(now_ms)
    durable = _durable(snap)
    if not dry_run:
        again: list = []                     # (the snapshot read afresh once a publish was finished)
        snap = finish_pending(store, snap, say, every=False, check=lambda s: again.append(_checked(store, s, rules)))
        opened = again[0] if again else opened
    if rules:
        p = topic_retention.plan_topic_expiry(store, snap, reserved_hours, rules, now,
                                              snap.config.mappedFileSizeCommitLog, opened)
    else:
        p = plan_expiry(snap, cast(float, reserved_hours), now)     # (given: no topic rule without one)
    summary = {"status": "dry-run" if dry_run else "nothing-to-do", "now_ms": now, "reserved_hours": reserved_hours,
               "commitlog_removed": len(p[FileKind.COMMITLOG]), "consumequeue_removed": len(p[FileKind.CONSUMEQUEUE]),
               "index_removed": len(p[FileKind.INDEX]), "min_phy_offset_before": p["previous_min_phy_offset"],
               "min_phy_offset": p["min_phy_offset"],
               "bytes_freed": sum(r.file_size for k in FILE_KINDS for r in p[k])}
    summary["removed"] = [r.path for k in FILE_KINDS for r in p[k]]
    if rules:
        summary.update(topic_rules=p["topic_rules"], queue_min_offsets=p["queue_min_offsets"],
                       held_back=p["held_back"])
    n = len(summary["removed"])
    if dry_run or n == 0:
        say(f"{'dry run: would remove' if dry_run else 'nothing to remove:'} {n} file(s); min phy offset "
            f"{p['previous_min_phy_offset']} -> {p['min_phy_offset']}")
        if not dry_run and housekeeping:
            summary["housekeeping"] = delta_housekeeping(store, vacuum_retention_hours, durable, lease)
            snapcache.refresh(store)        # housekeeping may add Delta versions: the cache follows
        summary["seconds"] = round(time.time() - t0, 3)
        return summary
    seq = snap.batch_seq + 1
    if batch_id is not None and any(b.batch_id == batch_id for b in snap.batches):
        raise ExpireError(f"batch id {batch_id!r} is already committed in {store.uri}: give an expiry a new one")
    batch_id = batch_id or f"expire-{now}-{seq}"     # unique: two expiries with one --now are two batches
    committed_at = manifest.now_ms()
    attempt = uuid.uuid4().hex[:12]
    rows = _remove_rows(p, batch_id, seq, committed_at, reserved_hours, now, bool(rules), attempt)
    ck = manifest.checkpoint_row_after(
        cast(BatchRow, snap.batch), batch_id=batch_id, batch_seq=seq, operation="expire", committed_at=committed_at,
        input_fingerprint=f"expire:{reserved_hours}h@{now}", messages=0, bytes=0, index_entries=0,
        min_phy_offset=p["min_phy_offset"], wall_time_ms=int((time.time() - t0) * 1000), attempt_id=attempt,
        detail=manifest.dumps({"reserved_hours": reserved_hours, "now_ms": now,
                               "removed": {k.value: len(p[k]) for k in FILE_KINDS},
                               "min_phy_offset_before": p["previous_min_phy_offset"]}))
    staging = f"{paths.STAGING_DIR}/{batch_id}/{attempt}"
    staged, committed = _commit(store, snap, rows, ck, staging, durable, lease)
    say(f"committed {batch_id} (seq {seq}): {n} file(s) removed; min phy offset "
        f"{p['previous_min_phy_offset']} -> {p['min_phy_offset']}")
    fault("after-commit-before-publish")

    def settle() -> None:
        staged_deletes.delete(store, staged, durable, fault)
        fault("after-publish-before-cleanup")
        lease.check()                        # (lost: the staging is the next writer's to drop)
        commit_stage.drop_staging(store, staging, durable=durable)
        commit_stage.clear_dead_attempts(store, [*snap.batches, ck], lease)
    summary.update(status="committed", batch_id=batch_id, batch_seq=seq)
    if not commit_stage.after_commit(batch_id, lease, settle):
        summary.update(published=False, seconds=round(time.time() - t0, 3))
        return summary
    if housekeeping:
        summary["housekeeping"] = delta_housekeeping(store, vacuum_retention_hours, durable, lease)
    snapcache.refresh(store, committed)     # (read again when housekeeping added Delta versions)
    summary["seconds"] = round(time.time() - t0, 3)
    return summary


def _checked(store: storage.Store, snap: StoreSnapshot, rules: dict | None) -> storefiles.StoreFiles | None:
    """``CorruptStore`` for rows verify rejects (an expiry never builds on them), once per snapshot;
    with topic rules, the snapshot's files as readers open them (``storefiles.files_from_snapshot``
    checks the rows first), which the plan reads."""
    if rules:
        return storefiles.files_from_snapshot(store, snap)[0]
    rowcheck.check_snapshot(snap)
    return None


def _commit(store: storage.Store, snap: StoreSnapshot, rows: list, ck: dict, staging: str, durable: bool,
            lease) -> tuple[staged_deletes.Staged, manifest.Snapshot | None]:
    """Stage the expiry's publish (what ``rows`` remove: ``staged_deletes``), then commit ``rows``
    and ``ck`` (conditional on the snapshot's table versions, the lease checked before each
    commit): what it staged, and the committed snapshot. An attempt that did not commit removes
    its staging."""
    for r in rows:
        store.path(r.path)       # StorePathError before the commit: never delete outside the store
    files = [r.path for r in rows]
    assert snap.versions is not None, "an expiry's snapshot is read from the Delta tables (history=True)"
    # (the version the commit goes on top of: the one a finish checks the document against)
    staged = staged_deletes.Staged(ck["batch_id"], ck["batch_seq"], tuple(files),
                                   tuple(staged_deletes.objects_of(store, set(files), snap.versions.manifest)))
    committing = False
    try:
        staged_deletes.stage(store, staging, staged, durable)
        fault("before-delta-commit")
        committing = True
        return staged, manifest.commit(store, snap.versions, rows, ck, fault=fault, durable=durable, lease=lease)
    except BaseException as e:
        commit_stage.abandon_attempt(store, staging, ck["batch_id"], ck["attempt_id"], e, committing, lease, "expiry")
        raise


def _remove_rows(p: dict, batch_id: str, seq: int, committed_at: int, reserved_hours, now: int,
                 by_topic: bool, attempt: str) -> list[ManifestRow]:
    """The manifest rows removing the files of plan ``p``, each with the reason it goes, made by
    expiry attempt ``attempt`` (a snapshot counts a batch's rows of the attempt that committed it)."""
    rows = []
    for kind in FILE_KINDS:
        for r in p[kind]:
            reason = p.get("reasons", {}).get(r.path) or (
                f"newest message {r.max_store_ts} + {reserved_hours} h <= now {now}" if kind == FileKind.COMMITLOG
                else f"points only below the new min phy offset {p['min_phy_offset']}")
            row = manifest.remove_row(
                r, batch_id, seq, committed_at,
                detail=manifest.dumps({"reason": reason, "when": now,
                                       "expired_by": "topicRetention" if by_topic else "fileReservedTime",
                                       "previous_detail": r.get("detail")}))
            row["attempt_id"] = attempt
            rows.append(row)
    return manifest_rows(rows)


def _durable(snap: StoreSnapshot) -> bool:
    """The store's flushDiskType, as its latest batch records it (SYNC_FLUSH unless it says otherwise)."""
    try:
        return snap.batch.durable if snap.batch is not None else True
    except ValueError:
        return True


def delta_housekeeping(store: storage.Store, vacuum_retention_hours: int = 168, durable: bool = True,
                       lease=None) -> dict:
    """A checkpoint, cleanup of expired log files and a vacuum on both Delta tables; then, on an
    object store, the sweep of the objects no row the vacuum left names (``objsweep``: what only
    rows of vacuumed versions named; ``lease`` checked before it deletes). On a local store the
    checkpoint is durable (storelib.table.deltacommit) before the cleanup may delete the log files
    it replaces."""
    out: dict = {}
    for name, rel in (("manifest", paths.MANIFEST_DIR), ("checkpoints", paths.CHECKPOINTS_DIR)):
        dt = manifest.open_table(store, rel)
        if dt is None:
            continue
        r = {"version": dt.version()}
        try:
            if store.atomic_rename:
                deltacommit.checkpoint_local(store, rel, durable)
                dt = manifest.open_table(store, rel)
            else:
                dt.create_checkpoint()
            r["checkpoint"] = True
        except Exception as e:  # noqa: BLE001 - housekeeping never fails the expiry
            r["checkpoint"] = f"failed: {e}"
        try:
            dt.cleanup_metadata()
            r["cleanup_metadata"] = True
        except Exception as e:  # noqa: BLE001
            r["cleanup_metadata"] = f"failed: {e}"
        try:
            r["vacuumed_files"] = len(dt.vacuum(retention_hours=vacuum_retention_hours, dry_run=False,
                                                enforce_retention_duration=False))
        except Exception as e:  # noqa: BLE001
            r["vacuumed_files"] = f"failed: {e}"
        out[name] = r
    if store.objects:
        try:
            out["objects"] = objsweep.sweep(store, lease.check if lease is not None else None, fault)
        except Exception as e:  # noqa: BLE001 - housekeeping never fails the expiry (LeaseLost, damage: nothing deleted)
            out["objects"] = f"failed: {e}"
            Progress.warn(f"objects no retained manifest row names are kept for the next expire ({e})")
    return out
