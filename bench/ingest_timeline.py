"""Where the cores of one ingest sit idle: a timeline of a cold ``spark-submit jobs/ingest.py``.

    python bench/ingest_timeline.py --input DIR --store DIR [--root CHECKOUT] [--json OUT]
        [--runs N] [--copy OUT_DIR]

Each run: the command of bench/cold.py (the Makefile's cold-ingest JVM options, ``local[2]``),
with Spark's event log and ``ROCKETLAKE_STARTUP_TRACE`` (storelib.runtime.milestones) on. Every
0.25 s the CPU seconds of the whole process tree (its session, from /proc: the Python workers
too, whom nobody reaps) are read; the event log gives each task's launch and finish, the trace
the driver's milestones. Each quarter second is put in one bucket:

* ``driver: <milestone>``: no task runs; the driver's last milestone names what it is doing
  (start-up, the plan between the stages, the commit, the publish, the stop);
* ``<stage>: both slots``: two tasks run; its idle is what the tasks wait on (the disk, locks);
* ``<stage>: tail``: one task runs and none waits for a slot: the other core has nothing to do.

Printed per bucket: wall seconds, the tree's CPU seconds, and the idle core-seconds
(cores x wall - CPU). ``--root`` runs another checkout's ``jobs/ingest.py`` (its storelib first on
``PYTHONPATH``), for A/B against a ``git archive`` of a commit; ``--copy`` runs
``bench/parquet_copy.py`` of the same input after each ingest (Spark's default JVM).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from harness import PY, ROOT, TreeSampler, session_cpu, spark_submit

CORES = 2
TICK = 0.25


class Runnable(threading.Thread):
    """Every ``interval`` s: how many threads of session ``sid`` are running or runnable (state
    R) and how many wait on the disk (state D). ``max(0, CORES - R)`` is what a quiet machine
    would leave idle at that instant, whatever the other load does to the wall."""

    def __init__(self, sid: int, interval: float = 0.05):
        super().__init__(daemon=True)
        self.sid, self.interval, self.samples = sid, interval, []
        self._stop_event = threading.Event()

    def count(self) -> tuple:
        r = d = 0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[3]) != self.sid:
                        continue
                tids = os.listdir(f"/proc/{name}/task")
            except (OSError, ValueError, IndexError):
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{name}/task/{tid}/stat") as fh:
                        state = fh.read().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    continue
                r += state == "R"
                d += state == "D"
        return r, d

    def run(self):
        while not self._stop_event.is_set():
            self.samples.append((time.time(),) + self.count())
            self._stop_event.wait(self.interval)

    def stop(self):
        self._stop_event.set()
        self.join()


def _machine_busy() -> tuple:
    """(busy, iowait) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    return sum(v) - v[3] - v[4], v[4]


def ingest_argv(root: str, store: str, src: str, events: str, summary: str) -> list:
    from storelib.runtime.jvm_archive import job_options
    argv = spark_submit(os.path.join(root, "jobs", "ingest.py"), "--store", store, "--input", src,
                        "--format", "parquet", "--json-summary", summary, java_opts=job_options())
    return argv[:1] + ["--conf", "spark.eventLog.enabled=true", "--conf", "spark.eventLog.compress=false",
                       "--conf", f"spark.eventLog.dir=file://{events}"] + argv[1:]


def run_sampled(argv: list, env: dict, cwd: str = ROOT) -> dict:
    """The command in its own session, in ``cwd`` (the checkout it runs: the Python workers put
    their working directory first on their path): wall, CPU samples every TICK, the tree's peak
    RSS."""
    t0 = time.time()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, cwd=cwd)
    rss = TreeSampler(proc.pid, interval=0.1)
    rss.start()
    runnable = Runnable(proc.pid)
    runnable.start()
    err: list = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)   # type: ignore[union-attr]
    reader.start()
    cpu_by_pid: dict = {}
    samples = []
    while proc.poll() is None:
        samples.append((time.time(), session_cpu(proc.pid, cpu_by_pid)) + _machine_busy())
        time.sleep(TICK - (time.time() - t0) % TICK)
    t1 = time.time()
    samples.append((t1, session_cpu(proc.pid, cpu_by_pid)) + _machine_busy())
    rss.stop()
    runnable.stop()
    reader.join(5)
    return {"rc": proc.returncode, "t0": t0, "wall_s": t1 - t0, "cpu_s": samples[-1][1], "samples": samples, "runnable": runnable.samples,
            "peak_rss_gb": rss.peak_rss / 1e9, "stderr": (err[0] if err else b"")[-3000:].decode(errors="replace"),
            "load": os.getloadavg()[0]}


def read_events(events_dir: str) -> dict:
    """Tasks [(stage, launch, finish)] and stages {id: (submitted, completed)}, epoch seconds."""
    tasks, stages = [], {}
    for path in glob.glob(os.path.join(events_dir, "**", "events_*"), recursive=True) + \
            glob.glob(os.path.join(events_dir, "*")):
        if os.path.isdir(path):
            continue
        with open(path) as fh:
            for line in fh:
                e = json.loads(line)
                kind = e.get("Event")
                if kind == "SparkListenerTaskEnd":
                    ti = e["Task Info"]
                    tasks.append((e["Stage ID"], ti["Launch Time"] / 1e3, ti["Finish Time"] / 1e3))
                elif kind == "SparkListenerStageCompleted":
                    si = e["Stage Info"]
                    stages[si["Stage ID"]] = (si["Submission Time"] / 1e3, si["Completion Time"] / 1e3)
    return {"tasks": tasks, "stages": stages}


def read_marks(trace: str) -> list:
    """The driver's milestones [(epoch s, name)], in order (the driver: the process that marked
    ``preflight``)."""
    with open(trace) as fh:
        lines = [ln.split(None, 2) for ln in fh if ln.strip()]
    driver = next((pid for _t, pid, name in lines if name.strip() == "preflight"), None)
    return sorted((float(t), name.strip()) for t, pid, name in lines if pid == driver)


def stage_names(stages: dict, marks: list) -> dict:
    """{stage id: name}: the driver's ``stage <name>`` milestone last before its submission
    (the warm-up job's stage comes before any)."""
    out = {}
    for sid, (sub, _end) in stages.items():
        names = [n.split(" ", 1)[1] for t, n in marks if n.startswith("stage ") and t <= sub + 0.05]
        out[sid] = names[-1] if names and names[-1] != "end" else "warm-up"
    return out


def bucket_of(t: float, tasks: list, names: dict, marks: list) -> str:
    running = [s for s, a, b in tasks if a <= t < b]
    if running:
        stage = names.get(running[0], "?")
        waiting = any(s == running[0] and a > t for s, a, _b in tasks)
        return f"{stage}: both slots" if len(running) >= 2 else f"{stage}: {'one slot, more queued' if waiting else 'tail'}"
    before = [n for m, n in marks if m <= t]
    if not before:
        return "driver: spark-submit, JVM start"
    last = before[-1]
    return "driver: " + (" ".join(last.split()[:2]) if last.startswith("stage") else last.split(" ")[0])


def buckets(run: dict, ev: dict, marks: list) -> dict:
    """{bucket: [wall s, CPU s, first offset, the machine's busy s, iowait s, core shortfall,
    disk-waiting threads, runnable samples]} over the run's samples: the shortfall and the disk
    waits summed over the runnable-thread samples in the bucket (``Runnable``)."""
    names = stage_names(ev["stages"], marks)
    out: dict = {}
    s = run["samples"]
    hz = os.sysconf("SC_CLK_TCK")
    for (ta, ca, ba, wa), (tb, cb, bb, wb) in zip(s, s[1:]):
        key = bucket_of((ta + tb) / 2, ev["tasks"], names, marks)
        row = out.setdefault(key, [0.0, 0.0, ta - run["t0"], 0.0, 0.0, 0.0, 0.0, 0])
        row[0] += tb - ta
        row[1] += cb - ca
        row[3] += (bb - ba) / hz
        row[4] += (wb - wa) / hz
    for t, r, d in run["runnable"]:
        row = out.get(bucket_of(t, ev["tasks"], names, marks))
        if row is not None:
            row[5] += max(0, CORES - r)
            row[6] += d
            row[7] += 1
    return out


def quiet_idle(cpu: float, shortfall: float, n: int) -> float:
    """Idle core-seconds a quiet machine would show for this CPU: the cores free a share ``f`` of
    the time (mean shortfall / cores) while the busy ones do the same CPU work."""
    f = min(0.95, shortfall / n / CORES) if n else 0.0
    return cpu * f / (1 - f)


def report(run: dict, rows: dict) -> str:
    est = sum(quiet_idle(v[1], v[5], v[7]) for v in rows.values())
    lines = [f"wall {run['wall_s']:.2f} s, CPU of the tree {run['cpu_s']:.2f} s "
             f"({run['cpu_s'] / run['wall_s'] / CORES:.0%} of {CORES} cores), idle core-s "
             f"{CORES * run['wall_s'] - run['cpu_s']:.2f} (on a quiet machine, estimated: {est:.2f}), "
             f"peak RSS of the tree {run['peak_rss_gb']:.2f} GB, load {run['load']:.1f}",
             "| bucket | from (s) | wall s | CPU s | idle core-s | free cores, mean | quiet idle core-s, est. "
             "| threads on the disk, mean | others' CPU s |", "|---|---|---|---|---|---|---|---|---|"]
    for key, (wall, cpu, first, busy, _iow, short, disk, n) in sorted(rows.items(), key=lambda kv: kv[1][2]):
        lines.append(f"| {key} | {first:.2f} | {wall:.2f} | {cpu:.2f} | {CORES * wall - cpu:.2f} | "
                     f"{short / max(n, 1):.2f} | {quiet_idle(cpu, short, n):.2f} | {disk / max(n, 1):.2f} | "
                     f"{max(0.0, busy - cpu):.2f} |")
    return "\n".join(lines)


def one_ingest(root: str, src: str, store: str, work: str) -> dict:
    events = tempfile.mkdtemp(prefix="events-", dir=work)
    trace = os.path.join(work, "trace.txt")
    summary = os.path.join(work, "summary.json")
    for p in (trace, summary):
        if os.path.exists(p):
            os.unlink(p)
    shutil.rmtree(store, ignore_errors=True)
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY, ROCKETLAKE_STARTUP_TRACE=trace,
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    os.sync()
    run = run_sampled(ingest_argv(root, store, src, events, summary), env, cwd=root)
    if run["rc"] != 0:
        raise RuntimeError(f"ingest failed ({run['rc']}): {run['stderr']}")
    with open(summary) as fh:
        run["messages"] = json.load(fh).get("messages")
    ev, marks = read_events(events), read_marks(trace)
    run["buckets"] = buckets(run, ev, marks)
    run["marks"] = [(t - run["t0"], n) for t, n in marks]
    run["tasks"] = [(names, a - run["t0"], b - run["t0"]) for names, a, b in ev["tasks"]]
    shutil.rmtree(events, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)
    return run


def one_copy(src: str, out: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    run = run_sampled(spark_submit(os.path.join(ROOT, "bench", "parquet_copy.py"), src, out),
                      dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY))
    shutil.rmtree(out, ignore_errors=True)
    if run["rc"] != 0:
        raise RuntimeError(f"copy failed ({run['rc']}): {run['stderr']}")
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--root", action="append", help="checkout(s) to run, alternated (default: this one)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--copy", help="also run the Parquet copy into this directory, each round")
    ap.add_argument("--json", help="append every run (without its samples) to this JSON-lines file")
    args = ap.parse_args(argv)
    work = os.path.dirname(os.path.abspath(args.store))
    for r in range(args.runs):
        jobs = [(root, lambda root=root: one_ingest(root, args.input, args.store, work)) for root in args.root or [ROOT]]
        if args.copy:
            jobs.append(("parquet copy", lambda: one_copy(args.input, args.copy)))
        for name, job in jobs:
            run = job()
            print(f"## round {r}, {name}: {time.strftime('%H:%M:%S', time.gmtime(run['t0']))} UTC")
            print(report(run, run["buckets"]) if "buckets" in run else
                  f"wall {run['wall_s']:.2f} s, CPU {run['cpu_s']:.2f} s, peak RSS {run['peak_rss_gb']:.2f} GB, "
                  f"load {run['load']:.1f}", flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(dict({k: v for k, v in run.items() if k not in ("samples", "runnable")}, name=name, round=r,
                                             cpu_series=[(t - run["t0"], c) for t, c, _b, _w in run["samples"]],
                                             runnable=[(t - run["t0"], r, d) for t, r, d in run.get("runnable", ())])) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
