"""Stage 4 of an ingest, commit (driver): the moment a batch becomes part of the store.

In order (``commit_batch``):

1. the write stage's file facts are checked complete, and new index files get their names
   (creation order, strictly increasing millis: RocketMQ loads them sorted by name);
2. the checkpoint file (last message, last consume-queue message, last rolled index file's end)
   is staged beside the batch's other files;
3. one manifest row per staged file and the batch's checkpoint row (``manifest.file_row`` /
   ``manifest.checkpoint_row``);
4. the conditional Delta commits (``manifest.commit``): manifest rows, then the checkpoint row,
   the switch that makes the batch visible;
5. publish: staged files move to their final names (``publish``), and this attempt's staging
   directory is removed (``drop_staging``).

A crash after 4 leaves a committed batch whose publish is unfinished: the next writer redoes it
(``finish_pending_publish``) before anything else.
"""
from __future__ import annotations

import os
import time

from . import checkpoint as ckpt
from . import checksum, fragments, indexfile, manifest, patches, sequencer, snapcache, storage, storefiles
from .config import StoreConfig
from .faults import fault
from .ingest_errors import IngestError

__all__ = ["commit_batch", "publish", "finish_pending_publish", "clear_dead_attempts", "undo_attempt", "drop_staging",
           "is_committed"]


def commit_batch(store: storage.Store, snap: manifest.Snapshot, state: sequencer.StoreState,
                 plan: sequencer.BatchPlan, summaries: list, results: list, config: StoreConfig, batch_id: str,
                 fingerprint: str, staging: str, t0: float, prog, attempt: str | None = None,
                 detail_extra: dict | None = None) -> dict:
    """Commit and publish the batch whose files the write stage staged (``results``: their facts);
    returns the batch's summary. ``prog``: a ``progress.Progress``."""
    seq = snap.batch_seq + 1
    now = manifest.now_ms()
    segs, cqs, idxs = _written_files(plan, results)
    _name_index_files(snap, summaries, idxs, now)
    ck = _checkpoint(snap, state, summaries, idxs)
    ck_bytes = ck.to_bytes()
    key = dict(batch_id=batch_id, batch_seq=seq, committed_at=now, attempt_id=attempt)
    rows = _file_rows(snap, segs, cqs, idxs, key)
    rows.append(_checkpoint_file_row(store, ck, ck_bytes, staging, batch_id, attempt, config, key))
    detail = dict({"segments": len(segs), "consumequeue_files": len(cqs), "index_files": len(idxs)},
                  **(detail_extra or {}))
    checkpoint_row = _checkpoint_row(snap, state, plan, summaries, ck, config, fingerprint, t0, key, detail)
    fault("before-delta-commit")
    # Every file of the batch is on stable storage by now (the write tasks and the checkpoint
    # write fsync'd them and their directories: flushDiskType=SYNC_FLUSH), so the switch below
    # never makes visible a batch a power cut could take back.
    # Patches (local stores: files the batch continues in place) are applied between the two
    # commits: after the manifest commit, which only one of two racing writers wins, and
    # before the switch (storelib.patches).
    in_place = [r["patch"] for r in segs + cqs + idxs if r.get("patch")]

    def apply_in_place():
        if in_place:
            patches.write_intent(store, staging, [p["path"] for p in in_place], config.durable)
            patches.apply_patches(store, in_place, config.durable, fault=fault)
    manifest.commit(store, snap.versions, rows, checkpoint_row, fault=fault, durable=config.durable,
                    between=apply_in_place)
    prog.say(f"committed batch {batch_id} as seq {seq}")
    fault("after-commit-before-publish")
    publish(store, rows, durable=config.durable)
    fault("after-publish-before-cleanup")
    drop_staging(store, staging)           # ours only: see drop_staging (dead attempts' leftovers
                                           # were removed when this run started)
    snapcache.refresh(store)               # readers open this snapshot without Delta/pyarrow
    return _summary(plan, batch_id, seq, len(segs), len(cqs), len(idxs), t0, prog)


def _written_files(plan: sequencer.BatchPlan, results: list) -> tuple:
    """(segments, consume-queue files, index files in plan order) the write stage staged; every
    file of the plan, or IngestError."""
    segs = [r for r in results if r["kind"] == "commitlog"]
    cqs = [r for r in results if r["kind"] == "consumequeue"]
    idxs = sorted((r for r in results if r["kind"] == "index"), key=lambda r: r["ordinal"])
    if len(segs) != len(plan.segments) or len(cqs) != len(plan.cq_files) or len(idxs) != len(plan.index_files):
        raise IngestError(f"incomplete write stage: {len(segs)}/{len(plan.segments)} segments, "
                          f"{len(cqs)}/{len(plan.cq_files)} consume queue files, "
                          f"{len(idxs)}/{len(plan.index_files)} index files")
    return segs, cqs, idxs


def _name_index_files(snap: manifest.Snapshot, summaries: list, idxs: list, now: int) -> None:
    """Index file names: creation order, strictly increasing (RocketMQ loads them sorted by name)."""
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


def _checkpoint(snap: manifest.Snapshot, state: sequencer.StoreState, summaries: list, idxs: list) -> ckpt.Checkpoint:
    """Checkpoint file: last message, last consume-queue message, last rolled index file's end."""
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
    return ckpt.Checkpoint(physic, logics, index_ts)


def _checkpoint_file_row(store: storage.Store, ck: ckpt.Checkpoint, ck_bytes: bytes, staging: str, batch_id: str,
                         attempt: str | None, config: StoreConfig, key: dict) -> dict:
    """The checkpoint file, staged (local: renamed at publish) or as an object of this attempt
    (object stores: the row's extents), and its row."""
    detail = ck.to_dict()
    if store.local:
        where = f"{staging}/files/driver/{ckpt.FILE_NAME}"
    else:
        where = fragments.object_rel(batch_id, attempt or "driver", "driver", ckpt.FILE_NAME, "file")
        detail["extents"] = [[0, len(ck_bytes), where, 0]]
    store.write_file(where, [ck_bytes], durable=config.durable)
    return manifest.file_row("checkpoint", ckpt.FILE_NAME, staged_path=where if store.local else None,
                             file_size=ckpt.FILE_SIZE, valid_bytes=ckpt.FILE_SIZE, count=0,
                             checksum=checksum.checksum_of_bytes(ck_bytes), detail=manifest.dumps(detail), **key)


def _file_detail(r: dict, **extra) -> str:
    """A written file's row detail: its block digests, its extents (object stores), ``extra``."""
    d = dict(extra, blocks=r["blocks"])
    if r.get("extents") is not None:
        d["extents"] = r["extents"]
    return manifest.dumps(d)


def _file_rows(snap: manifest.Snapshot, segs: list, cqs: list, idxs: list, key: dict) -> list:
    """Manifest rows of the staged segments, consume-queue and index files (``key``: batch_id,
    batch_seq, committed_at, attempt_id)."""
    prev_seg = {r["path"]: r for r in snap.of_kind("commitlog")}
    rows = [_segment_row(r, prev_seg.get(r["path"]), key) for r in segs]
    for r in cqs:
        rows.append(manifest.file_row(
            "consumequeue", r["path"], staged_path=r["staged_path"], topic=r["topic"], queue_id=r["queue_id"],
            base_offset=r["base_offset"], file_size=r["file_size"], valid_bytes=r["valid_bytes"],
            count=r["count"], min_offset=r["min_offset"], max_offset=r["max_offset"],
            checksum=r["checksum"], detail=_file_detail(r, min_phys=r["min_phys"], max_phys=r["max_phys"]),
            **key))
    for r in idxs:
        h = r["header"]
        rows.append(manifest.file_row(
            "index", r["path"], staged_path=r["staged_path"], file_size=r["file_size"], valid_bytes=r["valid_bytes"],
            count=r["count"], min_offset=h["begin_phy_offset"], max_offset=h["end_phy_offset"],
            min_store_ts=h["begin_timestamp"], max_store_ts=h["end_timestamp"], checksum=r["checksum"],
            detail=_file_detail(r, header=h), **key))
    return rows


def _segment_row(r: dict, old: dict | None, key: dict) -> dict:
    """A segment's row: its counts and ranges include the committed prefix it continues (``old``:
    the segment's current row, if the batch kept its bytes)."""
    kept = old if old and r["kept_bytes"] else None
    count = r["count_new"] + (kept["count"] if kept else 0)
    min_off = kept["min_offset"] if kept else r["first_new_offset"]
    mins = [x for x in (r["min_ts"], kept["min_store_ts"] if kept else None) if x is not None]
    maxs = [x for x in (r["max_ts"], kept["max_store_ts"] if kept else None) if x is not None]
    return manifest.file_row(
        "commitlog", r["path"], staged_path=r["staged_path"], base_offset=r["base_offset"], file_size=r["file_size"],
        valid_bytes=r["valid_bytes"], count=count, min_offset=min_off,
        max_offset=r["end_offset"], min_store_ts=min(mins) if mins else None,
        max_store_ts=max(maxs) if maxs else None, checksum=r["checksum"], detail=_file_detail(r), **key)


def _checkpoint_row(snap: manifest.Snapshot, state: sequencer.StoreState, plan: sequencer.BatchPlan,
                    summaries: list, ck: ckpt.Checkpoint, config: StoreConfig, fingerprint: str, t0: float,
                    key: dict, detail: dict) -> dict:
    """The batch's checkpoints-table row (operation ``ingest``): the store's state after it."""
    wall = int((time.time() - t0) * 1000)
    mins = [s.min_store_ts for s in summaries if s.min_store_ts is not None]
    maxs = [s.max_store_ts for s in summaries if s.max_store_ts is not None]
    if snap.batch:
        mins += [snap.batch["min_store_ts"]] if snap.batch["min_store_ts"] is not None else []
        maxs += [snap.batch["max_store_ts"]] if snap.batch["max_store_ts"] is not None else []
    return manifest.checkpoint_row(
        operation="ingest", input_fingerprint=fingerprint, messages=plan.messages, bytes=plan.total_bytes,
        index_entries=plan.entries, total_messages=state.messages + plan.messages,
        min_phy_offset=snap.batch["min_phy_offset"] if snap.batch else 0,
        max_phy_offset=plan.next_phys, queue_offsets=manifest.queue_offsets(plan.queue_next),
        physic_msg_timestamp=ck.physic_msg_timestamp, logics_msg_timestamp=ck.logics_msg_timestamp,
        index_msg_timestamp=ck.index_msg_timestamp,
        min_store_ts=min(mins) if mins else None, max_store_ts=max(maxs) if maxs else None,
        wall_time_ms=wall, config=manifest.dumps(config.file_shaping()), detail=manifest.dumps(detail), **key)


def _summary(plan: sequencer.BatchPlan, batch_id: str, seq: int, segments: int, cq_files: int, index_files: int,
             t0: float, prog) -> dict:
    elapsed = time.time() - t0
    summary = {
        "batch_id": batch_id, "batch_seq": seq, "status": "committed", "messages": plan.messages,
        "record_bytes": plan.total_bytes, "index_entries": plan.entries,
        "segments": segments, "consumequeue_files": cq_files, "index_files": index_files,
        "max_phy_offset": plan.next_phys, "seconds": round(elapsed, 3),
        "msgs_per_s": round(plan.messages / elapsed, 1) if elapsed > 0 else None,
    }
    prog.say(f"done: {summary['messages']} messages, {summary['segments']} segment(s), "
             f"{summary['record_bytes']} bytes in {elapsed:.1f}s ({summary['msgs_per_s']} msgs/s)")
    return summary


# ---------------------------------------------------------------------------- publish
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


def finish_pending_publish(store: storage.Store, snap: manifest.Snapshot, config: StoreConfig | None = None) -> None:
    """A crash after a commit and before its publish finished: redo the publish, then clear
    what dead attempts left (``clear_dead_attempts``)."""
    if snap.batch is None:
        return
    staging = f"{manifest.STAGING_DIR}/{snap.batch['batch_id']}"
    if not store.exists(staging):
        return
    rows = [r for r in snap.files.values() if r["batch_id"] == snap.batch["batch_id"]]
    publish(store, rows)
    clear_dead_attempts(store, snap, config)


def clear_dead_attempts(store: storage.Store, snap: manifest.Snapshot, config: StoreConfig | None = None) -> None:
    """Undo what attempts that never committed left behind (the caller holds the lease and the
    last committed batch is published): files they patched in place are trimmed back to their
    committed state (storelib.patches, local stores), objects no committed row can list are
    deleted (object stores), and the staging directory goes."""
    if store.local:
        paths = patches.leftover_intents(store, manifest.STAGING_DIR)
        if paths:
            config = config or storefiles.config_of_batch(snap.batch)
            for rel in sorted(paths):
                if rel in snap.files:
                    patches.trim_file(store, snap.files[rel], config)
    else:
        committed = {(b["batch_id"], b.get("attempt_id")) for b in snap.batches}
        for batch_dir in store.list_dirs(fragments.OBJECTS_DIR):
            for attempt in store.list_dirs(f"{fragments.OBJECTS_DIR}/{batch_dir}"):
                if (batch_dir, attempt) not in committed:
                    store.delete(fragments.object_prefix(batch_dir, attempt))
    store.delete(manifest.STAGING_DIR)


def is_committed(store: storage.Store, batch_id: str, attempt: str | None = None) -> bool:
    """Is ``batch_id`` committed (by ``attempt``, if given: a racing writer of the same batch id
    may have committed it while this attempt lost)?"""
    snap = manifest.load_snapshot(store)
    return any(b["batch_id"] == batch_id and (attempt is None or b.get("attempt_id") in (None, attempt))
               for b in snap.batches)


def undo_attempt(store: storage.Store, snap: manifest.Snapshot | None, staging: str, config: StoreConfig,
                 batch_id: str, attempt: str) -> None:
    """A failed attempt that did not commit, still holding the lease: trim the files it patched
    in place (its intent), delete its objects (object stores), then its staging. Only its own:
    a racing writer's files are never touched."""
    if store.local:
        paths = patches.leftover_intents(store, staging)
        for rel in sorted(paths):
            if snap is not None and rel in snap.files:
                patches.trim_file(store, snap.files[rel], config)
    else:
        store.delete(fragments.object_prefix(batch_id, attempt))
    drop_staging(store, staging)


def drop_staging(store: storage.Store, staging: str) -> None:
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
