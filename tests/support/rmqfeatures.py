"""Stores with the store features the other differentials rarely have, written by RocketMQ's own
store code (tests/support/rmqwriter.py): batch puts (``putMessages``), IPv6 born and store hosts,
the properties' CRC32, light message queues (multi-dispatch), the batch consume queue, the
RocksDB consume queue, and a broker that died after its puts (abort file, a segment allocated
ahead of its data).

``cases(n, version)`` gives one case per feature the version's store code has (``FEATURES``),
``n`` messages (or batches) each: {name: (messages, config)}, messages in the golden format plus the writer's ``batch`` / ``batch_properties``
columns, ``properties`` as [name, value] pairs (rmqhunt.make_queries reads them).
"""
from __future__ import annotations

import base64

from support.rmqcases import properties_string

T0 = 1_717_000_000_000
V4_BORN, V4_STORE = "10.0.0.1:40429", "192.168.0.10:10911"
V6_BORN, V6_STORE = "[2001:db8::1]:65535", "[fd00::a]:10911"
# small files: batches meet segment ends, queues span files; a 1:4 index (read without --config)
BASE_CONFIG = {"mappedFileSizeCommitLog": 4096, "mappedFileSizeConsumeQueue": 200, "maxHashSlotNum": 10,
               "maxIndexNum": 40}
LMQ_QUEUES = ("%LMQ%a", "%LMQ%b")


def message(topic: str, q: int, i: int, ts: int, props=(), sys_flag: int = 0, v6: bool = False,
            batch: str = "", batch_props: str = "") -> dict:
    pairs = [list(p) for p in props]
    m = {"topic": topic, "queue_id": q, "flag": 0, "sys_flag": sys_flag | (0x30 if v6 else 0),
         "born_timestamp": ts - 5, "store_timestamp": ts, "born_host": V6_BORN if v6 else V4_BORN,
         "store_host": V6_STORE if v6 else V4_STORE,
         "body_b64": base64.b64encode(f"body {i} {topic}".encode()).decode(),
         "properties_string": properties_string(pairs), "properties": pairs}
    if batch:
        m["batch"], m["batch_properties"] = batch, batch_props
    return m


def batches(n: int) -> list[dict]:
    """``n`` batches of 3 to 6 messages (every other one IPv6, some with batch-level properties)
    and a single put after each, over two queues."""
    out: list[dict] = []
    i = 0
    for b in range(n):
        v6 = b % 2 == 1
        bprops = properties_string([("CLUSTER", "DefaultCluster")]) if b % 3 else ""
        for _ in range(3 + b % 4):
            out.append(message("orders", b % 2, i, T0 + b * 1000, [("KEYS", f"k{i}"), ("UNIQ_KEY", f"U{i:08d}"),
                                                                  ("TAGS", "t")], v6=v6, batch=f"b{b}",
                               batch_props=bprops))
            i += 1
        out.append(message("orders", 0, i, T0 + b * 1000 + 1, [("KEYS", f"k{i}")], v6=not v6))
        i += 1
    return out


# Which features each pinned version's store code has (read from its source / jar): 4.9 has
# batch puts, IPv6 hosts and light message queues (MultiDispatch) but no properties' CRC32
# (enabledAppendPropCRC), no batch consume queue and no RocksDB consume queue (5.x).
FEATURES = {
    "4.9.8": ("batch", "batch-whole", "lmq", "crash"),
    "5.3.3": ("batch", "batch-whole", "lmq", "batchcq", "rocksdb", "crash"),
    "5.5.1": ("batch", "batch-whole", "lmq", "batchcq", "rocksdb", "crash"),
}
HAS_PROP_CRC = {"4.9.8": False, "5.3.3": True, "5.5.1": True}


def cases(n: int, version: str) -> dict[str, tuple[list[dict], dict]]:
    crc = {"enabledAppendPropCRC": True} if HAS_PROP_CRC[version] else {}
    lmq = [message("orders", i % 2, i, T0 + i, [("KEYS", f"k{i}"),
                                                ("INNER_MULTI_DISPATCH", ",".join(LMQ_QUEUES[:1 + i % 2]))])
           for i in range(n)]
    bcq = [m for i in range(n) for m in (
        message("bt", 0, i, T0 + i, [("KEYS", f"k{i}"), ("INNER_NUM", "3")], sys_flag=0x80),
        message("orders", 0, i, T0 + i, [("KEYS", f"o{i}")]))]
    plain = [message("orders", i % 3, i, T0 + i, [("KEYS", f"k{i}")]) for i in range(n)]
    every = {
        "batch": (batches(max(2, n // 4)), dict(BASE_CONFIG, **crc)),
        # no batch meets a segment end: rocketlake's ingest of the records must be these bytes
        "batch-whole": (batches(max(2, n // 4)), dict(BASE_CONFIG, mappedFileSizeCommitLog=1 << 20, **crc)),
        "lmq": (lmq, dict(BASE_CONFIG, enableLmq=True, enableMultiDispatch=True)),
        "batchcq": (bcq, dict(BASE_CONFIG, batchCQTopics="bt")),
        "rocksdb": (plain, dict(BASE_CONFIG, storeType="defaultRocksDB")),
        "crash": (plain + [message("orders", 0, n + i, T0 + n + i, [("KEYS", f"k{n + i}")]) for i in range(n)],
                  dict(BASE_CONFIG, haltAfterWrite=True)),
    }
    return {name: every[name] for name in FEATURES[version]}


def store_config(config: dict) -> dict:
    """A case's config without the writer's own keys (RefWriter.HARNESS_KEYS): rocketlake's."""
    return {k: v for k, v in config.items() if k not in ("batchCQTopics", "haltAfterWrite")}
