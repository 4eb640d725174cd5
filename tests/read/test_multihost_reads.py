"""A ``rocketmq`` read (batch, either engine, and stream) of a store on the driver's disk is
refused on a multi-host master before any task runs: each executor would open its own host's
path and find no store, or another one (runtime.multihost). No Spark session needed."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyspark.sql.types import StructType

from storelib.errors import UnreachablePath


def _plan(source, path: str, kind: str):
    ds = source(options={"path": path})
    return ds.reader(StructType()) if kind == "batch" else ds.streamReader(StructType())


@pytest.mark.parametrize("kind", ["batch", "stream"])
def test_the_python_source_refuses_a_store_on_the_drivers_disk(tmp_path, kind):
    from storelib.read.datasource import bound_source
    from storelib.read.stream import RocketMQStreamingDataSource
    store = str(tmp_path / "store")
    with pytest.raises(UnreachablePath, match="driver's local disk.*spark://h:7077"):
        _plan(bound_source(RocketMQStreamingDataSource, "spark://h:7077", None), store, kind)
    with pytest.raises(UnreachablePath, match="relative path"):
        _plan(bound_source(RocketMQStreamingDataSource, "yarn", str(tmp_path)), "store", kind)
    for source, path in ((bound_source(RocketMQStreamingDataSource, "yarn", str(tmp_path)), store),  # a shared mount
                         (bound_source(RocketMQStreamingDataSource, "local[2]", None), store),
                         (bound_source(RocketMQStreamingDataSource, "spark://h:7077", None), "s3://bucket/store")):
        source(options={"path": path}).check_reachable()          # what reader and streamReader ask first

def test_load_refuses_before_planning_either_engine(tmp_path):
    from pyspark.sql.readwriter import DataFrameReader
    from storelib.read import datasource
    datasource.register(SimpleNamespace(conf=SimpleNamespace(set=lambda k, v: None)))
    reader = SimpleNamespace(_spark=SimpleNamespace(sparkContext=SimpleNamespace(master="spark://h:7077")),
                             _rocketlake_format="rocketmq")
    with pytest.raises(UnreachablePath, match="path .*store is on the driver's local disk"):
        DataFrameReader.load(reader, str(tmp_path / "store"))
    with pytest.raises(UnreachablePath):
        DataFrameReader.load(reader, format="rocketmq", path=str(tmp_path / "store"), engine="jvm")
