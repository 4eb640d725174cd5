"""The Delta tables under ``<store>/_rocketlake/``: what the store holds, batch by batch.

* ``_rocketlake/manifest``: one row per file version a batch wrote (``action = add``) or removed
  (``action = remove``): kind, relative path, base offset, valid bytes, counts, offset and store
  time ranges, sha256 of the valid bytes, the batch that wrote it, and (``detail``) kind-specific
  facts such as an index file's header.
* ``_rocketlake/checkpoints``: one row per committed batch: batch id and sequence number, max
  commitlog offset, next offset of every topic/queue, the three checkpoint-file timestamps,
  counts, wall time, the input's fingerprint and the store's file-shaping configuration.

A batch becomes visible when its checkpoint row is committed: that Delta commit is the atomic
switch. Manifest rows of a batch without a checkpoint row are ignored by every reader. Both
commits are conditional on the table versions read when the batch was planned, so of two
concurrent writers exactly one commits (the other fails before leaving a row anywhere).

Compaction: the manifest table is append-only, and a file a batch continues gets a new row each
batch, so its rows grow with history. When its rows outnumber twice the live ones (and the
dead ones ``COMPACT_MIN_ROWS``), the writer that just committed a batch (``commit``, under its
lease) replaces the table's data files by one holding only the live rows, the rows of files a committed expiry removed, and a marker row
(``action = compact``: the batch it was taken after, the table version before it): one
conditional Delta commit with ``dataChange = false``. Readers of the latest batch or a later
one read at most twice the live rows; ``--as-of-batch`` of an earlier batch reads the table
version that batch recorded (its checkpoint row's ``detail.manifest_version``; batches of an
older version: the version before the first compaction) until a vacuum removes its files.
A checkpoint row lists only the queues its batch changed (``detail.queue_offsets = changed``):
the store's whole map is the live consume-queue rows' ends (``rows.queue_ends``).

The tables are written with ``deltalake`` (delta-rs) from the driver: plain Delta tables (reader 1,
writer 2), which delta-spark reads too (``storelib.table.delta_spark``; tests/table/test_delta_spark.py). On
local stores every version goes in through ``storelib.table.deltacommit``, which makes it durable step
by step.
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

import pyarrow as pa

from ..errors import CorruptStore, NoSuchBatch, StoreError, StorePathError
from . import ckmerge, deltacommit, deltalog
from .tableread import (QUEUE_OFFSETS, SOURCE, as_read, batch_as_read, batch_row_whole, batch_rows_lean, open_table,
                        read_rows)
from .rowcheck import check_row_paths, check_row_targets
from .rows import RECORDED_KEYS, BatchRow, FileKind, ManifestRow, batch_rows, manifest_rows as manifest_rows_of
from ..format.config import StoreConfig
from ..io import storage

__all__ = [ "MANIFEST_SCHEMA", "QUEUE_OFFSETS_TYPE",
    "CHECKPOINTS_SCHEMA", "TableVersions", "Snapshot", "open_table", "read_rows",
    "Tables", "read_tables", "at_batch", "snapshot_of", "load_snapshot", "committed_snapshot", "COMPACT", "COMPACT_MIN_ROWS", "COMPACT_MIN_FILES",
    "compaction_due", "check_row_paths", "check_row_targets", "commit", "now_ms", "dumps", "config_column",
    "file_row", "remove_row", "checkpoint_row", "checkpoint_row_after", "queue_offsets",
]

from ..format.paths import CHECKPOINTS_DIR, MANIFEST_DIR

MANIFEST_SCHEMA = pa.schema([
    ("batch_id", pa.string()),
    ("batch_seq", pa.int64()),
    ("action", pa.string()),            # add | remove
    ("kind", pa.string()),              # commitlog | consumequeue | index | checkpoint
    ("path", pa.string()),              # relative to the store root
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("base_offset", pa.int64()),        # commitlog: file offset; consumequeue: first unit * 20
    ("file_size", pa.int64()),
    ("valid_bytes", pa.int64()),
    ("count", pa.int64()),              # records / units / index entries
    ("min_offset", pa.int64()),         # commitlog: first record offset; cq: first queue offset;
    ("max_offset", pa.int64()),         # index: begin/end phy offset
    ("min_store_ts", pa.int64()),
    ("max_store_ts", pa.int64()),
    ("checksum", pa.string()),          # sha256 of bytes [0, valid_bytes)
    ("staged_path", pa.string()),       # where the batch staged it (publish is redone from here)
    ("detail", pa.string()),            # JSON: index header, reason of a removal, ...
    ("committed_at", pa.int64()),
    ("attempt_id", pa.string()),        # the ingest attempt that wrote the row (see load_snapshot)
])

# The columns' names, made once: every row built here shares these key strings (``Schema.names``
# makes new ones at each access: ~1.4 KB more a row, 160,000 rows a batch at 10^10 messages).
_MANIFEST_COLUMNS = tuple(MANIFEST_SCHEMA.names)
_MANIFEST_NAMES = frozenset(_MANIFEST_COLUMNS)

QUEUE_OFFSETS_TYPE = pa.list_(pa.struct([("topic", pa.string()), ("queue_id", pa.int32()),
                                          ("max_offset", pa.int64())]))

CHECKPOINTS_SCHEMA = pa.schema([
    ("batch_id", pa.string()),
    ("batch_seq", pa.int64()),
    ("operation", pa.string()),         # ingest | import | expire | repair | mirror
    ("committed_at", pa.int64()),
    ("input_fingerprint", pa.string()),
    ("messages", pa.int64()),
    ("bytes", pa.int64()),
    ("index_entries", pa.int64()),
    ("total_messages", pa.int64()),
    ("min_phy_offset", pa.int64()),
    ("max_phy_offset", pa.int64()),
    ("queue_offsets", QUEUE_OFFSETS_TYPE),
    ("physic_msg_timestamp", pa.int64()),
    ("logics_msg_timestamp", pa.int64()),
    ("index_msg_timestamp", pa.int64()),
    ("min_store_ts", pa.int64()),
    ("max_store_ts", pa.int64()),
    ("wall_time_ms", pa.int64()),
    ("config", pa.string()),
    ("detail", pa.string()),            # JSON: counts, round_robin positions per topic, ...
    ("attempt_id", pa.string()),        # the attempt whose manifest rows this batch consists of
])


@dataclass
class TableVersions:
    manifest: int | None
    checkpoints: int | None
    # What a writer's commit decides a compaction on (``snapshot_of`` fills them for the latest
    # batch): the manifest rows at ``manifest``, and the snapshot they give.
    rows: int | None = None
    latest: "Snapshot | None" = field(default=None, repr=False, compare=False)
    # (batch_id, batch_seq, attempt_id) of rows at ``manifest`` no committed batch holds (a dead attempt's)
    stray: frozenset[tuple[Any, Any, Any]] = field(default=frozenset(), repr=False, compare=False)


# A manifest row's ``action`` for the marker a compaction leaves (kind ``manifest``, path the table's):
# its ``detail`` holds ``through_seq`` (the batch it was taken after), ``before_version`` (the table
# version it replaced) and ``legacy_version`` (the version before the first compaction: it holds
# the rows of batches that recorded no ``manifest_version``).
COMPACT = "compact"
# A compaction is due when the rows beyond the live ones outnumber both the live rows and this
# many: a table of a few thousand rows loads in a fraction of a second, and a small store whose
# batches rewrite most of its rows would otherwise compact (and upload its live rows) every
# other batch.
COMPACT_MIN_ROWS = 10_000
# ... or when the table has this many data files and the compacted rows are at most twice the
# batch's: a small store's small batches, whose manifest files no merge within its share takes
# (``ckmerge.MERGE_SHARE``); the Delta checkpoints then list at most this many files.
COMPACT_MIN_FILES = 32


@dataclass
class Snapshot:
    """The store as of one committed batch: its checkpoint row and its live files."""
    batch: BatchRow | None                                    # None: nothing committed
    files: dict[str, ManifestRow] = field(default_factory=dict)  # path -> add row (latest version)
    versions: TableVersions | None = None
    batches: list[BatchRow] = field(default_factory=list)    # every committed batch row, in order
    removed: dict[str, ManifestRow] = field(default_factory=dict)  # path -> remove row of files a
                                                 # committed expiry removed (a crash may leave them on
                                                 # disk until the next expiry deletes them)
    duplicates: list[str] = field(default_factory=list)  # paths one batch adds twice with different
                                                         # facts (table.rowcheck refuses such a snapshot)
    compaction: ManifestRow | None = None    # the marker of the last compaction the rows went through

    @property
    def batch_seq(self) -> int:
        return self.batch.batch_seq if self.batch else 0

    def last_detail(self, key: str) -> Any:
        """``detail[key]`` of the last committed batch whose checkpoint row has it (an ingest's
        round-robin positions and topic config: an expiry, a repair or an import records none)."""
        for b in reversed(self.batches):
            value = b.detail.get(key)
            if value is not None:
                return value
        return None

    def of_kind(self, kind: str) -> list[ManifestRow]:
        return sorted((r for r in self.files.values() if r.kind == kind), key=lambda r: r.path)


@dataclass(frozen=True)
class Tables:
    """Both Delta tables as read once: their versions, every checkpoint row (in batch order) and
    every manifest row, committed or not (``snapshot_of`` picks a snapshot's rows out of them);
    ``sources``: (batch id, seq) -> data file of each checkpoint row read without ``queue_offsets``."""
    uri: str
    versions: TableVersions
    batches: tuple[BatchRow, ...]
    rows: tuple[ManifestRow, ...]
    sources: Mapping[tuple[str, int], str] = field(default_factory=dict)


def read_tables(store: storage.Store, queue_offsets: bool = True) -> Tables:
    """Read both tables (one Parquet read each). A damaged Delta table raises
    ``errors.CorruptStore`` naming the damaged log file.

    ``queue_offsets``: every checkpoint row's; False: only the latest batch's (a writer's read:
    the column holds every queue a batch changed, so its bytes grow with the batches), and
    ``at_batch`` reads an earlier snapshot's own batch's; the other rows lack it
    (``BatchRow.queue_offsets`` refuses)."""
    ck_version, ck_rows = _table_rows(store, CHECKPOINTS_DIR, None if queue_offsets else batch_rows_lean)
    sources = {(r["batch_id"], r["batch_seq"]): r.pop(SOURCE) for r in ck_rows if SOURCE in r}
    mf_version, mf_rows = _table_rows(store, MANIFEST_DIR)
    batches = sorted(batch_rows(ck_rows), key=lambda r: r.batch_seq)
    if batches and mf_version is None:
        raise CorruptStore(f"{MANIFEST_DIR}/_delta_log", 0, f"missing: the checkpoints table lists {len(batches)} "
                                                           "committed batch(es), the manifest table does not exist")
    return Tables(store.uri, TableVersions(mf_version, ck_version, len(mf_rows)), tuple(batches),
                  _typed(mf_rows), sources)


def at_batch(store: storage.Store, tables: Tables, as_of_batch: str | int | None) -> Tables:
    """``tables`` with the manifest rows of the version that still holds every row of
    ``as_of_batch`` (a compaction after it dropped rows it needs: the version the batch recorded);
    ``tables`` itself when their rows serve (the latest batch, or one at or after the last
    compaction). A version a vacuum has emptied raises ``CorruptStore``."""
    if as_of_batch is None:
        return tables
    sel = [b for b in tables.batches if b.matches(as_of_batch)]
    if sel and QUEUE_OFFSETS not in sel[-1]:               # (``read_tables`` without every batch's)
        try:                                              # (no DeltaTable object alive here)
            whole = batch_row_whole(sel[-1], tables.sources[(sel[-1].batch_id, sel[-1].batch_seq)])
        except Exception as e:  # noqa: BLE001 - Arrow errors of a vacuumed or damaged data file
            raise deltalog.corrupt(store, CHECKPOINTS_DIR, e) from None
        tables = dataclasses.replace(tables, batches=tuple(whole if b is sel[-1] else b for b in tables.batches))
        sel = [b for b in tables.batches if b.matches(as_of_batch)]
    marker = _last_marker(tables.rows)
    if not sel or marker is None or sel[-1].batch_seq >= int(marker.detail["through_seq"]):
        return tables
    version = sel[-1].manifest_version
    if version is None:
        version = int(marker.detail["legacy_version"])
    failure = None
    try:
        dt = open_table(store, MANIFEST_DIR, version)
        rows = read_rows(dt) if dt is not None else []
    except StoreError as e:
        failure = e
    except Exception as e:  # noqa: BLE001 - deltalake / Arrow errors: a vacuumed or damaged version
        failure = deltalog.corrupt(store, MANIFEST_DIR, e)
    dt = None
    if failure is not None:
        raise failure.with_traceback(None)
    return Tables(tables.uri, TableVersions(version, tables.versions.checkpoints, len(rows)), tables.batches,
                  _typed(rows), tables.sources)


def _typed(rows: list[Any]) -> tuple[ManifestRow, ...]:
    """``rows`` as ``ManifestRow``s, each read row let go as soon as its typed copy is made (a
    list of the read rows and one of the copies side by side doubled the driver's peak memory
    at an open: ~2 KB a row, 330,000 rows at 10^10 messages)."""
    for i, r in enumerate(rows):
        rows[i] = ManifestRow.of(r)
    return tuple(rows)


def _last_marker(rows: Any) -> ManifestRow | None:
    """The marker of the newest compaction among ``rows`` (a compacted table holds one)."""
    markers = [r for r in rows if r.get("action") == COMPACT]
    return max(markers, key=lambda r: r.batch_seq) if markers else None


def load_snapshot(store: storage.Store, as_of_batch: str | int | None = None, queue_offsets: bool = True) -> Snapshot:
    """Latest committed state (or the one of ``as_of_batch``: a batch id or sequence number);
    ``queue_offsets``: as ``read_tables``'s (False: only the snapshot's own batch has them).

    A damaged Delta table raises ``errors.CorruptStore`` naming the damaged log file."""
    return snapshot_of(at_batch(store, read_tables(store, queue_offsets), as_of_batch), as_of_batch)


def snapshot_of(tables: Tables, as_of_batch: str | int | None = None) -> Snapshot:
    """The committed snapshot of ``tables`` as of its latest batch (or ``as_of_batch``);
    ``NoSuchBatch`` naming the store when no committed batch is ``as_of_batch``."""
    versions, batches, mf_rows = tables.versions, list(tables.batches), tables.rows
    if as_of_batch is not None:
        sel = [b for b in batches if b.matches(as_of_batch)]
        if not sel:
            raise NoSuchBatch(f"no committed batch {as_of_batch!r} in {tables.uri}")
        upto = sel[-1]["batch_seq"]
        batches_visible = [b for b in batches if b["batch_seq"] <= upto]
    else:
        batches_visible = batches
    if not batches_visible:                   # (no batch at all: ``as_of_batch`` named one)
        versions = TableVersions(versions.manifest, versions.checkpoints, versions.rows,
                                 stray=frozenset((r["batch_id"], r["batch_seq"], r.get("attempt_id")) for r in mf_rows))
        empty = Snapshot(None, {}, versions, [])
        versions.latest = empty
        return empty
    committed = {b["batch_id"]: b["batch_seq"] for b in batches_visible}
    attempts = {b["batch_id"]: b.get("attempt_id") for b in batches_visible}
    files: dict[Any, Any] = {}
    # Rows of a batch count only with its checkpoint row, and only those of the attempt that
    # committed: a dead attempt may have appended manifest rows before dying (between the two
    # Delta commits); its rerun appends its own rows under the same batch id and sequence.
    rows, stray = [], set()
    for r in mf_rows:
        if committed.get(r["batch_id"]) == r["batch_seq"] and (attempts.get(r["batch_id"]) is None
                                                              or r.get("attempt_id") == attempts[r["batch_id"]]):
            rows.append(r)
        else:
            stray.add((r["batch_id"], r["batch_seq"], r.get("attempt_id")))
    marker = _last_marker(rows)
    if marker is not None:
        rows = [r for r in rows if r.get("action") != COMPACT]
    rows.sort(key=lambda r: (r["batch_seq"], r["committed_at"]))
    # Every batch commits manifest rows before its checkpoint row: none means a lost manifest commit.
    # Except a repair batch of an earlier repair that committed none (it found only files without a
    # row to replace): it changed no file of the snapshot, and is read as such. And a batch a
    # compaction was taken after or at: the rows of files later batches replaced are gone.
    through = int(marker.detail.get("through_seq", 0)) if marker is not None else 0
    with_rows = {r["batch_seq"] for r in rows}
    lost = [b for b in batches_visible if b["batch_seq"] not in with_rows and b["operation"] != "repair"
            and b["batch_seq"] > through]
    if lost:
        raise CorruptStore(f"{MANIFEST_DIR}/_delta_log", 0, f"no manifest rows of committed batch "
                                                           f"{lost[0]['batch_id']} (seq {lost[0]['batch_seq']}): "
                                                           f"a commit of the manifest table is missing")
    removed: dict[Any, Any] = {}
    expiries = {b["batch_id"] for b in batches_visible if b["operation"] == "expire"}
    added: dict[Any, Any] = {}
    duplicates: list[Any] = []
    for r in rows:
        check_row_paths(r)
        if r["action"] == "add":
            facts = _facts(r)
            if added.setdefault((r["batch_seq"], r["path"]), facts) != facts:
                duplicates.append(r["path"])
            files[r["path"]] = r
            removed.pop(r["path"], None)
        else:
            files.pop(r["path"], None)
            if r["batch_id"] in expiries:
                removed[r["path"]] = r
    if batches_visible[-1] is batches[-1]:    # the latest batch: what a writer's commit continues
        versions = TableVersions(versions.manifest, versions.checkpoints, versions.rows, stray=frozenset(stray))
        snap = Snapshot(batches_visible[-1], files, versions, batches_visible, removed, duplicates, marker)
        versions.latest = snap
        return snap
    return Snapshot(batches_visible[-1], files, versions, batches_visible, removed, duplicates, marker)


def _facts(row: dict[Any, Any]) -> tuple[Any, ...]:
    """What a manifest row says of its file (not when or by which attempt it was written): a rerun
    writing the same row again is no duplicate."""
    return tuple(v for k, v in sorted(row.items()) if k not in ("committed_at", "attempt_id", "staged_path"))


def _table_rows(store: storage.Store, rel: str, read: Callable[[Any], list[dict[str, Any]]] | None = None
                ) -> tuple[Any, ...]:
    """(version, rows by ``read``, default ``read_rows``) of a Delta table's latest version, ``(None, [])``
    without a table. A table that cannot be read raises ``CorruptStore`` (``deltalog``: the first damaged
    log file); no DeltaTable object outlives the call (one alive at exit can abort the interpreter)."""
    failure = None
    try:
        dt = open_table(store, rel)
        version, rows = (dt.version(), (read or read_rows)(dt)) if dt is not None else (None, [])
    except StoreError as e:
        failure = e
    except Exception as e:  # noqa: BLE001 - deltalake / Arrow errors of a damaged table
        failure = deltalog.corrupt(store, rel, e)
    except BaseException as e:
        if type(e).__name__ != "PanicException":     # a Rust panic in deltalake
            raise
        failure = deltalog.corrupt(store, rel, e)
    dt = None
    if failure is not None:
        raise failure.with_traceback(None)
    if version is None:
        problems = deltalog.log_problems(store, rel)   # e.g. a _delta_log whose commits are gone
        if problems:
            raise CorruptStore(*problems[0])
    return version, rows


def commit(store: storage.Store, versions: TableVersions, manifest_rows: list[Any], checkpoint_row: Mapping[str, Any],
           fault: Callable[[str], None] | None = None, durable: bool = True, lease: Any = None) -> Snapshot | None:
    """Conditional appends: manifest rows first, then the checkpoint row (the switch); then, when
    due (``compaction_due``), the manifest table's compaction. Returns the snapshot just committed
    (``committed_snapshot``: what a fresh read of the tables gives now, without reading them),
    None when ``versions`` were not read with the latest snapshot.

    ``lease``: the writer's lease, checked to be still its own right before each commit (a
    writer that stalled past its lease never commits: ``LeaseLost``). The checkpoint row goes in
    with the manifest version holding the batch's rows and only the queues the batch changed
    (its consume-queue rows' queues) in ``queue_offsets``, whichever writer built it.

    Local stores: each table version goes in through ``deltacommit.commit_local`` (every file of
    it durable before the next step relies on it, with ``durable``); object stores: delta-rs'
    conditional put. A version that another writer committed first: ``ConcurrentWriteError``.
    A compaction that fails leaves the table as it was (the batch is committed either way). Then,
    when due, each table's merge of its data files (``storelib.table.ckmerge``), likewise.
    """
    from deltalake import write_deltalake, CommitProperties
    opts = storage.delta_storage_options(store.uri)
    checkpoint_row = _recorded(checkpoint_row, manifest_rows, versions)
    manifest_rows = manifest_rows_of(manifest_rows)    # (typed once: ingest's rows are built typed)
    check_row_targets(store, manifest_rows)
    mine = deltacommit.commit_token()
    props = CommitProperties(max_commit_retries=0,
                             custom_metadata={"rocketlake.batch_id": checkpoint_row["batch_id"],
                                              "rocketlake.operation": checkpoint_row["operation"],
                                              # what DESCRIBE HISTORY shows (delta-spark)
                                              "userMetadata": checkpoint_row["batch_id"], **mine})
    files: dict[str, pa.Table] = {}           # each table's data files as its write left them (the merges')
    # what a read gives back of each table's rows (the manifest's Arrow table is let go once committed)
    read_back: dict[str, list[Any]] = {}
    for rel, rows, schema, version, point in (
            (MANIFEST_DIR, manifest_rows, MANIFEST_SCHEMA, versions.manifest, "between-delta-tables"),
            (CHECKPOINTS_DIR, [checkpoint_row], CHECKPOINTS_SCHEMA, versions.checkpoints, None)):
        table = pa.Table.from_pylist(rows, schema=schema)
        read_back[rel] = as_read(rows, table) if rel == MANIFEST_DIR else batch_as_read(checkpoint_row, table)
        if lease is not None:
            lease.check()

        def write(target: Any, hooks: Any = None, table: Any = table, rel: str = rel,
                  mode: Literal["append", "error"] = "append") -> None:
            # schema_mode="merge": tables written before a column was added get it (nulls before)
            kw = {} if hooks is None else {"post_commithook_properties": hooks}
            if isinstance(target, str):
                write_deltalake(target, table, mode=mode, storage_options=opts, commit_properties=props,
                                configuration=ckmerge.TABLE_PROPERTIES, **kw)
            else:
                write_deltalake(target, table, mode="append", commit_properties=props, schema_mode="merge", **kw)
                files[rel] = ckmerge.files_of(target)
        deltacommit.commit_version(store, rel, version, write, durable, mine=mine)
        if point and fault:
            fault(point)
    del table, write
    back = read_back[MANIFEST_DIR]
    # the batch applied to the live files once, for the compaction and the committed snapshot
    applied = _applied(versions.latest, back, checkpoint_row, duplicates=True) \
        if versions.latest is not None and versions.rows is not None else None
    mf = (versions.manifest + 1) if versions.manifest is not None else 0
    compacted = compaction_due(versions, manifest_rows, checkpoint_row,
                               files[MANIFEST_DIR].num_rows if MANIFEST_DIR in files else 0,
                               applied if back is manifest_rows else None)
    if compacted is not None:
        try:
            _compact(store, mf, compacted, checkpoint_row, fault, durable, lease)
        except Exception:  # noqa: BLE001 - the batch is committed; the next commit compacts (LeaseLost: never)
            compacted = None
    ck = (versions.checkpoints + 1) if versions.checkpoints is not None else 0
    merged = ckmerge.merge_tables(store, {MANIFEST_DIR: mf, CHECKPOINTS_DIR: ck}, files,
                                  {MANIFEST_DIR: MANIFEST_SCHEMA, CHECKPOINTS_DIR: CHECKPOINTS_SCHEMA},
                                  checkpoint_row, compacted is not None, fault, durable, lease)
    return committed_snapshot(versions, back, read_back[CHECKPOINTS_DIR][0], compacted, merged[CHECKPOINTS_DIR],
                              merged[MANIFEST_DIR], applied)


def _recorded(checkpoint_row: Mapping[str, Any], manifest_rows: list[Any], versions: TableVersions) -> dict[str, Any]:
    """The checkpoint row as committed: ``detail.manifest_version`` (the version its manifest
    rows go in as), and ``queue_offsets`` of the queues its consume-queue rows change alone."""
    row = dict(checkpoint_row)
    changed = {(r["topic"], r["queue_id"]) for r in manifest_rows
               if r["action"] == "add" and r["kind"] == FileKind.CONSUMEQUEUE}
    row["queue_offsets"] = [q for q in (row.get("queue_offsets") or []) if (q["topic"], q["queue_id"]) in changed]
    detail = json.loads(row.get("detail") or "{}")
    detail.update(manifest_version=versions.manifest + 1 if versions.manifest is not None else 0,
                  queue_offsets="changed")
    row["detail"] = dumps(detail)
    return row


def _applied(base: Snapshot, manifest_rows: list[Any], checkpoint_row: Mapping[str, Any], duplicates: bool = False
             ) -> tuple[dict[str, ManifestRow], dict[str, ManifestRow], list[str], list[Any]]:
    """``base``'s live files and removed files with a batch's rows applied as ``snapshot_of``
    applies them (the committing attempt's rows only, in order), the paths the batch adds twice
    with different facts (with ``duplicates``), and the rows that do not count."""
    files, removed = dict(base.files), dict(base.removed)
    expiry = checkpoint_row["operation"] == "expire"
    attempt = checkpoint_row.get("attempt_id")
    added: dict[str, Any] = {}
    twice: list[str] = []
    other: list[Any] = []
    if duplicates:                # (the facts of paths the batch adds more than once, alone)
        adds = Counter(r["path"] for r in manifest_rows if r["action"] == "add")
        again = {p for p, n in adds.items() if n > 1}
    for r in manifest_rows:
        if attempt is not None and r.get("attempt_id") != attempt:
            other.append(r)
            continue
        if r["action"] == "add":
            if duplicates and r["path"] in again:
                facts = _facts(r)
                if added.setdefault(r["path"], facts) != facts:
                    twice.append(r["path"])
            files[r["path"]] = ManifestRow.of(r)
            removed.pop(r["path"], None)
        else:
            files.pop(r["path"], None)
            if expiry:
                removed[r["path"]] = ManifestRow.of(r)
    return files, removed, twice, other


def committed_snapshot(versions: TableVersions, manifest_rows: list[Any], checkpoint_row: Mapping[str, Any],
                       compacted: list[Any] | None = None, merged: bool = False, manifest_merged: bool = False,
                       applied: tuple[Any, ...] | None = None) -> Snapshot | None:
    """The latest snapshot once this batch is committed on top of ``versions`` (its rows as Arrow
    gives them back, ``compacted``: the rows of the compaction that followed, if it went in;
    ``merged`` / ``manifest_merged``: the checkpoints / manifest table's merge went in after it,
    ``storelib.table.ckmerge``): what
    ``load_snapshot`` would read from the tables then, built from the snapshot the batch opened.
    None when that cannot be known without a read (``versions`` not read with the latest
    snapshot, or rows of a dead attempt a read would count with the batch's) or when a read
    would refuse the batch (a row whose path leaves the store, a lost manifest commit): the
    caller reads the tables (``snapcache.refresh``). ``applied``: ``_applied`` of these rows
    (with ``duplicates``), when the caller has it."""
    base = versions.latest
    if base is None or versions.rows is None:
        return None
    bid, seq, attempt = checkpoint_row["batch_id"], checkpoint_row["batch_seq"], checkpoint_row.get("attempt_id")
    if any(b == bid and q == seq and (attempt is None or a == attempt) for b, q, a in versions.stray):
        return None
    try:
        for r in manifest_rows:
            check_row_paths(r)
    except StorePathError:
        return None
    files, removed, duplicates, other = applied or _applied(base, manifest_rows, checkpoint_row, duplicates=True)
    if len(other) == len(manifest_rows) and checkpoint_row["operation"] != "repair" and compacted is None:
        return None                           # (``snapshot_of``: a lost manifest commit)
    mf = versions.manifest + 1 if versions.manifest is not None else 0
    stray = frozenset() if compacted is not None else \
        versions.stray | {(r["batch_id"], r["batch_seq"], r.get("attempt_id")) for r in other}
    ck = versions.checkpoints + 1 if versions.checkpoints is not None else 0
    after = TableVersions(mf + (compacted is not None) + manifest_merged, ck + merged,
                          len(compacted) if compacted is not None else versions.rows + len(manifest_rows), stray=stray)
    marker = ManifestRow.of(compacted[-1]) if compacted is not None else base.compaction
    batch = BatchRow.of(checkpoint_row)
    snap = Snapshot(batch, files, after, [*base.batches, batch], removed, [*base.duplicates, *duplicates], marker)
    after.latest = snap
    return snap


def compaction_due(versions: TableVersions, manifest_rows: list[Any], checkpoint_row: Mapping[str, Any],
                   data_files: int = 0, applied: tuple[Any, ...] | None = None) -> list[dict[str, Any]] | None:
    """The rows of the compacted manifest table after this batch (its live rows, the rows of files
    an expiry removed, the marker), if the other rows would then outnumber them and
    ``COMPACT_MIN_ROWS`` (at most about twice the live rows are read), or them alone when the
    table has ``data_files`` of ``COMPACT_MIN_FILES`` or more and the compacted rows are at most
    twice this batch's (compacting then costs about what the batch adds, and bounds the files a
    Delta checkpoint lists);
    None when not due, or when the writer's snapshot is not the latest one read from the tables,
    or one ``rowcheck`` refuses. ``applied``: ``_applied`` of these rows, when the caller has it."""
    base = versions.latest
    if versions.rows is None or base is None or base.batch is None or base.duplicates:
        return None
    files, removed, _, _ = applied or _applied(base, manifest_rows, checkpoint_row)
    live = len(files) + len(removed) + 1
    cheap = data_files >= COMPACT_MIN_FILES and live <= 2 * len(manifest_rows)
    if versions.rows + len(manifest_rows) - live <= (live if cheap else max(live, COMPACT_MIN_ROWS)):
        return None
    before = versions.manifest + 1 if versions.manifest is not None else 0
    legacy = base.compaction.detail.get("legacy_version") if base.compaction is not None else None
    marker = file_row("manifest", MANIFEST_DIR, checkpoint_row["batch_id"], checkpoint_row["batch_seq"], now_ms(),
                      attempt_id=checkpoint_row.get("attempt_id"), count=live - 1,
                      detail=dumps({"through_seq": checkpoint_row["batch_seq"], "before_version": before,
                                    "legacy_version": legacy if legacy is not None else before}))
    marker["action"] = COMPACT
    rows = sorted([*files.values(), *removed.values()], key=lambda r: (r["path"], r["action"]))
    return [*rows, marker]


def _compact(store: storage.Store, version: int, rows: list[dict[str, Any]], checkpoint_row: Mapping[str, Any],
             fault: Callable[[str], None] | None, durable: bool, lease: Any) -> None:
    """One conditional commit on top of ``version`` replacing every data file of the manifest
    table by one holding ``rows`` (``dataChange = false``: the rows of every batch from the
    latest on read the same; earlier batches read the versions before, Delta's time travel)."""
    from deltalake import CommitProperties
    from deltalake.transaction import AddAction, RemoveAction
    import pyarrow.parquet as pq
    if fault:
        fault("before-compaction")
    table = pa.Table.from_pylist(rows, schema=MANIFEST_SCHEMA)
    mine = deltacommit.commit_token()
    props = CommitProperties(max_commit_retries=0,
                             custom_metadata={"rocketlake.batch_id": checkpoint_row["batch_id"],
                                              "rocketlake.operation": COMPACT,
                                              "userMetadata": checkpoint_row["batch_id"], **mine})
    if lease is not None:
        lease.check()

    def write(dt: Any, hooks: Any = None) -> None:
        now = now_ms()
        current = pa.table(dt.get_add_actions(flatten=True))
        name = f"part-00000-{uuid.uuid4()}-c000.compacted.snappy.parquet"
        fs, path = storage.filesystem(f"{dt.table_uri.rstrip('/')}/{name}")
        pq.write_table(table, path, filesystem=fs, compression="snappy")
        size = fs.get_file_info(path).size
        actions: list[Any] = [AddAction(name, size, {}, now, False, json.dumps({"numRecords": table.num_rows}))]
        actions += [RemoveAction(p, False, now, n) for p, n in zip(current.column("path").to_pylist(),
                                                                   current.column("size_bytes").to_pylist())]
        kw = {} if hooks is None else {"post_commithook_properties": hooks}
        dt.create_write_transaction(actions, mode="append", schema=MANIFEST_SCHEMA, commit_properties=props, **kw)
    deltacommit.commit_version(store, MANIFEST_DIR, version, write, durable, fault, "mid-compaction",
                               mine=mine)
    if fault:
        fault("after-compaction")


def now_ms() -> int:
    return int(time.time() * 1000)


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


# ---------------------------------------------------------------------------- rows
# Every row of both tables is built here (ingest's commit, adopt, expire), so every writer fills
# every column the same way.
def file_row(kind: str, path: str, batch_id: str, batch_seq: int, committed_at: int, *,
             staged_path: str | None = None, attempt_id: str | None = None, **columns: Any) -> dict[str, Any]:
    """A manifest row adding one file version: every MANIFEST_SCHEMA column, those not given None.

    ``columns``: the file's facts (topic, queue_id, base_offset, file_size, valid_bytes, count,
    min/max_offset, min/max_store_ts, checksum, detail); ``staged_path``: where the batch staged
    the file (None: it is already in place); ``attempt_id``: the ingest attempt writing it."""
    row = dict.fromkeys(_MANIFEST_COLUMNS)
    # ``kind`` as the plain string it is stored as (a ``FileKind`` is a str subclass: the
    # committed snapshot would have to take every row back from Arrow to hold what a read gives)
    row.update(batch_id=batch_id, batch_seq=batch_seq, action="add",
               kind=kind.value if isinstance(kind, FileKind) else kind, path=path,
               staged_path=staged_path, committed_at=committed_at, attempt_id=attempt_id)
    row.update(_columns(columns, MANIFEST_SCHEMA))
    return row


def remove_row(live: Mapping[str, Any], batch_id: str, batch_seq: int, committed_at: int, detail: str) -> dict[str, Any]:
    """A manifest row removing the file of ``live`` (its current ``add`` row), which it copies."""
    row = dict(live)
    # attempt_id None: the removal belongs to the batch doing it, not to the ingest attempt that
    # wrote the file (load_snapshot keeps only rows of the attempt a batch's checkpoint row names).
    row.update(batch_id=batch_id, batch_seq=batch_seq, action="remove", staged_path=None,
               committed_at=committed_at, detail=detail, attempt_id=None)
    return row


def config_column(config: StoreConfig) -> str:
    """A batch row's ``config``: every key a later operation reads of it (``rows.RECORDED_KEYS``:
    the file-shaping keys readers overlay, ``flushDiskType`` expire and repair follow)."""
    return dumps({k: getattr(config, k) for k in RECORDED_KEYS})


def checkpoint_row(**columns: Any) -> dict[str, Any]:
    """A checkpoints-table row: every CHECKPOINTS_SCHEMA column must be given (``attempt_id``
    defaults to None: a batch not written by an ingest attempt)."""
    missing = [n for n in CHECKPOINTS_SCHEMA.names if n not in columns and n != "attempt_id"]
    if missing:
        raise ValueError(f"checkpoint row without {', '.join(missing)}")
    row = dict.fromkeys(CHECKPOINTS_SCHEMA.names)
    row.update(_columns(columns, CHECKPOINTS_SCHEMA))
    return row


def checkpoint_row_after(prev: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """The checkpoint row of a batch that changes only part of the store's state (an expiry):
    the previous batch's row ``prev`` with ``changes``."""
    row = dict(prev)
    row["attempt_id"] = None        # not an ingest attempt: every manifest row of the batch counts
    row.update(_columns(changes, CHECKPOINTS_SCHEMA))
    return row


def queue_offsets(queue_next: dict[Any, Any]) -> list[Any]:
    """The ``queue_offsets`` column from ``{(topic, queue_id): next offset}``, sorted."""
    return [{"topic": t, "queue_id": q, "max_offset": o} for (t, q), o in sorted(queue_next.items())]


def _columns(values: dict[Any, Any], schema: pa.Schema) -> dict[Any, Any]:
    # (once: Schema.names builds a new list at every access)
    names = _MANIFEST_NAMES if schema is MANIFEST_SCHEMA else set(schema.names)
    unknown = [k for k in values if k not in names]
    if unknown:
        raise ValueError(f"no column {', '.join(unknown)} in the table")
    return values
