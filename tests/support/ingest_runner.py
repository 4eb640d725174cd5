"""Run ingests in a fresh Python process with a local SparkSession (tests; a real Spark job).

    python tests/support/ingest_runner.py JOBS.json

JOBS.json: {"master": "local[2]", "jobs": [{"store": ..., "input": ..., "config": ...,
"batch_id": ..., "format": "jsonl", "partitions": 0, "topics": null, "queue_by": null,
"result": "out.json"}, ...]}. The jobs run one after the other in one Spark session (a second
job after a killed one is the "rerun"); each job's exit status (as jobs/ingest.py would return
it) and summary go to its "result" file. The process exits with the first non-zero status.
ROCKETLAKE_FAULT* variables in the environment apply as usual (storelib.runtime.faults).
"""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(path: str) -> int:
    spec = json.load(open(path))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    builder = (SparkSession.builder.master(spec.get("master", "local[2]")).appName("rocketlake-test")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4"))
    for k, v in (spec.get("conf") or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from storelib.format.config import load_config
    first_bad = 0
    for job in spec["jobs"]:
        summary = {}

        def body(spark_, cfg, job=job, summary=summary):
            from storelib.ingest.driver import run_ingest
            summary.update(run_ingest(spark_, job["store"], job["input"], job.get("format", "jsonl"), cfg,
                                      batch_id=job.get("batch_id"), target_splits=job.get("partitions", 0),
                                      quiet=job.get("quiet", False), topics=job.get("topics"),
                                      queue_by=job.get("queue_by"), store_timestamp=job.get("store_timestamp")))
            return 0

        class Args:
            config = job["config"]
        rc = _run(body, spark, Args, load_config)
        if job.get("result"):
            with open(job["result"], "w") as fh:
                json.dump({"rc": rc, "summary": summary}, fh)
        first_bad = first_bad or rc
    spark.stop()
    return first_bad


def _run(body, spark, args, load_config) -> int:
    """cli.run_job without creating/stopping the session (one session serves every job)."""
    from storelib.cli import common as cli
    real_session = cli.spark_session
    cli.spark_session = lambda app, reach=None, **_options: _NoStop(spark)
    try:
        return cli.run_job("ingest", args, body)
    finally:
        cli.spark_session = real_session


class _NoStop:
    def __init__(self, spark):
        self._spark = spark

    def __getattr__(self, name):
        return getattr(self._spark, name)

    def stop(self):
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
