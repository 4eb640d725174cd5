"""What the object sweep (storelib.table.objsweep) counts as named, and what it refuses, on a
store directory of hand-made manifest data files and objects (no Delta log: the functions that
read the data files and list the objects, not the whole sweep; that one runs on moto in
tests/ops/test_object_sweep.py)."""
from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storelib.errors import CorruptStore
from storelib.format import paths
from storelib.io import extentlists, headpages, storage
from storelib.table import objsweep

OBJ = paths.OBJECTS_DIR


def _store(tmp_path, rows: list, objects: dict) -> storage.Store:
    st = storage.Store(str(tmp_path))
    for rel, data in objects.items():
        st.write_file(rel, [data])
    st.makedirs(paths.MANIFEST_DIR)
    table = pa.Table.from_pylist([dict({"action": "add", "staged_path": None}, **r) for r in rows],
                                 schema=pa.schema([("action", pa.string()), ("path", pa.string()),
                                                   ("staged_path", pa.string()), ("detail", pa.string())]))
    pq.write_table(table, st.path(f"{paths.MANIFEST_DIR}/part-00000.parquet"))
    return st


def _list(rel: str, obj: str, listed: list) -> tuple[bytes, list]:
    """(a list object's bytes, its row entry) listing extents in the objects ``listed``."""
    ext = [[k * 10, 10, o, 0] for k, o in enumerate(listed)]
    data = extentlists.encode(rel, 0, 10 * len(listed), ext)
    return data, [obj, hashlib.sha256(data).hexdigest(), 0, 10 * len(listed), len(listed)]


def test_every_object_a_row_names_counts_its_lists_contents_and_heads_included(tmp_path):
    data, entry = _list("commitlog/0", f"{OBJ}/b1/a1/t/commitlog/0.0.extents", [f"{OBJ}/b1/a1/t/commitlog/0.0"])
    detail = {"extents": [[10, 5, f"{OBJ}/b2/a2/t/commitlog/0.0", 0]], "extent_lists": [entry]}
    head = {"extents": [], "head": headpages.HeadMap.whole(40, f"{OBJ}/b2/a2/t/index/x.pages", 0).to_detail()}
    removed = {"reason": "x", "previous_detail": json.dumps({"extents": [[0, 1, f"{OBJ}/b0/a0/t/commitlog/9.0", 0]]})}
    st = _store(tmp_path, [{"path": "commitlog/0", "detail": json.dumps(detail)},
                           {"path": "index/x", "detail": json.dumps(head)},
                           {"path": "commitlog/9", "action": "remove", "detail": json.dumps(removed)}],
                {entry[0]: data})
    named, files = objsweep.named_objects(st)
    assert files == 1
    assert named == {f"{OBJ}/b1/a1/t/commitlog/0.0.extents", f"{OBJ}/b1/a1/t/commitlog/0.0",
                     f"{OBJ}/b2/a2/t/commitlog/0.0", f"{OBJ}/b2/a2/t/index/x.pages"}
    # (a remove row's previous detail is a JSON string: its objects were the expiry's to delete)


def _row(entry: list) -> dict:
    return {"path": "commitlog/0", "detail": json.dumps({"extents": [[10, 5, f"{OBJ}/b2/a2/t/c.0", 0]],
                                                         "extent_lists": [entry]})}


def test_a_missing_list_object_names_nothing_more_unless_a_live_row_names_it(tmp_path):
    _, entry = _list("commitlog/0", f"{OBJ}/b1/a1/t/commitlog/0.0.extents", [f"{OBJ}/b1/a1/t/commitlog/0.0"])
    row = _row(entry)
    st = _store(tmp_path, [row], {})
    named, _ = objsweep.named_objects(st)
    assert named == {entry[0], f"{OBJ}/b2/a2/t/c.0"}
    with pytest.raises(CorruptStore, match="is missing"):
        objsweep.named_objects(st, [row])


@pytest.mark.parametrize("damage", ["detail", "list", "altered"])
def test_what_cannot_be_read_stops_the_sweep(tmp_path, damage):
    """A detail that does not parse, a list object that does not, and one whose bytes were altered
    and still parse (it lists another object: only its sha256 tells), of a row that is not live."""
    listed = f"{OBJ}/b1/a1/t/commitlog/0.0"
    _, entry = _list("commitlog/0", f"{OBJ}/b1/a1/t/commitlog/0.0.extents", [listed])
    body = {"detail": b"", "list": b"not zlib",
            "altered": extentlists.encode("commitlog/0", 0, 10, [[0, 10, listed.replace("/t/", "/u/"), 0]])}[damage]
    row = {"path": "commitlog/0", "detail": "{not json " + OBJ} if damage == "detail" else _row(entry)
    st = _store(tmp_path, [row], {entry[0]: body})
    with pytest.raises(CorruptStore, match="nothing is deleted"):
        objsweep.named_objects(st)


def test_only_committed_attempts_objects_no_row_names_are_unnamed(tmp_path):
    objs = {f"{OBJ}/b1/a1/t/x.0": b"1", f"{OBJ}/b1/a1/t/x.1": b"22", f"{OBJ}/b1/dead/t/x.0": b"333",
            f"{OBJ}/b2/a2/t/y.0": b"4444"}
    st = _store(tmp_path, [], objs)
    got = objsweep.unnamed_objects(st, {("b1", "a1"), ("b2", "a2")}, {f"{OBJ}/b1/a1/t/x.0"})
    assert got.unnamed == {f"{OBJ}/b1/a1/t/x.1": 2, f"{OBJ}/b2/a2/t/y.0": 4}
    assert (got.kept, got.uncommitted) == (1, 1)
