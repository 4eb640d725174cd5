"""The batch lookup's message columns, decoded only when a query uses them (storelib.read.keylookup_rows)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from storelib.read import keylookup, keylookup_rows
from storelib.io.storage import Store
from storelib.table.storefiles import open_files

KEYS = pa.table({"topic": ["metrics-raw", "shipping", "shipping"], "key": ["hot-metrics-raw", "hot-shipping", "nope"]})


@pytest.fixture(scope="module")
def golden(restored_golden):
    return restored_golden("small-roll")


@pytest.fixture(scope="module")
def expected(golden):
    """The full result rows of the in-process lookup (no lazy columns there)."""
    full = keylookup.lookup_keys_local(golden, KEYS)
    return full.sort_by([("commitlog_offset", "ascending"), ("query_key", "ascending")])


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


@pytest.mark.parametrize("limit", [keylookup.BROADCAST_LIMIT, 0])
def test_message_columns_are_decoded_only_when_used(spark, golden, expected, limit):
    """lazy=True, both plans: the same rows as the in-process lookup; count() skips the UDF."""
    eager = keylookup.lookup_keys(spark, golden, KEYS, broadcast_limit=limit)
    assert "ArrowEvalPython" not in _plan(eager)
    df = keylookup.lookup_keys(spark, golden, KEYS, broadcast_limit=limit, lazy=True)
    assert df.schema.simpleString() == eager.schema.simpleString()
    assert df.schema.simpleString() == spark.createDataFrame([], keylookup.RESULT_DDL).schema.simpleString()
    assert "ArrowEvalPython" in _plan(df)
    # count() and the light columns leave the UDF out: no record is read a second time
    assert "ArrowEvalPython" not in _plan(df.groupBy().count())
    assert "ArrowEvalPython" not in _plan(df.select("query_key", "commitlog_offset", "store_size"))
    assert df.count() == expected.num_rows
    got = df.toArrow().sort_by([("commitlog_offset", "ascending"), ("query_key", "ascending")])
    assert got.select(expected.column_names).cast(expected.schema).equals(expected)


@pytest.mark.parametrize("mapped", [True, False])
def test_fetch_messages_any_order_mapped_or_read(golden, expected, monkeypatch, mapped):
    """Rows come back in the order asked (duplicates too), from a memory map or range reads."""
    if not mapped:
        monkeypatch.setattr(keylookup_rows, "mapped_segment", lambda store, seg: None)
    store = Store(golden)
    files, _ = open_files(store, None, None)
    segs = {s.base: s for s in files.commitlog}
    phy = np.asarray(expected.column("commitlog_offset"))
    size = np.asarray(expected.column("store_size")).astype(np.int64)
    order = np.random.default_rng(1).permutation(np.concatenate([np.arange(len(phy)), [0, len(phy) - 1]]))
    for gap in (keylookup_rows._GAP, 0):                   # one read per run / per record
        monkeypatch.setattr(keylookup_rows, "_GAP", gap)
        got = keylookup_rows.fetch_messages(store, segs, files.config.mappedFileSizeCommitLog, phy[order],
                                            size[order])
        assert got.column_names == keylookup_rows.LAZY_NAMES
        assert got.equals(expected.select(keylookup_rows.LAZY_NAMES).take(pa.array(order)))
    empty = keylookup_rows.fetch_messages(store, segs, files.config.mappedFileSizeCommitLog,
                                          np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert empty.num_rows == 0 and empty.column_names == keylookup_rows.LAZY_NAMES
