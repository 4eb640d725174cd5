"""What a path holds (a rocketlake store, a broker's directory, nothing) and the configuration to use.

Every command asks two things before it does any work, and neither needs Spark:

* ``check_store(uri, writing)``: a local path that is not a store is refused with one line naming
  it (``StoreNotFound``, exit 2): a missing path or a plain file for reading, a file or a non-empty
  directory holding neither ``_rocketlake/`` nor RocketMQ's directories for writing (unless
  ``allow_nonempty``). Object-store URIs are not probed here (listing a bucket costs a request per
  prefix; their readers say what is missing).
* ``resolve_config(uri, given_path)``: the file-shaping sizes a store was written with are the
  store's, recorded with its batches (rocketlake stores: read from the snapshot the command works
  on, ``snapshots.open_snapshot``, which ``ResolvedConfig.snapshot`` hands on so that the command
  opens it once) or in the ``rocketlake.properties``
  an export writes beside the files; a ``--config`` that disagrees is a ``ConfigError`` naming
  each key with the store's value and the given one. A broker's directory without either: the
  given file, else the sizes read off the files (``storefiles.infer_config``), and ``note`` says
  which sizes were found.
"""
from __future__ import annotations

import dataclasses
import os

from typing import Any, Mapping

from ..errors import ConfigError, StoreError, StoreNotFound
from ..format import paths
from ..format.config import FILE_SHAPING_KEYS, StoreConfig, default_config, load_config
from .rows import overlay
from .snapshots import StoreSnapshot, open_snapshot

__all__ = ["EXPORT_PROPERTIES", "StoreKind", "store_kind", "check_store", "resolve_config",
           "ResolvedConfig", "config_mismatch", "exported_config", "broker_config"]

EXPORT_PROPERTIES = "rocketlake.properties"


class StoreKind:
    MISSING = "missing"           # nothing at the path
    FILE = "file"                 # a plain file
    EMPTY = "empty"               # an empty directory (a new store may be made there)
    ROCKETLAKE = "rocketlake"     # has _rocketlake/
    BROKER = "broker"             # RocketMQ directories, no manifest
    OTHER = "other"               # a directory of something else
    REMOTE = "remote"             # an object-store URI (not probed)


def store_kind(uri: str) -> str:
    root = paths.local_root(uri)
    if root is None:
        return StoreKind.REMOTE
    if not os.path.lexists(root):
        return StoreKind.MISSING
    if not os.path.isdir(root):
        return StoreKind.FILE
    names = set(os.listdir(root))
    if paths.META_DIR in names:
        return StoreKind.ROCKETLAKE
    if names & set(paths.BROKER_DIRS):
        return StoreKind.BROKER
    # ``lock`` alone: what a writer that made it and committed nothing left (io.brokerlock: it stays),
    # or a broker's that made nothing else: no store yet, nothing of anything else either
    return StoreKind.EMPTY if not names - {paths.LOCK_FILE} else StoreKind.OTHER


def check_store(uri: str, writing: bool = False, allow_nonempty: bool = False) -> str:
    """The kind of store at ``uri``; ``StoreNotFound`` (one line, exit 2) if it is not one. A writer's
    store on ``gs://`` is refused before anything there is read, before GCS is even asked."""
    if writing:
        from ..io.condput import refuse_gs_store
        refuse_gs_store(uri)
    kind = store_kind(uri)
    if kind == StoreKind.FILE:
        raise StoreNotFound(f"{uri} is a file, not a store directory")
    if writing:
        if kind == StoreKind.OTHER and not allow_nonempty:
            raise StoreNotFound(f"{uri} is a non-empty directory that is not a store (no {paths.META_DIR}/, no "
                                f"commitlog/); nothing was written: give an empty or new directory, or pass "
                                f"--allow-nonempty to make a store beside its files")
        return kind
    if kind == StoreKind.MISSING:
        raise StoreNotFound(f"{uri}: no such store (the path does not exist)")
    if kind in (StoreKind.EMPTY, StoreKind.OTHER):
        raise StoreNotFound(f"{uri} is not a store (no {paths.META_DIR}/ manifest and no commitlog/, "
                            f"consumequeue/ or index/ directory)")
    return kind


@dataclasses.dataclass(frozen=True)
class ResolvedConfig:
    config: StoreConfig
    source: str                   # "store" (recorded), "export" (rocketlake.properties), "given", "files", "default"
    note: str | None = None       # what a broker directory's files said, for stderr
    snapshot: StoreSnapshot | None = None   # the snapshot the store's config came from (rocketlake stores)


def config_mismatch(recorded: Mapping[str, Any], given: StoreConfig, where: str) -> None:
    """ConfigError naming each file-shaping key where ``given`` differs from ``recorded``."""
    diff = [(k, recorded[k], getattr(given, k)) for k in FILE_SHAPING_KEYS
            if k in recorded and recorded[k] != getattr(given, k)]
    if diff:
        raise ConfigError(f"the given configuration differs from the one {where}: "
                          + ", ".join(f"{k} store={a!r} given={b!r}" for k, a, b in diff)
                          + " (leave out --config: the store's own is used)")


def resolve_config(uri: str, given_path: str | None, kind: str | None = None, as_of_batch: str | int | None = None,
                   infer: bool = True, version: int | None = None, history: bool = False) -> ResolvedConfig:
    """The configuration a command uses on the store at ``uri`` (the module docstring), with the
    snapshot (``as_of_batch`` / ``version``, else the latest) it read it from (``history``: from the
    Delta tables, with every batch, ``snapshots.open_snapshot``)."""
    given = load_config(given_path) if given_path else None
    base = given or default_config()
    kind = kind or store_kind(uri)
    snap = None
    if kind in (StoreKind.ROCKETLAKE, StoreKind.REMOTE):
        snap = _snapshot(uri, as_of_batch, version, base, history)
        if snap is not None and snap.batch is not None:
            if given is not None:
                config_mismatch(snap.batch.config, given, "this store was written with")
            return ResolvedConfig(snap.config, "store", snapshot=snap)
    return dataclasses.replace(_unrecorded(uri, given, base, kind, infer), snapshot=snap)


def _unrecorded(uri: str, given: StoreConfig | None, base: StoreConfig, kind: str, infer: bool) -> ResolvedConfig:
    """The configuration of a store without a committed batch: an export's properties file,
    the given one, the sizes a broker's files have, the default."""
    exported = exported_config(uri, base, given)
    if exported is not None:
        return ResolvedConfig(exported, "export")
    if given is not None:
        return ResolvedConfig(given, "given")
    if kind == StoreKind.BROKER and infer:
        from ..io.storage import Store
        from .storefiles import infer_config
        try:
            cfg = infer_config(Store(uri), base)
        except ValueError as e:
            raise ConfigError(f"{uri}: cannot tell the file sizes from the files ({e}); pass --config "
                              f"with the broker's properties") from None
        found = ", ".join(f"{k}={v}" for k, v in cfg.file_shaping().items()
                          if k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum",
                                   "maxIndexNum"))
        return ResolvedConfig(cfg, "files", f"{uri} has no recorded configuration; sizes read off its files: "
                                            f"{found} (pass --config to use others)")
    return ResolvedConfig(base, "default")


def exported_config(uri: str, base: StoreConfig, given: StoreConfig | None = None) -> StoreConfig | None:
    """``base`` with the sizes of the ``rocketlake.properties`` an export wrote beside its files at
    ``uri`` (None without one): checked against the files, and a ``given`` --config that disagrees
    is a ConfigError naming each key."""
    root = paths.local_root(uri)
    exported = os.path.join(root, EXPORT_PROPERTIES) if root is not None else None
    if not (exported and os.path.isfile(exported)):
        return None
    mine = load_config(exported)
    _check_exported(uri, exported, mine)
    if given is not None:
        config_mismatch(mine.file_shaping(), given, f"recorded in {exported}")
    return overlay(base, mine.file_shaping())


def broker_config(store: Any, base: StoreConfig | None = None, given: StoreConfig | None = None) -> ResolvedConfig:
    """The file-shaping sizes of a directory without a manifest (a broker's, an export's) for a
    command that works on its files (repair, the mirror's first cycle): the ``rocketlake.properties``
    an export wrote beside them (``exported_config``; ``given``, a --config, must agree with it),
    never guessed off the files while it is there (an index file's size fits more than one
    slots/entries pair); else ``base`` fitted to the files' sizes (``storefiles.infer_config``).
    ``source``: "export" or "files"."""
    exported = exported_config(store.uri, base or StoreConfig(), given)
    if exported is not None:
        return ResolvedConfig(exported, "export")
    from .storefiles import infer_config
    return ResolvedConfig(infer_config(store, base), "files")


def _check_exported(uri: str, exported: str, mine: StoreConfig) -> None:
    """The sizes an exported directory's properties file gives must be the ones its files have
    (a hand edit would make every file look damaged): ConfigError naming the file otherwise."""
    from ..io.storage import Store
    from .storefiles import infer_config
    try:
        found = infer_config(Store(uri), mine).file_shaping()
    except ValueError:                   # index files fitting no ratio: verify names them
        return
    diff = [f"{k}={v} (the files have {found[k]})" for k, v in mine.file_shaping().items() if found[k] != v]
    if diff:
        raise ConfigError(f"{exported} says {', '.join(diff)}: restore the values export wrote, or remove "
                          f"the file (the sizes are then read off the files)")


def _snapshot(uri: str, as_of_batch: str | int | None, version: int | None, base: StoreConfig,
              history: bool) -> StoreSnapshot | None:
    """The store's snapshot (None: its Delta tables are damaged, which the command meets itself and
    says so in its way); ``NoSuchBatch`` for a batch it does not have."""
    try:
        from .storefiles import as_store
        return open_snapshot(as_store(uri), as_of_batch, version, base, history)
    except StoreError:
        return None
