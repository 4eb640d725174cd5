"""A small DataFrame (the README's one message) is ingested in this process, not in Spark's Python
workers (whose start and imports cost seconds): the same bytes as on Spark; a DataFrame behind a
shuffle, or more rows than the bound, runs on Spark without a look at its rows."""
from __future__ import annotations

import os

import pytest

from storelib.ingest import frame

pytestmark = pytest.mark.spark

SCHEMA = "topic string, body string, properties map<string,string>, store_timestamp long"


def _readme_frame(spark, n: int = 1):
    return spark.createDataFrame([("orders", f"from a DataFrame {i}", {"KEYS": f"order-{i}"}, 1717236000000 + i)
                                  for i in range(n)], SCHEMA)


def _files(store: str) -> dict:
    out = {}
    for d in ("commitlog", "consumequeue", "index"):
        for root, _, names in os.walk(os.path.join(store, d)):
            for name in names:
                path = os.path.join(root, name)
                out[os.path.relpath(path, store)] = open(path, "rb").read()
    return out


def test_small_frame_encodes_here_with_the_bytes_of_spark(spark, tmp_path, monkeypatch):
    here = []
    encode = frame.encode_partition
    monkeypatch.setattr(frame, "encode_partition", lambda *a: here.append(a[1]) or encode(*a))
    df = _readme_frame(spark, 3)
    local, remote = str(tmp_path / "local"), str(tmp_path / "spark")
    a = frame.ingest_dataframe(df, local, quiet=True)
    assert here == [0, 1]                                # encoded by this process, partition by partition
    b = frame.ingest_dataframe(df, remote, quiet=True, local="never")
    assert here == [0, 1]                                # encoded by Spark's workers
    assert a["status"] == b["status"] == "committed" and a["batch_id"] == b["batch_id"] and a["messages"] == 3
    assert _files(local) == _files(remote) and _files(local)
    assert frame.ingest_dataframe(df, local, quiet=True)["status"] == "already-committed"
    with pytest.raises(ValueError, match="local='sometimes'"):
        frame.ingest_dataframe(df, local, quiet=True, local="sometimes")


def test_large_or_shuffled_frames_run_on_spark(spark, monkeypatch):
    df = _readme_frame(spark, 3)
    assert frame._small(df)
    assert not frame._small(df.repartition(2))           # a shuffle is never evaluated twice
    monkeypatch.setattr(frame, "LOCAL_FRAME_ROWS", 2)
    assert not frame._small(df)
    monkeypatch.setattr(frame, "LOCAL_FRAME_ROWS", 3)
    monkeypatch.setattr(frame, "LOCAL_FRAME_BYTES", 20)  # three bodies of 18 bytes
    assert not frame._small(df)
