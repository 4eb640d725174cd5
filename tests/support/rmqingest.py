"""Many small rocketlake ingests for the differential tests: most in this process without Spark
(storelib.runtime.localrun), a few in one Spark session, a few killed once and rerun.

    python tests/support/rmqingest.py JOBS.json
    python tests/support/rmqingest.py --one JOB.json      # one local job (the killed runs' child)

JOBS.json: {"master": "local[2]", "threads": 4, "jobs": [{"store", "input", "config", "topics",
"batch_id", "partitions", "result", "engine", "kill"}, ...]}. ``engine`` "local" (default) runs
the job's stages in this process (the same encode, write and commit code, no JVM: a generated
case's batch costs about 0.1 s); "spark" runs it in the Spark session (started only when a job
asks for it; different stores in parallel threads). ``kill`` names a fault point
(storelib.runtime.faults): the job first runs in a child process that SIGKILLs itself there, then runs
again here, as a rerun after a crash would. Jobs of one store run in their order. Each job's exit
status (as jobs/ingest.py would return it: storelib.cli.common.exit_code) and summary or error go to its
"result" file.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(session, job: dict) -> dict:
    from storelib.cli import common as cli
    from storelib.format.config import load_config
    from storelib.ingest.driver import run_ingest
    try:
        # fsync is no part of the bytes compared: scratch stores skip it
        cfg = load_config(job["config"], {"flushDiskType": "ASYNC_FLUSH"})
        summary = run_ingest(session, job["store"], job["input"], "jsonl", cfg, batch_id=job.get("batch_id"),
                             target_splits=job.get("partitions", 0), quiet=True, topics=job.get("topics"))
        return {"rc": 0, "summary": summary}
    except Exception as e:  # noqa: BLE001 - reported per job
        return {"rc": int(cli.exit_code(e)), "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-3000:]}


def _killed_once(job: dict, path: str) -> dict | None:
    """Run ``job`` in a child that kills itself at the fault point; None when it died there (its
    result when the batch never reached the point)."""
    env = dict(os.environ, ROCKETLAKE_FAULT=job["kill"])
    one = path + ".one.json"
    with open(one, "w") as fh:
        json.dump(job, fh)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", one], env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode == -9:
        return None
    if r.returncode == 0:
        return json.loads(r.stdout.strip().splitlines()[-1])
    return {"rc": 1, "error": f"the run to be killed at {job['kill']} exited {r.returncode} instead: "
                              f"{r.stderr[-1500:]}"}


def main(path: str) -> int:
    spec = json.load(open(path))
    from storelib.runtime.localrun import LocalSession
    local = LocalSession()
    spark = None
    if any(j.get("engine") == "spark" for j in spec["jobs"]):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master(spec.get("master", "local[2]")).appName("rocketlake-rmqdiff")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")

    by_store: dict[str, list] = {}
    for job in spec["jobs"]:
        by_store.setdefault(job["store"], []).append(job)

    def one_store(jobs):
        failed = False
        for job in jobs:
            if failed:                      # a later batch on a store whose batch failed: not run
                out = {"rc": -1, "error": "an earlier batch of this store failed"}
            else:
                out = _killed_once(job, job["result"]) if job.get("kill") else None
                if out is None:
                    out = _run(spark if job.get("engine") == "spark" else local, job)
                failed = out["rc"] != 0
            with open(job["result"], "w") as fh:
                json.dump(out, fh, default=str)

    stores = list(by_store.values())
    sparky = [s for s in stores if any(j.get("engine") == "spark" for j in s)]
    with ThreadPoolExecutor(spec.get("threads", 4)) as pool:
        pending = [pool.submit(one_store, s) for s in sparky]
        for s in stores:                    # local ones here, one after the other (they hold the GIL)
            if s not in sparky:
                one_store(s)
        for f in pending:
            f.result()
    if spark is not None:
        spark.stop()
    return 0


def one(path: str) -> int:
    from storelib.runtime.localrun import LocalSession
    job = json.load(open(path))
    out = _run(LocalSession(), job)
    print(json.dumps(out, default=str))
    return out["rc"]


if __name__ == "__main__":
    sys.exit(one(sys.argv[2]) if sys.argv[1] == "--one" else main(sys.argv[1]))
