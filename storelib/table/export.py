"""Export: a committed snapshot as a broker-ready RocketMQ store directory.

Writes every live file of the snapshot (commitlog segments, consume queues, index files, the
checkpoint) under its RocketMQ name with its full file size (zero tail), reading each one as the
readers do: through its extents on object stores (storelib.io.fragments), its final name on local
stores. The result is byte-identical to what a RocketMQ broker keeps for the same messages, and
every file's bytes are checked against its manifest checksum on the way. ``_rocketlake/`` is not
exported: the directory is a plain RocketMQ store a broker can start on (``storePathRootDir``).
Beside the files, ``rocketlake.properties`` holds the snapshot's file-shaping configuration as a
broker's properties (``mqbroker -c`` reads these keys; with ``storePathRootDir`` for a local
target), so a broker, ``verify`` and the readers size the files as they were written, and where
each queue's first exported file starts (``QUEUE_STARTS_KEY``, a key a broker ignores). Under
``config/`` (``rocketlake export``, ``ops.scheduled``): where the broker's delivery of scheduled
messages had got as of the snapshot (``delayOffset.json``, ``timercheck``), so a broker started
on the export delivers none of them twice.

Any committed snapshot can be exported, the latest or an earlier one, also while a batch is being
written or published: later batches never change the bytes a snapshot's rows cover, except an
index file's header and slot heads (taken as of the row: ``patches.index_head_as_of``) and the
checkpoint file (rebuilt from the row). A local target is written under a temporary name beside
it and renamed into place when every file checked out: a failed export leaves no target.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol

import json
import os
import shutil
import uuid

from ..errors import BadInput, ConfigError, CorruptStore, ExportError
from ..format import checkpoint as ckpt, consumequeue
from ..format.config import StoreConfig, parse_java_properties
from ..io import checksum, headpages, patches, storage
from ..io.condput import refuse_gs_store
from . import rowcheck, storefiles
from .expired import expired_file_error
from .snapshots import StoreSnapshot, open_snapshot
from .rows import FileKind, ManifestRow, recorded_config

__all__ = ["export_store", "ConfigScan", "PROPERTIES_NAME", "QUEUE_STARTS_KEY", "properties_text", "queue_starts_of",
           "recorded_queue_starts"]

_CHUNK = 64 << 20
PREFETCH_BYTES = 8 << 20       # files at most this large are read ahead on threads from object stores (_Prefetch)


class ConfigScan(Protocol):
    """What ``export_store``'s ``config_files`` gives: files it writes beside the store files, made
    from the bytes of the files it ``wants`` (handed to ``add`` as the export reads them, in path
    order: each file is read once)."""

    def wants(self, row: ManifestRow) -> bool: ...

    def add(self, row: ManifestRow, data: bytes) -> None: ...

    def files(self) -> tuple[list[tuple[str, bytes]], dict[str, Any]]: ...


ConfigFiles = Callable[[storage.Store, StoreSnapshot, set[Any]], ConfigScan]
PROPERTIES_NAME = "rocketlake.properties"
# Each queue's first exported file, as the queue offset it starts at ({"topic/queueId": offset}): a
# topic's own retention removes a queue's oldest files while the CommitLog keeps their records, so
# only this tells such a queue from one whose first file was lost (verify --deep, repair). A broker
# ignores a key that is no MessageStoreConfig field.
QUEUE_STARTS_KEY = "rocketlakeQueueStarts"


def properties_text(config: StoreConfig, root: str | None = None, queue_starts: dict[Any, Any] | None = None) -> str:
    """The file-shaping configuration as a broker's .properties text (``PROPERTIES_NAME``), with
    ``queue_starts`` (``queue_starts_of``) under ``QUEUE_STARTS_KEY``."""
    lines = ["# Written by rocketlake export: the sizes these files were written with, as RocketMQ",
             "# MessageStoreConfig keys (a broker started on this directory needs the same values)."]
    if root is not None:
        lines.append(f"storePathRootDir={os.path.abspath(root)}")
    for k, v in config.file_shaping().items():
        if isinstance(v, bool):
            v = str(v).lower()
        lines.append(f"{k}={v}")
    if queue_starts is not None:
        lines.append("# The queue offset each queue's first file starts at (older files: removed by retention).")
        lines.append(f"{QUEUE_STARTS_KEY}={json.dumps(queue_starts, sort_keys=True, separators=(',', ':'), ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def queue_starts_of(rels: Iterable[str]) -> dict[Any, Any]:
    """{"topic/queueId": queue offset of its first file} of the consume-queue files ``rels``."""
    out: dict[Any, Any] = {}
    for rel in rels:
        parts = rel.split("/")
        if len(parts) == 4 and parts[3].isdigit():
            key, start = f"{parts[1]}/{parts[2]}", int(parts[3]) // consumequeue.UNIT_SIZE
            out[key] = min(out.get(key, start), start)
    return out


def recorded_queue_starts(store: storage.Store) -> dict[Any, Any] | None:
    """The queue starts an export recorded in its ``PROPERTIES_NAME`` (None: not an export, or one
    written before they were recorded); ``ConfigError`` naming the file when they do not parse."""
    if not store.local or not os.path.isfile(store.path(PROPERTIES_NAME)):
        return None
    with open(store.path(PROPERTIES_NAME), encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    try:
        value = parse_java_properties(text).get(QUEUE_STARTS_KEY)
    except ConfigError:
        return None                        # (the configuration's own reader names the file)
    if value is None:
        return None
    try:
        starts = json.loads(value)
        if not (isinstance(starts, dict) and all(isinstance(v, int) and v >= 0 for v in starts.values())):
            raise ValueError("not a map of queue to offset")
    except ValueError as e:
        raise ConfigError(f"{store.path(PROPERTIES_NAME)}: {QUEUE_STARTS_KEY} is not what export wrote ({e}): "
                          "restore it, or remove the line (then a queue's first file on disk is taken as its "
                          "start)") from None
    return starts


def export_store(store_uri: str, target: str, as_of_batch: str | int | None = None, durable: bool = True,
                 snap: StoreSnapshot | None = None, check: bool = True,
                 config_files: ConfigFiles | None = None) -> dict[str, Any]:
    """Export the latest committed snapshot (or ``as_of_batch``, or ``snap``) of ``store_uri`` to
    ``target`` (a local directory or any store URI), which must be empty or absent; returns a
    summary. ``check=False``: files whose bytes do not match their checksum are exported as they
    are (verify of an earlier snapshot then names what differs). ``config_files(store, snap,
    staged)``: a ``ConfigScan`` of further (path, bytes) to write and summary keys
    (``ops.scheduled.export_config_files``: the broker's delivery cursors, what ``rocketlake
    export`` writes)."""
    refuse_gs_store(target)                 # before anything there (or of the store) is read
    store = storage.Store(store_uri)
    out = storage.Store(target)
    if storage.inside(store, out):
        raise BadInput(f"--to {target} is inside the store {store_uri}: its files would become files of the store "
                       "no manifest names (nothing was written)")
    if out.list_files(""):
        raise BadInput(f"--to {target} is not empty: rocketlake export writes into an empty or absent directory "
                       "only (nothing was written)")
    snap = snap if snap is not None else open_snapshot(store, as_of_batch)
    if snap.batch is None:
        raise ExportError(f"{store_uri} has no committed batch to export")
    if check:
        rowcheck.check_snapshot(snap)
    config = recorded_config(snap.batch)           # the store's own sizes over RocketMQ's defaults
    work = out
    if out.atomic_rename:
        work = storage.Store(os.path.join(os.path.dirname(os.path.abspath(out.root)),
                                          f".{os.path.basename(out.root)}.export-{uuid.uuid4().hex[:8]}"))
    n_bytes = 0
    staged = storefiles.staging_batches(store)
    extra: list[tuple[str, bytes]] = []
    try:
        scan = config_files(store, snap, staged) if config_files is not None else None
        rows = [row for _rel, row in sorted(snap.files.items())]
        with _Prefetch(store, rows, staged) as ahead:
            for i, row in enumerate(rows):
                try:
                    n_bytes += _export_file(store, work, row, config, durable, check, staged, scan, ahead.take(i))
                except FileNotFoundError:
                    raise _missing(store, snap, row) from None
        starts = queue_starts_of(r["path"] for r in snap.of_kind(FileKind.CONSUMEQUEUE))
        text = properties_text(config, out.root if out.local else None, starts).encode()
        work.write_file(PROPERTIES_NAME, [text], len(text), durable=durable)
        extra, extra_summary = scan.files() if scan is not None else (extra, {})
        for rel, data in extra:
            work.write_file(rel, [data], len(data), durable=durable)
        if work is not out:
            if os.path.isdir(out.root):
                os.rmdir(out.root)                 # empty (checked above)
            os.rename(work.root, out.root)
            if durable:
                storage.sync_dirs([os.path.dirname(out.root)])
    except BaseException:
        if work is not out:
            shutil.rmtree(work.root, ignore_errors=True)
        else:
            for rel in list(snap.files) + [PROPERTIES_NAME] + [rel for rel, _ in extra]:
                out.delete(rel)
        raise
    return {"store": store_uri, "target": target, "batch_id": snap.batch["batch_id"],
            "batch_seq": snap.batch["batch_seq"], "files": len(snap.files), "valid_bytes": n_bytes,
            "config_files": [rel for rel, _ in extra], **extra_summary}


def _missing(store: storage.Store, snap: StoreSnapshot, row: ManifestRow) -> Exception:
    """The error for a file of ``snap`` the store no longer has: an expiry committed after ``snap``
    deleted it (``expired.expired_file_error``: BadInput), else the store lost it (CorruptStore)."""
    gone = expired_file_error(store, row["path"], snap.batch)
    return gone if gone is not None else CorruptStore(row["path"], 0, "missing file (the snapshot's manifest row names it)")


class _Prefetch:
    """The bytes of the next small files of an export from an object store, read a few at a time
    on threads: each read is a request or several (tens of milliseconds on S3), and an export of
    many small files read one by one is as slow as its requests. Only files read from their first
    byte (not an index file nor a checkpoint, whose heads are rebuilt) of at most
    ``PREFETCH_BYTES``; at most ``PREFETCH_AHEAD`` of them held in memory; the export writes,
    checks and hands them on in path order as before."""
    THREADS = 8
    AHEAD = 16

    def __init__(self, store: storage.Store, rows: list[ManifestRow], staged: set[Any]):
        self.store, self.rows, self.staged = store, rows, staged
        self.wanted = [i for i, row in enumerate(rows)
                       if not store.local and row["kind"] not in (FileKind.INDEX, FileKind.CHECKPOINT)
                       and int(row["valid_bytes"]) <= PREFETCH_BYTES]
        self.pool: Any = None
        self.pending: dict[int, Any] = {}
        self.next = 0

    def __enter__(self) -> "_Prefetch":
        if self.wanted:
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(self.THREADS, thread_name_prefix="export-read")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def _read(self, row: ManifestRow) -> tuple[str, bytes]:
        rel = storefiles.reading_path(self.store, row, self.staged)
        return rel, self.store.read(rel, 0, int(row["valid_bytes"]))

    def take(self, i: int) -> tuple[str, bytes] | None:
        """(reading path, bytes) of row ``i`` if it is prefetched (a failed read raises here), else None."""
        if self.pool is None:
            return None
        while self.next < len(self.wanted) and len(self.pending) < self.AHEAD:
            j = self.wanted[self.next]
            self.pending[j] = self.pool.submit(self._read, self.rows[j])
            self.next += 1
        got = self.pending.pop(i, None)
        return None if got is None else got.result()


def _export_file(store: storage.Store, out: storage.Store, row: ManifestRow, config: StoreConfig, durable: bool,
                 check: bool, staged: set[Any], scan: ConfigScan | None = None,
                 read: tuple[str, bytes] | None = None) -> int:
    """One file of the snapshot, read as readers read it (``storefiles.reading_path``: through
    its extents, or its staged copy or patch while its batch's publish is unfinished). A file
    ``scan`` wants is read whole, once, and handed to it after it is written. ``read``: the
    file's reading path and valid bytes, read already (``_Prefetch``)."""
    valid = int(row["valid_bytes"])
    detail = row.detail
    rel = storefiles.reading_path(store, row, staged) if read is None else read[0]
    first = _rebuilt_head(store, dict(row, path=rel), detail, config)
    hasher = checksum.BlockHasher()
    paged = row["kind"] == FileKind.INDEX and "head" in detail      # its head is summed by pages (io.headpages)
    if read is not None and not first:
        whole: bytes | None = read[1]
    else:
        whole = store.read(rel, len(first), valid - len(first)) if scan is not None and scan.wants(row) else None

    def chunks() -> Iterator[Any]:
        if first:
            if not paged:
                hasher.update(first)
            yield first
        for pos in range(len(first), valid, _CHUNK):
            data = store.read(rel, pos, min(_CHUNK, valid - pos)) if whole is None else \
                memoryview(whole)[pos - len(first):pos - len(first) + _CHUNK]
            if len(data) != min(_CHUNK, valid - pos) and check:
                raise ExportError(f"{row['path']}: {len(data)} bytes at {pos}, the manifest says {valid} valid bytes")
            hasher.update(data)
            yield data
    out.write_file(row["path"], chunks(), int(row["file_size"]), durable=durable)
    got, digests = hasher.finish()
    if paged:
        got = headpages.file_checksum(headpages.head_sum(first), digests)
    if got != row["checksum"] and check:
        out.delete(row["path"])
        raise ExportError(f"{row['path']}: its bytes do not match the manifest checksum (batch {row['batch_id']}); "
                          f"the file was not exported")
    if whole is not None and scan is not None and scan.wants(row):
        scan.add(row, first + whole if first else whole)
    return valid


def _rebuilt_head(store: storage.Store, row: dict[Any, Any], detail: Mapping[str, Any], config: StoreConfig) -> bytes:
    """The first bytes of the row's file version that a later batch may have changed since: an
    index file's header and slot table, the whole checkpoint file (b"" for other files)."""
    if row["kind"] == FileKind.INDEX:
        return patches.index_head_as_of(store, row, config)[:int(row["valid_bytes"])]
    if row["kind"] == FileKind.CHECKPOINT:
        try:
            data = ckpt.Checkpoint(**{k: int(detail.get(k, 0)) for k in ckpt.Checkpoint().to_dict()}).to_bytes()
        except (KeyError, TypeError, ValueError):
            return b""                             # no timestamps in the row: the file as it is
        return data[:int(row["valid_bytes"])] if checksum.checksum_of_bytes(data) == row["checksum"] else b""
    return b""
