"""mirror: a cycle's records grouped by consume queue (``_queue_groups``, one counting pass) against
a stable sort by (topic, queue id): the same queues in the same order, each queue's rows in
CommitLog order, records without a unit (prepared or rolled-back transactions) in none; dense
codes (few topics and queue ids) and sparse ones (queue ids far apart, negative ones)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings, strategies as st

from storelib.ops import mirror

TOPICS = ["a", "b", "c", "d"]


def _reference(d) -> list:
    m = np.flatnonzero(d.cq)
    order = np.lexsort((d.queue_id[m], d.topic[m]))
    out: list = []
    for r in m[order]:
        key = (d.topics[int(d.topic[r])], int(d.queue_id[r]))
        if out and out[-1][0] == key:
            out[-1][1].append(int(r))
        else:
            out.append((key, [int(r)]))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.one_of(st.integers(0, 7), st.integers(-(2**31), 2**31 - 1)),
                          st.booleans()), max_size=300))
def test_queue_groups_are_a_stable_sort_by_topic_and_queue(rows):
    d = SimpleNamespace(topics=TOPICS, topic=np.array([r[0] for r in rows], np.int64),
                        queue_id=np.array([r[1] for r in rows], np.int32), cq=np.array([r[2] for r in rows], bool))
    got = [(key, rows_.tolist()) for key, rows_ in mirror._queue_groups(d)]
    assert got == _reference(d)
