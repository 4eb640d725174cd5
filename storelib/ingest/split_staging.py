"""Where stage 1 stages each split's encoded records and facts for stage 3 to read.

On a local store they go under the attempt's staging directory in the store (the same disk: a
write there costs what a write anywhere costs, and every executor of a cluster sharing the file
system reads them). On an object store that would upload every record byte, download it again
for the segment writer and upload it a second time in its segment: three transfers for one. So
when every task runs on the driver's host (a ``local[...]`` master), the splits are staged on
the host's local disk instead, under Spark's local directory, and every record byte crosses the
network once, in its segment object. (On a multi-host cluster a task cannot read another host's
disk, so object-store ingests there stage in the store as before.)

``staging_store`` gives the object stage 1 and stage 3 use for the split files: the store
itself, or a ``LocalStaging`` directory with the same methods (``write_file``, ``read``,
``read_array``, ``delete``), whose paths are the same store-relative names.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from ..io.direct_io import read_exact, write_direct
from ..format.names import rel_path_problem
from ..io.storage import read_local_into

__all__ = ["LocalStaging", "local_staging_dir", "staging_store"]


class LocalStaging:
    """A directory on this host holding an attempt's split files under store-relative names."""

    def __init__(self, root: str):
        self.root = root

    def _path(self, rel: str) -> str:
        problem = rel_path_problem(rel)
        if problem:
            raise ValueError(f"staged split path {rel!r} {problem}")
        return os.path.join(self.root, rel)

    def write_file(self, rel: str, chunks, total_size=None, durable: bool = False, cache: bool = True) -> int:
        # Staged splits need no fsync: a crash discards the attempt, and the rerun encodes again.
        path = self._path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not cache:
            got = write_direct(path, chunks, total_size)
            if got is not None:
                return got
        written = 0
        with open(path, "wb") as fh:
            for c in chunks:
                mv = memoryview(c).cast("B")
                fh.write(mv)
                written += len(mv)
        return written

    def read(self, rel: str, offset: int = 0, length: int | None = None) -> bytes:
        with open(self._path(rel), "rb") as fh:
            fh.seek(offset)
            return fh.read() if length is None else fh.read(length)

    def read_array(self, rel: str, offset: int, length: int, cache: bool = True) -> np.ndarray:
        if not cache:
            out = read_exact(self._path(rel), offset, length, rel)
            if out is not None:
                return out
        out = np.empty(length, np.uint8)
        got = read_local_into(self._path(rel), offset, out)
        if got != length:
            raise OSError(f"{rel}: expected {length} bytes at {offset}, read {got}")
        return out

    def delete(self, rel: str) -> None:
        path = self._path(rel)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.unlink(path)


def local_staging_dir(sc, store, attempt: str) -> str | None:
    """The host-local directory for an object-store attempt's split files (driver side), or None
    when the splits are staged in the store (local stores; masters other than ``local[...]``)."""
    if not store.objects or not sc.master.startswith("local"):
        return None
    base = sc.getConf().get("spark.local.dir", tempfile.gettempdir()).split(",")[0]
    path = os.path.join(base, f"rocketlake-splits-{attempt}")
    os.makedirs(path, exist_ok=True)
    return path


def staging_store(local_staging: str | None, store):
    """The store, or the host-local directory ``local_staging`` (``local_staging_dir``), holding this
    attempt's split files."""
    return LocalStaging(local_staging) if local_staging else store
