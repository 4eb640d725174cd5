"""Where a cold job's fixed seconds go: one command run with ``ROCKETLAKE_STARTUP_TRACE``
(storelib.runtime.milestones), its milestones as a timeline.

    python bench/startup.py [--runs 3] -- spark-submit ... jobs/ingest.py --store S --input I

Each run: the command's start and the reaping of its process tree are read here; every Python
process of the job (the driver, the worker daemon, the workers it forks) writes its start
(``process-start``), its milestones and its exit. Printed per run: each milestone's offset from
the command's start, and the phases between them (the median over runs with ``--runs``): the
launcher and the driver's JVM until the Python driver starts, the driver's imports, the JVM's
SparkContext, the warm-up job, the body's stages, the commit, Spark's stop, the Python exit and
the JVM's exit after it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from harness import session_cpu

# (phase, from milestone, to milestone): milestones of the driver unless prefixed "worker:"
PHASES = (
    ("spark-submit: launcher + driver JVM until Python starts", "cmd-start", "process-start"),
    ("driver Python: interpreter, imports, arguments", "process-start", "preflight"),
    ("driver: preflight (input, store state, config)", "preflight", "run_job"),
    ("driver: SparkContext (JVM) start", "spark-session", "spark-started"),
    ("body until the first stage (store state, plan, warm-up join)", "body", "stage encode"),
    ("worker daemon started (after the context)", "spark-started", "worker:daemon"),
    ("warm-up task: imports in a worker", "worker:warm-task", "worker:warm-task-end"),
    ("encode stage", "stage encode", "encode done"),
    ("plan .. committed (write stage, commit)", "plan", "committed batch"),
    ("committed .. body end (publish, housekeeping)", "committed batch", "body-end"),
    ("spark.stop()", "spark-stop", "spark-stopped"),
    ("driver Python exit (after stop)", "spark-stopped", "exit"),
    ("JVM exit after the driver's Python", "exit", "cmd-end"),
    ("whole command", "cmd-start", "cmd-end"),
)


def run_once(argv: list, env: dict | None = None) -> dict:
    """Run ``argv`` with a fresh trace file; the milestones (first of each name per kind)."""
    fd, trace = tempfile.mkstemp(prefix="rocketlake-startup-", suffix=".trace")
    os.close(fd)
    env = dict(env or os.environ, ROCKETLAKE_STARTUP_TRACE=trace)
    t0 = time.time()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    cpu_by_pid: dict = {}
    while proc.poll() is None:
        session_cpu(proc.pid, cpu_by_pid)
        time.sleep(0.05)
    t1 = time.time()
    rc = proc.returncode
    with open(trace) as fh:
        lines = [ln.split(None, 2) for ln in fh if ln.strip()]
    os.unlink(trace)
    driver = next((int(pid) for _t, pid, name in lines if name.strip() == "preflight"), None)
    marks: dict = {"cmd-start": t0, "cmd-end": t1}
    for t, pid, name in sorted(lines, key=lambda x: float(x[0])):
        key = name.strip() if int(pid) == driver else f"worker:{name.strip()}"
        for k in {key, " ".join(key.split()[:2])}:
            marks.setdefault(k, float(t))
    return {"rc": rc, "marks": marks, "cpu": sum(cpu_by_pid.values()), "t0": t0}


def phases(run: dict) -> list:
    m = run["marks"]
    return [(name, m[b] - m[a] if a in m and b in m else None) for name, a, b in PHASES]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--timeline", action="store_true", help="print every milestone of the last run")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    runs = [run_once(cmd) for _ in range(args.runs)]
    if args.timeline:
        last = runs[-1]
        for k, t in sorted(last["marks"].items(), key=lambda kv: kv[1]):
            print(f"{t - last['t0']:8.3f}  {k}")
    rows = [phases(r) for r in runs]
    wall = statistics.median(dict(p)["whole command"] or 0 for p in rows)
    print(f"runs {len(runs)}, exit codes {[r['rc'] for r in runs]}, CPU s of the process tree, sampled every 50 ms (median) "
          f"{statistics.median(r['cpu'] for r in runs):.2f}, load avg {os.getloadavg()[0]:.1f}")
    print("| phase | seconds (median) | share of the wall | min / max |\n|---|---|---|---|")
    for i, (name, _a, _b) in enumerate(PHASES):
        vals = [p[i][1] for p in rows if p[i][1] is not None]
        if not vals:
            print(f"| {name} | - | - | - |")
            continue
        med = statistics.median(vals)
        print(f"| {name} | {med:.2f} | {med / wall:.0%} | {min(vals):.2f} / {max(vals):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
