"""codec.prepare's ``waits`` (Message.isWaitStoreMsgOK: WAIT absent, or Boolean.parseBoolean of its
value, "true" in any case) and its topic dictionary (``topic_dictionary`` / ``topic_index``, which
the encode stage's queue keys read instead of encoding the topics again)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from storelib.codec import messages as codec
from storelib.format.config import StoreConfig

WAIT_VALUES = [None, "true", "TRUE", "True", "tRuE", "false", "ture", "tru", "truee", "", "trü", "тrue",
               "truе", "TRUЕ", "t\x01ue", "4rue", "Tru\x05", "\x54\x52\x55\x45", "yes", "1"]


def _table(props: list, topics: list) -> pa.Table:
    n = len(props)
    return pa.table({
        "topic": topics, "queue_id": pa.array([i % 3 for i in range(n)], pa.int32()),
        "flag": pa.array([0] * n, pa.int32()), "sys_flag": pa.array([0] * n, pa.int32()),
        "born_timestamp": pa.array([1] * n, pa.int64()), "store_timestamp": pa.array([2] * n, pa.int64()),
        "born_host": ["10.0.0.7:50123"] * n, "store_host": ["192.168.0.10:10911"] * n,
        "reconsume_times": pa.array([0] * n, pa.int32()), "prepared_transaction_offset": pa.array([0] * n, pa.int64()),
        "body": pa.array([b"b"] * n, pa.large_binary()), "properties_string": pa.array(props, pa.large_string()),
    }, schema=codec.MESSAGE_SCHEMA)


def _parse_boolean(value) -> bool:
    """Java's Boolean.parseBoolean: "true".equalsIgnoreCase(value) (no other character folds to
    one of t, r, u, e)."""
    return value is not None and value.isascii() and value.lower() == "true"


def test_waits_read_the_wait_property_as_the_broker_does():
    props = [("" if v is None else f"TAGS\x01a\x02WAIT\x01{v}\x02KEYS\x01k\x02") for v in WAIT_VALUES]
    props += ["WAIT\x01false\x02WAIT\x01TRUE\x02", "WAIT\x01true\x02WAIT\x01\x02", "WAIT\x01True"]
    pm = codec.prepare(_table(props, ["T"] * len(props)), StoreConfig())
    # an empty value does not count: WAIT is then absent (the put waits)
    expected = [v is None or v == "" or _parse_boolean(v) for v in WAIT_VALUES] + [True, True, True]
    assert pm.waits.tolist() == expected


def test_the_topic_dictionary_indexes_every_row():
    topics = ["b", "a", "b", "%RETRY%c", "a", "b"]
    pm = codec.prepare(_table([""] * len(topics), topics), StoreConfig())
    assert np.asarray(pm.topic_dictionary.to_pylist(), object)[pm.topic_index].tolist() == topics
    assert len(set(pm.topic_dictionary.to_pylist())) == len(pm.topic_dictionary) == 3
