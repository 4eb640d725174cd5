"""Fuzzed readers: damaged and hostile stores never hang, never end in a raw traceback, and
``verify`` names every damaged file.

Seeded (``derandomize=True``) hypothesis tests (``make long``: twice the examples) corrupt real stores and drive every reader:

* record decoding: ``codec.decode_one`` / ``decode_records`` / ``decode_valid_records`` against
  the pure-Python ``records.decode_message``, the numba record walk and ``verify.commitlog.check_records``;
* one damaged commitlog segment: the walk + decode of ``rangescan.segment_messages``, record reads
  through a ``StoreReader`` and ``verify.verify_segment``;
* damaged store trees (flipped bytes, truncations, zeroed 4 KiB pages, missing and extra files):
  ``query.open_store`` and its methods (keys, ids, queue offsets, times, RocketMQ's answers),
  ``keylookup.lookup_keys_local``, ``inspection.stats`` and ``verify.verify_store``, on a
  rocketlake store (adopted small-roll, then expired: two Delta versions and a Delta checkpoint)
  and on the broker's store itself (no manifest: a broker's scan);
* damaged Delta logs (commit JSON truncated, garbage, deleted) and garbage manifest rows;
* ``jobs/query.py`` and ``jobs/inspect.py`` in subprocesses for a few damaged stores.

Properties: every reader returns or raises ``errors.StoreError`` (``CorruptStore``: one line
``<path>@<offset>: <what>`` with a path inside the store); nothing is opened outside the store
(an audit hook watches ``open``); every example ends within a deadline; ``verify`` lists every
damaged store file (and every damaged Delta commit a reader depends on). Base stores are built
once per module without Spark; each example damages files in place and restores their bytes.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import event, given, HealthCheck, Phase, settings, strategies as st

from conftest import ROOT
from support.opshelp import small_config
from support.longrun import LONG
from storelib.ops import adopt, expire as retention, inspect as inspection
from storelib.codec import messages as codec
from storelib import errors
from storelib.format import commitlog as cl, javahash, paths
from storelib.read import keylookup, query, rangescan
from storelib.table import manifest
from storelib.io import storage
from storelib.verify import commitlog as verify_records, driver as verify
from storelib.verify.access import VerifyContext
from storelib.format.records import decode_message      # the pure-Python reference decoder
from storelib.table import snapshots

pytestmark = pytest.mark.timeout(240, method="thread")

CLEAN = (errors.StoreError, errors.StoreNotFound)
PAGE = 4096
EXAMPLE_SECONDS = 20          # per-example watchdog (a normal example takes well under 0.2 s)


# No "explain" phase (it reruns slow examples many times); FUZZ_NO_SHRINK=1 reports the first failure as found.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate) + (() if os.environ.get("FUZZ_NO_SHRINK") else (Phase.shrink,))


def fuzz(n: int):
    """``n`` examples in ``make long``, half as many in ``make test``."""
    return settings(max_examples=n if LONG else max(20, n // 2), derandomize=True, database=None, deadline=10_000, print_blob=True,
                    phases=PHASES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                          HealthCheck.function_scoped_fixture])


# ----------------------------------------------------------------------------- harness
class Hang(BaseException):
    """Raised by the watchdog (a BaseException: a reader's ``except Exception`` cannot swallow it)."""


@contextlib.contextmanager
def watchdog(what: str, seconds: float = EXAMPLE_SECONDS):
    def fire(signum, frame):
        raise Hang(f"no answer within {seconds}s: {what}")
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


_AUDIT = {"root": None, "store": None, "escapes": []}


def _audit(what, args):
    if what != "open" or _AUDIT["store"] is None:
        return
    try:
        p = args[0]
        if isinstance(p, int):
            return
        p = os.path.abspath(os.fsdecode(p))
        if p.startswith(_AUDIT["root"] + os.sep) and not p.startswith(_AUDIT["store"] + os.sep):
            _AUDIT["escapes"].append(p)
    except Exception:  # noqa: BLE001 - an audit hook must never fail
        pass


sys.addaudithook(_audit)


@contextlib.contextmanager
def confined(store: str):
    """Record every file opened under the fixtures' root but outside ``store``."""
    _AUDIT["store"], _AUDIT["escapes"] = os.path.abspath(store), []
    try:
        yield
    finally:
        _AUDIT["store"] = None
    assert not _AUDIT["escapes"], f"read outside the store: {_AUDIT['escapes'][:3]}"


def check_clean(e: BaseException) -> None:
    text = str(e)
    assert text and "\n" not in text, f"{type(e).__name__} message is not one line: {text!r}"
    if isinstance(e, errors.CorruptStore):
        assert not os.path.isabs(e.path) and ".." not in e.path.split("/"), e.path


def call(name: str, fn, *args, **kw):
    """A reader's result, or None when it failed with a clean project error."""
    try:
        out = fn(*args, **kw)
        event(f"{name}: answered")
        return out
    except CLEAN as e:
        check_clean(e)
        event(f"{name}: {type(e).__name__}")
        return None
    except Exception as e:  # the property under test
        raise AssertionError(f"{name} ended in a raw {type(e).__name__}: {e}") from e


class Scratch:
    """Damage files of a store in place; ``restore`` puts every byte (and file) back."""

    def __init__(self, root: str):
        self.root = root
        self.saved: dict = {}
        self.new_dirs: list = []
        self.log: list = []

    def p(self, rel):
        return os.path.join(self.root, rel)

    def _save(self, rel):
        if rel not in self.saved:
            path = self.p(rel)
            self.saved[rel] = open(path, "rb").read() if os.path.isfile(path) else None

    def bytes_of(self, rel):
        path = self.p(rel)
        return open(path, "rb").read() if os.path.isfile(path) else None

    def flip(self, rel, offset, mask):
        if not os.path.isfile(self.p(rel)):
            return
        self._save(rel)
        with open(self.p(rel), "r+b") as fh:
            size = os.fstat(fh.fileno()).st_size
            if not size:
                return
            offset %= size
            fh.seek(offset)
            b = fh.read(1)[0]
            fh.seek(offset)
            fh.write(bytes([b ^ mask]))
        self.log.append(("flip", rel, offset, mask))

    def put(self, rel, offset, data: bytes):
        if not os.path.isfile(self.p(rel)):
            return
        self._save(rel)
        with open(self.p(rel), "r+b") as fh:
            fh.seek(offset)
            fh.write(data)
        self.log.append(("put", rel, offset, data))

    def truncate(self, rel, size):
        if not os.path.isfile(self.p(rel)):
            return
        self._save(rel)
        with open(self.p(rel), "r+b") as fh:
            fh.truncate(size)
        self.log.append(("truncate", rel, size))

    def zero_page(self, rel, page):
        if not os.path.isfile(self.p(rel)):
            return
        self._save(rel)
        with open(self.p(rel), "r+b") as fh:
            size = os.fstat(fh.fileno()).st_size
            at = (page * PAGE) % max(size, 1)
            at -= at % PAGE
            fh.seek(at)
            fh.write(bytes(min(PAGE, size - at)))
        self.log.append(("zero_page", rel, page))

    def delete(self, rel):
        self._save(rel)
        if os.path.isfile(self.p(rel)):
            os.remove(self.p(rel))
        self.log.append(("delete", rel))

    def write(self, rel, data: bytes):
        self._save(rel)
        d = os.path.dirname(self.p(rel))
        missing = []
        while not os.path.isdir(d):
            missing.append(d)
            d = os.path.dirname(d)
        for d in reversed(missing):
            os.mkdir(d)
            self.new_dirs.append(d)
        with open(self.p(rel), "wb") as fh:
            fh.write(data)
        self.log.append(("write", rel, len(data)))

    def changed(self) -> set:
        return {rel for rel, data in self.saved.items() if self.bytes_of(rel) != data}

    def restore(self):
        for rel, data in self.saved.items():
            path = self.p(rel)
            if data is None:
                if os.path.isfile(path):
                    os.remove(path)
                continue
            with open(path, "r+b" if os.path.isfile(path) else "wb") as fh:
                fh.write(data)
                fh.truncate(len(data))
        for d in reversed(self.new_dirs):
            os.rmdir(d)
        self.saved, self.new_dirs = {}, []


@contextlib.contextmanager
def damaged(root: str):
    s = Scratch(root)
    try:
        yield s
    finally:
        s.restore()


def names(rep, rel: str) -> bool:
    return any(p.startswith(f"{rel}@") for p in rep.problems)


# ----------------------------------------------------------------------------- base stores
class Base:
    """One base store: its files, record starts, messages and targeted queries."""

    def __init__(self, path: str, config=None):
        self.path = path
        self.reader = query.open_store(path, config=config)
        self.snap = manifest.load_snapshot(storage.Store(path)) if self.reader.snapshot.source == "manifest" else None
        self.files = self.reader.files
        self.config = self.files.config
        st_ = storage.Store(path)
        self.store = st_
        self.messages = []
        self.starts = {}
        for seg in self.files.commitlog:
            buf = np.frombuffer(st_.read(seg.rel, 0, seg.valid), np.uint8)
            s, _, _ = codec.record_starts(buf, 0, len(buf))
            self.starts[seg.rel] = [int(x) for x in s]
            for t in rangescan.segment_messages(st_, seg):
                self.messages.extend(t.select(["commitlog_offset", "store_size", "msg_id", "topic", "queue_id",
                                               "queue_offset", "sys_flag", "store_timestamp", "keys",
                                               "uniq_key"]).to_pylist())
        self.by_seg = {}
        for m in self.messages:
            self.by_seg.setdefault(m["commitlog_offset"] - m["commitlog_offset"] % self.config.mappedFileSizeCommitLog,
                                   []).append(m)
        self.segments = [s.rel for s in self.files.commitlog]
        self.queue_files = {f.rel: (t, q, f) for (t, q), fs in self.files.consume_queues.items() for f in fs}
        self.index_files = [r.rel for r in self.files.index]
        self.store_files = self.segments + sorted(self.queue_files) + self.index_files + ["checkpoint"]
        self.sizes = {rel: os.path.getsize(os.path.join(path, rel)) for rel in self.store_files}

    def messages_of(self, rel):
        if rel in self.queue_files:
            t, q, f = self.queue_files[rel]
            lo = f.base // 20
            return [m for m in self.messages if m["topic"] == t and m["queue_id"] == q
                    and lo <= m["queue_offset"] < lo + self.config.cq_file_size // 20 and m["sys_flag"] & 0x4 == 0]
        name = rel.rsplit("/", 1)[-1]
        if rel.startswith("commitlog/") and name.isdigit():
            return self.by_seg.get(int(name), [])
        return self.messages


def _copy(src: str, dst: str) -> str:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("lock", "abort.bak", "compaction"))
    return dst


@pytest.fixture(scope="module")
def bases(restored_golden, tmp_path_factory):
    """broker: the small-roll store as RocketMQ wrote it. rl: adopted, then expired (2 Delta
    versions and a Delta checkpoint; 16 segments left, min offset > 0). rl1: the same without
    Delta housekeeping (2 versions, no Delta checkpoint: every commit JSON is read)."""
    src = restored_golden("small-roll")
    root = str(tmp_path_factory.mktemp("fuzz"))
    _AUDIT["root"] = os.path.abspath(root)
    cfg = small_config()
    broker = _copy(src, os.path.join(root, "broker"))
    stores = {}
    for name, housekeeping in (("rl", True), ("rl1", False)):
        p = stores[name] = _copy(src, os.path.join(root, name))
        adopt.adopt(None, p, p, cfg, quiet=True)
        snap = manifest.load_snapshot(storage.Store(p))
        keep = sorted(snap.of_kind("commitlog"), key=lambda r: r["base_offset"])[46]
        s = retention.expire(p, 1.0, now_ms=keep["max_store_ts"] + 3600 * 1000 + 1, quiet=True,
                             housekeeping=housekeeping)
        assert s["status"] == "committed" and s["commitlog_removed"] == 47
    rl, rl1 = stores["rl"], stores["rl1"]
    first = sorted(os.listdir(os.path.join(rl, "commitlog")))[0]
    os.makedirs(os.path.join(root, "outside", "commitlog"))
    shutil.copy(os.path.join(rl, "commitlog", first), os.path.join(root, "outside", "commitlog", first))
    out = {"root": root, "rl": Base(rl), "broker": Base(broker, cfg), "rl1": rl1}
    for p in (rl, rl1):
        rep = verify.verify_store(p)
        assert rep.problems == [], rep.problems[:5]
    assert verify.verify_store(broker, cfg, use_manifest=False).problems == []
    yield out
    # every example restored what it damaged
    for p in (rl, rl1):
        assert verify.verify_store(p).problems == []
    assert verify.verify_store(broker, cfg, use_manifest=False).problems == []


# ----------------------------------------------------------------------------- readers
I64_MAX = 2**63 - 1


def run_queries(reader: query.StoreReader, msgs: list, golden: list) -> None:
    """Every query method on the messages ``msgs`` (and a few golden query lines)."""
    for m in msgs:
        off, topic, q = m["commitlog_offset"], m["topic"], m["queue_id"]
        call("get_by_offset", reader.get_by_offset, off)
        call("get_by_msg_id", reader.get_by_msg_id, m["msg_id"])
        call("look_message_by_offset", reader.look_message_by_offset, off)
        call("view_message_by_id", reader.view_message_by_id, m["msg_id"])
        key = m["uniq_key"] or (m["keys"] or "k").split(" ")[0]
        call("find_by_key", reader.find_by_key, topic, key)
        call("find_by_key(window)", reader.find_by_key, topic, key, m["store_timestamp"] - 5000,
             m["store_timestamp"] + 5000, 2)
        call("find_by_unique_key", reader.find_by_unique_key, topic, m["uniq_key"] or "u")
        call("query_message", reader.query_message, topic, key, 64, 0, I64_MAX)
        call("get_by_queue_offset", reader.get_by_queue_offset, topic, q, m["queue_offset"], 3)
        call("get_message", reader.get_message, "g", topic, q, m["queue_offset"], 4)
        for b in ("LOWER", "UPPER"):
            call("get_offset_in_queue_by_time", reader.get_offset_in_queue_by_time, topic, q,
                 m["store_timestamp"], b)
        call("get_min_offset_in_queue", reader.get_min_offset_in_queue, topic, q)
        call("get_max_offset_in_queue", reader.get_max_offset_in_queue, topic, q)
        call("get_commit_log_offset_in_queue", reader.get_commit_log_offset_in_queue, topic, q, m["queue_offset"])
        call("get_message_store_timestamp", reader.get_message_store_timestamp, topic, q, m["queue_offset"])
        call("get_earliest_message_time", reader.get_earliest_message_time, topic, q)
    call("get_earliest_message_time", reader.get_earliest_message_time)
    for line in golden:
        call(f"answer {line['type']}", reader.answer, line)


def drive_readers(base: Base, store: str, msgs: list, golden: list, config=None, key_lookup=True,
                  stats=False, reopen=True) -> None:
    """The readers on a damaged store: ``open_store`` (``reopen``; else a reader over the base's
    file listing, for damage the listing does not depend on), queries, key lookup, inspection."""
    if reopen:
        reader = call("open_store", query.open_store, store, config=config)
    else:
        reader = query.StoreReader(store, base.config, base.files)
    if reader is not None:
        run_queries(reader, msgs, golden)
        call("get_min/max_phy_offset", lambda: (reader.get_min_phy_offset(), reader.get_max_phy_offset()))
    if key_lookup and msgs:
        keys = pa.table({"topic": [m["topic"] for m in msgs],
                         "key": [m["uniq_key"] or (m["keys"] or "k").split(" ")[0] for m in msgs]})
        call("lookup_keys_local", keylookup.lookup_keys_local, store, keys, config=config)
    if stats:
        st_ = storage.Store(store)
        snap = call("open_snapshot", lambda s: snapshots.open_snapshot(s, history=True), st_)
        if snap is not None:
            call("segment_rows", inspection.segment_rows, snap)
            call("checkpoint_rows", inspection.checkpoint_rows, snap)
            call("stats", inspection.stats, st_, snap, config)
        call("history_rows", inspection.history_rows, st_)
        call("snapshot_reader", inspection.snapshot_reader, store, base_config=config)


@pytest.fixture(scope="module")
def golden_queries():
    from conftest import golden_set
    with open(os.path.join(golden_set("small-roll"), "queries.jsonl"), encoding="utf-8") as fh:
        qs = [json.loads(x) for x in fh if x.strip()]
    by_type: dict = {}
    for q in qs:
        by_type.setdefault(q["type"], []).append(q)
    return Queries(q for t in sorted(by_type) for q in by_type[t][:3])


class Queries(list):
    def __repr__(self):
        return f"<{len(self)} golden query lines>"


# ----------------------------------------------------------------------------- strategies
SET32 = [0, 1, -1, 8, 47, 48, 91, 2**31 - 1, -2**31, 65536, 0x7FFF, 0x8000]


@st.composite
def store_damage(draw, base: Base, extra_ok: bool = True):
    """(op, rel, args) on one file of ``base``."""
    kinds = ["flip", "flip", "flip", "put32", "truncate", "zero_page", "delete", "grow"] + (["extra"] if extra_ok else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "extra":
        seg_names = [int(r.rsplit("/", 1)[1]) for r in base.segments]
        F = base.config.mappedFileSizeCommitLog
        t, q, f = base.queue_files[draw(st.sampled_from(sorted(base.queue_files)))]
        rel = draw(st.sampled_from([
            f"commitlog/{seg_names[-1] + F:020d}", f"commitlog/{seg_names[0] - F if seg_names[0] else 7 * F:020d}",
            "commitlog/junk", "commitlog/sub/00000000000000000000",
            f"consumequeue/{t}/{q}/{f.base + 100 * base.config.cq_file_size:020d}", "consumequeue/ghost/0/00000000000000000000",
            f"consumequeue/{t}/junk", f"consumequeue/{t}/77/00000000000000000000",
            "index/20991231235959999", "index/notanindex", "index/sub/x"]))
        fill = draw(st.sampled_from(["zeros", "random", "copy"]))
        size = draw(st.sampled_from([0, 20, 600, 4096, F]))
        if fill == "copy":
            src = draw(st.sampled_from(base.store_files))
            data = open(os.path.join(base.path, src), "rb").read()
        elif fill == "random":
            data = draw(st.binary(min_size=min(size, 64), max_size=min(size, 64))) * (size // 64 + 1)
            data = data[:size]
        else:
            data = bytes(size)
        return ("write", rel, (data,))
    group = draw(st.sampled_from([base.segments, sorted(base.queue_files), base.index_files, ["checkpoint"]]))
    rel = group[draw(st.sampled_from([0, -1, 1, -2]) | st.integers(0, len(group) - 1)) % len(group)]
    size = base.sizes[rel]
    starts = base.starts.get(rel)
    if kind in ("flip", "put32"):
        if starts and draw(st.booleans()):
            off = draw(st.sampled_from(starts)) + draw(st.integers(0, 110))
        elif rel.startswith("index/") and draw(st.booleans()):
            off = draw(st.integers(0, 40 + 4 * base.config.maxHashSlotNum + 20 * 40))
        else:
            off = draw(st.integers(0, max(0, size - 1)))
        if kind == "flip":
            return ("flip", rel, (off, draw(st.integers(1, 255))))
        return ("put", rel, (min(off, max(0, size - 4)), struct.pack(">i", draw(st.sampled_from(SET32)))))
    if kind == "truncate":
        return ("truncate", rel, (draw(st.integers(0, max(0, size - 1))),))
    if kind == "grow":
        return ("write", rel, (open(os.path.join(base.path, rel), "rb").read() + bytes(draw(st.sampled_from([1, 20, PAGE]))),))
    if kind == "zero_page":
        return ("zero_page", rel, (draw(st.integers(0, max(0, (size - 1) // PAGE))),))
    return ("delete", rel, ())


def apply(s: Scratch, op) -> None:
    kind, rel, args = op
    getattr(s, kind)(rel, *args)


def targeted(base: Base, ops, pick: int, n: int = 2) -> list:
    """Messages stored in / indexed by / queued in the damaged files."""
    out = []
    for _, rel, _ in ops:
        ms = base.messages_of(rel)
        if ms:
            out += [ms[(pick + k * 7919) % len(ms)] for k in range(n)]
    return out or [base.messages[pick % len(base.messages)]]


# ----------------------------------------------------------------------------- 1. record decoding
@pytest.fixture(scope="module")
def records(bases):
    b = bases["broker"]
    recs = []
    for seg in b.files.commitlog:
        data = open(os.path.join(b.path, seg.rel), "rb").read()
        for s in b.starts[seg.rel]:
            size = struct.unpack_from(">i", data, s)[0]
            recs.append(data[s:s + size])
    return recs


def _field_positions(rec: bytes) -> list:
    sysflag = struct.unpack_from(">i", rec, 36)[0]
    B, S = (20 if sysflag & 0x10 else 8), (20 if sysflag & 0x20 else 8)
    bl_at = 68 + B + S
    bl = struct.unpack_from(">i", rec, bl_at)[0]
    tl_at = bl_at + 4 + bl
    v2 = struct.unpack_from(">i", rec, 4)[0] == cl.MAGIC_V2
    tl = struct.unpack_from(">h" if v2 else ">b", rec, tl_at)[0]
    pl_at = tl_at + (2 if v2 else 1) + tl
    return [0, 4, 36, bl_at, tl_at, pl_at]


DECODED_FIELDS = ("commitlog_offset", "store_size", "msg_id", "topic", "queue_id", "queue_offset", "flag",
                  "sys_flag", "body_crc", "born_timestamp", "born_host", "store_timestamp", "store_host",
                  "reconsume_times", "prepared_transaction_offset", "body", "properties_string")


@fuzz(1100)
@given(data=st.data())
def test_fuzzed_record_decoding(records, data):
    i = data.draw(st.integers(0, len(records) - 1), label="record")
    rec = bytearray(records[i])
    positions = _field_positions(bytes(rec))
    ops = data.draw(st.lists(st.one_of(
        st.tuples(st.just("flip"), st.integers(0, 130) | st.integers(0, 1 << 16), st.integers(1, 255)),
        st.tuples(st.just("set32"), st.sampled_from(positions), st.sampled_from(SET32 + [len(rec) - 1, len(rec) + 1])),
        st.tuples(st.just("set16"), st.sampled_from(positions[-2:]), st.sampled_from([0, 1, 127, 128, 255, 0x7FFF,
                                                                                      0x8000, 0xFFFF])),
        st.tuples(st.just("truncate"), st.integers(0, len(rec))),
        st.tuples(st.just("extend"), st.binary(max_size=40))), min_size=1, max_size=4), label="ops")
    for op in ops:
        if op[0] == "flip" and rec:
            rec[op[1] % len(rec)] ^= op[2]
        elif op[0] == "set32" and op[1] + 4 <= len(rec):
            struct.pack_into(">i", rec, op[1], op[2])
        elif op[0] == "set16" and op[1] + 2 <= len(rec):
            struct.pack_into(">H", rec, op[1], op[2])
        elif op[0] == "truncate":
            del rec[op[1]:]
        elif op[0] == "extend":
            rec += op[1]
    raw = bytes(rec)
    with watchdog(f"record {i} {ops}"):
        decode_message(raw)                                # the pure-Python decoder never raises
        one = call("decode_one", codec.decode_one, raw)
        if one is not None:                              # the vectorized decoder agrees with it
            size = struct.unpack_from(">i", raw, 0)[0]
            ref = decode_message(raw[:size])
            assert ref is not None, "decode_one decoded what the reference decoder rejects"
            for k in DECODED_FIELDS:
                assert one[k] == ref[k], (k, one[k], ref[k])
        # the damaged record between two intact ones
        prev, nxt = records[(i + 1) % len(records)], records[(i + 2) % len(records)]
        buf = np.frombuffer(prev + raw + nxt, np.uint8)
        starts = np.array([0, len(prev), len(prev) + len(raw)], np.int64)
        t, ok = codec.decode_valid_records(buf, 0, starts)
        assert ok[0] and ok[2] and t.num_rows == int(ok.sum())
        try:
            codec.decode_records(buf, 0, starts, origin=("commitlog/x", 0))
            assert ok.all()
        except errors.CorruptStore as e:
            check_clean(e)
            assert not ok.all() and e.path == "commitlog/x" and e.offset == len(prev)
        # the numba walk and verify's record checks over the same bytes
        s, stop, reason = codec.record_starts(buf, 0, len(buf))
        sizes = codec.gather_int(buf, s, 4).astype(np.int64)
        assert (sizes > 0).all() and (s + sizes <= len(buf)).all() and (np.diff(s) > 0).all()
        assert stop <= len(buf) and (not len(s) or s[-1] + sizes[-1] <= stop)
        out = []
        verify_records.check_records(buf, s, 0, "commitlog/x", True, out)
        assert all(p.path == "commitlog/x" for p in out)


# ----------------------------------------------------------------------------- 2. one damaged segment
@fuzz(650)
@given(data=st.data())
def test_fuzzed_segment(bases, golden_queries, data):
    b: Base = bases["rl"]
    live = [s for s in b.files.commitlog if s.valid > 0]
    seg = live[data.draw(st.integers(0, len(live) - 1), label="segment")]
    starts = b.starts[seg.rel]
    ops = data.draw(st.lists(st.one_of(
        st.tuples(st.just("flip"), st.sampled_from(starts).flatmap(lambda s: st.integers(s, s + 110)),
                  st.integers(1, 255)),
        st.tuples(st.just("flip"), st.integers(0, seg.valid - 1), st.integers(1, 255)),
        st.tuples(st.just("put"), st.sampled_from(starts).flatmap(lambda s: st.integers(s, s + 100)),
                  st.sampled_from(SET32)),
        st.tuples(st.just("zero_page"), st.integers(0, 15)),
        st.tuples(st.just("truncate"), st.integers(0, b.sizes[seg.rel] - 1))), min_size=1, max_size=3), label="ops")
    deep = data.draw(st.booleans(), label="deep")
    pick = data.draw(st.integers(0, 10**6), label="pick")
    m_row = _manifest_rows(b.path)[seg.rel]
    with damaged(b.path) as s, confined(b.path), watchdog(f"{seg.rel} {ops}"):
        for op in ops:
            if op[0] == "flip":
                s.flip(seg.rel, op[1], op[2])
            elif op[0] == "put":
                s.put(seg.rel, min(op[1], seg.valid - 4), struct.pack(">i", op[2]))
            elif op[0] == "zero_page":
                s.zero_page(seg.rel, op[1])
            else:
                s.truncate(seg.rel, op[1])
        st_ = storage.Store(b.path)
        call("segment_messages", lambda: [t.num_rows for t in rangescan.segment_messages(st_, seg)])
        for m in targeted(b, [(None, seg.rel, None)], pick, 3):
            call("get_by_offset", b.reader.get_by_offset, m["commitlog_offset"])
            call("look_message_by_offset", b.reader.look_message_by_offset, m["commitlog_offset"])
            call("get_message", b.reader.get_message, "g", m["topic"], m["queue_id"], m["queue_offset"], 3)
        ctx = VerifyContext(store=b.path, config=b.config, deep=deep, segments=[], min_phy=0, max_phy=0)
        last = seg.rel == b.segments[-1]
        r = verify.run_task(ctx, {"kind": "commitlog", "path": seg.rel, "base": seg.base, "last": last,
                                  "manifest": m_row})
        assert all(p.path == seg.rel for p in r["problems"])
        assert not any("cannot be checked" in p.what for p in r["problems"]), r["problems"]
        if s.changed():
            assert r["problems"], f"verify_segment missed the damage {s.log}"


# ----------------------------------------------------------------------------- 2b. one damaged index file
@fuzz(200)
@given(data=st.data())
def test_fuzzed_index_file(bases, data):
    """Slots, chains (prevPos), keyHash, timeDiff and header fields of one index file rewritten
    with values near its real entry positions: chain cycles, forward links, links past the end."""
    b: Base = bases[data.draw(st.sampled_from(["rl", "broker"]), label="store")]
    refs = [r for r in b.files.index if (r.index_count or 0) > 2 or r.header is None]
    ref = refs[data.draw(st.integers(0, len(refs) - 1), label="index file")]
    cfg = b.config
    count = ref.index_count or b.reader.index.header(b.files.index.index(ref)).index_count
    ent = 40 + 4 * cfg.maxHashSlotNum
    near = st.integers(-2, count + 3) | st.sampled_from([0, 1, count - 1, count, cfg.maxIndexNum - 1,
                                                         cfg.maxIndexNum, 2**31 - 1, -2**31])
    field = st.one_of(
        st.tuples(st.just("prev"), st.integers(1, max(1, count - 1)), near),
        st.tuples(st.just("slot"), st.integers(0, cfg.maxHashSlotNum - 1), near),
        st.tuples(st.just("hash"), st.integers(1, max(1, count - 1)), st.integers(-2**31, 2**31 - 1)),
        st.tuples(st.just("tdiff"), st.integers(1, max(1, count - 1)), st.sampled_from([0, -1, 1, 2**31 - 1])),
        st.tuples(st.just("phys"), st.integers(1, max(1, count - 1)), st.sampled_from([0, -1, 1, 2**62,
                                                                                     b.reader.get_max_phy_offset()])),
        st.tuples(st.just("header"), st.sampled_from([0, 8, 16, 24, 32, 36]), near))
    chains = _chains(b, ref.rel, count)
    long = sorted(s_ for s_, c in chains.items() if len(c) >= 2)
    if long:                        # close a chain into a cycle: a later entry links to an earlier one
        field = field | st.tuples(st.just("cycle"), st.sampled_from(long), st.tuples(st.integers(0, 50),
                                                                                   st.integers(0, 50)))
    ops = data.draw(st.lists(field, min_size=1, max_size=4), label="ops")
    lo, hi = b.reader.index.header(b.files.index.index(ref))[2:4]
    msgs = [m for m in b.messages if lo <= m["commitlog_offset"] <= hi and (m["uniq_key"] or m["keys"])]
    pick = data.draw(st.integers(0, 10**6), label="pick")
    msgs = [msgs[(pick + 31 * k) % len(msgs)] for k in range(3)] if msgs else []
    probes = []                     # keys of the damaged slots that match no entry: whole chains are walked
    for kind, i, _v in ops:
        slot = i if kind in ("slot", "cycle") else _entry_slot(b, ref.rel, i)
        if msgs and slot is not None:
            probes.append(dict(msgs[0], uniq_key=_probe_key(msgs[0]["topic"], slot, cfg.maxHashSlotNum), keys=None))
    with damaged(b.path) as s, confined(b.path), watchdog(f"{ref.rel} {ops}"):
        for kind, i, v in ops:
            if kind == "cycle":
                c = chains[i]
                j, k = sorted((v[0] % len(c), v[1] % len(c)))
                k = max(k, j + 1) if j + 1 < len(c) else k
                if j < k:               # chain runs newest -> oldest: c[k] < c[j]; link c[k] -> c[j]
                    s.put(ref.rel, ent + 20 * c[k] + 16, struct.pack(">i", c[j]))
            elif kind == "prev":
                s.put(ref.rel, ent + 20 * i + 16, struct.pack(">i", v))
            elif kind == "slot":
                s.put(ref.rel, 40 + 4 * i, struct.pack(">i", v))
            elif kind == "hash":
                s.put(ref.rel, ent + 20 * i, struct.pack(">i", v))
            elif kind == "tdiff":
                s.put(ref.rel, ent + 20 * i + 12, struct.pack(">i", v))
            elif kind == "phys":
                s.put(ref.rel, ent + 20 * i + 4, struct.pack(">q", v))
            else:
                s.put(ref.rel, i, struct.pack(">q" if i < 32 else ">i", v))
        reader = query.StoreReader(b.path, b.config, b.files)        # headers read afresh
        for m in msgs + probes:
            key = m["uniq_key"] or m["keys"].split(" ")[0]
            call("query_message", reader.query_message, m["topic"], key, 64, 0, I64_MAX)
            call("query_message(window)", reader.query_message, m["topic"], key, 3, m["store_timestamp"] - 2000,
                 m["store_timestamp"] + 2000)
            call("find_by_key", reader.find_by_key, m["topic"], key)
            call("find_by_unique_key", reader.find_by_unique_key, m["topic"], m["uniq_key"] or key)
        if msgs:
            keys = pa.table({"topic": [m["topic"] for m in msgs],
                             "key": [m["uniq_key"] or m["keys"].split(" ")[0] for m in msgs]})
            cands = call("index_candidates", keylookup.index_candidates, storage.Store(b.path), cfg, ref,
                         np.unique(keylookup.key_hashes(keys.column("topic").combine_chunks(),
                                                        keys.column("key").combine_chunks())))
            assert cands is None or cands.num_rows >= 0
        ctx = VerifyContext(store=b.path, config=cfg, deep=pick % 2 == 0,
                            segments=[(x.rel, x.base, x.valid) for x in b.files.commitlog],
                            min_phy=b.reader.get_min_phy_offset(), max_phy=b.reader.get_max_phy_offset())
        m_row = _manifest_rows(b.path).get(ref.rel) if b is bases["rl"] else None
        r = verify.run_task(ctx, {"kind": "index", "path": ref.rel, "manifest": m_row})
        assert not any("cannot be checked" in p.what for p in r["problems"]), r["problems"]
        assert all(p.path == ref.rel for p in r["problems"])
        if s.changed() and m_row is not None:
            assert r["problems"], f"verify_index missed the damage {s.log}"


def _chains(b: Base, rel: str, count: int) -> dict:
    """slot -> entry positions of its chain (newest first) in the base file."""
    data = open(os.path.join(b.path, rel), "rb").read()
    ent = 40 + 4 * b.config.maxHashSlotNum
    out = {}
    for slot in range(b.config.maxHashSlotNum):
        pos, chain = struct.unpack_from(">i", data, 40 + 4 * slot)[0], []
        while 0 < pos < count and len(chain) < count:
            chain.append(pos)
            prev = struct.unpack_from(">i", data, ent + 20 * pos + 16)[0]
            if prev >= pos:
                break
            pos = prev
        out[slot] = chain
    return out


def _entry_slot(b: Base, rel: str, i: int) -> int | None:
    data = open(os.path.join(b.path, rel), "rb").read(40 + 4 * b.config.maxHashSlotNum + 20 * (i + 1))
    at = 40 + 4 * b.config.maxHashSlotNum + 20 * i
    return struct.unpack_from(">i", data, at)[0] % b.config.maxHashSlotNum if len(data) >= at + 4 else None


def _probe_key(topic: str, slot: int, slots: int) -> str:
    n = 0
    while javahash.index_key_hash(f"{topic}#probe-{n}") % slots != slot:
        n += 1
    return f"probe-{n}"


_ROWS: dict = {}


def _manifest_rows(path: str) -> dict:
    if path not in _ROWS:
        _ROWS[path] = manifest.load_snapshot(storage.Store(path)).files
    return _ROWS[path]


# ----------------------------------------------------------------------------- 3. damaged store trees
@fuzz(120)
@given(data=st.data())
def test_fuzzed_rocketlake_store(bases, golden_queries, data):
    b: Base = bases["rl"]
    ops = data.draw(st.lists(store_damage(b), min_size=1, max_size=2), label="ops")
    pick = data.draw(st.integers(0, 10**6), label="pick")
    golden = [golden_queries[(pick + k) % len(golden_queries)] for k in range(3)]
    # the manifest is intact here: open_store's listing, and verify's snapshot, are the base's
    with damaged(b.path) as s, watchdog(f"{ops}"):
        for op in ops:
            apply(s, op)
        with confined(b.path):
            drive_readers(b, b.path, targeted(b, ops, pick), golden, stats=pick % 8 == 0, reopen=pick % 4 == 1,
                          key_lookup=pick % 4 == 2)
            rep = verify.verify_store(b.path, snap=b.snap)
        for rel in s.changed():
            assert names(rep, rel), f"verify does not name the damaged {rel} ({s.log}): {rep.problems[:8]}"
        assert not any("cannot be checked" in p for p in rep.problems), rep.problems


@fuzz(80)
@given(data=st.data())
def test_fuzzed_broker_store(bases, golden_queries, data):
    b: Base = bases["broker"]
    ops = data.draw(st.lists(store_damage(b), min_size=1, max_size=2), label="ops")
    pick = data.draw(st.integers(0, 10**6), label="pick")
    golden = [golden_queries[(pick + k) % len(golden_queries)] for k in range(3)]
    cfg = small_config()
    with damaged(b.path) as s, watchdog(f"{ops}"):
        for op in ops:
            apply(s, op)
        with confined(b.path):
            drive_readers(b, b.path, targeted(b, ops, pick, 1), golden, config=cfg, key_lookup=pick % 4 == 0)
            if pick % 5 == 0:
                rep = call("verify (broker store)", verify.verify_store, b.path, cfg, use_manifest=False)
                assert rep is not None
                assert not any("cannot be checked" in p for p in rep.problems), rep.problems


# ----------------------------------------------------------------------------- 4. damaged Delta logs
def _log_files(store: str) -> list:
    out = []
    for table in ("manifest", "checkpoints"):
        d = os.path.join(store, "_rocketlake", table, "_delta_log")
        out += [f"_rocketlake/{table}/_delta_log/{n}" for n in sorted(os.listdir(d)) if n.endswith(".json")
                and n[:20].isdigit()]
    return out


def _latest(store: str, rel: str) -> bool:
    d = os.path.dirname(os.path.join(store, rel))
    return int(os.path.basename(rel)[:20]) >= max(int(n[:20]) for n in os.listdir(d) if n[:20].isdigit()) \
        if any(n[:20].isdigit() for n in os.listdir(d)) else True


def _required(store: str, rel: str) -> bool:
    """A commit file a reader of the latest version needs (at or after the last Delta checkpoint)."""
    d = os.path.dirname(os.path.join(store, rel))
    cps = [int(n[:20]) for n in os.listdir(d) if n.endswith(".checkpoint.parquet")]
    return int(os.path.basename(rel)[:20]) >= (max(cps) if cps else 0)


@fuzz(60)
@given(data=st.data())
def test_fuzzed_delta_log(bases, golden_queries, data):
    b: Base = bases["rl"]
    store = data.draw(st.sampled_from([b.path, bases["rl1"]]), label="store")
    rel = data.draw(st.sampled_from(_log_files(store)), label="commit")
    kind = data.draw(st.sampled_from(["truncate", "truncate", "garbage", "garbage_line", "delete"]), label="kind")
    pick = data.draw(st.integers(0, 10**6), label="pick")
    golden = [golden_queries[(pick + k) % len(golden_queries)] for k in range(3)]
    with damaged(store) as s, watchdog(f"{kind} {rel}"):
        raw = s.bytes_of(rel)
        if kind == "truncate":
            s.truncate(rel, data.draw(st.integers(0, len(raw) - 1), label="size"))
        elif kind == "garbage":
            s.write(rel, data.draw(st.binary(max_size=300), label="garbage"))
        elif kind == "garbage_line":
            lines = raw.split(b"\n")
            k = data.draw(st.integers(0, len(lines) - 1), label="line")
            lines[k] = data.draw(st.sampled_from([b"", b"{}", b"[]", b"null", b'{"add": 5}', b"{\"commitInfo\": {}",
                                                  b'{"remove": {"path": "x"}}']), label="with")
            s.write(rel, b"\n".join(lines))
        else:
            s.delete(rel)
        with confined(store):
            msgs = targeted(b, [], pick, 1)
            drive_readers(b, store, msgs, golden, key_lookup=False, stats=pick % 4 == 0)
            rep = call("verify", verify.verify_store, store)
        assert rep is not None, "verify must report a damaged Delta log, not fail"
        if not s.changed() or (kind == "delete" and not _required(store, rel)):
            return                      # a commit older than the Delta checkpoint: no reader needs it
        if kind == "delete" and "checkpoints/" in rel and _latest(store, rel):
            # the newest checkpoint-table commit gone = a batch whose switch never happened: its
            # manifest rows are ignored like an interrupted batch's; what it changed is reported
            assert rep.problems, "verify does not notice the lost batch"
        else:
            assert names(rep, rel) or names(rep, os.path.dirname(rel)), \
                f"verify does not name {rel} ({kind}): {rep.problems[:6]}"


# ----------------------------------------------------------------------------- 5. garbage manifest rows
MUTABLE = {
    "kind": st.sampled_from(["", "commitlog", "index", "consumequeue", "checkpoint", "nonsense"]),
    "path": st.sampled_from(["../outside/commitlog/00000000000003080192", "/etc/passwd",
                             "commitlog/../../outside/commitlog/00000000000003080192", "commitlog/00000000000099999999",
                             "index/20991231235959999", "consumequeue/ghost/0/00000000000000000000", "", "commitlog/",
                             "_rocketlake/manifest/x", "commitlog//00000000000003080192"]),
    "base_offset": st.sampled_from([None, -1, 1, 65536, 2**40, 2**63 - 1]),
    "valid_bytes": st.sampled_from([None, -1, 0, 7, 65535, 65537, 2**31, 2**62]),
    "file_size": st.sampled_from([None, -1, 0, 12345, 2**40]),
    "count": st.sampled_from([None, -1, 0, 10**9]),
    "checksum": st.sampled_from([None, "", "00" * 32, "nothex"]),
    "topic": st.sampled_from([None, "", "ghost", "../x"]),
    "queue_id": st.sampled_from([None, -1, 999, 2**31 - 1]),
    "detail": st.sampled_from([None, "", "{", "[]", '{"header": 5}', '{"header": {}}',
                               '{"header": {"begin_timestamp": 1, "end_timestamp": 2, "begin_phy_offset": 0, '
                               '"end_phy_offset": 0, "hash_slot_count": 0, "index_count": 99999999}}']),
    "action": st.sampled_from(["remove", "", "ADD", None]),
    "staged_path": st.sampled_from(["../outside/commitlog/00000000000003080192", "/etc/passwd",
                                    "_rocketlake/staging/b/../../../outside/x"]),
    "min_store_ts": st.sampled_from([None, -1, 2**62]),
}
# Fields whose garbage is damage verify must report, by the row's kind (the others must only not
# crash a reader: the kinds that do not use them).
ALL_KINDS = {"commitlog", "consumequeue", "index", "checkpoint"}
MUST_REPORT = {"kind": ALL_KINDS, "path": ALL_KINDS, "valid_bytes": ALL_KINDS, "file_size": ALL_KINDS,
               "checksum": ALL_KINDS, "action": ALL_KINDS, "staged_path": ALL_KINDS,
               "count": {"commitlog", "consumequeue", "index"}, "base_offset": {"commitlog", "consumequeue"},
               "topic": {"consumequeue"}, "queue_id": {"consumequeue"}, "detail": {"index"},
               "min_store_ts": {"commitlog"}}


@fuzz(60)
@given(data=st.data())
def test_fuzzed_manifest_rows(bases, golden_queries, data):
    from deltalake import write_deltalake
    b: Base = bases["rl"]
    rows = sorted(_manifest_rows(b.path).values(), key=lambda r: r["path"])
    base_row = rows[data.draw(st.integers(0, len(rows) - 1), label="row")]
    fields = data.draw(st.lists(st.sampled_from(sorted(MUTABLE)), min_size=1, max_size=3, unique=True), label="fields")
    row = dict(base_row)
    row["committed_at"] = max(r["committed_at"] for r in rows) + 1      # replaces base_row for readers
    for f in fields:
        row[f] = data.draw(MUTABLE[f], label=f)
    visible = data.draw(st.integers(0, 5), label="visible") > 0
    if not visible:
        row["batch_seq"] = 99                         # a batch that never committed: invisible
    pick = data.draw(st.integers(0, 10**6), label="pick")
    golden = [golden_queries[(pick + k) % len(golden_queries)] for k in range(2)]
    table_dir = os.path.join(b.path, paths.MANIFEST_DIR)
    before = {os.path.join(dp, f) for dp, _, fs in os.walk(table_dir) for f in fs}
    try:
        write_deltalake(table_dir, pa.Table.from_pylist([row], schema=manifest.MANIFEST_SCHEMA), mode="append")
        with confined(b.path), watchdog(f"row {row}"):
            drive_readers(b, b.path, targeted(b, [(None, base_row["path"], None)], pick, 1), golden,
                          key_lookup=pick % 4 == 0, stats=pick % 6 == 0)
            rep = call("verify", verify.verify_store, b.path)
        assert rep is not None
        assert not any("cannot be checked" in p for p in rep.problems), rep.problems
        if row["action"] != "add":      # a remove (or unknown action) only hides the file it names
            differs = row["path"] in _manifest_rows(b.path)
        else:
            differs = any(row[f] != base_row[f] and base_row["kind"] in MUST_REPORT[f]
                          and not (f == "min_store_ts" and row[f] is None) for f in fields)
        if visible and differs:
            named = {base_row["path"], str(row["path"]), paths.MANIFEST_DIR}
            assert any(p.startswith(f"{x}@") for p in rep.problems for x in named), \
                f"verify does not report the garbage row {fields} -> {[row[f] for f in fields]}: {rep.problems[:6]}"
        elif not visible:
            assert rep.problems == [], rep.problems[:5]
    finally:
        after = {os.path.join(dp, f) for dp, _, fs in os.walk(table_dir) for f in fs}
        for p in after - before:
            os.remove(p)


# ----------------------------------------------------------------------------- 6. the CLIs
def _cli(args: list) -> subprocess.Popen:
    py = sys.executable
    env = dict(os.environ, PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py)
    return subprocess.Popen([py] + args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_cli_on_damaged_stores(bases, tmp_path):
    """jobs/query.py and jobs/inspect.py on damaged copies: a result or a one-line error, never a
    traceback (run concurrently: each is a fresh interpreter)."""
    b: Base = bases["rl"]
    q = os.path.join(ROOT, "jobs", "query.py")
    ins = os.path.join(ROOT, "jobs", "inspect.py")
    seg = b.segments[3]
    m = b.messages_of(seg)[5]
    key = m["uniq_key"] or (m["keys"] or "k").split(" ")[0]
    cases = {}

    def copy(name):
        return _copy(b.path, str(tmp_path / name))

    s1 = copy("trunc")                                      # a truncated segment
    with open(os.path.join(s1, seg), "r+b") as fh:
        fh.truncate(1000)
    cases["id on truncated segment"] = (["id", "--store", s1, m["msg_id"]], q, {1})
    s2 = copy("delta")              # a truncated commit the Delta checkpoint covers: only verify sees it
    with open(os.path.join(s2, "_rocketlake/checkpoints/_delta_log/00000000000000000001.json"), "r+b") as fh:
        fh.truncate(100)
    cases["verify on damaged Delta log"] = (["--store", s2, "verify", "--no-spark"], ins, {1})
    s4 = _copy(bases["rl1"], str(tmp_path / "delta1"))     # a truncated commit every reader needs
    with open(os.path.join(s4, "_rocketlake/checkpoints/_delta_log/00000000000000000000.json"), "r+b") as fh:
        fh.truncate(100)
    cases["key on damaged Delta log"] = (["key", "--store", s4, "--topic", m["topic"], "--key", key], q, {1})
    s3 = copy("index")                      # a missing index file, a unit of size INT_MAX
    os.remove(os.path.join(s3, b.index_files[-1]))
    cq = sorted(b.queue_files)[0]
    with open(os.path.join(s3, cq), "r+b") as fh:
        fh.seek(28)
        fh.write(b"\x7f\xff\xff\xff")
    t, qid, _ = b.queue_files[cq]
    cases["segments on damaged Delta log"] = (["--store", s4, "segments"], ins, {1})
    cases["offset on damaged queue"] = (["offset", "--store", s3, "--topic", t, "--queue", str(qid), "--offset",
                                         "0", "--count", "5"], q, {0, 1})
    procs = {name: (_cli([script] + args), codes) for name, (args, script, codes) in cases.items()}
    bad = []
    for name, (p, codes) in procs.items():
        out, err = p.communicate(timeout=120)
        lines = [x for x in err.splitlines() if x.strip()]
        if "Traceback" in err or p.returncode not in codes:
            bad.append(f"{name}: exit {p.returncode}\n{err[-2000:]}")
        elif p.returncode != 0 and name.startswith("verify"):
            assert "_rocketlake/checkpoints/_delta_log/00000000000000000001.json@" in out, out
        elif p.returncode != 0 and not (len(lines) == 1 and lines[0].startswith("error: ")):
            bad.append(f"{name}: exit {p.returncode} without a one-line error: {err[-2000:]}")
    assert not bad, "\n\n".join(bad)
