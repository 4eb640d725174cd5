"""Repair a store's consume-queue files, index files and checkpoint from its CommitLog alone.

A broker rebuilds these only for what its recovery notices, by re-dispatching the CommitLog on one
thread. Here the segments are read by tasks (Spark tasks of a run of segments each, or a thread
per segment in this process: ``ops.rebuild``), the files the commitlog implies are built in bulk,
and each is compared with the file on disk:

* ``missing`` (no file), ``truncated`` (shorter than its file size), ``differing`` (the first
  differing unit, slot, entry or header field, what it holds and what it should hold), or
  ``extra`` (an index file past the ones the commitlog implies); the rest are ``ok``;
* consume-queue units below a queue's first derivable offset (their records went with expired
  segments) are taken as the file holds them; on a rocketlake store the file must then be its
  manifest row's version, or those units are damaged and underivable: ``unrestorable`` (``--apply``
  refuses the run, ``RepairRefused``: restore the file from a copy); index files are rebuilt
  only from a commitlog that still starts at offset 0 (an index file's entries depend on every
  earlier file's);
* index files are compared by position (a broker names them by the wall clock); a missing one is
  named after its neighbours so that name order stays creation order.

On a rocketlake store repair derives only what the committed snapshot holds: the segments of
its manifest rows up to their valid bytes (read where readers read them: a committed batch whose
publish is unfinished through its staged files), and only files that have a row (a queue or index
file an expiry removed, per topic or store-wide, is never written again, though its records may
still be in the commitlog); in an export, only a queue's files from the start its
``rocketlake.properties`` records on (``table.export.recorded_queue_starts``: older ones a
retention rule removed). The commitlog must verify against its rows first (valid bytes,
checksums): a damaged one is refused (``RepairRefused``, naming the file and offset) and nothing
changes. A broker's directory has no rows: the dispatch stops at the first damaged record, as a
broker's recovery does, and the summary says where (``commitlog``).

``apply`` replaces only the files that differ (and, in a broker's directory, removes extra index
files); the others keep their inode and mtime. Every file repair writes is created exclusively
(``O_CREAT|O_EXCL|O_NOFOLLOW``: a file or link already at that name stops the run) in a directory
of its own, never beside the store's files, fsynced, then renamed over its path.

* A rocketlake store: under the writer lease, a pending publish (and a committed expiry's pending
  deletes) is finished first; the new versions are staged under
  ``_rocketlake/staging/<batch>/<attempt>/``, the lease checked, the batch committed (operation
  ``repair``: a manifest row per replaced file, a checkpoint row whose checkpoint-file timestamps
  are the new file's), and only then published (the ingest's ``publish``: a crash after the
  commit is finished by the next writer). No committed byte changes before the commit, so a
  repair that stalls past its lease changes nothing. Nothing to replace: no batch.
* A broker's directory: a running broker's lock on ``<storePathRootDir>/lock`` (RocketMQ holds an
  exclusive ``fcntl`` lock on it) is refused, and the lock is held (exclusively) for the whole run
  so that no broker starts meanwhile (a rocketlake store's repair holds it shared, as its writer
  lease does: ``io.brokerlock``); each file is written under ``_rocketlake/tmp/repair-*`` (where neither a
  broker nor verify looks; a killed run's leftovers are removed by the next one), renamed over its
  path, its directory fsynced. Sizes the files cannot tell (no queue file, no index file left)
  must come from a ``--config`` (``sizes_given``), never from RocketMQ's defaults in silence.
"""
from __future__ import annotations

import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import RepairError, RepairRefused
from ..format import checkpoint as ckpt, commitlog, consumequeue, indexfile, paths
from ..format.config import StoreConfig
from ..ingest import commit as commit_stage
from ..io import checksum, storage
from ..io.brokerlock import hold_broker_lock
from ..io.condput import refuse_gs_store
from ..runtime.faults import fault
from ..runtime.progress import Progress
from ..table import export, manifest, rowcheck, snapcache, storefiles, writerlease
from ..table.rows import FileKind, ManifestRow, check_batch_id, manifest_rows, recorded_config
from ..table.snapshots import open_snapshot
from ..verify import commitlog as verify_commitlog, indexfile as verify_index
from . import filediff, rebuild
from .expire import finish_pending

__all__ = ["clear_broker_tmp", "plan_repair", "repair", "write_exclusive"]

_LEGACY_TMP_SUFFIX = ".repair-tmp"          # where an earlier repair wrote beside the file (removed on apply)


def _segments(store: storage.Store, snap) -> list:
    """(rel read, base, valid bytes, manifest row) of the commitlog segments, in offset order: a
    rocketlake store's rows (read where readers read them, up to their valid bytes), else the
    segments on disk (valid and row None)."""
    if snap is not None and snap.batch is not None:
        staged = storefiles.staging_batches(store)
        rows = sorted(manifest_rows(snap.of_kind(FileKind.COMMITLOG)), key=lambda r: r.base_offset)
        return [(storefiles.reading_path(store, r, staged), r.base_offset, r.valid_bytes, r) for r in rows]
    out = []
    for rel in store.list_files(commitlog.DIR, recursive=False):
        name = rel.rsplit("/", 1)[-1]
        if len(name) == 20 and name.isdigit():
            out.append((rel, int(name), None, None))
    return sorted(out, key=lambda s: s[1])


def _dispatch(store: storage.Store, segs: list, cfg: StoreConfig, spark, threads: int | None) -> rebuild.Dispatch:
    """Every segment's ``rebuild.dispatch_segment``: Spark tasks of a run of segments each (at most
    four per core of the cluster, in commitlog order), or threads here."""
    segs = [s[:3] for s in segs]
    if spark is not None and not store.assembled:     # (a file read through a mapping: read here)
        uri, text = store.uri, cfg.to_json()
        sc = spark.sparkContext
        n = max(1, min(len(segs), 4 * sc.defaultParallelism))
        runs = [segs[i * len(segs) // n:(i + 1) * len(segs) // n] for i in range(n)]

        def task(run):
            from storelib.io.storage import Store
            from storelib.format.config import StoreConfig as Cfg
            st, c = Store(uri), Cfg.from_json(text)
            return [p for rel, base, valid in run for p in rebuild.dispatch_segment(st, rel, base, c, valid=valid)]
        parts = [p for r in sc.parallelize(runs, n).map(task).collect() for p in r]
    else:
        n = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        if len(segs) >= n:                         # many segments: one thread each
            with ThreadPoolExecutor(max_workers=n) as pool:
                parts = [p for ps in pool.map(lambda s: rebuild.dispatch_segment(store, s[0], s[1], cfg, valid=s[2]),
                                              segs) for p in ps]
        else:                                      # few (big) segments: each one's pieces on the threads
            parts = [p for s in segs for p in rebuild.dispatch_segment(store, s[0], s[1], cfg, n, valid=s[2])]
    return rebuild.join_dispatch(parts)


def _commitlog_damage(store: storage.Store, segs: list, d: rebuild.Dispatch):
    """(path, offset, what) of the first commitlog segment that does not hold its manifest row's
    version (missing, shorter than its valid bytes, a damaged record, other bytes than its
    checksum's), None when every one does."""
    ends = {rel: (stop, reason) for rel, _, _, stop, reason in d.segments}
    for rel, base, valid, row in segs:
        if row is None:
            continue
        name = row.path
        fd = rebuild.file_data(store, rel)
        if not fd.exists or fd.size < valid:
            return name, fd.size or 0, (f"{fd.size} bytes, the manifest says {valid} valid bytes" if fd.exists
                                        else f"missing: the manifest says {valid} valid bytes")
        stop, reason = ends.get(rel, (valid, 0))
        if reason in (2, 3) and stop < valid:
            return name, stop, ("a damaged record (its fields do not fit it, or its body is not its BODYCRC's)" if reason == 3 else
                                f"a zero size or an unknown magic: the records end here, before the {valid} valid bytes")
        sha, digests = fd.checksum(valid)
        if sha == row.checksum:
            continue
        buf = fd.buf[:valid]
        starts, _, _ = rebuild.codec.record_starts(buf, 0, valid)
        found: list = []
        verify_commitlog.check_records(buf, starts, base, name, True, found)
        if found:
            return name, found[0].offset, found[0].what
        known = checksum.digests_from_detail(row.detail.get("blocks"))
        i = next((k for k, g in enumerate(digests) if k >= len(known) or known[k] != g), 0)
        return name, i * checksum.BLOCK_SIZE, (f"bytes [{i * checksum.BLOCK_SIZE}, "
                                               f"{min(valid, (i + 1) * checksum.BLOCK_SIZE)}) differ from the "
                                               f"manifest's checksum (batch {row.batch_id})")
    return None


# ---------------------------------------------------------------------------- the plan
class _View:
    """The store as repair compares it: a rocketlake store's files where readers read them (a
    committed batch's files whose publish is unfinished: their staged copies), and which files the
    committed snapshot holds (``listed``; None: a broker's directory, every derivable file)."""

    def __init__(self, store: storage.Store, snap):
        self.store = store
        self.snap = snap
        self.listed = None
        self._where: dict = {}
        self.starts = None                 # an export's queue starts (table.export.recorded_queue_starts)
        if snap is not None:
            staged = storefiles.staging_batches(store)
            self.listed = set(snap.files)
            self._where = {rel: storefiles.reading_path(store, r, staged) for rel, r in snap.files.items()}
        else:
            self.starts = export.recorded_queue_starts(store)

    def file(self, rel: str):
        return rebuild.file_data(self.store, self._where.get(rel, rel))

    def holds(self, rel: str) -> bool:
        if self.starts is not None and rel.startswith(consumequeue.DIR + "/"):
            parts = rel.split("/")         # (an export: a queue's files from its recorded start on)
            start = self.starts.get(f"{parts[1]}/{parts[2]}")
            return start is not None and int(parts[3]) // consumequeue.UNIT_SIZE >= start
        return self.listed is None or rel in self.listed

    def unlisted(self) -> str:
        return _UNLISTED if self.starts is None else _BEFORE_START


_UNLISTED = "derivable from the commitlog, but not in the committed snapshot (an expiry removed it): not written"
_BEFORE_START = ("derivable from the commitlog, but before the queue's first file the export recorded (a retention "
                 "rule removed it): not written")


def _lost_head(view: _View, rel: str, e: rebuild.ExpectedQueueFile, want: np.ndarray, have: np.ndarray) -> str:
    """Why a queue file cannot be restored ('' when it can): its units below ``e.known_from``
    point at records an expiry deleted, so only the file holds them. On a rocketlake store the
    file with them as found must be its manifest row's version (sha256 of the valid bytes); in a
    directory without a manifest each of them must be there and be a unit (size > 0). Otherwise
    the head is damaged and nothing can derive it. (A broker keeps such units: its consume queue's
    min offset is the first unit at or past the commitlog's min offset, so every unit stays where
    it was written; a zero unit ends a broker's recovery of the queue there.)"""
    row = view.snap.files.get(rel) if view.snap is not None else None
    row = ManifestRow.of(row) if row is not None else None
    fix = ("they cannot be derived. Restore the file from a copy of the store (a backup or an export) and rerun "
           "repair; nothing was changed")
    if row is None:
        units = have[:len(have) - len(have) % consumequeue.UNIT_SIZE].view(consumequeue.UNIT_DTYPE)
        if len(units) == e.known_from and (units["size"] > 0).all():
            return ""
        return (f"units 0-{e.known_from - 1} point at commitlog records an expiry deleted, so only this file holds "
                f"them, and {len(units)} of them are there ({int((units['size'] <= 0).sum())} zero): {fix}")
    valid = row.valid_bytes
    if len(want) == valid and checksum.checksum_of_bytes(want[:valid]) == row.checksum:
        return ""
    return (f"units 0-{e.known_from - 1} point at commitlog records an expiry deleted, so only this file holds them, "
            f"and as found they are not the manifest's version (batch {row.batch_id}: sha256 of {valid} bytes "
            f"differs): {fix}")


def _queue_findings(view: _View, cfg: StoreConfig, d: rebuild.Dispatch) -> list:
    out = []
    expected = rebuild.expected_queues(d, cfg)
    for rel in sorted(expected):
        if not view.holds(rel):
            out.append({"kind": FileKind.CONSUMEQUEUE, "path": rel, "state": "unlisted", "detail": view.unlisted()})
            continue
        e = expected[rel]
        fd = view.file(rel)
        want = e.units.copy()
        note = ""
        if e.known_from:
            k = e.known_from * consumequeue.UNIT_SIZE
            have = fd.buf[:k]
            want[:len(have)] = have
            note = f"; units below {e.known_from} kept as found (their records are gone)"
            lost = _lost_head(view, rel, e, want, have)
            if lost:
                out.append({"kind": FileKind.CONSUMEQUEUE, "path": rel, "state": "unrestorable", "detail": lost})
                continue
        state, detail = filediff.judge(fd, want, cfg.cq_file_size, filediff.name_unit)
        if e.holes:
            note += f"; {e.holes} unit(s) inside the queue have no record"
        out.append({"kind": FileKind.CONSUMEQUEUE, "path": rel, "state": state, "detail": detail + note,
                    "data": want, "valid": len(want), "count": e.n_units, "file_size": cfg.cq_file_size})
    if view.listed is None:
        on_disk = [r for r in view.store.list_files(consumequeue.DIR) if not r.endswith(_LEGACY_TMP_SUFFIX)]
    else:
        on_disk = [r.path for r in view.snap.of_kind(FileKind.CONSUMEQUEUE)]
    for rel in sorted(set(on_disk) - set(expected)):
        light = consumequeue.is_lmq(rel.split("/")[1]) if rel.count("/") >= 3 else False
        out.append({"kind": FileKind.CONSUMEQUEUE, "path": rel, "state": "underived",
                    "detail": "a light message queue's file (multi-dispatch, docs/FORMAT.md §2.1): repair does not "
                              "derive those; left as it is" if light
                    else "no record of the commitlog lands in this file: left as it is"})
    return out


def _header_of(store: storage.Store, rel: str):
    try:
        raw = store.read(rel, 0, indexfile.HEADER_SIZE)
    except (OSError, ValueError):
        return None
    return indexfile.IndexHeader.parse(raw) if len(raw) == indexfile.HEADER_SIZE else None


def _index_names(store: storage.Store, snap, files: list) -> tuple[list, list]:
    """(name of each expected index file, extra names on disk past them). Files on disk are taken
    in name order; one whose header is the next expected file's while the current one's is not
    means the current one is missing (it gets a name between its neighbours), so a lost file in
    the middle does not shift every later one."""
    if snap is not None and snap.batch is not None:
        return _positional(sorted(r.path for r in snap.of_kind(FileKind.INDEX)), files)
    have = sorted(r for r in store.list_files(indexfile.DIR, recursive=False) if not r.endswith(_LEGACY_TMP_SUFFIX))
    heads = [_header_of(store, r) for r in have]
    names: list[str | None] = []
    j = 0
    for i, b in enumerate(files):
        if j < len(have):
            nxt = files[i + 1].header if i + 1 < len(files) else None
            lo = indexfile.name_millis(str(names[-1]).rsplit("/", 1)[-1]) if names else 0
            hi = indexfile.name_millis(have[j].rsplit("/", 1)[-1])
            if heads[j] != b.header and nxt is not None and heads[j] == nxt and lo is not None and hi is not None \
                    and hi - (lo or 0) > 1:
                t = b.header.begin_timestamp if b.header.begin_timestamp > 0 else hi - 1
                names.append(f"{indexfile.DIR}/{indexfile.file_name(min(max((lo or 0) + 1, t), hi - 1))}")
                continue
            names.append(have[j])
            j += 1
        else:
            names.append(None)
    return _positional(names, files, have[j:])


def _positional(names: list, files: list, extra: list | None = None) -> tuple[list, list]:
    """Names for the expected files past ``names`` (after the last one), and the extra ones."""
    known = [n for n in names[:len(files)] if n is not None]
    extra = names[len(files):] if extra is None else extra
    prev = indexfile.name_millis(known[-1].rsplit("/", 1)[-1]) if known else 0
    out = known[:]
    for b in files[len(out):]:
        t = b.header.begin_timestamp if b.header.begin_timestamp > 0 else int(time.time() * 1000)
        ms = indexfile.name_time(prev or 0, t)
        out.append(f"{indexfile.DIR}/{indexfile.file_name(ms)}")
        prev = ms
    return out, extra


def _underived_index(view: _View, start: int) -> list:
    """Index files when the commitlog no longer starts at 0 (an index file's entries depend on
    every earlier file's): left as they are; on a rocketlake store each must then be its manifest
    row's version, or it is damaged and nothing can derive it (``unrestorable``)."""
    out = [{"kind": FileKind.INDEX, "path": indexfile.DIR, "state": "underived",
            "detail": f"the commitlog starts at {start}, not 0: index files left as they are"}]
    for row in manifest_rows(sorted(view.snap.of_kind(FileKind.INDEX) if view.snap is not None else [],
                                    key=lambda r: r.path)):
        fd, valid = view.file(row.path), row.valid_bytes
        if fd.exists and fd.size == row.file_size and \
                fd.checksum(valid, head_len=verify_index.paged_head_len(row))[0] == row.checksum:
            continue
        out.append({"kind": FileKind.INDEX, "path": row.path, "state": "unrestorable",
                    "detail": f"the commitlog starts at {start}, not 0 (an expiry deleted its first records), so "
                              "index files cannot be derived, and this one is not its manifest row's version "
                              f"(batch {row.batch_id}): restore the file from a copy of the store (a backup or "
                              "an export) and rerun repair; nothing was changed"})
    return out


def _index_findings(view: _View, cfg: StoreConfig, d: rebuild.Dispatch, files: list) -> list:
    out = []
    if d.segments and d.segments[0][1] > 0:
        return _underived_index(view, d.segments[0][1])
    names, extra = _index_names(view.store, view.snap, files)
    namer = filediff.index_namer(cfg)
    for rel, b in zip(names, files):
        if not view.holds(rel):
            out.append({"kind": FileKind.INDEX, "path": rel, "state": "unlisted", "detail": _UNLISTED})
            continue
        want = np.frombuffer(b"".join(bytes(c) for c in b.chunks()), np.uint8)
        state, detail = filediff.judge(view.file(rel), want, cfg.index_file_size, namer)
        out.append({"kind": FileKind.INDEX, "path": rel, "state": state, "detail": detail, "data": want,
                    "valid": len(want), "count": b.header.index_count - 1, "file_size": cfg.index_file_size,
                    "header": b.header.to_dict()})
    for rel in extra:
        out.append({"kind": FileKind.INDEX, "path": rel, "state": "extra",
                    "detail": "past the index files the commitlog implies: removed on apply"})
    return out


def _committed_checkpoint(view: _View, fd):
    """What the checkpoint holds besides what the commitlog implies (HA offsets, timestamps whose
    records are gone): a rocketlake store's committed row (the file may be the damaged part), a
    broker's file."""
    row = view.snap.files.get(ckpt.FILE_NAME) if view.snap is not None else None
    if row is not None:
        d = row.detail
        return ckpt.Checkpoint(**{k: int(d.get(k) or 0) for k in ckpt.Checkpoint.__dataclass_fields__})
    return ckpt.Checkpoint.from_bytes(bytes(fd.buf[:ckpt.LAYOUT_SIZE])) if fd.exists else None


def _checkpoint_finding(view: _View, d: rebuild.Dispatch, files: list | None, cfg: StoreConfig) -> dict:
    if not view.holds(ckpt.FILE_NAME):
        return {"kind": FileKind.CHECKPOINT, "path": ckpt.FILE_NAME, "state": "unlisted", "detail": _UNLISTED}
    fd = view.file(ckpt.FILE_NAME)
    ck = rebuild.expected_checkpoint(d, files, _committed_checkpoint(view, fd), line_5_5=cfg.line_5_5)
    want = np.frombuffer(ck.to_bytes(), np.uint8)
    state, detail = filediff.judge(fd, want, ckpt.FILE_SIZE, filediff.name_checkpoint)
    return {"kind": FileKind.CHECKPOINT, "path": ckpt.FILE_NAME, "state": state, "detail": detail, "data": want,
            "valid": ckpt.FILE_SIZE, "count": 0, "file_size": ckpt.FILE_SIZE, "checkpoint": ck.to_dict()}


def plan_repair(store: storage.Store, cfg: StoreConfig, snap=None, spark=None, threads: int | None = None) -> dict:
    """Every derived file compared with the disk: ``findings`` (one dict per file: kind, path,
    state, detail; the expected bytes in ``data``), the segments' walk and the record count.
    ``RepairRefused`` when a rocketlake store's commitlog does not verify against its rows."""
    segs = _segments(store, snap)
    if not segs:
        raise RepairError(f"{store.uri} holds no commitlog segments: nothing to rebuild from")
    view = _View(store, snap)
    d = _dispatch(store, segs, cfg, spark, threads)
    damage = _commitlog_damage(store, segs, d)
    if damage is not None:
        raise RepairRefused(damage[0], damage[1], f"{damage[2]}: the commitlog does not verify against its manifest "
                                                  "rows, so nothing can be derived from it; nothing was changed")
    files = rebuild.expected_index(d, cfg) if segs[0][1] == 0 else None
    findings = _queue_findings(view, cfg, d) + _index_findings(view, cfg, d, files or [])
    findings.append(_checkpoint_finding(view, d, files, cfg))
    notes = [f"{rel}: a damaged record at byte {stop}: nothing from there on was dispatched" for rel, _, _, stop, reason in d.segments if reason == 3]
    notes += [f"{rel}: the data ends at byte {stop} without the BLANK record that closes a segment"
              for rel, _, _, stop, reason in d.segments[:-1] if reason == 2]
    return {"findings": findings, "records": int(len(d.phys)), "segments": len(segs), "commitlog": notes,
            "index_entries": int(len(d.key_hash)), "queue_units": int(d.cq.sum())}


# ---------------------------------------------------------------------------- applying
def write_exclusive(path: str, data, file_size: int, durable: bool = True) -> None:
    """Create ``path`` exclusively (``O_CREAT|O_EXCL|O_NOFOLLOW``: never an existing file, never
    through a link planted at its name) with ``data`` and a zero (sparse) tail up to
    ``file_size``, fsynced with ``durable``. ``RepairError`` when something is already there."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except FileExistsError:
        raise RepairError(f"{path} already exists (a file or link nobody should have put there) where repair was "
                          "about to write: stopped; no committed file was changed") from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(memoryview(data))
        fh.truncate(file_size)                     # the zero tail stays a hole, as a broker's is
        fh.flush()
        if durable:
            storage.fsync_fd(fh.fileno())


def _no_links(store: storage.Store, rel: str) -> None:
    """``RepairError`` when a directory on the way to ``rel`` (repair's own, under ``_rocketlake/``)
    is a link: what repair writes there would land somewhere else in the store."""
    parts = rel.split("/")
    for k in range(1, len(parts) + 1):
        here = store.path("/".join(parts[:k]))
        if os.path.islink(here):
            raise RepairError(f"{here} is a link (nobody should have put one there) on the way to where repair "
                              "writes: stopped; no committed file was changed")


def _make_dirs(folder: str, exist_ok: bool = True) -> list:
    """Create ``folder`` (and its parents; ``exist_ok`` False: ``FileExistsError`` when it is
    there); the parents whose entries changed (to fsync). A parent another process removes
    meanwhile as empty (``_rocketlake/tmp``, ``_rocketlake/``: writers that hold the writer lease,
    which a broker directory's repair does not take) is made again."""
    made, d = [], folder
    while not os.path.isdir(d):
        made.append(d)
        d = os.path.dirname(d)
    storage.make_dirs(folder, exist_ok=exist_ok)
    return [os.path.dirname(m) for m in made]


def clear_broker_tmp(store: storage.Store) -> None:
    """What a killed repair of a broker's directory left: its temporary directories under
    ``_rocketlake/tmp/``, and files an earlier repair wrote beside their target (``<file>.repair-tmp``).
    Called by a holder of the broker lock (a repair, an in-place adopt): every repair of the
    directory holds it for its whole run, so what is there is a dead run's. A commit's own
    clean-up (``deltacommit.clear_scratch``) never removes these."""
    tmp = store.path(paths.TMP_DIR)
    if os.path.isdir(tmp) and not os.path.islink(tmp):
        for name in os.listdir(tmp):
            if name.startswith(paths.TMP_REPAIR_PREFIX):
                shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
        storage.remove_dir_if_empty(store, paths.TMP_DIR)
        storage.remove_dir_if_empty(store, paths.META_DIR)
    for sub in (consumequeue.DIR, indexfile.DIR, ""):
        for rel in store.list_files(sub, recursive=bool(sub)):
            if rel.endswith(_LEGACY_TMP_SUFFIX):
                os.unlink(store.path(rel))


def _replace_in_place(store: storage.Store, f: dict, tmp_dir: str, n: int) -> None:
    """A broker directory's file of finding ``f``: written exclusively under ``tmp_dir``, fsynced,
    renamed over its path, the directories fsynced."""
    path = store.path(f["path"])
    folder = os.path.dirname(path)
    synced = _make_dirs(folder)
    tmp = os.path.join(tmp_dir, f"{n:06d}")
    write_exclusive(tmp, f["data"], f["file_size"])
    os.replace(tmp, path)
    storage.sync_dirs([folder, tmp_dir] + synced)


def _manifest_rows(snap, changed: list, batch_id: str, seq: int, now: int, staging: str, attempt: str) -> list:
    rows = []
    for f in changed:
        prev = snap.files[f["path"]]
        data = f["data"][:f["valid"]]
        detail = dict(prev.detail)                 # (a copy: the row's own stays as committed)
        detail.pop("patch", None)                  # (the new version is a whole staged file)
        detail.pop("tail", None)
        detail.pop("head", None)
        if "blocks" in detail:
            blocks = [data[i:i + checksum.BLOCK_SIZE] for i in range(0, len(data), checksum.BLOCK_SIZE)]
            detail["blocks"] = checksum.digests_to_detail(checksum.block_digests(blocks))
        if f["kind"] == FileKind.INDEX:
            detail["header"] = f["header"]
        if f["kind"] == FileKind.CHECKPOINT:
            detail.update(f["checkpoint"])
        row = manifest.file_row(prev.kind, prev.path, batch_id, seq, now, staged_path=_staged(staging, f),
                                attempt_id=attempt, **{
            k: prev[k] for k in ("topic", "queue_id", "base_offset", "file_size", "min_offset", "max_offset",
                                 "min_store_ts", "max_store_ts")})
        row.update(valid_bytes=f["valid"], count=f["count"], checksum=checksum.checksum_of_bytes(data),
                   detail=manifest.dumps(detail))
        rows.append(row)
    return rows


def _staged(staging: str, f: dict) -> str:
    return f"{staging}/files/{f['path']}"


def _commit(store: storage.Store, snap, changed: list, lease, batch_id: str | None, t0: float, say) -> dict:
    """The repair batch of a rocketlake store: its files staged, a row per replaced file and a
    checkpoint row committed (the lease checked before each commit), then published."""
    now = manifest.now_ms()
    seq = snap.batch_seq + 1
    batch_id = batch_id or f"repair-{now}-{seq}"
    if any(b.batch_id == batch_id for b in snap.batches):
        raise RepairError(f"batch id {batch_id!r} is already committed in {store.uri}: give a repair a new one")
    attempt = uuid.uuid4().hex[:12]
    staging = f"{paths.STAGING_DIR}/{batch_id}/{attempt}"
    durable = snap.batch.durable
    committing = False
    try:
        _no_links(store, staging)
        for f in changed:
            path = store.path(_staged(staging, f))
            _make_dirs(os.path.dirname(path))
            write_exclusive(path, f["data"], f["file_size"], durable)
        if durable:
            store.sync_tree(staging)
        fault("after-files-staged")
        rows = _manifest_rows(snap, changed, batch_id, seq, now, staging, attempt)
        ck_file = next((f["checkpoint"] for f in changed if f["kind"] == FileKind.CHECKPOINT), None)
        stamps = {k: ck_file[k] for k in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")} \
            if ck_file else {}
        ck = manifest.checkpoint_row_after(
            snap.batch, batch_id=batch_id, batch_seq=seq, operation="repair", committed_at=now,
            input_fingerprint=f"repair:{len(changed)}@{now}", messages=0, bytes=0, index_entries=0,
            wall_time_ms=int((time.time() - t0) * 1000), attempt_id=attempt,
            detail=manifest.dumps({"replaced": [f["path"] for f in changed]}), **stamps)
        fault("before-delta-commit")
        committing = True
        committed = manifest.commit(store, snap.versions, rows, ck, fault=fault, durable=durable, lease=lease)
    except BaseException as e:
        commit_stage.abandon_attempt(store, staging, batch_id, attempt, e, committing, lease, "repair")
        raise
    say(f"committed repair batch {batch_id} (seq {seq})")
    fault("after-commit-before-publish")

    def settle() -> None:
        commit_stage.publish(store, rows, durable=durable, lease=lease)
        fault("after-publish-before-cleanup")
        commit_stage.drop_staging(store, staging, durable=durable)
        commit_stage.clear_dead_attempts(store, [*snap.batches, ck], lease)
    if not commit_stage.after_commit(batch_id, lease, settle):
        return {"batch_id": batch_id, "batch_seq": seq, "published": False}
    snapcache.refresh(store, committed)
    return {"batch_id": batch_id, "batch_seq": seq}


def _has_manifest(store: storage.Store) -> bool:
    return store.exists(f"{paths.MANIFEST_DIR}/_delta_log") or store.exists(paths.CHECKPOINTS_DIR)


def _load_snapshot(store: storage.Store):
    if not _has_manifest(store):
        return None
    snap = open_snapshot(store, history=True)
    return snap if snap.batch is not None else None


def _unreadable_sizes(store: storage.Store) -> list:
    """The file kinds whose size a broker's directory cannot tell (no such file left)."""
    out = []
    if not [r for r in store.list_files(consumequeue.DIR) if not r.endswith(_LEGACY_TMP_SUFFIX)]:
        out.append("consume-queue files (mappedFileSizeConsumeQueue)")
    if not [r for r in store.list_files(indexfile.DIR, recursive=False) if not r.endswith(_LEGACY_TMP_SUFFIX)]:
        out.append("index files (maxHashSlotNum, maxIndexNum)")
    return out


def repair(store_uri: str, config: StoreConfig | None = None, apply: bool = False, spark=None,
           threads: int | None = None, batch_id: str | None = None, quiet: bool = False,
           sizes_given: bool = True) -> dict:
    """Compare (and with ``apply`` replace) every file the commitlog implies; the summary has a
    finding per file (``findings``: kind, path, state, detail) and counts per state.
    ``sizes_given``: ``config``'s file sizes were given (a --config); without them, a broker's
    directory whose files cannot tell a size is refused (RepairError) rather than repaired with
    RocketMQ's defaults."""
    t0 = time.time()
    say = Progress(quiet).say
    if batch_id is not None:
        check_batch_id(batch_id)
    if apply:
        refuse_gs_store(store_uri)          # before anything there is read (a dry run only reads)
    store = storage.Store(store_uri)
    if store.local and not os.path.isdir(store.root):
        raise RepairError(f"{store.uri} is not a directory")
    if apply and not store.local:
        raise RepairError(f"{store.uri}: --apply repairs local stores only (a dry run works anywhere)")
    # A broker's directory: held exclusively, as a broker holds it. A rocketlake store: shared, as its
    # writer lease (taken for --apply) holds it: a running broker refuses the repair, another
    # rocketlake writer is the lease's to refuse. A dry run makes no ``lock`` where there is none
    # (one made stays: io.brokerlock), and changes nothing.
    managed = _has_manifest(store)
    broker_lock = hold_broker_lock(store, create=store.local and not managed and apply, shared=managed)
    lease = None
    try:
        snap = _load_snapshot(store)
        rowcheck.check_snapshot(snap)        # never rebuilds from rows verify rejects
        if snap is not None:
            cfg = recorded_config(snap.batch, config)
            if apply:
                lease = writerlease.WriterLease(store, batch_id or "repair")
                lease.acquire()
                snap = open_snapshot(store, history=True)       # as of the lease: a writer may have committed
                rowcheck.check_snapshot(snap)
                snap = finish_pending(store, snap, say, cfg, check=rowcheck.check_snapshot)
                fault("after-lease")
        else:
            from ..table.storeinfo import broker_config
            sized = broker_config(store, config, config if sizes_given else None)
            cfg = sized.config
            unknown = [] if sizes_given or sized.source == "export" else _unreadable_sizes(store)
            if unknown:
                raise RepairError(f"{store.uri}: no {' and no '.join(unknown)} left to read their sizes off: pass "
                                  "--config with the broker's sizes (RocketMQ's defaults are not assumed); nothing "
                                  "was changed")
        p = plan_repair(store, cfg, snap, spark, threads)
        say(f"derived {p['queue_units']} unit(s) and {p['index_entries']} index entries from {p['records']} "
            f"record(s) in {p['segments']} segment(s) ({time.time() - t0:.1f}s)")
        for note in p["commitlog"]:
            say(f"commitlog {note}")
        summary = _summary(p, store, snap, apply, t0)
        if snap is not None and not apply:
            pending = commit_stage.pending_publishes(store, snap)
            summary["pending_publish"] = [b.batch_id for b in pending]
            for b in pending:
                if b.operation == "expire":
                    say(f"expiry {b.batch_id} is committed but its deletes are unfinished (its staged list); "
                        "--apply finishes them first")
                else:
                    say(f"batch {b.batch_id} is committed but its publish is unfinished: its files were read from "
                        "its staging; --apply finishes the publish first")
        if apply:
            summary.update(_apply(store, snap, p["findings"], lease, batch_id, t0, say))
        summary["seconds"] = round(time.time() - t0, 3)
        return summary
    finally:
        if lease is not None:
            lease.release()
        if broker_lock is not None:
            broker_lock.release()


def _summary(p: dict, store: storage.Store, snap, apply: bool, t0: float) -> dict:
    counts: dict = {}
    for f in p["findings"]:
        counts[f["state"]] = counts.get(f["state"], 0) + 1
    return {"store": store.uri, "mode": "apply" if apply else "dry-run", "rocketlake": snap is not None,
            "records": p["records"], "segments": p["segments"], "commitlog": p["commitlog"],
            "queue_units": p["queue_units"],
            "index_entries": p["index_entries"], "counts": counts, "findings": p["findings"],
            "plan_seconds": round(time.time() - t0, 3)}


def _apply(store: storage.Store, snap, findings: list, lease, batch_id: str | None, t0: float, say) -> dict:
    lost = [f for f in findings if f["state"] == "unrestorable"]
    if lost:
        more = f" (and {len(lost) - 1} more file(s) like it)" if len(lost) > 1 else ""
        raise RepairRefused(lost[0]["path"], 0, lost[0]["detail"] + more)
    changed = [f for f in findings if f["state"] in ("missing", "truncated", "differing")]
    out = {"replaced": [f["path"] for f in changed], "removed": []}
    if snap is not None:
        # (a rocketlake store's extra index files are its manifest's: reported, never deleted here)
        if changed:
            out.update(_commit(store, snap, changed, lease, batch_id, t0, say))
        say(f"replaced {len(changed)} file(s)")
        return out
    extra = [f for f in findings if f["state"] == "extra"]
    clear_broker_tmp(store)
    if changed:
        tmp_rel = f"{paths.TMP_DIR}/{paths.TMP_REPAIR_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        _no_links(store, tmp_rel)
        tmp_dir = store.path(tmp_rel)
        synced = _make_dirs(tmp_dir, exist_ok=False)   # (a name nobody else uses: FileExistsError otherwise)
        storage.sync_dirs(synced)                      # (tmp_dir's parent among them)
        for n, f in enumerate(changed):
            _replace_in_place(store, f, tmp_dir, n)
            fault("mid-publish")
        fault("after-publish-before-cleanup")
        clear_broker_tmp(store)
    for f in extra:
        store.delete(f["path"])
    if extra:
        storage.sync_dirs([os.path.dirname(store.path(extra[0]["path"]))])
    out["removed"] = [f["path"] for f in extra]
    say(f"replaced {len(changed)} file(s), removed {len(extra)}")
    return out
