"""Small stores for the repair tests, built in this process without Spark (storelib.runtime.localrun):
small-roll's messages (RocketMQ's own store of them is the golden set) cut into batches and
ingested one batch after the other, and the adopted broker directory of small-roll itself.

``parts(base, cuts)``: the message files (``p0.jsonl``, ...) and ``small.properties`` in ``base``;
``ingest(store, base, part, batch_id)``; ``adopted(golden_store, out)``: small-roll adopted in place;
``files_state(store)``: every store file outside ``_rocketlake/`` with its sha256 (what a broker loads).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil

from conftest import golden_set
from support.opshelp import SMALL, small_config
from storelib.format import paths
from storelib.format.config import load_config


def parts(base, cuts: tuple, lines: list | None = None) -> str:
    """small-roll's messages cut at ``cuts`` into ``p<k>.jsonl`` (``lines``: other messages) and the
    small sizes as ``small.properties``, in ``base``; returns ``base``."""
    base = str(base)
    lines = lines if lines is not None else open(os.path.join(golden_set("small-roll"), "messages.jsonl")).readlines()
    bounds = [0, *cuts, len(lines)]
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        with open(os.path.join(base, f"p{k}.jsonl"), "w") as fh:
            fh.write("".join(lines[a:b]))
    with open(os.path.join(base, "small.properties"), "w") as fh:
        fh.write("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    return base


def ingest(store: str, base: str, part: str, batch_id: str, durable: bool = True) -> dict:
    """One batch of ``base/<part>.jsonl`` in this process; ``durable=False`` skips the fsyncs."""
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    cfg = load_config(os.path.join(str(base), "small.properties"))
    if not durable:
        cfg = dataclasses.replace(cfg, flushDiskType="ASYNC_FLUSH")
    return run_ingest(LocalSession(), store, os.path.join(str(base), f"{part}.jsonl"), "jsonl", cfg,
                      batch_id=batch_id, quiet=True)


def adopted(golden_store: str, out: str) -> str:
    """small-roll (restored) adopted in place into ``out`` (its ``lock`` and abort files left out)."""
    from storelib.ops import adopt
    shutil.copytree(golden_store, out)
    for junk in ("abort", "abort.bak", "lock"):
        if os.path.exists(os.path.join(out, junk)):
            os.remove(os.path.join(out, junk))
    adopt.adopt(None, out, out, small_config(), quiet=True)
    return out


def files_state(store: str) -> dict:
    """Every store file outside ``_rocketlake/``: path -> sha256 (what a broker would load). An
    export's ``rocketlake.properties`` (its configuration, beside the files) is not a store file,
    nor is an empty ``lock`` (a writer holding the broker lock made it, or was killed holding
    it: ``storelib.io.brokerlock``); a broker's ``lock`` (it writes ``lock`` into it) is one."""
    from storelib.table.export import PROPERTIES_NAME
    out = {}
    for d, _, names in os.walk(store):
        rel_d = os.path.relpath(d, store)
        if rel_d.split(os.sep)[0] == "_rocketlake":
            continue
        for n in names:
            p = os.path.join(d, n)
            if rel_d == "." and (n == PROPERTIES_NAME or n == paths.LOCK_FILE and os.path.getsize(p) == 0):
                continue
            with open(p, "rb") as fh:
                out[os.path.relpath(p, store)] = hashlib.sha256(fh.read()).hexdigest()
    return out
