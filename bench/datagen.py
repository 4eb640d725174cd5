"""Synthetic RocketMQ messages, generated column-wise with numpy (millions per second).

Used by the benchmarks (Parquet input of N messages with fixed-size bodies) and to build the
bundled demo sample (``samples/messages.jsonl``). The mix: a few topics of 4 queues, TAGS, a
unique key per message plus a hot key shared by many, UNIQ_KEY, store times that mostly rise.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from storelib.compute.arrays import binary_from_numpy

TOPICS = ["orders", "payments", "shipping", "audit_log", "user-login", "inventory_sync", "metrics-raw", "refund"]
TAGS = ["TagA", "TagB", "TagC", "create", "update", "delete"]


def generate(n: int, body_size: int = 256, seed: int = 7, start_ms: int = 1717200000000) -> pa.Table:
    """n messages in the canonical Parquet input layout (body binary, properties as pairs)."""
    rng = np.random.default_rng(seed)
    topic_idx = rng.integers(0, len(TOPICS), n)
    topic = pa.array(TOPICS).take(pa.array(topic_idx))
    queue_id = rng.integers(0, 4, n).astype(np.int32)
    store_ts = start_ms + np.cumsum(rng.integers(0, 5, n)).astype(np.int64)
    born_ts = store_ts - rng.integers(0, 300, n)
    body = binary_from_numpy(rng.integers(32, 127, n * body_size, dtype=np.uint8),
                             np.arange(n + 1, dtype=np.int64) * body_size)
    ids = pc.cast(pa.array(np.arange(n, dtype=np.int64)), pa.string())
    uniq = pc.binary_join_element_wise(pa.array(np.full(n, "C0A80001"), pa.string()), ids, "")
    keys = pc.binary_join_element_wise(pa.array(np.full(n, "order-"), pa.string()), ids,
                                       pa.array(np.where(rng.random(n) < 0.05, " hot-key", ""), pa.string()), "")
    tag = pa.array(TAGS).take(pa.array(rng.integers(0, len(TAGS), n)))
    names = ["TAGS", "KEYS", "UNIQ_KEY", "WAIT"]
    values = [tag, keys, uniq, pa.array(np.full(n, "true"), pa.string())]
    # properties: list<struct<name, value>> in that order
    flat_names = pa.array(np.tile(np.array(names, dtype=object), n), pa.string())
    stacked = np.stack([np.asarray(v.to_numpy(zero_copy_only=False), dtype=object) for v in values], axis=1)
    flat_values = pa.array(stacked.reshape(-1), pa.string())
    props = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * len(names)),
                                     pa.StructArray.from_arrays([flat_names, flat_values], ["name", "value"]))
    return pa.table({
        "topic": topic, "queue_id": pa.array(queue_id), "flag": pa.array(np.zeros(n, np.int32)),
        "sys_flag": pa.array(np.zeros(n, np.int32)), "born_timestamp": pa.array(born_ts),
        "store_timestamp": pa.array(store_ts), "born_host": pa.array(np.full(n, "10.0.0.7:50123"), pa.string()),
        "store_host": pa.array(np.full(n, "192.168.0.10:10911"), pa.string()),
        "reconsume_times": pa.array(np.zeros(n, np.int32)),
        "prepared_transaction_offset": pa.array(np.zeros(n, np.int64)), "body": body, "properties": props,
    })


def write_parquet(path: str, n: int, body_size: int = 256, files: int = 4, seed: int = 7) -> list:
    """Write n messages as ``files`` Parquet files (input order = file name order)."""
    os.makedirs(path, exist_ok=True)
    out = []
    per = -(-n // files)
    for k in range(files):
        lo, hi = k * per, min(n, (k + 1) * per)
        if lo >= hi:
            break
        t = generate(hi - lo, body_size, seed + k, start_ms=1717200000000 + lo * 2)
        p = os.path.join(path, f"part-{k:05d}.parquet")
        pq.write_table(t, p, row_group_size=256 * 1024)
        out.append(p)
    return out


def write_jsonl(path: str, n: int, body_size: int = 64, seed: int = 7) -> None:
    """The golden messages.jsonl layout (per-row Python: only for small samples)."""
    t = generate(n, body_size, seed).to_pylist()
    with open(path, "w", encoding="utf-8") as fh:
        for r in t:
            pairs = [[p["name"], p["value"]] for p in r["properties"]]
            fh.write(json.dumps({
                "topic": r["topic"], "queue_id": r["queue_id"], "flag": r["flag"], "sys_flag": r["sys_flag"],
                "born_timestamp": r["born_timestamp"], "store_timestamp": r["store_timestamp"],
                "born_host": r["born_host"], "store_host": r["store_host"],
                "reconsume_times": r["reconsume_times"],
                "prepared_transaction_offset": r["prepared_transaction_offset"],
                "body_b64": base64.b64encode(r["body"]).decode(), "properties": pairs,
            }, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--jsonl")
    ap.add_argument("--parquet")
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--body-size", type=int, default=64)
    a = ap.parse_args()
    if a.jsonl:
        write_jsonl(a.jsonl, a.n, a.body_size)
    if a.parquet:
        write_parquet(a.parquet, a.n, a.body_size)
