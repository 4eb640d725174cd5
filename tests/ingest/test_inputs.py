"""Input splits and input layouts (no Spark): every row read exactly once, in order."""
from __future__ import annotations

import base64
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, HealthCheck, settings, strategies as st

from conftest import golden_set
from support.longrun import LONG
from storelib import errors
from storelib.codec import messages as codec
from storelib.ingest import inputs
from storelib.ingest.inputs import Split

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# the two split properties write a file per example (~0.3 s each on the loaded 2 cores): half the
# examples in make test, all of them under ROCKETLAKE_LONG=1
SPLIT_SETTINGS = settings(SETTINGS, max_examples=100 if LONG else 50)

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02\n"),
                max_size=30)


def json_msg(i: int, body_len: int, pad: str = "") -> dict:
    body = bytes((i * 7 + k) % 256 for k in range(body_len))
    props = [["UNIQ_KEY", f"U{i}"], ["KEYS", f"k{i} x"]] + ([["pad", pad]] if pad else [])
    return dict(topic=f"topic{i % 3}", queue_id=i % 4, flag=i, sys_flag=0, born_timestamp=1000 + i,
                store_timestamp=2000 + i, born_host="10.0.0.1:1", store_host="10.0.0.2:2", reconsume_times=0,
                prepared_transaction_offset=0, body_b64=base64.b64encode(body).decode(), properties=props,
                properties_string="".join(f"{k}\x01{v}\x02" for k, v in props))


def write_jsonl(path, rows, trailing_newline=True) -> bytes:
    data = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + ("\n" if trailing_newline else "")
    raw = data.encode()
    with open(path, "wb") as fh:
        fh.write(raw)
    return raw


def read_splits(splits) -> pa.Table:
    """The splits' canonical tables, their dictionary columns decoded (exactly MESSAGE_SCHEMA)."""
    tables = [inputs.read_split(s)[0].cast(codec.MESSAGE_SCHEMA) for s in splits]
    return pa.concat_tables(tables) if tables else codec.MESSAGE_SCHEMA.empty_table()


# ============================================================================ jsonl
@SPLIT_SETTINGS
@given(lengths=st.lists(st.integers(0, 400), min_size=1, max_size=12),
       pads=st.lists(_text, min_size=12, max_size=12),
       n_splits=st.integers(1, 40), split_bytes=st.integers(16, 4096), trailing=st.booleans())
def test_jsonl_splits_read_every_line_once_in_order(tmp_path_factory, lengths, pads, n_splits, split_bytes, trailing):
    path = str(tmp_path_factory.mktemp("jsonl") / "in.jsonl")
    rows = [json_msg(i, n, pads[i]) for i, n in enumerate(lengths)]
    write_jsonl(path, rows, trailing)
    splits = inputs.plan_splits(path, "jsonl", target_splits=n_splits, split_bytes=split_bytes)
    # contiguous byte ranges covering the file, in order
    size = os.path.getsize(path)
    assert splits[0].start == 0 and splits[-1].end == size and splits[0].first_line == 1
    assert all(a.end == b.start for a, b in zip(splits, splits[1:]))
    assert [s.index for s in splits] == list(range(len(splits)))
    got = read_splits(splits)
    assert got.column("born_timestamp").to_pylist() == [1000 + i for i in range(len(rows))]
    assert got.equals(inputs.jsonl_to_table(path))


@SETTINGS
@given(lines=st.lists(st.binary(max_size=50).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=15),
       cuts=st.lists(st.integers(0, 800), max_size=12), trailing=st.booleans())
def test_jsonl_block_assigns_each_line_to_the_split_of_its_first_byte(tmp_path_factory, lines, cuts, trailing):
    """_jsonl_block on arbitrary cut points (not only the planned ones)."""
    path = str(tmp_path_factory.mktemp("blk") / "x.jsonl")
    raw = b"\n".join(lines) + (b"\n" if trailing else b"")
    open(path, "wb").write(raw)
    bounds = sorted({0, len(raw), *[c % (len(raw) + 1) for c in cuts]})
    got = b""
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        data, begin = inputs._jsonl_block(Split(k, path, "jsonl", a, b))
        if data:
            assert a <= begin < b and (begin == 0 or raw[begin - 1:begin] == b"\n")
            assert raw[begin:begin + len(data)] == data
        got += data
    assert got == raw


def test_jsonl_block_long_lines(tmp_path):
    """Lines longer than the 64 KiB read chunk, split boundaries inside them."""
    lines = [b"a" * 200_000, b"b" * 10, b"c" * 70_000, b"", b"d" * 5]
    raw = b"\n".join(lines) + b"\n"
    path = str(tmp_path / "long.jsonl")
    open(path, "wb").write(raw)
    for bounds in ([0, 1, 100_000, 200_000, 200_001, 200_005, 250_000, len(raw)],
                   [0, 199_999, 200_012, 270_013, len(raw) - 1, len(raw)]):
        got = b"".join(inputs._jsonl_block(Split(0, path, "jsonl", a, b))[0] for a, b in zip(bounds, bounds[1:]))
        assert got == raw


def test_jsonl_splits_golden_small_roll():
    path = os.path.join(golden_set("small-roll"), "messages.jsonl")
    whole = inputs.jsonl_to_table(path)
    for n in (1, 7, 64):
        splits = inputs.plan_splits(path, "jsonl", target_splits=n)
        assert len(splits) == n
        assert read_splits(splits).equals(whole)


def test_jsonl_gz_is_one_split():
    path = os.path.join(golden_set("default-size"), "messages.jsonl.gz")
    splits = inputs.plan_splits(path, "jsonl", target_splits=8)
    assert len(splits) == 1 and splits[0].first_line == 1
    t, label = inputs.read_split(splits[0])
    assert t.num_rows == 20000 and "line 5" in label(4)


def test_jsonl_directory_in_path_order(tmp_path):
    d = tmp_path / "dir"
    (d / "sub").mkdir(parents=True)
    write_jsonl(d / "b.jsonl", [json_msg(2, 3), json_msg(3, 0)])
    write_jsonl(d / "a.jsonl", [json_msg(0, 1), json_msg(1, 2)])
    write_jsonl(d / "sub" / "c.jsonl", [json_msg(4, 9)])
    write_jsonl(d / "_ignored.jsonl", [json_msg(99, 1)])
    got = read_splits(inputs.plan_splits(str(d), "jsonl", target_splits=5, split_bytes=64))
    assert got.column("born_timestamp").to_pylist() == [1000, 1001, 1002, 1003, 1004]


def test_jsonl_split_labels_name_the_line(tmp_path):
    rows = [json_msg(i, 10) for i in range(6)]
    rows[4]["body_b64"] = "!!!!"
    path = str(tmp_path / "in.jsonl")
    write_jsonl(path, rows)
    splits = inputs.plan_splits(path, "jsonl", target_splits=1)
    with pytest.raises(errors.InputError) as ei:
        inputs.read_split(splits[0])
    assert "line 5" in str(ei.value) and "body_b64" in str(ei.value)


# ============================================================================ parquet
def canonical_rows(n: int) -> pa.Table:
    rows = []
    for i in range(n):
        props = f"UNIQ_KEY\x01U{i}\x02KEYS\x01k{i}\x02" if i % 3 else ("" if i % 2 else f"TAGS\x01t{i}\x02")
        rows.append(dict(topic=f"t{i % 2}", queue_id=i % 3, flag=i, sys_flag=0, born_timestamp=i,
                         store_timestamp=10 * i, born_host="1.2.3.4:5", store_host="[::1]:6", reconsume_times=i,
                         prepared_transaction_offset=0, body=bytes([i % 256]) * (i % 5),
                         properties_string=props))
    return pa.Table.from_pylist(rows, schema=codec.MESSAGE_SCHEMA)


@SPLIT_SETTINGS
@given(file_rows=st.lists(st.integers(0, 30), min_size=1, max_size=4), row_group=st.integers(1, 9),
       n_splits=st.integers(1, 50))
def test_parquet_row_range_splits(tmp_path_factory, file_rows, row_group, n_splits):
    d = tmp_path_factory.mktemp("pq")
    full = canonical_rows(sum(file_rows))
    pos = 0
    for k, nrows in enumerate(file_rows):
        part = inputs.canonical_to_parquet_input(full.slice(pos, nrows))
        pq.write_table(part, str(d / f"part-{k:03d}.parquet"), row_group_size=row_group)
        pos += nrows
    if sum(file_rows) == 0:
        assert inputs.plan_splits(str(d), "parquet", target_splits=n_splits) == []
        return
    splits = inputs.plan_splits(str(d), "parquet", target_splits=n_splits)
    assert all(s.start < s.end for s in splits)
    got = read_splits(splits)
    assert got.num_rows == full.num_rows
    assert got.equals(full), (got.to_pylist()[:3], full.to_pylist()[:3])
    # labels name the row within its file
    for s in splits:
        assert f"row {s.start}" in inputs.read_split(s)[1](0)


# ============================================================================ property layouts
PAIRS = [
    [["b", "2"], ["a", "1"], ["KEYS", "x\x01y"]],
    [],
    None,
    [["TAGS", "日本語😀"], ["a", ""]],
    [["z", "1"]],
]


def layouts():
    struct_t = pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())]))
    map_t = pa.map_(pa.string(), pa.string())
    pairs = pa.array(PAIRS, pa.list_(pa.list_(pa.string())))
    structs = pa.array([None if p is None else [{"name": k, "value": v} for k, v in p] for p in PAIRS], struct_t)
    maps = pa.array([None if p is None else [(k, v) for k, v in p] for p in PAIRS], map_t)
    large_structs = structs.cast(pa.large_list(struct_t.value_type))
    return {"pairs": pairs, "struct": structs, "map": maps, "large_struct": large_structs}


def _raw_with(props: pa.Array) -> pa.Table:
    n = len(props)
    return pa.table({"topic": ["t"] * n, "queue_id": pa.array([0] * n, pa.int32()),
                     "store_timestamp": pa.array(range(n), pa.int64()), "body": pa.array([b"x"] * n),
                     "properties": props})


EXPECTED = ["b\x012\x02a\x011\x02KEYS\x01x\x01y\x02", "", "", "TAGS\x01日本語😀\x02a\x01\x02", "z\x011\x02"]


@pytest.mark.parametrize("layout", ["pairs", "struct", "map", "large_struct"])
def test_property_layouts_give_the_same_string(layout):
    t = inputs.to_canonical(_raw_with(layouts()[layout]), lambda i: f"row {i}", "body")
    assert t.column("properties_string").to_pylist() == EXPECTED


@pytest.mark.parametrize("layout", ["pairs", "struct", "map"])
def test_property_layouts_sliced_and_chunked(layout):
    arr = layouts()[layout]
    raw = _raw_with(arr)
    sliced = raw.slice(2)
    t = inputs.to_canonical(sliced, lambda i: f"row {i}", "body")
    assert t.column("properties_string").to_pylist() == EXPECTED[2:]
    chunked = pa.concat_tables([raw.slice(0, 1), raw.slice(1, 3), raw.slice(4)])
    t = inputs.to_canonical(chunked, lambda i: f"row {i}", "body")
    assert t.column("properties_string").to_pylist() == EXPECTED


@pytest.mark.parametrize("layout", ["struct", "map"])
def test_property_layouts_through_parquet_splits(tmp_path, layout):
    arr = layouts()[layout]
    n = 40
    idx = pa.array([i % len(PAIRS) for i in range(n)])
    props = arr.take(idx)
    t = pa.table({"topic": ["t"] * n, "queue_id": pa.array([0] * n, pa.int32()),
                  "store_timestamp": pa.array(range(n), pa.int64()), "body": pa.array([b"x"] * n),
                  "properties": props})
    path = str(tmp_path / "p.parquet")
    pq.write_table(t, path, row_group_size=7)
    want = [EXPECTED[i % len(PAIRS)] for i in range(n)]
    for n_splits in (1, 3, 11, 40):
        got = read_splits(inputs.plan_splits(path, "parquet", target_splits=n_splits))
        assert got.column("properties_string").to_pylist() == want, n_splits
        assert got.column("store_timestamp").to_pylist() == list(range(n))


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.lists(st.tuples(_text.filter(bool), _text), max_size=4)), min_size=1,
                max_size=6))
def test_property_layouts_agree_random(props):
    expected = [None if p is None else "".join(f"{k}\x01{v}\x02" for k, v in p) for p in props]
    expected = ["" if e is None else e for e in expected]
    struct_t = pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())]))
    arrays = [pa.array([None if p is None else [list(kv) for kv in p] for p in props], pa.list_(pa.list_(pa.string()))),
              pa.array([None if p is None else [{"name": k, "value": v} for k, v in p] for p in props], struct_t)]
    if all(p is None or len({k for k, _ in p}) == len(p) for p in props):
        arrays.append(pa.array([None if p is None else list(p) for p in props], pa.map_(pa.string(), pa.string())))
    for arr in arrays:
        t = inputs.to_canonical(_raw_with(arr), lambda i: f"row {i}", "body")
        assert t.column("properties_string").to_pylist() == expected, arr.type
    # and the properties_string column, when given, must agree with them
    raw = _raw_with(arrays[1]).append_column("properties_string", pa.array(expected, pa.string()))
    assert inputs.to_canonical(raw, lambda i: f"row {i}", "body").column("properties_string").to_pylist() == expected


def test_canonical_to_parquet_input_round_trip(tmp_path):
    full = canonical_rows(25)
    path = str(tmp_path / "x.parquet")
    pq.write_table(inputs.canonical_to_parquet_input(full), path, row_group_size=4)
    assert inputs.read_all(path, "parquet").equals(full)


def test_parquet_splits_follow_row_groups_and_the_row_cap(tmp_path, monkeypatch):
    """A split is whole row groups when they fit (it decodes only its own), and at most about
    PARQUET_SPLIT_ROWS rows (an encode task's memory grows with its rows)."""
    full = canonical_rows(100)
    path = str(tmp_path / "p.parquet")
    pq.write_table(inputs.canonical_to_parquet_input(full), path, row_group_size=7)
    monkeypatch.setattr(inputs, "PARQUET_SPLIT_ROWS", 20)
    splits = inputs.plan_splits(path, "parquet", target_splits=2)
    assert [s.start for s in splits] == [0, 14, 28, 42, 56, 70, 84]
    assert max(s.end - s.start for s in splits) <= 20
    assert read_splits(splits).equals(full)
    # groups much larger than a split: even row ranges inside them
    pq.write_table(inputs.canonical_to_parquet_input(full), path, row_group_size=60)
    splits = inputs.plan_splits(path, "parquet", target_splits=2)
    assert [s.end - s.start for s in splits] == [20] * 5
    assert read_splits(splits).equals(full)
