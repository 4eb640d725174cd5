"""What an ingest or import checks before any JVM starts, and what an interrupted one says.

Everything here runs in the driver's Python without Spark: the store path (``storeinfo.check_store``),
the configuration (the store's own, or a ``--config`` that agrees with it), topics.json, that a
local input exists, and whether the input is small enough to run in this process
(``runtime.localrun``) instead of starting Spark.
"""
from __future__ import annotations

import os

from ..errors import ConfigError, InputError
from ..format import paths

__all__ = ["LOCAL_INPUT_BYTES", "check_ingest", "check_import", "ingest_state", "small_local_input", "batch_seq"]

# Inputs up to this size run in this process under ``--local auto``: encoding a few MB takes well
# under the seconds a JVM needs to start.
LOCAL_INPUT_BYTES = 32 << 20


def batch_seq(store_uri: str) -> int:
    """The version of the store's checkpoints table (-1: none, or not a local store): a commit
    moves it. Read from the names in its Delta log, without deltalake (an interrupt may have broken
    a deltalake call); the log's path by the store's own rule (``LocalStore.path``: a link out of
    the store is ``StorePathError``)."""
    from ..io.localstore import open_local
    store = open_local(store_uri)
    if store is None:
        return -1
    try:
        names = os.listdir(store.path(f"{paths.CHECKPOINTS_DIR}/_delta_log"))
    except OSError:
        return -1
    versions = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
    return max(versions, default=-1)


def check_ingest(args):
    """(config, batch seq before this run) after every check that needs no Spark."""
    from . import common as cli
    # one snapshot for every check; with --topics, every batch (the topic config is the last one
    # a batch recorded)
    res = cli.store_snapshot(args, writing=True, infer=False, history=bool(args.topics))
    cfg, snap = res.config, res.snapshot
    if paths.is_local(args.store) and os.path.isdir(os.path.join(paths.local_path(args.store), paths.CHECKPOINTS_DIR)):
        from ..table import rowcheck
        from ..table.snapshots import open_snapshot
        from ..table.storefiles import as_store
        if snap is None:                        # damaged Delta tables: CorruptStore, one line
            snap = open_snapshot(as_store(args.store), history=bool(args.topics))
        rowcheck.check_snapshot(snap)           # before any JVM: never appends to rows verify rejects
    if args.topics:
        from ..ingest.topics import Topics
        given = Topics.load(args.topics, cfg.defaultTopicQueueNums)
        if snap is not None and paths.is_local(args.store):
            # a --topics the store's queue counts disagree with: exit 2 before any JVM starts
            given.agree(snap.last_detail("topics"), bool(getattr(args, "update_topics", False)))
    if args.format in (None, "jsonl", "parquet", "delta") and paths.is_local(args.input) \
            and not os.path.exists(args.input):
        raise InputError([f"--input {args.input}: no such file or directory"])
    from ..ingest.inputs import check_format, detect_format
    if args.format is None:
        args.format, why = detect_format(args.input)
        from ..runtime.progress import Progress
        Progress(args.quiet).say(f"input format: {args.format} ({why}; --format to choose)")
    else:
        check_format(args.input, args.format)
    return cfg, batch_seq(args.store)


def check_import(args):
    """The configuration of a ``--from-store`` import: ``--config``, else the source's file sizes."""
    from . import common as cli
    from ..table import storeinfo
    import argparse
    src = argparse.Namespace(store=args.from_store, config=args.config, as_of_batch=None)
    from ..io import storage
    from ..ops.adopt import in_place
    kind = storeinfo.check_store(args.from_store)
    same = in_place(storage.Store(args.from_store), storage.Store(args.store))     # as the import judges it
    if kind == storeinfo.StoreKind.ROCKETLAKE and not same:
        raise ConfigError(f"{args.from_store} is a rocketlake store, not a broker's directory: export it "
                          f"(rocketlake export) or ingest into it")
    if not same:
        storeinfo.check_store(args.store, writing=True, allow_nonempty=args.allow_nonempty)
    return cli.store_config(src, infer=True, say=True)


def small_local_input(args) -> bool:
    """A local jsonl/Parquet input of at most LOCAL_INPUT_BYTES into a local store."""
    if args.format not in ("jsonl", "parquet") or not paths.is_local(args.input) or not paths.is_local(args.store):
        return False
    total = 0
    if os.path.isfile(args.input):
        return os.path.getsize(args.input) <= LOCAL_INPUT_BYTES
    for dirpath, _dirs, files in os.walk(args.input):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
        if total > LOCAL_INPUT_BYTES:
            return False
    return True


def ingest_state(store_uri: str, before: int) -> str:
    """What an interrupted ingest left: committed or not, and what to run."""
    if not paths.is_local(store_uri):
        return ("the batch is committed only if `rocketlake inspect --store STORE checkpoints` lists it; "
                "rerunning the same command finishes it either way").replace("STORE", store_uri)
    if batch_seq(store_uri) > before:
        return "the batch was committed before the interrupt; nothing to rerun"
    return ("nothing was committed (the store is as it was); its partial files are cleared by the next run: "
            "rerun the same command")
