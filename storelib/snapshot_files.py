"""Which files, and how much of each, a reader may see: one committed batch of a store.

``open_files(store, as_of_batch)`` returns the :class:`storelib.query.StoreFiles` of a snapshot
(FORMAT of the manifest: ``storelib.manifest``):

* rocketlake stores (a ``_rocketlake`` manifest): the live files of the chosen committed batch
  (latest by default), commitlog segments limited to their ``valid_bytes``, consume-queue files
  to ``valid_bytes // 20`` units, index files to the header the batch committed (its
  ``index_count`` is the limit; later entries are skipped but their chain is still followed).
  Files of a batch in flight are never listed: its manifest rows have no checkpoint row yet.
  A committed batch whose publish was interrupted still has ``_rocketlake/staging/<batch_id>/``:
  its files are read from their ``staged_path`` where that still exists (the final file may be
  missing or an older, shorter version of the same name).
* stores without a manifest (a RocketMQ broker's directory): ``StoreFiles.scan``, a broker's view
  after a normal restart. The file-shaping configuration is checked against the file sizes found
  and inferred from them where it does not match (``infer_config``).

``SnapshotInfo`` carries what pruning needs besides the files: per-segment min/max store time
(manifest only) and the batch row.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field

from . import manifest
from .config import INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, INDEX_SLOT_SIZE, CQ_UNIT_SIZE, StoreConfig
from .storage import Store

_NAME20 = re.compile(r"^\d{20}$")

# Keys a checkpoint row's "config" carries (file shaping) that StoreConfig understands.
_CONFIG_FIELDS = {f.name for f in dataclasses.fields(StoreConfig)} - {"extra"}


class StoreNotFound(FileNotFoundError):
    """The path holds neither a rocketlake manifest nor RocketMQ store directories."""


@dataclass
class SnapshotInfo:
    batch: dict | None = None                      # checkpoint row (None: no manifest)
    seg_ts: dict = field(default_factory=dict)     # segment base offset -> (min_ts, max_ts) or absent
    source: str = "scan"                           # "manifest" | "scan"

    @property
    def batch_id(self):
        return self.batch["batch_id"] if self.batch else None

    @property
    def batch_seq(self):
        return self.batch["batch_seq"] if self.batch else None


def config_of_batch(batch: dict, base: StoreConfig | None = None) -> StoreConfig:
    """``base`` (query limits, broker defaults) with the store's file-shaping keys of ``batch``."""
    base = base or StoreConfig()
    stored = json.loads(batch["config"]) if batch and batch.get("config") else {}
    return dataclasses.replace(base, **{k: v for k, v in stored.items() if k in _CONFIG_FIELDS})


def infer_config(store: Store, config: StoreConfig | None = None) -> StoreConfig:
    """Fit the file-shaping sizes of ``config`` to the files of a store without a manifest.

    Commitlog and consume-queue file sizes are read off the files. Index files fix only
    ``40 + 4*slots + 20*entries``; if that disagrees with ``config``, RocketMQ's default ratio
    ``maxIndexNum = 4 * maxHashSlotNum`` is assumed (pass a --config otherwise).
    """
    config = config or StoreConfig()
    changes = {}
    cl = [r for r in store.list_files("commitlog", recursive=False) if _NAME20.match(r.rsplit("/", 1)[-1])]
    if cl:
        sizes = {store.size(r) for r in cl[:-1]} if len(cl) > 1 else {store.size(cl[0])}
        size = max(s for s in sizes if s)
        if size and size != config.mappedFileSizeCommitLog:
            changes["mappedFileSizeCommitLog"] = size
    for topic in store.list_dirs("consumequeue")[:4]:
        done = False
        for q in store.list_dirs(f"consumequeue/{topic}"):
            files = [r for r in store.list_files(f"consumequeue/{topic}/{q}", recursive=False)
                     if _NAME20.match(r.rsplit("/", 1)[-1])]
            if files:
                size = store.size(files[0])
                if size and size % CQ_UNIT_SIZE == 0 and size != config.cq_file_size:
                    changes["mappedFileSizeConsumeQueue"] = size
                done = True
                break
        if done:
            break
    idx = store.list_files("index", recursive=False)
    if idx:
        size = store.size(idx[0])
        cfg = dataclasses.replace(config, **changes)
        if size and size != cfg.index_file_size:
            slots, rem = divmod(size - INDEX_HEADER_SIZE, INDEX_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE)
            if rem or slots < 1:
                raise ValueError(f"index file {idx[0]} has {size} bytes, which fits neither the given "
                                 f"maxHashSlotNum/maxIndexNum nor the 1:4 default ratio; pass --config")
            changes.update(maxHashSlotNum=slots, maxIndexNum=4 * slots)
    return dataclasses.replace(config, **changes) if changes else config


def _staging_batches(store: Store) -> set:
    try:
        return set(store.list_dirs(manifest.STAGING_DIR))
    except OSError:
        return set()


def files_from_snapshot(store: Store, snap: manifest.Snapshot, config: StoreConfig | None = None):
    """(StoreFiles, SnapshotInfo) of a loaded manifest snapshot."""
    from .query import (CommitLogSegment, ConsumeQueueFile, IndexFileRef, IndexHeader, StoreFiles)
    cfg = config_of_batch(snap.batch, config)
    staged = _staging_batches(store)

    def where(row) -> str:
        """The final path, or the staged copy while the batch's publish is unfinished.

        Publish moves staged -> final, so a staged file that still exists was not (fully)
        published and the final name may be missing or hold an older, shorter version. Either
        copy is complete when both exist (copy-then-delete on object stores). The publish may
        go on while the reader reads: ``store.moved`` makes reads of a staged file that is gone
        by then read the final one."""
        sp = row.get("staged_path")
        if sp and row["batch_id"] in staged:
            size = store.size(sp)
            if size is not None and size >= (row.get("valid_bytes") or 0):
                store.moved[sp] = row["path"]
                return sp
        return row["path"]

    segs, seg_ts = [], {}
    for r in snap.of_kind("commitlog"):
        segs.append(CommitLogSegment(where(r), int(r["base_offset"]), int(r["valid_bytes"])))
        seg_ts[int(r["base_offset"])] = (r.get("min_store_ts"), r.get("max_store_ts"))
    cqs: dict = {}
    for r in snap.of_kind("consumequeue"):
        cqs.setdefault((r["topic"], int(r["queue_id"])), []).append(
            ConsumeQueueFile(where(r), int(r["base_offset"]), int(r["valid_bytes"]) // CQ_UNIT_SIZE))
    index = []
    for r in snap.of_kind("index"):          # sorted by path = by name = RocketMQ's load order
        h = json.loads(r["detail"])["header"]
        hdr = IndexHeader(h["begin_timestamp"], h["end_timestamp"], h["begin_phy_offset"],
                          h["end_phy_offset"], h["hash_slot_count"], h["index_count"])
        index.append(IndexFileRef(where(r), hdr.index_count, hdr))
    files = StoreFiles(config=cfg, commitlog=segs, consume_queues=cqs, index=index)
    return files, SnapshotInfo(batch=snap.batch, seg_ts=seg_ts, source="manifest")


def open_files(store: Store | str, as_of_batch=None, config: StoreConfig | None = None):
    """(StoreFiles, SnapshotInfo) of the latest committed batch (or ``as_of_batch``)."""
    from .query import StoreFiles
    store = Store(store) if isinstance(store, str) else store
    snap = None
    if store.exists(manifest.CHECKPOINTS_DIR):            # (no deltalake import for broker stores)
        snap = manifest.load_snapshot(store)
        if as_of_batch is not None:
            # Checked here, not by load_snapshot: an exception raised while its deltalake table
            # objects are alive aborts the interpreter at exit ("terminate called without an
            # active exception").
            if not any(b["batch_id"] == str(as_of_batch) or str(b["batch_seq"]) == str(as_of_batch)
                       for b in snap.batches):
                raise KeyError(f"no committed batch {as_of_batch!r} in {store.uri}")
            snap = manifest.load_snapshot(store, as_of_batch)
    if snap is not None and snap.batch is not None:
        return files_from_snapshot(store, snap, config)
    if as_of_batch is not None:
        raise KeyError(f"{store.uri} has no committed rocketlake batches (no manifest): "
                       f"--as-of-batch {as_of_batch!r} cannot be served")
    if not (store.exists("commitlog") or store.exists("consumequeue") or store.exists("index")):
        raise StoreNotFound(f"{store.uri}: no RocketMQ store here (no commitlog/, consumequeue/, index/ "
                            f"and no committed rocketlake manifest)")
    cfg = infer_config(store, config)
    return StoreFiles.scan(store, cfg), SnapshotInfo(source="scan")
