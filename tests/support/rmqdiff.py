"""Differential runs: RocketMQ writes each case in one go, rocketlake in batches; compare bytes,
then rocketlake's answers on RocketMQ's store with RocketMQ's (tests/rmqqueries.py).

:func:`run` takes many cases and costs one reference-writer JVM (tests/support/rmqwriter.py, several
stores at once, each answered after its write) and one ingest process (tests/support/rmqingest.py: most
batches in process without Spark, a few in one Spark session, a few killed once and rerun).
:func:`shrink` makes a failing case small by dropping messages, again trying many candidates per
run. :func:`report` prints a case as a reproducer.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable

from support import rmqcompare
from support import rmqqueries
from support import rmqwriter
from support.rmqcases import rocketmq_messages

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _jsonl(path: str, messages: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for m in messages:
            fh.write(json.dumps(m, ensure_ascii=False) + "\n")


# Where the killed runs die: before anything is staged, while files are written, just before the
# Delta commit (points a rerun must recover from; a point a batch never reaches lets it run).
KILL_POINTS = ("after-scan", "mid-segment-write", "mid-file-write", "before-delta-commit")


def run(version: str, cases: list[dict], work: str, threads: int = 16, ingest_threads: int = 4,
        spark_every: int = 0, kill_every: int = 0, queries: bool | Callable = True,
        judge: Callable | None = None) -> list[list[str]]:
    """Problems per case ([] = every file byte-identical). rocketlake writes case i in Spark when
    ``spark_every`` divides i - 1, else in process; when ``kill_every`` divides i - 2, the last
    batch of case i is killed once at a fault point (KILL_POINTS in turn) and run again. With
    ``queries``, rocketlake's answers on the RocketMQ-written store must also be RocketMQ's own
    (tests/rmqqueries.py), once the files are identical. ``queries`` may instead be a function
    (messages as RocketMQ got them, the writer's per-message results) -> queries, made once the
    store is written; ``judge(case, rocketmq_store, rocketlake_store, config, queries, answers)``
    -> problems then replaces the comparison of rmqqueries.differences."""
    os.makedirs(work, exist_ok=True)
    jobs, ingest = [], []
    for i, c in enumerate(cases):
        d = os.path.join(work, f"case{i}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        rm = rocketmq_messages(c)
        # RocketMQ cannot open again a store whose consume-queue files hold one unit each: its
        # recovery (ConsumeQueue.truncateDirtyLogicFiles) loops forever on such a file
        answerable = -(-int(c["config"].get("mappedFileSizeConsumeQueue", 6000000)) // 20) > 1
        picked = None
        if queries and answerable:
            picked = [] if callable(queries) else rmqqueries.make_queries(rm)
        jobs.append(rmqwriter.Job(os.path.join(d, "rocketmq"), rm, c["config"], queries=picked))
        with open(os.path.join(d, "store.properties"), "w") as fh:
            for k, v in {**c["config"], **c.get("rocketlake_config", {})}.items():
                fh.write(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n")
        with open(os.path.join(d, "topics.json"), "w") as fh:
            json.dump({"topicConfigTable": {t: {"topicName": t, "readQueueNums": q, "writeQueueNums": q, "perm": 6}
                                            for t, q in c["topics"].items()}}, fh)
        bounds = [0, *c["cuts"], len(c["messages"])]
        engine = "spark" if spark_every and i % spark_every == 1 else "local"
        kill = KILL_POINTS[(i // kill_every) % len(KILL_POINTS)] if kill_every and i % kill_every == 2 else None
        for b in range(len(bounds) - 1):
            inp = os.path.join(d, f"batch{b}.jsonl")
            _jsonl(inp, c["messages"][bounds[b]:bounds[b + 1]])
            ingest.append({"store": os.path.join(d, "rocketlake"), "input": inp, "format": "jsonl",
                           "config": os.path.join(d, "store.properties"), "topics": os.path.join(d, "topics.json"),
                           "batch_id": f"b{b}", "partitions": 1 + b % 3, "quiet": True,
                           "result": os.path.join(d, f"batch{b}.result.json"), "case": i, "engine": engine,
                           "kill": kill if b == len(bounds) - 2 else None})
    spec = os.path.join(work, "ingest.json")
    with open(spec, "w") as fh:
        json.dump({"master": "local[2]", "threads": ingest_threads, "jobs": ingest}, fh)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "rmqingest.py"), spec], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        rmqwriter.write_stores(version, jobs, threads=threads)
        out, err = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    problems = [[] for _ in cases]
    for job in ingest:
        res = job["result"]
        if not os.path.exists(res):
            problems[job["case"]].append(f"rocketlake: {os.path.basename(job['input'])} never ran "
                                         f"(rmqingest exit {proc.returncode}): {err[-1500:]}")
            continue
        r = json.load(open(res))
        if r["rc"] > 0:
            problems[job["case"]].append(f"rocketlake refused {os.path.basename(job['input'])} "
                                         f"(exit {r['rc']}): {r.get('error')}")
    for i, (_c, job) in enumerate(zip(cases, jobs)):
        if job.error:
            problems[i].insert(0, f"RocketMQ {version} refused the case: {job.error[:1500]}")
        elif not problems[i]:
            problems[i] = rmqcompare.compare(job.store, os.path.join(work, f"case{i}", "rocketlake"))
    if callable(queries):
        for job in jobs:
            if job.queries is not None and not job.error:
                job.queries = queries(job.messages, job.results)
    # then RocketMQ answers the queries on its stores (opened again), and rocketlake on the same files
    asked = [(i, job) for i, job in enumerate(jobs) if job.queries is not None and not problems[i]]
    if asked:
        rmqwriter.write_stores(version, [job for _, job in asked], threads=threads, answer_only=True)
        from storelib.format.config import load_config
        for i, job in asked:
            if job.error:
                problems[i].append(f"RocketMQ {version} could not answer: {job.error[:1500]}")
            else:
                cfg = load_config(os.path.join(work, f"case{i}", "store.properties"))
                if judge is not None:
                    problems[i] = judge(cases[i], job.store, os.path.join(work, f"case{i}", "rocketlake"), cfg,
                                        job.queries, job.answers)
                else:
                    problems[i] = rmqqueries.differences(job.store, cfg, job.queries, job.answers)
    return problems


def _without(c: dict, a: int, b: int) -> dict:
    n = len(c["messages"])
    msgs = c["messages"][:a] + c["messages"][b:]
    cuts = sorted({x - (b - a) if x >= b else min(x, a) for x in c["cuts"]} - {0, len(msgs)})
    return {**c, "messages": msgs, "cuts": [x for x in cuts if 0 < x < len(msgs)]} if n else c


def _kind(problems: list[str]) -> str:
    p = problems[0]
    return p.split(":", 1)[0] + ":" + p.split(":", 2)[1].split("/", 1)[0] if ":" in p else p


def shrink(version: str, c: dict, problems: list[str], work: str, rounds: int = 6, per_round: int = 12) -> tuple[dict, list[str]]:
    """A smaller case failing the same way (same kind of first problem), by dropping runs of messages."""
    kind = _kind(problems)
    for r in range(rounds):
        n = len(c["messages"])
        if n <= 1:
            break
        cands = []
        for size in (n // 2, n // 4, n // 8, 1):
            if size < 1:
                continue
            for a in range(0, n, size):
                cands.append(_without(c, a, min(n, a + size)))
        cands = [x for x in cands if x["messages"]][:per_round]
        if not cands:
            break
        res = run(version, cands, os.path.join(work, f"shrink{r}"))
        better = [(len(x["messages"]), x, p) for x, p in zip(cands, res) if p and _kind(p) == kind]
        if not better:
            break
        _, c, problems = min(better, key=lambda t: t[0])
    return c, problems


def report(c: dict, problems: list[str], version: str) -> str:
    lines = [f"RocketMQ {version} and rocketlake differ: {problems[0]}"]
    lines += [f"  also: {p}" for p in problems[1:5]]
    lines.append(f"config: {json.dumps(c['config'])}")
    lines.append(f"topics (writeQueueNums): {json.dumps(c['topics'], ensure_ascii=False)}")
    lines.append(f"rocketlake batches cut before messages {c['cuts']}; {len(c['messages'])} messages:")
    for m in c["messages"]:
        short = dict(m)
        short.pop("properties_string", None)
        b = short.pop("body_b64")
        short["body_len"] = len(b) * 3 // 4 - b[-2:].count("=")
        if short["body_len"] <= 24:
            short["body_b64"] = b
        lines.append("  " + json.dumps(short, ensure_ascii=False))
    return "\n".join(lines)
