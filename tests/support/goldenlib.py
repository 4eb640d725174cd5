#!/usr/bin/env python3
"""The test suite's golden data: where it lives, rebuilding a golden store, comparing a store with it.

Golden sets (stores written by RocketMQ's own store code, plus the messages, queries and answers
that produced / describe them) ship with the repository as ``tests/golden/<set>.tar.xz``. Each
archive holds ``<set>/`` in the plain layout the tests read (``messages.jsonl[.gz]``,
``config.json``, ``files.json``, ``queries.jsonl``, ``answers.jsonl``, ``put_results.jsonl``,
``store/``, ...). :func:`golden_root` unpacks the archives once into a cache keyed by their
content (``tests/golden/.cache/<key>/``) and returns that directory. With ``ROCKETLAKE_SHARED``
set (and non-empty), ``$ROCKETLAKE_SHARED/golden`` is used as it is instead.

A set's store is described by a listing (``files.json``; expire-small has ``files_before.json``
and ``files_after.json``): ``store_root`` (directory of the stored files, relative to the set;
null = the set directory itself) and, per file, ``path``, full ``size``, ``sha256`` of the full
file and ``stored_as``: the stored bytes, which may stop early (the rest of the file is zeros)
and may be gzipped (``.gz``).

Command line (exit 0 = ok, 1 = differences / failed check, 2 = usage)::

    python tests/support/goldenlib.py cmp SET STORE [--listing files.json] [--verbose]
    python tests/support/goldenlib.py restore SET OUT [--listing files.json] [--no-verify]
    python tests/support/goldenlib.py where [SET]          # print the (unpacked) golden directory
    python tests/support/goldenlib.py pack SRC_GOLDEN_DIR OUT_DIR [SET ...]   # (re)build the archives

SET is a set directory or the name of a set (``small-roll``) looked up under :func:`golden_root`.
"""
from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import json
import lzma
import os
import shutil
import sys
import tarfile
import tempfile
from functools import lru_cache

if not __package__:                 # run as a script: the tests directory, where ``support`` is, on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import filedigest

HERE = os.path.dirname(os.path.abspath(__file__))
ARCHIVE_DIR = os.path.join(os.path.dirname(HERE), "golden")
CACHE_DIR = os.path.join(ARCHIVE_DIR, ".cache")
SETS = ("small-roll", "default-size", "expire-small")
# The store sizes small-roll was written with (its config.json's messageStoreConfig, less the
# flush type): what a test gives an ingest that must give small-roll's bytes.
SMALL_ROLL_CONFIG = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 600, "maxHashSlotNum": 64,
                     "maxIndexNum": 256}
BLOCK = 4 << 20

# What a store comparison looks at. Everything else under the store root is not part of the
# format: the broker's runtime leftovers (lock, abort, abort.bak, compaction/) and any other
# top-level entry, e.g. rocketlake's own _rocketlake/ metadata.
DATA_DIRS = ("commitlog", "consumequeue", "index")
DATA_FILES = ("checkpoint",)


class GoldenError(Exception):
    pass


# ============================================================================ where the data is
def golden_root() -> str:
    """Directory holding one uncompressed directory per golden set.

    ``$ROCKETLAKE_SHARED/golden`` when ROCKETLAKE_SHARED is set and non-empty; otherwise the
    repository's own archives, unpacked (once) into the cache."""
    shared = os.environ.get("ROCKETLAKE_SHARED", "")
    if shared:
        return os.path.join(shared, "golden")
    return unpack_archives()


def archives(archive_dir: str = ARCHIVE_DIR) -> list[str]:
    return sorted(os.path.join(archive_dir, f) for f in os.listdir(archive_dir) if f.endswith(".tar.xz"))


def unpack_archives(archive_dir: str = ARCHIVE_DIR, cache_dir: str = CACHE_DIR) -> str:
    """Unpack every ``<set>.tar.xz`` of archive_dir into ``cache_dir/<key>/`` unless already there.

    The key is a hash of the archives' bytes, so changed data gets a fresh directory. Concurrent
    sessions (and pytest-xdist workers) are safe: one unpacks, under an flock on cache_dir, into
    its own temporary directory and renames it into place; the others wait and reuse it. The
    unpacked files are read-only (they are shared by every session)."""
    tars = archives(archive_dir)
    if not tars:
        raise GoldenError(f"no golden archives (*.tar.xz) in {archive_dir}")
    key = hashlib.sha256()
    for t in tars:
        key.update(os.path.basename(t).encode() + b"\0")
        with open(t, "rb") as fh:
            for block in iter(lambda: fh.read(BLOCK), b""):
                key.update(block)
    name = key.hexdigest()[:16]
    try:
        os.makedirs(cache_dir, exist_ok=True)
    except OSError:                       # read-only checkout: fall back to the temp directory
        cache_dir = os.path.join(tempfile.gettempdir(), f"rocketlake-golden-{os.getuid()}")
        os.makedirs(cache_dir, exist_ok=True)
    final = os.path.join(cache_dir, name)
    if os.path.isdir(final):
        return final
    # One unpacker at a time (pytest-xdist workers, parallel sessions): the others wait for it
    # and then find the directory in place instead of unpacking the same archives again.
    with _cache_lock(cache_dir):
        if os.path.isdir(final):
            return final
        return _unpack_into(tars, cache_dir, name, final)


@contextlib.contextmanager
def _cache_lock(cache_dir: str):
    """An exclusive flock on the cache directory itself (no lock file to clean up). Where it
    cannot be taken, no lock: the rename in _unpack_into keeps concurrent unpackers safe, they
    only do the work twice."""
    try:
        fd = os.open(cache_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)                      # releases the lock


def _unpack_into(tars: list[str], cache_dir: str, name: str, final: str) -> str:
    tmp = tempfile.mkdtemp(prefix=f".unpack-{name}-", dir=cache_dir)
    try:
        os.chmod(tmp, 0o755)
        for t in tars:
            with tarfile.open(t, "r:xz") as tf:
                tf.extractall(tmp, filter="data")
        for d, _, files in os.walk(tmp):
            for f in files:
                os.chmod(os.path.join(d, f), 0o444)
        try:
            os.rename(tmp, final)
        except OSError:
            if not os.path.isdir(final):
                raise
            shutil.rmtree(tmp, ignore_errors=True)      # another session was faster
        else:
            for old in os.listdir(cache_dir):           # earlier versions of the data
                if old != name and not old.startswith(".unpack-"):
                    shutil.rmtree(os.path.join(cache_dir, old), ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def resolve_set(set_arg: str) -> str:
    """A set directory as given, or a set name looked up under golden_root()."""
    if os.path.isdir(set_arg):
        return set_arg
    path = os.path.join(golden_root(), set_arg)
    if os.path.isdir(path):
        return path
    raise GoldenError(f"golden set {set_arg!r} not found (neither a directory nor a set under {golden_root()})")


def pack(src_golden: str, out_dir: str, sets=SETS) -> dict:
    """Build reproducible ``<set>.tar.xz`` archives from an uncompressed golden directory.

    Sorted members, fixed mtime/owner, normalized modes, xz preset 9e: the same input gives the
    same bytes. Returns {archive path: size}."""
    os.makedirs(out_dir, exist_ok=True)
    sizes = {}

    def norm(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = 0
        ti.mode = 0o755 if ti.isdir() else 0o644
        return ti

    for s in sets:
        base = os.path.join(src_golden, s)
        if not os.path.isdir(base):
            raise GoldenError(f"no set {s} under {src_golden}")
        members = [s]
        for d, dirs, files in os.walk(base):
            dirs.sort()
            rel = os.path.relpath(d, src_golden)
            members += [os.path.join(rel, x) for x in dirs]
            members += [os.path.join(rel, x) for x in sorted(files)]
        out = os.path.join(out_dir, f"{s}.tar.xz")
        with lzma.open(out + ".tmp", "wb", preset=9 | lzma.PRESET_EXTREME) as xz:
            with tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for m in members:
                    tf.add(os.path.join(src_golden, m), arcname=m, recursive=False, filter=norm)
        os.replace(out + ".tmp", out)
        sizes[out] = os.path.getsize(out)
    return sizes


# ============================================================================ listings
def load_listing(set_dir: str, listing: str = "files.json") -> tuple[str, list[dict]]:
    """(directory the stored_as paths are relative to, file entries) of one listing of a set."""
    path = os.path.join(set_dir, listing)
    if not os.path.isfile(path):
        raise GoldenError(f"{set_dir} has no {listing}")
    with open(path, encoding="utf-8") as fh:
        meta = json.load(fh)
    root = meta.get("store_root", "store")
    return (os.path.join(set_dir, root) if root else set_dir), meta["files"]


def _open_stored(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def golden_blocks(stored_path: str, size: int):
    """The full golden file as blocks: the stored bytes, then zeros up to size."""
    pos = 0
    with _open_stored(stored_path) as fh:
        while pos < size:
            b = fh.read(min(BLOCK, size - pos))
            if not b:
                break
            pos += len(b)
            yield b
    zeros = bytes(min(BLOCK, max(size - pos, 0)))
    while pos < size:
        n = min(BLOCK, size - pos)
        yield zeros if n == len(zeros) else zeros[:n]
        pos += n


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(BLOCK), b""):
            h.update(block)
    return h.hexdigest()


# ============================================================================ restore
def restore(set_dir: str, out_dir: str, listing: str = "files.json", verify: bool = True) -> str:
    """Rebuild a golden set's store at full size in out_dir: each listed file gets its stored
    bytes and a sparse zero tail (truncate) up to its size; with verify, every rebuilt file's
    sha256 is checked against the listing (GoldenError on a mismatch). Returns out_dir."""
    root, files = load_listing(set_dir, listing)
    for f in files:
        src = os.path.join(root, f["stored_as"])
        dst = os.path.join(out_dir, f["path"])
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        with _open_stored(src) as fh:
            data = fh.read()
        if len(data) > f["size"]:
            raise GoldenError(f"{f['path']}: stored {len(data)} bytes, more than its size {f['size']}")
        with open(dst, "wb") as out:
            out.write(data)
            out.truncate(f["size"])
        if verify and sha256_file(dst) != f["sha256"]:
            raise GoldenError(f"sha256 mismatch after restore: {f['path']} (from {src})")
    return out_dir


# ============================================================================ compare
def _store_files(store_dir: str) -> list[str]:
    out = [n for n in DATA_FILES if os.path.isfile(os.path.join(store_dir, n))]
    for d in DATA_DIRS:
        for dirpath, _, files in os.walk(os.path.join(store_dir, d)):
            for fn in files:
                out.append(os.path.relpath(os.path.join(dirpath, fn), store_dir).replace(os.sep, "/"))
    return out


def _compared(path: str) -> bool:
    return path in DATA_FILES or path.split("/", 1)[0] in DATA_DIRS


def _first_diff(a: bytes, b: bytes) -> int:
    """Offset of the first differing byte of two blocks (len(shorter) if one is a prefix)."""
    n = min(len(a), len(b))
    step = 4096
    for i in range(0, n, step):
        if a[i:i + step] != b[i:i + step]:
            for j in range(i, min(i + step, n)):
                if a[j] != b[j]:
                    return j
    return n


def first_difference(stored_path: str, golden_size: int, path: str) -> int | None:
    """First byte offset where the file at path differs from the golden file (None: identical)."""
    pos = 0
    with open(path, "rb") as fh:
        for want in golden_blocks(stored_path, golden_size):
            got = fh.read(len(want))
            if got != want:
                return pos + _first_diff(got, want)
            pos += len(want)
        if fh.read(1):
            return pos                    # longer than the golden file
    return None


def _golden_digest(stored_path: str, size: int) -> str | None:
    """``filedigest.digest`` of a golden file (its stored bytes, then zeros up to ``size``); None
    when the stored bytes are longer than ``size`` (no file has that digest)."""
    st = os.stat(stored_path)
    return _golden_digest_of(stored_path, size, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=1024)
def _golden_digest_of(stored_path: str, size: int, _stored_size: int, _stored_mtime: int) -> str | None:
    with _open_stored(stored_path) as fh:
        head = fh.read(size + 1)
    return filedigest.digest_of(head, size) if len(head) <= size else None


def compare(set_dir: str, store_dir: str, listing: str = "files.json") -> list[str]:
    """Differences between a store and a golden set's store; [] means byte-identical.

    Compared: checkpoint and every file under commitlog/, consumequeue/ and index/. Files are
    matched by path, except index files, which are matched pairwise in name order (RocketMQ names
    them by the wall clock, so only their order and contents belong to the format). Each pair
    must have the same size and sha256 (the golden side's from the listing); a mismatch names the
    first differing byte. Golden files the store lacks are "missing", store files without a golden
    counterpart "extra". Not compared: lock, abort*, compaction/ and any other top-level entry
    (rocketlake's _rocketlake/ among them).

    The bytes are compared by ``filedigest`` digests: the store file's reads only its data (a
    default-size store is ~2 GB, nearly all holes), the golden file's is made from its stored
    bytes, once per process. That the stored bytes are the file the listing's sha256 names is
    checked where a set is restored and by test_goldenlib."""
    root, files = load_listing(set_dir, listing)
    gold = [f for f in files if _compared(f["path"])]
    have = _store_files(store_dir)

    gold_plain = {f["path"]: f for f in gold if not f["path"].startswith("index/")}
    gold_index = sorted((f for f in gold if f["path"].startswith("index/")), key=lambda f: f["path"])
    have_index = sorted(p for p in have if p.startswith("index/"))
    have_plain = {p for p in have if not p.startswith("index/")}

    pairs = [(f, p if p in have_plain else None) for p, f in sorted(gold_plain.items())]
    pairs += [(f, have_index[i] if i < len(have_index) else None) for i, f in enumerate(gold_index)]
    extra = sorted(have_plain - set(gold_plain)) + have_index[len(gold_index):]

    problems = []
    for g, path in pairs:
        if path is None:
            problems.append(f"missing: {g['path']}")
            continue
        full = os.path.join(store_dir, path)
        label = path if path == g["path"] else f"{path} (golden {g['path']})"
        size = os.path.getsize(full)
        stored = os.path.join(root, g["stored_as"])
        if size != g["size"] or filedigest.digest(full) != _golden_digest(stored, g["size"]):
            off = first_difference(stored, g["size"], full)
            what = f"size {size}, golden {g['size']}" if size != g["size"] else "content differs"
            where = f"first difference at byte {off}" if off is not None else \
                "the golden set's stored bytes run past its listed size"
            problems.append(f"differs: {label}: {what}; {where}")
    problems += [f"extra: {p}" for p in extra]
    return problems


# ============================================================================ command line
def _opt(args: list, name: str, default=None):
    if name in args:
        i = args.index(name)
        if i + 1 >= len(args):
            raise SystemExit(2)
        val = args[i + 1]
        del args[i:i + 2]
        return val
    return default


def main(argv: list[str]) -> int:
    args = list(argv[1:])
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    cmd = args.pop(0)
    try:
        if cmd == "cmp":
            listing = _opt(args, "--listing", "files.json")
            verbose = "--verbose" in args
            args = [a for a in args if a != "--verbose"]
            if len(args) != 2:
                print(__doc__)
                return 2
            set_dir = resolve_set(args[0])
            problems = compare(set_dir, args[1], listing)
            shown = problems if verbose else problems[:20]
            for line in shown:
                print(line)
            if len(shown) < len(problems):
                print(f"... and {len(problems) - len(shown)} more")
            print("identical" if not problems else f"{len(problems)} differences")
            return 0 if not problems else 1
        if cmd == "restore":
            listing = _opt(args, "--listing", "files.json")
            verify = "--no-verify" not in args
            args = [a for a in args if a != "--no-verify"]
            if len(args) != 2:
                print(__doc__)
                return 2
            restore(resolve_set(args[0]), args[1], listing, verify=verify)
            print(f"restored {args[0]} ({listing}) into {args[1]}")
            return 0
        if cmd == "where":
            if len(args) > 1:
                print(__doc__)
                return 2
            print(resolve_set(args[0]) if args else golden_root())
            return 0
        if cmd == "pack":
            if len(args) < 2:
                print(__doc__)
                return 2
            for path, size in pack(args[0], args[1], args[2:] or SETS).items():
                print(f"{path}: {size} bytes")
            return 0
    except GoldenError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
