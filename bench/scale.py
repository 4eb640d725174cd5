"""Growth (``make bench-scale``): the same measurements at growing sizes (2M, 10M, 50M messages by
default, ``--scale-sizes``), to show that the cost grows only with the work.

Per size, cold (a fresh process each, ``sync`` before, alternated with the baseline): the ingest vs
a Spark Parquet copy of the same input (seconds per million messages, the Python driver's peak RSS:
its own high-water mark, VmHWM, and its sampled anonymous memory, ``harness.TreeSampler``; the
whole tree's peak RSS); warm, the same
ingest and copy alternated in one running Spark application (``warm_ingest``: without a fresh
``spark-submit``'s fixed start-up, which does not grow with the messages); the three
reads of ``readbench`` vs Spark's Parquet reader (full scan, one topic, a store-time tenth), shell
key lookups vs a pyarrow scan; in process, the p50 of 200 key
lookups on the open store, each key first as the ingest left the store, then again, with what a
lookup reads (``lookup_cost``). Then the spread across sizes (max / min: flat = near 1) and a figure,
time against messages for the ingest, the copy and the reads (``--scale-plot``; by default
docs/bench-scale.png, shown in docs/PERFORMANCE.md between its ``bench:scale`` markers, which
this rewrites). Each size's input and store are deleted before the next (the disk holds the
largest: about 21 GB of store plus its Parquet input at 50M).
"""
from __future__ import annotations

import datetime as _dt
import os
import shutil


import cold
import readbench
import warm_ingest
from harness import ROOT, git_commit, stats

DOCS = os.path.join(ROOT, "docs")
DEFAULT_PLOT = os.path.join(DOCS, "bench-scale.png")
BEGIN, END = "<!-- bench:scale:begin -->", "<!-- bench:scale:end -->"
MILLION = 1e6
# Below this largest size a figure is a check of the harness, not a result; it says so.
RESULT_SIZE = 2_000_000


def lookup_cost(store: str, src: str, n_keys: int = 200) -> dict:
    """In-process ``find_by_key`` on the open store (counts checked against the input), each key
    first as the ingest left the store (cold: its pages are not in the page cache), then again
    (warm); per lookup what it read (``lookup_cost.measure``): p50s and means."""
    import lookup_cost as lc
    keys = cold.sample_keys(src, n_keys)
    return lc.measure(store, keys, cold.expected_key_counts(src, keys))["summary"]


def measure(res, workdir: str, n: int, rounds: int, shell_keys: int, section: str) -> dict:
    """One size: every figure recorded, and the point of the figure. The warm ingest runs first:
    the cold one's store stays for the reads, and the disk holds one 50M store beside its input."""
    warm = warm_ingest.run(workdir, cold.ensure_input(workdir, n), rounds)
    ing = cold.bench_ingest_cold(res, workdir, n, rounds, section=section)
    ours, copy = ing["runs"]["ours"], ing["runs"]["parquet copy"]
    o, c = stats(ours), stats(copy)
    res.record(section, f"ingest s per million msgs at {n}", o["best"] / (n / MILLION), c["best"] / (n / MILLION),
               "s/M", "best round; baseline: the Parquet copy's", mode="cold")
    point = {"n": n, "ingest_s": o["best"], "copy_s": c["best"], "ingest_s_per_m": o["best"] / (n / MILLION),
             "driver_rss_gb": max(r["peak_hwm_by_kind"].get("python_driver", 0) for r in ours) / 1e9,
             "driver_anon_gb": max(r.get("peak_anon_by_kind", {}).get("python_driver", 0) for r in ours) / 1e9,
             "tree_rss_gb": max(r["peak_rss_bytes"] for r in ours) / 1e9,
             "load_avg": os.getloadavg()[0]}
    if warm["messages"] != n:
        raise AssertionError(f"the warm ingest reported {warm['messages']} messages, expected {n}")
    w, wc = min(warm["ours"]), min(warm["copy"])
    res.record(section, f"ingest s per million msgs at {n}, in a running Spark application", w / (n / MILLION),
               wc / (n / MILLION), "s/M", f"best of {rounds}, alternated with the copy in the same application "
               f"(ours {', '.join(f'{x:.2f}' for x in warm['ours'])} s; copy "
               f"{', '.join(f'{x:.2f}' for x in warm['copy'])} s); baseline: the Parquet copy's", mode="warm",
               runs=warm["ours"], baseline_runs=warm["copy"])
    point.update(warm_ingest_s=w, warm_copy_s=wc, warm_ingest_s_per_m=w / (n / MILLION))
    point["reads"] = readbench.bench_read_cold(res, ing["store"], ing["src"], rounds, section=section)
    point["shell_lookup_ms"] = cold.bench_lookup_cold(res, ing["store"], ing["src"], shell_keys,
                                                      section=section)["median_ms"]
    lk = point["lookup"] = lookup_cost(ing["store"], ing["src"])
    point["lookup_p50_ms"], point["lookup_warm_p50_ms"] = lk["cold_ms_p50"], lk["warm_ms_p50"]
    res.record(section, f"key lookup p50 in process at {n} (ms)", point["lookup_p50_ms"], None, "ms",
               "200 keys on the open store, counts checked, each key's first lookup (the store as the ingest "
               f"left it: device reads {lk['cold_device_kb_mean']:.0f} KB a lookup); per lookup: "
               f"{lk['index_files_mean']:.1f} index files, {lk['slots_mean']:.1f} slots, "
               f"{lk['entries_mean']:.1f} chain entries, {lk['commitlog_reads_mean']:.1f} commitlog reads "
               f"({lk['commitlog_bytes_mean']:.0f} B), {lk['opens_mean']:.1f} opens", mode="cold", **lk)
    res.record(section, f"key lookup p50 in process at {n}, the same keys again (ms)", point["lookup_warm_p50_ms"],
               None, "ms", f"pages in the page cache; Python around the OS calls: p50 {lk['python_ms_p50']:.3f} ms",
               mode="warm")
    shutil.rmtree(ing["store"], ignore_errors=True)
    shutil.rmtree(ing["src"], ignore_errors=True)
    return point


def spread(values: list) -> float:
    return max(values) / min(values) if values and min(values) > 0 else float("nan")


def summarize(res, points: list, section: str):
    """Across sizes: flat is a max / min near 1 (the issue's bounds in the notes)."""
    sizes = ",".join(str(p["n"]) for p in points)
    res.record(section, "ingest s per million msgs: max / min across sizes",
               spread([p["ingest_s_per_m"] for p in points]), None, "x", f"sizes {sizes}; goal within +-15%",
               mode="cold")
    res.record(section, "ingest s per million msgs in a running Spark application: max / min across sizes",
               spread([p["warm_ingest_s_per_m"] for p in points]), None, "x",
               f"sizes {sizes}; goal within +-15% (max / min <= 1.35)", mode="warm")
    res.record(section, "driver peak RSS: max / min across sizes", spread([p["driver_rss_gb"] for p in points]),
               None, "x", "the Python driver's VmHWM (mapped libraries included); goal +-10%", mode="cold")
    res.record(section, "driver peak anonymous memory: max / min across sizes",
               spread([p["driver_anon_gb"] for p in points]), None, "x",
               "the Python driver's RssAnon, sampled every 0.05 s: what it allocated, not the libraries' pages "
               "the kernel may take back; goal +-10%", mode="cold")
    res.record(section, "tree peak RSS: largest across sizes (GB)", max(p["tree_rss_gb"] for p in points), 3.0, "GB",
               "baseline: the goal's bound, 3 GB", mode="cold")
    res.record(section, "key lookup p50 in process: max / min across sizes",
               spread([p["lookup_p50_ms"] for p in points]), None, "x",
               "each key's first lookup; flat = near 1 (the chains a lookup walks grow with the index entries "
               "per file up to a full file, and with the number of files: docs/PERFORMANCE.md)", mode="cold")
    res.record(section, "key lookup p50 in process, same keys again: max / min across sizes",
               spread([p["lookup_warm_p50_ms"] for p in points]), None, "x", "flat = near 1", mode="warm")
    big = points[-1]
    for q, (ours, pq) in big["reads"].items():
        res.record(section, f"{q} read at the largest size {big['n']}: ours / Parquet", ours / pq, None, "x",
                   "median wall of fresh spark-submits", mode="cold")


def plot(points: list, path: str) -> str:
    """Time against messages: the ingest and the copy, each read and its Parquet baseline."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ns = [p["n"] / MILLION for p in points]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    ax.plot(ns, [p["ingest_s"] for p in points], "o-", color="C0", label="rocketlake ingest (fresh spark-submit)")
    ax.plot(ns, [p["copy_s"] for p in points], "o--", color="C0", alpha=0.6, label="Spark Parquet copy (fresh spark-submit)")
    ax.plot(ns, [p["warm_ingest_s"] for p in points], "^-", color="C4", label="rocketlake ingest, warm (one running application)")
    ax.plot(ns, [p["warm_copy_s"] for p in points], "^--", color="C4", alpha=0.6, label="Spark Parquet copy, warm")
    for i, q in enumerate(("full", "topic", "time")):
        color = f"C{i + 1}"
        ax.plot(ns, [p["reads"][q][0] for p in points], "s-", color=color, label=f"read: {q} (rocketmq source)")
        ax.plot(ns, [p["reads"][q][1] for p in points], "s--", color=color, alpha=0.6, label=f"read: {q} (Parquet)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ns, [f"{x:g}M" for x in ns])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("messages")
    ax.set_ylabel("wall time (s): best ingest, median read")
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = f"make bench-scale: commit {git_commit()[:10]}, {when}, {os.cpu_count()} cores, " \
            f"load avg {max(p['load_avg'] for p in points):.1f}"
    if max(p["n"] for p in points) < RESULT_SIZE:
        title += "\nHARNESS CHECK AT SMALL SIZES: not results"
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best", framealpha=0.8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def update_docs(points: list, plot_path: str, doc: str = os.path.join(DOCS, "PERFORMANCE.md")):
    """Rewrite the ``bench:scale`` block of the doc: the figure and one row per size."""
    with open(doc, encoding="utf-8") as fh:
        text = fh.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc}: no {BEGIN} ... {END} markers")
    rows = ["| messages | ingest s/M (copy s/M) | warm ingest s/M (copy s/M) | driver RSS GB (anon) | tree RSS GB | full / topic / time read vs "
            "Parquet | key lookup p50 ms: first / again (chain entries) | load avg |", "|---|---|---|---|---|---|---|---|"]
    for p in points:
        reads = " / ".join(f"{p['reads'][q][0] / p['reads'][q][1]:.2f}x" for q in ("full", "topic", "time"))
        per_m = p["n"] / MILLION
        rows.append(f"| {p['n']:,} | {p['ingest_s_per_m']:.2f} ({p['copy_s'] / per_m:.2f}) | "
                    f"{p['warm_ingest_s_per_m']:.2f} ({p['warm_copy_s'] / per_m:.2f}) | "
                    f"{p['driver_rss_gb']:.2f} ({p.get('driver_anon_gb', 0):.2f}) | {p['tree_rss_gb']:.2f} | {reads} | {p['lookup_p50_ms']:.2f} / "
                    f"{p['lookup_warm_p50_ms']:.2f} ({p['lookup']['entries_mean']:.1f}) | "
                    f"{p['load_avg']:.1f} |")
    rel = os.path.relpath(plot_path, os.path.dirname(doc))
    body = "\n".join([f"![time against messages: ingest, Parquet copy, reads]({rel})", "", *rows])
    head, rest = text.split(BEGIN, 1)
    with open(doc, "w", encoding="utf-8") as fh:
        fh.write(f"{head}{BEGIN}\n{body}\n{END}{rest.split(END, 1)[1]}")


def bench_scale(res, workdir: str, sizes: list, rounds: int, shell_keys: int, plot_path: str | None,
                section: str = "scale") -> list:
    points = [measure(res, workdir, n, rounds, shell_keys, section) for n in sorted(sizes)]
    summarize(res, points, section)
    if plot_path:
        plot(points, plot_path)
        if os.path.abspath(plot_path) == DEFAULT_PLOT:
            update_docs(points, plot_path)
    return points
