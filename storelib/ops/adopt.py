"""Adopt a RocketMQ broker's store directory as a rocketlake store (``ingest.py --from-store``).

The files are not rewritten. The store is verified (structural checks of ``verify`` and every
record's body against its BODYCRC, distributed like a verify run; any problem refuses the import,
nothing committed, no copied file left), and the facts those tasks collect become the manifest: one row per
commitlog segment (valid bytes = end of the record chain, as a broker's recovery finds it; a
closed segment includes its BLANK record), consume-queue file (valid units) and index file
(header in ``detail``), plus the checkpoint file. One checkpoint row (operation ``import``)
carries the max physical offset, every queue's next offset, the checkpoint file's timestamps,
the store time range and the file-shaping configuration, so ``ingest.store_state`` continues
the store exactly where the broker left it.

``--store`` equal to ``--from-store`` adopts in place (the usual case). Otherwise the files are
first copied (sparse where the source is sparse) into ``--store``.

An in-place adopt of a local directory holds the broker lock exclusively (``io.brokerlock``: the
fcntl lock a running broker holds on ``<store>/lock``) for its whole run, taken before anything
is written: a running broker, a repair of the directory, another adopt of it or a rocketlake
writer on it is refused (``BrokerRunning``, exit 3) with nothing changed, and no broker starts
on the files meanwhile. Holding it, the adopt clears what a killed repair of the directory left
(``repair.clear_broker_tmp``) before its commit. A copy only reads its source, and writes a new
store under that store's writer lease (which holds the new store's broker lock, shared); the
source's ``lock`` is a running broker's, not a store file: it is not copied. An object store has
no file locks and no broker.
"""
from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from ..format import checkpoint as ckpt, consumequeue, names, paths
from ..table import manifest, rowcheck, snapcache, writerlease
from ..table.rows import BatchRow, FileKind, ManifestRow, check_batch_id, manifest_rows
from ..table.snapshots import open_snapshot
from ..table.storefiles import refuse_unsupported
from ..errors import AdoptError, BadInput, StorePathError
from ..io import checksum, storage
from ..io.brokerlock import hold_broker_lock, remove_made_dir
from ..io.condput import refuse_gs_store
from ..ingest.driver import enclosing_store
from ..verify import driver as verify
from ..format.config import StoreConfig
from ..runtime.progress import Progress
from .repair import clear_broker_tmp

__all__ = [ "SKIP_TOP", "check_source", "copy_store", "in_place", "adopt", "build_rows"]


SKIP_TOP = {paths.META_DIR}


def check_source(src: storage.Store) -> list:
    """Every file of a broker's store directory must be a plain store path inside it, and every
    consume-queue topic directory a valid topic name; AdoptError naming the first one that is
    not (a symlink pointing out of the directory, a backslash, a topic outside RocketMQ's
    character set...), UnsupportedStore for queues kept where rocketlake does not read them
    (``storefiles.refuse_unsupported``). Returns the files (not ``_rocketlake/``)."""
    try:
        refuse_unsupported(src)            # (its listing meets a link out first: StorePathError)
        files = [r for r in src.list_files("") if r.split("/", 1)[0] not in SKIP_TOP]
        for rel in files:
            problem = names.rel_path_problem(rel)
            if problem:
                raise StorePathError(f"store path {rel!r} {problem}")
            src.path(rel)                  # a symlink (file or directory) resolving outside
        for topic in src.list_dirs(paths.CONSUMEQUEUE_DIR):
            problem = names.topic_problem(topic)
            if problem:
                raise AdoptError(f"{src.uri} cannot be adopted: directory consumequeue/{topic!r} is not a topic "
                                 f"directory: {problem}; nothing was imported")
    except StorePathError as e:
        raise AdoptError(f"{src.uri} cannot be adopted: {e}; nothing was imported") from None
    return files


def copy_store(src_uri: str, dst_uri: str) -> int:
    """Copy every file of a store (not _rocketlake/, not the broker's ``lock``) keeping zero tails
    sparse; returns files copied."""
    src, dst = storage.Store(src_uri), storage.Store(dst_uri)
    n = 0
    for rel in src.list_files(""):
        if rel.split("/", 1)[0] in SKIP_TOP or rel == paths.LOCK_FILE:
            continue                 # (the target's lock is held by this adopt's lease)
        if dst.exists(rel):
            raise AdoptError(f"{dst.uri_of(rel)} already exists: copy into an empty directory")
        size = src.size(rel) or 0
        if src.os_paths and dst.os_paths:
            _sparse_copy(src.path(rel), dst.path(rel), size)
        else:
            dst.write_file(rel, _chunks(src, rel, size), size)
        n += 1
    return n


def _chunks(store: storage.Store, rel: str, size: int, step: int = 8 << 20):
    for a in range(0, size, step):
        yield store.read(rel, a, min(step, size - a))


def _sparse_copy(src: str, dst: str, size: int) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        fd = fi.fileno()
        pos = 0
        while pos < size:
            try:
                d = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            h = os.lseek(fd, d, os.SEEK_HOLE)
            fi.seek(d)
            fo.seek(d)
            left = h - d
            while left > 0:
                chunk = fi.read(min(left, 8 << 20))
                if not chunk:
                    break
                fo.write(chunk)
                left -= len(chunk)
            pos = h
        fo.truncate(size)


def adopt(spark, store: str | storage.Store, source_uri: str, config: StoreConfig, batch_id: str | None = None,
          quiet: bool = False) -> dict:
    t0 = time.time()
    say = Progress(quiet).say
    if batch_id is not None:
        check_batch_id(batch_id)
    # before anything there (or of the source) is read, and before GCS is asked (io.gcsreach)
    refuse_gs_store(store if isinstance(store, str) else store.uri)
    store = storage.Store(store) if isinstance(store, str) else store     # a path or URI, or an open Store
    _check_apart(storage.Store(source_uri), store)
    fresh = store.os_paths and not os.path.exists(store.root)
    broker_lock = hold_broker_lock(store, create=True) if in_place(storage.Store(source_uri), store) else None
    try:
        lease = writerlease.WriterLease(store, batch_id or "import")
        lease.acquire()          # ConcurrentWriteError: another writer holds the store
        try:
            return _adopt(_Adoption(spark, store, config, batch_id, say, t0, lease, broker_lock is not None), source_uri)
        finally:
            lease.release()
    finally:
        if broker_lock is not None:
            broker_lock.release()
        if fresh:
            remove_made_dir(store.root)             # a refused import into a new directory leaves none


@dataclass(frozen=True)
class _Adoption:
    """One ``adopt`` call, once its lease is held: what its steps share."""
    spark: Any
    store: storage.Store
    config: StoreConfig
    batch_id: str | None
    say: Callable[[str], None]
    t0: float
    lease: writerlease.WriterLease
    locked: bool             # holds the broker lock of the directory it adopts in place


def _adopt(job: _Adoption, source_uri: str) -> dict:
    """``adopt`` once the lease is held."""
    store, batch_id, say = job.store, job.batch_id, job.say
    snap = open_snapshot(store, history=True)
    rowcheck.check_snapshot(snap)
    if snap.batch is not None:
        first = snap.batches[0]
        if first.operation == "import" and (batch_id is None or first.batch_id == batch_id):
            _same_source(store, first, storage.Store(source_uri))
            say(f"{store.uri} was already adopted (batch {first.batch_id}): nothing to do")
            return {"batch_id": first.batch_id, "status": "already-committed", "batch_seq": first.batch_seq,
                    "messages": first.messages}
        raise AdoptError(f"{store.uri} already has a rocketlake manifest: import only into a store without one")
    src = storage.Store(source_uri)
    check_source(src)
    if not in_place(src, store):
        outer = enclosing_store(store)
        if outer is not None:
            raise BadInput(f"{store.uri} lies inside {outer}: the copy's files would be files of that store no "
                           "manifest names; import into a directory beside it (nothing was written)")
        say(f"copy {src.uri} -> {store.uri}")
        before = set(store.list_files(""))
        try:
            copied = copy_store(src.uri, store.uri)
            say(f"copied {copied} file(s)")
            return _adopt_files(job, src, snap)
        except BaseException:
            if open_snapshot(store, history=True).batch is None:   # not committed: leave no copied file behind
                _remove_copies(store, before)
            raise
    return _adopt_files(job, src, snap)


def _same_source(store: storage.Store, first: BatchRow, src: storage.Store) -> None:
    """An import into a store adopted before is a rerun only from the directory it was adopted
    from (however spelled), or of the store itself (its files are the adopted ones): another one is
    BadInput (exit 2), never "already committed" for messages that are not in the store."""
    recorded = str(first.detail.get("source") or "")
    was = storage.Store(recorded) if recorded else None
    if in_place(src, store):
        return
    if was is not None and (recorded == src.uri or in_place(was, src)):
        return
    raise BadInput(f"{store.uri} was adopted from {recorded or 'another directory'} (batch {first.batch_id}), not "
                   f"from {src.uri}: nothing was imported (import {src.uri} into a store of its own)")


def in_place(src: storage.Store, store: storage.Store) -> bool:
    """Is ``store`` the broker's directory ``src`` itself (an adopt in place), however either is
    spelled (relative, through a symbolic link)?"""
    if src.os_paths and store.os_paths:
        return os.path.realpath(src.root) == os.path.realpath(store.root)
    return storage.inside(src, store) and storage.inside(store, src)     # (one name node however named)


def _check_apart(src: storage.Store, store: storage.Store) -> None:
    """BadInput if one of the two directories lies inside the other (not the same one): the copy
    would copy the store into itself, writing into the broker's directory it must only read."""
    if in_place(src, store):
        return
    if storage.inside(src, store):
        raise BadInput(f"{store.uri} is inside the broker's directory {src.uri}: importing would copy the "
                       f"directory into itself; nothing was imported (give a directory outside it)")
    if storage.inside(store, src):
        raise BadInput(f"{store.uri} holds the broker's directory {src.uri}: nothing was imported (import in "
                       f"place, --store {src.uri}, or into a directory beside it)")


def _remove_copies(store: storage.Store, before: set) -> None:
    """Delete what a failed import copied into ``store`` (files not there ``before``), and the
    directories that leaves empty."""
    dirs: set[str] = set()
    for rel in set(store.list_files("")) - before:
        if rel.split("/", 1)[0] in SKIP_TOP:
            continue
        store.delete(rel)
        parts = rel.split("/")[:-1]
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    if store.local:
        for d in sorted(dirs, key=lambda d: -d.count("/")):
            try:
                os.rmdir(os.path.join(store.root, d))
            except OSError:
                pass


def _adopt_files(job: _Adoption, src: storage.Store, snap) -> dict:
    """Verify the broker's files now in ``job.store`` and commit them as the import batch."""
    store, config, say = job.store, job.config, job.say
    if store.exists(paths.ABORT_FILE):
        raise AdoptError(f"{store.uri_of(paths.ABORT_FILE)} exists: the broker did not shut down cleanly; start and "
                         "stop it once (its recovery repairs the files) before importing")
    if not store.list_files(paths.COMMITLOG_DIR):
        raise AdoptError(f"{store.uri} holds no commitlog files")
    say("verify (structural, body CRCs)")
    # every body against its BODYCRC too (in the structural pass over the records): a flipped
    # body byte is damage the structure does not show, and an import commits no damage
    rep = verify.verify_store(store.uri, config, deep=False, spark=job.spark, use_manifest=False, body_crcs=True)
    if rep.problems:
        shown = "\n".join(rep.problems[:30])
        more = f"\n... and {len(rep.problems) - 30} more" if len(rep.problems) > 30 else ""
        raise AdoptError(f"{store.uri} does not verify ({len(rep.problems)} problem(s)); nothing was imported:\n"
                         f"{shown}{more}")
    say(f"verified {rep.files} file(s) in {rep.seconds:.1f}s")
    rows, ck_row = build_rows(store, rep.facts, config, job.batch_id, src.uri)
    ck_row = _with_broker_topics(src, ck_row, config)
    if config.durable:
        # The broker's files (or our copies) may still be in the page cache: on stable storage
        # before the commit that makes them part of the store.
        store.sync_files(sorted({r.path for r in rows}))
    if job.locked:
        clear_broker_tmp(store)
    committed = manifest.commit(store, snap.versions, rows, ck_row, durable=config.durable, lease=job.lease)
    snapcache.refresh(store, committed)     # readers open this snapshot without Delta/pyarrow
    say(f"committed import batch {ck_row.batch_id}: {ck_row.total_messages} messages, "
        f"max phy offset {ck_row.max_phy_offset}")
    counts = Counter(r.kind for r in rows)
    return {"batch_id": ck_row.batch_id, "batch_seq": ck_row.batch_seq, "status": "committed",
            "operation": "import", "messages": ck_row.messages, "record_bytes": ck_row.record_bytes,
            "index_entries": ck_row.index_entries, "segments": counts[FileKind.COMMITLOG],
            "consumequeue_files": counts[FileKind.CONSUMEQUEUE], "index_files": counts[FileKind.INDEX],
            "min_phy_offset": ck_row.min_phy_offset, "max_phy_offset": ck_row.max_phy_offset,
            "seconds": round(time.time() - job.t0, 3)}


def _with_broker_topics(src: storage.Store, ck_row: BatchRow, config: StoreConfig) -> BatchRow:
    """``ck_row`` with the broker's own topic config (``config/topics.json`` under its storePathRootDir), recorded
    with the import as an ingest records its --topics: later batches place messages as that
    broker does (storelib.ingest.driver ``resolve_topics``); its topics with queues in the store
    count as placed. A topics.json that cannot be read is a TopicsError (nothing imported)."""
    from ..ingest.topics import Topics
    if not src.exists(paths.BROKER_TOPICS):
        return ck_row
    tcfg = Topics.parse(src.read(paths.BROKER_TOPICS), src.uri_of(paths.BROKER_TOPICS), config.defaultTopicQueueNums)
    have = {q["topic"] for q in ck_row.queue_offsets}
    detail = dict(ck_row.detail, topics=tcfg.to_dict(sorted(have & set(tcfg.table))))
    return BatchRow({**ck_row, "detail": manifest.dumps(detail)})


def build_rows(store: storage.Store, facts: list, config: StoreConfig, batch_id: str | None,
               source: str) -> tuple[list[ManifestRow], BatchRow]:
    """The import batch's manifest rows and checkpoints row, from verify's facts of the broker's files."""
    now = manifest.now_ms()
    segs = sorted((f for f in facts if f["kind"] == FileKind.COMMITLOG), key=lambda f: f["base_offset"])
    cqs = sorted((f for f in facts if f["kind"] == FileKind.CONSUMEQUEUE),
                 key=lambda f: (f["topic"], f["queue_id"], f["base_offset"]))
    idxs = sorted((f for f in facts if f["kind"] == FileKind.INDEX), key=lambda f: f["path"].rsplit("/", 1)[-1])
    fp = hashlib.sha256(source.encode())
    for f in segs + cqs + idxs:
        fp.update(f"{f['path']}\0{f['valid_bytes']}\0{f['checksum']}\0".encode())
    fingerprint = fp.hexdigest()
    batch_id = batch_id or f"import-{fingerprint[:16]}"
    seq = 1
    key: dict[str, Any] = dict(batch_id=batch_id, batch_seq=seq, committed_at=now)
    rows = []
    for f in segs:
        rows.append(manifest.file_row(
            FileKind.COMMITLOG, f["path"], base_offset=f["base_offset"], file_size=f["file_size"],
            valid_bytes=f["valid_bytes"], count=f["count"], min_offset=f["min_offset"], max_offset=f["max_offset"],
            min_store_ts=f["min_store_ts"], max_store_ts=f["max_store_ts"], checksum=f["checksum"],
            detail=manifest.dumps({"zones": f["zones"]}) if f.get("zones") else None, **key))
    queue_next: dict = {}
    for f in cqs:
        rows.append(manifest.file_row(
            FileKind.CONSUMEQUEUE, f["path"], topic=f["topic"], queue_id=f["queue_id"], base_offset=f["base_offset"],
            file_size=f["file_size"], valid_bytes=f["valid_bytes"], count=f["count"], min_offset=f["min_offset"],
            max_offset=f["max_offset"], checksum=f["checksum"],
            detail=manifest.dumps({"min_phys": f["min_phys"], "max_phys": f["max_phys"]}), **key))
        queue_next[(f["topic"], f["queue_id"])] = f["base_offset"] // consumequeue.UNIT_SIZE + f["count"]
    for f in idxs:
        h = f["header"]
        rows.append(manifest.file_row(
            FileKind.INDEX, f["path"], file_size=f["file_size"], valid_bytes=f["valid_bytes"], count=f["count"],
            min_offset=h["begin_phy_offset"], max_offset=h["end_phy_offset"], min_store_ts=h["begin_timestamp"],
            max_store_ts=h["end_timestamp"], checksum=f["checksum"], detail=manifest.dumps({"header": h}), **key))
    data = store.read(ckpt.FILE_NAME) if store.exists(ckpt.FILE_NAME) else ckpt.Checkpoint().to_bytes()
    ck = ckpt.Checkpoint.from_bytes(data)
    rows.append(manifest.file_row(FileKind.CHECKPOINT, ckpt.FILE_NAME, file_size=len(data), valid_bytes=len(data), count=0,
                                  checksum=checksum.checksum_of_bytes(data), detail=manifest.dumps(ck.to_dict()),
                                  **key))
    mins = [f["min_store_ts"] for f in segs if f["min_store_ts"] is not None]
    maxs = [f["max_store_ts"] for f in segs if f["max_store_ts"] is not None]
    total = sum(f["count"] for f in segs)
    last = segs[-1]
    ck_row = manifest.checkpoint_row(
        operation="import", input_fingerprint=fingerprint, messages=total,
        bytes=sum(f["record_bytes"] for f in segs), index_entries=sum(f["count"] for f in idxs),
        total_messages=total, min_phy_offset=segs[0]["base_offset"], max_phy_offset=last["end"],
        queue_offsets=manifest.queue_offsets(queue_next),
        physic_msg_timestamp=ck.physic_msg_timestamp, logics_msg_timestamp=ck.logics_msg_timestamp,
        index_msg_timestamp=ck.index_msg_timestamp,
        min_store_ts=min(mins) if mins else None, max_store_ts=max(maxs) if maxs else None,
        wall_time_ms=0, config=manifest.config_column(config),
        detail=manifest.dumps({"source": source, "segments": len(segs), "consumequeue_files": len(cqs),
                               "index_files": len(idxs),
                               "confirm_phy_offset": ck.confirm_phy_offset}), **key)
    return manifest_rows(rows), BatchRow(ck_row)
