"""Verify a store's files against their format (docs/FORMAT.md §1-§4) and against the manifest.

Work is split into independent tasks, run as Spark tasks (or in process without Spark):
one per commitlog segment, one per group of consume queues (a queue's files stay together),
one per index file. The driver adds what needs the whole listing: missing / extra files, gaps
between segments and queue files, the checkpoint file, and the checkpoint row's totals.

Levels:

* default (structural): file sizes; the checksum of the valid bytes against the manifest
  (``checksum.file_checksum``: sha256 over the sha256 digests of 16 MiB blocks); every
  commitlog record parses (magic, TOTALSIZE equals the length its fields give, PHYSICALOFFSET
  equals its position, transaction rules), the chain of records reaches the BLANK record whose
  length runs to the file end (or the valid end in the last segment), nothing but zeros after the
  data; consume-queue units well formed (positive sizes, commitlog offsets ascending and below
  the end of the commitlog, full non-last files, zero tail), counts and offsets as the manifest
  says; index headers agree with their entries (indexCount, hashSlotCount = chain heads,
  begin/endPhyOffset = first/last entry), slots and chains stay inside the file and point
  backwards, every entry in a slot's chain hashes to that slot; the checkpoint file against the
  checkpoint table (a RocketMQ broker that opened the store may have written its
  masterFlushedOffset and confirmPhyOffset: accepted within [0, max physical offset]).
* ``deep`` adds the cross-file checks: body CRCs (``crc32 & 0x7fffffff``); every consume-queue
  unit at or above the min physical offset points at a record of that topic / queue id / queue
  offset, with the stored size and tagsCode; every index entry at or above the min offset points
  at a record (not a ROLLBACK) one of whose keys ``topic#UNIQ_KEY`` / ``topic#KEYS token``
  hashes to the stored hash, with the stored timeDiff; the index headers' begin/end timestamps
  equal the store times of the records at begin/endPhyOffset.

Each problem is one line ``<path>@<byte offset>: <what>``. In process (no Spark) the tasks run on
as many threads as the process has processors: the compiled checks and hashlib release the GIL.
Index files appended in place after the snapshot (a later batch's entries beyond its indexCount,
slot heads pointing at them) are checked as the snapshot's readers see them (``verify.indexfile.verify_index``).
A store without a manifest (a broker's) gets the structural and deep checks, with the valid
lengths a broker's recovery would find (``storefiles.StoreFiles.scan``).

This module plans the tasks, runs them and builds the report; the checks themselves are in
``verify.commitlog`` (segments), ``verify.consumequeue`` (consume queues), ``verify.indexfile``
(index files), ``verify.cross`` (deep cross-file checks) and ``verify.access`` (what they share:
problem lines, file access, record reads).
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..format import checkpoint as ckpt, paths
from ..io import checksum, storage
from ..table import deltalog, manifest, rowcheck
from ..table.rows import BatchRow, FileKind, ManifestRow
from ..errors import CorruptStore, StoreError
from ..format.config import StoreConfig
from ..format.names import INDEX_FILE_NAME, OFFSET_FILE_NAME
from .access import FileData, Problem, problem, VerifyContext
from .indexfile import paged_head_len, verify_index
from .consumequeue import verify_queues
from .commitlog import ScanBuffers, verify_segment

__all__ = ["run_task", "run_tasks", "pack_tasks", "Report", "plan", "check_checkpoint", "verify_store"]


# ---------------------------------------------------------------------------- driver
def run_task(ctx: VerifyContext, t: dict) -> dict:
    t0 = time.time()
    kind = t["kind"]
    try:
        if kind == FileKind.COMMITLOG:
            r = verify_segment(ctx, t)
        elif kind == "queues":
            r = verify_queues(ctx, t)
        else:
            r = verify_index(ctx, t)
    except Exception as e:  # noqa: BLE001 - a broken file must become a problem line, not a crash
        path = t.get("path") or (t["queues"][0]["files"][0]["path"] if t.get("queues") else "?")
        r = {"problems": [problem(path, 0, f"cannot be checked: {type(e).__name__}: {e}")], "facts": None,
             "bytes_read": 0, "logical_bytes": 0}
    r["seconds"] = time.time() - t0
    r["task"] = kind
    return r


def run_tasks(ctx: VerifyContext, tasks: list) -> list:
    """``run_task`` of each of a Spark task's work units; the queue and index files the segment
    tasks kept (``VerifyContext.targets``) are let go of at the end (their bounds stay with the
    process's copy of ``ctx``, for its next Spark task)."""
    try:
        return [run_task(ctx, t) for t in tasks]
    finally:
        ctx.targets.clear()


def _weight(t: dict, cfg: StoreConfig) -> int:
    if t["kind"] == FileKind.COMMITLOG:
        return cfg.mappedFileSizeCommitLog
    if t["kind"] == FileKind.INDEX:
        return cfg.index_file_size
    return sum(len(q["files"]) for q in t["queues"]) * cfg.cq_file_size


def pack_tasks(tasks: list, cfg: StoreConfig, max_parts: int) -> list:
    """Spark tasks: one work unit each (segment / index file / queue group) when there are few;
    otherwise the units are packed, biggest first, into ``max_parts`` tasks of similar weight
    (sixty 64 KiB segments are not worth sixty Python task launches)."""
    units = sorted(tasks, key=lambda t: -_weight(t, cfg))
    if len(units) <= max_parts:
        return [[t] for t in units]
    weights = [0] * max_parts
    packed: list[list[dict]] = [[] for _ in range(max_parts)]
    for t in units:
        i = min(range(max_parts), key=lambda k: (weights[k], k))
        weights[i] += _weight(t, cfg)
        packed[i].append(t)
    return [p for p in packed if p]


@dataclass
class Report:
    found: list                             # Problem values, sorted by file and offset, each once
    facts: list = field(default_factory=list)
    files: int = 0
    bytes_read: int = 0
    logical_bytes: int = 0
    record_bytes: int = 0                   # valid record bytes of the commitlog segments checked
    seconds: float = 0.0
    deep: bool = False
    manifest: bool = False

    @property
    def problems(self) -> list:
        """The problem lines verify prints, ``<path>@<offset>: <what>``, in order."""
        return [str(p) for p in self.found]

    @property
    def ok(self) -> bool:
        return not self.found

    def emit(self, as_json: bool = False) -> None:
        """What both verify entry points print: one line per problem on stdout, the summary on
        stderr (``key=value`` pairs, or JSON)."""
        for p in self.problems:
            print(p)
        s = self.summary()
        print(json.dumps(s) if as_json else "rocketlake verify: " + " ".join(f"{k}={v}" for k, v in s.items()),
              file=sys.stderr)

    def summary(self) -> dict:
        return {"status": "ok" if self.ok else "FAILED", "problems": len(self.problems), "files": self.files,
                "deep": self.deep, "manifest": self.manifest, "logical_bytes": self.logical_bytes,
                "bytes_read": self.bytes_read, "record_bytes": self.record_bytes, "seconds": round(self.seconds, 3),
                "logical_gb_per_s": round(self.logical_bytes / 1e9 / self.seconds, 2) if self.seconds else None,
                "record_gb_per_s": round(self.record_bytes / 1e9 / self.seconds, 2) if self.seconds else None}


def plan(store: storage.Store, config: StoreConfig, snap: manifest.Snapshot | None, deep: bool,
         queues_per_task: int = 16, body_crcs: bool = False):
    """(ctx, tasks, driver problems); ``body_crcs``: the segment tasks compare every body with its
    BODYCRC without ``deep`` (``verify_store``)."""
    problems: list = []
    F = config.mappedFileSizeCommitLog
    has_manifest = snap is not None and snap.batch is not None
    disk_cl = [r for r in store.list_files("commitlog", recursive=False)]
    disk_cq = store.list_files("consumequeue")
    disk_idx = store.list_files("index", recursive=False)
    for rel in store.list_files("commitlog"):
        if rel not in disk_cl:
            problems.append(problem(rel, 0, "unexpected file in a commitlog subdirectory"))
    for rel in store.list_files("index"):
        if rel not in disk_idx:
            problems.append(problem(rel, 0, "unexpected file in an index subdirectory"))
    if snap is not None and has_manifest:
        cl, cqs, idx, segments, min_phy, max_phy = _plan_from_manifest(snap, config, disk_cl + disk_cq + disk_idx,
                                                                       problems, store)
    else:
        cl, cqs, idx, segments, min_phy, max_phy = _plan_from_disk(store, config, disk_cl, disk_cq, disk_idx,
                                                                   problems)
    _check_names_and_gaps(cl, idx, F, problems)
    tasks = _make_tasks(cl, cqs, idx, queues_per_task)
    queues, index_files = [], []
    if deep:                 # the segment tasks check the units and entries pointing into them (verify.cross)
        queues = [{"topic": q["topic"], "queue_id": q["queue_id"],
                   "files": [{"path": f["path"], "base": f["base"]} for f in q["files"]]}
                  for t in tasks if t["kind"] == "queues" for q in t["queues"]]
        index_files = [{"path": p, "header": _row_header(r)} for p, r in idx]
    ctx = VerifyContext(store=store.uri, config=config, deep=deep, segments=segments, min_phy=min_phy,
                        max_phy=max_phy, queues=queues, index_files=index_files, body_crcs=body_crcs)
    problems += check_checkpoint(store, snap, config)
    return ctx, tasks, problems


def _row_header(r: ManifestRow | None) -> dict | None:
    """The index header a manifest row committed (the snapshot's view of the file), if any."""
    if r is None:
        return None
    try:
        h = r.detail.get("header")
    except ValueError:
        return None
    return h if isinstance(h, dict) and isinstance(h.get("index_count"), int) else None


def _left_by_an_expiry(store: storage.Store, rel: str, gone: dict) -> bool:
    """Whether ``rel`` is the file a crash-cut expiry removed from the manifest and has yet to
    delete: the size and checksum of the row it removed. Anything else under that name is not
    that file, and a broker would load it before the store's first segment."""
    row = ManifestRow.of(gone)
    if store.size(rel) != row.file_size:
        return False
    got, _ = FileData(store, rel).checksum(row.valid_bytes,
                                           head_len=paged_head_len(gone) if row.kind == FileKind.INDEX else None)
    return got == row.checksum


def _plan_from_manifest(snap: manifest.Snapshot, config: StoreConfig, on_disk: list, problems: list,
                        store: storage.Store):
    """(commitlog, queues, index, segments, min_phy, max_phy) the manifest names; problems of its rows."""
    # rows readers cannot use (garbage values) are reported and left out of the checks below; the
    # structural checks of the rows (table.rowcheck) are the ones every operation makes first
    F = config.mappedFileSizeCommitLog
    usable, _ = rowcheck.usable_rows(snap, config)
    rows = {p: ManifestRow.of(r) for p, r in usable.items()}
    problems += [problem(*p) for p in rowcheck.snapshot_problems(snap, config)]

    def of_kind(kind):
        return sorted((r for r in rows.values() if r.kind == kind), key=lambda r: r.path)

    segs = sorted(of_kind(FileKind.COMMITLOG), key=lambda r: r.base_offset)
    cl = [(r.path, r.base_offset, r.valid_bytes, r) for r in segs]
    cqs: dict = {}
    for r in of_kind(FileKind.CONSUMEQUEUE):
        cqs.setdefault((r.topic, r.queue_id), []).append((r.path, r.base_offset, r))
    idx = [(r.path, r) for r in sorted(of_kind(FileKind.INDEX), key=lambda r: r.path.rsplit("/", 1)[-1])]
    known = set(snap.files)
    pending_delete = getattr(snap, "removed", {})     # left by an expiry a crash cut short
    for rel in on_disk:
        gone = pending_delete.get(rel)
        if gone is not None and _left_by_an_expiry(store, rel, gone):
            continue
        if rel not in known:
            problems.append(problem(rel, 0, f"extra file: not in the manifest (as of batch "
                                            f"{snap.batch.batch_id if snap.batch else None})"))
    segments = [(p, b, F if i < len(cl) - 1 else v) for i, (p, b, v, _) in enumerate(cl)]
    max_phy = cl[-1][1] + cl[-1][2] if cl else 0
    min_phy = cl[0][1] if cl else 0
    return cl, cqs, idx, segments, min_phy, max_phy


def _plan_from_disk(store: storage.Store, config: StoreConfig, disk_cl: list, disk_cq: list, disk_idx: list,
                    problems: list):
    """(commitlog, queues, index, segments, min_phy, max_phy) of a store without a manifest: the
    valid lengths a broker's recovery finds (``storefiles.StoreFiles.scan``)."""
    from ..table.storefiles import StoreFiles
    view = StoreFiles.scan(store, config)
    cl = [(s.rel, s.base, s.valid, None) for s in view.commitlog]
    # names that scan skipped
    for rel in disk_cl:
        if not OFFSET_FILE_NAME.match(rel.rsplit("/", 1)[-1]):
            problems.append(problem(rel, 0, "commitlog file name is not a 20-digit offset"))
    cqs: dict = {}
    for rel in disk_cq:
        parts = rel.split("/")
        if len(parts) != 4 or not OFFSET_FILE_NAME.match(parts[3]) or not parts[2].lstrip("-").isdigit():
            problems.append(problem(rel, 0, "not a consume queue file (consumequeue/<topic>/<queueId>/<20 digits>)"))
            continue
        cqs.setdefault((parts[1], int(parts[2])), []).append((rel, int(parts[3]), None))
    idx = [(rel, None) for rel in sorted(disk_idx, key=lambda r: r.rsplit("/", 1)[-1])]
    segments = [(s.rel, s.base, s.valid) for s in view.commitlog]
    max_phy = view.commitlog[-1].base + view.commitlog[-1].valid if view.commitlog else 0
    min_phy = view.commitlog[0].base if view.commitlog else 0
    return cl, cqs, idx, segments, min_phy, max_phy


def _check_names_and_gaps(cl: list, idx: list, F: int, problems: list) -> None:
    """Index file names; commitlog segments contiguous and aligned to the file size."""
    for rel, _ in idx:
        if not INDEX_FILE_NAME.match(rel.rsplit("/", 1)[-1]):
            problems.append(problem(rel, 0, "index file name is not yyyyMMddHHmmssSSS"))
    problems += [problem(*p) for p in rowcheck.segment_gaps([(p, b) for p, b, _, _ in cl], F)]
    for p, b, _, _ in cl:
        if b % F:
            problems.append(problem(p, 0, f"segment start {b} is not a multiple of the file size {F}"))


def _make_tasks(cl: list, cqs: dict, idx: list, queues_per_task: int) -> list:
    """One task per segment and per index file, one per ``queues_per_task`` queues (a queue's files together)."""
    tasks = []
    for i, (p, b, _v, r) in enumerate(cl):
        tasks.append({"kind": FileKind.COMMITLOG, "path": p, "base": b, "last": i == len(cl) - 1, "manifest": r})
    for p, r in idx:
        tasks.append({"kind": FileKind.INDEX, "path": p, "manifest": r})
    qlist = []
    for (topic, qid), fs in sorted(cqs.items()):
        fs = sorted(fs, key=lambda x: x[1])
        qlist.append({"topic": topic, "queue_id": qid,
                      "files": [{"path": p, "base": b, "manifest": r} for p, b, r in fs]})
    for i in range(0, len(qlist), queues_per_task):
        tasks.append({"kind": "queues", "queues": qlist[i:i + queues_per_task]})
    return tasks


def _checkpoint_changes(rel: str, data: bytes, row: ManifestRow, batch: BatchRow) -> list:
    """The checkpoint's bytes are not the ones the manifest recorded: fine when only what a
    RocketMQ broker writes into it on a store it opened and shut down cleanly differs, its
    masterFlushedOffset and confirmPhyOffset (bytes 24..39), each within [0, the max physical
    offset]; anything else is a problem."""
    detail = row.detail
    mine = ckpt.Checkpoint(int(detail.get("physic_msg_timestamp", 0)), int(detail.get("logics_msg_timestamp", 0)),
                           int(detail.get("index_msg_timestamp", 0)), int(detail.get("master_flushed_offset", 0)),
                           int(detail.get("confirm_phy_offset", 0)),
                           int(detail.get("logics_physical_offset", 0))).to_bytes()
    c = ckpt.Checkpoint.from_bytes(data)
    cap = batch.max_phy_offset
    as_written = data[:ckpt.POS_MASTER_FLUSHED_OFFSET] + mine[ckpt.POS_MASTER_FLUSHED_OFFSET:ckpt.LAYOUT_SIZE] \
        + data[ckpt.LAYOUT_SIZE:]
    if checksum.checksum_of_bytes(as_written) != row.checksum:
        return [problem(rel, 0, "sha256 differs from the manifest")]
    out = []
    for name, at in (("master_flushed_offset", ckpt.POS_MASTER_FLUSHED_OFFSET),
                     ("confirm_phy_offset", ckpt.POS_CONFIRM_PHY_OFFSET)):
        v = getattr(c, name)
        if not 0 <= v <= cap:
            out.append(problem(rel, at, f"{name} {v} outside [0, max physical offset {cap}]"))
    return out


def check_checkpoint(store: storage.Store, snap, config: StoreConfig | None = None) -> list:
    out = []
    rel = ckpt.FILE_NAME
    size = store.size(rel)
    has_manifest = snap is not None and snap.batch is not None
    if size is None:
        if has_manifest or store.list_files("commitlog"):
            out.append(problem(rel, 0, "missing file"))
        return out
    data = store.read(rel)
    if size != ckpt.FILE_SIZE:
        out.append(problem(rel, min(size, ckpt.FILE_SIZE), f"file size {size}, expected {ckpt.FILE_SIZE}"))
    # a store without a manifest (a broker's) is of the line its config names: 5.5's sixth value
    line = snap.batch.rocketmq_line if has_manifest else config.rocketmqVersion if config is not None else None
    layout = ckpt.LAYOUT_SIZE_5_5 if line == "5.5" else ckpt.LAYOUT_SIZE
    nz = np.flatnonzero(np.frombuffer(data[layout:], dtype=np.uint8))
    if len(nz):
        out.append(problem(rel, layout + int(nz[0]), f"non-zero byte after the {layout // 8} checkpoint values"))
    if has_manifest:
        c = ckpt.Checkpoint.from_bytes(data)
        b = snap.batch
        for name, at in (("physic_msg_timestamp", ckpt.POS_PHYSIC_MSG_TIMESTAMP),
                         ("logics_msg_timestamp", ckpt.POS_LOGICS_MSG_TIMESTAMP),
                         ("index_msg_timestamp", ckpt.POS_INDEX_MSG_TIMESTAMP)):
            if getattr(c, name) != b[name]:
                out.append(problem(rel, at, f"{name} {getattr(c, name)}, checkpoint table (batch {b['batch_id']}) "
                                            f"says {b[name]}"))
        row = snap.files.get(rel)
        if row is None:
            out.append(problem(rel, 0, "the manifest has no row for the checkpoint file"))
        elif row["checksum"] and checksum.checksum_of_bytes(data) != row["checksum"]:
            out += _checkpoint_changes(rel, data, row, b)
        if row is not None and (row.get("file_size"), row.get("valid_bytes")) != (size, size):
            out.append(problem(rel, 0, f"file size {size}, manifest says file_size {row.get('file_size')}, "
                                       f"valid_bytes {row.get('valid_bytes')}"))
    return out


def verify_store(store: str | storage.Store, config: StoreConfig | None = None, deep: bool = False, spark=None,
                 as_of_batch=None, version: int | None = None, snap=None, use_manifest: bool = True,
                 threads: int | None = None, body_crcs: bool = False) -> Report:
    """Run every check; ``spark`` None runs the tasks in this process, on ``threads`` threads
    (default: the processors this process may use; the checks' kernels and hashing release the GIL).
    ``body_crcs``: the structural checks also compare every record's body with its BODYCRC (in the
    same compiled pass over the records), without ``deep``'s cross-file checks."""
    from ..table.rows import recorded_config
    from ..table.snapshots import open_snapshot
    t0 = time.time()
    store = storage.Store(store) if isinstance(store, str) else store     # a path or URI, or an open Store
    meta: list = []                          # the Delta tables' own damage
    unreadable = False
    if use_manifest:
        for table in (paths.MANIFEST_DIR, paths.CHECKPOINTS_DIR):
            try:
                meta += [problem(*p) for p in deltalog.log_problems(store, table)]
            except (StoreError, OSError) as e:
                meta.append(problem(f"{table}/_delta_log", 0, f"cannot be read: {e}"))
        if snap is None:
            try:
                snap = open_snapshot(store, as_of_batch, version)
            except StoreError as e:          # a damaged manifest: report it, check the files as a broker would
                line = Problem(e.path, e.offset, e.what) if isinstance(e, CorruptStore) \
                    else problem(paths.MANIFEST_DIR, 0, str(e))
                if line not in meta:
                    meta.append(line)
                snap, unreadable = None, True
    has_manifest = snap is not None and snap.batch is not None
    if has_manifest and store.os_paths and _rebuilt(store, snap, as_of_batch is not None or version is not None):
        return _verify_rebuilt(store, snap, config, deep, spark, threads, meta, t0)
    if has_manifest:
        cfg = recorded_config(snap.batch, config)
    elif unreadable:
        from ..table.storefiles import infer_config
        try:
            cfg = infer_config(store, config)
        except ValueError:
            cfg = config or StoreConfig()
    else:
        cfg = config or StoreConfig()
    if has_manifest and not store.local:
        meta += _map_objects(store, snap)
    ctx, tasks, problems = plan(store, cfg, snap if has_manifest else None, deep, body_crcs=body_crcs)
    if store.assembled:
        ctx = dataclasses.replace(ctx, assembled=dict(store.assembled))
    problems = meta + list(problems)
    if spark is not None and tasks:
        sc = spark.sparkContext
        bctx = sc.broadcast(ctx)
        parts = pack_tasks(tasks, cfg, 4 * sc.defaultParallelism)
        results = sc.parallelize(parts, len(parts)).flatMap(lambda units: run_tasks(bctx.value, units)).collect()
    else:
        threads = threads or _processors()
        # in process: one Store (and its checked paths) and one set of scan buffers for all
        # tasks; a segment task runs its pieces on ``threads`` threads of its own
        local = dataclasses.replace(ctx, local_store=store, threads=threads, scan_buffers=ScanBuffers())
        results = _run_local(local, tasks, cfg, threads)
    facts = []
    found = list(problems)
    rep = Report(found=[], deep=deep, manifest=has_manifest)
    for r in results:
        found.extend(r["problems"])
        rep.bytes_read += r["bytes_read"]
        rep.logical_bytes += r["logical_bytes"]
        rep.record_bytes += r.get("record_bytes", 0)
        f = r["facts"]
        if isinstance(f, list):
            facts.extend(f)
        elif f:
            facts.append(f)
    rep.facts = facts
    rep.files = sum(1 for t in tasks if t["kind"] != "queues") + sum(
        len(q["files"]) for t in tasks if t["kind"] == "queues" for q in t["queues"])
    # A file out of order is cross-checked whole by its own task, so a segment task may have named
    # the same problem: each line once.
    rep.found = sorted(set(found))
    rep.seconds = time.time() - t0
    return rep


def _map_objects(store: storage.Store, snap) -> list[Problem]:
    """On an object store a file is the objects its manifest row lists (storelib.io.fragments): map
    each, so the checks read the file there (a file without extents is read at its path). A row
    whose extents cannot be had (a missing or damaged extent-list object: storelib.io.extentlists)
    is a problem of its file, which is then checked as unreadable; each list object is read here,
    whatever this process read before (a long-lived one, the UI's, has them cached)."""
    from ..io import extentlists
    from ..table.storefiles import reading_path, staging_batches
    staged = staging_batches(store)
    extentlists.prefetch(((r.path, r.detail) for r in snap.files.values() if r.has_detail("extent_lists")),
                         extentlists.fetcher(store), fresh=True)      # (read, not taken from a cache)
    out = []
    for row in snap.files.values():
        try:
            reading_path(store, row, staged)
        except CorruptStore as e:
            out.append(Problem(e.path, e.offset, e.what))
    return out


def _rebuilt(store: storage.Store, snap, pinned: bool) -> bool:
    """Must ``snap``'s files be rebuilt before they are checked: an earlier snapshot than the
    latest (``pinned``: one asked for), or one with a publish still unfinished (an expiry's
    publish only deletes: its files are all in place)?"""
    from ..table.storefiles import staging_batches
    return (snap.batch.operation != "expire" and snap.batch.batch_id in staging_batches(store)) or \
        (pinned and snap.pinned)


def _verify_rebuilt(store: storage.Store, snap, config, deep: bool, spark, threads, meta: list, t0: float) -> Report:
    """An earlier snapshot (later batches appended to files it lists, and changed index heads and
    the checkpoint), or one whose publish is unfinished: its files are rebuilt as of it
    (storelib.table.export, into a temporary local directory) and verified there against its manifest
    rows."""
    import shutil
    import tempfile
    from ..table.export import export_store
    tmp = tempfile.mkdtemp(prefix="rocketlake-verify-")
    try:
        target = os.path.join(tmp, "store")
        export_store(store.uri, target, snap=snap, durable=False, check=False)
        rep = verify_store(target, config, deep=deep, spark=spark, snap=snap, threads=threads)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rep.found = sorted(set(meta + rep.found))
    rep.seconds = time.time() - t0
    return rep


def _run_local(ctx: VerifyContext, tasks: list, cfg: StoreConfig, threads: int | None) -> list:
    """The tasks in this process on ``threads`` threads (results in task order): index files first
    (one thread each, for their whole length), then the biggest first (a segment task keeps every
    thread busy with its own pieces, so it can come after a long index file and still end with it).
    The queue and index files the segment tasks kept (``VerifyContext.targets``) are let go of at the end."""
    if threads is None:
        threads = _processors()
    if threads <= 1 or len(tasks) <= 1:
        return run_tasks(ctx, tasks)
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i]["kind"] != FileKind.INDEX, -_weight(tasks[i], cfg)))
    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            done = dict(zip(order, pool.map(lambda i: run_task(ctx, tasks[i]), order)))
    finally:
        ctx.targets.clear()
    return [done[i] for i in range(len(tasks))]


def _processors() -> int:
    """The processors this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
