"""The commitlog record and segment layout (storelib/format/commitlog.py; docs/FORMAT.md §1.2, §1.7, §1.9).

No Spark: records are written through the layout helpers (``pack_record``, ``blank_record``,
``fits``), read back with the parse helpers and the compiled kernels, and compared with the golden
small-roll segments byte for byte.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from support import goldenlib
from conftest import golden_set
from storelib.codec import messages as codec
from storelib.compute import kernels
from storelib.format import commitlog as cl

SEG = 65536            # small-roll's mappedFileSizeCommitLog


def _golden_file(rel: str, name: str = "small-roll") -> bytes:
    root, files = goldenlib.load_listing(golden_set(name))
    f = next(f for f in files if f["path"] == rel)
    return b"".join(goldenlib.golden_blocks(os.path.join(root, f["stored_as"]), f["size"]))


@pytest.fixture(scope="module")
def put_results():
    with open(os.path.join(golden_set("small-roll"), "put_results.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def seg0():
    return _golden_file(cl.rel_path(0))


@pytest.fixture(scope="module")
def seg1():
    return _golden_file(cl.rel_path(SEG))


# ---------------------------------------------------------------------------- the table of §1.2
def test_fixed_offsets_follow_the_format_table():
    fields = [(cl.POS_TOTALSIZE, cl.SIZE_TOTALSIZE), (cl.POS_MAGIC, cl.SIZE_MAGIC), (cl.POS_BODYCRC, cl.SIZE_BODYCRC),
              (cl.POS_QUEUEID, cl.SIZE_QUEUEID), (cl.POS_FLAG, cl.SIZE_FLAG),
              (cl.POS_QUEUEOFFSET, cl.SIZE_QUEUEOFFSET), (cl.POS_PHYSICALOFFSET, cl.SIZE_PHYSICALOFFSET),
              (cl.POS_SYSFLAG, cl.SIZE_SYSFLAG), (cl.POS_BORNTIMESTAMP, cl.SIZE_BORNTIMESTAMP)]
    at = 0
    for pos, size in fields:                      # contiguous, no gaps
        assert pos == at
        at += size
    assert at == cl.POS_BORNHOST == cl.FIXED_SIZE == 48
    assert [p for p, _ in fields] == [0, 4, 8, 12, 16, 20, 28, 36, 40]


@pytest.mark.parametrize("sysflag,b,s", [(0, 8, 8), (cl.FLAG_BORNHOST_V6, 20, 8), (cl.FLAG_STOREHOST_V6, 8, 20),
                                         (cl.FLAG_BORNHOST_V6 | cl.FLAG_STOREHOST_V6 | 0x301, 20, 20)])
def test_offsets_after_the_hosts_move_with_sysflag(sysflag, b, s):
    assert (cl.born_host_size(sysflag), cl.store_host_size(sysflag)) == (b, s)
    assert cl.storetimestamp_offset(sysflag) == 48 + b
    assert cl.storehost_offset(sysflag) == 56 + b
    assert cl.reconsumetimes_offset(sysflag) == 56 + b + s
    assert cl.prepared_tx_offset_offset(sysflag) == 60 + b + s
    assert cl.bodylength_offset(sysflag) == 68 + b + s
    assert cl.body_offset(sysflag) == 72 + b + s
    # the same helpers over arrays (what the vectorized readers use)
    arr = np.array([sysflag, 0], np.int32)
    assert cl.storetimestamp_offset(arr).tolist() == [48 + b, 56]
    assert cl.body_offset(arr).tolist() == [72 + b + s, 88]


def test_record_size_formula():
    assert cl.RECORD_OVERHEAD == 72 and cl.MIN_RECORD_SIZE == 91
    assert cl.record_size(10, 5, 7) == 91 + 10 + 5 + 7                    # IPv4 hosts, V1 (72 + 8 + 8 + 1 + 2)
    assert cl.record_size(0, 200, 0, born_v6=True, store_v6=True, v2=True) == 72 + 20 + 20 + 2 + 200 + 2
    assert cl.topic_length_size(cl.MAGIC_V1) == 1 and cl.topic_length_size(cl.MAGIC_V2) == 2
    sizes = cl.record_size(np.array([0, 1]), np.array([1, 1]), np.array([0, 0]), np.array([False, True]),
                           np.array([False, False]), np.array([False, True]))
    assert sizes.tolist() == [92, 92 + 1 + 12 + 1]


# ---------------------------------------------------------------------------- golden records
@pytest.mark.parametrize("segment", range(6))
def test_golden_records_parse_and_repack_byte_identically(segment, put_results):
    data = _golden_file(cl.rel_path(segment * SEG))
    by_offset = {p["wrote_offset"]: p for p in put_results}
    starts, stop, reason = codec.record_starts(np.frombuffer(data, np.uint8))
    assert reason == 1 and len(starts) > 5
    for pos in starts:
        pr = by_offset[segment * SEG + int(pos)]
        h = cl.parse_fixed(data, int(pos))
        assert (h.physical_offset, h.total_size, h.queue_offset, h.sys_flag, h.body_crc) == \
            (pr["wrote_offset"], pr["wrote_bytes"], pr["queue_offset"], pr["stored_sys_flag"], pr["body_crc"])
        raw = data[pos:pos + h.total_size]
        r = cl.parse_record(raw)
        assert r is not None and r[:9] == tuple(h)
        assert r.store_timestamp == pr["store_timestamp"]
        assert cl.parse_i64(raw, cl.storetimestamp_offset(r.sys_flag)) == pr["store_timestamp"]
        assert cl.make_msg_id(r.store_host, r.physical_offset) == pr["msg_id"]
        assert cl.pack_record(r) == raw
        assert len(raw) == cl.record_size(len(r.body), len(r.topic), len(r.properties),
                                          len(r.born_host) == cl.HOST_V6_SIZE, len(r.store_host) == cl.HOST_V6_SIZE,
                                          r.magic == cl.MAGIC_V2)


def test_compiled_reader_agrees_with_the_python_parser(seg0):
    """kernels.record_fields uses commitlog's module constants; parse_record the Python helpers."""
    buf = np.frombuffer(seg0, np.uint8)
    starts, _, _ = codec.record_starts(buf)
    f = kernels.record_fields(buf, starts)
    assert (f[kernels.F_OK] == 1).all()
    for k, pos in enumerate(starts):
        r = cl.parse_record(seg0, int(pos))
        assert f[kernels.F_STORETS, k] == r.store_timestamp
        assert f[kernels.F_STOREHOST_POS, k] == pos + cl.storehost_offset(r.sys_flag)
        assert f[kernels.F_BODY_POS, k] == pos + cl.body_offset(r.sys_flag)
        assert f[kernels.F_BODY_LEN, k] == len(r.body) and f[kernels.F_TOPIC_LEN, k] == len(r.topic)
        assert f[kernels.F_PREPTX, k] == r.prepared_transaction_offset


def test_ipv6_v2_record_round_trip():
    topic = ("T" * 128).encode()                   # 128 characters: V2
    r = cl.Record(0, cl.MAGIC_V2, 5, 3, -7, 11, 4096, cl.FLAG_BORNHOST_V6 | cl.FLAG_STOREHOST_V6 | 0x8, 1000,
                  cl.pack_host(bytes(range(16)), 5000), 2000, cl.pack_host(bytes(16), 10911), 2, 9,
                  b"body", topic, b"A\x01b\x02")
    size = cl.record_size(4, len(topic), 4, True, True, True)
    r = r._replace(total_size=size)
    raw = cl.pack_record(r)
    assert len(raw) == size
    assert cl.parse_record(raw) == r
    assert cl.unpack_host(r.born_host) == (bytes(range(16)), 5000)
    t = codec.decode_records(np.frombuffer(raw, np.uint8), 0, np.zeros(1, np.int64)).to_pylist()[0]
    assert (t["store_size"], t["topic"], t["store_timestamp"], t["born_host"]) == \
        (size, topic.decode(), 2000, "[1:203:405:607:809:a0b:c0d:e0f]:5000")
    msg_id = cl.make_msg_id(r.store_host, r.physical_offset)
    assert len(msg_id) == 56 and cl.parse_msg_id(msg_id) == (r.store_host, 4096)
    # Java's decoder gives up on what does not fit
    assert cl.parse_record(raw[:-1]) is None
    assert cl.parse_record(raw[:cl.FIXED_SIZE - 1]) is None
    assert cl.parse_record(cl.pack_fixed(cl.parse_fixed(raw)._replace(magic=cl.BLANK_MAGIC)) + raw[48:]) is None


# ---------------------------------------------------------------------------- end of a segment
def test_golden_segment_ends_with_a_blank_covering_the_rest(seg0, seg1, put_results):
    buf = np.frombuffer(seg0, np.uint8)
    starts, stop, reason = codec.record_starts(buf)
    assert reason == 1
    assert cl.parse_blank(seg0, stop) == SEG - stop
    assert cl.blank_record(stop, SEG) == seg0[stop:stop + cl.BLANK_SIZE]
    assert seg0[stop + cl.BLANK_SIZE:] == bytes(SEG - stop - cl.BLANK_SIZE)
    # every record left MIN_BLANK bytes behind it; the next one did not fit and opened segment 1
    sizes = [cl.parse_size_magic(seg0, int(p))[0] for p in starts]
    assert all(cl.fits(int(p), s, SEG) for p, s in zip(starts, sizes))
    nxt = put_results[len(starts)]
    assert nxt["wrote_offset"] == SEG and not cl.fits(stop, nxt["wrote_bytes"], SEG)
    assert cl.parse_fixed(seg1, 0).physical_offset == SEG


def _place(sizes, seg_size):
    """Records of ``sizes`` placed with the §1.7 rule: {segment: [(pos, size)]}, BLANK positions."""
    segs, blanks, seg, pos = {0: []}, {}, 0, 0
    for s in sizes:
        if not cl.fits(pos, s, seg_size):
            blanks[seg] = pos
            seg, pos = seg + 1, 0
            segs[seg] = []
        segs[seg].append((pos, s))
        pos += s
    return segs, blanks


def test_tiny_segments_of_256_bytes_roll_at_the_edge():
    F = 256
    # 92 + 156 = 248 = F - 8: the second record fits exactly (it leaves MIN_BLANK bytes), and the
    # BLANK after it is 8 bytes long. 100 + 149 = 249: the 149-byte record would leave 7 bytes, so a
    # BLANK of 156 closes that file and the record opens the next one.
    sizes = [92, 156, 100, 149, 92]
    segs, blanks = _place(sizes, F)
    assert [[p for p, _ in segs[k]] for k in sorted(segs)] == [[0, 92], [0], [0, 149]]
    assert blanks == {0: 248, 1: 100}
    files = {}
    phys = 0
    for k in sorted(segs):
        out = bytearray(F)
        for pos, size in segs[k]:
            phys = k * F + pos
            body_len = size - cl.record_size(0, 1, 0)
            r = cl.Record(size, cl.MAGIC_V1, 0, 1, 0, 0, phys, 0, 1, cl.pack_host(bytes(4), 1), 2,
                          cl.pack_host(bytes(4), 2), 0, 0, bytes(body_len), b"t", b"")
            out[pos:pos + size] = cl.pack_record(r)
        if k in blanks:
            out[blanks[k]:blanks[k] + cl.BLANK_SIZE] = cl.blank_record(blanks[k], F)
        files[k] = bytes(out)
    for k, data in files.items():
        starts, stop, reason = codec.record_starts(np.frombuffer(data, np.uint8))
        assert starts.tolist() == [p for p, _ in segs[k]]
        if k in blanks:
            assert (stop, reason) == (blanks[k], 1) and cl.parse_blank(data, stop) == F - stop
        else:                                      # the last segment: zeros end the data
            assert reason == 2 and stop == sum(s for _, s in segs[k])
            assert cl.parse_size_magic(data, stop) == (0, 0)
        for p, s in segs[k]:
            r = cl.parse_record(data[p:p + s])
            assert r.physical_offset == k * F + p and r.total_size == s
