"""Delta table versions that survive a power cut on local file systems.

delta-rs writes a version's Parquet files and links its ``_delta_log/<version>.json`` without
fsync, and its checkpoints (``<version>.checkpoint.parquet``, ``_last_checkpoint``) likewise. A
power cut can then leave a commit whose data file is empty, a 0-byte commit, or a 0-byte
``_last_checkpoint``: each one makes the whole table unreadable, earlier batches included.

So on a local store delta-rs never writes into a table's directory. It writes into a *scratch
table*: a directory under ``_rocketlake/tmp/`` whose ``_delta_log`` holds hard links to the real
log's files up to the version the writer planned on (delta-rs never changes a log file in place,
so the links are read-only to it). What it produced is then moved into the real table in the
order a reader depends on it, each step durable before the next:

1. the new data files: fsync'd, renamed into the table directory, the directory fsync'd;
2. the commit entry: fsync'd in scratch, then ``link``ed to ``_delta_log/<version>.json`` (fails
   if that version exists: another writer committed first, ``ConcurrentWriteError``), the log
   directory fsync'd;
3. a checkpoint (``checkpoint``): the Parquet file like a data file, then ``_last_checkpoint``
   through a temporary file, fsync, rename, fsync of the directory.

A new table is made whole in scratch and renamed into place in one step. At every point of this
sequence the real table is either the old version or the new one, whole.
On object stores a completed PUT is durable and delta-rs' conditional put is the commit: it
writes there directly (``manifest.commit``).
"""
from __future__ import annotations

from typing import Any, Callable

import errno
import json
import os
import re
import shutil
import uuid
from urllib.parse import unquote

from ..errors import ConcurrentWriteError, LocalCommitConflict, StorePathError
from ..io import storage
from ..format.paths import TMP_DIR, TMP_DROP_PREFIX
from .tableread import open_table, table_uri

__all__ = [ "CHECKPOINT_INTERVAL", "COMMIT_KEY", "commit_token", "commit_version", "commit_local",
           "checkpoint_local", "clear_scratch"]

# The commitInfo field that names one commit call (``commit_token``): how a writer whose object-store
# commit failed after its PUT may have landed tells its own version from another writer's.
COMMIT_KEY = "rocketlake.commit"
# A Delta checkpoint every this many versions of a table (delta-rs' default interval; its own
# post-commit checkpoint is turned off in scratch tables, ours is durable).
CHECKPOINT_INTERVAL = 100
# a scratch table (``_scratch``: uuid4 hex), a staging being dropped (``ingest.commit.drop_staging``)
_SCRATCH_NAME = re.compile(rf"^(?:[0-9a-f]{{32}}|{re.escape(TMP_DROP_PREFIX)}.+)$")
_LOG_FILE = re.compile(r"^(\d{20})\.(json|checkpoint(\.\d{10}\.\d{10})?\.parquet)$")


def _log_files(log_dir: str, upto: int | None) -> list[Any]:
    """Names of the commits and checkpoints in ``log_dir`` up to version ``upto`` (all if None)."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        m = _LOG_FILE.match(n)
        if m and (upto is None or int(m.group(1)) <= upto):
            out.append(n)
    return sorted(out)


def _scratch(store: Any, table_rel: str, version: int | None) -> str:
    """A scratch copy of the table's log as of ``version`` (None: an empty directory)."""
    root: str = store.path(f"{TMP_DIR}/{uuid.uuid4().hex}")
    log = os.path.join(root, "_delta_log")
    storage.make_dirs(log)               # (another writer's _drop may remove an empty _rocketlake/tmp)
    if version is not None:
        real_log = os.path.join(store.path(table_rel), "_delta_log")
        names = _log_files(real_log, version)
        if not any(int(n[:20]) == version for n in names):
            shutil.rmtree(root, ignore_errors=True)
            raise LocalCommitConflict(f"{table_rel}: version {version} is no longer in its log")
        # From the newest single-file checkpoint on (what delta-rs reads of the log): linking
        # every commit of a long history would cost the commit time in the number of versions.
        ckpts = [int(n[:20]) for n in names if n.endswith(".checkpoint.parquet")]
        if ckpts:
            names = [n for n in names if int(n[:20]) >= max(ckpts)]
        for n in names:
            os.link(os.path.join(real_log, n), os.path.join(log, n))
    return root


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        storage.fsync_fd(fd)
    finally:
        os.close(fd)


def _make_dirs(path: str, durable: bool) -> None:
    """``os.makedirs``, with every directory that got a new entry fsync'd."""
    missing = []
    p = path
    while not os.path.isdir(p):
        missing.append(p)
        p = os.path.dirname(p)
    os.makedirs(path, exist_ok=True)
    if durable and missing:
        storage.sync_dirs(sorted({os.path.dirname(d) for d in missing}))


def _move_in(src: str, dst: str, durable: bool) -> None:
    """A file from scratch into the table (data files and checkpoints: names unique to them)."""
    if durable:
        _fsync_path(src)
    _make_dirs(os.path.dirname(dst), durable)
    os.rename(src, dst)


def commit_local(store: Any, table_rel: str, version: int | None, write: Callable[..., None], durable: bool,
                 before_entry: Callable[[], None] | None = None) -> int:
    """Commit one version of the local Delta table at ``table_rel`` on top of ``version`` (None:
    create the table). ``write(table_or_uri, post_commithook_properties)`` makes delta-rs write it
    (into a scratch table). Returns the new version; ``LocalCommitConflict`` if another writer
    committed that version first (nothing of this commit is left in the table then).
    ``before_entry``: called once the new data files are in the table, before its log entry (a
    fault point: files no version names yet)."""
    from deltalake import DeltaTable, PostCommitHookProperties
    real = store.path(table_rel)
    real_log = os.path.join(real, "_delta_log")
    if version is None and _log_files(real_log, None):
        raise LocalCommitConflict(f"{table_rel} was created by another writer since this batch was planned")
    scratch = _scratch(store, table_rel, version)
    try:
        hooks = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
        if version is None:
            write(scratch, hooks)
        else:
            dt: Any = DeltaTable(scratch)
            if dt.version() != version:
                raise LocalCommitConflict(f"{table_rel}: its log is at version {dt.version()}, not {version}")
            write(dt, hooks)
            dt = None
        new = 0 if version is None else version + 1
        entry = os.path.join(scratch, "_delta_log", f"{new:020d}.json")
        if not os.path.exists(entry):
            raise LocalCommitConflict(f"{table_rel}: delta-rs wrote no version {new}")
        if version is None:
            _create_table(scratch, real, durable)
            return 0
        with open(entry, encoding="utf-8") as fh:
            actions = [json.loads(line) for line in fh if line.strip()]
        adds = [a["add"]["path"] for a in actions if "add" in a]
        moved = []
        for p in adds:
            rel = unquote(p)
            if rel.startswith("/") or ".." in rel.split("/"):
                raise StorePathError(f"{table_rel}: delta-rs named a data file outside the table: {p!r}")
            dst = os.path.join(real, rel)
            _move_in(os.path.join(scratch, rel), dst, durable)
            moved.append(dst)
        if durable:
            storage.sync_dirs(sorted({os.path.dirname(d) for d in moved} | {real}))
            _fsync_path(entry)
        if before_entry is not None:
            before_entry()
        _make_dirs(real_log, durable)
        try:
            os.link(entry, os.path.join(real_log, f"{new:020d}.json"))
        except FileExistsError:
            for d in moved:                   # never referenced by any version: leave no trace
                os.unlink(d)
            raise LocalCommitConflict(f"another writer committed version {new} of {table_rel} first") from None
        if durable:
            storage.sync_dirs([real_log])
        return new
    finally:
        _drop(scratch)


def _drop(scratch: str) -> None:
    """Remove a scratch table, and ``_rocketlake/tmp`` with it when nothing else is there."""
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(scratch))
    except OSError:
        pass


def _create_table(scratch: str, real: str, durable: bool) -> None:
    """A new table: the whole scratch directory, every file and directory of it durable, renamed
    into place in one step (no reader ever sees a table directory without its first commit)."""
    if durable:
        for d, _, names in os.walk(scratch):
            for n in names:
                _fsync_path(os.path.join(d, n))
        storage.sync_dirs([d for d, _, _ in os.walk(scratch)])
    _make_dirs(os.path.dirname(real), durable)
    try:
        os.rename(scratch, real)          # replaces only an empty directory, atomically
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise LocalCommitConflict(f"{real}: another writer created the table first") from None
        raise
    if durable:
        storage.sync_dirs([os.path.dirname(real)])


def checkpoint_local(store: Any, table_rel: str, durable: bool) -> int | None:
    """A Delta checkpoint of the table's latest version, made durable before ``_last_checkpoint``
    names it (and before any log cleanup may rely on it). Returns its version (None: no table)."""
    from deltalake import DeltaTable
    real_log = os.path.join(store.path(table_rel), "_delta_log")
    names = _log_files(real_log, None)
    if not names:
        return None
    version = max(int(n[:20]) for n in names)
    if f"{version:020d}.checkpoint.parquet" in names:
        return version
    scratch = _scratch(store, table_rel, version)
    try:
        dt: Any = DeltaTable(scratch)
        dt.create_checkpoint()
        dt = None
        name = f"{version:020d}.checkpoint.parquet"
        src = os.path.join(scratch, "_delta_log", name)
        dst = os.path.join(real_log, name)
        _move_in(src, dst, durable)
        if durable:
            storage.sync_dirs([real_log])
        last = os.path.join(scratch, "_delta_log", "_last_checkpoint")
        tmp = os.path.join(real_log, f"_last_checkpoint.{uuid.uuid4().hex}.tmp")
        shutil.copyfile(last, tmp)
        if durable:
            _fsync_path(tmp)
        os.replace(tmp, os.path.join(real_log, "_last_checkpoint"))
        if durable:
            storage.sync_dirs([real_log])
        return version
    finally:
        _drop(scratch)


def clear_scratch(store: Any) -> None:
    """Remove what dead commits left under ``_rocketlake/tmp``, and only that: scratch tables
    (``_scratch``'s names) and staging directories renamed there to be deleted (``drop-*``,
    ``ingest.commit.drop_staging``). The caller holds the writer lease and has committed, so no
    attempt that could still commit needs them. Every other entry belongs to an operation that
    does not take that lease and may be running: a broker directory's repair works in
    ``repair-*`` under the broker lock, and what a killed one left is removed by a holder of that
    lock (the next repair, or the in-place adopt that makes the directory a store:
    ``ops.repair.clear_broker_tmp``)."""
    if not store.os_paths:
        return
    tmp = store.path(TMP_DIR)
    if os.path.islink(tmp):
        return
    try:
        names = os.listdir(tmp)
    except (FileNotFoundError, NotADirectoryError):      # (another writer removed it as empty)
        return
    for name in names:
        if _SCRATCH_NAME.match(name):
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
    try:
        os.rmdir(tmp)
    except OSError:
        pass


def commit_token() -> dict[str, str]:
    """Custom commit metadata naming one commit call alone (``commit_version``'s ``mine``)."""
    return {COMMIT_KEY: uuid.uuid4().hex}


def commit_version(store: storage.Store, rel: str, version: int | None, write: Callable[..., None], durable: bool,
                    fault: Callable[[str], None] | None = None, point: str | None = None,
                    mine: dict[str, str] | None = None) -> int | None:
    """One conditional Delta commit on top of ``version`` of the table at ``rel`` (the new
    version on a local store; ``point``: the fault point between its data files and its log entry):
    local stores through ``commit_local`` (and a checkpoint every ``CHECKPOINT_INTERVAL``
    versions), object stores through delta-rs' conditional put. ``ConcurrentWriteError`` when
    another writer committed that version first. ``mine``: custom metadata ``write`` puts in the
    commit (``commit_token``), by which an object-store commit that failed other than by a refused
    put is found to have gone in or not (``_commit_object_store``)."""
    from deltalake.exceptions import CommitFailedError
    new = None
    try:
        if store.atomic_rename:
            hook = (lambda: fault(point)) if fault is not None and point else None
            new = commit_local(store, rel, version, write, durable, before_entry=hook)
            if new and new % CHECKPOINT_INTERVAL == 0:
                checkpoint_local(store, rel, durable)
        else:
            _commit_object_store(store, rel, version, write, mine)
    except LocalCommitConflict as e:
        raise ConcurrentWriteError(str(e)) from None
    except CommitFailedError as e:
        raise ConcurrentWriteError(f"another writer committed to {rel} since this batch was planned "
                                   f"({e})") from None
    return new


def _commit_object_store(store: storage.Store, rel: str, version: int | None, write: Callable[..., None],
                         mine: dict[str, str] | None = None) -> None:
    """One conditional Delta commit on an object store (a completed PUT is durable). A batch that
    creates the table creates it or fails (mode "error"): a writer that found no table, then met
    one another writer created meanwhile, must not append to it.

    delta-rs can fail after its PUT went in (reading the new table back while another writer's
    put races it: "No files in log segment"), so an error other than a refused put is checked
    against the version it aimed at: ours (its commitInfo carries ``mine``) is a commit, another
    writer's a lost race (``ConcurrentWriteError``); a version not there leaves the error as it is,
    its outcome unknown (a PUT whose answer was lost may still land)."""
    dt = open_table(store, rel, version) if version is not None else None
    if version is None and open_table(store, rel) is not None:
        raise ConcurrentWriteError(f"{rel} was created by another writer since this batch was planned")
    try:
        if dt is None:
            write(table_uri(store, rel), mode="error")
        else:
            write(dt)
    except Exception as e:  # table creation races surface as several errors
        from deltalake.exceptions import CommitFailedError
        if isinstance(e, CommitFailedError):
            raise
        aimed = 0 if version is None else version + 1
        owner = _committed_by(store, rel, aimed, mine) if mine else None
        if owner is True:
            return
        if owner is False or "already exists" in str(e).lower() or "version" in str(e).lower():
            raise ConcurrentWriteError(f"another writer committed to {rel} ({e})") from None
        raise


def _committed_by(store: storage.Store, rel: str, version: int, mine: dict[str, str]) -> bool | None:
    """Whether ``version`` of the table at ``rel`` is the commit whose commitInfo carries ``mine``
    (False: another's); None when it is not there or cannot be read."""
    try:
        data = store.read(f"{rel}/_delta_log/{version:020d}.json")
    except Exception:  # noqa: BLE001 - not there, or unreadable: nothing is known
        return None
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            info = json.loads(line).get("commitInfo")
        except (ValueError, AttributeError):
            return None
        if isinstance(info, dict):
            return all(info.get(k) == v for k, v in mine.items())
    return False
