"""Many small rocketlake ingests in one Spark session, several stores at once (the differential tests).

    python tests/support/rmqingest.py JOBS.json

JOBS.json: {"master": "local[2]", "threads": 4, "jobs": [{"store", "input", "config", "topics",
"batch_id", "partitions", "result"}, ...]}. Jobs of one store run in their order, one after the
other; different stores run in parallel threads (Spark runs jobs of several threads at once). A
generated case's batches are tiny, so an ingest mostly waits on round trips (Spark scheduling,
Python workers, the Delta log): overlapping stores uses the idle time. Each job's exit status (as
jobs/ingest.py would return it: storelib.cli.common.exit_code) and summary or error go to its "result" file.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def main(path: str) -> int:
    spec = json.load(open(path))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(spec.get("master", "local[2]")).appName("rocketlake-rmqdiff")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from storelib.cli import common as cli
    from storelib.format.config import load_config
    from storelib.ingest.driver import run_ingest

    by_store: dict[str, list] = {}
    for job in spec["jobs"]:
        by_store.setdefault(job["store"], []).append(job)

    def one_store(jobs):
        failed = False
        for job in jobs:
            if failed:                      # a later batch on a store whose batch failed: not run
                out = {"rc": -1, "error": "an earlier batch of this store failed"}
            else:
                try:
                    summary = run_ingest(spark, job["store"], job["input"], "jsonl", load_config(job["config"]),
                                         batch_id=job.get("batch_id"), target_splits=job.get("partitions", 0),
                                         quiet=True, topics=job.get("topics"))
                    out = {"rc": 0, "summary": summary}
                except Exception as e:  # noqa: BLE001 - reported per job
                    out = {"rc": int(cli.exit_code(e)), "error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()[-3000:]}
                failed = out["rc"] != 0
            with open(job["result"], "w") as fh:
                json.dump(out, fh, default=str)

    with ThreadPoolExecutor(spec.get("threads", 4)) as pool:
        list(pool.map(one_store, by_store.values()))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
