"""Every error class of storelib, and the exit status of every job that ends with one.

Exit status of every job: ``ExitCode`` (the codes), ``EXIT_TABLE`` (which class means which code)
and ``exit_code``. This module imports nothing, so every entry point can use the table.

    code  ExitCode    jobs/ingest.py       jobs/expire.py       jobs/query.py        jobs/inspect.py
                      (ingest, import)
    0     OK          committed, or        done, or nothing     answered (nothing    done; verify found
                      already committed    to expire            found: empty output) no problem
    1     FAILED      anything else: a failed write or check (IngestError, AdoptError, ExpireError), a store
                      path leading out of the store (StorePathError), a damaged store (StoreError,
                      CorruptStore), an unexpected error; verify: problems found
    2     BAD_INPUT   bad arguments (argparse), a path that is not a store (StoreNotFound), bad input rows
                      (InputError), configuration or topics.json
                      (ConfigError, TopicsError; an unreadable --config file); query: bad query input
                      (BadInput); query and inspect: a batch id / version the store does not have (KeyError)
    3     CONCURRENT  another writer committed first (ConcurrentWriteError): nothing of this batch or
                      expiry was left behind, rerun it (ingest, import, expire); repair: a running
                      broker holds the store's lock file (BrokerRunning); mirror: the broker's CommitLog
                      no longer matches what the mirror committed (MirrorDiverged)
    130, 143          interrupted by SIGINT / SIGTERM (Interrupted): one line says what the store holds

jobs/repair.py: 0 nothing to repair (dry run) or repaired, 1 a dry run found files to repair, 2 a
store that cannot be repaired as asked (RepairError), 3 a running broker or another writer, or a
CommitLog that does not verify against its manifest rows (RepairRefused: file and offset named).

An error raised inside a Spark task reaches the driver as a Py4J error whose text holds the
Python traceback: InputError (2), IngestError and StorePathError (1) are recognized there too
(``task_error``); any other task failure is 1.

``CorruptStore`` names the damaged file relative to the store root and the byte offset in it,
formatted like a ``verify`` problem line (``<path>@<offset>: <what>``), so a query on a damaged
store fails with the same words ``inspect.py verify`` reports.
"""
from __future__ import annotations

import enum

__all__ = [
    "StoreError", "CorruptStore", "IngestError", "AlreadyCommitted", "StorePathError", "StoreNotFound",
    "ContinuedFileDamaged", "LocalCommitConflict", "ExportError", "ConcurrentWriteError", "LeaseLost", "ConfigError",
    "UnreachablePath", "UnsafeObjectStore", "TopicsError", "InputError", "BadInput", "ExpireError", "AdoptError",
    "RepairError", "RepairRefused",
    "BrokerRunning", "MirrorDiverged", "MirrorError", "DeltaJarsMissing", "Interrupted", "ExitCode", "EXIT_TABLE",
    "exit_code", "task_error",
]


class StoreError(Exception):
    """A store cannot be read as asked."""


class CorruptStore(StoreError):
    """A store file or one of the ``_rocketlake`` Delta tables is damaged (truncated, missing,
    garbage) or the manifest names something a store cannot hold."""

    def __init__(self, path: str, offset: int | None, what: str):
        self.path = path
        self.offset = int(offset or 0)
        self.what = what
        super().__init__(f"{path}@{self.offset}: {what}")


class IngestError(RuntimeError):
    """An ingest cannot go on (raised by the driver and by its executor tasks alike)."""


class AlreadyCommitted(Exception):
    """The batch id is committed with the same input: nothing to do."""


class StorePathError(StoreError, ValueError):
    """A store-relative path that would lead out of the store root: absolute, with ``..``,
    ``.`` or empty components, a backslash or NUL, or (local stores) a symlink resolving
    outside the root. Raised before anything is opened, created or deleted there."""

class StoreNotFound(FileNotFoundError):
    """The path holds neither a rocketlake manifest nor RocketMQ store directories (exit 2: the
    command was pointed at the wrong place)."""

class ContinuedFileDamaged(CorruptStore):
    """A committed file a batch continues is not what the manifest says it is."""

    def __init__(self, path: str, offset: int, what: str):
        super().__init__(path, offset, f"{what}; the batch would build on damaged committed bytes, so nothing was "
                                       "committed (run verify --deep on the store)")

class LocalCommitConflict(StoreError):
    """The table's log moved on since the writer planned its commit."""

class ExportError(StoreError):
    """The export target is not empty, or a file's bytes do not match the manifest."""

class ConcurrentWriteError(RuntimeError):
    """Another batch committed since this one was planned."""

class LeaseLost(ConcurrentWriteError):
    """This writer's lease is gone (taken over, or not renewed for too long): it must not commit."""

class ConfigError(ValueError):
    """A configuration value is missing, malformed or inconsistent with the store."""

class UnreachablePath(ConfigError):
    """A path on the driver's disk given to a job whose executors run on other hosts."""

class UnsafeObjectStore(ConfigError):
    """An object store whose server does not honour conditional puts (``If-None-Match: *``), on
    which a Delta commit could not stop a second writer (storelib.io.condput): refused (exit 2)."""


class TopicsError(ValueError):
    """topics.json cannot be read or is inconsistent."""

class InputError(ValueError):
    """Bad input: each problem names the row (source and row number) and the field."""

    SHOWN = 20

    def __init__(self, problems: list[str], total: int | None = None):
        # A problem "... <what>: N more row(s) ..." stands for N rows it does not list.
        self.problems = problems
        counted = _rows_counted(problems)
        self.total = total if total is not None else counted
        shown = problems[:self.SHOWN]
        rest = self.total - _rows_counted(shown)
        more = f"\n  ... {rest} more" if rest > 0 else ""
        super().__init__(f"{self.total} bad input row problem(s):\n  " + "\n  ".join(shown) + more)


def _rows_counted(problems: list) -> int:
    """Rows the problems stand for: one each, N for a summary line "... <what> N more ..."."""
    n = 0
    for p in problems:
        words = p.split() if p.startswith("... ") else ()
        counts = [int(w) for w, nxt in zip(words, words[1:]) if w.isdigit() and nxt == "more"]
        n += counts[0] if counts else 1
    return n

class BadInput(ValueError):
    """A command's arguments are malformed: a query's, an export's target that is not empty (exit 2)."""

class ExpireError(RuntimeError):
    """An expiry cannot go on (nothing was changed)."""

class AdoptError(RuntimeError):
    """A broker's store cannot be adopted as asked (nothing was committed)."""

class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached a job (exit 128 + the signal's number: 130, 143)."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(f"signal {self.signum}")


class RepairError(RuntimeError):
    """A repair cannot go on as asked (nothing was changed)."""


class RepairRefused(CorruptStore):
    """A rocketlake store's CommitLog does not verify against its manifest rows: repair derives
    nothing from it and changes nothing (exit 3)."""


class BrokerRunning(ConcurrentWriteError):
    """A running broker holds the store's ``lock`` file (nothing was changed)."""


class MirrorDiverged(RuntimeError):
    """The broker's CommitLog no longer holds what a mirror committed from it (another store, a
    truncated tail, replaced files, or segments it deleted before the mirror copied them)."""


class MirrorError(ValueError):
    """A mirror cycle that cannot start: not a broker store directory, a store that is no mirror."""


class DeltaJarsMissing(RuntimeError):
    """delta-spark's jars are not where ``make install`` puts them (or not on a session's classpath)."""


class ExitCode(enum.IntEnum):
    """Exit status of every job (the table in this module's docstring)."""
    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    CONCURRENT = 3


# Which error means which exit status: (class, code, recognized inside a Spark task's error).
# First match wins, so a subclass comes before its base.
EXIT_TABLE = (
    (InputError, ExitCode.BAD_INPUT, True),
    (IngestError, ExitCode.FAILED, True),
    (StorePathError, ExitCode.FAILED, True),
    (ConfigError, ExitCode.BAD_INPUT, False),
    (TopicsError, ExitCode.BAD_INPUT, False),
    (BadInput, ExitCode.BAD_INPUT, False),
    (ConcurrentWriteError, ExitCode.CONCURRENT, False),
    (MirrorDiverged, ExitCode.CONCURRENT, False),
    (MirrorError, ExitCode.BAD_INPUT, False),
    (RepairRefused, ExitCode.CONCURRENT, False),
    (RepairError, ExitCode.BAD_INPUT, False),
    (AdoptError, ExitCode.FAILED, False),
    (ExpireError, ExitCode.FAILED, False),
    (StoreError, ExitCode.FAILED, False),
    (StoreNotFound, ExitCode.BAD_INPUT, False),
)


def task_error(exc: BaseException):
    """(code, message) of a storelib error raised inside a Spark task, which arrives wrapped in a
    Py4J error (its text holds the Python traceback); None if ``exc`` is not one."""
    text = str(exc)
    for cls, code, in_task in EXIT_TABLE:
        marker = f"{cls.__module__}.{cls.__qualname__}:"
        if in_task and marker in text:
            return code, text[text.index(marker):].split("\n\n")[0]
    return None


def exit_code(exc: BaseException, *, lookup_errors: bool = False) -> ExitCode:
    """The exit status of a job that ended with ``exc`` (EXIT_TABLE, then a Spark task's error).

    ``lookup_errors``: a KeyError means a batch id / version / name the store does not have (the
    readers, query and inspect), so bad arguments (2); elsewhere it is an unexpected error (1)."""
    for cls, code, _in_task in EXIT_TABLE:
        if isinstance(exc, cls):
            return code
    if lookup_errors and isinstance(exc, KeyError):
        return ExitCode.BAD_INPUT
    wrapped = task_error(exc)
    return wrapped[0] if wrapped else ExitCode.FAILED
