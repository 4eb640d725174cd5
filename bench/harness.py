"""Measuring whole processes as a user runs them: wall time, peak memory of the process tree,
bytes written, with ``sync`` before every timed run; alternated rounds; the results file.

Only public means: ``/proc`` (the tree is every process of the command's session: spark-submit's
JVM, the Python driver, the PySpark daemon and its workers), ``/sys/block/<dev>/stat`` and
``os.sync``.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, ".venv", "bin", "python") if os.path.exists(
    os.path.join(ROOT, ".venv", "bin", "python")) else os.environ.get("PYSPARK_PYTHON", "python3")
SPARK_SUBMIT = os.path.join(os.path.dirname(PY), "spark-submit")


def spark_submit(*args: str, java_opts: str = "") -> list:
    """The command line a user runs (as the Makefile's SUBMIT: local[2], no UI); ``java_opts``
    for the driver's JVM (the Makefile gives a cold ingest ``storelib.runtime.jvm_archive.job_options()``;
    a baseline keeps Spark's defaults)."""
    return [SPARK_SUBMIT, "--master", "local[2]", "--conf", "spark.ui.showConsoleProgress=false",
            "--conf", "spark.ui.enabled=false", "--driver-java-options",
            f"{java_opts} -Dlog4j.configurationFile={ROOT}/conf/log4j2.properties".strip(), *args]


def job_env(extra: dict | None = None) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY)
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------- the process tree
def _session_pids(sid: int) -> dict:
    """{pid: parent pid} of the processes of session ``sid``."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid:               # field 6 of stat: session id
            out[int(name)] = int(fields[1])     # field 4: parent pid
    return out


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _kind(pid: int) -> str:
    cmd = (_read(f"/proc/{pid}/cmdline") or "").replace("\0", " ")
    if "java" in cmd.split(" ")[0]:
        return "jvm"
    if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd or "pyspark.worker" in cmd:
        return "python_workers"
    return "python_driver" if "python" in cmd else "other"


def _memory(pid: int) -> tuple | None:
    """(VmRSS, VmHWM, RssAnon) of ``pid`` in bytes, from /proc/<pid>/status; None once it is gone."""
    status = _read(f"/proc/{pid}/status")
    if not status:
        return None
    got = {}
    for line in status.splitlines():
        if line.startswith(("VmRSS:", "VmHWM:", "RssAnon:")):
            got[line.split(":", 1)[0]] = int(line.split()[1]) * 1024
    return got.get("VmRSS", 0), got.get("VmHWM", 0), got.get("RssAnon", 0)


def session_cpu(sid: int, cpu_by_pid: dict) -> float:
    """CPU seconds so far of every process of session ``sid`` (a job's tree, the Python workers
    included, whose parent never reaps them: the command's own rusage misses them), updating
    ``cpu_by_pid``, where a process gone keeps its last reading."""
    tick = os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(f[3]) == sid:                  # field 6 (session) of stat, after the command's name
            cpu_by_pid[name] = max(cpu_by_pid.get(name, 0.0), (int(f[11]) + int(f[12])) / tick)
    return sum(cpu_by_pid.values())


class TreeSampler(threading.Thread):
    """Samples a session's processes every ``interval`` s: the peak of the summed RSS (and per
    kind: jvm, python_driver, python_workers), and bytes written per thread (``write_bytes -
    cancelled_write_bytes`` of /proc/<pid>/task/<tid>/io: per thread, so a child reaped by its
    parent is not counted twice).

    ``peak_hwm_by_kind``: per kind, the largest high-water mark of one process (VmHWM, kept by
    the kernel): the Python driver's own peak, exact. It counts mapped files too (the libraries'
    pages), which the kernel takes back under page-cache pressure (a 50M ingest writes 48 GB), so
    it moves with what else the machine caches. ``peak_anon_by_kind``: per kind, the largest
    sampled anonymous memory of one process (RssAnon: what it allocated; without swap never
    taken back), the memory that would grow with the work. The summed RSS of a kind is not: a sample
    misses a peak shorter than the interval. A child that shares its parent's memory until it
    execs (``subprocess`` and the JVM start children with vfork: its RSS, high-water mark and
    command line are the parent's meanwhile) is not counted: a sample landing in that window
    counted the parent twice."""

    def __init__(self, sid: int, interval: float = 0.05):
        super().__init__(daemon=True)
        self.sid, self.interval = sid, interval
        self.peak_rss = 0
        self.peak_by_kind: dict = {}
        self.peak_hwm_by_kind: dict = {}
        self.peak_anon_by_kind: dict = {}
        self.thread_written: dict = {}
        self._stop_event = threading.Event()

    def sample(self):
        total, by_kind = 0, {}
        pids = _session_pids(self.sid)
        seen = {pid: (_memory(pid), _read(f"/proc/{pid}/cmdline")) for pid in pids}
        for pid, (mem, cmd) in seen.items():
            if mem is None:
                continue
            rss, hwm, anon = mem
            parent = seen.get(pids[pid])
            if parent is not None and parent[0] is not None and (parent[0][1], parent[1]) == (hwm, cmd):
                continue                # a child that shares its parent's memory until it execs (vfork): counted once
            kind = _kind(pid)           # each time: a forked child shows its parent's cmdline until it execs
            total += rss
            by_kind[kind] = by_kind.get(kind, 0) + rss
            self.peak_hwm_by_kind[kind] = max(self.peak_hwm_by_kind.get(kind, 0), hwm)
            self.peak_anon_by_kind[kind] = max(self.peak_anon_by_kind.get(kind, 0), anon)
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                io = _read(f"/proc/{pid}/task/{tid}/io")
                if not io:
                    continue
                v = dict(line.split(": ") for line in io.strip().split("\n"))
                self.thread_written[(pid, tid)] = int(v["write_bytes"]) - int(v["cancelled_write_bytes"])
        self.peak_rss = max(self.peak_rss, total)
        for k, v in by_kind.items():
            self.peak_by_kind[k] = max(self.peak_by_kind.get(k, 0), v)

    def run(self):
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self):
        self._stop_event.set()
        self.join()

    @property
    def written(self) -> int:
        return max(0, sum(self.thread_written.values()))


def _device_of(path: str) -> str | None:
    """The /sys/block device holding ``path`` (partitions map to their disk)."""
    try:
        st = os.stat(path)
        link = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    except OSError:
        return None
    for cand in (link, os.path.dirname(link)):
        if os.path.exists(os.path.join(cand, "stat")) and os.path.basename(cand) in os.listdir("/sys/block"):
            return os.path.basename(cand)
    return None


def device_written(dev: str | None) -> int | None:
    """Bytes written to the device so far (sectors written x 512; all writers of the machine)."""
    stat = _read(f"/sys/block/{dev}/stat") if dev else None
    return int(stat.split()[6]) * 512 if stat else None


def run_process(argv: list, env: dict | None = None, workdir: str | None = None, timeout: float = 3600) -> dict:
    """One cold run: ``sync``, then the command in its own session, sampled; ``sync`` again so
    the device counter holds what the run wrote. wall_s covers the command only."""
    dev = _device_of(workdir or ROOT)
    os.sync()
    dev_before = device_written(dev)
    t = time.perf_counter()
    proc = subprocess.Popen(argv, env=env or job_env(), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
    wall = time.perf_counter() - t
    sampler.stop()
    sampler.sample()                               # leftovers of the session (daemons exiting)
    os.sync()
    dev_after = device_written(dev)
    return {"argv": argv, "rc": proc.returncode, "wall_s": wall, "peak_rss_bytes": sampler.peak_rss,
            "peak_rss_by_kind": dict(sampler.peak_by_kind), "peak_hwm_by_kind": dict(sampler.peak_hwm_by_kind),
            "peak_anon_by_kind": dict(sampler.peak_anon_by_kind),
            "tree_written_bytes": sampler.written,
            "device_written_bytes": (dev_after - dev_before) if dev_before is not None else None,
            "stdout": out, "stderr": err}


def check_rc(run: dict, what: str):
    if run["rc"] != 0:
        raise RuntimeError(f"{what} failed (exit {run['rc']}): {' '.join(map(str, run['argv']))}\n"
                           f"{run['stderr'][-3000:]}\nstdout: {run['stdout'][-1000:]}")


def alternate(rounds: int, steps: dict, before=None) -> dict:
    """Run the named commands in turn, ``rounds`` times (A B A B ...): {name: [run, ...]}.
    ``before(name, round)`` prepares each run (e.g. removes the last run's output)."""
    runs = {name: [] for name in steps}
    for r in range(rounds):
        for name, argv in steps.items():
            if before:
                before(name, r)
            run = run_process(argv() if callable(argv) else argv)
            check_rc(run, name)
            runs[name].append(run)
    return runs


def stats(runs: list, key: str = "wall_s") -> dict:
    vals = [r[key] for r in runs if r.get(key) is not None]
    if not vals:
        return {"median": None, "best": None, "all": []}
    return {"median": statistics.median(vals), "best": min(vals), "all": vals}


# ---------------------------------------------------------------------------- results
class Results:
    """Rows of one bench run: every figure with its baseline (same run) and their ratio."""

    def __init__(self):
        self.rows: list = []
        self.started = _dt.datetime.now(_dt.timezone.utc)

    def record(self, section: str, metric: str, value, baseline=None, unit: str = "", note: str = "",
               mode: str = "warm", **extra):
        ratio = (value / baseline) if (isinstance(value, (int, float)) and isinstance(baseline, (int, float))
                                       and baseline) else None
        self.rows.append({"section": section, "mode": mode, "metric": metric, "value": value,
                          "baseline": baseline, "ratio": ratio, "unit": unit, "note": note, **extra})
        r = f"{ratio:8.2f}x" if ratio is not None else " " * 9
        v = f"{value:14.3f}" if isinstance(value, (int, float)) else f"{str(value):>14s}"
        b = f"{baseline:14.3f}" if isinstance(baseline, (int, float)) else " " * 14
        print(f"{section:11s} {mode:4s} {metric:52s} {v} {b} {r} {unit:8s} {note}", flush=True)

    def save(self, directory: str, n: dict, argv: list) -> str:
        """bench/results/<UTC time>-<commit>.json (kept: the history) and latest.json."""
        os.makedirs(directory, exist_ok=True)
        commit = git_commit()
        stamp = self.started.strftime("%Y-%m-%dT%H%M%S")
        doc = {"time": self.started.isoformat(), "commit": commit, "dirty": git_dirty(), "argv": argv,
               "machine": machine_facts(), "n": n, "rows": self.rows}
        path = os.path.join(directory, f"{stamp}-{commit[:10]}.json")
        with open(path, "w") as fh:
            json.dump(doc, fh, indent=1)
        shutil.copyfile(path, os.path.join(directory, "latest.json"))
        return path


def java_classes(src: str, name: str, cp: str) -> str:
    """``src`` (one bench Java file) compiled against ``cp`` into ``.cache/classes/<name>``,
    behind a stamp (the source's and the classpath's sha256); the classes directory."""
    import hashlib
    out = os.path.join(ROOT, ".cache", "classes", name)
    with open(src, "rb") as fh:
        want = hashlib.sha256(fh.read() + cp.encode()).hexdigest()
    stamp = os.path.join(out, ".stamp")
    if not (os.path.isfile(stamp) and open(stamp).read() == want):
        tmp = out + f".tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        r = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "--release", "11", "-cp", cp, "-d", tmp, src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"javac failed for {src}:\n{r.stdout}{r.stderr}")
        with open(os.path.join(tmp, ".stamp"), "w") as fh:
            fh.write(want)
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)
    return out


def git_commit() -> str:
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def git_dirty() -> bool:
    r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                       capture_output=True, text=True)
    return bool(r.stdout.strip())


def machine_facts() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in (_read("/proc/cpuinfo") or "").splitlines()
                if line.startswith("model name")), platform.processor())
    mem = next((int(line.split()[1]) * 1024 for line in (_read("/proc/meminfo") or "").splitlines()
                if line.startswith("MemTotal")), None)
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_bytes": mem, "kernel": platform.release(),
            "python": platform.python_version(), "java": java[0] if java else None,
            "load_avg_at_start": os.getloadavg()}
