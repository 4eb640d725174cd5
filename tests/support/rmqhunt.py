"""Lookups against RocketMQ: cases aimed at the index and the queues' edges, RocketMQ's answers on
its own store, and rocketlake's (both the broker-compatible calls and the exact lookups, API and
command line) on that store and on the one rocketlake wrote from the same messages.

:func:`edge_cases` draws cases (the tests/support/rmqcases.py format) from a seeded generator:
keys from a small pool shared by every topic, with equal Java hash codes ("Aa"/"BB"), spaces
around and between KEYS tokens, unicode (a surrogate pair too), a key of 600 characters, "#" in
a key; UNIQ_KEY present or absent, repeated, equal to another message's KEYS token; store times
that repeat, step by 1 ms, by a second and go back; transactions (PREPARED and ROLLBACK have no
queue unit, ROLLBACK no index entry); retry, DLQ and SCHEDULE_TOPIC_XXXX topics; a topic of 16
queues; an index of 1 to 4 slots and 6 to 20 entries a file (long chains, many files), small
commit-log and consume-queue files.

:func:`make_queries` asks RocketMQ (tests/rocketmq/.../Answers.java) queryMessage for every
(topic, key) pair of the pool and the case, with and without time windows; lookMessageByOffset
and viewMessageById of every record; getMessage at every queue offset; getOffsetInQueueByTime
around every store time; the queues' bounds; and the whole commit log (scanCommitLog).

:func:`judge` then holds rocketlake to:

* the broker calls (``StoreReader.answer``): RocketMQ's answers field for field;
* ``find_by_key`` (``query key``): RocketMQ's queryMessage candidates (a window of [0, max], under
  its 64 cap) kept where the topic is the topic, the key the UNIQ_KEY or a KEYS token and the
  store time in the window (the client's re-check, docs/OPERATIONS.md "exact"), by (store time,
  offset); paged with ``limit``/``after``, the pages make the whole;
* ``find_by_unique_key``: those with UNIQ_KEY the key;
* ``get_by_msg_id`` (``query id``): viewMessageById's message, for every record's id;
* ``get_by_queue_offset`` (``query offset``): getMessage's message at each offset, and every
  offset of a queue at once;
* ``query range`` (``read.localscan.scan_range_local``): scanCommitLog's records whose store time
  is in [begin, end] (of the topic), bounds at store times that repeat;
* the command line (``rocketlake query``) for a few of those: the API's answers.
"""
from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys

from support import rmqqueries
from support.rmqcases import properties_string

BIG = 2**63 - 1
LONG_MIN = -(2**63)
CAP = 64                            # MessageStoreConfig.maxMsgsNumBatch: queryMessage's cap
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# "Aa" and "BB" share Java's String.hashCode, so do "AaAa", "AaBB", "BBAa" and "BBBB"
KEY_POOL = ["Aa", "BB", "AaAa", "BBBB", "AaBB", "k1", "K1", "order-1", "café", "ключ", "🔑", "a#b",
            "x" * 600, "%RETRY%", "DLQ"]
PROBES = ["", "a b", "Aa BB", "missing", "aa"]          # asked, never a token
TOPICS = {"orders": 4, "wide": 16, "%RETRY%grp": 1, "%DLQ%grp": 1, "o": 2}
HOSTS = ["192.168.0.10:10911", "[fd00::a]:10911"]


def edge_cases(n: int, seed: int) -> list[dict]:
    """n cases for RocketMQ 5.x from ``seed`` (the same cases for the same arguments)."""
    return [_case(random.Random(seed * 1_000_003 + i), i) for i in range(n)]


def _case(rnd: random.Random, i: int) -> dict:
    """Case ``i``: every fourth begins at a time <= 0, every fifth (from the second) jumps 70
    years, others may do either."""
    seg = rnd.choice([4096, 8192, 16384])
    cfg = {"mappedFileSizeCommitLog": seg, "mappedFileSizeConsumeQueue": 20 * rnd.randint(2, 6),
           "maxHashSlotNum": rnd.randint(1, 4), "maxIndexNum": rnd.randint(6, 20), "maxMessageSize": 1536}
    names = sorted(TOPICS)
    store_host = rnd.choice(HOSTS) if rnd.random() < 0.3 else HOSTS[0]
    ts = rnd.randint(1_600_000_000_000, 1_800_000_000_000) // 1000 * 1000 + rnd.choice([0, 999, 500])
    if i % 4 == 0 or rnd.random() < 0.2:    # an index file begun at time <= 0: every timeDiff is 0
        ts = rnd.choice([0, 0, -5000, 1])
    jump = i % 5 == 1 or rnd.random() < 0.15    # 70 years later: a timeDiff over Integer.MAX_VALUE s
    uniqs: list[str] = []
    messages = []
    for _ in range(rnd.randint(12, 40)):
        m: dict = {}
        delayed = rnd.random() < 0.08
        m["topic"] = SCHEDULE if delayed else rnd.choice(names)
        tx = rnd.choice([0] * 10 + [4, 8, 12])
        m["born_host"] = rnd.choice(["10.0.0.1:40429", "[2001:db8::1]:65535"])
        m["store_host"] = store_host
        sys_flag = tx | (0x10 if m["born_host"].startswith("[") else 0) | (0x20 if store_host.startswith("[") else 0)
        m["sys_flag"] = sys_flag
        m["flag"] = 0
        ts += rnd.choice([0, 0, 0, 1, 1, 999, 1000, 1001, -1, -1000, 61_000])
        if jump and rnd.random() < 0.2:
            ts, jump = ts + 2_200_000_000_000, False
        m["store_timestamp"] = ts
        m["born_timestamp"] = ts - rnd.randint(0, 50)
        m["reconsume_times"] = 0
        m["prepared_transaction_offset"] = 0
        pairs = []
        r = rnd.random()
        if r < 0.6:
            u = "".join(rnd.choice("0123456789ABCDEF") for _ in range(32))
            uniqs.append(u)
            pairs.append(["UNIQ_KEY", u])
        elif r < 0.75 and uniqs:
            pairs.append(["UNIQ_KEY", rnd.choice(uniqs)])        # a repeated client id
        elif r < 0.8:
            pairs.append(["UNIQ_KEY", rnd.choice(KEY_POOL[:8])])  # one a KEYS token elsewhere
        if rnd.random() < 0.75:
            toks = [rnd.choice(KEY_POOL) for _ in range(rnd.randint(1, 4))]
            if uniqs and rnd.random() < 0.15:
                toks.append(rnd.choice(uniqs))
            sep = rnd.choice([" ", " ", "  "])
            pairs.append(["KEYS", rnd.choice(["", "", " "]) + sep.join(toks) + rnd.choice(["", "", " "])])
        if rnd.random() < 0.4:
            pairs.append(["TAGS", rnd.choice(["TagA", "Aa", "标签"])])
        if delayed:
            level = rnd.randint(1, 4)
            pairs += [["DELAY", str(level)], ["REAL_TOPIC", rnd.choice(names)], ["REAL_QID", "0"]]
            m["queue_id"] = level - 1
        elif m["topic"] == "wide" or rnd.random() < 0.5:
            m["queue_id"] = rnd.randrange(TOPICS[m["topic"]])
        rnd.shuffle(pairs)
        m["properties"] = pairs
        m["properties_string"] = properties_string(pairs)
        m["body_b64"] = base64.b64encode(rnd.randbytes(rnd.choice([0, 1, 30, 200]))).decode()
        messages.append(m)
    # the last record is queued: RocketMQ, opening its store again to answer, dispatches again the
    # records after its consume queues' end (a PREPARED/ROLLBACK tail), indexing the last indexed
    # one twice, and rocketlake's store (never opened by a broker) would differ by that
    messages[-1]["sys_flag"] &= ~0xC
    n = len(messages)
    cuts = sorted(rnd.sample(range(1, n), rnd.randint(0, 2)))
    return {"config": cfg, "topics": dict(TOPICS), "messages": messages, "cuts": cuts}


def _keys(props) -> tuple[str | None, list[str]]:
    p = dict(props)
    return p.get("UNIQ_KEY"), [t for t in (p.get("KEYS") or "").split(" ") if t]


def make_queries(messages: list[dict], results: list) -> list[dict]:
    """Queries for one written case (``results``: the writer's per-message status, offset, bytes,
    msgId, queue offset, store time)."""
    qs: list[dict] = [{"type": "scanCommitLog"}, {"type": "getMinPhyOffset"}, {"type": "getMaxPhyOffset"}]
    topics = sorted({m["topic"] for m in messages} | set(TOPICS))
    keys = list(KEY_POOL) + PROBES
    for m in messages:
        u, toks = _keys(m["properties"])
        keys += [k for k in (u, *toks) if k]
    keys = list(dict.fromkeys(keys))
    times = sorted({m["store_timestamp"] for m in messages})
    for t in topics:
        for k in keys:
            # from Long.MIN_VALUE: with begin 0 RocketMQ misses the entries of an index file begun
            # at a time <= 0 (their index time is below it), with it every entry
            for begin in (0, LONG_MIN):
                qs.append({"type": "queryMessage", "topic": t, "key": k, "max_num": CAP, "begin": begin, "end": BIG})
    rnd = random.Random(len(messages))
    for _ in range(12):                     # windows, inside rounded-second bounds and not
        m = rnd.choice(messages)
        u, toks = _keys(m["properties"])
        if not (u or toks):
            continue
        b = rnd.choice(times)
        e = rnd.choice([x for x in times if x >= b])
        qs.append({"type": "queryMessage", "topic": m["topic"], "key": rnd.choice([k for k in (u, *toks) if k]),
                   "max_num": CAP, "begin": b, "end": e})
    for r in results:
        qs.append({"type": "lookMessageByOffset", "offset": int(r[1])})
        qs.append({"type": "viewMessageById", "msg_id": r[3]})
    queues: dict = {}
    for m in messages:
        if m["sys_flag"] & 0xC in (0, 0x8):
            queues.setdefault((m["topic"], m["queue_id"]), []).append(m["store_timestamp"])
    for (t, q), ts in sorted(queues.items()) + [(("orders", 15), [])]:
        base = {"topic": t, "queue_id": q}
        qs += [dict(base, type="getMinOffsetInQueue"), dict(base, type="getMaxOffsetInQueue")]
        for off in range(len(ts) + 1):
            qs.append(dict(base, type="getMessage", group="g", offset=off, max_msg_nums=1))
        qs.append(dict(base, type="getMessage", group="g", offset=0, max_msg_nums=32))
        for x in sorted({y + d for y in ts for d in (-1, 0, 1)} | {0, BIG}):
            for bd in ("LOWER", "UPPER"):
                qs.append(dict(base, type="getOffsetInQueueByTime", timestamp=x, boundary=bd))
    for m in messages:                      # each message's own store time as the window
        u, toks = _keys(m["properties"])
        if u or toks:
            qs.append({"type": "queryMessage", "topic": m["topic"], "key": (toks or [u])[0], "max_num": CAP,
                       "begin": m["store_timestamp"], "end": m["store_timestamp"]})
    for i, q in enumerate(qs):
        q["qid"] = i
    return qs


def _offs(msgs) -> list[int]:
    return [m["commitlog_offset"] for m in msgs]


def judge(case: dict, rocketmq_store: str, rocketlake_store: str, config, queries: list[dict],
          answers_path: str, limit: int = 6, cli: bool = False) -> list[str]:
    """rocketlake's answers on both stores that differ from RocketMQ's (or from what RocketMQ's
    answers make the exact lookups' results), at most ``limit`` lines."""
    from storelib.read.query import open_store
    theirs = {a["qid"]: a for a in map(json.loads, open(answers_path, encoding="utf-8"))}
    out: list[str] = []
    for label, store, cfg in (("RocketMQ's store", rocketmq_store, config), ("rocketlake's store", rocketlake_store, None)):
        reader = open_store(store, config=cfg)
        out += [f"{label}: {p}" for p in _compat(reader, queries, theirs)]
        out += [f"{label}: {p}" for p in _exact(reader, store, cfg, queries, theirs)]
        if len(out) >= limit:
            return out[:limit]
    if cli:
        out += [f"command line: {p}" for p in _cli(rocketlake_store, queries, theirs)]
    return out[:limit]


def _compat(reader, queries, theirs) -> list[str]:
    out = []
    for q in queries:
        if q["type"] == "scanCommitLog":
            continue
        want = rmqqueries._theirs(theirs.get(q["qid"]))
        if want is None or "rocketmq_error" in want:
            continue
        rmqqueries.COMPARED[0] += 1
        try:
            got = rmqqueries._like(reader.answer(q), want)
        except Exception as e:  # noqa: BLE001 - a reader failure is a difference
            got = f"{type(e).__name__}: {e}"
        if got != want:
            out.append(f"{q['type']} differs: {json.dumps(q, ensure_ascii=False)[:200]}: RocketMQ "
                       f"{str(want)[:300]}, rocketlake {str(got)[:300]}")
    return out


def _match(m: dict, topic: str, key: str) -> bool:
    u, toks = _keys(m["properties_sorted"])
    return m["topic"] == topic and (key == u or key in toks)


def expected_key(q: dict, a: dict) -> list[dict] | None:
    """``find_by_key``'s answer made from RocketMQ's queryMessage answer (None: RocketMQ's is
    capped, it does not hold them all). The window of ``q`` is exact, not rounded."""
    if len(a["phy_offsets"]) >= CAP:
        return None
    seen = {}
    for m in a["messages"]:
        if _match(m, q["topic"], q["key"]) and q["begin"] <= m["store_timestamp"] <= q["end"]:
            seen[m["commitlog_offset"]] = m
    return sorted(seen.values(), key=lambda m: (m["store_timestamp"], m["commitlog_offset"]))


def _exact(reader, store: str, cfg, queries, theirs) -> list[str]:
    from storelib.read.localscan import scan_range_local
    out = []
    whole = {}                                  # (topic, key) -> RocketMQ's [0, max] answer
    for q in queries:
        if q["type"] == "queryMessage" and q["begin"] == LONG_MIN and q["end"] == BIG:
            whole[(q["topic"], q["key"])] = theirs[q["qid"]]
    for q in queries:
        a = theirs.get(q["qid"])
        if a is None or "rocketmq_error" in a:
            continue
        t = q["type"]
        if t == "queryMessage":
            base = whole[(q["topic"], q["key"])]
            want = expected_key(q, base)
            if want is None:
                continue
            rmqqueries.COMPARED[0] += 1
            if q["begin"] == 0 and q["end"] == BIG:
                continue                        # (the answer from Long.MIN_VALUE holds them all)
            win = (None, None) if q["end"] == BIG else (q["begin"], q["end"])
            page = reader.find_by_key(q["topic"], q["key"], *win)
            if _offs(page.messages) != _offs(want) or page.total != len(want):
                out.append(f"find_by_key({q['topic']!r}, {q['key'][:40]!r}, {win}): RocketMQ's messages at "
                           f"{_offs(want)}, rocketlake {_offs(page.messages)} (total {page.total})")
                continue
            if len(want) > 1:                   # pages of 1 make the whole
                got, after = [], None
                for _ in range(len(want) + 1):
                    p = reader.find_by_key(q["topic"], q["key"], *win, limit=1, after=after)
                    got += _offs(p.messages)
                    after = p.next_after
                    if after is None:
                        break
                if got != _offs(want):
                    out.append(f"find_by_key({q['topic']!r}, {q['key'][:40]!r}) paged by 1: {got}, "
                               f"whole {_offs(want)}")
            if win == (None, None):
                uw = [m for m in want if _keys(m["properties_sorted"])[0] == q["key"]]
                ug = reader.find_by_unique_key(q["topic"], q["key"])
                if _offs(ug) != _offs(uw):
                    out.append(f"find_by_unique_key({q['topic']!r}, {q['key'][:40]!r}): RocketMQ's messages "
                               f"at {_offs(uw)}, rocketlake {_offs(ug)}")
        elif t == "viewMessageById":
            m = reader.get_by_msg_id(q["msg_id"])
            w = a["message"]
            if (m and m["commitlog_offset"]) != (w and w["commitlog_offset"]):
                out.append(f"get_by_msg_id({q['msg_id']}): RocketMQ's message at "
                           f"{w and w['commitlog_offset']}, rocketlake {m and m['commitlog_offset']}")
            m2 = reader.get_by_msg_id(q["msg_id"].lower())
            if (m2 and m2["commitlog_offset"]) != (m and m["commitlog_offset"]):
                out.append(f"get_by_msg_id of {q['msg_id']} in lower case differs from upper case")
        elif t == "getMessage" and q["max_msg_nums"] == 1:
            rmqqueries.COMPARED[0] += 1
            got = reader.get_by_queue_offset(q["topic"], q["queue_id"], q["offset"], 1)
            want = a["messages"] if a["status"] == "FOUND" else []
            if _offs(got) != _offs(want):
                out.append(f"get_by_queue_offset({q['topic']!r}, {q['queue_id']}, {q['offset']}): RocketMQ's "
                           f"{_offs(want)}, rocketlake {_offs(got)}")
    # every key query at once, as `query keys` answers a file of them (read.localscan.lookup_keys_here)
    import pyarrow as pa
    from storelib.read.localscan import lookup_keys_here
    batch = {}
    for q in queries:
        if q["type"] == "queryMessage" and not (q["begin"] == 0 and q["end"] == BIG):
            want = expected_key(q, whole[(q["topic"], q["key"])])
            if want is not None:
                win = (None, None) if q["end"] == BIG else (q["begin"], q["end"])
                batch[(q["topic"], q["key"], *win)] = sorted(_offs(want))
    if batch:
        cols = list(zip(*batch))
        table = lookup_keys_here(store, pa.table({"topic": pa.array(cols[0], pa.string()),
                                                  "key": pa.array(cols[1], pa.string()),
                                                  "begin": pa.array(cols[2], pa.int64()),
                                                  "end": pa.array(cols[3], pa.int64())}), config=cfg)
        got: dict = {k: [] for k in batch}
        for r in table.select(["query_topic", "query_key", "query_begin", "query_end", "commitlog_offset"]).to_pylist():
            got.setdefault((r["query_topic"], r["query_key"], r["query_begin"], r["query_end"]), []).append(
                r["commitlog_offset"])
        for k, want in batch.items():
            rmqqueries.COMPARED[0] += 1
            if sorted(got[k]) != want:
                out.append(f"keys lookup {(k[0], k[1][:40], k[2], k[3])}: RocketMQ's messages at {want}, "
                           f"rocketlake {sorted(got[k])}")
    # a queue's offsets at once: the single ones in order
    per_queue: dict = {}
    for q in queries:
        if q["type"] == "getMessage" and q["max_msg_nums"] == 1 and theirs[q["qid"]].get("status") == "FOUND":
            per_queue.setdefault((q["topic"], q["queue_id"]), []).extend(_offs(theirs[q["qid"]]["messages"]))
    for (t, qid), want in sorted(per_queue.items()):
        got = _offs(reader.get_by_queue_offset(t, qid, 0, len(want) + 2))
        if got != want:
            out.append(f"get_by_queue_offset({t!r}, {qid}, 0, {len(want) + 2}): RocketMQ's {want}, rocketlake {got}")
    # store-time ranges against RocketMQ's walk of the commit log
    scan = next(theirs[q["qid"]] for q in queries if q["type"] == "scanCommitLog")
    records = scan["messages"]
    times = sorted({m["store_timestamp"] for m in records})
    bounds = [(None, None)] + [(t, t) for t in times[:3]] + [(times[0] - 1, times[len(times) // 2]),
                                                             (times[len(times) // 2], times[-1] + 1)]
    for b, e in bounds:
        for topic in (None, "orders", "%RETRY%grp", SCHEDULE):
            lo, hi = (b, e) if b is not None else (0, BIG)
            want = [m["commitlog_offset"] for m in records
                    if lo <= m["store_timestamp"] <= hi and (topic is None or m["topic"] == topic)]
            rmqqueries.COMPARED[0] += 1
            got = scan_range_local(store, lo, hi, topic, config=cfg).column("commitlog_offset").to_pylist()
            if got != want:
                out.append(f"range [{lo}, {hi}] topic {topic!r}: RocketMQ's records at {want}, rocketlake {got}")
    return out


def _rocketlake(*args: str) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "storelib.cli.main", "query", *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"rocketlake query {' '.join(args)} exited {r.returncode}: {r.stderr[-800:]}")
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]


def _cli(store: str, queries, theirs) -> list[str]:
    """A few lookups through ``rocketlake query`` (each a process): the key with most answers,
    one message id, one queue's first offsets, a range, each against RocketMQ's answers."""
    out = []
    keyq = max((q for q in queries if q["type"] == "queryMessage" and q["end"] == BIG and q["begin"] == 0 and q["key"]),
               key=lambda q: len(theirs[q["qid"]]["phy_offsets"]))
    whole = next(q for q in queries if q["type"] == "queryMessage" and q["begin"] == LONG_MIN
                 and (q["topic"], q["key"]) == (keyq["topic"], keyq["key"]))
    want = expected_key(whole, theirs[whole["qid"]])
    if want is not None:
        got = _rocketlake("--store", store, "key", "--topic", keyq["topic"], "--key", keyq["key"])
        if _offs(got) != _offs(want):
            out.append(f"query key {keyq['topic']!r} {keyq['key'][:40]!r}: RocketMQ's {_offs(want)}, rocketlake {_offs(got)}")
        compat = _rocketlake("--store", store, "key", "--rocketmq-compat", "--topic", keyq["topic"], "--key", keyq["key"])
        if _offs(compat) != sorted(theirs[keyq["qid"]]["phy_offsets"]):
            out.append(f"query key --rocketmq-compat {keyq['topic']!r} {keyq['key'][:40]!r}: RocketMQ's "
                       f"{theirs[keyq['qid']]['phy_offsets']}, rocketlake {_offs(compat)}")
    idq = next(q for q in queries if q["type"] == "viewMessageById")
    got = _rocketlake("--store", store, "id", idq["msg_id"])
    w = theirs[idq["qid"]]["message"]
    if _offs(got) != ([w["commitlog_offset"]] if w else []):
        out.append(f"query id {idq['msg_id']}: RocketMQ's {w and w['commitlog_offset']}, rocketlake {_offs(got)}")
    gm = [q for q in queries if q["type"] == "getMessage" and q["max_msg_nums"] == 32 and q["topic"] != "orders"]
    if gm:
        q = gm[0]
        a = theirs[q["qid"]]
        want = a["phy_offsets"] if a["status"] == "FOUND" else []
        got = _rocketlake("--store", store, "offset", "--topic", q["topic"], "--queue", str(q["queue_id"]),
                          "--offset", "0", "--count", str(max(1, len(want))))
        if _offs(got) != want:
            out.append(f"query offset {q['topic']!r}/{q['queue_id']}: RocketMQ's {want}, rocketlake {_offs(got)}")
    scan = next(theirs[q["qid"]] for q in queries if q["type"] == "scanCommitLog")["messages"]
    times = sorted(m["store_timestamp"] for m in scan if m["store_timestamp"] >= 0)   # (the command's times are >= 0)
    if not times:
        return out
    t = times[len(times) // 2]
    want = [m["commitlog_offset"] for m in scan if m["store_timestamp"] == t]
    got = _rocketlake("--store", store, "range", "--local", "always", "--begin", str(t), "--end", str(t))
    if _offs(got) != want:
        out.append(f"query range [{t}, {t}]: RocketMQ's {want}, rocketlake {_offs(got)}")
    return out
