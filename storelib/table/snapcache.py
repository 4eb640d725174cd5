"""The cached file list of the latest committed batch: ``_rocketlake/snapshot-cache.json``.

Opening a snapshot from the Delta tables takes deltalake, pyarrow and a Parquet read of both
tables (about 0.5 s of imports and reads before a shell lookup reads its first byte). Every
writer (ingest's commit, expire, adopt, repair) calls ``refresh`` after its commit, with the
snapshot its commit returned (``manifest.committed_snapshot``: the rows a read of the tables gives,
built from the snapshot it opened, its rows and its checkpoint row; the tables are read again,
``manifest.load_snapshot``, when either moved since) and writes the checkpoint row and the live
manifest rows to the cache. ``load`` gives that snapshot to ``storefiles.open_files`` with a few small reads and
``json``: no deltalake, no pyarrow.

The cache is a hint, never the truth: ``load`` uses it only when

* its header's length and sha256 match the body (a torn, truncated or damaged file is ignored);
* for both tables, the next version's commit file does not exist (Delta versions are contiguous
  and each commit file is created once, put-if-absent: the cached version is the latest), and
  every log file a Delta reader of that version depends on (the commits since the newest Delta
  checkpoint, that checkpoint, ``_last_checkpoint``) still has the sha256 it had: a damaged log
  makes readers read the Delta tables (and fail as they did), a store deleted and rebuilt with
  as many commits has other commit files. Delta writes a checkpoint every 100 commits, and
  expire after each run, so that is a few small reads;
* every row names a plain store path (``localstore.is_plain_path``).

Otherwise (``None``) the reader reads the Delta tables as before: a missing, stale or damaged
cache costs time, never a wrong answer, and every path is still checked by ``Store.path`` when a
file is read. A refresh that fails leaves the previous cache, which the versions then mark stale.

Format: one header line ``{"format": "rocketlake-snapshot-cache", "version": 1, "length": N,
"sha256": hex}``, then N bytes of JSON: ``{"tables": {"manifest": {"version": v, "files": [[log file
name, sha256], ...]}, "checkpoints": {...}}, "batch": {checkpoint row}, "files": [live manifest rows]}``.
"""
from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from .deltalog import CHECKPOINT, COMMIT
from .rows import BatchRow, ManifestRow
from ..io.localstore import is_plain_path
from ..format.paths import CHECKPOINTS_DIR, MANIFEST_DIR, META_DIR, SNAPSHOT_CACHE, delta_commit

__all__ = ["FORMAT", "VERSION", "CachedSnapshot", "refresh", "load", "encode", "decode"]

FORMAT = "rocketlake-snapshot-cache"
VERSION = 1
_TABLES = (("manifest", MANIFEST_DIR), ("checkpoints", CHECKPOINTS_DIR))


@dataclass(frozen=True)
class CachedSnapshot:
    """What the cache holds: the latest batch and its live files (``snapshots.open_snapshot``)."""
    batch: BatchRow
    files: dict[str, ManifestRow] = field(default_factory=dict)   # path -> manifest row
    tables: dict[str, Any] = field(default_factory=dict)   # table name -> {"version", "files": [[name, sha256]]}


# ----------------------------------------------------------------------------- writing
def encode(tables: dict[Any, Any], batch: dict[Any, Any], rows: list[Any]) -> bytes:
    """The cache file's bytes (header line + body); ``TypeError`` for a value JSON cannot hold as is."""
    body = json.dumps({"tables": tables, "batch": batch, "files": rows}, sort_keys=True,
                      separators=(",", ":"), allow_nan=False).encode()
    header = json.dumps({"format": FORMAT, "version": VERSION, "length": len(body),
                         "sha256": hashlib.sha256(body).hexdigest()}, sort_keys=True)
    return header.encode() + b"\n" + body


def refresh(store: Any, committed: Any = None) -> bool:
    """Write the cache of the store's latest committed snapshot, as the Delta tables give it.

    Called once at the end of every commit (ingest, expire, adopt, repair) by the writer that
    holds the lease, with ``committed``: the snapshot its commit returned
    (``manifest.committed_snapshot``, the rows a read of the tables gives back, built in memory),
    used when both tables are still at the versions it names; otherwise (a version since, or
    None) the tables are read. Never raises: the commit is done, and without a fresh cache
    readers read the Delta tables. Returns whether it wrote."""
    try:
        from . import manifest
        snap = committed if committed is not None and _latest(store, committed.versions) \
            else manifest.load_snapshot(store, queue_offsets=False)
        if snap.batch is None or snap.versions is None:
            return False
        from .rowcheck import snapshot_problems
        from .rows import recorded_config
        if snapshot_problems(snap, recorded_config(snap.batch)):
            return False                     # readers read the Delta tables and refuse the rows
        if snap.versions.manifest is None or snap.versions.checkpoints is None:
            return False
        versions = {"manifest": snap.versions.manifest, "checkpoints": snap.versions.checkpoints}
        tables = {name: _log_state(store, rel, versions[name]) for name, rel in _TABLES}
        data = encode(tables, snap.batch, sorted(snap.files.values(), key=lambda r: r["path"]))
        if store.atomic_rename:              # readers see the old file or the new one, never a part
            tmp = f"{META_DIR}/snapshot-cache.{uuid.uuid4().hex}.tmp"
            store.write_file(tmp, [data])
            try:
                store.publish(tmp, SNAPSHOT_CACHE)
            finally:
                if store.exists(tmp):
                    store.delete(tmp)
        else:                                # an object PUT is atomic
            store.write_file(SNAPSHOT_CACHE, [data])
        return True
    except Exception:  # noqa: BLE001 - the cache is an optimization; the Delta tables stay the truth
        return False


def _latest(store: Any, versions: Any) -> bool:
    """Both tables are at ``versions`` (no commit file of a later version)."""
    return (versions is not None and versions.manifest is not None and versions.checkpoints is not None
            and not any(store.exists(delta_commit(rel, v + 1))
                        for rel, v in ((MANIFEST_DIR, versions.manifest), (CHECKPOINTS_DIR, versions.checkpoints))))


def _log_state(store: Any, table: str, version: int) -> dict[str, Any]:
    """The Delta log files a reader of ``version`` depends on, with their sha256: the commits from
    the newest checkpoint at or below it (or version 0) up to it, that checkpoint's files and
    ``_last_checkpoint``."""
    log = f"{table}/_delta_log"
    names = [r.rsplit("/", 1)[-1] for r in store.list_files(log, recursive=False)]
    cps = [int(m.group(1)) for n in names for m in [CHECKPOINT.match(n)] if m and int(m.group(1)) <= version]
    since = max(cps) if cps else 0
    keep = [n for n in names
            if _numbered(COMMIT, n, lambda v: since <= v <= version)
            or (_numbered(CHECKPOINT, n, lambda v: v == since) and cps)
            or n == "_last_checkpoint"]
    if delta_commit(table, version).rsplit("/", 1)[-1] not in keep:
        raise ValueError(f"{log}: no commit file of version {version}")
    return {"version": version,
            "files": [[n, hashlib.sha256(store.read(f"{log}/{n}")).hexdigest()] for n in sorted(keep)]}


def _numbered(pattern: re.Pattern[str], name: str, wanted: Callable[[int], bool]) -> bool:
    """``name`` is a Delta log file of ``pattern`` whose version is ``wanted``."""
    m = pattern.match(name)
    return m is not None and wanted(int(m.group(1)))


# ----------------------------------------------------------------------------- reading
def decode(data: bytes) -> dict[Any, Any] | None:
    """The body of a cache file whose header checks out, else None."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        return None
    try:
        h = json.loads(head)
        if not (isinstance(h, dict) and h.get("format") == FORMAT and h.get("version") == VERSION
                and h.get("length") == len(body) and h.get("sha256") == hashlib.sha256(body).hexdigest()):
            return None
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _current(store: Any, rel: str, entry: Any) -> bool:
    """``entry`` names the latest version of the Delta table at ``rel``, whose log files are as
    they were when the cache was written."""
    if not isinstance(entry, dict):
        return False
    version, files = entry.get("version"), entry.get("files")
    if not (type(version) is int and version >= 0 and isinstance(files, list) and files):
        return False
    try:
        if store.exists(delta_commit(rel, version + 1)):
            return False
        for item in files:
            if not (isinstance(item, list) and len(item) == 2 and is_plain_path(item[0]) and "/" not in item[0]):
                return False
            if hashlib.sha256(store.read(f"{rel}/_delta_log/{item[0]}")).hexdigest() != item[1]:
                return False
    except (OSError, ValueError):
        return False
    return True


def _rows_usable(batch: Any, rows: Any) -> bool:
    if not (isinstance(batch, dict) and isinstance(batch.get("batch_id"), str)
            and type(batch.get("batch_seq")) is int and isinstance(rows, list)):
        return False
    for r in rows:
        if not (isinstance(r, dict) and r.get("action") == "add" and is_plain_path(r.get("path"))
                and (r.get("staged_path") is None or is_plain_path(r["staged_path"]))):
            return False
    return True


def load(store: Any) -> CachedSnapshot | None:
    """The latest committed snapshot from the cache, if the cache is sound and current; else None."""
    try:
        data = store.read(SNAPSHOT_CACHE)
    except (OSError, ValueError):             # missing (FileNotFoundError), unreadable, refused path
        return None
    doc = decode(data)
    if doc is None:
        return None
    tables: Any = doc.get("tables")
    batch: Any = doc.get("batch")
    rows: Any = doc.get("files")
    if not isinstance(tables, dict) or not _rows_usable(batch, rows):
        return None
    for name, rel in _TABLES:
        if not _current(store, rel, tables.get(name)):
            return None
    files = {r["path"]: ManifestRow(r) for r in rows}
    if len(files) != len(rows):
        return None
    return CachedSnapshot(batch=BatchRow(batch), files=files, tables=tables)
