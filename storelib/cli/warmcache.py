"""Compile storelib's numba kernels once, at ``make install``, so a user's first command is not slow.

The kernels are compiled on first use and cached on disk (``cache=True``: beside the modules in
``__pycache__``, or under ``compute.kernelcache.cache_root()`` for a zipped storelib). On a fresh
checkout the first ``verify --deep`` of a 5-message store took 9.8 s against 0.76 s after it, the
first ``query range`` 5.7 s against 1.4 s: the difference is compiling. This runs what a user's
first hour runs, in this process and without Spark, on the bundled sample in a temporary
directory (ingest, verify --deep, the lookups, stats, export, verify and repair of the broker
directory, expire's dry run), and a DataFrame's batch as Spark hands it over (Arrow record
batches of a DataFrame's types, through the ``rocketlake`` sink's in-process ingest: the
partition encoder and the records' digest that ``ingest_dataframe`` runs in Spark's workers), so
every kernel those paths call is compiled with the argument types they call it with, and cached.
Nothing is left behind but the cache.

    python -m storelib.cli.warmcache           # what `make install` runs; prints one line
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time

from ..format.paths import PROJECT_ROOT

__all__ = ["STEPS", "warm", "main"]

SAMPLE = os.path.join(PROJECT_ROOT, "samples", "messages.jsonl")
DEMO_CONFIG = os.path.join(PROJECT_ROOT, "conf", "demo.properties")

# (command line with {store} / {broker} / {work}); each runs as `rocketlake ...` in this process.
STEPS = (
    ("ingest", "--store", "{store}", "--input", SAMPLE, "--config", DEMO_CONFIG, "--local", "always", "--quiet"),
    ("verify", "--store", "{store}", "--deep"),
    ("query", "--store", "{store}", "key", "--topic", "orders", "--key", "hot-key", "--local", "always"),
    ("query", "--store", "{store}", "offset", "--topic", "orders", "--queue", "0", "--offset", "0",
     "--local", "always"),
    ("query", "--store", "{store}", "time", "--topic", "orders", "--queue", "0", "--timestamp", "1717200001000",
     "--local", "always"),
    ("query", "--store", "{store}", "range", "--begin", "0", "--end", "2100-01-01", "--output", "{work}/r.parquet",
     "--local", "always"),
    ("query", "--store", "{store}", "range", "--begin", "0", "--end", "2100-01-01", "--output", "{work}/r.csv",
     "--local", "always"),
    ("inspect", "--store", "{store}", "stats"),
    ("export", "--store", "{store}", "--to", "{broker}", "--no-fsync"),
    ("verify", "--store", "{broker}", "--deep"),
    ("repair", "--store", "{broker}", "--config", DEMO_CONFIG),
    ("expire", "--store", "{store}", "--reserved-hours", "1", "--dry-run"),
    # messages without properties (no keys, no tags): other array types reach the same kernels
    ("ingest", "--store", "{plain}", "--input", "{work}/plain.jsonl", "--local", "always", "--quiet"),
    ("verify", "--store", "{plain}", "--deep"),
    ("query", "--store", "{plain}", "range", "--begin", "0", "--end", "2100-01-01", "--local", "always"),
    ("ingest", "--store", "{store}", "--input", "{work}/plain.jsonl", "--local", "always", "--quiet"),
    ("verify", "--store", "{store}", "--deep"),
)

PLAIN_ROWS = 5


def warm() -> list:
    """Run STEPS; returns [(step, exit status, seconds)]. A step's output is swallowed."""
    from .main import main as rocketlake
    out = []
    with tempfile.TemporaryDirectory(prefix="rocketlake-warm-") as work:
        names = {"store": os.path.join(work, "store"), "broker": os.path.join(work, "broker"),
                 "plain": os.path.join(work, "plain"), "work": work}
        with open(os.path.join(work, "plain.jsonl"), "w") as fh:
            for i in range(PLAIN_ROWS):
                fh.write(f'{{"topic": "plain", "queue_id": 0, "store_timestamp": {1717200000000 + i}, '
                         f'"body": "message {i}"}}\n')
        for step in STEPS:
            argv = [a.format(**names) for a in step]
            t0 = time.time()
            sink = io.StringIO()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                try:
                    code = rocketlake(argv)
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else 2
            out.append((step[0], code, time.time() - t0, sink.getvalue()))
        t0 = time.time()
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                _dataframe_batch(os.path.join(work, "frame"))
            out.append(("dataframe", 0, time.time() - t0, sink.getvalue()))
        except Exception as e:  # noqa: BLE001 - reported as a failed step
            out.append(("dataframe", 1, time.time() - t0, f"{sink.getvalue()}{type(e).__name__}: {e}"))
    return out


def _dataframe_batch(store_uri: str) -> None:
    """A DataFrame's rows as its Arrow batches (string, binary, map and long columns, as Spark sends
    ``createDataFrame([...], "topic string, body binary, properties map<string,string>, ...")``),
    ingested as one batch by the sink's in-process path (``sink.ingest_staged``)."""
    import pyarrow as pa
    from ..format.paths import INCOMING_DIR
    from ..ingest import sink
    from ..io import storage
    n = 50
    batch = pa.record_batch({
        "topic": pa.array(["orders"] * n, pa.string()),
        "body": pa.array([f"message {i}".encode() for i in range(n)], pa.binary()),
        "properties": pa.array([[("KEYS", f"order-{i}"), ("TAGS", "new")] for i in range(n)],
                               pa.map_(pa.string(), pa.string())),
        "store_timestamp": pa.array([1717236000000 + i for i in range(n)], pa.int64()),
    })
    store = storage.Store(store_uri)
    rel = f"{INCOMING_DIR}/warm/part-00000.arrow"
    buf = pa.BufferOutputStream()
    with pa.ipc.new_stream(buf, batch.schema) as writer:
        writer.write_batch(batch)
    store.write_file(rel, [buf.getvalue().to_pybytes()])
    sink.ingest_staged(store_uri, [sink.StagedPart(0, rel, n)], {"config": DEMO_CONFIG}, None, None)


def main(argv=None) -> int:
    t0 = time.time()
    env = dict(os.environ)
    try:
        steps = warm()
    finally:
        os.environ.clear()
        os.environ.update(env)
    failed = [(s, c, text) for s, c, _t, text in steps if c != 0]
    for s, c, text in failed:
        print(f"warmcache: {s} exited {c}: {text.strip()[-500:]}", file=sys.stderr)
    print(f"numba kernels compiled and cached: {len(steps)} commands in {time.time() - t0:.1f} s"
          + (f" ({len(failed)} failed)" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
