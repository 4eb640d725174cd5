"""``verify --deep`` of a directory without a manifest (a broker's, an export): the files' own
checks (``verify.driver``) and what the CommitLog implies, found by the derivation ``repair``
uses (``ops.repair.plan_repair``), so verify finds at least every queue and index file that
repair's dry run would rewrite: missing, truncated, differing, or an index file past the ones the
CommitLog implies.

A rocketlake store's files are checked against their manifest rows (sha256 of the valid bytes),
which is stronger: nothing is added there. The checkpoint file is left to verify's own check.
In an export (``rocketlake.properties`` beside the files) a queue may start after offset 0 while
the CommitLog still holds its older records: a topic's own retention removed its oldest queue
files (``ops.topic_retention``). The export records where each queue's first file starts
(``table.export.QUEUE_STARTS_KEY``), so files before that are not missing there while a lost first
file is; in an export written before that was recorded, a queue's first file on disk is taken as
its start.
"""
from __future__ import annotations

import time

from ..errors import RepairError
from ..format import consumequeue
from ..format.config import StoreConfig
from ..io import storage
from ..table.export import PROPERTIES_NAME, recorded_queue_starts
from ..verify import driver as verify
from ..verify.access import problem
from ..table.rows import FileKind

__all__ = ["verify_store", "derived_problems"]

_STATES = ("missing", "truncated", "differing", "extra", "unrestorable")


def derived_problems(store_uri: str, config: StoreConfig, spark=None, threads: int | None = None) -> list:
    """Problem lines for every queue or index file of a directory without a manifest that differs
    from what its CommitLog implies (repair's dry run)."""
    from .repair import plan_repair
    try:
        p = plan_repair(storage.Store(store_uri), config, None, spark, threads)
    except RepairError:                      # no segments: verify says what is missing
        return []
    store = storage.Store(store_uri)
    # (an export that recorded its queue starts: repair's plan leaves the files before them out;
    # one written before they were recorded: a queue's first file on disk is taken as its start)
    old_export = store.exists(PROPERTIES_NAME) and recorded_queue_starts(store) is None
    first = _first_queue_files(store) if old_export else {}
    return [problem(f["path"], 0, f"{f['state']} {f['kind']} file: {f['detail']}" + (
                "" if f["state"] == "unrestorable" else " (as the CommitLog implies; `rocketlake repair` rewrites it)"))
            for f in p["findings"] if f["kind"] in (FileKind.CONSUMEQUEUE, FileKind.INDEX) and f["state"] in _STATES
            and not (f["state"] == "missing" and _below_first(f["path"], first))]


def _first_queue_files(store: storage.Store) -> dict:
    """(topic dir, queue dir) -> the base offset of the queue's first file on disk."""
    out: dict = {}
    for rel in store.list_files(consumequeue.DIR):
        parts = rel.split("/")
        if len(parts) == 4 and parts[3].isdigit():
            key = (parts[1], parts[2])
            out[key] = min(out.get(key, int(parts[3])), int(parts[3]))
    return out


def _below_first(rel: str, first: dict) -> bool:
    parts = rel.split("/")
    return len(parts) == 4 and parts[3].isdigit() and int(parts[3]) < first.get((parts[1], parts[2]), -1)


def verify_store(store_uri: str, config: StoreConfig | None = None, deep: bool = False, spark=None,
                 threads: int | None = None, **kw) -> verify.Report:
    """``verify.driver.verify_store``; with ``deep`` on a directory without a manifest, also
    ``derived_problems``."""
    t0 = time.time()
    if config is None:                       # as the commands resolve it (an export's properties file)
        from ..table.storeinfo import resolve_config
        config = resolve_config(store_uri, None).config
    rep = verify.verify_store(store_uri, config, deep=deep, spark=spark, threads=threads, **kw)
    if deep and not rep.manifest:
        rep.found = sorted(set(rep.found) | set(derived_problems(store_uri, config, spark, threads)))
        rep.seconds = time.time() - t0
    return rep
