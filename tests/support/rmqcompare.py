"""Byte comparison of two RocketMQ stores (the data files only), sparse-aware.

Compared: ``checkpoint`` and every file under ``commitlog/``, ``consumequeue/`` and ``index/``.
Files are matched by path, except index files, which are matched in name order (RocketMQ names
them by the wall clock; only their order and contents are format). Runtime leftovers (lock,
abort, config/, compaction/) and rocketlake's ``_rocketlake/`` are not compared.

Store files are mostly holes (pre-sized memory-mapped files): the comparison reads only the
ranges where either file has data (SEEK_DATA / SEEK_HOLE), so a 1 GiB segment costs what its
data costs.
"""
from __future__ import annotations

import os

DATA_DIRS = ("commitlog", "consumequeue", "index")
DATA_FILES = ("checkpoint",)
BLOCK = 1 << 20


def data_files(store: str) -> list[str]:
    out = [n for n in DATA_FILES if os.path.isfile(os.path.join(store, n))]
    for d in DATA_DIRS:
        for dirpath, _, files in os.walk(os.path.join(store, d)):
            for fn in files:
                out.append(os.path.relpath(os.path.join(dirpath, fn), store).replace(os.sep, "/"))
    return sorted(out)


def _data_ranges(fd: int, size: int):
    """(start, end) ranges that may hold data (the whole file where SEEK_DATA is unsupported)."""
    pos = 0
    out = []
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:                 # ENXIO: only a hole is left
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            out.append((start, end))
            pos = end
    except (AttributeError, OSError):
        return [(0, size)]
    return out


def first_difference(a: str, b: str) -> int | None:
    """First differing byte offset of two files (None: identical; a shorter file ends with zeros
    only if its size matches, so a size mismatch reports the shorter size at the latest)."""
    sa, sb = os.path.getsize(a), os.path.getsize(b)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        ranges = sorted(_data_ranges(fa.fileno(), sa) + _data_ranges(fb.fileno(), sb))
        pos = 0
        for start, end in ranges:
            start = max(start, pos)
            while start < end:
                n = min(BLOCK, end - start)
                fa.seek(start)
                fb.seek(start)
                x, y = fa.read(n), fb.read(n)
                if len(x) < n:
                    x += bytes(n - len(x)) if start + n <= sa else b""
                if len(y) < n:
                    y += bytes(n - len(y)) if start + n <= sb else b""
                if x != y:
                    for i in range(min(len(x), len(y))):
                        if x[i] != y[i]:
                            return start + i
                    return start + min(len(x), len(y))
                start += n
            pos = max(pos, end)
    return None if sa == sb else min(sa, sb)


def compare(want: str, got: str) -> list[str]:
    """Differences of store `got` from store `want` ([] = byte-identical), first difference first
    in a stable order: checkpoint, commitlog, consumequeue, index."""
    fw, fg = data_files(want), data_files(got)
    iw = [p for p in fw if p.startswith("index/")]
    ig = [p for p in fg if p.startswith("index/")]
    pw = [p for p in fw if not p.startswith("index/")]
    pg = set(p for p in fg if not p.startswith("index/"))
    pairs = [(p, p if p in pg else None) for p in pw]
    pairs += [(p, ig[i] if i < len(ig) else None) for i, p in enumerate(iw)]
    problems = []
    order = {"checkpoint": 0, "commitlog": 1, "consumequeue": 2, "index": 3}
    pairs.sort(key=lambda t: (order[t[0].split("/", 1)[0]], t[0]))
    for w, g in pairs:
        if g is None:
            problems.append(f"missing: {w}")
            continue
        off = first_difference(os.path.join(want, w), os.path.join(got, g))
        if off is not None:
            sw, sg = os.path.getsize(os.path.join(want, w)), os.path.getsize(os.path.join(got, g))
            label = g if g == w else f"{g} (RocketMQ's {w})"
            size = "" if sw == sg else f" (size {sg}, RocketMQ's {sw})"
            problems.append(f"differs: {label}: first difference at byte {off}{size}")
    problems += [f"extra: {p}" for p in sorted(pg - set(pw))] + [f"extra: {p}" for p in ig[len(iw):]]
    return problems
