"""The store-file model of a snapshot: which files a reader may see, and how much of each
(docs/FORMAT.md §6, §10).

``StoreFiles``: commitlog segments with their valid byte length, consume-queue files per
(topic, queue id) with their valid unit count, index files in load order with an optional snapshot
limit / header override. Every read of ``storelib.read.query`` stays inside those limits. Two ways to
build one:

* rocketlake stores (a ``_rocketlake`` manifest, FORMAT of it: ``storelib.table.manifest``):
  ``open_files`` / ``StoreFiles.from_snapshot`` give the live files of the chosen committed batch
  (latest by default), commitlog segments limited to their ``valid_bytes``, consume-queue files
  to ``valid_bytes // 20`` units, index files to the header the batch committed (its
  ``index_count`` is the limit; later entries are skipped but their chain is still followed).
  Files of a batch in flight are never listed: its manifest rows have no checkpoint row yet.
  A committed batch whose publish was interrupted still has ``_rocketlake/staging/<batch_id>/``:
  its files are read from their ``staged_path`` where that still exists (the final file may be
  missing or an older, shorter version of the same name). Rows readers cannot use raise
  ``CorruptStore`` naming the file (``table.rowcheck``).
* stores without a manifest (a RocketMQ broker's directory): ``StoreFiles.scan``, a broker's view
  after a normal restart (``load()`` + ``recoverNormally`` + ``truncateDirtyLogicFiles``). The
  file-shaping configuration is checked against the file sizes found and inferred from them
  where it does not match (``infer_config``). Only the tail of the last commitlog file is walked,
  from the newest consume-queue / index position that can be verified.

A snapshot's ``StoreFiles`` carry its batch (``expired``: what a reader says of a file of it that a
later expiry deleted, ``table.expired``), so every reader of them says the same, wherever it runs.

``SnapshotInfo`` carries what pruning needs besides the files: per-segment min/max store time
(manifest only) and the batch row.
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, TYPE_CHECKING, cast

import numpy as np

from ..errors import CorruptStore, NoSuchBatch, StoreNotFound, UnsupportedStore
from ..format import commitlog, consumequeue, indexfile, records
from ..io import extentlists, patches
from .expired import ExpiredFiles
from .rows import BatchRow, FileKind, ManifestRow
from .rows import recorded_config
from .snapshots import StoreSnapshot, open_snapshot
from ..format.config import StoreConfig
from ..io.checked import read_stored
from ..io.headpages import version_extents
from ..io.localstore import open_local
from ..format.indexfile import IndexHeader
from ..format.names import OFFSET_FILE_NAME
from ..format.paths import STAGING_DIR

if TYPE_CHECKING:    # storage loads pyarrow: imported where needed, not on the shell path
    from ..io.storage import Store
    from .zonemap import ZoneMap

__all__ = ["CommitLogSegment", "ConsumeQueueFile", "IndexFileRef", "StoreFiles", "SnapshotInfo",
           "open_files", "as_store", "files_from_snapshot", "reading_path", "staging_batches", "infer_config",
           "recovered_end", "refuse_unsupported", "queues_not_derived"]

_WALK_CHUNK = 1 << 20
_PROBE_UNITS = 1 << 12       # object stores: units read around each probe of a queue's last file (80 KiB)
_SCAN_READERS = 16           # object stores: queues listed and their last file searched at once
# (path, unit) -> (commitlog offset, size, tags code): the last unit in use of each queue's last
# file, as its search read it (the recovery walk's hints and the truncation start there)
_Tails = dict[tuple[str, int], tuple[int, int, int]]

# ----------------------------------------------------------------------------- the model
class CommitLogSegment(NamedTuple):
    rel: str            # "commitlog/000...0"
    base: int           # absolute offset of the file's first byte (= its name)
    valid: int          # readable bytes from the file start (MappedFile read position)


class ConsumeQueueFile(NamedTuple):
    rel: str            # "consumequeue/<topic>/<qid>/<name>"
    base: int           # byte offset in the queue's logical stream (= name = first unit * 20)
    units: int          # valid (readable) units in this file


class IndexFileRef(NamedTuple):
    """An index file as a reader sees it.

    ``index_count``: snapshot limit. Entries at positions >= it were written after the snapshot:
    they are skipped, but their ``prevPos`` chain is still followed. ``header``: the header to use
    instead of the bytes on disk (a snapshot's begin/end values; its index_count is used as the
    limit when ``index_count`` is None). Both None = the file as it is (a broker's view).
    """
    rel: str
    index_count: int | None = None
    header: IndexHeader | None = None


@dataclass
class StoreFiles:
    """Everything a reader may see of a store, with the valid size of every file."""
    config: StoreConfig
    commitlog: list[CommitLogSegment] = field(default_factory=list)
    consume_queues: dict[tuple[str, int], list[ConsumeQueueFile]] = field(default_factory=dict)
    index: list[IndexFileRef] = field(default_factory=list)
    # the batch these files are of (a rocketlake snapshot): what a reader says of one an expiry
    # after it deleted (``table.expired``); None: a broker's view
    expired: ExpiredFiles | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self.commitlog = sorted((CommitLogSegment(*s) for s in self.commitlog), key=lambda s: s.base)
        self.consume_queues = {(t, int(q)): sorted((ConsumeQueueFile(*f) for f in fs), key=lambda f: f.base)
                               for (t, q), fs in self.consume_queues.items()}
        self.index = [IndexFileRef(*((r,) if isinstance(r, str) else r)) for r in self.index]

    @classmethod
    def from_snapshot(cls, store: Store | str, as_of_batch: str | int | None = None,
                      config: StoreConfig | None = None) -> "StoreFiles":
        """The files of one committed rocketlake batch (latest by default); ``scan`` without a manifest."""
        return open_files(store, as_of_batch, config)[0]

    @classmethod
    def scan(cls, store: Store | str, config: StoreConfig) -> "StoreFiles":
        """What a broker sees after a normal restart (``load`` + ``recoverNormally``).

        Commitlog: files sorted by name; every file but the last is readable in full; the last
        one up to the end of its last record (walk until BLANK / TOTALSIZE 0 / unknown magic).
        Consume queues: every file but the last is full; the last up to the first unit that is
        not ``offset >= 0 && size > 0``; then units pointing at or beyond the commitlog end are
        dropped (``truncateDirtyLogicFiles``). Index files: sorted by name, headers from disk.
        A last segment still all zero after one whose records end without a BLANK (allocated
        ahead by a running broker or one that died) is dropped, as recovery deletes it.
        Otherwise assumes a clean shutdown (no ``abort`` file): abnormal recovery is not modelled.
        """
        store = as_store(store)
        refuse_unsupported(store)
        # consume queues first (the commitlog walk may start from their newest unit)
        cqs, tails = _scan_consume_queues(store, config.cq_file_size)
        index = [IndexFileRef(r) for r in sorted(store.list_files(indexfile.DIR, recursive=False),
                                                  key=lambda r: r.rsplit("/", 1)[-1])]
        segs = _recover_commitlog(store, config.mappedFileSizeCommitLog, cqs, index, tails)
        if segs:
            cl_max = segs[-1].base + segs[-1].valid
            # truncateDirtyLogicFiles: drop units whose commitlog offset >= the commitlog end
            for key, files in list(cqs.items()):
                cqs[key] = _truncate_cq(store, files, cl_max, tails)
                if not cqs[key]:
                    del cqs[key]
        return cls(config=config, commitlog=segs, consume_queues=cqs, index=index)


# ----------------------------------------------------------------------------- broker view (scan)
def queues_not_derived(store: Store) -> str | None:
    """The queues of a broker's directory that one unit a record (what ingest, mirror and repair
    derive from the CommitLog) does not make, named (docs/FORMAT.md §2.1-2.2); None if none."""
    if store.list_dirs(consumequeue.BATCH_CQ_DIR):
        return f"the batch consume queue ({consumequeue.BATCH_CQ_DIR}/, queue.type=BatchCQ)"
    if any(consumequeue.is_lmq(t) for t in store.list_dirs(consumequeue.DIR)):
        return "light message queues (%LMQ%..., multi-dispatch: ingest --from-store of a stopped copy keeps them)"
    return None


def refuse_unsupported(store: Store) -> None:
    """UnsupportedStore for a broker's directory whose queues live where rocketlake does not read
    them (docs/FORMAT.md §2.2): every answer from the rest would be short by those queues."""
    found = []
    if store.list_dirs(consumequeue.BATCH_CQ_DIR):
        found.append(f"the batch consume queue ({consumequeue.BATCH_CQ_DIR}/: topics with queue.type=BatchCQ, "
                     f"records that each hold a batch of messages)")
    if any(r.rsplit("/", 1)[-1] == consumequeue.ROCKSDB_MARKER
           for r in store.list_files(consumequeue.DIR, recursive=False)):
        found.append(f"the RocksDB consume queue ({consumequeue.DIR}/ is a RocksDB database: storeType=defaultRocksDB)")
    if found:
        raise UnsupportedStore(f"{store.uri}: written with "
                               + " and ".join(found) + ", which rocketlake does not read; nothing was read or changed")


def _numbered(store: Store, rel_dir: str) -> list[str]:
    """The files of ``rel_dir`` named by 20 digits, in name (= offset) order."""
    rels = [r for r in store.list_files(rel_dir, recursive=False) if OFFSET_FILE_NAME.match(r.rsplit("/", 1)[-1])]
    return sorted(rels, key=lambda r: int(r.rsplit("/", 1)[-1]))


def _scan_consume_queues(store: Store, cq_fsize: int) -> tuple[dict[tuple[str, int], list[ConsumeQueueFile]], _Tails]:
    """The queues' files, each last one's units in use; and what the search read of each last
    file's last unit in use (``_Tails``)."""
    per_file = cq_fsize // consumequeue.UNIT_SIZE
    topics = store.list_dirs(consumequeue.DIR)
    qdirs = [(t, q) for t, qs in zip(topics, _each(store, lambda t: store.list_dirs(f"{consumequeue.DIR}/{t}"), topics))
             for q in qs if q.lstrip("-").isdigit()]

    def queue(tq: tuple[str, str]) -> tuple[list[ConsumeQueueFile], tuple[int, int, int] | None]:
        rels = _numbered(store, f"{consumequeue.DIR}/{tq[0]}/{tq[1]}")
        files = [ConsumeQueueFile(r, int(r.rsplit("/", 1)[-1]), per_file) for r in rels]
        if not files:
            return files, None
        n, tail = _cq_valid_units(store, files[-1].rel, per_file)
        files[-1] = files[-1]._replace(units=n)
        return files, tail

    cqs: dict[tuple[str, int], list[ConsumeQueueFile]] = {}
    tails: _Tails = {}
    for (topic, qdir), (files, tail) in zip(qdirs, _each(store, queue, qdirs)):
        if files:
            cqs[(topic, int(qdir))] = files
            if tail is not None:
                tails[(files[-1].rel, files[-1].units - 1)] = tail
    return cqs, tails


def _each(store: Store, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``[fn(x) for x in items]``; on an object store, where each is a few round trips, at once."""
    if store.os_paths or len(items) < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(_SCAN_READERS, len(items))) as readers:
        return list(readers.map(fn, items))


def _recover_commitlog(store: Store, fsize: int, cqs: dict[Any, Any], index: list[IndexFileRef],
                       tails: _Tails) -> list[CommitLogSegment]:
    """Commitlog segments, the last one's valid length found by a walk from the newest record
    start the consume queues / the newest index file name that checks out (else from 0)."""
    segs = [CommitLogSegment(r, int(r.rsplit("/", 1)[-1]), fsize) for r in _numbered(store, commitlog.DIR)]
    if not segs:
        return segs
    last = segs[-1]
    hints = []                         # candidate record starts: newest CQ units, newest index end
    for files in cqs.values():
        f = files[-1]
        if f.units > 0:
            hints.append(_read_unit(store, f.rel, f.units - 1, tails)[0])
    for ref in index[-1:]:
        try:
            raw = store.read(ref.rel, 0, indexfile.HEADER_SIZE)
        except OSError:
            continue
        if len(raw) >= indexfile.HEADER_SIZE:
            hints.append(IndexHeader.parse(raw).end_phy_offset)
    segs[-1] = last._replace(valid=_recovered_from_hints(store, last, hints, fsize))
    # A segment a broker created ahead of its data (AllocateMappedFileService makes the next file
    # before it is needed; a clean shutdown deletes it, a crash or a running broker leaves it): all
    # zero, after a segment whose records end without a BLANK. Recovery ends the data in that
    # segment and deletes the files after it (truncateDirtyFiles).
    while len(segs) > 1 and segs[-1].valid == 0:
        prev = segs[-2]
        end = _recovered_from_hints(store, prev, hints, fsize)
        raw = store.read(prev.rel, end, commitlog.BLANK_SIZE) if end + commitlog.BLANK_SIZE <= fsize else b""
        head = records.record_head(raw) if len(raw) == commitlog.BLANK_SIZE else None
        if head is None or head[1] == commitlog.BLANK_MAGIC:
            break                       # prev is full: the next record starts the empty segment
        segs.pop()
        segs[-1] = prev._replace(valid=end)
    return segs


def _recovered_from_hints(store: Store, seg: CommitLogSegment, hints: list[int], fsize: int) -> int:
    """The valid length of ``seg`` as the broker's recovery walk finds it, the walk started at the
    end of the newest hinted record (a consume-queue unit, an index end) that checks out inside it."""
    start = 0
    for h in sorted(set(hints), reverse=True):
        if seg.base <= h < seg.base + fsize:
            end = _verified_record_end(store, seg.rel, h - seg.base, h, fsize)
            if end is not None:
                start = end
                break
    return recovered_end(store, seg.rel, start, fsize)


def _read_unit(store: Store, rel: str, unit: int, tails: _Tails) -> tuple[int, int, int]:
    """(commitlog offset, size, tags code) of consume-queue unit ``unit`` of ``rel`` (from
    ``tails`` when the search of its last file read it)."""
    known = tails.get((rel, unit))
    if known is not None:
        return known
    return consumequeue.parse_unit(read_stored(store, rel, unit * consumequeue.UNIT_SIZE, consumequeue.UNIT_SIZE))


def _cq_valid_units(store: Store, rel: str, per_file: int) -> tuple[int, tuple[int, int, int] | None]:
    """Units before the first one not in use (``consumequeue.valid_units``, the one end-of-data
    rule), found by a binary search: units are written in order. Locally each probe reads its
    unit; on an object store, where a read is a round trip, it reads the ``_PROBE_UNITS`` units
    around it (a small file: all of it), so the next probes are mostly answered already.
    Returns (units in use, the last of them or None)."""
    size = store.size(rel) or 0
    n = min(per_file, size // consumequeue.UNIT_SIZE)
    step = 1 if store.os_paths else _PROBE_UNITS
    chunks: dict[int, np.ndarray] = {}

    def unit(i: int) -> tuple[int, int, int] | None:
        c = i // step
        u = chunks.get(c)
        if u is None:
            at = c * step
            raw = store.read(rel, at * consumequeue.UNIT_SIZE, min(step, n - at) * consumequeue.UNIT_SIZE)
            u = chunks[c] = consumequeue.decode_units(raw)
        k = i - c * step
        return (int(u["phys"][k]), int(u["size"][k]), int(u["tags"][k])) if k < len(u) else None

    good = consumequeue.valid_units(unit, n, exact=False)
    return good, (unit(good - 1) if good else None)      # probed: its chunk is read


def _truncate_cq(store: Store, files: list[ConsumeQueueFile], cl_max: int, tails: _Tails) -> list[ConsumeQueueFile]:
    files = list(files)
    while files:
        f = files[-1]
        units = f.units
        while units > 0 and _read_unit(store, f.rel, units - 1, tails)[0] >= cl_max:
            units -= 1
        if units == 0 and len(files) > 1:
            files.pop()
            continue
        files[-1] = f._replace(units=units)
        break
    return files


def _verified_record_end(store: Store, rel: str, pos: int, phy: int, fsize: int) -> int | None:
    """End position of the record at ``pos`` if it looks like a record stored at ``phy``."""
    raw = store.read(rel, pos, records.PHYS_END)
    if len(raw) < records.PHYS_END:
        return None
    head = records.record_head(raw)
    if head is None:
        return None
    size, magic = head
    if not _record_start(size, magic, pos, fsize) or records.record_phys_offset(raw) != phy:
        return None
    return pos + size


def _record_start(size: int, magic: int, pos: int, fsize: int) -> bool:
    return bool(commitlog.is_record_start(size, magic, pos, fsize))


def recovered_end(store: Store, rel: str, pos: int, fsize: int) -> int:
    """Position after the last record, walking from ``pos`` (recoverNormally, no CRC check)."""
    buf = b""
    buf_at = pos
    while pos + commitlog.BLANK_SIZE <= fsize:
        head = records.record_head(buf, pos - buf_at)
        if head is None:                   # past the chunk read so far: read on
            buf_at = pos
            buf = store.read(rel, pos, min(_WALK_CHUNK, fsize - pos))
            head = records.record_head(buf)
            if head is None:
                break
        size, magic = head
        if not _record_start(size, magic, pos, fsize):
            break                          # BLANK (end of this file), zero or garbage: end of data
        pos += size
    return pos


# ----------------------------------------------------------------------------- snapshot view (manifest)
@dataclass
class SnapshotInfo:
    batch: BatchRow | None = None                  # checkpoint row (None: no manifest)
    seg_ts: dict[Any, Any] = field(default_factory=dict)     # segment base offset -> (min_ts, max_ts) or absent
    source: str = "scan"                           # "manifest" | "scan"
    seg_count: dict[Any, Any] = field(default_factory=dict)  # segment base offset -> records (manifest only)
    seg_rows: dict[Any, Any] = field(default_factory=dict)   # segment base offset -> its manifest row (manifest only)
    zone_maps: dict[int, ZoneMap | None] = field(default_factory=dict, repr=False)   # parsed on first use (``zones``)

    def zones(self, base: int) -> ZoneMap | None:
        """The segment's zone map (``table.zonemap``), None if its row has none."""
        from .zonemap import of_row
        if base not in self.zone_maps:
            self.zone_maps[base] = of_row(self.seg_rows.get(base))
        return self.zone_maps[base]

    @property
    def batch_id(self) -> str | None:
        return self.batch.batch_id if self.batch else None

    @property
    def batch_seq(self) -> int | None:
        return self.batch.batch_seq if self.batch else None


def infer_config(store: Store, config: StoreConfig | None = None) -> StoreConfig:
    """Fit the file-shaping sizes of ``config`` to the files of a store without a manifest.

    Commitlog and consume-queue file sizes are read off the files. Index files fix only
    ``40 + 4*slots + 20*entries``; if that disagrees with ``config``, RocketMQ's default ratio
    ``maxIndexNum = 4 * maxHashSlotNum`` is assumed (pass a --config otherwise).
    """
    config = config or StoreConfig()
    changes: dict[str, Any] = {}
    # The most common size of each kind (a damaged file, truncated or grown, does not decide).
    segs = [r for r in store.list_files(commitlog.DIR, recursive=False) if OFFSET_FILE_NAME.match(r.rsplit("/", 1)[-1])]
    if segs:
        size = _common_size(store, segs[:-1] if len(segs) > 1 else segs)
        if size and size != config.mappedFileSizeCommitLog:
            changes["mappedFileSizeCommitLog"] = size
    cq = []
    for topic in store.list_dirs(consumequeue.DIR)[:8]:
        for q in store.list_dirs(f"{consumequeue.DIR}/{topic}")[:2]:
            cq += [r for r in store.list_files(f"{consumequeue.DIR}/{topic}/{q}", recursive=False)
                   if OFFSET_FILE_NAME.match(r.rsplit("/", 1)[-1])][:1]
    size = _common_size(store, cq)
    if size and size % consumequeue.UNIT_SIZE == 0 and size != config.cq_file_size:
        changes["mappedFileSizeConsumeQueue"] = size
    idx = store.list_files(indexfile.DIR, recursive=False)
    if idx:
        size = _common_size(store, idx[:8])
        cfg = dataclasses.replace(config, **changes)
        if size and size != cfg.index_file_size:
            slots, rem = divmod(size - indexfile.HEADER_SIZE, indexfile.SLOT_SIZE + 4 * indexfile.ENTRY_SIZE)
            if rem or slots < 1:
                raise CorruptStore(idx[0], 0, f"index files of {size} bytes fit neither the given maxHashSlotNum/"
                                              f"maxIndexNum nor the 1:4 default ratio (damaged? else pass --config)")
            changes.update(maxHashSlotNum=slots, maxIndexNum=4 * slots)
    return dataclasses.replace(config, **changes) if changes else config


def _common_size(store: Store, rels: list[Any]) -> int | None:
    """The most frequent non-zero size among ``rels`` (ties: the larger); None without one."""
    counts: dict[Any, Any] = {}
    for r in rels:
        s = store.size(r)
        if s:
            counts[s] = counts.get(s, 0) + 1
    return max(counts, key=lambda s: (counts[s], s)) if counts else None


def staging_batches(store: Store) -> set[Any]:
    """Batch ids with a directory under ``_rocketlake/staging/`` (their publish may be unfinished)."""
    try:
        return set(store.list_dirs(STAGING_DIR))
    except OSError:
        return set()


def as_store(store: Store | str) -> Store:
    """A store object for ``store``: a local path gets the pyarrow-free ``localstore.LocalStore``
    (anything it does not serve goes to a ``storage.Store``), other URIs a ``storage.Store``."""
    if not isinstance(store, str):
        return store
    local = open_local(store)
    if local is not None:
        return cast("Store", local)             # a LocalStore serves what the readers ask of a Store
    from ..io.storage import Store
    return Store(store)


def _row_extents(store: Store, row: ManifestRow) -> list[Any] | None:
    """The extents a row's detail lists (object stores: storelib.io.fragments), those of the
    extent-list objects it names included (read from ``store``: storelib.io.extentlists), or
    None. CorruptStore naming the file when any is damaged or missing."""
    if not row.has_detail("extents"):
        return None
    try:
        return version_extents(dict(row.detail), row.path, extentlists.fetcher(store))
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptStore(row.path, 0, f"manifest extents of batch {row.get('batch_id')!r}: {e}") from None


def reading_path(store: Store, row: Mapping[str, Any], staged: set[str]) -> str:
    """Where a reader reads the file version of ``row``: its final path, or, while its batch's
    publish is unfinished (``staged``: batch ids with a staging directory, ``staging_batches``),
    its staged copy.

    A file the batch continues in place is read through its staged patch until the patch is
    applied (``Store.map_patched``). Publish moves staged -> final, so a staged file that still
    exists was not (fully) published and the final name may be missing or hold an older,
    shorter version. Either copy is complete when both exist (copy-then-delete on object
    stores). The publish may go on while the reader reads: ``store.moved`` makes reads of a
    staged file that is gone by then read the final one."""
    row = row if isinstance(row, ManifestRow) else ManifestRow(row)
    extents = _row_extents(store, row)
    if extents is not None:            # object stores: the file is assembled from objects
        store.map_file(row.path, row.file_size, extents)
        return row.path
    if row.batch_id not in staged:
        return row.path
    patch = patches.row_patch(row)
    if patch is not None and store.exists(patch["staged"]):
        store.map_patched(row.path, row.file_size, patch)
        return row.path
    sp = row.staged_path
    if sp:
        size = store.size(sp)
        if size is not None and size >= row.valid_bytes:
            store.moved[sp] = row.path
            return sp
    return row.path


def files_from_snapshot(store: Store, snap: StoreSnapshot, config: StoreConfig | None = None
                        ) -> tuple[StoreFiles, SnapshotInfo]:
    """(StoreFiles, SnapshotInfo) of an opened snapshot (``snapshots.open_snapshot``); ``config``:
    the base its recorded file-shaping keys go over (query limits), else the snapshot's own."""
    from .rowcheck import check_snapshot
    cfg = recorded_config(snap.batch, config) if config is not None else snap.config
    check_snapshot(snap, cfg)
    staged = staging_batches(store)
    extentlists.prefetch(((r.path, r.detail) for r in snap.files.values() if r.has_detail("extent_lists")),
                         extentlists.fetcher(store))

    def where(row: ManifestRow) -> str:
        return reading_path(store, row, staged)

    segs, seg_ts, seg_count, seg_rows = [], {}, {}, {}
    for r in snap.of_kind(FileKind.COMMITLOG):
        segs.append(CommitLogSegment(where(r), r.base_offset, r.valid_bytes))
        seg_ts[r.base_offset] = (r.min_store_ts, r.max_store_ts)
        seg_count[r.base_offset] = r.count
        seg_rows[r.base_offset] = r
    cqs: dict[tuple[str, int], list[ConsumeQueueFile]] = {}
    for r in snap.of_kind(FileKind.CONSUMEQUEUE):
        cqs.setdefault((str(r.topic), int(r.queue_id or 0)), []).append(
            ConsumeQueueFile(where(r), r.base_offset, r.valid_bytes // consumequeue.UNIT_SIZE))
    index = []
    for r in snap.of_kind(FileKind.INDEX):          # sorted by path = by name = RocketMQ's load order
        hdr = r.index_header
        index.append(IndexFileRef(where(r), hdr.index_count, hdr))
    files = StoreFiles(config=cfg, commitlog=segs, consume_queues=cqs, index=index,
                       expired=ExpiredFiles.of(snap.batch) if snap.batch is not None else None)
    return files, SnapshotInfo(batch=snap.batch, seg_ts=seg_ts, source="manifest", seg_count=seg_count,
                               seg_rows=seg_rows)


def open_files(store: Store | str, as_of_batch: str | int | None = None, config: StoreConfig | None = None,
               snapshot: StoreSnapshot | None = None) -> tuple[StoreFiles, SnapshotInfo]:
    """(StoreFiles, SnapshotInfo) of the latest committed batch (or ``as_of_batch``): of
    ``snapshot`` when the command opened it already (``snapshots.open_snapshot``), else opened
    here. A store without a manifest: the broker's view (``StoreFiles.scan``)."""
    store = as_store(store)
    snap = snapshot if snapshot is not None else open_snapshot(store, as_of_batch)
    if snap.batch is not None:
        return files_from_snapshot(store, snap, config)
    if as_of_batch is not None:
        raise NoSuchBatch(f"{store.uri} has no committed rocketlake batches (no manifest): "
                       f"--as-of-batch {as_of_batch!r} cannot be served")
    if not (any(store.exists(d) for d in (commitlog.DIR, consumequeue.DIR, indexfile.DIR))):
        raise StoreNotFound(f"{store.uri}: no RocketMQ store here (no commitlog/, consumequeue/, index/ "
                            f"and no committed rocketlake manifest)")
    cfg = infer_config(store, config)
    return StoreFiles.scan(store, cfg), SnapshotInfo(source="scan")
