#!/usr/bin/env python3
"""RocketMQ's own store code writes stores for the tests (the reference writer).

tests/rocketmq/src/main/rocketlake/refwriter/RefWriter.java, compiled against a pinned version's
jars (tests/support/rmqjars.py), drives that version's ``DefaultMessageStore``: one ``putMessage`` per
message, with the store clock set to the message's ``store_timestamp`` (so STORETIMESTAMP is the
input's), waiting until the reput thread has dispatched it (consume queue, index), and a clean
``shutdown()`` at the end. One JVM writes many stores, several at once.

    PYTHONPATH=tests python -m support.rmqwriter write SET_OR_MESSAGES.jsonl CONFIG OUT_STORE [--version 5.3.3]

MESSAGES.jsonl is the golden format (tests/golden/README.md); CONFIG a .properties file or a
golden config.json (its messageStoreConfig). A golden set name (small-roll) takes both from the set.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from support import rmqjars

HERE = os.path.dirname(os.path.abspath(__file__))

MAIN = "rocketlake.refwriter.RefWriter"
# The store's shaping keys a job may set, and what the writer always adds (SYNC_FLUSH keeps the
# checkpoint's physicMsgTimestamp = the last message's, as in the golden sets).
FIXED = {"flushDiskType": "SYNC_FLUSH", "brokerRole": "ASYNC_MASTER"}
# 5.5 copies logicsMsgTimestamp and its new logicsPhysicalOffset into the checkpoint only on a
# "thorough" consume-queue flush (at most every 60 s, the first at start-up): a thorough flush
# every time pins them to the last consume-queue message, what a broker that ran long enough writes.
FIXED_BY_VERSION = {rmqjars.NEWEST: {"flushConsumeQueueThoroughInterval": 0}}


@dataclass
class Job:
    store: str                      # directory to write (created)
    messages: list                  # golden-format dicts
    config: dict = field(default_factory=dict)   # MessageStoreConfig keys
    results: list = field(default_factory=list)  # filled: per message (status, offset, bytes, msgId, queue offset, ts)
    error: str | None = None
    queries: list | None = None     # tests/rmqqueries.py queries; RocketMQ answers them on the store
    answers: str | None = None      # set: the answers.jsonl RocketMQ wrote


def tsv_line(m: dict) -> str:
    def b64(s: str) -> str:
        return base64.b64encode(s.encode("utf-8")).decode()

    return "\t".join(str(x) for x in (
        b64(m["topic"]), m["queue_id"], m["flag"], m["sys_flag"], m["born_timestamp"], m["store_timestamp"],
        m["born_host"], m["store_host"], m.get("reconsume_times", 0), m.get("prepared_transaction_offset", 0),
        m.get("body_b64", ""), b64(m.get("properties_string", "")), m.get("batch", ""),
        b64(m.get("batch_properties", "")))) + "\n"


def write_stores(version: str, jobs: list[Job], threads: int = 8, timeout: float = 900,
                 answer_only: bool = False) -> list[Job]:
    """Write every job's store with RocketMQ `version`, then answer its queries (if any) on it;
    sets job.results (or job.answers) or job.error. ``answer_only``: the stores are written
    already, RocketMQ only answers (opening a store again may change it: RocketMQ re-dispatches
    the tail of the commit log that no consume queue holds, indexing those messages again)."""
    if len(jobs) > 1 and any(j.config.get("haltAfterWrite") for j in jobs):
        raise ValueError("a haltAfterWrite job halts the writer's JVM: write it alone")
    cp = rmqjars.classpath(version, "main")
    work = tempfile.mkdtemp(prefix="rmqwriter-")
    lines = []
    for i, job in enumerate(jobs):
        os.makedirs(job.store, exist_ok=True)
        msgs = "" if answer_only else os.path.join(work, f"{i}.tsv")
        if msgs:
            with open(msgs, "w", encoding="utf-8") as fh:
                fh.writelines(tsv_line(m) for m in job.messages)
        cfg = os.path.join(work, f"{i}.properties")
        with open(cfg, "w", encoding="utf-8") as fh:
            for k, v in {**job.config, **FIXED, **FIXED_BY_VERSION.get(version, {})}.items():
                fh.write(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n")
        extra = ()
        if job.queries is not None and answer_only:
            from support import rmqqueries
            qpath = os.path.join(work, f"{i}.queries.tsv")
            with open(qpath, "w", encoding="utf-8") as fh:
                fh.writelines(rmqqueries.tsv(q) for q in job.queries)
            extra = (qpath, os.path.join(job.store + ".answers.jsonl"))
        lines.append("\t".join((str(i), os.path.abspath(job.store), msgs, cfg, os.path.join(work, f"{i}.out"),
                                *extra)) + "\n")
    # One store starts and ends in seconds: C1 only. Many stores at once (each a DefaultMessageStore
    # with its own services, reopened to answer the queries) run for minutes: C2 pays, and a 1 GB
    # heap is collected over and over (the JVM then spends its time in GC).
    jit = ["-XX:TieredStopAtLevel=1"] if threads <= 1 else []
    heap = "1g" if threads <= 1 else "4g"
    cmd = ["java", "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
           "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
           "-XX:+UseSerialGC", "-Xss512k", *jit, f"-Xmx{heap}",
           "-Drocketmq.client.logUseSlf4j=true", "-cp", cp, MAIN, "--threads", str(threads)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, cwd=work)
    try:
        out, err = proc.communicate("".join(lines), timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    done = {}
    for ln in out.splitlines():
        if ln.startswith("done "):
            _, i, status = ln.split(" ", 2)
            done[int(i)] = status
    for i, job in enumerate(jobs):
        status = done.get(i)
        if status == "ok":
            if not answer_only:
                with open(os.path.join(work, f"{i}.out"), encoding="utf-8") as fh:
                    job.results = [ln.split("\t") for ln in fh.read().splitlines()]
            if job.queries is not None:
                job.answers = job.store + ".answers.jsonl"
        else:
            job.error = status or f"writer JVM exited {proc.returncode} before this job: {err[-2000:]}"
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    return jobs


def load_messages(path: str) -> list[dict]:
    import gzip
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", encoding="utf-8") as fh:
        return [json.loads(ln) for ln in fh if ln.strip()]


def load_config(path: str) -> dict:
    if path.endswith(".json"):
        return dict(json.load(open(path))["messageStoreConfig"])
    out = {}
    for ln in open(path, encoding="utf-8"):
        ln = ln.strip()
        if ln and not ln.startswith("#") and "=" in ln:
            k, v = ln.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def main(argv: list[str]) -> int:
    args = list(argv[1:])
    version = rmqjars.V5
    if "--version" in args:
        i = args.index("--version")
        version = args[i + 1]
        del args[i:i + 2]
    if len(args) == 3 and args[0] == "write" or len(args) == 4 and args[0] == "write":
        src = args[1]
        if len(args) == 3:                     # a golden set: its messages and config
            from support import goldenlib
            d = goldenlib.resolve_set(src)
            msgs = os.path.join(d, "messages.jsonl")
            msgs = msgs if os.path.exists(msgs) else msgs + ".gz"
            cfg, out = os.path.join(d, "config.json"), args[2]
        else:
            msgs, cfg, out = src, args[2], args[3]
        t = time.time()
        job = write_stores(version, [Job(out, load_messages(msgs), load_config(cfg))], threads=1)[0]
        if job.error:
            print(f"error: {job.error}", file=sys.stderr)
            return 1
        print(f"RocketMQ {version} wrote {len(job.results)} messages into {out} in {time.time() - t:.1f}s")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
