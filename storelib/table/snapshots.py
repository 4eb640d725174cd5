"""One way to open a snapshot: ``open_snapshot`` gives the committed batch a command works on, its
live files and the configuration its files were written with, read once.

Every command opens its snapshot here (ingest's preflight and driver, query, verify, expire,
repair, export, mirror, inspect, the data sources, the UI), and hands the value on instead of
opening it again. The rules that decide which snapshot live here, each once:

* which batch ``--as-of-batch`` names (``BatchRow.matches``: a batch id or a sequence number) and
  which ``--version`` (a checkpoints-table version) names;
* where it comes from: the snapshot cache (``table.snapcache``: the latest batch, a few small
  reads, no deltalake) when it is sound and current and serves the batch asked for, else the
  Delta tables, read once whichever batch is asked for;
* its configuration: the base configuration (``format.config.default_config`` or what the
  command was given) with the file-shaping keys the batch recorded over it
  (``rows.recorded_config``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import NoSuchBatch
from ..format import paths
from ..format.config import StoreConfig
from .rows import BatchRow, FileKind, ManifestRow, recorded_config

if TYPE_CHECKING:    # manifest and storage load pyarrow/deltalake: imported where needed, not on the shell path
    from . import manifest
    from ..io.storage import Store

__all__ = ["StoreSnapshot", "open_snapshot", "no_such_batch"]

_NO_FILES: Mapping[str, ManifestRow] = MappingProxyType({})


@dataclass(frozen=True)
class StoreSnapshot:
    """A committed snapshot as a command reads it: the batch (None: nothing committed), its live
    files, the configuration its files were written with; and, when read from the Delta tables,
    what writers need besides: the table versions their commit is conditional on, every batch up
    to this one, the files a committed expiry removed, paths a batch added twice."""
    batch: BatchRow | None
    files: Mapping[str, ManifestRow] = field(default_factory=lambda: _NO_FILES)   # path -> add row (latest version)
    config: StoreConfig = field(default_factory=StoreConfig)
    source: str = "none"                             # "cache" | "delta" | "none" (no manifest)
    versions: manifest.TableVersions | None = None   # None from the cache
    batches: tuple[BatchRow, ...] = ()               # every batch up to ``batch`` (the cache: it alone)
    removed: Mapping[str, ManifestRow] = field(default_factory=lambda: _NO_FILES)  # path -> remove row of an expiry
    duplicates: tuple[str, ...] = ()
    latest: BatchRow | None = None                   # the store's latest batch when it was read

    @property
    def pinned(self) -> bool:
        """An earlier batch than the store's latest (later batches changed files it lists)."""
        return self.batch is not None and self.latest is not None and self.latest.batch_seq != self.batch.batch_seq

    @property
    def batch_id(self) -> str | None:
        return self.batch.batch_id if self.batch else None

    @property
    def batch_seq(self) -> int:
        return self.batch.batch_seq if self.batch else 0

    @property
    def committed(self) -> bool:
        return self.batch is not None

    def of_kind(self, kind: str) -> list[ManifestRow]:
        """The live files of one kind, by path (= RocketMQ's load order within a directory)."""
        return sorted((r for r in self.files.values() if r.kind == kind), key=lambda r: r.path)

    def topics(self) -> set[str]:
        """The topics that have a live consume-queue file."""
        return {str(r.topic) for r in self.files.values() if r.kind == FileKind.CONSUMEQUEUE}

    def last_detail(self, key: str) -> Any:
        """``detail[key]`` of the last batch whose row has it (an ingest's round-robin positions
        and topic config: an expiry, a repair or an import records none)."""
        for b in reversed(self.batches):
            value = b.detail.get(key)
            if value is not None:
                return value
        return None

    def with_base(self, base: StoreConfig | None) -> StoreSnapshot:
        """The same snapshot with its configuration over another base (a command's limits)."""
        if base is None:
            return self
        return dataclasses.replace(self, config=recorded_config(self.batch, base))


def no_such_batch(what: str, where: str) -> NoSuchBatch:
    """The error for an ``--as-of-batch`` / ``--version`` that names no committed batch."""
    return NoSuchBatch(f"no committed batch {what} in {where}")


def open_snapshot(store: Store, as_of_batch: str | int | None = None, version: int | None = None,
                  base: StoreConfig | None = None, history: bool = False, queue_offsets: bool = True) -> StoreSnapshot:
    """The committed snapshot of ``store`` as of its latest batch, ``as_of_batch`` (a batch id or
    sequence number) or ``version`` (a checkpoints-table version; with ``as_of_batch``, the
    earlier of the two), with its configuration over ``base``.

    ``history``: read the Delta tables even when the cache could serve (a writer needs the
    table versions and every batch); ``queue_offsets`` False: of those batches only the
    snapshot's own and the latest have their ``queue_offsets`` (a writer's read: the column grows
    with the batches, ``manifest.read_tables``). A store without a manifest (a broker's directory) gives
    ``source == "none"``. No committed batch of that name: ``NoSuchBatch``; damaged Delta tables:
    ``CorruptStore``."""
    if version is None and not history:
        from . import snapcache
        cached = snapcache.load(store)
        if cached is not None and (as_of_batch is None or cached.batch.matches(as_of_batch)):
            return StoreSnapshot(cached.batch, MappingProxyType(cached.files), recorded_config(cached.batch, base),
                                 "cache", batches=(cached.batch,), latest=cached.batch)
    if not history and not store.exists(paths.CHECKPOINTS_DIR):   # (no deltalake import for broker stores)
        if as_of_batch is not None or version is not None:
            raise NoSuchBatch(f"{store.uri} has no committed rocketlake batches (no manifest): "
                           f"--{'as-of-batch' if as_of_batch is not None else 'version'} "
                           f"{as_of_batch if as_of_batch is not None else version!r} cannot be served")
        return StoreSnapshot(None, config=base or StoreConfig())
    from . import manifest
    tables = manifest.read_tables(store, queue_offsets)
    # The batch asked for is checked here, after the read: an exception raised while deltalake's
    # table objects are alive aborts the interpreter at exit.
    target = _target(store, tables, as_of_batch, version)
    latest = tables.batches[-1] if tables.batches else None
    # an earlier batch than the last compaction's: the manifest version that batch recorded
    snap = manifest.snapshot_of(manifest.at_batch(store, tables, target), target)
    return StoreSnapshot(snap.batch, MappingProxyType(snap.files), recorded_config(snap.batch, base), "delta",
                         snap.versions, tuple(snap.batches), MappingProxyType(snap.removed), tuple(snap.duplicates),
                         latest)


def _target(store: Store, tables: manifest.Tables, as_of_batch: str | int | None,
            version: int | None) -> str | int | None:
    """The batch (id or seq) the snapshot is to end with; None for the latest."""
    if as_of_batch is not None and not any(b.matches(as_of_batch) for b in tables.batches):
        raise no_such_batch(repr(as_of_batch), store.uri)
    if version is None:
        return as_of_batch
    last = tables.versions.checkpoints
    if last is None or not 0 <= version <= last:       # (before deltalake is asked: its errors say less)
        raise NoSuchBatch(f"no checkpoints table version {version} in {store.uri} (its versions: "
                          f"{'none' if last is None else f'0..{last}'})")
    from . import manifest
    dt = manifest.open_table(store, paths.CHECKPOINTS_DIR, version)
    if dt is None:
        raise NoSuchBatch(f"{store.uri} has no checkpoints table")
    rows = manifest.read_rows(dt)
    dt = None
    if not rows:
        raise NoSuchBatch(f"checkpoints table version {version} holds no batch")
    seq = max(int(r["batch_seq"]) for r in rows)
    if as_of_batch is not None:
        seq = min(seq, next(b.batch_seq for b in tables.batches if b.matches(as_of_batch)))
    return seq
