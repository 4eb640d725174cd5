"""Object stores: deleting the objects no retained manifest row names any more (the sweep).

A file version's bytes live in immutable objects under ``_rocketlake/objects/<batch_id>/<attempt>/``
(docs/FORMAT.md §11.8), named by its manifest row: extents, extent-list objects and what they
list (``storelib.io.extentlists``), a paged index head's layers (``storelib.io.headpages``). A
later version of the file drops some of them (superseded head layers, extents merged into one
object, lists split again), and once a compaction of the manifest table (``manifest._compact``)
and then a vacuum removed the data files holding the older rows, no row names those objects any
more: an expiry, which deletes what the rows of the files it removes name
(``staged_deletes.objects_of``), never sees them. ``sweep`` deletes them.

What it keeps, and why that is all any reader or writer can still need:

* every object any row of any data file still in the manifest table's directory names, the
  files of versions a compaction or merge replaced included: a table version (the latest, or an
  ``--as-of-batch`` / time-travel read of an older one) is readable only while all its data
  files are there, so this covers every readable version. Versions go when a vacuum removes
  their files (``expire --vacuum-retention-hours``, 168 by default): that vacuum's retention is
  how long a reader that opened an older version may go on reading it, for its data files and
  its objects alike. Rows of attempts that never committed count too (never visible, but cheap).
* every object of an attempt the checkpoints table does not record as committed: an ingest in
  flight (the lease holder's, or one that lost its lease and may still be uploading) writes only
  under its own attempt's prefix, and its objects are named by no committed row until its switch.
  Such prefixes are the dead-attempt clean-up's (``storelib.ingest.commit.clear_dead_attempts``,
  after a commit under the lease), never the sweep's. The committed attempts are read before the
  data files are listed, so an attempt that commits in between is not one of them.
* any object a row names through an extent-list object that is damaged (read and checked by
  ``storelib.io.extentlists``, sha256 included, never from what this process read earlier), or
  that cannot be read, and any a live row names through one that is missing: ``CorruptStore`` /
  the storage error, and nothing is deleted. A missing list object of a row that is not live is
  one an expiry deleted with its file (what it listed went with it). What a row names is read
  by ``storelib.table.rowobjects``, the expiry's reading of it, strictly.
* anything, when the latest snapshot's rows fail the row check (``rowcheck.check_snapshot``, made
  once a sweep, as every writer checks the snapshot it reads): ``CorruptStore``, nothing deleted.
  What a row names does not rest on the fields that check judges (its ``detail`` is read strictly
  above), but a store whose rows verify rejects is repaired before anything is deleted from it.

A writer racing the sweep names only objects of the version it continues (its live rows, whose
data files are listed) and of its own attempt (not committed when the sweep read the table); a
writer continuing an older version cannot commit. So an object the sweep deletes is needed by
no version a reader can open and no commit that can still happen. Each delete is of such an
object, so a kill anywhere in the sweep loses nothing, and a rerun finds what is left the same
way (``SWEEP_POINTS``: ``before-sweep-delete``, ``mid-sweep-delete``, ``before-sweep-state``). The caller's lease is
checked before every ``DELETE_BATCH`` deletes (and after the ``mid-sweep-delete`` point): a sweep
stalled past its lease stops at its next check, as a writer that lost its lease never commits,
once another writer may have taken the store over.

The order of its reads is what makes the keeping above hold against commits racing it (``_Reads``): the
committed attempts and the latest snapshot (the names of its data files) first; then the data
files listed (the latest version's among them, or nothing is deleted); then their rows read, and
the live rows' (their list objects must be there); then the objects listed. Reading the
committed attempts before listing the data files is what every attempt counted as committed
needs: its rows are in a data file listed (data files never change; only a vacuum removes one),
and an attempt that commits later is never counted. The listing of the objects needs only to
follow the first read: which of the objects listed are deleted rests on their attempts
(committed at that read) and on the rows read, never on when the listing saw them (one deleted
since it was listed is deleted again, a no-op; one written after the listing is left to the next
sweep). So ``skip`` lists the objects before it reads the rows of
the data files new since its state, and the full sweep that runs when the skip does not apply
takes that listing, and every other read the skip made, instead of making it again: each read
is made once a sweep.

Its cost grows with what changed since the last sweep, not with the history kept: a sweep that
completed writes the state (``storelib.table.sweepstate``: the data files it read, the objects of
committed attempts left, each named by a row of those files), after its deletes and a check of
the lease (kill point ``before-sweep-state``: a kill before it leaves the previous state, or
none). The next sweep SKIPS (``skip``: deletes nothing, reads no data file of the state) only when
every data file of the state is still listed (an object becomes unnamed only when the data file
naming it goes: a data file never changes, and a list object a row names goes only with what it
lists, ``staged_deletes.delete``) and every object of an attempt committed now that the state did
not keep is named by a row of a data file listed since, those read strictly as above; else it
runs the full sweep, which never reads the state (it goes on from the skip's reads, above). A
skip deletes nothing, so the state, trusted or not, can only make a sweep delete less: a forged or
stale one leaves garbage while it applies, never deletes, and the full sweep that runs once it
does not apply deletes what is unnamed then. A skip refuses what the full sweep refuses of the
live rows without a request: a live row whose extent-list object its listing of the objects does
not hold, or whose detail or lists do not parse (``CorruptStore``, nothing deleted, no state
written). (A list object that is there but damaged is found only by the full sweep, which reads
every one: a skip reads none of the state's data files' rows. Meanwhile nothing is deleted, and
the skip's state keeps what the list named when it was last read: the full sweep that runs once
the state does not apply refuses the store, ``CorruptStore``, and deletes nothing either.)

``expire`` runs it after its vacuum (``storelib.ops.expire``, under its lease), on object stores.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptStore, StoreError
from ..format import paths
from ..io import storage
from . import rowcheck, rowobjects, sweepstate
from .rows import ManifestRow

__all__ = ["Sweep", "plan", "skip", "sweep", "named_objects", "unnamed_objects", "unnamed_among"]

_PREFIX = paths.OBJECTS_DIR + "/"
DELETE_BATCH = 64                # objects deleted between two checks of the caller's lease
_COLUMNS = ("action", "path", "staged_path", "detail")
_READ_AHEAD = 8                  # manifest data files opened (and small ones read) ahead of their rows
_SMALL_DATA_FILE = 8 << 20       # a data file read whole ahead: its rows' bytes at most this


@dataclass
class Sweep:
    """What a sweep found: the objects it may delete (path -> size), how many it kept."""
    unnamed: dict[str, int] = field(default_factory=dict)
    kept: int = 0                     # objects of committed attempts some row names
    uncommitted: int = 0              # objects of attempts not committed (the dead-attempt clean-up's)
    data_files: int = 0               # manifest data files read
    files: list[str] = field(default_factory=list)        # the manifest data files listed (all named or read)
    kept_objects: set[str] = field(default_factory=set)   # the ``kept`` objects themselves
    skipped: bool = False             # the state applied: nothing deleted, no data file of it read
    unchanged: bool = False           # ... and it holds what a new one would (not written again)


def named_objects(store: storage.Store, live_rows: Iterable[Mapping[str, Any]] = (),
                  expected: Iterable[str] = ()) -> tuple[set[str], int]:
    """(every object any row of any data file in the manifest table's directory names, how many
    data files were read). ``live_rows``: the latest snapshot's, whose list objects must all be
    there (``CorruptStore`` otherwise); ``expected``: names of data files the listing must hold
    (the latest version's, read before it: a listing that misses one is not trusted,
    ``StoreError``). A data file that cannot be read: ``CorruptStore``."""
    named = rowobjects.Named(store, strict=True)
    named.add((ManifestRow.of(r) for r in live_rows), live=True)
    files = _data_files(store, expected)
    _add_rows(store, named, files)
    return named.names, len(files)


def _data_files(store: storage.Store, expected: Iterable[str]) -> list[str]:
    """The manifest data files listed in the table's directory; ``StoreError`` when the listing
    misses one of ``expected`` (names)."""
    files = [f for f in store.list_files(paths.MANIFEST_DIR, recursive=False) if f.endswith(".parquet")]
    missed = set(expected) - {_name(f) for f in files}
    if missed:
        raise StoreError(f"the listing of {paths.MANIFEST_DIR} misses {sorted(missed)[0]}, a data file of its "
                         "latest version: the sweep deletes nothing")
    return files


def _name(f: str) -> str:
    return f.rsplit("/", 1)[-1]


def _add_rows(store: storage.Store, named: rowobjects.Named, files: list[str]) -> None:
    """Add every row of the data files ``files`` to ``named`` (strict); one that cannot be read:
    ``CorruptStore``."""
    with ThreadPoolExecutor(_READ_AHEAD) as pool:
        todo = iter(files)
        ahead = deque((f, pool.submit(_open_data_file, store, f)) for f in islice(todo, _READ_AHEAD))
        while ahead:
            f, opened = ahead.popleft()
            following = next(todo, None)
            if following is not None:
                ahead.append((following, pool.submit(_open_data_file, store, following)))
            try:
                pf, cols, table = opened.result()
                batches = table.to_batches(4096) if table is not None else \
                    pf.iter_batches(batch_size=4096, columns=cols)             # (a row group's rows at a time)
                for batch in batches:
                    named.add(ManifestRow(r) for r in batch.to_pylist())
            except StoreError:
                raise
            except Exception as e:  # noqa: BLE001 - Arrow's errors of a file gone or damaged
                raise CorruptStore(f, 0, f"a manifest data file that cannot be read ({e}): what its rows name is "
                                         "unknown, so the sweep deletes nothing") from None


def _open_data_file(store: storage.Store, f: str) -> tuple[Any, list[str], Any]:
    """(ParquetFile, the columns to read, its rows as a table when they are at most
    ``_SMALL_DATA_FILE`` bytes, else None): run ``_READ_AHEAD`` files ahead of the one whose rows
    are taken, so the requests of the files (an open, a footer, a row group each: most of an
    object store's time per file) overlap; a large file's rows are streamed by the caller."""
    import pyarrow.parquet as pq
    pf = pq.ParquetFile(store.path(f), filesystem=store.fs)
    cols = [c for c in _COLUMNS if c in pf.schema_arrow.names]
    size = sum(pf.metadata.row_group(i).total_byte_size for i in range(pf.num_row_groups))
    return pf, cols, (pf.read(columns=cols) if size <= _SMALL_DATA_FILE else None)


def _attempt_of(o: str) -> tuple[str, str] | None:
    """(batch_id, attempt_id) of the attempt whose prefix holds object ``o`` (None: none does)."""
    parts = o[len(_PREFIX):].split("/")
    return (parts[0], parts[1]) if o.startswith(_PREFIX) and len(parts) >= 3 else None


def unnamed_objects(store: storage.Store, committed: set[tuple[str, str]], named: set[str]) -> Sweep:
    """The objects under the prefixes of the ``committed`` attempts ((batch_id, attempt_id)) that
    ``named`` does not hold (one listing of ``_rocketlake/objects/``); objects of other attempts
    are counted, never listed as unnamed."""
    return _sorted_out(_list_objects(store), committed, named)


def _list_objects(store: storage.Store) -> dict[str, int]:
    """Every object under ``_rocketlake/objects/`` (store-relative key -> size): one listing."""
    from pyarrow.fs import FileSelector, FileType
    root = store.path("").rstrip("/") + "/"
    selector = FileSelector(store.path(paths.OBJECTS_DIR), recursive=True, allow_not_found=True)
    return {info.path[len(root):]: int(info.size or 0) for info in store.fs.get_file_info(selector)
            if info.type == FileType.File and info.path.startswith(root)}


def _sorted_out(objects: Mapping[str, int], committed: set[tuple[str, str]], named: Container[str]) -> Sweep:
    """``unnamed_objects`` of the listing ``objects``."""
    out = Sweep()
    for o, size in objects.items():
        if _attempt_of(o) not in committed:
            out.uncommitted += 1
        elif o in named:
            out.kept += 1
            out.kept_objects.add(o)
        else:
            out.unnamed[o] = size
    return out


def _committed_and_latest(store: storage.Store) -> tuple[set[tuple[str, str]], Any, set[str]]:
    """(the committed attempts, the latest snapshot, the names of its manifest data files), read
    from the Delta tables before any data file is listed."""
    from . import manifest
    snap = manifest.load_snapshot(store, queue_offsets=False)
    committed = {(b.batch_id, b.attempt_id) for b in snap.batches if b.attempt_id}
    dt = manifest.open_table(store, paths.MANIFEST_DIR)
    expected = {u.rstrip("/").rsplit("/", 1)[-1] for u in dt.file_uris()} if dt is not None else set()
    dt = None                       # (no DeltaTable object alive when raising: it can abort the exit)
    return committed, snap, expected


class _Reads:
    """The reads of one sweep, each made once whether ``skip``, ``plan`` or both use it, in the
    order its safety rests on (module docstring): at once the committed attempts and the latest
    snapshot, then the listing of the manifest data files; then, when asked, rows (``rows``: of
    listed data files, each file read once, and the latest snapshot's live rows) and the listing
    of the objects (``objects``: once, by whichever asks first)."""

    def __init__(self, store: storage.Store):
        self.store = store
        self.committed, self.snap, expected = _committed_and_latest(store)
        rowcheck.check_snapshot(self.snap)      # (rows verify rejects: CorruptStore, nothing deleted)
        self.files = _data_files(store, expected)
        self.named = rowobjects.Named(store, strict=True)
        self._read: set[str] = set()                    # the data files whose rows ``named`` holds
        self._live = False
        self._objects: dict[str, int] | None = None

    def live_rows(self) -> Iterable[ManifestRow]:
        return (ManifestRow.of(r) for r in self.snap.files.values())

    def rows(self, files: Iterable[str], live: bool = False) -> set[str]:
        """The objects named by every row of ``files`` (some of ``self.files``) and, ``live``, of
        the live rows (their list objects must be there), with every row read before."""
        if live and not self._live:
            self.named.add(self.live_rows(), live=True)
            self._live = True
        todo = [f for f in files if f not in self._read]
        _add_rows(self.store, self.named, todo)
        self._read.update(todo)
        return self.named.names

    def objects(self) -> dict[str, int]:
        """``_list_objects``, listed once."""
        if self._objects is None:
            self._objects = _list_objects(self.store)
        return self._objects


def plan(store: storage.Store) -> Sweep:
    """What the full sweep would delete now (reads only): the committed attempts and the latest
    snapshot, the data files listed, their rows and the live ones read, then the objects listed."""
    return _plan(_Reads(store))


def _plan(reads: _Reads) -> Sweep:
    """``plan`` on ``reads``: what they have read already (a ``_skip`` that did not apply) is
    not read again."""
    named = reads.rows(reads.files, live=True)
    out = _sorted_out(reads.objects(), reads.committed, named)
    out.data_files, out.files = len(reads.files), [_name(f) for f in reads.files]
    return out


def skip(store: storage.Store) -> Sweep | None:
    """What a sweep may skip to (nothing to delete, no data file of the state read) when the
    store's state (``sweepstate``) applies; None when the full sweep must run: no state that can be
    read and trusted, a data file of the state no longer listed (a vacuum, or anything else, removed
    it: only then can an object it names become unnamed), or an object of an attempt committed now
    that is not one the state kept and that no row of a data file listed since names (those new
    files read as the full sweep reads them). Reads in the full sweep's order: the committed
    attempts, the data files, the objects. A live row whose extent-list object the listing of the
    objects does not hold: ``CorruptStore``, as the full sweep refuses it."""
    state = sweepstate.read(store)
    return None if state is None else _skip(_Reads(store), state)


def _skip(reads: _Reads, state: sweepstate.State) -> Sweep | None:
    """``skip`` on ``reads`` and the store's ``state``."""
    listed = {_name(f): f for f in reads.files}
    if not state.data_files <= listed.keys():
        return None
    objects = reads.objects()
    lists = reads.named.list_objects(reads.live_rows())
    gone = sorted(o for o in lists if o not in objects)
    if gone:
        raise CorruptStore(lists[gone[0]], 0, f"its extent list object {gone[0]} is missing; nothing is deleted")
    out = _sorted_out(objects, reads.committed, state.kept)
    new = [listed[n] for n in sorted(listed.keys() - state.data_files)]
    if out.unnamed:
        if not new or not reads.rows(new).issuperset(out.unnamed):
            return None
        out.data_files = len(new)
        out.kept += len(out.unnamed)
        out.kept_objects.update(out.unnamed)
        out.unnamed = {}
    out.files, out.skipped = sorted(listed), True
    out.unchanged = not new and out.kept_objects == state.kept
    return out


def unnamed_among(store: storage.Store, objects: Iterable[str]) -> set[str]:
    """Those of ``objects`` that ``plan`` finds unnamed when they are there: under a committed
    attempt's prefix and named by no row of any data file left (the reads of ``plan`` but its
    listing of ``_rocketlake/objects/``)."""
    reads = _Reads(store)
    named = reads.rows(reads.files, live=True)
    return {o for o in objects if _attempt_of(o) in reads.committed and o not in named}


def _found(store: storage.Store) -> Sweep:
    """What the sweep deletes: ``skip``'s answer when the state applies, else ``plan``'s, on the
    same reads (none made twice)."""
    state = sweepstate.read(store)
    reads = _Reads(store)
    found = _skip(reads, state) if state is not None else None
    return found if found is not None else _plan(reads)


def sweep(store: storage.Store, check: Callable[[], None] | None = None,
          fault: Callable[[str], None] | None = None) -> dict[str, int]:
    """Delete the objects ``plan`` finds no retained row naming, unless the state lets it
    ``skip`` (object stores; a local store has none), then write the state; ``check``: the
    caller's lease check, run before every ``DELETE_BATCH`` deletes and before the state is
    written (its error ends the sweep). Returns counts."""
    if not store.objects:
        return {"deleted": 0, "bytes": 0, "kept": 0}
    found = _found(store)
    todo = sorted(found.unnamed)
    for i, o in enumerate(todo):
        if fault is not None and i == 0:
            fault("before-sweep-delete")
        if fault is not None and i == len(todo) // 2:
            fault("mid-sweep-delete")
        if check is not None and (i % DELETE_BATCH == 0 or i == len(todo) // 2):
            check()
        store.delete(o)
    if not found.unchanged:
        if fault is not None:
            fault("before-sweep-state")
        if check is not None:
            check()
        sweepstate.write(store, found.files, found.kept_objects)
    return {"deleted": len(todo), "bytes": sum(found.unnamed.values()), "kept": found.kept,
            "uncommitted": found.uncommitted, "data_files": found.data_files, "skipped": found.skipped}
