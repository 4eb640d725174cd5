"""The staged arrays container (storelib.ingest.staged_arrays) and the two files built on it: a split's
``.facts`` (read whole) and its ``.plan`` (read a chunk at a time) read back as written, as views,
and a truncated or damaged file is refused with one clear IngestError. No Spark."""
from __future__ import annotations

import os

import numpy as np
import pytest

from storelib.errors import IngestError
from storelib.ingest import encode as encode_stage, split_facts, staged_arrays
from storelib.ingest.split_staging import LocalStaging

ARRAYS = {"sizes": np.arange(7, dtype=np.int32), "ts": np.arange(7, dtype=np.int64) * 10**12,
          "grid": np.arange(12, dtype="<i8").reshape(4, 3), "empty": np.zeros(0, np.int64),
          "flags": np.array([True, False]), "wide": np.zeros((0, 5), np.int32)}


def _staged(tmp_path, name, chunks) -> LocalStaging:
    staged = LocalStaging(str(tmp_path))
    staged.write_file(name, chunks)
    return staged


def _cut(tmp_path, name, keep) -> None:
    path = os.path.join(str(tmp_path), name)
    with open(path, "r+b") as fh:
        fh.truncate(keep(os.path.getsize(path)))


def test_arrays_read_back_whole_and_by_rows_as_views(tmp_path):
    staged = _staged(tmp_path, "a.arr", staged_arrays.file_chunks("test", dict(ARRAYS), keys=[["T", 3]], n=7))
    got = staged_arrays.read_arrays(staged, "a.arr", "test")
    ranged = staged_arrays.RangedArrays(staged, "a.arr", "test")
    assert got["keys"] == [["T", 3]] and got["n"] == 7 and ranged.values == {"keys": [["T", 3]], "n": 7}
    for name, a in ARRAYS.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape and np.array_equal(got[name], a), name
        assert not got[name].flags.writeable and not got[name].flags.owndata and got[name].flags.aligned
        assert ranged.shape(name) == a.shape
    assert np.array_equal(ranged.rows("grid", 1, 2), ARRAYS["grid"][1:3])
    assert np.array_equal(ranged.rows("ts", 6, 1), ARRAYS["ts"][6:]) and ranged.rows("wide", 0, 0).shape == (0, 5)
    with pytest.raises(IndexError):
        ranged.rows("grid", 3, 2)


def test_a_damaged_or_foreign_arrays_file_is_refused(tmp_path):
    staged = _staged(tmp_path, "a.arr", staged_arrays.file_chunks("test", dict(ARRAYS)))
    with pytest.raises(IngestError, match="a.arr: a staged test file, not a staged other file"):
        staged_arrays.read_arrays(staged, "a.arr", "other")
    staged.write_file("zip.arr", [b"PK\x03\x04 not ours"])
    for read in (staged_arrays.read_arrays, staged_arrays.RangedArrays):
        with pytest.raises(IngestError, match="zip.arr: not a staged test file"):
            read(staged, "zip.arr", "test")
    _cut(tmp_path, "a.arr", lambda size: size - 70)           # "flags" (2 bytes padded to 64) is gone
    with pytest.raises(IngestError, match=r"a.arr: damaged staged test file: it ends at byte \d+, .*truncated"):
        staged_arrays.read_arrays(staged, "a.arr", "test")
    with pytest.raises(IngestError, match="a.arr: damaged staged test file: it ends at byte"):
        staged_arrays.RangedArrays(staged, "a.arr", "test").rows("flags", 0, 2)
    _cut(tmp_path, "a.arr", lambda size: 40)                   # inside the header
    for read in (staged_arrays.read_arrays, staged_arrays.RangedArrays):
        with pytest.raises(IngestError, match="a.arr: damaged staged test file .its header"):
            read(staged, "a.arr", "test")


def _facts():
    arrays = {"sizes": np.array([90, 91, 92], np.int32), "qkey": np.array([0, -2, -1], np.int32),
              "ts": np.array([1, 2, 3], np.int64) * 10**12, "ihash": np.array([-1, 5], np.int32)}
    return arrays, {"qkeys": [["T", 3]], "rr_topics": ["R"]}


def test_split_facts_round_trip_and_refuse_damage(tmp_path):
    arrays, values = _facts()
    staged = _staged(tmp_path, "s.facts", encode_stage.facts_file(dict(arrays), **values))
    got = encode_stage.load_split_facts(staged, "s.facts")
    assert all(np.array_equal(got[k], a) and got[k].dtype == a.dtype for k, a in arrays.items())
    assert {k: got[k] for k in values} == values
    _cut(tmp_path, "s.facts", lambda size: size - 70)
    with pytest.raises(IngestError, match="s.facts: damaged staged split facts file: it ends at byte"):
        encode_stage.load_split_facts(staged, "s.facts")
    plan = split_facts.planner_file(arrays["sizes"], np.zeros(3, np.int32), np.zeros(3, np.int32), [("T", 3)], [], [])
    staged.write_file("s.plan", plan)
    with pytest.raises(IngestError, match="s.plan: a staged split plan file, not a staged split facts file"):
        encode_stage.load_split_facts(staged, "s.plan")


def test_split_plan_round_trip_and_refuse_damage(tmp_path):
    sizes = np.array([100, 200, 300, 400, 500], np.int32)
    entries = np.array([1, 0, 2, 0, 1], np.int32)
    pcode = np.array([0, 1, -1, 2, 2], np.int32)               # keys 0 and 1, then round-robin topic R (1 queue)
    staged = _staged(tmp_path, "s.plan", split_facts.planner_file(sizes, entries, pcode, [("T", 0), ("T", 1)],
                                                                  ["R"], [1], chunk_rows=2))
    d = split_facts.ChunkedDetail(staged, "s.plan", {"R": 5})
    assert (d.rows, d.chunk_rows, d.width, d.nchunks) == (5, 2, 3, 3)
    assert [d.bytes_before(r) for r in range(6)] == [0, 100, 300, 600, 1000, 1500]
    assert [d.entries_before(r) for r in range(6)] == [0, 1, 1, 3, 3, 4]
    assert d.queue_counts_before(5) == {("T", 0): 1, ("T", 1): 1, ("R", 0): 2}
    assert d.fit_end(1, 500) == 3
    _cut(tmp_path, "s.plan", lambda size: size - 100)          # the counts are gone
    d = split_facts.ChunkedDetail(staged, "s.plan", {"R": 5})
    with pytest.raises(IngestError, match="s.plan: damaged staged split plan file: it ends at byte"):
        d.queue_counts_before(4)
    staged.write_file("s.facts", encode_stage.facts_file(*_facts()[:1], **_facts()[1]))
    with pytest.raises(IngestError, match="s.facts: a staged split facts file, not a staged split plan file"):
        split_facts.ChunkedDetail(staged, "s.facts")
