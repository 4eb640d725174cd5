"""The mirror's benchmark (`make bench-mirror`): lag against a live broker, catch-up against a copy,
bytes uploaded per cycle into S3. Every figure beside a baseline measured in the same run.

    python bench/mirror_bench.py [--only lag,catchup,s3] [--rates 1000,10000] [--every 1,10]
                                 [--seconds 25] [--catchup-messages 1000000] [--s3-messages 300000]

* lag: a real RocketMQ 5.3.3 name server + broker (tests/support/rmqbroker.py, 64 MiB segments,
  flushes every 200 ms) and a producer (bench/rocketmq/BenchProducer.java: DefaultMQProducer in a
  JVM of its own, ``--producer-threads`` threads of synchronous sends, ``--batch`` messages per
  request, at the rate ``--rates`` asks as far as it can) while ``rocketlake mirror --every N`` runs
  as its own process, one process per N (warmed up first), one window per rate, long enough for
  ``--min-cycles`` cycles. Per window: the CPU cores the broker, the producer, the mirror and the
  whole machine used (/proc). Per committed cycle: the age of its newest
  record at the commit (``lag_ms``) and, the baseline, the age of the broker's safe point when the
  cycle read it (``safe_read_age_ms``: the least lag any reader of only flushed records could
  have; the rest is the cycle's own time); p50 and p99 of each, and the lag over the cycle period.
  A message's own lag adds its wait for the next cycle (up to N s, N/2 on average). The rate the producer reached is
  printed beside the rate asked (2 cores, shared).
* catchup: bench/mirror_catchup.py: ``mirror_broker`` catching up a broker-format store of N
  messages against ``cp -r`` + ``sync`` of the same files (MB/s of record bytes; ratio), every run
  reading the broker's files from the disk; with ``--baseline-src`` also that tree's mirror.
* s3: a broker-format store of N messages (the lag section's file sizes: 64 MiB segments, 42 MB
  index files); the mirror into a moto S3 server catches up half, then
  cycles each adding about 1 MB: per cycle the bytes uploaded (the objects new or replaced on the
  server between two listings, Delta commits included) against the cycle's record bytes.

Prints a JSON line per section and a summary table; saves them under bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from unittest import mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SUPPORT = os.path.join(ROOT, "tests", "support")
sys.path[:0] = [ROOT, HERE, SUPPORT, os.path.join(ROOT, "tests")]
PRODUCER_SRC = os.path.join(HERE, "rocketmq", "BenchProducer.java")

SIZES = {"mappedFileSizeCommitLog": 64 << 20, "mappedFileSizeConsumeQueue": 300000 * 20, "maxHashSlotNum": 500000,
         "maxIndexNum": 2000000}
FLUSH = {"flushCommitLogThoroughInterval": 200, "flushConsumeQueueThoroughInterval": 200,
         "flushIntervalConsumeQueue": 200}
TOPICS = ["bench_a", "bench_b", "bench_c"]


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread) a process has used so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat)."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    tck = os.sysconf("SC_CLK_TCK")
    return (sum(f) - f[3] - f[4]) / tck, sum(f) / tck


def pct(xs, q) -> float | None:
    return round(float(np.percentile(xs, q)), 1) if len(xs) else None


class Producer:
    """bench/rocketmq/BenchProducer.java (RocketMQ's DefaultMQProducer) in a JVM of its own, its own
    process group: ``threads`` sending threads, ``batch`` messages per request; ``stop`` returns
    (messages SEND_OK, failed, the next message number)."""

    def __init__(self, ns: str, path: str, rate: float, first: int, threads: int, batch: int, work: str):
        from harness import java_classes
        from support import rmqjars
        cp = rmqjars.classpath(rmqjars.V5, "broker")
        classes = java_classes(PRODUCER_SRC, f"bench-producer-{rmqjars.V5}", cp)
        home = os.path.join(work, "producer-home")
        os.makedirs(home, exist_ok=True)
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", f"-Duser.home={home}", "-Drocketmq.client.logRoot=" + home,
             "-cp", os.pathsep.join([classes, cp]), "rocketlake.bench.BenchProducer", ns, path, str(rate), str(first),
             ",".join(TOPICS), str(threads), str(batch)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(os.path.join(work, "producer.log"), "a"),
            text=True, start_new_session=True)
        for line in self.proc.stdout:
            if line.strip() == "ready":
                return
        raise RuntimeError(f"the bench producer did not start (exit {self.proc.wait()}); {work}/producer.log")

    def stop(self) -> tuple:
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.startswith("produced\t"):
                    sent, failed, nxt = (int(x) for x in line.split("\t")[1:4])
                    return sent, failed, nxt
            raise RuntimeError(f"the bench producer ended without its count (exit {self.proc.wait()})")
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def lag(rates: list, everies: list, seconds: float, work: str, threads: int = 4, batch: int = 8,
        min_cycles: int = 12) -> dict:
    import threading
    from rmqbroker import Broker
    broker_dir, store = os.path.join(work, "broker"), os.path.join(work, "mirror")
    os.makedirs(broker_dir)
    props = os.path.join(work, "broker.properties")
    with open(props, "w") as fh:
        fh.write("".join(f"{k}={v}\n" for k, v in SIZES.items()))
    phases = []
    nxt = 0
    with Broker(broker_dir, os.path.join(work, "jvm"), {**SIZES, **FLUSH}) as b:
        b.ask("topics", ",".join(TOPICS), 4)

        def send(path, rate, secs, mirror_pid):
            """(SEND_OK, failed, window start, end, CPU cores used in it by the broker, the producer,
            the mirror and the whole machine, and the cores the machine has)."""
            nonlocal nxt
            p = Producer(b.addresses[0], path, rate, nxt, threads, batch, work)
            pids = {"broker": b.proc.pid, "producer": p.proc.pid, "mirror": mirror_pid}
            c0, m0, t0 = {k: cpu_seconds(v) for k, v in pids.items()}, machine_busy(), time.time()
            time.sleep(secs)
            c1, m1, t1 = {k: cpu_seconds(v) for k, v in pids.items()}, machine_busy(), time.time()
            sent, failed, nxt = p.stop()
            cores = {k: round((c1[k] - c0[k]) / (t1 - t0), 2) for k in pids}
            cores["machine"] = round((m1[0] - m0[0]) / (t1 - t0), 2)
            cores["machine_of"] = round((m1[1] - m0[1]) / (t1 - t0), 2)
            return sent, failed, t0, t1, cores

        for every in everies:
            # one mirror process per cycle period, warmed up first (its start-up and first cycles are
            # not what is measured); each rate's cycles are those it stamped inside that rate's window
            stamped: list = []
            m = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "mirror", "--from", broker_dir,
                                  "--store", store, "--every", str(every), "--quiet", "--config", props],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                                 start_new_session=True, env=dict(os.environ, PYTHONPATH=ROOT))

            def read(proc=m, out=stamped):
                for line in proc.stdout:
                    if "rocketlake: {" in line:
                        out.append((time.time(), json.loads(line.split("rocketlake: ", 1)[1])))
            threading.Thread(target=read, daemon=True).start()
            try:
                send(os.path.join(work, f"warm-{every}.tsv"), min(rates), max(8.0, 2 * every), m.pid)
                # a window holds at least ``min_cycles`` cycles (besides the first, which may
                # straddle its start)
                window = max(seconds, every * (min_cycles + 1.5))
                for rate in rates:
                    n, failed, t0, t1, cores = send(os.path.join(work, f"sent-{rate}-{every}.tsv"), rate, window, m.pid)
                    time.sleep(every + 1.5)                   # the cycle after the last message
                    done = [c for t, c in stamped if t0 + every + 1 <= t <= t1 + every + 1
                            and c.get("status") == "committed"]
                    lags = [c["lag_ms"] for c in done]
                    # the baseline: the age of the broker's safe point when the cycle read it (the
                    # least lag a reader of flushed records could have), i.e. the lag without the cycle
                    flush = [c["safe_read_age_ms"] for c in done]
                    ph = {"rate_asked": rate, "rate_reached": round(n / (t1 - t0)), "failed": failed,
                          "window_s": round(t1 - t0, 1), "every_s": every, "load_avg": os.getloadavg(),
                          "cpu_cores": cores, "producer_threads": threads, "batch": batch,
                          "cycles": len(done), "lag_p50_ms": pct(lags, 50), "lag_p99_ms": pct(lags, 99),
                          "flush_lag_p50_ms": pct(flush, 50), "flush_lag_p99_ms": pct(flush, 99),
                          "cycle_s_p50": pct([c["seconds"] for c in done], 50),
                          "records_per_cycle_p50": pct([c["messages"] for c in done], 50)}
                    if lags:
                        ph["lag_over_period_p50"] = round(ph["lag_p50_ms"] / (1000 * every), 2)
                        ph["lag_over_flush_lag_p50"] = round(ph["lag_p50_ms"] / max(ph["flush_lag_p50_ms"], 1), 2)
                    print(json.dumps({"lag": ph}), flush=True)
                    phases.append(ph)
            finally:
                os.killpg(m.pid, signal.SIGTERM)
                try:
                    m.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(m.pid, signal.SIGKILL)
                    m.wait()
    return {"phases": phases, "seconds_per_phase": seconds, "broker": {**SIZES, **FLUSH}}


def catchup(messages: int, work: str, baseline_src: str | None = None, rounds: int = 1) -> dict:
    r = subprocess.run([sys.executable, os.path.join(HERE, "mirror_catchup.py"), "--messages", str(messages),
                        "--work", os.path.join(work, f"catchup-{messages}"), "--rounds", str(rounds)]
                       + (["--baseline-src", baseline_src] if baseline_src else []), capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["mirror_over_cp_sync"] = round(out["mirror_mb_s"] / out["cp_mb_s_of_records"], 2)
    print(json.dumps({"catchup": out}), flush=True)
    return out


def s3(messages: int, cycles: int, work: str) -> dict:
    import datagen
    from mirrorhelp import records, set_safe
    from s3server import moto
    from storelib.format.config import load_config
    from storelib.ingest.driver import run_ingest
    from storelib.ops.mirror import mirror_broker
    from storelib.runtime.localrun import LocalSession
    broker = os.path.join(work, "s3-broker")
    datagen.write_parquet(os.path.join(work, "s3-in"), messages, 256, files=2)
    run_ingest(LocalSession(), broker, os.path.join(work, "s3-in"), "parquet", load_config(None, SIZES),
               batch_id="b", quiet=True)
    shutil.rmtree(os.path.join(broker, "_rocketlake"))      # a broker's directory: no manifest
    _, ends, ts = records(broker)
    order = np.sort(ts)
    per_mb = max(1, int(len(ts) * (1 << 20) / ends[-1]))      # records in about 1 MB
    half = len(ts) // 2

    def listing(s3c) -> dict:
        out = {}
        for page in s3c.get_paginator("list_objects_v2").paginate(Bucket="bench"):
            out.update({o["Key"]: (o["ETag"], o["Size"]) for o in page.get("Contents", [])})
        return out

    def uploaded(a: dict, b: dict) -> int:
        """Bytes of the objects new or replaced between two listings, counted on the server (an
        in-process counting proxy starves the cycle it measures on 2 busy cores)."""
        return sum(v[1] for k, v in b.items() if a.get(k) != v)

    rows = []
    with moto("bench") as (env, s3c):
        with mock.patch.dict(os.environ, env):
            uri = "s3://bench/mirror"
            set_safe(broker, int(order[half]))
            t = time.time()
            first = mirror_broker(broker, uri, quiet=True)
            first_s = time.time() - t
            first_up = uploaded({}, listing(s3c))
            for k in range(cycles):
                set_safe(broker, int(order[min(len(order) - 1, half + (k + 1) * per_mb)]))
                before = listing(s3c)
                t = time.time()
                s = mirror_broker(broker, uri, quiet=True)
                rows.append({"record_bytes": s.get("record_bytes", 0), "uploaded": uploaded(before, listing(s3c)),
                             "s": round(time.time() - t, 2)})
    ratios = [r["uploaded"] / r["record_bytes"] for r in rows if r["record_bytes"]]
    out = {"messages": messages, "first_cycle": {"record_bytes": first.get("record_bytes"), "uploaded": first_up,
                                                 "s": round(first_s, 1)},
           "cycles": rows, "uploaded_over_record_p50": round(float(np.median(ratios)), 3) if ratios else None,
           "uploaded_over_record_max": round(max(ratios), 3) if ratios else None,
           "uploaded_minus_record_p50": int(np.median([r["uploaded"] - r["record_bytes"] for r in rows]))}
    print(json.dumps({"s3": out}), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="lag,catchup,s3")
    ap.add_argument("--rates", default="1000,10000")
    ap.add_argument("--every", default="1,10")
    ap.add_argument("--seconds", type=float, default=25, help="a rate's window at least (see --min-cycles)")
    ap.add_argument("--min-cycles", type=int, default=12, help="cycles a rate's window holds at least")
    ap.add_argument("--producer-threads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8, help="messages per send request (the client's batch send)")
    ap.add_argument("--catchup-messages", default="1000000")
    ap.add_argument("--baseline-src", default=None,
                    help="catchup: a source tree (e.g. `git worktree add` of main) whose mirror is timed too")
    ap.add_argument("--catchup-rounds", type=int, default=1)
    ap.add_argument("--s3-messages", type=int, default=300000)
    ap.add_argument("--s3-cycles", type=int, default=8)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    only = set(a.only.split(","))
    work = a.work or tempfile.mkdtemp(prefix="rocketlake-mirror-bench-")
    res: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
                 "loadavg_start": os.getloadavg()}
    try:
        if "lag" in only:
            res["lag"] = lag([int(x) for x in a.rates.split(",")], [float(x) for x in a.every.split(",")],
                             a.seconds, os.path.join(work, "lag"), a.producer_threads, a.batch, a.min_cycles)
        if "catchup" in only:
            res["catchup"] = [catchup(int(n), work, a.baseline_src, a.catchup_rounds) for n in a.catchup_messages.split(",")]
        if "s3" in only:
            res["s3"] = s3(a.s3_messages, a.s3_cycles, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["loadavg_end"] = os.getloadavg()
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", f"mirror-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as fh:
        json.dump(res, fh, indent=1)
    for ph in res.get("lag", {}).get("phases", []):
        print(f"lag  {ph['rate_asked']:>6}/s asked, {ph['rate_reached']:>6}/s reached ({ph['failed']} failed; cores: "
              f"{ph['cpu_cores']}), --every {ph['every_s']:g}: "
              f"p50 {ph['lag_p50_ms']} ms, p99 {ph['lag_p99_ms']} ms (the broker's flush lag p50 "
              f"{ph['flush_lag_p50_ms']}, p99 {ph['flush_lag_p99_ms']}); {ph['cycles']} cycles of "
              f"{ph['cycle_s_p50']} s")
    for c in res.get("catchup", []):
        print(f"catchup {c['messages']} msgs: mirror {c['mirror_mb_s']} MB/s, cp -r + sync {c['cp_mb_s_of_records']} "
              f"MB/s: ratio {c['mirror_over_cp_sync']}"
              + (f"; baseline {c['baseline']['mirror_mb_s']} MB/s, ratio {c['baseline']['mirror_over_cp_sync']}"
                 if "baseline" in c else ""))
    if "s3" in res:
        s = res["s3"]
        print(f"s3 cycles of ~1 MB: uploaded / record bytes p50 {s['uploaded_over_record_p50']}, max "
              f"{s['uploaded_over_record_max']}; uploaded - record bytes p50 {s['uploaded_minus_record_p50']} B")
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
