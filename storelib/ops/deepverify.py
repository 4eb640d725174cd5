"""``verify --deep`` of a directory without a manifest (a broker's, an export): the files' own
checks (``verify.driver``) and what the CommitLog implies, found by the derivation ``repair``
uses (``ops.repair.plan_repair``), so verify finds at least every queue and index file that
repair's dry run would rewrite: missing, truncated, differing, or an index file past the ones the
CommitLog implies.

A rocketlake store's files are checked against their manifest rows (sha256 of the valid bytes),
which is stronger: nothing is added there. The checkpoint file is left to verify's own check.
"""
from __future__ import annotations

import time

from ..errors import RepairError
from ..format.config import StoreConfig
from ..io import storage
from ..verify import driver as verify
from ..verify.access import problem

__all__ = ["verify_store", "derived_problems"]

_STATES = ("missing", "truncated", "differing", "extra")


def derived_problems(store_uri: str, config: StoreConfig, spark=None, threads: int | None = None) -> list:
    """Problem lines for every queue or index file of a directory without a manifest that differs
    from what its CommitLog implies (repair's dry run)."""
    from .repair import plan_repair
    try:
        p = plan_repair(storage.Store(store_uri), config, None, spark, threads)
    except RepairError:                      # no segments: verify says what is missing
        return []
    return [problem(f["path"], 0, f"{f['state']} {f['kind']} file: {f['detail']} (as the CommitLog implies; "
                                  f"`rocketlake repair` rewrites it)")
            for f in p["findings"] if f["kind"] in ("consumequeue", "index") and f["state"] in _STATES]


def verify_store(store_uri: str, config: StoreConfig | None = None, deep: bool = False, spark=None,
                 threads: int | None = None, **kw) -> verify.Report:
    """``verify.driver.verify_store``; with ``deep`` on a directory without a manifest, also
    ``derived_problems``."""
    t0 = time.time()
    if config is None:                       # as the commands resolve it (an export's properties file)
        from .storeinfo import resolve_config
        config = resolve_config(store_uri, None).config
    rep = verify.verify_store(store_uri, config, deep=deep, spark=spark, threads=threads, **kw)
    if deep and not rep.manifest:
        rep.found = sorted(set(rep.found) | set(derived_problems(store_uri, config, spark, threads)))
        rep.seconds = time.time() - t0
    return rep
