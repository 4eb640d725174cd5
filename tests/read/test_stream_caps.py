"""docs/STREAMING.md: ``maxBatchesPerTrigger`` / ``maxMessagesPerTrigger`` take whole committed
batches, at least one a micro-batch; without them a micro-batch takes all that is committed. The
planner (``RocketMQStreamReader``'s offsets) runs without Spark, as Spark's driver calls it."""
from __future__ import annotations

import json

import pytest

from storelib.format.config import load_config


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Three batches of two messages each."""
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    d = tmp_path_factory.mktemp("caps")
    s = str(d / "store")
    for i in range(3):
        p = d / f"b{i}.jsonl"
        p.write_text("".join(json.dumps({"topic": "t", "body": f"m{i}{j}", "store_timestamp": 1717200000000 + i})
                             + "\n" for j in range(2)))
        run_ingest(LocalSession(), s, str(p), "jsonl", load_config(None), batch_id=f"b{i}", quiet=True)
    return s


def micro_batches(store, **options) -> list:
    """The batch_seq each planned micro-batch ends at, from the start of the store."""
    from storelib.read.stream import RocketMQStreamReader
    r = RocketMQStreamReader({"path": store, **{k: str(v) for k, v in options.items()}})
    start, ends = r.initialOffset(), []
    while (end := r.latestOffset()) != start:
        r.partitions(start, end)
        ends.append(end["batch_seq"])
        start = end
    return ends


def test_caps_take_whole_batches_at_least_one(store):
    last = micro_batches(store)
    assert len(last) == 1
    every = micro_batches(store, maxBatchesPerTrigger=1)
    assert every == [1, 2, 3] == [1, 2, last[0]]
    assert micro_batches(store, maxBatchesPerTrigger=2) == [every[1], every[2]]
    assert micro_batches(store, maxMessagesPerTrigger=4) == [every[1], every[2]]
    assert micro_batches(store, maxMessagesPerTrigger=3) == every
    assert micro_batches(store, maxMessagesPerTrigger=1) == every        # a whole batch, though over the cap
