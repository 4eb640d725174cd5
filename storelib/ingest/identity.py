"""What identifies a file input: its content, never its name (README "What counts as the same input").

A batch's default id is ``auto-<fingerprint>`` (storelib.ingest.driver), so the same bytes by
another path spelling, through a symlink or copied under another name must give the same
fingerprint, and other bytes another one:

* files (JSON lines, Parquet; a directory's files in input order; ``s3://`` and other object
  stores alike): the format, then per file its size and ``file_digests``' digest of its bytes, a
  BLAKE3 over the BLAKE3 of each IDENTITY_BLOCK-byte block (blocks hashed on IDENTITY_THREADS
  threads: the hasher releases the GIL). Names only set the order.
* a Delta table: its table id (``metaData.id``, which a copy of the table keeps) and the data files
  read, relative to the table (``delta_identity``): no byte of it is hashed.

Hashing reads the input once more on the driver (docs/PERFORMANCE.md, "Input identity"). The
``rocketlake`` command starts it (``prefetch``) while its JVM starts, and ``input_fingerprint``
takes the digests from there when the files are still the ones hashed (same size and mtime).

Batches committed by earlier versions carry the identity those gave their input
(``earlier_fingerprints``): ``sha256`` (the same structure with SHA-256, whose batches record no
``identity`` in their detail) and ``path`` (names, sizes and times, before content identity, whose
batches record no topic config). The driver computes them only for a store that holds such
batches, so that a rerun after an upgrade is found, not written a second time.
"""
from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import urlparse

import blake3

from ..errors import IngestError, InputError
from ..io import storage

__all__ = ["IDENTITY", "IDENTITY_BLOCK", "IDENTITY_THREADS", "input_fingerprint", "file_digests", "delta_identity",
           "prefetch", "earlier_fingerprints", "path_fingerprint"]

# The identity this version gives file inputs; its batches record it (detail "identity"), so a
# batch without it was identified by an earlier version (``earlier_fingerprints``).
IDENTITY = "blake3"
# BLAKE3 hashes ~4.6 GB a CPU-second here, SHA-256 (SHA-NI) ~1.7: the hash runs beside the JVM's start
# on the same cores. Two threads take both cores of a small driver.
IDENTITY_BLOCK = 64 << 20
IDENTITY_THREADS = 2

_HASHES: dict[str, tuple[Callable[..., Any], str]] = {
    "blake3": (blake3.blake3, "rocketlake-input-v3"),
    "sha256": (hashlib.sha256, "rocketlake-input-v2"),
}

_PREFETCHED: dict = {}      # (input path, format) -> Future of {(file, size, mtime_ns): digest}
_LOCK = threading.Lock()


def input_fingerprint(path: str, fmt: str, splits: list, kind: str = IDENTITY) -> str:
    """The input's identity (64 hex digits) from its splits (storelib.ingest.inputs.plan_splits):
    the files they read, in input order. ``kind``: IDENTITY, or "sha256" for the identity of the
    versions before it."""
    new, tag = _HASHES[kind]
    h = new(f"{tag}\0{fmt}\0".encode())
    files = list(dict.fromkeys(s.path for s in splits))     # input order
    if fmt == "delta":
        h.update(delta_identity(path, files).encode())
        return h.hexdigest()
    digests = _digests(path, fmt, files) if kind == IDENTITY else file_digests(files, kind)
    for size, digest in digests:
        h.update(f"{size}\0{digest}\0".encode())
    return h.hexdigest()


def file_digests(files: list, kind: str = IDENTITY) -> list:
    """(size, digest) of each file: the hash (``kind``) of its size and of the hash of each
    IDENTITY_BLOCK-byte block of its bytes, the blocks of every file hashed on a few threads."""
    new = _HASHES[kind][0]
    sizes, blocks = [], []
    for k, f in enumerate(files):
        fs, p = storage.filesystem(f)
        size = fs.get_file_info(p).size or 0
        sizes.append(size)
        blocks += [(k, off, min(IDENTITY_BLOCK, size - off)) for off in range(0, size, IDENTITY_BLOCK)]

    def block(item):
        k, off, n = item
        fs, p = storage.filesystem(files[k])
        h = new()
        with fs.open_input_file(p) as fh:
            fh.seek(off)
            while n > 0:
                data = fh.read_buffer(min(n, 8 << 20))
                if not data:
                    raise IngestError(f"{files[k]}: changed while it was read (shorter than {sizes[k]} bytes)")
                h.update(data)
                n -= len(data)
        return k, h.digest()

    per_file = [new(f"{size}\0".encode()) for size in sizes]
    with ThreadPoolExecutor(max_workers=max(1, min(IDENTITY_THREADS, len(blocks)))) as pool:
        for k, digest in pool.map(block, blocks):      # in order: a file's blocks one after another
            per_file[k].update(digest)
    return [(size, h.hexdigest()) for size, h in zip(sizes, per_file)]


def delta_identity(path: str, files: list) -> str:
    """A Delta table's identity: its id (``metaData.id``, which a copy of the table keeps) and the
    data files read (``files``, as the splits name them), relative to the table: names Delta gave
    them, never the user's spelling of the table's path."""
    from deltalake import DeltaTable
    try:
        dt = DeltaTable(path, storage_options=storage.delta_storage_options(path))
    except Exception as e:  # noqa: BLE001 - deltalake raises several types
        raise InputError([f"{path}: not a readable Delta table ({e})"]) from None
    root = urlparse(dt.table_uri).path.rstrip("/") + "/"
    rel = [p[len(root):] if p.startswith(root) else p for p in (urlparse(f).path for f in files)]
    return json.dumps({"table": dt.metadata().id, "files": rel})


def earlier_fingerprints(path: str, fmt: str, splits: list, kinds: list) -> list:
    """The identities earlier versions gave the same input, of the ``kinds`` asked ("sha256",
    "path"): only to recognise a batch they committed, so a rerun after an upgrade is not a second
    copy (driver ``_already_committed``)."""
    return [path_fingerprint(path, fmt, splits) if k == "path" else input_fingerprint(path, fmt, splits, k)
            for k in kinds]


def path_fingerprint(path: str, fmt: str, splits: list) -> str:
    """The identity versions before content identity gave the same input: the files' paths as
    spelled, their sizes, the sha256 of files up to 64 MB, else their mtime."""
    h = hashlib.sha256(fmt.encode())
    for f in sorted({s.path for s in splits}):
        fs, p = storage.filesystem(f)
        info = fs.get_file_info(p)
        h.update(f"{f}\0{info.size}\0".encode())
        if info.size is not None and info.size <= (64 << 20):
            with fs.open_input_file(p) as fh:
                h.update(hashlib.sha256(fh.read()).digest())
        else:
            h.update(str(info.mtime_ns).encode())
    return h.hexdigest()


def prefetch(path: str, fmt: str) -> None:
    """Start hashing the input's files on a daemon thread (the ``rocketlake`` command, while Spark
    starts): ``input_fingerprint`` of the same input in this process then waits for it instead of
    hashing again. Best effort: a failure here leaves the work to ``input_fingerprint``."""
    if fmt not in ("jsonl", "parquet"):
        return
    fut: Future = Future()
    with _LOCK:
        _PREFETCHED[(path, fmt)] = fut

    def run():
        try:
            from .inputs import list_input_files
            files = list_input_files(path, fmt)
            keys = [_key(f) for f in files]
            fut.set_result({k: d for k, (_, d) in zip(keys, file_digests(files))})
        except BaseException as e:  # noqa: BLE001 - input_fingerprint hashes itself (and reports)
            fut.set_exception(e)
    threading.Thread(target=run, name="rocketlake-identity", daemon=True).start()


def _key(f: str) -> tuple:
    fs, p = storage.filesystem(f)
    info = fs.get_file_info(p)
    return f, info.size, info.mtime_ns


def _digests(path: str, fmt: str, files: list) -> list:
    """``file_digests`` of ``files``, taken from a prefetch of the same input for files unchanged since."""
    with _LOCK:
        fut = _PREFETCHED.pop((path, fmt), None)
    done = {}
    if fut is not None:
        try:
            done = fut.result()
        except BaseException:  # noqa: BLE001 - hashed below
            done = {}
    keys = [_key(f) for f in files]
    todo = [f for f, k in zip(files, keys) if k not in done]
    fresh = dict(zip(todo, file_digests(todo))) if todo else {}
    return [(k[1], done[k]) if k in done else fresh[f] for f, k in zip(files, keys)]
