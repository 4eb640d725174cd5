"""What a job's executors must be able to reach, checked on the driver before any task runs.

With a ``local[...]`` (or ``local-cluster[...]``) master every task runs on the driver's host and
sees its disk. Any other master (``spark://``, ``yarn``, ``k8s://``, ...) runs tasks on other
hosts: an input file or a store on the driver's local disk is not there (each executor would
fail to open the input, or stage files into its own copy of the store path that no one else
reads). Such paths are refused up front (``UnreachablePath``: exit 2, one line), unless they lie
under a file system mounted at the same path on every host, named in ``ROCKETLAKE_SHARED_PATHS``
(``:``-separated directories, e.g. an NFS mount).
"""
from __future__ import annotations

import os

from ..errors import UnreachablePath
from ..format.paths import is_local, local_path

__all__ = ["SHARED_ENV", "UnreachablePath", "multi_host", "shared_prefixes", "check_reachable", "bound_to",
           "check_bound"]

SHARED_ENV = "ROCKETLAKE_SHARED_PATHS"


def multi_host(master: str) -> bool:
    """True when the master may run tasks on hosts other than the driver's."""
    return not master.startswith("local")


def shared_prefixes(env=None) -> list:
    """The shared directories, each as named and as resolved (a symlink to the mount, made alike on
    every host, names it as well as the mount itself)."""
    env = os.environ if env is None else env
    named = [os.path.normpath(os.path.abspath(p.strip())) for p in (env.get(SHARED_ENV) or "").split(":") if p.strip()]
    return list(dict.fromkeys(named + [os.path.realpath(p) for p in named]))


def _under(path: str, prefixes: list) -> str | None:
    return next((p for p in prefixes if path == p or path.startswith(p.rstrip("/") + "/")), None)


def check_reachable(master: str, paths: dict, env=None) -> None:
    """Raise UnreachablePath for the first of ``paths`` (option name -> path or URI; None skipped)
    that is on the driver's local disk while ``master`` is multi-host. The executors open the path
    as given: a relative one they resolve in their own working directory, and one that leaves the
    shared directories (a symlink on the driver's disk into them, or out of them) is not theirs."""
    if not multi_host(master):
        return
    prefixes = shared_prefixes(env)
    real_prefixes = [os.path.realpath(p) for p in prefixes]
    for option, path in paths.items():
        if not path or not is_local(path):
            continue
        given = local_path(path)
        if not os.path.isabs(given):
            raise UnreachablePath(
                f"{option} {path} is a relative path, which each executor of the multi-host master {master} "
                f"would resolve in its own working directory; give an absolute path under a directory named in "
                f"{SHARED_ENV} (or an s3://, gs:// or hdfs:// URI)")
        real = os.path.realpath(given)
        if _under(os.path.normpath(given), prefixes) and _under(real, real_prefixes):
            continue
        if _under(real, real_prefixes):
            raise UnreachablePath(
                f"{option} {path} is a symlink on the driver's disk into a shared directory, which the executors "
                f"of the multi-host master {master} do not have; give the path under the shared directory, {real}")
        raise UnreachablePath(
            f"{option} {path} is on the driver's local disk, which the executors of the multi-host master "
            f"{master} cannot read; give an s3://, gs:// or hdfs:// URI (or name a directory mounted at the "
            f"same path on every host in {SHARED_ENV})")


def bound_to(source: type, master: str, shared_paths: str | None) -> type:
    """``source`` (a pyspark ``DataSource`` class) for a session on ``master`` with
    ``ROCKETLAKE_SHARED_PATHS`` ``shared_paths``: a class of its own, named as ``source``, that
    Spark pickles to the worker planning a read or write by value, with these attributes (that
    worker has no SparkContext to ask), for ``check_bound``."""
    return type(source.__name__, (source,), {"master": master, "shared_paths": shared_paths,
                                             "__qualname__": f"{source.__qualname__}.bound"})


def check_bound(source, option: str, path) -> None:
    """``check_reachable`` of ``path`` (given as ``option``) for a data source made by ``bound_to``
    (an unbound one has master ``local``: nothing to check)."""
    check_reachable(getattr(source, "master", "local"), {option: path},
                    env={SHARED_ENV: getattr(source, "shared_paths", None) or ""})
