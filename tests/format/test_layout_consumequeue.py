"""The consume-queue unit and the end-of-file rule (storelib/format/consumequeue.py; docs/FORMAT.md §2, §6.4).

Like RocketMQ's ConsumeQueueTest, without Spark: tiny files written through the layout helpers,
read back with the parse helpers; golden small-roll queue files decoded and re-encoded byte for byte.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from support import goldenlib
from conftest import golden_set
from storelib.format import consumequeue as cq

CQ_FILE = 600          # small-roll's mappedFileSizeConsumeQueue (30 units)
QUEUE = "%RETRY%cg_payments", 0          # 9 files in small-roll: rolls 8 times


def _listing():
    return goldenlib.load_listing(golden_set("small-roll"))


def _golden_file(rel: str) -> bytes:
    root, files = _listing()
    f = next(f for f in files if f["path"] == rel)
    return b"".join(goldenlib.golden_blocks(os.path.join(root, f["stored_as"]), f["size"]))


@pytest.fixture(scope="module")
def expected_units():
    """(phys, size) per queue offset of QUEUE, from the golden input and RocketMQ's put results."""
    d = golden_set("small-roll")
    with open(os.path.join(d, "messages.jsonl"), encoding="utf-8") as fh:
        msgs = [json.loads(line) for line in fh]
    with open(os.path.join(d, "put_results.jsonl"), encoding="utf-8") as fh:
        puts = [json.loads(line) for line in fh]
    out = {}
    for m, p in zip(msgs, puts):
        if (m["topic"], m["queue_id"]) == QUEUE and p["stored_sys_flag"] & 0xC in (0, 0x8):
            out[p["queue_offset"]] = (p["wrote_offset"], p["wrote_bytes"])
    return out


def test_unit_layout():
    assert cq.UNIT_SIZE == cq.UNIT_DTYPE.itemsize == 20
    assert [cq.UNIT_DTYPE.fields[n][1] for n in ("phys", "size", "tags")] == \
        [cq.UNIT_PHYSICALOFFSET, cq.UNIT_TOTALSIZE, cq.UNIT_TAGSCODE] == [0, 8, 12]
    assert all(cq.UNIT_DTYPE.fields[n][0].byteorder == ">" for n in ("phys", "size", "tags"))
    raw = cq.pack_unit(0x0102030405060708, 244, -2)
    assert raw == bytes.fromhex("0102030405060708" "000000f4" "fffffffffffffffe")
    assert cq.encode_units(np.array([0x0102030405060708]), np.array([244]), np.array([-2])).tobytes() == raw
    assert cq.parse_unit(raw) == (0x0102030405060708, 244, -2)
    u = cq.decode_units(raw + raw[:7])                    # a partial unit at the end is not a unit
    assert len(u) == 1 and (int(u["phys"][0]), int(u["size"][0]), int(u["tags"][0])) == cq.parse_unit(raw)


def test_tiny_file_of_five_units_end_of_file_rule():
    per_file = 5
    units = [(0, 91, 7), (91, 100, -1), (191, 92, 0)]
    body = b"".join(cq.pack_unit(*u) for u in units)
    data = body + bytes(per_file * cq.UNIT_SIZE - len(body))        # zero tail: the last file
    assert len(data) == 100
    assert cq.valid_units(data) == 3
    assert cq.valid_units(cq.decode_units(data)) == 3

    def reader(buf):
        return lambda i: cq.parse_unit(buf, i * cq.UNIT_SIZE) if (i + 1) * cq.UNIT_SIZE <= len(buf) else None

    assert cq.valid_units(reader(data), per_file) == 3
    assert cq.valid_units(reader(data), per_file, exact=False) == 3
    full = b"".join(cq.pack_unit(i * 100, 100, i) for i in range(per_file))
    assert cq.valid_units(full) == cq.valid_units(reader(full), per_file) == per_file
    assert cq.valid_units(bytes(100)) == cq.valid_units(reader(bytes(100)), per_file) == 0
    # a file shorter than its size (a reader sees fewer bytes): only whole units count
    assert cq.valid_units(reader(data[:50]), per_file) == 2
    # n caps the count (a file larger than the configured size)
    assert cq.valid_units(full, 4) == 4
    # fillPreBlank's filler units (0, Integer.MAX_VALUE, 0) count as in use
    assert cq.unit_in_use(0, cq.FILLER_SIZE)
    # Units that fail the rule: offset < 0 or size <= 0
    assert not cq.unit_in_use(-1, 10) and not cq.unit_in_use(5, 0) and not cq.unit_in_use(5, -3)


def test_a_hole_before_valid_units():
    """RocketMQ's recovery walk stops at the first unit not in use, also when later units are;
    the binary search of a range reader that trusts the write order (exact=False) does not notice."""
    units = [(0, 91, 0), (0, 0, 0), (182, 91, 0), (273, 91, 0), (0, 0, 0)]
    data = b"".join(cq.pack_unit(*u) for u in units)
    assert cq.valid_units(data) == 1
    read = lambda i: cq.parse_unit(data, i * cq.UNIT_SIZE)       # noqa: E731
    assert cq.valid_units(read, 5) == 1
    assert cq.valid_units(read, 5, exact=False) == 4


def test_unit_position_and_file_names_roll_every_file_size():
    size = 5 * cq.UNIT_SIZE
    assert [cq.unit_position(q, size) for q in (0, 4, 5, 9, 10)] == [(0, 0), (0, 80), (100, 0), (100, 80), (200, 0)]
    assert cq.rel_path("T", 3, 5) == "consumequeue/T/3/00000000000000000100"


def test_golden_queue_files_decode_and_reencode_byte_identically(expected_units):
    _, files = _listing()
    rels = sorted((f["path"] for f in files if f["path"].startswith(f"consumequeue/{QUEUE[0]}/{QUEUE[1]}/")),
                  key=lambda r: int(r.rsplit("/", 1)[1]))
    assert len(rels) > 2
    seen = 0
    for k, rel in enumerate(rels):
        data = _golden_file(rel)
        assert len(data) == CQ_FILE
        base = int(rel.rsplit("/", 1)[1])
        assert base == k * CQ_FILE
        u = cq.decode_units(data)
        n = cq.valid_units(data)
        last = k == len(rels) - 1
        assert n == (len(u) if not last else len(expected_units) - seen)
        assert n < len(u) if last else n == CQ_FILE // cq.UNIT_SIZE
        assert cq.encode_units(u["phys"][:n], u["size"][:n], u["tags"][:n]).tobytes() + bytes(CQ_FILE - n * 20) == data
        for i in range(n):
            q = base // cq.UNIT_SIZE + i
            assert cq.unit_position(q, CQ_FILE) == (base, i * cq.UNIT_SIZE)
            assert cq.parse_unit(data, i * cq.UNIT_SIZE)[:2] == expected_units[q]
        seen += n
    assert seen == len(expected_units)
