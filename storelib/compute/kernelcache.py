"""Where numba keeps storelib's compiled kernels when storelib runs from a zip (a cluster's
executors: the driver ships ``storelib.zip``, Spark puts it in each application's work folder).

numba names a zipped module's cache after the zip's absolute path, so every application would
compile every kernel again (seconds per job) and leave a cache folder per application behind. The
locator here keys the cache by what the machine code depends on instead: the module's source
(its sha256) under one per-user directory, so the kernels are compiled once per host and source,
whatever folder the zip sits in:

    $NUMBA_CACHE_DIR, else $ROCKETLAKE_KERNEL_CACHE, else ~/.cache/rocketlake/kernels
        /<module>-<sha256 of its source, 16 hex>/<numba's index and object files>

(a temporary directory of this user when none of these can be written). numba's own index also
stamps the source hash and its version, so a stale entry is never used. Installed or checked-out
storelib (not zipped) keeps numba's usual ``__pycache__`` locations.

Each module with ``cache=True`` kernels imports this module before defining them: numba picks a
function's cache location when the decorator runs.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile

from numba.core import caching, config

__all__ = ["ENV", "cache_root", "SourceKeyedZipLocator"]

ENV = "ROCKETLAKE_KERNEL_CACHE"


def cache_root() -> str:
    numba_dir = config.CACHE_DIR  # type: ignore[attr-defined]  # numba.config sets it from the environment
    return (numba_dir or os.environ.get(ENV)
            or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                            "rocketlake", "kernels"))


class SourceKeyedZipLocator(caching.ZipCacheLocator):
    """numba's zip locator with the cache under ``cache_root()``, keyed by module and source hash."""

    def __init__(self, py_func, py_file):
        super().__init__(py_func, py_file)
        with zipfile.ZipFile(self._zip_path) as zf:
            digest = hashlib.sha256(zf.read(self._internal_path)).hexdigest()[:16]
        module = os.path.splitext(os.path.basename(self._internal_path))[0]
        self._sub = f"{module}-{digest}"
        self._cache_path = os.path.join(cache_root(), self._sub)

    @classmethod
    def from_function(cls, py_func, py_file):
        if ".zip" not in py_file or "storelib/" not in py_file.replace(os.sep, "/"):
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:               # no writable home: a per-user temporary directory
            self._cache_path = os.path.join(tempfile.gettempdir(), f"rocketlake-kernels-{os.getuid()}", self._sub)
            try:
                self.ensure_cache_path()
            except OSError:
                return None
        return self


if SourceKeyedZipLocator not in caching.CacheImpl._locator_classes:
    caching.CacheImpl._locator_classes.insert(0, SourceKeyedZipLocator)
