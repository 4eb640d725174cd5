"""codec.hosts.host_column: a column of one host (compared, not hashed) reads as the same column
with a second host (dictionary-encoded) does on the rows they share; a bad host names every row."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from storelib.codec.hosts import host_column

ONE = "192.168.0.10:10911"


def test_one_host_on_every_row_reads_as_the_dictionary_path():
    one, _ = host_column(pa.chunked_array([[ONE] * 3, [ONE] * 2]))
    mixed, _ = host_column(pa.array([ONE] * 5 + ["[::1]:9876"]))
    assert one.index.tolist() == [0] * 5 and one.index.dtype == np.int64
    assert one.raw[0].tolist() == mixed.raw[mixed.index[0]].tolist()
    assert one.length.tolist() == [mixed.length[mixed.index[0]]]
    assert one.is_v6.tolist() == [False] * 5 and mixed.is_v6.tolist() == [False] * 5 + [True]


def test_a_bad_host_on_every_row_names_every_row():
    _, bad = host_column(pa.array(["not a host"] * 4))
    _, bad_mixed = host_column(pa.array(["not a host"] * 4 + [ONE]))
    assert [r.tolist() for r, _ in bad] == [[0, 1, 2, 3]] == [r.tolist() for r, _ in bad_mixed]
    assert bad[0][1] == bad_mixed[0][1]


def test_an_empty_column_takes_the_dictionary_path():
    empty, bad = host_column(pa.array([], pa.string()))
    assert len(empty.index) == 0 and not bad
