"""Codec tests (no Spark): golden byte equality, docs/FORMAT.md §9 rules, properties, bad input.

Every expectation is computed by small reference implementations written here with
``struct``/``zlib`` (one message at a time), independent of ``storelib.codec.messages``.
"""
from __future__ import annotations

import base64
import gzip
import json
import os
import re
import socket
import struct
import zlib
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, HealthCheck, settings, strategies as st

from conftest import golden_set
from storelib.codec import messages as codec, properties
from storelib.compute import crc32
from storelib.ingest import inputs
from storelib.errors import InputError
from storelib.format import commitlog as cl, textforms
from storelib.format.config import StoreConfig

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MAGIC_V1 = 0xDAA320A7 - (1 << 32)
MAGIC_V2 = 0xDAA320AB - (1 << 32)
DELAYS_MS = [1000, 5000, 10000, 30000] + [m * 60000 for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30)] \
    + [3600000, 7200000]
INT_MIN = -(1 << 31)


# ============================================================================ reference model
def ref_java_hash(s: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, signed 32-bit."""
    raw = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def ref_index_hash(s: str) -> int:
    """IndexFile.indexKeyHashMethod: Math.abs(hash); abs(Integer.MIN_VALUE) < 0 -> 0."""
    h = ref_java_hash(s)
    return 0 if h == INT_MIN else abs(h)


def ref_utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def ref_parse_props(s: str) -> dict:
    """MessageDecoder.string2messageProperties, written from its description (docs/FORMAT.md §1.3)."""
    out = {}
    index, n = 0, len(s)
    while index < n:
        new = s.find("\x02", index)
        if new < 0:
            new = n
        if new - index >= 3:
            kv = s.find("\x01", index)
            if index < kv < new - 1:
                out[s[index:kv]] = s[kv + 1:new]
        index = new + 1
    return out


def ref_host(text: str) -> tuple[bytes, bool]:
    if text.startswith("["):
        addr, port = text[1:].split("]:")
        return socket.inet_pton(socket.AF_INET6, addr) + struct.pack(">i", int(port)), True
    addr, port = text.rsplit(":", 1)
    return socket.inet_pton(socket.AF_INET, addr) + struct.pack(">i", int(port)), False


def ref_delete_crc_property(s: str) -> str:
    """CommitLog removes incoming ``__CRC32#`` entries when enabledAppendPropCRC (MessageUtils.deleteProperty):
    an entry starts the string or follows U+0002, is ``__CRC32#`` U+0001 ..., and runs through its U+0002."""
    parts = s.split("\x02")
    out = []
    for i, part in enumerate(parts):
        if not part.startswith("__CRC32#\x01"):
            out.append(part + ("\x02" if i < len(parts) - 1 else ""))
    return "".join(out)


def ref_record(m: dict, phys: int, qoff: int, crc: bool = False) -> bytes:
    """One commitlog record, docs/FORMAT.md §1.2 (+ §1.8 when ``crc``)."""
    born, b6 = ref_host(m["born_host"])
    store, s6 = ref_host(m["store_host"])
    sys_flag = m["sys_flag"] | (0x10 if b6 else 0) | (0x20 if s6 else 0)
    topic = m["topic"].encode("utf-8")
    v2 = ref_utf16_len(m["topic"]) > 127
    props = (ref_delete_crc_property(m["properties_string"]) if crc else m["properties_string"]).encode("utf-8")
    reserved = 0
    if crc:
        if props and props[-1] != 0x02:
            props += b"\x02"
        reserved = 20
    body = m["body"]
    rec = (struct.pack(">iiiiiqqiq", 0, MAGIC_V2 if v2 else MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF,
                       m["queue_id"], m["flag"], qoff, phys, sys_flag, m["born_timestamp"])
           + born + struct.pack(">q", m["store_timestamp"]) + store
           + struct.pack(">iqi", m["reconsume_times"], m["prepared_transaction_offset"], len(body)) + body
           + (struct.pack(">h", len(topic)) if v2 else struct.pack(">b", len(topic))) + topic
           + struct.pack(">h", len(props) + reserved) + props + b"\0" * reserved)
    rec = struct.pack(">i", len(rec)) + rec[4:]
    if crc:
        c = zlib.crc32(rec[:-20]) & 0x7FFFFFFF
        digits = "".join(str(c // 10 ** k % 10) for k in range(10))      # least significant first
        rec = rec[:-20] + b"__CRC32#\x01" + digits.encode() + b"\x02"
    return rec


def ref_dispatch(m: dict, delays=DELAYS_MS) -> tuple[bool, int, list[int]]:
    """(cq eligible, tagsCode, index key hashes in dispatch order) for one message."""
    props = ref_parse_props(m["properties_string"])
    tran = m["sys_flag"] & 0xC
    tags = props.get("TAGS")
    tags_code = ref_java_hash(tags) if tags else 0
    if m["topic"] == "SCHEDULE_TOPIC_XXXX" and "DELAY" in props:
        level = min(int(props["DELAY"]), len(delays))
        if level > 0:
            tags_code = m["store_timestamp"] + delays[level - 1]
    keys = []
    if tran != 0xC:
        if "UNIQ_KEY" in props:
            keys.append(props["UNIQ_KEY"])
        keys += [k for k in props.get("KEYS", "").split(" ") if k]
    return tran in (0x0, 0x8), tags_code, [ref_index_hash(m["topic"] + "#" + k) for k in keys]


def ref_msg_id(m: dict, phys: int) -> str:
    return (ref_host(m["store_host"])[0] + struct.pack(">q", phys)).hex().upper()


# ============================================================================ helpers
def msg(**kw) -> dict:
    base = dict(topic="TopicA", queue_id=0, flag=0, sys_flag=0, born_timestamp=1_700_000_000_000,
                store_timestamp=1_700_000_000_500, born_host="10.0.0.1:5000", store_host="192.168.0.10:10911",
                reconsume_times=0, prepared_transaction_offset=0, body=b"hello", properties_string="")
    base.update(kw)
    return base


def table_of(msgs: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(msgs, schema=codec.MESSAGE_SCHEMA)


def prepare(msgs, config=None, label=None):
    # The record format for any topic; the topic-name rules are tested in test_hostile_names.py.
    return codec.prepare(table_of(msgs), config or StoreConfig(), label, topic_names=False)


def offsets_for(pm, msgs, base=0):
    """Contiguous physical offsets and per-queue offsets (0 for PREPARED/ROLLBACK)."""
    phys = base + np.concatenate([[0], np.cumsum(pm.sizes)[:-1]]).astype(np.int64)
    counters, qo = {}, []
    for m in msgs:
        if (m["sys_flag"] & 0xC) in (0, 8):
            k = (m["topic"], m["queue_id"])
            qo.append(counters.get(k, 0))
            counters[k] = qo[-1] + 1
        else:
            qo.append(0)
    return phys, np.asarray(qo, np.int64)


def encode_list(msgs, config=None, crc=False, base=0):
    """Encode through the codec; returns (pm, phys, qoffs, list of record bytes)."""
    config = config or StoreConfig(enabledAppendPropCRC=crc)
    pm = prepare(msgs, config)
    phys, qo = offsets_for(pm, msgs, base)
    buf = codec.encode(pm, phys, qo, crc_property=crc)
    assert len(buf) == int(pm.sizes.sum())
    ends = np.cumsum(pm.sizes)
    recs = [bytes(buf[e - s:e]) for s, e in zip(pm.sizes, ends)]
    return pm, phys, qo, recs


def check_against_reference(msgs, crc=False, base=0):
    pm, phys, qo, recs = encode_list(msgs, crc=crc, base=base)
    for i, m in enumerate(msgs):
        want = ref_record(m, int(phys[i]), int(qo[i]), crc)
        assert recs[i] == want, f"message {i}: record differs from the reference\n{recs[i]!r}\n{want!r}"
    return pm, phys, qo, recs


def index_entries(pm) -> list[list[int]]:
    out = [[] for _ in range(pm.n)]
    for i, h in zip(pm.index_msg.tolist(), pm.index_hash.tolist()):
        out[i].append(h)
    return out


def string_with_hash(prefix: str, target: int) -> str:
    """prefix + 7 ASCII chars ('0'..'N') whose Java hash is ``target`` (mod 2**32)."""
    k = 7
    h0 = ref_java_hash(prefix) & 0xFFFFFFFF
    base_sum = sum(48 * 31 ** i for i in range(k))
    r = (target - h0 * 31 ** k - base_sum) % (1 << 32)
    digits = []
    for _ in range(k):
        digits.append(r % 31)
        r //= 31
    assert r == 0
    s = prefix + "".join(chr(48 + d) for d in reversed(digits))
    assert ref_java_hash(s) & 0xFFFFFFFF == target & 0xFFFFFFFF
    return s


# ============================================================================ golden data
@lru_cache(maxsize=None)
def golden(name: str):
    d = golden_set(name)
    cfg = json.load(open(os.path.join(d, "config.json")))
    sc = dict(cfg["messageStoreConfig"])
    sc.pop("flushDiskType", None)
    config = StoreConfig(**sc)
    path = os.path.join(d, "messages.jsonl")
    if not os.path.exists(path):
        path += ".gz"
    table = inputs.jsonl_to_table(path)
    with open(os.path.join(d, "put_results.jsonl")) as fh:
        put = [json.loads(line) for line in fh]
    files = {f["path"]: f for f in json.load(open(os.path.join(d, "files.json")))["files"]}
    return d, config, table, put, files


def store_file(name: str, path: str) -> bytes:
    """A golden store file's bytes (for .head.gz files: up to the last non-zero byte)."""
    d, _, _, _, files = golden(name)
    f = files[path]
    raw = open(os.path.join(d, "store", f["stored_as"]), "rb").read()
    return gzip.decompress(raw) if f["stored_as"].endswith(".gz") else raw


def golden_records(name: str) -> list[bytes]:
    _, config, _, put, files = golden(name)
    fsize = config.mappedFileSizeCommitLog
    cache = {}
    out = []
    for p in put:
        off, size = p["wrote_offset"], p["wrote_bytes"]
        start = off // fsize * fsize
        if start not in cache:
            cache[start] = store_file(name, f"commitlog/{start:020d}")
        data = cache[start]
        pos = off - start
        rec = data[pos:pos + size]
        out.append(rec + b"\0" * (size - len(rec)))     # .head files stop at the last non-zero byte
    return out


@pytest.mark.parametrize("name", ["small-roll", "default-size"])
def test_golden_records_byte_for_byte(name):
    _, config, table, put, _ = golden(name)
    assert table.num_rows == len(put)
    pm = codec.prepare(table, config)
    wo = np.array([p["wrote_offset"] for p in put], np.int64)
    qo = np.array([p["queue_offset"] for p in put], np.int64)
    np.testing.assert_array_equal(pm.sizes, [p["wrote_bytes"] for p in put])
    np.testing.assert_array_equal(pm.body_crc, [p["body_crc"] for p in put])
    np.testing.assert_array_equal(pm.sys_flag, [p["stored_sys_flag"] for p in put])
    np.testing.assert_array_equal(pm.store_timestamp, [p["store_timestamp"] for p in put])
    buf = codec.encode(pm, wo, qo)
    want = golden_records(name)
    expected = b"".join(want)
    if bytes(buf) != expected:
        ends = np.cumsum(pm.sizes)
        for i, (s, e) in enumerate(zip(pm.sizes, ends)):
            got = bytes(buf[e - s:e])
            assert got == want[i], f"{name} message {i} at {wo[i]}: first differing byte " \
                f"{next(k for k in range(len(got)) if got[k] != want[i][k])}"
    # decode_records over the encoded buffer gives RocketMQ's msg ids and the input fields back.
    starts = np.concatenate([[0], np.cumsum(pm.sizes)[:-1]]).astype(np.int64)
    dec = codec.decode_records(buf, 0, starts)
    assert dec.column("msg_id").to_pylist() == [p["msg_id"] for p in put]
    assert dec.column("commitlog_offset").to_pylist() == wo.tolist()
    assert dec.column("queue_offset").to_pylist() == qo.tolist()
    assert dec.column("body_crc").to_pylist() == [p["body_crc"] for p in put]
    assert dec.column("topic").to_pylist() == table.column("topic").to_pylist()
    assert dec.column("properties_string").to_pylist() == table.column("properties_string").to_pylist()
    assert dec.column("body").to_pylist() == table.column("body").to_pylist()


@pytest.mark.parametrize("layout", ["sliced", "chunked"])
def test_golden_sliced_and_chunked_tables(layout):
    """prepare/encode honour Arrow slice offsets and chunking (Spark hands over arbitrary batches)."""
    _, config, table, put, _ = golden("small-roll")
    lo, hi = 777, 2345
    if layout == "sliced":
        part = table.slice(lo, hi - lo)
    else:
        part = pa.concat_tables([table.slice(lo, 5), table.slice(lo + 5, 400), table.slice(lo + 405, hi - lo - 405)])
    pm = codec.prepare(part, config)
    full = codec.prepare(table, config)
    for f in ("sizes", "body_crc", "sys_flag", "tags_code", "cq_eligible"):
        np.testing.assert_array_equal(getattr(pm, f), getattr(full, f)[lo:hi], err_msg=f)
    sel = (full.index_msg >= lo) & (full.index_msg < hi)
    np.testing.assert_array_equal(pm.index_hash, full.index_hash[sel])
    np.testing.assert_array_equal(pm.index_msg + lo, full.index_msg[sel])
    wo = np.array([p["wrote_offset"] for p in put[lo:hi]], np.int64)
    qo = np.array([p["queue_offset"] for p in put[lo:hi]], np.int64)
    assert bytes(codec.encode(pm, wo, qo)) == b"".join(golden_records("small-roll")[lo:hi])


def test_golden_reference_model_small_roll():
    """The test's own reference encoder agrees with RocketMQ (so the rule tests below are meaningful)."""
    _, config, table, put, _ = golden("small-roll")
    want = golden_records("small-roll")
    for i, m in enumerate(table.to_pylist()):
        p = put[i]
        assert ref_record(m, p["wrote_offset"], p["queue_offset"]) == want[i], i
        assert ref_msg_id(m, p["wrote_offset"]) == p["msg_id"]


def _cq_units(name: str) -> dict:
    """(topic, queue id) -> list of (phys offset, size, tagsCode) from the golden consume queues."""
    _, config, _, _, files = golden(name)
    out = {}
    for path in sorted(files, key=lambda p: (p.split("/")[:3], int(p.split("/")[-1]) if p.count("/") == 3 else 0)):
        parts = path.split("/")
        if parts[0] != "consumequeue" or len(parts) != 4:
            continue
        data = store_file(name, path)
        data += b"\0" * ((-len(data)) % 20)
        units = out.setdefault((parts[1], int(parts[2])), [])
        for k in range(0, len(data), 20):
            phys, size, tags = struct.unpack_from(">qiq", data, k)
            if size == 0 and phys == 0 and tags == 0:
                break
            units.append((phys, size, tags))
    return out


def _index_entries(name: str) -> list[tuple[int, int]]:
    """Every (keyHash, phyOffset) entry of the golden index files in creation (= name) order."""
    _, config, _, _, files = golden(name)
    out = []
    for path in sorted(p for p in files if p.startswith("index/")):
        data = store_file(name, path)
        count = struct.unpack_from(">i", data, 36)[0] if len(data) >= 40 else 1
        base = 40 + config.maxHashSlotNum * 4
        need = base + count * 20
        data += b"\0" * max(0, need - len(data))
        for pos in range(1, count):
            h, phys = struct.unpack_from(">iq", data, base + pos * 20)
            out.append((h, phys))
    return out


@pytest.mark.parametrize("name", ["small-roll", "default-size"])
def test_golden_dispatch_values(name):
    """cq_eligible, tags_code, index keys/hashes computed by prepare() match RocketMQ's CQ and index files."""
    _, config, table, put, _ = golden(name)
    pm = codec.prepare(table, config)
    wo = np.array([p["wrote_offset"] for p in put], np.int64)
    units = _cq_units(name)
    expect: dict = {}
    for i in np.flatnonzero(pm.cq_eligible):
        key = (table.column("topic")[int(i)].as_py(), int(pm.queue_id[i]))
        expect.setdefault(key, []).append((int(wo[i]), int(pm.sizes[i]), int(pm.tags_code[i])))
    assert set(expect) == set(units)
    for key in expect:
        assert expect[key] == units[key], key
    # put_results queue_offset == 0 for every non-eligible message
    assert all(put[i]["queue_offset"] == 0 for i in np.flatnonzero(~pm.cq_eligible))
    got = list(zip(pm.index_hash.tolist(), wo[pm.index_msg].tolist()))
    assert got == _index_entries(name)


def test_golden_dispatch_matches_reference_small_roll():
    _, config, table, put, _ = golden("small-roll")
    pm = codec.prepare(table, config)
    entries = index_entries(pm)
    for i, m in enumerate(table.to_pylist()):
        cq, tags, keys = ref_dispatch(m)
        assert bool(pm.cq_eligible[i]) == cq
        assert int(pm.tags_code[i]) == tags, i
        assert entries[i] == keys, i


def test_empty_and_degenerate_batches():
    pm = codec.prepare(codec.MESSAGE_SCHEMA.empty_table(), StoreConfig())
    assert pm.n == 0 and len(codec.encode(pm, np.zeros(0, np.int64), np.zeros(0, np.int64))) == 0
    dec = codec.decode_records(np.zeros(16, np.uint8), 0, np.zeros(0, np.int64))
    assert dec.num_rows == 0 and dec.schema == codec.DECODED_SCHEMA
    # no bodies, no properties, no keys at all (Arrow value buffers may be absent)
    for crc in (False, True):
        msgs = [msg(body=b"", properties_string="", topic=f"t{i}") for i in range(3)]
        pm, phys, qo, recs = check_against_reference(msgs, crc=crc)
        assert len(pm.index_msg) == 0 and pm.tags_code.tolist() == [0, 0, 0]


# ======================================================================= docs/FORMAT.md §9 rules
def test_rule1_body_crc_is_masked_to_31_bits():
    # find bodies whose CRC32 has the top bit set, and one without
    bodies = [b"x%d" % k for k in range(64)]
    high = [b for b in bodies if zlib.crc32(b) & 0x80000000][:3]
    low = [b for b in bodies if not zlib.crc32(b) & 0x80000000][:1]
    assert high and low
    msgs = [msg(body=b) for b in high + low]
    pm, _, _, recs = check_against_reference(msgs)
    for b, rec, c in zip(high + low, recs, pm.body_crc):
        assert int(c) == zlib.crc32(b) & 0x7FFFFFFF
        assert struct.unpack_from(">i", rec, 8)[0] == zlib.crc32(b) & 0x7FFFFFFF >= 0


@pytest.mark.parametrize("born,store", [
    ("10.0.0.1:1", "192.168.0.10:10911"),
    ("[fd00::1]:4000", "192.168.0.10:10911"),
    ("10.0.0.1:1", "[fd00::a]:10911"),
    ("[::1]:65535", "[2001:db8::ff00:42:8329]:0"),
])
def test_rule3_ipv6_host_sizes_shift_offsets(born, store):
    b6, s6 = born.startswith("["), store.startswith("[")
    msgs = [msg(born_host=born, store_host=store, sys_flag=0, body=b"abc", properties_string="TAGS\x01t\x02"),
            msg(born_host=born, store_host=store, sys_flag=(0x10 if b6 else 0) | (0x20 if s6 else 0) | 0x1)]
    pm, phys, _, recs = check_against_reference(msgs)
    B, S = (20 if b6 else 8), (20 if s6 else 8)
    for k, (m, rec) in enumerate(zip(msgs, recs)):
        sys_flag = struct.unpack_from(">i", rec, 36)[0]
        assert sys_flag == m["sys_flag"] | (0x10 if b6 else 0) | (0x20 if s6 else 0) == int(pm.sys_flag[k])
        assert len(rec) == 72 + B + S + len(m["body"]) + 1 + len(m["topic"]) + 2 + len(m["properties_string"])
        assert struct.unpack_from(">q", rec, 48 + B)[0] == m["store_timestamp"]
        assert rec[56 + B:56 + B + S] == ref_host(store)[0]
        assert struct.unpack_from(">i", rec, 68 + B + S)[0] == len(m["body"])
    dec = codec.decode_records(np.frombuffer(b"".join(recs), np.uint8), 0,
                               np.array([0, len(recs[0])], np.int64)).to_pylist()
    for k, d in enumerate(dec):
        assert ref_host(d["born_host"])[0] == ref_host(born)[0]
        assert ref_host(d["store_host"])[0] == ref_host(store)[0]
        assert d["store_timestamp"] == msgs[k]["store_timestamp"]
        assert d["msg_id"] == ref_msg_id(msgs[k], int(phys[k]))
        assert len(d["msg_id"]) == (56 if s6 else 32)


@pytest.mark.parametrize("topic,v2", [
    ("a" * 127, False),
    ("a" * 128, True),
    ("é" * 63, False),                       # 63 chars, 126 UTF-8 bytes: V1
    ("€" * 42 + "a", False),                 # 43 chars, 127 UTF-8 bytes: V1 at the limit
    ("é" * 128, True),                       # 128 chars, 256 bytes: V2, length field 256
    ("😀" * 64, True),                       # 64 code points = 128 UTF-16 units: V2
    ("😀" * 31 + "abc", False),              # 65 UTF-16 units, 127 bytes
    ("T" * 210, True),
])
def test_rule4_version_by_utf16_length_counts_utf8_bytes(topic, v2):
    assert (ref_utf16_len(topic) > 127) == v2
    pm, _, _, recs = check_against_reference([msg(topic=topic, properties_string="KEYS\x01k\x02")])
    rec = recs[0]
    assert struct.unpack_from(">i", rec, 4)[0] == (MAGIC_V2 if v2 else MAGIC_V1)
    p = 72 + 16 + 5
    raw = topic.encode()
    if v2:
        assert struct.unpack_from(">h", rec, p)[0] == len(raw)
        assert rec[p + 2:p + 2 + len(raw)] == raw
    else:
        assert rec[p] == len(raw)
        assert rec[p + 1:p + 1 + len(raw)] == raw
    d = codec.decode_one(rec)
    assert d["topic"] == topic


def test_rule5_prepared_and_rollback():
    props = "UNIQ_KEY\x01U{i}\x02KEYS\x01k{i}\x02TAGS\x01tg\x02"
    flags = [0x0, 0x4, 0x8, 0xC, 0x4 | 0x1, 0xC | 0x2]
    msgs = [msg(sys_flag=f, queue_id=1, properties_string=props.format(i=i)) for i, f in enumerate(flags)]
    pm, phys, qo, recs = check_against_reference(msgs)
    assert pm.cq_eligible.tolist() == [True, False, True, False, False, False]
    assert qo.tolist() == [0, 0, 1, 0, 0, 0]
    assert [struct.unpack_from(">q", r, 20)[0] for r in recs] == qo.tolist()
    indexed = sorted(set(pm.index_msg.tolist()))
    assert indexed == [0, 1, 2, 4]                         # ROLLBACK (3, 5) not indexed, PREPARED is
    entries = index_entries(pm)
    for i, m in enumerate(msgs):
        assert entries[i] == ref_dispatch(m)[2]
    assert entries[1] == [ref_index_hash("TopicA#U1"), ref_index_hash("TopicA#k1")]


def test_rule6_tags_code_sign_extended_java_hash():
    tags = ["TagA", string_with_hash("neg", -1), string_with_hash("min", INT_MIN), "日本語", "😀tag", "Aa", "BB",
            "a" * 40]
    assert any(ref_java_hash(t) < 0 for t in tags)
    msgs = [msg(properties_string=f"TAGS\x01{t}\x02") for t in tags]
    msgs += [msg(properties_string="TAGS\x01\x02KEYS\x01k\x02"),          # empty TAGS: dropped -> 0
             msg(properties_string=""),
             msg(sys_flag=0x2, properties_string="TAGS\x01a||b\x02")]       # multi-tags flag: plain hash
    pm = prepare(msgs)
    want = [ref_java_hash(t) for t in tags] + [0, 0, ref_java_hash("a||b")]
    assert pm.tags_code.dtype == np.int64
    assert pm.tags_code.tolist() == want
    neg = [i for i, w in enumerate(want) if w < 0]
    # sign extension: the int64 in the CQ unit is 0xFFFFFFFF........
    for i in neg:
        assert struct.pack(">q", int(pm.tags_code[i]))[:4] == b"\xff\xff\xff\xff"


@pytest.mark.parametrize("delay,expect_ms", [
    ("1", 1000), ("3", 10000), ("18", 7200000), ("19", 7200000), ("2147483647", 7200000),
    ("+2", 5000), ("0", None), ("-1", None), ("-2147483648", None),
])
def test_rule6_delay_tags_code(delay, expect_ms):
    ts = 1_710_000_000_123
    m = msg(topic="SCHEDULE_TOPIC_XXXX", queue_id=2, store_timestamp=ts,
            properties_string=f"TAGS\x01tg\x02DELAY\x01{delay}\x02REAL_TOPIC\x01T\x02REAL_QID\x010\x02")
    pm = prepare([m])
    want = ts + expect_ms if expect_ms is not None else ref_java_hash("tg")
    assert int(pm.tags_code[0]) == want
    if re.fullmatch(r"[+-]?[0-9]+", delay) and -2**31 <= int(delay) < 2**31:
        assert ref_dispatch(m)[1] == want


def test_rule6_delay_only_on_schedule_topic_and_custom_levels():
    ts = 1_710_000_000_000
    msgs = [msg(topic="OtherTopic", store_timestamp=ts, properties_string="DELAY\x013\x02"),
            msg(topic="OtherTopic", store_timestamp=ts, properties_string="DELAY\x01not-a-number\x02"),
            msg(topic="SCHEDULE_TOPIC_XXXX", store_timestamp=ts, properties_string="DELAY\x01\x02TAGS\x01x\x02"),
            msg(topic="SCHEDULE_TOPIC_XXXX", store_timestamp=ts, properties_string="DELAY\x015\x02")]
    pm = prepare(msgs)
    assert pm.tags_code.tolist() == [0, 0, ref_java_hash("x"), ts + 60000]
    # a custom messageDelayLevel changes both the table and the cap
    pm = prepare([msg(topic="SCHEDULE_TOPIC_XXXX", store_timestamp=ts, properties_string="DELAY\x019\x02")],
                 StoreConfig(messageDelayLevel="2s 1m 1h 1d"))
    assert int(pm.tags_code[0]) == ts + 86400000


def test_rule8_index_key_hash_abs_and_min_value():
    prefix = "TopicA#"
    k_min = string_with_hash(prefix, 1 << 31)[len(prefix):]           # hash == Integer.MIN_VALUE
    k_neg = string_with_hash(prefix, (1 << 32) - 12345)[len(prefix):]  # hash == -12345
    k_pos = string_with_hash(prefix, 12345)[len(prefix):]              # hash == 12345 (collides)
    m = msg(properties_string=f"KEYS\x01{k_min} {k_neg}  {k_pos} \x02UNIQ_KEY\x01uk\x02")
    pm = prepare([m])
    assert pm.index_msg.tolist() == [0, 0, 0, 0]
    assert pm.index_hash.tolist() == [ref_index_hash("TopicA#uk"), 0, 12345, 12345]
    assert ref_java_hash(prefix + k_min) == INT_MIN
    assert codec.index_key_hash(np.array([INT_MIN, -5, 5, 2**31 - 1], np.int32)).tolist() == [0, 5, 5, 2**31 - 1]


def test_rule8_index_keys_order_and_tokens():
    msgs = [msg(topic="t1", properties_string="KEYS\x01  a b  c \x02UNIQ_KEY\x01U0\x02"),
            msg(topic="t2", properties_string="KEYS\x01dup dup\x02"),
            msg(topic="t3", properties_string="KEYS\x01\t tab\x02"),                # tab is not a separator
            msg(topic="t4", properties_string="UNIQ_KEY\x01only\x02"),
            msg(topic="t5", properties_string="KEYS\x01   \x02"),                   # only separators
            msg(topic="t6", properties_string="TAGS\x01x\x02"),
            msg(topic="日本", properties_string="KEYS\x01ключ 😀\x02")]
    pm = prepare(msgs)
    entries = index_entries(pm)
    assert entries[0] == [ref_index_hash(s) for s in ("t1#U0", "t1#a", "t1#b", "t1#c")]
    assert entries[1] == [ref_index_hash("t2#dup")] * 2
    assert entries[2] == [ref_index_hash("t3#\t"), ref_index_hash("t3#tab")]
    assert entries[3] == [ref_index_hash("t4#only")]
    assert entries[4] == [] and entries[5] == []
    assert entries[6] == [ref_index_hash("日本#ключ"), ref_index_hash("日本#😀")]
    # message order is dispatch order
    assert pm.index_msg.tolist() == sorted(pm.index_msg.tolist())


def test_rule11_properties_verbatim_and_parse_semantics():
    cases = [
        "b\x012\x02a\x011\x02",                                  # unsorted: kept as is
        "TAGS\x01first\x02TAGS\x01second\x02",                    # later duplicate wins
        "TAGS\x01t\x02KEYS\x01k1 k2",                            # no trailing separator
        "KEYS\x01a\x01b\x02",                                     # value contains U+0001
        "TAGS\x01\x02TAGS\x01kept\x02",                          # empty value dropped...
        "TAGS\x01kept\x02TAGS\x01\x02",                          # ...and does not override
        "\x01v\x02TAGS\x01x\x02",                                # empty name dropped
        "\x02\x02TAGS\x01y\x02\x02",                             # empty segments
        "KEYS\x01k\x02\x02UNIQ_KEY\x01日本語😀\x02",
        "TAGS\x01x",                                             # short tail
        "ab\x02TAGS\x01z\x02",                                   # segment without separator
        "\x01\x01\x01\x02KEYS\x01q\x02",                          # name empty
    ]
    msgs = [msg(properties_string=s) for s in cases]
    pm, _, _, recs = check_against_reference(msgs)
    entries = index_entries(pm)
    for i, (s, rec) in enumerate(zip(cases, recs)):
        raw = s.encode()
        assert rec.endswith(struct.pack(">h", len(raw)) + raw)            # verbatim, not re-sorted
        assert codec.decode_one(rec)["properties_string"] == s
        _, tags, keys = ref_dispatch(msgs[i])
        assert int(pm.tags_code[i]) == tags, s
        assert entries[i] == keys, s
        assert textforms.parse_properties_string(s) == ref_parse_props(s)
    assert ref_parse_props(cases[3]) == {"KEYS": "a\x01b"}
    assert entries[3] == [ref_index_hash("TopicA#a\x01b")]
    assert int(pm.tags_code[1]) == ref_java_hash("second")
    assert int(pm.tags_code[4]) == int(pm.tags_code[5]) == ref_java_hash("kept")


def test_rule12_crc_property_digits_least_significant_first():
    msgs = [msg(properties_string="TAGS\x01t\x02", body=b"a" * 10),
            msg(properties_string="TAGS\x01t", body=b""),                 # separator appended first
            msg(properties_string="", born_host="[::2]:9", store_host="[fd00::a]:10911"),
            msg(topic="T" * 200, properties_string="KEYS\x01日本\x02")]
    pm, phys, qo, recs = check_against_reference(msgs, crc=True, base=65536 * 3 + 17)
    for rec in recs:
        tail = rec[-20:]
        assert tail[:9] == b"__CRC32#\x01" and tail[-1:] == b"\x02"
        c = zlib.crc32(rec[:-20]) & 0x7FFFFFFF
        assert tail[9:19].decode()[::-1].lstrip("0") == str(c).lstrip("0")
    # sizes include the reserved 20 bytes (+1 separator when missing)
    assert pm.sizes.tolist() == [len(r) for r in recs]
    assert struct.unpack_from(">h", recs[1], len(recs[1]) - 27 - 2)[0] == len("TAGS\x01t") + 1 + 20
    # parsing the stored properties sees the CRC property
    d = codec.decode_one(recs[0])
    assert ref_parse_props(d["properties_string"])["__CRC32#"] == recs[0][-11:-1].decode()


def test_rule12_crc_digits_known_value():
    # 123 -> "3210000000" (docs/FORMAT.md §1.8); check our reference itself on a crafted record
    c = 123
    assert "".join(str(c // 10 ** k % 10) for k in range(10)) == "3210000000"


@pytest.mark.parametrize("given,kept", [
    ("a\x011\x02__CRC32#\x010000000000\x02b\x012\x02", "a\x011\x02b\x012\x02"),
    ("__CRC32#\x01123\x02a\x011\x02", "a\x011\x02"),
    ("a\x011\x02__CRC32#\x01123", "a\x011\x02"),                     # no separator after it: rest cut
    ("__CRC32#\x011\x02__CRC32#\x012\x02", ""),
    ("a\x01__CRC32#\x01x\x02", "a\x01__CRC32#\x01x\x02"),               # inside a value: kept
    ("x__CRC32#\x011\x02", "x__CRC32#\x011\x02"),                      # other name: kept
    ("__CRC32#x\x011\x02", "__CRC32#x\x011\x02"),
])
def test_crc_property_deletes_incoming_crc32(given, kept):
    """With enabledAppendPropCRC the broker deletes an incoming __CRC32# property first
    (CommitLog.asyncPutMessage -> MessageExtBrokerInner.deleteProperty -> MessageUtils.deleteProperty)."""
    m = msg(properties_string=given)
    pm, phys, qo, recs = encode_list([m], crc=True)
    assert recs[0] == ref_record(dict(m, properties_string=kept), int(phys[0]), 0, crc=True)
    # without the option the string is stored verbatim
    pm, phys, qo, recs = encode_list([m], crc=False)
    assert recs[0] == ref_record(m, int(phys[0]), 0)


# ============================================================================ property tests
@SETTINGS
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40), max_size=8))
def test_java_hash_matches_reference(strings):
    strings = strings + ["", "😀", "\x00", "Aa", "BB"]
    got = codec.java_hash(pa.array(strings, pa.string()))
    assert got.dtype == np.int32
    assert got.tolist() == [ref_java_hash(s) for s in strings]
    assert codec.utf16_lengths(pa.array(strings)).tolist() == [ref_utf16_len(s) for s in strings]


def test_java_hash_known_values_and_sliced_input():
    arr = pa.array(["x", "hello", "Aa", "BB", "", None, "😀"], pa.string())
    assert codec.java_hash(arr).tolist() == [120, 99162322, 2112, 2112, 0, 0, ref_java_hash("😀")]
    assert codec.java_hash(arr.slice(1, 3)).tolist() == [99162322, 2112, 2112]
    assert codec.java_hash(pa.chunked_array([arr[:2], arr[2:]])).tolist() == codec.java_hash(arr).tolist()
    assert codec.java_hash(pa.array([], pa.string())).tolist() == []


_chars = st.characters(blacklist_categories=("Cs",))
_ipv4 = st.builds(lambda a, p: f"{a}:{p}", st.ip_addresses(v=4), st.integers(0, 65535))
_ipv6 = st.builds(lambda a, p: f"[{a}]:{p}", st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None),
                  st.integers(0, 65535))
_host = st.one_of(_ipv4, _ipv6)


def _topic_ok(t: str) -> bool:
    raw = t.encode()
    return 0 < len(raw) and (ref_utf16_len(t) > 127 or len(raw) <= 127)


_topic = st.one_of(st.text(alphabet=_chars, min_size=1, max_size=40),
                   st.text(alphabet=_chars, min_size=120, max_size=200),
                   st.sampled_from(["SCHEDULE_TOPIC_XXXX", "%RETRY%g", "a" * 127, "a" * 128])).filter(_topic_ok)
_pname = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
                 min_size=1, max_size=8) | st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "__CRC32#"])
_pvalue = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x02"), max_size=12) \
    | st.sampled_from(["1", "19", "0", "-3", "a b  c"])


@st.composite
def _properties(draw):
    pairs = draw(st.lists(st.tuples(_pname, _pvalue), max_size=6))
    s = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
    if s and draw(st.booleans()):
        s = s[:-1]
    return s


@st.composite
def _message(draw):
    born, store = draw(_host), draw(_host)
    sys_flag = draw(st.integers(INT_MIN, 2**31 - 1)) & ~0x30
    if born.startswith("[") and draw(st.booleans()):
        sys_flag |= 0x10
    if store.startswith("[") and draw(st.booleans()):
        sys_flag |= 0x20
    props = draw(_properties())
    topic = draw(_topic)
    if topic == "SCHEDULE_TOPIC_XXXX":
        d = ref_parse_props(props).get("DELAY")
        assume(d is None or (re.fullmatch(r"[+-]?[0-9]{1,10}", d) is not None and -2**31 <= int(d) < 2**31))
    return msg(topic=topic, queue_id=draw(st.integers(0, 2**31 - 1)), flag=draw(st.integers(INT_MIN, 2**31 - 1)),
               sys_flag=sys_flag, born_timestamp=draw(st.integers(-2**63, 2**63 - 1)),
               store_timestamp=draw(st.integers(0, 2**62)), born_host=born, store_host=store,
               reconsume_times=draw(st.integers(INT_MIN, 2**31 - 1)),
               prepared_transaction_offset=draw(st.integers(-2**63, 2**63 - 1)),
               body=draw(st.binary(max_size=300)), properties_string=props)


@SETTINGS
@given(st.lists(_message(), min_size=1, max_size=6), st.integers(0, 2**40), st.booleans())
def test_encode_decode_round_trip(msgs, base, crc):
    pm, phys, qo, recs = check_against_reference(msgs, crc=crc, base=base)
    buf = np.frombuffer(b"".join(recs), np.uint8)
    starts = np.concatenate([[0], np.cumsum(pm.sizes)[:-1]]).astype(np.int64)
    dec = codec.decode_records(buf, base, starts).to_pylist()
    entries = index_entries(pm)
    for i, (m, d) in enumerate(zip(msgs, dec)):
        b6, s6 = m["born_host"].startswith("["), m["store_host"].startswith("[")
        for f in ("topic", "queue_id", "flag", "born_timestamp", "store_timestamp", "reconsume_times",
                  "prepared_transaction_offset", "body"):
            assert d[f] == m[f], f
        if not crc:
            assert d["properties_string"] == m["properties_string"]
        assert d["sys_flag"] == m["sys_flag"] | (0x10 if b6 else 0) | (0x20 if s6 else 0)
        assert ref_host(d["born_host"])[0] == ref_host(m["born_host"])[0]
        assert ref_host(d["store_host"])[0] == ref_host(m["store_host"])[0]
        assert d["commitlog_offset"] == phys[i] and d["queue_offset"] == qo[i]
        assert d["store_size"] == len(recs[i]) and d["body_crc"] == zlib.crc32(m["body"]) & 0x7FFFFFFF
        assert d["msg_id"] == ref_msg_id(m, int(phys[i]))
        assert codec.decode_message_id(d["msg_id"]) == (ref_host(m["store_host"])[0], int(phys[i]))
        cq, tags, keys = ref_dispatch(m)
        assert bool(pm.cq_eligible[i]) == cq and int(pm.tags_code[i]) == tags and entries[i] == keys


@SETTINGS
@given(st.lists(st.text(alphabet=st.sampled_from("\x01\x02abTAGSKEY😀 "), max_size=24), min_size=1, max_size=6))
def test_property_parsers_match_java_parser(strings):
    wanted = ("TAGS", "KEYS", "a", "b", "😀")
    got = properties.property_values(pa.array(strings, pa.large_string()), wanted)
    mapped, extra = properties.parse_properties(pa.array(strings, pa.string()), wanted)
    for i, s in enumerate(strings):
        ref = ref_parse_props(s)
        for name, col in got.items():
            assert col[i].as_py() == ref.get(name), (s, name)
            assert extra[name][i].as_py() == ref.get(name), (s, name)
        assert dict(mapped[i].as_py()) == ref
        assert textforms.parse_properties_string(s) == ref


@SETTINGS
@given(st.binary(max_size=2000), st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 2000)), max_size=20))
def test_crc32_slices_matches_zlib(data, ranges):
    arr = np.frombuffer(data, np.uint8)
    n = len(data)
    starts = np.array([min(a, b, n) for a, b in ranges], np.int64)
    ends = np.array([min(max(a, b), n) for a, b in ranges], np.int64)
    got = crc32.crc32_slices(arr, starts, ends)
    assert got.dtype == np.uint32
    assert got.tolist() == [zlib.crc32(data[s:e]) for s, e in zip(starts, ends)]


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.binary(max_size=64)), max_size=12), st.integers(0, 3))
def test_b64decode_column_matches_base64(values, cut):
    texts = [None if v is None else base64.b64encode(v).decode() for v in values]
    arr = pa.array(texts, pa.string())
    got = inputs.b64decode_column(arr, lambda i: f"row {i}")
    assert got.to_pylist() == values
    cut = min(cut, len(values))
    sliced = pa.array(["QUJD"] * cut + texts, pa.large_string()).slice(cut)
    assert inputs.b64decode_column(sliced, lambda i: f"row {i}").to_pylist() == values


# ============================================================================ bad input
def LABEL(i: int) -> str:
    return f"in.jsonl line {i + 1}"


def assert_problem(exc: InputError, row_label: str, field: str, *words):
    hits = [p for p in exc.problems if row_label in p and f"'{field}'" in p]
    assert hits, f"no problem naming {row_label!r} and field {field!r}: {exc.problems}"
    for w in words:
        assert any(w in p for p in hits), (w, hits)
    assert row_label in str(exc) and field in str(exc)


def bad_prepare(bad: dict, config=None, row=2):
    msgs = [msg() for _ in range(4)]
    msgs[row] = msg(**bad)
    with pytest.raises(InputError) as ei:
        prepare(msgs, config, LABEL)
    return ei.value


def test_bad_body_too_large():
    e = bad_prepare(dict(body=b"x" * 1025), StoreConfig(maxMessageSize=1024))
    assert_problem(e, "line 3", "body", "1025", "maxMessageSize")
    prepare([msg(body=b"x" * 1024)], StoreConfig(maxMessageSize=1024))     # at the limit: fine


def test_bad_properties_too_long():
    long_props = "k\x01" + "é" * 16383 + "\x02"                           # 2 + 32766 + 1 = 32769 bytes
    e = bad_prepare(dict(properties_string=long_props))
    assert_problem(e, "line 3", "properties", "32767")
    ok = "k\x01" + "v" * 32764 + "\x02"                                    # exactly 32767 bytes
    pm = prepare([msg(properties_string=ok)])
    assert int(pm.parts["stored_prop_len"][0]) == 32767
    # with the CRC property the 20 reserved bytes count too
    e = bad_prepare(dict(properties_string=ok), StoreConfig(enabledAppendPropCRC=True))
    assert_problem(e, "line 3", "properties")


@pytest.mark.parametrize("topic", [
    "é" * 64,                       # 64 chars (V1), 128 bytes
    "😀" * 31 + "ab" + "€",         # 65 UTF-16 units (V1), 124 + 2 + 3 = 129 bytes
    "日" * 10923,                   # V2, 32769 bytes
])
def test_bad_topic_too_long(topic):
    e = bad_prepare(dict(topic=topic))
    assert_problem(e, "line 3", "topic")


def test_topic_limits_ok():
    """The longest topics each record form holds: 127 UTF-8 bytes in V1's 1-byte length, 32767 in
    V2's 2-byte length; each record's TOTALSIZE counts the topic's bytes and its length field."""
    pm = prepare([msg(topic="é" * 63 + "a"), msg(topic="x" * 32767)])
    assert pm.n == 2
    assert list(pm.parts["is_v2"]) == [False, True]
    assert list(pm.sizes) == [cl.record_size(5, 127, 0), cl.record_size(5, 32767, 0, v2=True)]


def test_bad_empty_topic():
    assert_problem(bad_prepare(dict(topic="")), "line 3", "topic", "empty")


@pytest.mark.parametrize("field", ["born_host", "store_host"])
@pytest.mark.parametrize("host", ["10.0.0.1", "10.0.0.256:1", "[::1]", "::1:80", "[zz::1]:80", "1.2.3.4:70000",
                                  "host.example:80", "1.2.3.4:-1", "[::1]:", ""])
def test_bad_hosts(field, host):
    assert_problem(bad_prepare({field: host}), "line 3", field)


@pytest.mark.parametrize("bit,field", [(0x10, "born_host"), (0x20, "store_host")])
def test_bad_ipv6_flag_with_ipv4_host(bit, field):
    e = bad_prepare(dict(sys_flag=bit | 0x4))
    assert_problem(e, "line 3", "sys_flag", hex(bit))
    prepare([msg(sys_flag=bit, **{field: "[::1]:1"})])        # consistent: fine


@pytest.mark.parametrize("field", ["topic", "queue_id", "body", "store_timestamp"])
def test_bad_missing_required(field):
    assert_problem(bad_prepare({field: None}), "line 3", field, "missing")


def test_missing_optional_fields_default():
    m = {"topic": "t", "queue_id": 1, "body": b"b", "store_timestamp": 5}
    pm = codec.prepare(pa.Table.from_pylist([m], schema=codec.MESSAGE_SCHEMA), StoreConfig())
    full = msg(topic="t", queue_id=1, body=b"b", store_timestamp=5, born_timestamp=5,
               born_host="127.0.0.1:10911", store_host="127.0.0.1:10911")
    buf = codec.encode(pm, np.array([0]), np.array([0]))
    assert bytes(buf) == ref_record(full, 0, 0)


def test_bad_negative_queue_id():
    assert_problem(bad_prepare(dict(queue_id=-1)), "line 3", "queue_id", "-1")


@pytest.mark.parametrize("delay", ["abc", "1.5", " 3", "3 ", "99999999999", "2147483648", "-2147483649", "0x10", "++1"])
def test_bad_delay_on_schedule_topic(delay):
    e = bad_prepare(dict(topic="SCHEDULE_TOPIC_XXXX", properties_string=f"DELAY\x01{delay}\x02"))
    assert_problem(e, "line 3", "properties", "DELAY")


def test_error_lists_every_bad_row():
    msgs = [msg(queue_id=-1), msg(), msg(topic=""), msg(born_host="nope")]
    with pytest.raises(InputError) as ei:
        prepare(msgs, None, LABEL)
    text = "\n".join(ei.value.problems)
    assert "line 1" in text and "line 3" in text and "line 4" in text and "line 2" not in text


# ---------------------------------------------------------------------------- through inputs
def _raw(rows: list[dict], props_type=None) -> pa.Table:
    cols = {}
    for name in ("topic", "queue_id", "store_timestamp", "body"):
        cols[name] = [r.get(name) for r in rows]
    t = pa.table({"topic": pa.array(cols["topic"], pa.string()),
                  "queue_id": pa.array(cols["queue_id"], pa.int64()),
                  "store_timestamp": pa.array(cols["store_timestamp"], pa.int64()),
                  "body": pa.array(cols["body"], pa.binary())})
    if any("properties" in r for r in rows):
        t = t.append_column("properties", pa.array([r.get("properties") for r in rows], props_type))
    if any("properties_string" in r for r in rows):
        t = t.append_column("properties_string", pa.array([r.get("properties_string") for r in rows], pa.string()))
    return t


def _rows(n=4, **bad):
    rows = [dict(topic="t", queue_id=0, store_timestamp=1, body=b"x") for _ in range(n)]
    rows[2].update(bad)
    return rows


STRUCT_PROPS = pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())]))
PAIR_PROPS = pa.list_(pa.list_(pa.string()))


@pytest.mark.parametrize("name", ["a\x01b", "a\x02b", "\x01", ""])
def test_bad_property_name_separators(name):
    rows = _rows(properties=[{"name": "x", "value": "1"}, {"name": name, "value": "v"}])
    for r in rows[:2] + rows[3:]:
        r["properties"] = []
    with pytest.raises(InputError) as ei:
        inputs.to_canonical(_raw(rows, STRUCT_PROPS), LABEL, "body")
    assert_problem(ei.value, "line 3", "properties")


def test_bad_property_value_with_property_separator():
    rows = _rows(properties=[["x", "a\x02b"]])
    with pytest.raises(InputError) as ei:
        inputs.to_canonical(_raw(rows, PAIR_PROPS), LABEL, "body")
    assert_problem(ei.value, "line 3", "properties", "U+0002")
    # U+0001 inside a value is legal and stored verbatim
    rows = _rows(properties=[["KEYS", "a\x01b"]])
    t = inputs.to_canonical(_raw(rows, PAIR_PROPS), LABEL, "body")
    assert t.column("properties_string")[2].as_py() == "KEYS\x01a\x01b\x02"


def test_bad_properties_string_disagrees():
    rows = _rows(properties=[["a", "1"], ["b", "2"]], properties_string="b\x012\x02a\x011\x02")
    for r in rows[:2] + rows[3:]:
        r["properties"], r["properties_string"] = [["a", "1"]], "a\x011\x02"
    with pytest.raises(InputError) as ei:
        inputs.to_canonical(_raw(rows, PAIR_PROPS), LABEL, "body")
    assert_problem(ei.value, "line 3", "properties_string")
    # agreeing strings (also without the final separator) are kept verbatim
    rows[2]["properties_string"] = "a\x011\x02b\x012"
    t = inputs.to_canonical(_raw(rows, PAIR_PROPS), LABEL, "body")
    assert t.column("properties_string").to_pylist()[2] == "a\x011\x02b\x012"


def test_bad_pair_shape():
    rows = _rows(properties=[["a", "1", "x"]])
    with pytest.raises(InputError) as ei:
        inputs.to_canonical(_raw(rows, PAIR_PROPS), LABEL, "body")
    assert_problem(ei.value, "line 3", "properties")


@pytest.mark.parametrize("field,value", [("queue_id", 2**31), ("queue_id", -2**31 - 1), ("flag", 2**40),
                                          ("sys_flag", -2**33), ("reconsume_times", 2**31)])
def test_bad_int32_overflow(field, value):
    t = _raw(_rows())
    col = [0, 0, value, 0]
    if field in t.column_names:
        t = t.set_column(t.column_names.index(field), field, pa.array(col, pa.int64()))
    else:
        t = t.append_column(field, pa.array(col, pa.int64()))
    with pytest.raises(InputError) as ei:
        inputs.to_canonical(t, LABEL, "body")
    assert_problem(ei.value, "line 3", field, str(value))


@pytest.mark.parametrize("field,col", [
    ("queue_id", pa.array([0.0, 1.0, 2.5, 3.0])),                  # fractional: not truncated silently
    ("queue_id", pa.array([0.0, 1.0, 3e10, 3.0])),                 # out of range: not wrapped silently
    ("flag", pa.array(["0", "1", "x", "3"])),
    ("store_timestamp", pa.array([0, 1, 2**64 - 1, 3], pa.uint64())),
])
def test_bad_non_integer_source_types(field, col):
    t = _raw(_rows())
    if field in t.column_names:
        t = t.set_column(t.column_names.index(field), field, col)
    else:
        t = t.append_column(field, col)
    with pytest.raises(InputError) as ei:
        inputs.to_canonical(t, LABEL, "body")
    assert_problem(ei.value, "line 3", field)
    assert not any("line 1" in p or "line 2" in p for p in ei.value.problems)


def test_integral_doubles_are_accepted():
    t = _raw(_rows()).set_column(1, "queue_id", pa.array([0.0, 1.0, 2.0, None]))
    assert inputs.to_canonical(t, LABEL, "body").column("queue_id").to_pylist() == [0, 1, 2, None]


def _jsonl(tmp_path, rows) -> str:
    p = tmp_path / "in.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def _json_msg(**kw):
    m = dict(topic="t", queue_id=0, flag=0, sys_flag=0, born_timestamp=1, store_timestamp=2,
             born_host="1.2.3.4:5", store_host="5.6.7.8:9", reconsume_times=0, prepared_transaction_offset=0,
             body_b64=base64.b64encode(b"body").decode(), properties=[["a", "1"]], properties_string="a\x011\x02")
    m.update(kw)
    return m


@pytest.mark.parametrize("b64", ["abc", "ab=c", "a===", "ab!d", "QUJD\nQUJD", "=AAA", "QQ==QQ=="])
def test_bad_base64(tmp_path, b64):
    rows = [_json_msg() for _ in range(4)]
    rows[2]["body_b64"] = b64
    with pytest.raises(InputError) as ei:
        inputs.jsonl_to_table(_jsonl(tmp_path, rows))
    assert_problem(ei.value, "line 3", "body_b64", "base64")


def test_jsonl_missing_fields_reported_by_prepare(tmp_path):
    rows = [_json_msg() for _ in range(4)]
    del rows[2]["topic"]
    table = inputs.jsonl_to_table(_jsonl(tmp_path, rows))
    with pytest.raises(InputError) as ei:
        codec.prepare(table, StoreConfig(), LABEL)
    assert_problem(ei.value, "line 3", "topic", "missing")
    # a line without a body is reported when read, naming the JSON field and its text alternative
    del rows[1]["body_b64"]
    with pytest.raises(InputError) as ei:
        inputs.jsonl_to_table(_jsonl(tmp_path, rows))
    assert_problem(ei.value, "line 2", "body_b64", "missing")
    assert_problem(ei.value, "line 2", "body", "UTF-8 text")


def test_jsonl_properties_string_disagrees(tmp_path):
    rows = [_json_msg() for _ in range(4)]
    rows[2]["properties_string"] = "a\x012\x02"
    with pytest.raises(InputError) as ei:
        inputs.jsonl_to_table(_jsonl(tmp_path, rows))
    assert_problem(ei.value, "line 3", "properties_string")
