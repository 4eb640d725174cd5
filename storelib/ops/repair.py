"""Repair a store's consume-queue files, index files and checkpoint from its CommitLog alone.

A broker rebuilds these only for what its recovery notices, by re-dispatching the CommitLog on one
thread. Here the segments are read by tasks (Spark tasks of a run of segments each, or a thread
per segment in this process: ``ops.rebuild``), the files the commitlog implies are built in bulk,
and each is compared with the file on disk:

* ``missing`` (no file), ``truncated`` (shorter than its file size), ``differing`` (the first
  differing unit, slot, entry or header field, what it holds and what it should hold), or
  ``extra`` (an index file past the ones the commitlog implies); the rest are ``ok``;
* consume-queue units below a queue's first derivable offset (their records went with expired
  segments) are taken as the file holds them; index files are rebuilt only from a commitlog that
  still starts at offset 0 (an index file's entries depend on every earlier file's);
* index files are compared by position (a broker names them by the wall clock); a missing one is
  named after its neighbours so that name order stays creation order.

``apply`` replaces only the files that differ (and removes extra index files): each is written
beside its final path, fsynced, renamed over it, and its directory fsynced; the others keep their
inode and mtime. A broker directory whose ``lock`` a running broker holds (RocketMQ holds an
exclusive ``fcntl`` lock on ``<storePathRootDir>/lock``) is refused, and the lock is held for the
whole run so that no broker starts meanwhile. On a rocketlake store the replacements are one batch
(operation ``repair``) under the writer lease: a manifest row per replaced file with its new facts
and a checkpoint row copying the previous one, so snapshots and ``verify`` see the repaired files.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import BrokerRunning, RepairError
from ..format import checkpoint as ckpt, commitlog, consumequeue, indexfile, paths
from ..format.config import StoreConfig
from ..io import checksum, storage
from ..runtime.progress import Progress
from ..table import manifest, rowcheck, snapcache, writerlease
from ..verify.access import FileData
from . import rebuild

__all__ = ["LOCK_FILE", "hold_broker_lock", "plan_repair", "repair"]

LOCK_FILE = "lock"
_TMP_SUFFIX = ".repair-tmp"


def hold_broker_lock(store: storage.Store):
    """The fd holding an exclusive lock on the store's ``lock`` file (None: no such file, or not a
    local store); ``BrokerRunning`` when another process (a running broker) holds it."""
    if not store.local:
        return None
    path = os.path.join(store.root, LOCK_FILE)
    if not os.path.isfile(path):
        return None
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise BrokerRunning(f"{path} is locked by another process (a running broker): stop it before "
                            "repairing its store; nothing was changed") from None
    return fd


def _segments(store: storage.Store, snap) -> list:
    """(rel, base) of the commitlog segments, in offset order."""
    if snap is not None and snap.batch is not None:
        return [(r["path"], int(r["base_offset"])) for r in
                sorted(snap.of_kind("commitlog"), key=lambda r: r["base_offset"])]
    out = []
    for rel in store.list_files(commitlog.DIR, recursive=False):
        name = rel.rsplit("/", 1)[-1]
        if len(name) == 20 and name.isdigit():
            out.append((rel, int(name)))
    return sorted(out, key=lambda s: s[1])


def _dispatch(store: storage.Store, segs: list, cfg: StoreConfig, spark, threads: int | None) -> rebuild.Dispatch:
    """Every segment's ``rebuild.dispatch_segment``: Spark tasks of a run of segments each (at most
    four per core of the cluster, in commitlog order), or threads here."""
    if spark is not None:
        uri, text = store.uri, cfg.to_json()
        sc = spark.sparkContext
        n = max(1, min(len(segs), 4 * sc.defaultParallelism))
        runs = [segs[i * len(segs) // n:(i + 1) * len(segs) // n] for i in range(n)]

        def task(run):
            from storelib.io.storage import Store
            from storelib.format.config import StoreConfig as Cfg
            st, c = Store(uri), Cfg.from_json(text)
            return [p for rel, base in run for p in rebuild.dispatch_segment(st, rel, base, c)]
        parts = [p for r in sc.parallelize(runs, n).map(task).collect() for p in r]
    else:
        n = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        if len(segs) >= n:                         # many segments: one thread each
            with ThreadPoolExecutor(max_workers=n) as pool:
                parts = [p for ps in pool.map(lambda s: rebuild.dispatch_segment(store, s[0], s[1], cfg), segs)
                         for p in ps]
        else:                                      # few (big) segments: each one's pieces on the threads
            parts = [p for s in segs for p in rebuild.dispatch_segment(store, s[0], s[1], cfg, n)]
    return rebuild.join_dispatch(parts)


# ---------------------------------------------------------------------------- comparing
def _first_diff(have: np.ndarray, want: np.ndarray) -> int | None:
    n = min(len(have), len(want))
    d = np.flatnonzero(have[:n] != want[:n])
    return int(d[0]) if len(d) else None


def _judge(fd: FileData, want: np.ndarray, file_size: int, name_at) -> tuple:
    """(state, detail) of a file against its expected valid bytes ``want`` (zeros after, up to
    ``file_size``); ``name_at(offset, have, want)`` names what lies at a differing byte."""
    if not fd.exists:
        return "missing", f"should be {file_size} bytes"
    d = _first_diff(fd.buf, want)
    if d is not None:
        return "differing", name_at(d, fd.buf, want)
    nz = fd.first_nonzero(len(want), file_size)
    if nz is not None:
        return "differing", name_at(nz, fd.buf, np.zeros(nz + 64, np.uint8) if len(want) <= nz else want)
    if fd.size < file_size:
        intact = "all data present" if fd.size >= len(want) else f"data ends at byte {fd.size} of {len(want)}"
        return "truncated", f"{fd.size} of {file_size} bytes ({intact})"
    if fd.size > file_size:
        return "differing", f"{fd.size} bytes, longer than the file size {file_size}"
    return "ok", ""


def _unit_text(buf: np.ndarray, u: int) -> str:
    raw = bytes(buf[u * consumequeue.UNIT_SIZE:(u + 1) * consumequeue.UNIT_SIZE])
    if len(raw) < consumequeue.UNIT_SIZE:
        return "(past the end)"
    p, s, t = consumequeue.parse_unit(raw)
    return f"(phys {p}, size {s}, tags {t})"


def _name_unit(d: int, have: np.ndarray, want: np.ndarray) -> str:
    u = d // consumequeue.UNIT_SIZE
    return f"unit {u} (byte {d}) is {_unit_text(have, u)}, should be {_unit_text(want, u)}"


def _index_namer(cfg: StoreConfig):
    ent_at = indexfile.entries_offset(cfg)
    fields = ["begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
              "index_count"]

    def name(d: int, have: np.ndarray, want: np.ndarray) -> str:
        if d < indexfile.HEADER_SIZE:
            h_have = indexfile.IndexHeader.parse(bytes(have[:indexfile.HEADER_SIZE]).ljust(indexfile.HEADER_SIZE, b"\0"))
            h_want = indexfile.IndexHeader.parse(bytes(want[:indexfile.HEADER_SIZE]).ljust(indexfile.HEADER_SIZE, b"\0"))
            f = fields[min(5, d // 8 if d < 32 else 4 + (d - 32) // 4)]
            return f"header {f} is {getattr(h_have, f)}, should be {getattr(h_want, f)}"
        if d < ent_at:
            s = (d - indexfile.HEADER_SIZE) // indexfile.SLOT_SIZE
            at = indexfile.slot_offset(s)

            def slot(b):
                return indexfile.parse_slot(bytes(b[at:at + 4])) if len(b) >= at + 4 else 0
            return f"slot {s} is {slot(have)}, should be {slot(want)}"
        p = (d - ent_at) // indexfile.ENTRY_SIZE
        at = ent_at + p * indexfile.ENTRY_SIZE

        def entry(b):
            raw = bytes(b[at:at + indexfile.ENTRY_SIZE])
            if len(raw) < indexfile.ENTRY_SIZE:
                return "(none)"
            h, ph, td, prev = indexfile.parse_entry(raw)
            return f"(hash {h}, phys {ph}, timeDiff {td}, prevPos {prev})"
        return f"entry {p} is {entry(have)}, should be {entry(want)}"
    return name


def _name_checkpoint(d: int, have: np.ndarray, want: np.ndarray) -> str:
    names = ["physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp", "masterFlushedOffset",
             "confirmPhyOffset"]
    if d >= ckpt.LAYOUT_SIZE:
        return f"byte {d} is not zero"
    a = ckpt.Checkpoint.from_bytes(bytes(have[:ckpt.LAYOUT_SIZE]).ljust(ckpt.LAYOUT_SIZE, b"\0"))
    b = ckpt.Checkpoint.from_bytes(bytes(want[:ckpt.LAYOUT_SIZE]))
    k = d // 8
    return f"{names[k]} is {list(a.to_dict().values())[k]}, should be {list(b.to_dict().values())[k]}"


# ---------------------------------------------------------------------------- the plan
def _queue_findings(store: storage.Store, cfg: StoreConfig, d: rebuild.Dispatch) -> list:
    out = []
    expected = rebuild.expected_queues(d, cfg)
    for rel in sorted(expected):
        e = expected[rel]
        fd = FileData(store, rel)
        want = e.units.copy()
        note = ""
        if e.known_from:
            k = e.known_from * consumequeue.UNIT_SIZE
            have = fd.buf[:k]
            want[:len(have)] = have
            note = f"; units below {e.known_from} kept as found (their records are gone)"
        state, detail = _judge(fd, want, cfg.cq_file_size, _name_unit)
        if e.holes:
            note += f"; {e.holes} unit(s) inside the queue have no record"
        out.append({"kind": "consumequeue", "path": rel, "state": state, "detail": detail + note,
                    "data": want, "valid": len(want), "count": e.n_units, "file_size": cfg.cq_file_size})
    on_disk = [r for r in store.list_files(consumequeue.DIR) if not r.endswith(_TMP_SUFFIX)]
    for rel in sorted(set(on_disk) - set(expected)):
        out.append({"kind": "consumequeue", "path": rel, "state": "underived",
                    "detail": "no record of the commitlog lands in this file: left as it is"})
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
        return _positional(sorted(r["path"] for r in snap.of_kind("index")), files)
    have = sorted(r for r in store.list_files(indexfile.DIR, recursive=False) if not r.endswith(_TMP_SUFFIX))
    heads = [_header_of(store, r) for r in have]
    names, j = [], 0
    for i, b in enumerate(files):
        if j < len(have):
            nxt = files[i + 1].header if i + 1 < len(files) else None
            lo = indexfile.name_millis(names[-1].rsplit("/", 1)[-1]) if names else 0
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
        ms = max((prev or 0) + 1, t)
        out.append(f"{indexfile.DIR}/{indexfile.file_name(ms)}")
        prev = ms
    return out, extra


def _index_findings(store: storage.Store, cfg: StoreConfig, snap, d: rebuild.Dispatch, files: list) -> list:
    out = []
    if d.segments and d.segments[0][1] > 0:
        return [{"kind": "index", "path": indexfile.DIR, "state": "underived",
                 "detail": f"the commitlog starts at {d.segments[0][1]}, not 0: index files left as they are"}]
    names, extra = _index_names(store, snap, files)
    namer = _index_namer(cfg)
    for rel, b in zip(names, files):
        want = np.frombuffer(b"".join(bytes(c) for c in b.chunks()), np.uint8)
        state, detail = _judge(FileData(store, rel), want, cfg.index_file_size, namer)
        out.append({"kind": "index", "path": rel, "state": state, "detail": detail, "data": want,
                    "valid": len(want), "count": b.header.index_count - 1, "file_size": cfg.index_file_size,
                    "header": b.header.to_dict()})
    for rel in extra:
        out.append({"kind": "index", "path": rel, "state": "extra",
                    "detail": "past the index files the commitlog implies: removed on apply"})
    return out


def _checkpoint_finding(store: storage.Store, d: rebuild.Dispatch, files: list) -> dict:
    fd = FileData(store, ckpt.FILE_NAME)
    keep = ckpt.Checkpoint.from_bytes(bytes(fd.buf[:ckpt.LAYOUT_SIZE])) if fd.exists else None
    ck = rebuild.expected_checkpoint(d, files, keep)
    want = np.frombuffer(ck.to_bytes(), np.uint8)
    state, detail = _judge(fd, want, ckpt.FILE_SIZE, _name_checkpoint)
    return {"kind": "checkpoint", "path": ckpt.FILE_NAME, "state": state, "detail": detail, "data": want,
            "valid": ckpt.FILE_SIZE, "count": 0, "file_size": ckpt.FILE_SIZE, "checkpoint": ck.to_dict()}


def plan_repair(store: storage.Store, cfg: StoreConfig, snap=None, spark=None, threads: int | None = None) -> dict:
    """Every derived file compared with the disk: ``findings`` (one dict per file: kind, path,
    state, detail; the expected bytes in ``data``), the segments' walk and the record count."""
    segs = _segments(store, snap)
    if not segs:
        raise RepairError(f"{store.uri} holds no commitlog segments: nothing to rebuild from")
    d = _dispatch(store, segs, cfg, spark, threads)
    files = rebuild.expected_index(d, cfg) if segs[0][1] == 0 else None
    findings = _queue_findings(store, cfg, d) + _index_findings(store, cfg, snap, d, files or [])
    findings.append(_checkpoint_finding(store, d, files))
    notes = [f"{rel}: a damaged record at byte {stop}: nothing from there on was dispatched"
             for rel, _, _, stop, reason in d.segments if reason == 3]
    notes += [f"{rel}: the data ends at byte {stop} without the BLANK record that closes a segment"
              for rel, _, _, stop, reason in d.segments[:-1] if reason == 2]
    return {"findings": findings, "records": int(len(d.phys)), "segments": len(segs), "commitlog": notes,
            "index_entries": int(len(d.key_hash)), "queue_units": int(d.cq.sum())}


# ---------------------------------------------------------------------------- applying
def _replace(store: storage.Store, f: dict) -> None:
    """The file of finding ``f`` rewritten beside its path, fsynced, renamed over it, its directory
    fsynced (and the directories created for it)."""
    path = store.path(f["path"])
    folder = os.path.dirname(path)
    made = []
    d = folder
    while not os.path.isdir(d):
        made.append(d)
        d = os.path.dirname(d)
    os.makedirs(folder, exist_ok=True)
    tmp = path + _TMP_SUFFIX
    with open(tmp, "wb") as fh:
        fh.write(memoryview(f["data"]))
        fh.truncate(f["file_size"])                # the zero tail stays a hole, as a broker's is
        fh.flush()
        storage.fsync_fd(fh.fileno())
    os.replace(tmp, path)
    storage.sync_dirs([folder] + [os.path.dirname(m) for m in made])


def _manifest_rows(snap, changed: list, batch_id: str, seq: int, now: int) -> list:
    rows = []
    for f in changed:
        prev = snap.files.get(f["path"])
        if prev is None:
            continue
        data = f["data"][:f["valid"]]
        detail = json.loads(prev["detail"] or "{}")
        if "blocks" in detail:
            blocks = [data[i:i + checksum.BLOCK_SIZE] for i in range(0, len(data), checksum.BLOCK_SIZE)]
            detail["blocks"] = checksum.digests_to_detail(checksum.block_digests(blocks))
        if f["kind"] == "index":
            detail["header"] = f["header"]
        if f["kind"] == "checkpoint":
            detail.update(f["checkpoint"])
        row = manifest.file_row(prev["kind"], prev["path"], batch_id, seq, now, **{
            k: prev[k] for k in ("topic", "queue_id", "base_offset", "file_size", "min_offset", "max_offset",
                                 "min_store_ts", "max_store_ts")})
        row.update(valid_bytes=f["valid"], count=f["count"], checksum=checksum.checksum_of_bytes(data),
                   detail=manifest.dumps(detail))
        rows.append(row)
    return rows


def _commit(store: storage.Store, snap, changed: list, lease, batch_id: str | None, t0: float) -> dict:
    """The repair batch of a rocketlake store: a row per replaced file, a checkpoint row after."""
    now = manifest.now_ms()
    seq = snap.batch_seq + 1
    batch_id = batch_id or f"repair-{now}-{seq}"
    rows = _manifest_rows(snap, changed, batch_id, seq, now)
    ck = manifest.checkpoint_row_after(
        snap.batch, batch_id=batch_id, batch_seq=seq, operation="repair", committed_at=now,
        input_fingerprint=f"repair:{len(changed)}@{now}", messages=0, bytes=0, index_entries=0,
        wall_time_ms=int((time.time() - t0) * 1000),
        detail=manifest.dumps({"replaced": [f["path"] for f in changed]}))
    durable = json.loads(snap.batch["config"] or "{}").get("flushDiskType", "SYNC_FLUSH") != "ASYNC_FLUSH"
    manifest.commit(store, snap.versions, rows, ck, durable=durable, lease=lease)
    snapcache.refresh(store)
    return {"batch_id": batch_id, "batch_seq": seq}


def _load_snapshot(store: storage.Store):
    if not store.exists(f"{paths.MANIFEST_DIR}/_delta_log") and not store.exists(paths.CHECKPOINTS_DIR):
        return None
    snap = manifest.load_snapshot(store)
    return snap if snap.batch is not None else None


def repair(store_uri: str, config: StoreConfig | None = None, apply: bool = False, spark=None,
           threads: int | None = None, batch_id: str | None = None, quiet: bool = False) -> dict:
    """Compare (and with ``apply`` replace) every file the commitlog implies; the summary has a
    finding per file (``findings``: kind, path, state, detail) and counts per state."""
    t0 = time.time()
    say = Progress(quiet).say
    store = storage.Store(store_uri)
    if store.local and not os.path.isdir(store.root):
        raise RepairError(f"{store.uri} is not a directory")
    if apply and not store.local:
        raise RepairError(f"{store.uri}: --apply repairs local stores only (a dry run works anywhere)")
    lock_fd = hold_broker_lock(store)
    lease = None
    try:
        snap = _load_snapshot(store)
        rowcheck.check_snapshot(snap)        # never rebuilds from rows verify rejects
        if snap is not None:
            from ..table.snapshots import snapshot_config
            cfg = snapshot_config(snap, config)
            if apply:
                lease = writerlease.WriterLease(store, batch_id or "repair")
                lease.acquire()
                snap = manifest.load_snapshot(store)
        else:
            from ..table.storefiles import infer_config
            cfg = infer_config(store, config)
        p = plan_repair(store, cfg, snap, spark, threads)
        say(f"derived {p['queue_units']} unit(s) and {p['index_entries']} index entries from {p['records']} "
            f"record(s) in {p['segments']} segment(s) ({time.time() - t0:.1f}s)")
        summary = _summary(p, store, snap, apply, t0)
        if apply:
            summary.update(_apply(store, snap, p["findings"], lease, batch_id, t0, say))
        summary["seconds"] = round(time.time() - t0, 3)
        return summary
    finally:
        if lease is not None:
            lease.release()
        if lock_fd is not None:
            os.close(lock_fd)


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
    changed = [f for f in findings if f["state"] in ("missing", "truncated", "differing")]
    # (a rocketlake store's extra index files are its manifest's: reported, never deleted here)
    extra = [f for f in findings if f["state"] == "extra"] if snap is None else []
    for f in changed:
        _replace(store, f)
    for f in extra:
        store.delete(f["path"])
    if extra:
        storage.sync_dirs([os.path.dirname(store.path(extra[0]["path"]))])
    out = {"replaced": [f["path"] for f in changed], "removed": [f["path"] for f in extra]}
    say(f"replaced {len(changed)} file(s), removed {len(extra)}")
    if snap is not None and changed:
        out.update(_commit(store, snap, changed, lease, batch_id, t0))
        say(f"committed repair batch {out['batch_id']} (seq {out['batch_seq']})")
    return out
