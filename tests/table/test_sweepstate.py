"""The object sweep's state file (storelib.table.sweepstate): what it holds reads back, and a
state that is not exactly one of its format (damaged, cut short, another version, forged without
its checksum, malformed) reads as none, so the sweep runs in full. The sweep's use of it runs on
moto in tests/ops/test_sweep_state.py."""
from __future__ import annotations

import hashlib
import json
import zlib

import pytest

from storelib.format import paths
from storelib.io import storage
from storelib.table import sweepstate

OBJ = paths.OBJECTS_DIR
KEPT = {f"{OBJ}/b1/a1/t1/commitlog/0.0", f"{OBJ}/b1/a1/t1/commitlog/0.0.extents", f"{OBJ}/b2/a2/t/index/x.pages"}


def test_a_state_reads_back_as_written_and_a_missing_one_as_none(tmp_path):
    st = storage.Store(str(tmp_path))
    assert sweepstate.read(st) is None
    sweepstate.write(st, ["part-2.parquet", "part-1.parquet"], KEPT | {f"{OBJ}/stray", "elsewhere/x"})
    got = sweepstate.read(st)
    assert got == sweepstate.State(frozenset({"part-1.parquet", "part-2.parquet"}), frozenset(KEPT))
    head = json.loads(st.read(paths.SWEEP_STATE).partition(b"\n")[0])
    assert (head["format"], head["version"], head["encoding"]) == ("rocketlake-sweep-state", 1, "zlib")


def _with_body(doc, **head) -> bytes:
    body = zlib.compress(json.dumps(doc).encode())
    h = dict({"format": sweepstate.FORMAT, "version": sweepstate.VERSION, "encoding": "zlib", "length": len(body),
              "sha256": hashlib.sha256(body).hexdigest()}, **head)
    return json.dumps(h).encode() + b"\n" + body


GOOD = {"data_files": ["part-1.parquet"], "kept": {"b1/a1": ["t/x.0"]}}


@pytest.mark.parametrize("data", [
    b"",
    b"not a header\n",
    sweepstate.encode(["part-1.parquet"], KEPT)[:-3],                            # cut short
    sweepstate.encode(["part-1.parquet"], KEPT)[:-1] + b"\x00",                  # a byte changed
    _with_body(GOOD, version=2),
    _with_body(GOOD, format="rocketlake-snapshot-cache"),
    _with_body(GOOD, sha256="0" * 64),                                           # forged without its checksum
    _with_body(GOOD, length=3),
    _with_body({"data_files": ["part-1.parquet"]}),
    _with_body({"data_files": ["part-1.parquet"], "kept": {"b1/a1": ["t/x.0"]}, "more": 1}),
    _with_body({"data_files": ["../part-1.parquet"], "kept": {}}),
    _with_body({"data_files": "part-1.parquet", "kept": {}}),
    _with_body({"data_files": [], "kept": {"b1": ["t/x.0"]}}),                   # not an attempt's prefix
    _with_body({"data_files": [], "kept": {"b1/a1": [""]}}),
    _with_body({"data_files": [], "kept": {"b1/a1": "t/x.0"}}),
    _with_body([1, 2]),
], ids=["empty", "no-json", "cut", "altered", "version", "format", "sha256", "length", "no-kept", "extra", "path",
        "files-type", "prefix", "empty-key", "kept-type", "list"])
def test_a_state_not_exactly_of_its_format_reads_as_none(data):
    assert sweepstate.decode(data) is None
    assert sweepstate.decode(_with_body(GOOD)) == sweepstate.State(frozenset({"part-1.parquet"}),
                                                                   frozenset({f"{OBJ}/b1/a1/t/x.0"}))
