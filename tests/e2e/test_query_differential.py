"""RocketMQ is the judge of lookups: by key, by message id (offset id and UNIQ_KEY), by queue
offset, by store time and store-time range (tests/support/rmqhunt.py).

Cases from a seeded generator aimed at the index's and the queues' edges (keys sharing a hash in
an index of 1 to 4 slots, spaces in KEYS, unicode, long keys, repeated UNIQ_KEYs, equal store
times at range bounds, retry/DLQ/SCHEDULE topics, 16 queues, transactions) are written by
RocketMQ 5.3.3's DefaultMessageStore (the reference writer) and by rocketlake in batches; the
files must be byte-identical (as in test_rocketmq_differential.py), then RocketMQ answers on its
store and rocketlake on both stores, through the broker-compatible calls, the exact lookups and
(on the first case) ``rocketlake query``.

    RMQ_QUERY_CASES=N   cases (default 3, `make long` 30; `make fidelity N_QUERY=...`, default 100)
    RMQ_SEED=S          the generator's seed
"""
from __future__ import annotations

import os
import time

import pytest

from support import rmqdiff
from support import rmqhunt
from support import rmqjars
from support import rmqqueries
from test_rocketmq_differential import _byte

CASES = int(os.environ.get("RMQ_QUERY_CASES", "30" if os.environ.get("ROCKETLAKE_LONG") else "3"))
SEED = int(os.environ.get("RMQ_SEED", "20261201"))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(600, 30 * CASES))]


def test_lookups_answer_as_rocketmq(tmp_path):
    try:
        rmqjars.compile(rmqjars.V5, "main")
    except rmqjars.Unavailable as e:
        pytest.skip(f"RocketMQ {rmqjars.V5} unavailable: {e}")
    cases = rmqhunt.edge_cases(CASES, SEED)
    t = time.time()
    before = rmqqueries.COMPARED[0]

    def judge(c, rocketmq_store, rocketlake_store, config, queries, answers):
        return rmqhunt.judge(c, rocketmq_store, rocketlake_store, config, queries, answers, cli=c is cases[0])

    results = rmqdiff.run(rmqjars.V5, cases, str(tmp_path / "run"), threads=4, queries=rmqhunt.make_queries,
                          judge=judge)
    compared = rmqqueries.COMPARED[0] - before
    print(f"{len(cases)} cases, {sum(len(c['messages']) for c in cases)} messages: {compared} answers compared "
          f"in {time.time() - t:.0f}s")
    assert compared >= 200 * len(cases), "too few of RocketMQ's answers were compared"
    # RocketMQ's own races on the checkpoint's logicsMsgTimestamp (test_rocketmq_differential.py's
    # logics_race) and indexMsgTimestamp (rolled index files flushed on threads of their own) leave
    # a case's files unequal, so it is not asked: written again, it is
    raced = [i for i, p in enumerate(results) if p and checkpoint_race(p)]
    if raced:
        again = rmqdiff.run(rmqjars.V5, [cases[i] for i in raced], str(tmp_path / "again"), threads=4,
                            queries=rmqhunt.make_queries, judge=rmqhunt.judge)
        for i, p in zip(raced, again):
            if p and checkpoint_race(p):
                print(f"case {i}: RocketMQ's checkpoint race again, not judged")
                p = []
            results[i] = p
    failing = [(i, p) for i, p in enumerate(results) if p]
    if failing:
        i, p = failing[0]
        pytest.fail(f"{len(failing)} of {len(cases)} cases differ; case {i} (seed {SEED}):\n"
                    + rmqdiff.report(cases[i], p, rmqjars.V5))


def checkpoint_race(problems: list[str]) -> bool:
    """Only the checkpoint's logicsMsgTimestamp or indexMsgTimestamp (bytes 8..23) differ: which
    time RocketMQ's flush threads leave there is timing (seen in CI: 1 of 3 cases, byte 22); the
    store bytes themselves are test_rocketmq_differential.py's, which counts a difference that
    comes back."""
    return bool(problems) and all(p.startswith("differs: checkpoint:") and 8 <= _byte(p) < 24 for p in problems)
