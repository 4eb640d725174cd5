"""The 12 query types on a RocketMQ-written store: RocketMQ's own answers against rocketlake's.

:func:`make_queries` picks queries for a generated case from its messages alone (they go to
the writer with them): per queue min/max offsets, units at the ends and past them, times around
the queue's store times with both boundaries, getMessage from several offsets; queryMessage by
keys, UNIQ_KEYs and tags' index keys; lookMessageByOffset and viewMessageById of the first record;
the store-wide calls. The reference writer (tests/support/rmqwriter.py: RefWriter and Answers.java)
answers them on its store opened again; :func:`differences` answers them with rocketlake's reader
on the same files (``storelib.read.query.open_store``: the broker's view after a restart) and lists
what differs.
"""
from __future__ import annotations

import base64
import ipaddress
import json

BIG = 2**63 - 1
COMPARED = [0, 0]           # answers compared, queries RocketMQ itself failed (over this process)


def _offset_msg_id(store_host: str, offset: int) -> str:
    ip, port = _host(store_host)
    return (ip.packed + port.to_bytes(4, "big") + offset.to_bytes(8, "big")).hex().upper()


def make_queries(messages: list[dict], per_queue: int = 3) -> list[dict]:
    """Queries for the RocketMQ-side ``messages`` (queues set, in put order), chosen from the
    messages alone (they go to the writer with them)."""
    qs: list[dict] = [{"type": "getMinPhyOffset"}, {"type": "getMaxPhyOffset"}, {"type": "getEarliestMessageTime"}]
    queues: dict = {}
    for m in messages:
        if m["sys_flag"] & 0xC in (0, 0x8):
            queues.setdefault((m["topic"], m["queue_id"]), []).append(m["store_timestamp"])
    picked = sorted(queues)[:per_queue] + ([(messages[0]["topic"], 99)] if messages else [])
    for t, q in picked:
        times = queues.get((t, q), [])
        n = len(times)
        base = {"topic": t, "queue_id": q}
        qs += [dict(base, type=k) for k in ("getMinOffsetInQueue", "getMaxOffsetInQueue", "getEarliestMessageTime")]
        for off in sorted({0, max(0, n - 1), n}):
            qs += [dict(base, type="getCommitLogOffsetInQueue", cq_offset=off),
                   dict(base, type="getMessageStoreTimeStamp", cq_offset=off)]
        times = sorted(times)
        probe = {0, BIG}
        if times:
            mid = times[len(times) // 2]
            probe |= {times[0], times[0] - 1, times[-1], times[-1] + 1, mid, mid + 1}
        for ts in sorted(probe):
            for b in ("LOWER", "UPPER"):
                qs.append(dict(base, type="getOffsetInQueueByTime", timestamp=ts, boundary=b))
        for off, k in ((0, 32), (n // 2, 1), (n, 32), (n + 3, 8)):
            qs.append(dict(base, type="getMessage", group="g", offset=off, max_msg_nums=k))
    keys = []
    for m in messages:
        p = {k: v for k, v in m["properties"] if v}         # as the store parses them: empty values dropped
        keys += [(m["topic"], x) for x in (p.get("UNIQ_KEY"), *(p.get("KEYS") or "").split(" ")) if x]
        if p.get("TAGS"):
            keys.append((m["topic"], "T#" + p["TAGS"]))         # the newest 5.x line's tag index key
    for t, k in list(dict.fromkeys(keys))[:6]:
        qs.append({"type": "queryMessage", "topic": t, "key": k, "max_num": 32, "begin": 0, "end": BIG})
    if messages:                                                # the first record is at offset 0
        qs.append({"type": "lookMessageByOffset", "offset": 0})
        qs.append({"type": "viewMessageById", "msg_id": _offset_msg_id(messages[0]["store_host"], 0)})
    for i, q in enumerate(qs):
        q["qid"] = i
    return qs


_ARGS = {
    "queryMessage": ("topic", "key", "max_num", "begin", "end"),
    "getMessage": ("group", "topic", "queue_id", "offset", "max_msg_nums"),
    "lookMessageByOffset": ("offset",), "viewMessageById": ("msg_id",),
    "getOffsetInQueueByTime": ("topic", "queue_id", "timestamp", "boundary"),
    "getMinOffsetInQueue": ("topic", "queue_id"), "getMaxOffsetInQueue": ("topic", "queue_id"),
    "getCommitLogOffsetInQueue": ("topic", "queue_id", "cq_offset"),
    "getMessageStoreTimeStamp": ("topic", "queue_id", "cq_offset"),
    "getEarliestMessageTime": ("topic", "queue_id"), "getMinPhyOffset": (), "getMaxPhyOffset": (),
    "scanCommitLog": (),
}
_TEXT = {"topic", "key", "group"}


def tsv(q: dict) -> str:
    """A query as Answers.java reads it: qid, type, the arguments (text as base64 UTF-8)."""
    args = [base64.b64encode(str(q[a]).encode()).decode() if a in _TEXT else str(q[a])
            for a in _ARGS[q["type"]] if a in q]
    return "\t".join([str(q["qid"]), q["type"], *args]) + "\n"


def _host(v):
    if isinstance(v, list):
        return ipaddress.ip_address(v[0]), int(v[1])
    h, port = v.rsplit(":", 1)
    return ipaddress.ip_address(h.strip("[]")), int(port)


def _like(mine, theirs):
    """rocketlake's answer value projected on the keys of RocketMQ's (hosts compared as addresses)."""
    if isinstance(theirs, dict) and isinstance(mine, dict):
        return {k: (_host(mine.get(k)) if k.endswith("_host") else _like(mine.get(k), v)) for k, v in theirs.items()}
    if isinstance(theirs, list) and isinstance(mine, list) and len(theirs) == len(mine):
        return [_like(a, b) for a, b in zip(mine, theirs)]
    return mine


def _theirs(v):
    if isinstance(v, dict):
        return {k: (_host(x) if k.endswith("_host") else _theirs(x)) for k, x in v.items()}
    if isinstance(v, list):
        return [_theirs(x) for x in v]
    return v


def differences(store: str, config, queries: list[dict], answers_path: str, limit: int = 3) -> list[str]:
    """rocketlake's answers on ``store`` (opened with ``config``) that differ from RocketMQ's."""
    from storelib.read.query import open_store
    reader = open_store(store, config=config)
    theirs = {a["qid"]: a for a in map(json.loads, open(answers_path, encoding="utf-8"))}
    out = []
    for q in queries:
        want = _theirs(theirs.get(q["qid"]))
        if want is not None and "rocketmq_error" in want:
            COMPARED[1] += 1
            continue                        # RocketMQ itself fails it: nothing to compare
        COMPARED[0] += 1
        try:
            got = _like(reader.answer(q), want)
        except Exception as e:  # noqa: BLE001 - a reader failure is a difference
            got = f"{type(e).__name__}: {e}"
        if got != want:
            out.append(f"answer differs: {json.dumps(q, ensure_ascii=False)[:300]}: RocketMQ "
                       f"{str(want)[:400]}, rocketlake {str(got)[:400]}")
            if len(out) >= limit:
                break
    return out
