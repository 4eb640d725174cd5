"""A Parquet split's topic and host columns read as dictionaries (inputs.read_split): the split's
records, their dispatch facts and its queue keys are those of the same rows read as strings,
whatever the file holds (dictionary or plain pages, one host or several, nulls, a dictionary with
values no row uses or a value twice), and ``arrays.dictionary_encoded`` is ``pc.dictionary_encode``
of the decoded values."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import given, HealthCheck, settings, strategies as st

from storelib.codec import messages as codec
from storelib.codec.hosts import host_column
from storelib.compute.arrays import dictionary_encoded
from storelib.errors import InputError
from storelib.format.config import StoreConfig
from storelib.ingest import encode, inputs, topics as topics_mod

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOPICS = ["orders", "payments", "a" * 200, codec.SCHEDULE_TOPIC, "%RETRY%g|x"]
BAD_TOPIC = "t-\u00e9"             # not a topic directory name: the same problem either way
HOSTS = ["10.0.0.1:10911", "10.0.0.2:1", "[::1]:9876", "[fe80::2]:80"]
PAIRS = pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())]))


def parquet_rows(n: int, topic_of, born_of, store_of) -> pa.Table:
    """``n`` messages in the Parquet input layout: topics and hosts chosen by the row number."""
    props = [[{"name": "KEYS", "value": f"k{i}"}, {"name": "DELAY", "value": str(i % 3)},
              {"name": "TAGS", "value": f"t{i % 2}"}] for i in range(n)]
    return pa.table({
        "topic": pa.array([topic_of(i) for i in range(n)], pa.string()),
        "queue_id": pa.array([i % 3 if i % 5 else None for i in range(n)], pa.int32()),
        "store_timestamp": pa.array([1_700_000_000_000 + i for i in range(n)], pa.int64()),
        "born_host": pa.array([born_of(i) for i in range(n)], pa.string()),
        "store_host": pa.array([store_of(i) for i in range(n)], pa.string()),
        "body": pa.array([b"b%d" % i for i in range(n)], pa.large_binary()),
        "properties": pa.array(props, PAIRS)})


def encoded(table: pa.Table, label) -> dict:
    """What an encode task derives from a canonical table: the records and every per-message fact,
    or the problems it names."""
    filled = topics_mod.fill(table, topics_mod.Topics.default(), None, None, None, label)
    try:
        pm = codec.prepare(filled.table, StoreConfig(), label)
    except InputError as e:
        return {"problems": e.problems}
    unplaced = np.zeros(pm.n, np.int64)
    codes, keys = encode._queue_keys(pm)
    return {"records": codec.encode(pm, unplaced, unplaced, False, fill_crc=False).tobytes(),
            "sizes": pm.sizes.tolist(), "sys_flag": pm.sys_flag.tolist(), "tags": pm.tags_code.tolist(),
            "index": (pm.index_msg.tolist(), pm.index_hash.tolist()), "queue": pm.queue_id.tolist(),
            "topics": pm.topic_dictionary.to_pylist(), "topic_index": pm.topic_index.tolist(),
            "keys": (codes.tolist(), keys), "rr": (filled.rr_topics, filled.rr_topic.tolist(), filled.rr_rank.tolist())}


def test_a_parquet_split_reads_topics_and_hosts_as_dictionaries(tmp_path):
    """Dictionary pages and plain pages alike: the three columns come back dictionary-encoded,
    their values those of the file; the other text columns as before."""
    table = parquet_rows(50, lambda i: TOPICS[i % 2], lambda i: HOSTS[i % 3], lambda i: HOSTS[0])
    for name, opts in (("dict.parquet", {}), ("plain.parquet", {"use_dictionary": False})):
        path = str(tmp_path / name)
        pq.write_table(table, path, row_group_size=16, **opts)
        got = pa.concat_tables(inputs.read_split(s)[0] for s in inputs.plan_splits(path, "parquet", 3))
        for col in codec.DICTIONARY_FIELDS:
            assert got.schema.field(col).type == codec.TEXT_DICTIONARY, (name, col)
            assert got.column(col).to_pylist() == table.column(col).to_pylist()
        assert got.schema.field("properties_string").type == pa.large_string()
        assert inputs.read_all(path, "parquet").schema == codec.MESSAGE_SCHEMA


@SETTINGS
@given(n=st.integers(1, 60), row_group=st.integers(1, 25), splits=st.integers(1, 4),
       topic_seed=st.lists(st.integers(0, len(TOPICS)), min_size=1, max_size=6),
       born=st.lists(st.one_of(st.none(), st.sampled_from(HOSTS)), min_size=1, max_size=4),
       store=st.lists(st.sampled_from(HOSTS), min_size=1, max_size=3),
       use_dictionary=st.sampled_from([True, False, ["topic"], ["born_host", "store_host"]]),
       bad=st.integers(0, 5))
def test_a_split_read_with_dictionaries_encodes_as_its_strings(tmp_path_factory, n, row_group, splits, topic_seed,
                                                                born, store, use_dictionary, bad):
    pool = TOPICS + [BAD_TOPIC] * (bad == 0)
    table = parquet_rows(n, lambda i: pool[topic_seed[i % len(topic_seed)] % len(pool)], lambda i: born[(i // 3) % len(born)],
                         lambda i: store[(i // 7) % len(store)])
    path = str(tmp_path_factory.mktemp("pq") / "in.parquet")
    pq.write_table(table, path, row_group_size=row_group, use_dictionary=use_dictionary)
    for split in inputs.plan_splits(path, "parquet", splits):
        got, label = inputs.read_split(split)
        assert got.schema.field("topic").type == codec.TEXT_DICTIONARY
        assert encoded(got, label) == encoded(got.cast(codec.MESSAGE_SCHEMA), label)


def odd_dictionary(values: list, dictionary: list, order: list) -> pa.DictionaryArray:
    """``values`` (None: null) as a dictionary array over ``dictionary`` in the order ``order``,
    with an unused value and a value repeated, as another writer's dictionary may be."""
    words = [dictionary[k] for k in order] + ["unused", dictionary[order[0]]]
    pos = {w: k for k, w in enumerate(words)}
    idx = [None if v is None else (len(words) - 1 if r % 2 and v == words[-1] else pos[v]) for r, v in enumerate(values)]
    return pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), pa.array(words, pa.string()))


@SETTINGS
@given(data=st.data(), k=st.integers(1, 5), n=st.integers(0, 80))
def test_dictionary_encoded_is_the_encoding_of_the_decoded_values(data, k, n):
    dictionary = [f"v{j}" for j in range(k)]
    values = data.draw(st.lists(st.one_of(st.none(), st.sampled_from(dictionary)), min_size=n, max_size=n))
    order = data.draw(st.permutations(range(k)))
    arr = odd_dictionary(values, dictionary, order)
    assert arr.to_pylist() == values
    got, want = dictionary_encoded(arr), pc.dictionary_encode(pa.array(values, pa.string()))
    assert got.dictionary.to_pylist() == want.dictionary.to_pylist()
    assert got.indices.to_pylist() == want.indices.to_pylist()
    assert got.type == want.type


def test_a_dictionary_topic_column_with_odd_dictionaries_encodes_as_its_strings():
    """A topic and host dictionary holding an unused value, a value twice and a bad host no row
    uses: the same records as the strings, and no problem for the unused host."""
    n = 30
    table = parquet_rows(n, lambda i: TOPICS[(i * 7) % 3], lambda i: HOSTS[i % 2], lambda i: HOSTS[2])
    canonical = inputs.to_canonical(table, lambda i: f"row {i}", "body")
    odd = canonical
    for col, dictionary in (("topic", TOPICS[:3] + [BAD_TOPIC]), ("born_host", HOSTS[:2] + ["not a host"])):
        arr = odd_dictionary(table.column(col).to_pylist(), dictionary, list(range(len(dictionary)))[::-1])
        odd = odd.set_column(odd.schema.get_field_index(col), pa.field(col, codec.TEXT_DICTIONARY), arr)
    label = lambda i: f"row {i}"  # noqa: E731
    assert encoded(odd, label) == encoded(canonical, label)


def test_a_host_dictionary_of_one_host_is_every_row_that_host():
    one, bad = host_column(pa.DictionaryArray.from_arrays(pa.array([0, 0, 0], pa.int32()), pa.array([HOSTS[2]])))
    strings, _ = host_column(pa.array([HOSTS[2]] * 3))
    assert not bad and one.index.tolist() == [0, 0, 0] and one.is_v6.tolist() == [True] * 3
    assert one.raw.tolist() == strings.raw.tolist() and one.length.tolist() == strings.length.tolist()


def _typed(table: pa.Table, types: dict) -> pa.Table:
    return table.cast(pa.schema([f.with_type(types.get(f.name, f.type)) for f in table.schema]))


MANY = 600          # distinct topics and hosts past row 200: a 2 KB dictionary page overflows, plain pages follow
FILE_FORMS = {
    "large_string": ({"topic": pa.large_string(), "born_host": pa.large_string(), "store_host": pa.large_string()}, {}),
    "dictionary of large_string": ({"topic": pa.dictionary(pa.int16(), pa.large_string()),
                                    "born_host": pa.dictionary(pa.int16(), pa.string())}, {}),
    "binary": ({"topic": pa.binary(), "born_host": pa.large_binary()}, {}),
    "plain after the dictionary page": ({}, {"dictionary_pagesize_limit": 2048, "data_page_size": 512}),
    "row groups of their own topics": ({}, {"row_group_size": 37}),
}


def test_every_form_of_the_text_columns_encodes_as_its_strings(tmp_path):
    """Text columns stored as large_string, as an Arrow dictionary (of large_string, int16 indices),
    as binary, in a chunk whose dictionary page overflowed into plain pages, in row groups each with
    its own dictionary, hosts all null: a split's records and facts are those of the same rows read
    without dictionaries."""
    n = MANY + 200
    topic = lambda i: TOPICS[(i // 37) % len(TOPICS)] if i < 200 else f"t{i}"  # noqa: E731
    born = lambda i: None if i % 11 == 0 else (HOSTS[i % 4] if i < 200 else f"10.1.{i % 250}.{i // 250}:{i}")  # noqa: E731
    label = lambda i: f"row {i}"  # noqa: E731
    for name, (types, opts) in FILE_FORMS.items():
        for hosts in (lambda i: HOSTS[1], lambda i: None):
            table = _typed(parquet_rows(n, topic, born if hosts(0) else hosts, hosts), types)
            path = str(tmp_path / "in.parquet")
            pq.write_table(table, path, **opts)
            plain = inputs.to_canonical(pq.read_table(path), label, "body").cast(codec.MESSAGE_SCHEMA)
            got = [inputs.read_split(s) for s in inputs.plan_splits(path, "parquet", 3)]
            whole = pa.concat_tables([t.cast(codec.MESSAGE_SCHEMA) for t, _ in got])
            assert whole.equals(plain), name
            for t, lab in got:
                assert encoded(t, lab) == encoded(t.cast(codec.MESSAGE_SCHEMA), lab), name
            assert encoded(*inputs.read_split(inputs.plan_splits(path, "parquet", 1)[0])) == encoded(plain, label), name


def test_row_groups_of_a_narrow_dictionary_join_in_one_split(tmp_path):
    """A column stored as an Arrow dictionary with int8 indices, each row group with its own 100
    values: one split reads three groups, 300 values in all, and encodes them as their strings
    (joining the groups' int8 dictionaries failed: "the unified dictionary requires a larger
    index type")."""
    path = str(tmp_path / "int8.parquet")
    narrow = pa.dictionary(pa.int8(), pa.string())
    groups = [_typed(parquet_rows(200, lambda i, g=g: f"g{g}-{i % 100}", lambda i: HOSTS[i % 2], lambda i: HOSTS[3]),
                     {"topic": narrow}) for g in range(3)]
    with pq.ParquetWriter(path, groups[0].schema) as w:
        for rows in groups:
            w.write_table(rows)
    [split] = inputs.plan_splits(path, "parquet", 1)
    got, label = inputs.read_split(split)
    assert got.column("topic").to_pylist() == [f"g{g}-{i % 100}" for g in range(3) for i in range(200)]
    plain = inputs.to_canonical(_typed(pa.concat_tables(groups), {"topic": pa.string()}), label, "body")
    assert encoded(got, label) == encoded(plain, label)
