"""storelib.read.query against RocketMQ's own answers (golden sets) and a brute-force key scan."""
from __future__ import annotations

import json
import os
import random
import struct

import pyarrow as pa
import pytest

from support.opshelp import restore  # golden stores from any file listing
from conftest import GOLDEN
from storelib.codec.messages import decode_one, java_hash
from storelib.format.textforms import parse_properties_string
from storelib.format.config import StoreConfig
from storelib.format.javahash import index_key_hash, java_string_hash
from storelib.read.query import StoreReader
from storelib.format.records import answer_message, decode_message
from storelib.table.storefiles import IndexFileRef, StoreFiles, recovered_end

SETS = {
    "small-roll": "files.json",
    "default-size": "files.json",
    "expire-small": "files_after.json",     # the store after expiry (queries were answered on it)
}


def _load_jsonl(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _config(name: str) -> StoreConfig:
    eff = json.load(open(os.path.join(GOLDEN, name, "config.json")))["effective_config"]
    keys = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum",
            "maxMsgsNumBatch", "maxTransferCountOnMessageInMemory", "maxTransferBytesOnMessageInMemory")
    return StoreConfig(**{k: eff[k] for k in keys if k in eff})


@pytest.fixture(scope="session")
def readers(tmp_path_factory):
    cache = {}

    def get(name: str) -> StoreReader:
        if name not in cache:
            path = restore(name, SETS[name], str(tmp_path_factory.mktemp(f"q-{name}")))
            cache[name] = StoreReader(path, _config(name))
        return cache[name]

    return get


def _cases():
    out = []
    for name in SETS:
        qs = _load_jsonl(os.path.join(GOLDEN, name, "queries.jsonl"))
        for q in qs:
            out.append(pytest.param(name, q["qid"], id=f"{name}-{q['qid']}-{q['type']}"))
    return out


_QA = {}


def _qa(name):
    if name not in _QA:
        qs = {q["qid"]: q for q in _load_jsonl(os.path.join(GOLDEN, name, "queries.jsonl"))}
        ans = {a["qid"]: a for a in _load_jsonl(os.path.join(GOLDEN, name, "answers.jsonl"))}
        _QA[name] = (qs, ans)
    return _QA[name]


@pytest.mark.parametrize("name,qid", _cases())
def test_golden_answer(readers, name, qid):
    qs, ans = _qa(name)
    got = json.loads(json.dumps(readers(name).answer(qs[qid])))
    want = ans[qid]
    if got != want:
        diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
        pytest.fail(f"{name} qid {qid} {qs[qid]}: differs in {json.dumps(diff)[:3000]}")


# --------------------------------------------------------------------------- scan / primitives
def test_scan_matches_golden_offsets(readers):
    r = readers("small-roll")
    puts = _load_jsonl(os.path.join(GOLDEN, "small-roll", "put_results.jsonl"))
    last = max(puts, key=lambda p: p["wrote_offset"])
    assert r.get_max_phy_offset() == last["wrote_offset"] + last["wrote_bytes"]
    assert r.get_min_phy_offset() == 0
    assert len(r.files.index) == 25


@pytest.mark.parametrize("name", list(SETS))
def test_scan_equals_full_walk(readers, name):
    """scan() starts the commitlog walk at a verified CQ/index position; a walk from 0 agrees,
    and every queue's valid unit count agrees with a linear scan of its last file."""
    r = readers(name)
    seg = r.files.commitlog[-1]
    assert recovered_end(r.store, seg.rel, 0, r.config.mappedFileSizeCommitLog) == seg.valid
    for files in r.files.consume_queues.values():
        f = files[-1]
        n, raw = 0, b""
        while n < r.config.cq_units_per_file:
            if n * 20 + 20 > len(raw):       # read on in 64 KiB steps (default-size files are 6 MB)
                raw += r.store.read(f.rel, len(raw), 65520)
            phy, size, _ = struct.unpack_from(">qiq", raw, n * 20)
            if not (phy >= 0 and size > 0):
                break
            n += 1
        assert f.units == n, f.rel
        assert all(g.units == r.config.cq_units_per_file for g in files[:-1])


def test_decoder_matches_codec(readers):
    r = readers("small-roll")
    puts = _load_jsonl(os.path.join(GOLDEN, "small-roll", "put_results.jsonl"))
    for p in random.Random(7).sample(puts, 60):
        seg = r.commitlog.find(p["wrote_offset"])
        raw = r.store.read(seg.rel, p["wrote_offset"] % r.config.mappedFileSizeCommitLog, p["wrote_bytes"])
        mine = decode_message(raw)
        theirs = decode_one(raw, 0)
        assert mine == theirs
        assert mine["msg_id"] == p["msg_id"]


def test_java_hash():
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("") == 0
    assert java_string_hash("\U0001F680") == (0xD83D * 31 + 0xDE80)
    assert java_string_hash("polygenelubricants") == -2**31       # abs() overflows: index hash 0
    assert index_key_hash("polygenelubricants") == 0
    words = ["Aa", "BB", "topic#K1", "\u65e5\u672c\u8a9e", "\U0001F680216 user-98110", "x" * 300, ""]
    assert [java_string_hash(w) for w in words] == java_hash(pa.array(words)).tolist()


def test_snapshot_index_limit(readers):
    """An index snapshot that stops before the newest entries hides them but keeps the older chain."""
    r = readers("small-roll")
    i = len(r.files.index) - 1
    h = r.index.header(i)
    assert h.index_count > 3
    limit = h.index_count - 2
    files = StoreFiles(config=r.config, commitlog=r.files.commitlog, consume_queues=r.files.consume_queues,
                       index=r.files.index[:-1] + [IndexFileRef(r.files.index[-1].rel, limit)])
    snap = StoreReader(r.store, r.config, files)
    hidden = set()
    for pos in range(limit, h.index_count):
        hidden.add(r.index.entry(i, pos)[1])
    for pos in range(1, limit):
        khash, phy, tdiff, prev = r.index.entry(i, pos)
        out = []
        snap.index.select_phy_offsets(i, out, khash, 10**6, 0, 2**63 - 1)
        assert phy in out
        assert not (set(out) & hidden - {e[1] for e in (r.index.entry(i, p) for p in range(1, limit))})


# --------------------------------------------------------------------------- exact variants
@pytest.fixture(scope="session")
def small_roll_messages():
    msgs = _load_jsonl(os.path.join(GOLDEN, "small-roll", "messages.jsonl"))
    puts = _load_jsonl(os.path.join(GOLDEN, "small-roll", "put_results.jsonl"))
    out = []
    for m, p in zip(msgs, puts):
        props = parse_properties_string(m["properties_string"])
        toks = [t for t in props.get("KEYS", "").split(" ") if t]
        out.append(dict(topic=m["topic"], ts=p["store_timestamp"], off=p["wrote_offset"],
                        uniq=props.get("UNIQ_KEY"), keys=toks, rollback=(m["sys_flag"] & 0xC) == 0xC,
                        msg_id=p["msg_id"], queue_offset=p["queue_offset"], queue_id=m["queue_id"],
                        cq=(m["sys_flag"] & 0xC) in (0, 0x8)))
    return out


def _brute(msgs, topic, key, begin=None, end=None):
    hits = [m for m in msgs if m["topic"] == topic and not m["rollback"]
            and (m["uniq"] == key or key in m["keys"])
            and (begin is None or m["ts"] >= begin) and (end is None or m["ts"] <= end)]
    return [m["off"] for m in sorted(hits, key=lambda m: (m["ts"], m["off"]))]


KEY_CASES = [
    ("metrics-raw", "hot-metrics-raw"), ("audit_log", "hot-audit_log"), ("shipping", "hot-shipping"),
    ("%RETRY%cg_payments", "hot-%RETRY%cg_pa"), ("metrics-raw", "Aa"), ("metrics-raw", "BB"),
    ("coupon_issue", "Aa"), ("coupon_issue", "AaAa"), ("coupon_issue", "AaBB"), ("audit_log", "BBBB"),
    ("audit_log", "AaAa"), ("payment-events", "BB"), ("payment-events", "Aa"), ("audit_log", "K1"),
    ("metrics-raw", "cart-19485"), ("nosuch-topic", "K1"), ("metrics-raw", "no-such-key"),
]


@pytest.mark.parametrize("topic,key", KEY_CASES)
def test_find_by_key_matches_brute_force(readers, small_roll_messages, topic, key):
    r = readers("small-roll")
    msgs = small_roll_messages
    want = _brute(msgs, topic, key)
    page = r.find_by_key(topic, key)
    assert [m["commitlog_offset"] for m in page.messages] == want
    assert page.next_after is None and page.total == len(want)
    for m in page.messages:                           # no hash-colliding key leaks in
        uniq = parse_properties_string(m["properties_string"]).get("UNIQ_KEY")
        toks = parse_properties_string(m["properties_string"]).get("KEYS", "").split(" ")
        assert m["topic"] == topic and (key == uniq or key in toks)
    # time windows: a few random ones plus windows on exact record times (second rounding)
    rnd = random.Random(hash((topic, key)) & 0xFFFF)
    ts = sorted(m["ts"] for m in msgs)
    windows = [(ts[0], ts[-1])]
    for _ in range(4):
        a, b = sorted(rnd.sample(ts, 2))
        windows.append((a, b))
    hits = [m for m in msgs if m["off"] in set(want)]
    for m in rnd.sample(hits, min(3, len(hits))):
        windows.append((m["ts"], m["ts"]))
        windows.append((m["ts"] + 1, m["ts"] + 999))
    for a, b in windows:
        got = [m["commitlog_offset"] for m in r.find_by_key(topic, key, a, b).messages]
        assert got == _brute(msgs, topic, key, a, b), (a, b)


@pytest.mark.parametrize("topic,key", [("metrics-raw", "hot-metrics-raw"), ("audit_log", "hot-audit_log"),
                                       ("shipping", "hot-shipping")])
def test_find_by_key_pages_beyond_64(readers, small_roll_messages, topic, key):
    r = readers("small-roll")
    want = _brute(small_roll_messages, topic, key)
    assert len(want) > 64
    # queryMessage caps at 64 and may miss in-window messages
    qm = r.query_message(topic, key, 1000, 0, 2**63 - 1)
    assert len(qm["phy_offsets"]) <= 64
    got, after, pages = [], None, 0
    while True:
        page = r.find_by_key(topic, key, limit=25, after=after)
        got += [m["commitlog_offset"] for m in page.messages]
        pages += 1
        if page.next_after is None:
            break
        after = page.next_after
    assert got == want
    assert pages == -(-len(want) // 25) or pages == -(-len(want) // 25) + 1


def test_find_by_unique_key_and_ids(readers, small_roll_messages):
    r = readers("small-roll")
    rnd = random.Random(11)
    sample = rnd.sample([m for m in small_roll_messages if m["uniq"] and not m["rollback"]], 25)
    for m in sample:
        got = r.find_by_unique_key(m["topic"], m["uniq"])
        want = _brute([x for x in small_roll_messages if x["uniq"] == m["uniq"]], m["topic"], m["uniq"])
        assert [g["commitlog_offset"] for g in got] == want
        assert m["off"] in want
        byid = r.get_by_msg_id(m["msg_id"])
        assert byid is not None and byid["commitlog_offset"] == m["off"]
    assert r.get_by_msg_id(sample[0]["msg_id"][:-1] + ("0" if sample[0]["msg_id"][-1] != "0" else "1")) is None
    # get_by_queue_offset crosses consume-queue files (30 units each here)
    q = [m for m in small_roll_messages if m["topic"] == "metrics-raw" and m["queue_id"] == 0 and m["cq"]]
    q.sort(key=lambda m: m["queue_offset"])
    got = r.get_by_queue_offset("metrics-raw", 0, 25, 40)
    assert [g["commitlog_offset"] for g in got] == [m["off"] for m in q[25:65]]
    assert [g["queue_offset"] for g in got] == list(range(25, 25 + len(got)))


def test_expired_exact_variants(readers):
    r = readers("expire-small")
    mn = r.get_min_phy_offset()
    assert r.get_by_offset(0) is None                  # no first-file fallback in the exact API
    assert r.get_by_offset(mn)["commitlog_offset"] == mn
    assert r.look_message_by_offset(0)["commitlog_offset"] == mn   # RocketMQ's quirk
    assert r.get_by_queue_offset("early_sms", 0, 0, 1000) == []


def test_answer_message_compressed_and_empty(readers):
    """A compressed body, an empty body and a plain one, each read back from the store, answer
    exactly what RocketMQ answered (every field, the properties with and without their string)."""
    r = readers("small-roll")
    picked = {}
    for a in _load_jsonl(os.path.join(GOLDEN, "small-roll", "answers.jsonl")):
        for m in a.get("messages") or []:
            if isinstance(m, dict) and "properties_string" in m:
                kind = "compressed" if m["sys_flag"] & 1 else "empty" if m["body_len"] == 0 else "plain"
                picked.setdefault(kind, m)
    assert set(picked) == {"compressed", "empty", "plain"}, sorted(picked)
    for want in picked.values():
        got = r.look_message_by_offset(want["commitlog_offset"])
        assert answer_message(got, True) == want
        assert answer_message(got, False) == {k: v for k, v in want.items() if k != "properties_string"}
