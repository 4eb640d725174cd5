"""RocketMQ as the anchor: the same messages written by RocketMQ 5.3.3's own ``DefaultMessageStore``
in one JVM (bench/rocketmq/BenchWriter.java: one putMessage per message, the reput thread building
consume queues and index behind it, ASYNC_FLUSH, no network, the same disk) against ``rocketlake
ingest`` of them (the command a user types, a fresh process, Spark local[*]); alternated rounds,
both cold. Both stores must be byte-identical (tests/support/rmqcompare: checkpoint, commitlog,
consume queues, index files) or the section fails: the two writers did the same work.

Where the time goes: the JVM's phase timers (open, parse the input, putMessage, wait for the reput
thread, shutdown; JVM start = the rest of the process's wall time) and, for ours, Spark's own
event log of the run (each stage's wall time and task time; driver-only time between stages;
process start = wall time before the application started).

The JVM's input is the bench's Parquet input as RefWriter's TSV (base64 fields), written once per
size before anything is timed; reading and decoding it is the JVM's ``parse`` phase, inside its
figure, as reading the Parquet input is inside ours.
"""
from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import sys

import pyarrow.parquet as pq

from harness import PY, ROOT, alternate, java_classes, stats

sys.path.insert(0, os.path.join(ROOT, "tests"))

VERSION = "5.3.3"
JAVA_SRC = os.path.join(ROOT, "bench", "rocketmq", "BenchWriter.java")
MAIN = "rocketlake.refwriter.BenchWriter"
# RocketMQ's defaults (the broker's: ASYNC_FLUSH) but for the flush type, written out; rocketlake's
# StoreConfig defaults are the same file sizes.
JVM_CONFIG = {"flushDiskType": "ASYNC_FLUSH", "brokerRole": "ASYNC_MASTER"}
JVM_OPTS = ["-Xms2g", "-Xmx2g", "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens",
            "java.base/sun.nio.ch=ALL-UNNAMED", "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED",
            "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED", "-Drocketmq.client.logUseSlf4j=true"]


def classpath() -> str:
    """BenchWriter compiled against RocketMQ 5.3.3's jars and the reference writer's classes."""
    from support import rmqjars
    cp = rmqjars.classpath(VERSION, "main")
    out = java_classes(JAVA_SRC, f"bench-anchor-{VERSION}", cp)
    return os.pathsep.join([out, cp])


def messages_tsv(src: str, path: str) -> str:
    """The Parquet input (in ingest order: file name order, row order) as RefWriter's TSV, once."""
    if os.path.exists(path):
        return path
    from storelib.ingest import inputs
    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        for f in sorted(glob.glob(os.path.join(src, "*.parquet"))):
            pf = pq.ParquetFile(f)
            for batch in pf.iter_batches(batch_size=65536):
                t = inputs.to_canonical(batch, lambda i: f"row {i}", "body")
                cols = [t.column(c).to_pylist() for c in (
                    "topic", "queue_id", "flag", "sys_flag", "born_timestamp", "store_timestamp", "born_host",
                    "store_host", "reconsume_times", "prepared_transaction_offset", "body", "properties_string")]
                out.writelines(
                    f"{b64(tp.encode())}\t{q}\t{fl}\t{sf}\t{bt}\t{st}\t{bh}\t{sh}\t{rc}\t{po}\t{b64(body)}\t"
                    f"{b64(props.encode())}\n"
                    for tp, q, fl, sf, bt, st, bh, sh, rc, po, body, props in zip(*cols))
    os.rename(tmp, path)
    return path


def jvm_argv(store: str, tsv: str, config: str, cp: str) -> list:
    return ["java", *JVM_OPTS, "-cp", cp, MAIN, store, tsv, config]


def rocketlake_command() -> list:
    """``rocketlake`` as installed (the console script beside the venv's python), else its module."""
    script = os.path.join(os.path.dirname(PY), "rocketlake")
    return [script] if os.path.exists(script) else [PY, "-m", "storelib.cli.main"]


def ingest_argv(store: str, src: str, summary: str, eventlog: str) -> list:
    return [*rocketlake_command(), "ingest", "--store", store, "--input", src, "--format", "parquet", "--quiet",
            "--json-summary", summary, "--conf", "spark.eventLog.enabled=true",
            "--conf", f"spark.eventLog.dir=file://{eventlog}", "--conf", "spark.eventLog.rolling.enabled=false",
            "--conf", "spark.eventLog.compress=false"]


def jvm_phases(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("phases "))
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def spark_phases(eventlog_dir: str) -> dict:
    """From Spark's event log of one application: its start and end (ms since the epoch) and per
    stage its name, wall time (submission to completion) and summed task run time."""
    files = [f for f in glob.glob(os.path.join(eventlog_dir, "**", "*"), recursive=True) if os.path.isfile(f)]
    if len(files) != 1:
        raise RuntimeError(f"expected one Spark event log in {eventlog_dir}, found {files}")
    app, stages, task_ms = {}, [], {}
    with open(files[0], encoding="utf-8") as fh:
        for line in fh:
            ev = json.loads(line)
            kind = ev["Event"]
            if kind == "SparkListenerApplicationStart":
                app["start"] = ev["Timestamp"]
            elif kind == "SparkListenerApplicationEnd":
                app["end"] = ev["Timestamp"]
            elif kind == "SparkListenerTaskEnd":
                sid = ev["Stage ID"]
                task_ms[sid] = task_ms.get(sid, 0) + ev.get("Task Metrics", {}).get("Executor Run Time", 0)
            elif kind == "SparkListenerStageCompleted":
                s = ev["Stage Info"]
                stages.append({"id": s["Stage ID"], "name": s["Stage Name"], "tasks": s["Number of Tasks"],
                               "start": s.get("Submission Time"), "end": s.get("Completion Time")})
    for s in stages:
        s["wall_s"] = (s["end"] - s["start"]) / 1000 if s["start"] and s["end"] else 0.0
        s["task_s"] = task_ms.get(s["id"], 0) / 1000
    return {"app_start_ms": app.get("start"), "app_end_ms": app.get("end"), "stages": stages}


def _union_s(stages: list) -> float:
    """Seconds covered by at least one stage (stages may overlap)."""
    spans = sorted((s["start"], s["end"]) for s in stages if s["start"] and s["end"])
    total, cur = 0, None
    for a, b in spans:
        if cur and a <= cur[1]:
            cur[1] = max(cur[1], b)
            continue
        if cur:
            total += cur[1] - cur[0]
        cur = [a, b]
    return (total + (cur[1] - cur[0] if cur else 0)) / 1000


def rocketlake_phases(wall: float, job_s: float, eventlog_dir: str) -> list:
    """(what, seconds) of one ``rocketlake ingest`` run: the job (the summary's seconds) and the
    process around it; with Spark (inputs over the in-process threshold), from its event log each
    stage's wall time and the driver's time outside every stage."""
    out = [("process start-up and exit (imports, Spark start, outside the job)", wall - job_s),
           ("the job (summary seconds: plan, encode, write, commit)", job_s)]
    if not glob.glob(os.path.join(eventlog_dir, "*")):
        return out + [("(no Spark: the input is small enough to run in process)", 0.0)]
    sp = spark_phases(eventlog_dir)
    app_s = (sp["app_end_ms"] - sp["app_start_ms"]) / 1000 if sp["app_end_ms"] else None
    out.append(("Spark application, driver outside every stage (planning, commit)",
                app_s - _union_s(sp["stages"]) if app_s else None))
    return out + [(f"stage {s['id']} {s['name'].replace(ROOT + os.sep, '')} ({s['tasks']} tasks, "
                   f"{s['task_s']:.1f} task-s)", s["wall_s"]) for s in sp["stages"]]


def compare_stores(want: str, got: str) -> tuple[list, str]:
    """Differences of ``got`` from RocketMQ's ``want`` that make the comparison unfair (raises
    AssertionError on any), and a note on the checkpoint: its first field (physicMsgTimestamp) is
    where the flush types differ (an ASYNC_FLUSH broker stamps the last flush's message, a
    SYNC_FLUSH writer the last message); the other fields must be equal."""
    from support import rmqcompare
    diffs = rmqcompare.compare(want, got)
    bad = [d for d in diffs if not d.startswith("differs: checkpoint:")]
    with open(os.path.join(want, "checkpoint"), "rb") as a, open(os.path.join(got, "checkpoint"), "rb") as b:
        cw, cg = a.read(), b.read()
    if cw[8:] != cg[8:]:
        bad.append("differs: checkpoint beyond physicMsgTimestamp")
    if bad:
        raise AssertionError(f"the two stores differ, the comparison would not be fair: {bad}")
    def phys(c: bytes) -> int:
        return int.from_bytes(c[:8], "big")
    note = "checkpoint equal" if cw == cg else (
        f"checkpoint physicMsgTimestamp {phys(cg)} vs RocketMQ's {phys(cw)} (the flush types: ours SYNC_FLUSH, "
        "the default; the broker's ASYNC_FLUSH)")
    return diffs, note


def bench_anchor(res, workdir: str, src: str, n: int, rounds: int, section: str = "anchor") -> dict:
    """RocketMQ's DefaultMessageStore (one JVM) vs ``rocketlake ingest``, same messages, alternated."""
    cp = classpath()
    tsv = messages_tsv(src, os.path.join(workdir, f"messages-{n}.tsv"))
    config = os.path.join(workdir, "anchor-store.properties")
    with open(config, "w") as fh:
        fh.writelines(f"{k}={v}\n" for k, v in JVM_CONFIG.items())
    rmq, ours = os.path.join(workdir, f"anchor-rocketmq-{n}"), os.path.join(workdir, f"anchor-rocketlake-{n}")
    eventlog = os.path.join(workdir, "anchor-eventlog")
    logs, summaries = [], []                    # per rocketlake round

    def before(name, r):
        shutil.rmtree(rmq if name == "rocketmq" else ours, ignore_errors=True)
        if name == "rocketlake":
            logs.append(os.path.join(eventlog, str(r)))
            os.makedirs(logs[-1])
            summaries.append(os.path.join(eventlog, f"summary-{r}.json"))

    shutil.rmtree(eventlog, ignore_errors=True)
    runs = alternate(rounds, {"rocketlake": lambda: ingest_argv(ours, src, summaries[-1], logs[-1]),
                              "rocketmq": jvm_argv(rmq, tsv, config, cp)}, before=before)
    summ = []
    for path in summaries:
        with open(path) as fh:
            summ.append(json.load(fh))
        if summ[-1].get("messages") != n or summ[-1].get("status") != "committed":
            raise AssertionError(f"rocketlake ingest: {summ[-1]}, expected {n} messages committed")
    i = min(range(len(runs["rocketlake"])), key=lambda j: runs["rocketlake"][j]["wall_s"])
    diffs, note = compare_stores(rmq, ours)
    res.record(section, "stores byte-identical (commitlog, consumequeue, index)", "yes", None, "",
               f"rocketlake's store vs RocketMQ's, every data file compared; {note}", mode="cold", differences=diffs)
    o, b = stats(runs["rocketlake"]), stats(runs["rocketmq"])
    load = os.getloadavg()[0]
    res.record(section, f"write {n} msgs, fresh process: median wall (s)", o["median"], b["median"], "s",
               f"ours: rocketlake ingest (in process under 32 MiB of input, else Spark local[*]); baseline: RocketMQ {VERSION} "
               f"DefaultMessageStore in one JVM, ASYNC_FLUSH; {rounds} alternated rounds; load average {load:.1f} "
               f"on {os.cpu_count()} processors", mode="cold", runs=o["all"], baseline_runs=b["all"])
    res.record(section, "msgs/s (best round): rocketlake vs RocketMQ's store", n / o["best"], n / b["best"], "msgs/s",
               "ratio >= 1: rocketlake writes faster than the broker's own store writer", mode="cold")
    job_s = min(x["seconds"] for x in summ)
    best_jvm = min(runs["rocketmq"], key=lambda r: r["wall_s"])
    ph = jvm_phases(best_jvm["stdout"])
    res.record(section, "msgs/s without start-up and shutdown", n / job_s,
               n / (ph["parse_s"] + ph["put_s"] + ph["dispatch_wait_s"]), "msgs/s",
               "ours: the job's own seconds (best round's summary: plan, encode, write, commit); RocketMQ: "
               "parse + putMessage + until dispatched (no store open, no shutdown, whose wait is fixed)",
               mode="cold")
    res.record(section, "msgs/s without start-up and shutdown, RocketMQ without its input parse", n / job_s,
               n / (ph["put_s"] + ph["dispatch_wait_s"]), "msgs/s",
               "RocketMQ: putMessage + until dispatched only (the TSV input's reading and decoding left out; "
               "ours still reads and decodes its Parquet input)", mode="cold")
    peak = {k: max(r["peak_rss_bytes"] for r in v) / 1e9 for k, v in runs.items()}
    res.record(section, "peak RSS of the process tree (GB)", peak["rocketlake"], peak["rocketmq"], "GB",
               "max over rounds; the JVM's heap is -Xms2g -Xmx2g", mode="cold")
    # where the time goes: the best round of each side
    ph["jvm_start_s"] = best_jvm["wall_s"] - sum(v for k, v in ph.items() if k.endswith("_s"))
    for k in ("jvm_start_s", "open_s", "parse_s", "put_s", "dispatch_wait_s", "shutdown_s"):
        res.record(section, f"RocketMQ phase: {k[:-2]} (s)", ph[k], best_jvm["wall_s"], "s",
                   "share of the JVM's wall time (baseline column: the whole run)", mode="cold")
    for what, v in rocketlake_phases(runs["rocketlake"][i]["wall_s"], summ[i]["seconds"], logs[i]):
        res.record(section, f"rocketlake phase: {what} (s)", v, runs["rocketlake"][i]["wall_s"], "s",
                   "the best round; baseline column: the whole run", mode="cold")
    for path in (rmq, ours, tsv):              # 10M: ~4 GB each; the Parquet input stays (other sections')
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
    return {"runs": runs, "differences": diffs, "jvm_phases": ph}
