"""A small rocketlake store whose store times come in clusters out of order (plus a few strays),
written in two batches, the second continuing the first's last segment: the store the zone-map
tests (storelib.table.zonemap) prune inside segments."""
from __future__ import annotations

import json
import os

import numpy as np

__all__ = ["BASE_TS", "zoned_store"]

BASE_TS = 10**12


def zoned_store(tmp, messages_jsonl: str, config, n: int = 1600) -> str:
    """The store (under ``tmp``) of the first ``n`` messages of ``messages_jsonl`` that have a
    consume-queue unit; times BASE_TS + [0, 2.1e6) ms, a cluster of 80 messages at a time."""
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    with open(messages_jsonl, encoding="utf-8") as fh:
        rows = [json.loads(x) for x in fh][:n]
    rows = [r for r in rows if r["sys_flag"] & 0xC in (0, 8)]
    rng = np.random.default_rng(7)
    for i, r in enumerate(rows):
        r["store_timestamp"] = BASE_TS + ((i // 80) * 7 % 20) * 10**5 + int(rng.integers(10**5))
        if rng.random() < 0.01:
            r["store_timestamp"] = BASE_TS + int(rng.integers(-10**5, 21 * 10**5))
    store = os.path.join(str(tmp), "store")
    for k, part in enumerate((rows[:len(rows) * 7 // 16], rows[len(rows) * 7 // 16:])):
        src = os.path.join(str(tmp), f"{k}.jsonl")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in part))
        run_ingest(LocalSession(), store, src, "jsonl", config, quiet=True)
    return store
