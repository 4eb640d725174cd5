"""Query a RocketMQ store (rocketlake-written or a broker's directory).

RocketMQ-compatible batch (Spark; answers.jsonl format, ordered by qid):
    spark-submit jobs/query.py --store STORE --queries QUERIES.jsonl --output ANSWERS.jsonl

Single lookups (no Spark; plain `python jobs/query.py ...` works too):
    jobs/query.py key --store S --topic T --key K [--begin MS --end MS] [--limit N [--after CURSOR]]
    jobs/query.py id --store S MSGID
    jobs/query.py unique-key --store S --topic T --key UNIQ_KEY
    jobs/query.py offset --store S --topic T --queue Q --offset N [--count C]
    jobs/query.py time --store S --topic T --queue Q --timestamp MS [--boundary lower|upper]

Distributed (Spark):
    jobs/query.py range --store S --begin MS --end MS [--topic T] [--limit N [--after OFFSET]]
    jobs/query.py keys --store S --input KEYS.parquet        (columns topic, key[, begin, end])

Common options: --as-of-batch ID (a committed batch; default latest), --config FILE.properties
(stores without a manifest), --output FILE (JSON lines; .parquet = Parquet; default stdout),
--body-as base64|text, --rocketmq-compat (a broker's answer, quirks included, instead of the
exact one). Exit status: 0 done (nothing found: message on stderr, empty output), 1 query
failed, 2 bad arguments or input.
"""
import os
import sys

_JOBS = os.path.dirname(os.path.abspath(__file__))
# jobs/ must not be on sys.path: a job named like a stdlib module (jobs/inspect.py) would shadow it.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _JOBS]
sys.path.insert(0, os.path.dirname(_JOBS))

from storelib.querycli import main  # noqa: E402

__all__ = ["main"]

if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # `query.py ... | head`: the reader has gone; end quietly (no traceback), as a shell tool would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141
    sys.exit(code)
