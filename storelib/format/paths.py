"""Where rocketlake keeps its own files under a store root (docs/FORMAT.md §11.2), the names of a
broker's own directories and files there, and whether a store URI is local (``is_local``).

Every path under ``_rocketlake/`` is named here and nowhere else, so is every directory and file
name RocketMQ gives the parts of a store (``commitlog``, ``consumequeue``, ``index``, ``config``,
``checkpoint``, ``abort``, ``lock``: the format modules' ``DIR`` / ``FILE_NAME`` are these), and
so is the project root (where ``conf/`` lives). A leaf module (stdlib only), so the shell lookup path takes these names without
loading pyarrow or deltalake.
"""
from __future__ import annotations

import os
import re
import stat
from urllib.parse import urlparse

__all__ = ["is_local", "local_path", "local_root", "local_target_problem", "special_kind", "within",
           "PROJECT_ROOT", "CONF_DIR", "LOG4J_CONFIG", "META_DIR", "MANIFEST_DIR", "CHECKPOINTS_DIR", "STAGING_DIR", "STAGED_DELETES",
           "TMP_DIR", "TMP_DROP_PREFIX", "TMP_REPAIR_PREFIX", "OBJECTS_DIR", "INCOMING_DIR", "LEASE_PATH", "SNAPSHOT_CACHE", "SNAPSHOT_CACHE_DELTA", "SWEEP_STATE", "BROKER_TOPICS", "delta_commit",
           "COMMITLOG_DIR", "CONSUMEQUEUE_DIR", "INDEX_DIR", "CONFIG_DIR", "CHECKPOINT_FILE", "ABORT_FILE",
           "LOCK_FILE", "BROKER_DIRS", "BROKER_DELAY_OFFSET", "BROKER_TIMER_CHECK"]

# The checkout or installed tree that holds storelib/ and conf/.
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONF_DIR = os.path.join(PROJECT_ROOT, "conf")
LOG4J_CONFIG = os.path.join(CONF_DIR, "log4j2.properties")     # Spark's quiet logging in rocketlake's jobs

META_DIR = "_rocketlake"
MANIFEST_DIR = f"{META_DIR}/manifest"
CHECKPOINTS_DIR = f"{META_DIR}/checkpoints"
STAGING_DIR = f"{META_DIR}/staging"
STAGED_DELETES = "deletes.json"            # in an expiry attempt's staging dir: what its publish deletes
TMP_DIR = f"{META_DIR}/tmp"                 # scratch Delta tables, staging dirs being removed
TMP_DROP_PREFIX = "drop-"                   # TMP_DIR/drop-*: a staging directory renamed there to be removed
TMP_REPAIR_PREFIX = "repair-"               # TMP_DIR/repair-*: a broker directory repair's new files
OBJECTS_DIR = f"{META_DIR}/objects"         # object stores: the immutable extents (storelib.io.fragments)
INCOMING_DIR = f"{META_DIR}/incoming"      # rows handed to a commit (storelib.ingest.sink)
LEASE_PATH = f"{META_DIR}/writer.lock"      # the writer lease (storelib.table.writerlease)
SNAPSHOT_CACHE = f"{META_DIR}/snapshot-cache.json"    # storelib.table.snapcache: its base
SNAPSHOT_CACHE_DELTA = f"{META_DIR}/snapshot-cache.delta.json"    # and what changed since the base
SWEEP_STATE = f"{META_DIR}/sweep-state.json"    # object stores: what the last sweep read and kept (storelib.table.sweepstate)
# A broker's storePathRootDir, as RocketMQ names its parts (StorePathConfigHelper).
COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CONFIG_DIR = "config"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"                        # present while a broker runs (or after it crashed)
LOCK_FILE = "lock"                          # a running broker holds its file lock
BROKER_DIRS = (COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR)
# A broker keeps its topic table here (read by an import: storelib.ops.adopt).
BROKER_TOPICS = f"{CONFIG_DIR}/topics.json"
# Where a broker's delivery of scheduled messages got to (written by an export: storelib.ops.scheduled):
# StorePathConfigHelper.getDelayOffsetStorePath, BrokerPathConfigHelper.getTimerCheckPath.
BROKER_DELAY_OFFSET = f"{CONFIG_DIR}/delayOffset.json"
BROKER_TIMER_CHECK = f"{CONFIG_DIR}/timercheck"


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


def is_local(uri: str) -> bool:
    """The one test of locality: a path or a ``file://`` URI is local; ``s3://``, ``gs://``,
    ``hdfs://`` and any other ``scheme://`` are not."""
    head, sep, _rest = uri.partition("://")
    return not sep or not _SCHEME.fullmatch(head) or head.lower() == "file"


def local_path(uri: str) -> str:
    """The file system path of a local ``uri`` (a ``file://`` URI's path)."""
    return urlparse(uri).path if uri.lower().startswith("file://") else uri


def local_root(uri: str) -> str | None:
    """The file system path of ``uri`` if it is local (``is_local``), else None."""
    return local_path(uri) if is_local(uri) else None


def delta_commit(table: str, version: int) -> str:
    """Store-relative path of a Delta table's commit file of ``version``."""
    return f"{table}/_delta_log/{version:020d}.json"


# What a store path must never be on a local file system: reading one blocks or reads another
# process's or a device's bytes, writing one writes there (the store's bytes are never there).
_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def local_target_problem(real_root: str, path: str) -> str | None:
    """Why the local path ``path`` is no place of the store whose root's real path is
    ``real_root`` (None if it is): a symbolic link along it resolving outside that root, or a
    FIFO, device or socket where it ends (a read of a FIFO would block for ever). The one rule
    ``storage.Store.path`` and ``localstore.LocalStore.path`` apply to every local store path."""
    real = os.path.realpath(path)
    if not _under(real_root, real):
        return (f"resolves to {real}, outside the store root {real_root} (a symbolic link pointing out of "
                "the store)")
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return None                     # nothing there (yet): what is made there is made in the store
    what = special_kind(mode)
    if what:
        return (f"is {what} ({real}), not a file or directory: its bytes are not the store's (a read "
                "could block for ever)")
    return None


def special_kind(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is if it is a FIFO, a device or a socket ("a FIFO
    (named pipe)", ...): no file whose bytes a store or a broker's directory holds. None otherwise."""
    return next((what for test, what in _SPECIAL if test(mode)), None)


def within(root: str, path: str) -> bool:
    """Whether the local ``path`` is ``root`` or lies under it, however either is spelled
    (relative, ``..``, through symbolic links): their real paths compared."""
    return _under(os.path.realpath(root), os.path.realpath(path))


def _under(root: str, path: str) -> bool:
    """Whether the real path ``path`` is the real path ``root`` or lies under it."""
    return path == root or path.startswith(root.rstrip("/") + "/")
