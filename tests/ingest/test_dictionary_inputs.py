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
