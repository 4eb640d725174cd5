"""RocketMQ is the judge: its own store code writes generated message sets, rocketlake writes them
in batches, and every store file must be byte-identical.

Needs RocketMQ's jars from Maven Central (``make rocketmq``, tests/support/rmqjars.py); skipped with the
reason when they cannot be fetched. Cases come from hypothesis (tests/support/rmqcases.py) and run in
batches (tests/support/rmqdiff.py): one reference-writer JVM per version writes every case, while one
process writes them with rocketlake: most in process without Spark (storelib.runtime.localrun, about
0.1 s a batch), every 50th in a Spark session, every 25th with its last batch killed once at a
fault point and rerun. Then RocketMQ opens its stores again and answers the 12 query types
(tests/rmqqueries.py); rocketlake's reader must answer the same on the same files. A failing case
is shrunk and printed with its first differing file and byte (or answer).

    RMQ_CASES=N        cases against 5.3.3 (default 120, `make long` 300; `make fidelity N=...`)
    RMQ_CASES_OTHER=N  cases against 4.9.8 and against the newest 5.x (default 24 each, `make long` 60)
    RMQ_SEED=S         hypothesis seed (default: a fixed one, so `make test` is reproducible)

rocketlake writes 4.9.8's cases with rocketmqVersion=4.9, the newest 5.x's with 5.5 (docs/FORMAT.md §12).
"""
from __future__ import annotations

import os
import time

import pytest

from support import goldenlib
from support import rmqcases
from support import rmqdiff
from support import rmqjars
from support import rmqqueries
from support import rmqwriter
from support.longrun import LONG


CASES = int(os.environ.get("RMQ_CASES", "300" if LONG else "120"))
CASES_OTHER = int(os.environ.get("RMQ_CASES_OTHER", "60" if LONG else "24"))
SEED = int(os.environ.get("RMQ_SEED", "20261126"))

LINES = rmqjars.LINES

# a run's time grows with the number of cases (`make fidelity`): no per-test limit then
pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(900, 20 * (CASES + 2 * CASES_OTHER)))]


def need(version: str) -> None:
    try:
        rmqjars.compile(version, "main")
    except rmqjars.Unavailable as e:
        pytest.skip(f"RocketMQ {version} unavailable: {e}")


def check(version: str, line: str, n: int, tmp_path, expected=None) -> None:
    """Run n cases; every problem that `expected(case, problems)` does not explain fails the test,
    shrunk and printed as a reproducer."""
    need(version)
    cases = rmqcases.draw_cases(n, line, SEED)
    for c in cases:
        c["rocketlake_config"] = {"rocketmqVersion": LINES[version]}
    t = time.time()
    before = list(rmqqueries.COMPARED)
    results = rmqdiff.run(version, cases, str(tmp_path / "run"), spark_every=50, kill_every=25)
    elapsed = time.time() - t
    compared, failed = (rmqqueries.COMPARED[k] - before[k] for k in (0, 1))
    print(f"RocketMQ {version}: {compared} answers compared ({failed} queries RocketMQ itself failed)")
    assert compared >= 10 * n, "too few of RocketMQ's answers were compared"
    explained = [(c, p) for c, p in zip(cases, results) if p and expected and expected(c, p)]
    failing = [(c, p) for c, p in zip(cases, results) if p and not (expected and expected(c, p))]
    print(f"RocketMQ {version}: {len(cases)} cases, {sum(len(c['messages']) for c in cases)} messages, "
          f"{sum(len(c['cuts']) + 1 for c in cases)} rocketlake batches in {elapsed:.0f}s; "
          f"{len(explained)} differ as known, {len(failing)} fail")
    if failing:
        # Written again from scratch (both sides): a difference counts when it comes back.
        # (Under heavy load RocketMQ 5.3.3 once left the checkpoint's logicsMsgTimestamp at an
        # earlier value, which a second write of the same case did not repeat: its consume-queue
        # flush thread copies that field at shutdown, a timing matter.)
        again = rmqdiff.run(version, [c for c, _ in failing], str(tmp_path / "again"))
        # A second write whose only difference is the known race (``expected``) counts as that.
        flaky = [(c, p) for (c, p), q in zip(failing, again) if not q or (expected and expected(c, q))]
        failing = [(c, q) for (c, _), q in zip(failing, again) if q and not (expected and expected(c, q))]
        for _c, p in flaky:
            print(f"RocketMQ {version}: not repeated on a second write: {p[0]}")
    if failing:
        kinds = sorted({p[0].rsplit(": first difference", 1)[0] for _, p in failing})
        c, p = failing[0]
        c, p = rmqdiff.shrink(version, c, p, str(tmp_path / "shrink"))
        pytest.fail(f"{len(failing)} of {len(cases)} cases differ ({'; '.join(kinds)}); the first, shrunk:\n"
                    + rmqdiff.report(c, p, version))


def test_reference_writer_rebuilds_the_golden_stores(tmp_path):
    """Our writer on RocketMQ 5.3.3 regenerates small-roll and expire-small (before expiry) byte
    for byte from their messages and configuration: it writes as the golden sets were written."""
    need(rmqjars.V5)
    jobs = []
    for name in ("small-roll", "expire-small"):
        d = goldenlib.resolve_set(name)
        jobs.append(rmqwriter.Job(str(tmp_path / name), rmqwriter.load_messages(os.path.join(d, "messages.jsonl")),
                                  rmqwriter.load_config(os.path.join(d, "config.json"))))
    rmqwriter.write_stores(rmqjars.V5, jobs)
    for name, job, listing in zip(("small-roll", "expire-small"), jobs, ("files.json", "files_before.json")):
        assert job.error is None, job.error
        d = goldenlib.resolve_set(name)
        assert goldenlib.compare(d, job.store, listing) == [], name
        puts = [ln for ln in open(os.path.join(d, "put_results.jsonl"))]
        assert len(job.results) == len(puts)
        import json
        for got, want in zip(job.results, map(json.loads, puts)):
            assert (int(got[1]), int(got[2]), got[3], int(got[4])) == \
                (want["wrote_offset"], want["wrote_bytes"], want["msg_id"], want["queue_offset"])


def test_differential_5_3_3(tmp_path):
    check(rmqjars.V5, "5", CASES, tmp_path, expected=logics_race)


def _byte(problem: str) -> int:
    return int(problem.rsplit("first difference at byte ", 1)[1].split()[0]) if "first difference" in problem else -1


def logics_race(c: dict, problems: list[str]) -> bool:
    """RocketMQ's own timing, not matched: its consume-queue flush thread reads the checkpoint's
    logicsMsgTimestamp before flushing the queues and writes that value back after, so a
    dispatch in between is overwritten and a shutdown can leave an earlier message's time
    (seen under heavy load in 5.3.3 and 4.9.8, rarely repeated by a second write). Only that
    field (bytes 8..15) may differ; every other byte of every file must be identical."""
    return bool(problems) and all(p.startswith("differs: checkpoint:") and 8 <= _byte(p) < 16 for p in problems)


def test_differential_4_9_8(tmp_path):
    """RocketMQ 4.9 cases, rocketmqVersion=4.9 on rocketlake's side: no topic over 127 characters
    (4.9 refuses them: it has no V2 records), no enabledAppendPropCRC, no DELAY messages (4.9's
    store moves them to SCHEDULE_TOPIC_XXXX itself)."""
    check(rmqjars.V4, "4", CASES_OTHER, tmp_path, expected=logics_race)


def test_differential_newest_5x(tmp_path):
    """The newest 5.x with rocketmqVersion=5.5: TAGS index entries, the sixth checkpoint field."""
    check(rmqjars.NEWEST, "5", CASES_OTHER, tmp_path)
