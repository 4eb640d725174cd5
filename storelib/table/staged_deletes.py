"""An expiry's publish, staged like an ingest's: what its committed rows remove, listed before the commit.

An expiry (``storelib.ops.expire``) writes, durably and before its Delta commit, one document in
its own attempt's staging directory, ``_rocketlake/staging/<batch_id>/<attempt>/deletes.json``
(``paths.STAGED_DELETES``; its checkpoint row's ``attempt_id`` names the attempt, as an ingest's
does; docs/FORMAT.md §11.2):

    {"format": "rocketlake-expiry-deletes", "version": 1, "batch_id": ..., "batch_seq": ...,
     "files": [store paths the batch removes], "objects": [object stores: every object that ever
     held bytes of those files, superseded versions' included]}

After the commit its publish deletes them (``delete``), makes the deletions durable, then drops
the staging directory (``storelib.ingest.commit.drop_staging``). A crash, a kill or a lost lease
anywhere after the commit leaves the directory: every writer finishes a committed batch's
pending publish at its start (``storelib.ingest.commit.finish_pending_publish``) and so deletes
what the document lists (``finish``), after checking each entry. Knowing that deletes are pending
costs a listing of ``staging/``, as for an ingest's publish: never a read of the manifest table
(finishing a document that lists objects reads one version of it: ``check``).
A crash before the commit leaves a dead attempt, cleared as any other.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

from ..errors import CorruptStore, StoreError
from ..format import paths
from ..format.names import rel_path_problem
from ..io import extentlists, storage
from . import rowobjects
from .rows import manifest_rows

__all__ = ["FORMAT", "Staged", "document", "stage", "read", "check", "removed_by", "objects_before", "delete", "finish",
           "objects_of"]

FORMAT = "rocketlake-expiry-deletes"
VERSION = 1


@dataclass(frozen=True)
class Staged:
    """What one expiry's document lists."""
    batch_id: str
    batch_seq: int
    files: tuple[str, ...]
    objects: tuple[str, ...] = ()


def document(staging: str) -> str:
    """Where the document of the attempt staging at ``staging`` lives."""
    return f"{staging}/{paths.STAGED_DELETES}"


def stage(store: storage.Store, staging: str, staged: Staged, durable: bool) -> None:
    """Write ``staged`` as the attempt's document; with ``durable`` it and every directory leading
    to it are on stable storage when this returns (a PUT is, on object stores)."""
    body = json.dumps({"format": FORMAT, "version": VERSION, "batch_id": staged.batch_id,
                       "batch_seq": staged.batch_seq, "files": list(staged.files), "objects": list(staged.objects)},
                      sort_keys=True, separators=(",", ":"))
    store.write_file(document(staging), [body.encode()], durable=durable)
    if durable:
        store.sync_tree(staging)


def read(store: storage.Store, staging: str) -> Staged | None:
    """The document of the attempt at ``staging`` (None: it has none); ``CorruptStore`` naming it
    when it cannot be read as one (it was fsync'd before the commit, so that is damage)."""
    rel = document(staging)
    if not store.exists(rel):
        return None
    try:
        d = json.loads(store.read(rel))
        ok = isinstance(d, dict) and d.get("format") == FORMAT and d.get("version") == VERSION and \
            isinstance(d.get("files"), list) and isinstance(d.get("objects"), list) and \
            all(isinstance(x, str) for x in d["files"] + d["objects"]) and isinstance(d.get("batch_seq"), int)
    except (ValueError, UnicodeDecodeError):
        ok = False
    if not ok:
        raise CorruptStore(rel, 0, "an expiry's staged deletes that cannot be read: nothing was deleted; "
                                   "remove the attempt's directory once its files are checked")
    return Staged(str(d["batch_id"]), int(d["batch_seq"]), tuple(d["files"]), tuple(d["objects"]))


def check(store: storage.Store, staging: str, staged: Staged, batch: Any, snap: Any) -> None:
    """Refuse (``CorruptStore`` naming the document, nothing deleted) a document that names
    anything the committed expiry ``batch`` did not remove: a path outside the store or outside
    its commitlog/consumequeue/index directories, a file live in ``snap``, a file the batch's
    committed rows do not record as removed (``removed_by``: whatever ``snap`` was read from),
    an object outside ``_rocketlake/objects/`` or named by a live row, or an object still there
    that the removed files' rows did not name (``objects_before``: an older version of a live
    file's object, which an ``--as-of-batch`` read still needs, is one; when that version can
    no longer be read, one the sweep would not delete now: ``_swept_of``)."""
    def refuse(what: str) -> NoReturn:
        raise CorruptStore(document(staging), 0, f"expiry {batch.batch_id!r} (seq {batch.batch_seq}): {what}; "
                                                 "nothing was deleted")
    if (staged.batch_id, staged.batch_seq) != (batch.batch_id, batch.batch_seq):
        refuse(f"the document is batch {staged.batch_id!r} (seq {staged.batch_seq})'s")
    removed = removed_by(store, batch, snap)
    for p in staged.files:
        problem = rel_path_problem(p)
        if problem or p.split("/", 1)[0] not in paths.BROKER_DIRS:
            refuse(f"{p!r} is not a commitlog, consume-queue or index file inside the store")
        if p in snap.files:
            refuse(f"{p!r} is a live file")
        if p not in removed:
            refuse(f"{p!r} is not a file its committed rows removed")
    if not staged.objects:
        return
    live = _live_objects(store, snap)
    for o in staged.objects:
        if rel_path_problem(o) or not o.startswith(paths.OBJECTS_DIR + "/"):
            refuse(f"{o!r} is not an object inside the store's {paths.OBJECTS_DIR}/")
        if o in live:
            refuse(f"{o!r} holds bytes of a live file")
    try:
        theirs = objects_before(store, batch, removed)
    except StoreError as e:
        before = str(e)
        theirs = _swept_of(store, staged.objects, lambda why: refuse(
            f"the manifest table as it was before its commit cannot be read ({before}), nor {why}"))
    if theirs is None:
        return
    for o in staged.objects:
        # one already gone is not looked at: deleting it again changes nothing (a cut-short delete
        # leaves the objects an extent-list object listed, deleted before it, unnamed by a read now)
        if o not in theirs and store.exists(o):
            refuse(f"{o!r} is an object its removed files' rows did not name")


def objects_before(store: storage.Store, batch: Any, removed: set[str]) -> set[str] | None:
    """The objects the rows of ``removed`` named in the manifest table version before expiry
    ``batch``'s commit (``objects_of`` as the expiry read it when it staged its document: a
    compaction in or after that commit drops those rows from later versions). None for an
    expiry that recorded no manifest version (of an older version: only the live check applies)."""
    version = batch.manifest_version
    if version is None:
        return None
    if version < 1:
        raise StoreError(f"expiry {batch.batch_id!r} records manifest version {version}: no version before it")
    try:
        return set(objects_of(store, removed, version - 1))
    except StoreError:
        raise
    except Exception as e:  # noqa: BLE001 - deltalake / Arrow errors of a vacuumed or damaged version
        raise StoreError(f"version {version - 1}: {e}") from None


def _swept_of(store: storage.Store, objects: tuple[str, ...], refuse: Callable[[str], NoReturn]) -> set[str]:
    """When the version before the expiry's commit cannot be read (a vacuum took its data files,
    or a log clean-up its log), what the removed files' rows named there is unknown: of
    ``objects``, those the sweep would delete now when they are there (``objsweep.unnamed_among``:
    of committed attempts, named by no row of any data file left, of whatever version). No
    readable version and no commit that can still happen needs one of them, so a document may
    take them (its own objects are among them: the rows that named them went with that version);
    it may take no other."""
    from . import objsweep
    try:
        return objsweep.unnamed_among(store, objects)
    except StoreError as e:             # (CorruptStore too: what the retained rows name is unknown)
        refuse(f"the objects the retained rows name ({e})")


def removed_by(store: storage.Store, batch: Any, snap: Any) -> set[str]:
    """The paths the committed rows of expiry ``batch`` remove: from ``snap``'s remove rows when it
    was read from the Delta tables; else (a snapshot from the cache holds live rows only,
    ``storelib.table.snapcache``) from the manifest table itself, that batch's remove rows alone
    (a filtered read: a pending expiry is rare, and the cache, a hint, never vouches for a delete)."""
    removed = getattr(snap, "removed", None)
    if removed is not None and getattr(snap, "source", "delta") != "cache":
        return {p for p, r in removed.items() if r.batch_id == batch.batch_id}
    import pyarrow.compute as pc
    from . import deltalog, manifest, tableread
    where = (pc.field("action") == "remove") & (pc.field("batch_id") == batch.batch_id) & \
        (pc.field("batch_seq") == batch.batch_seq)
    failure: Exception | None = None
    try:
        dt = manifest.open_table(store, paths.MANIFEST_DIR)
        rows = tableread.read_rows_where(dt, where, ["path", "attempt_id"], manifest.MANIFEST_SCHEMA)
    except StoreError as e:
        failure = e
    except Exception as e:  # noqa: BLE001 - deltalake / Arrow errors of a damaged table
        failure = deltalog.corrupt(store, paths.MANIFEST_DIR, e)
    dt = None                       # (no DeltaTable object alive when raising: it can abort the exit)
    if failure is not None:
        raise failure.with_traceback(None)
    return {r["path"] for r in rows if batch.attempt_id is None or r["attempt_id"] == batch.attempt_id}


def _live_objects(store: storage.Store, snap: Any) -> set[str]:
    return rowobjects.objects_named(store, snap.files.values(), live=True)


def delete(store: storage.Store, staged: Staged, durable: bool, fault: Callable[[str], None] | None = None) -> None:
    """Delete what ``staged`` lists (redo-safe: what is gone already is skipped), then, with
    ``durable``, fsync the directories the deletions changed (local stores), so no deleted file
    comes back after a power cut once the caller drops the document."""
    dirs = set()
    for i, p in enumerate(staged.files):
        if fault is not None and i == len(staged.files) // 2:
            fault("mid-delete")
        store.delete(p)
        if store.os_paths:
            dirs.add(os.path.dirname(store.path(p)))
    # extent-list objects (``<object>.extents``, storelib.io.extentlists) last: a list object gone
    # means what it listed is gone, so a redo's check never meets one of those still there and
    # named by no readable list (``check``)
    for o in sorted(staged.objects, key=lambda o: o.endswith(extentlists.SUFFIX)):
        store.delete(o)
    for p in staged.files:              # a queue's directory left empty (a queue keeps its last file: rare)
        if p.startswith(paths.CONSUMEQUEUE_DIR + "/") and store.os_paths:
            d = os.path.dirname(store.path(p))
            try:
                os.rmdir(d)
                dirs.add(os.path.dirname(d))
            except OSError:
                pass
    if durable and store.os_paths:
        storage.sync_dirs(dirs)


def finish(store: storage.Store, staging: str, batch: Any, snap: Any, durable: bool) -> int:
    """The deletes the document at ``staging`` of committed expiry ``batch`` lists, checked
    against ``snap`` (``check``) and done; how many entries it listed (0: no document)."""
    staged = read(store, staging)
    if staged is None:
        return 0
    check(store, staging, staged, batch, snap)
    delete(store, staged, durable)
    return len(staged.files) + len(staged.objects)


def objects_of(store: storage.Store, files: set[str], version: int | None = None) -> list[str]:
    """Object stores: every object that ever held bytes of ``files`` (the extents of all their
    manifest rows, superseded index heads and merged extents included), read from the manifest
    table (``version``: that version of it; None: the latest): by the expiry, before its commit,
    once it knows it removes some, and by ``check``. (Objects only rows a compaction dropped
    named, earlier versions', are not found here: ``storelib.table.objsweep`` deletes them once
    no retained version names them.) The snapshot's rows would not do: they name the current
    versions' alone."""
    from . import manifest
    if not files or not store.objects:
        return []
    dt = manifest.open_table(store, paths.MANIFEST_DIR, version)
    if dt is None and version is not None:
        raise StoreError(f"{paths.MANIFEST_DIR} has no version {version}")
    rows = manifest_rows(manifest.read_rows(dt))
    dt = None                       # (no DeltaTable object alive when raising: it can abort the exit)
    return sorted(rowobjects.objects_named(store, (r for r in rows if r.action == "add" and r.path in files)))

