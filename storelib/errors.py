"""Every error class of storelib, and the exit status of every job that ends with one.

Exit status of every job: ``ExitCode`` (the codes), ``EXIT_TABLE`` (which class means which code)
and ``exit_code``. This module imports nothing of storelib (stdlib only), so every entry point can
use the table.

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
                      (BadInput); a batch id / version the store does not have (NoSuchBatch)
    3     CONCURRENT  another writer committed first (ConcurrentWriteError): nothing of this batch or
                      expiry was left behind, rerun it (ingest, import, expire); repair: a running
                      broker holds the store's lock file (BrokerRunning); mirror: the broker's CommitLog
                      no longer matches what the mirror committed (MirrorDiverged)
    130, 143          interrupted by SIGINT / SIGTERM (Interrupted): one line says what the store holds

jobs/repair.py: 0 nothing to repair (dry run) or repaired, 1 a dry run found files to repair, 2 a
store that cannot be repaired as asked (RepairError), 3 a running broker or another writer, or a
CommitLog that does not verify against its manifest rows (RepairRefused: file and offset named).

Every error class derives from ``RocketlakeError``, which carries the exit status (``exit_status``)
and the one-line message (``line()``); ``EXIT_TABLE`` is derived from them. An error raised inside a
Spark task reaches the driver as a Py4J error whose text holds the Python traceback; the note every
``RocketlakeError`` adds to it (``TASK_MARKER``: its class name and line) lets ``from_task`` rebuild
it there by class, so it prints the same line and ends with the same status as on the driver; any
other task failure is 1. ``Interrupted`` stays a KeyboardInterrupt (no ``except Exception`` catches it).

``CorruptStore`` names the damaged file relative to the store root and the byte offset in it,
formatted like a ``verify`` problem line (``<path>@<offset>: <what>``), so a query on a damaged
store fails with the same words ``inspect.py verify`` reports.
"""
from __future__ import annotations

import enum
import json

__all__ = [
    "RocketlakeError", "StoreError", "CorruptStore", "NoSuchBatch", "IngestError", "AlreadyCommitted", "StorePathError",
    "StoreNotFound",
    "ContinuedFileDamaged", "LocalCommitConflict", "ExportError", "ConcurrentWriteError", "LeaseLost", "ConfigError",
    "UnreachablePath", "UnsafeObjectStore", "TopicsError", "InputError", "BadInput", "ExpireError", "AdoptError",
    "RepairError", "RepairRefused", "MissingFile", "UnsupportedStore",
    "BrokerRunning", "MirrorDiverged", "MirrorError", "DeltaJarsMissing", "Interrupted", "ExitCode", "EXIT_TABLE",
    "exit_code", "task_error", "from_task", "TASK_MARKER",
]


class ExitCode(enum.IntEnum):
    """Exit status of every job (the table in this module's docstring)."""
    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    CONCURRENT = 3


# A line a root error adds to its traceback (a note): the only channel out of a Spark task's Python
# worker is its traceback text, which the driver receives inside a Py4J / PythonException error.
TASK_MARKER = "rocketlake-error "
_CLASSES: dict[str, type[RocketlakeError]] = {}


class RocketlakeError(Exception):
    """The root of every storelib error: ``exit_status`` (a class attribute, ``ExitCode``) is the
    status of a job it ends, ``line()`` its one-line message (without the error's class). Raised
    inside a Spark task it reaches the driver as text; ``from_task`` rebuilds it there by class."""

    exit_status: ExitCode = ExitCode.FAILED

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        _CLASSES[cls.__name__] = cls

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.add_note(TASK_MARKER + json.dumps({"class": type(self).__name__, "line": self.line()}))

    def line(self) -> str:
        return str(self)


_CLASSES[RocketlakeError.__name__] = RocketlakeError


class StoreError(RocketlakeError):
    """A store cannot be read as asked."""


class CorruptStore(StoreError):
    """A store file or one of the ``_rocketlake`` Delta tables is damaged (truncated, missing,
    garbage) or the manifest names something a store cannot hold."""

    def __init__(self, path: str, offset: int | None, what: str) -> None:
        self.path = path
        self.offset = int(offset or 0)
        self.what = what
        super().__init__(f"{path}@{self.offset}: {what}")


class UnsupportedStore(StoreError):
    """A broker's directory written with a store feature rocketlake does not read (named in the
    message): refused whole rather than read without the files that feature keeps."""


class MissingFile(CorruptStore):
    """A file a reader was told exists (by the manifest or a broker's listing) is not there: the
    store lost it, unless an expiry after the batch read deleted it (``table.expired``)."""


class IngestError(RocketlakeError, RuntimeError):
    """An ingest cannot go on (raised by the driver and by its executor tasks alike)."""


class AlreadyCommitted(RocketlakeError):
    """The batch id is committed with the same input: nothing to do."""


class StorePathError(StoreError, ValueError):
    """A store-relative path that would lead out of the store root: absolute, with ``..``,
    ``.`` or empty components, a backslash or NUL, or (local stores) a symlink resolving
    outside the root. Raised before anything is opened, created or deleted there."""

class StoreNotFound(RocketlakeError, FileNotFoundError):
    """The path holds neither a rocketlake manifest nor RocketMQ store directories (exit 2: the
    command was pointed at the wrong place)."""
    exit_status = ExitCode.BAD_INPUT

class NoSuchBatch(RocketlakeError, KeyError):
    """A batch id, sequence number or checkpoints-table version the store does not have (exit 2).
    Also a KeyError: callers that looked a batch up by key before this class existed still catch it."""
    exit_status = ExitCode.BAD_INPUT

    def __str__(self) -> str:       # the message itself, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


class ContinuedFileDamaged(CorruptStore):
    """A committed file a batch continues is not what the manifest says it is."""

    def __init__(self, path: str, offset: int, what: str) -> None:
        super().__init__(path, offset, f"{what}; the batch would build on damaged committed bytes, so nothing was "
                                       "committed (run verify --deep on the store)")

class LocalCommitConflict(StoreError):
    """The table's log moved on since the writer planned its commit."""

class ExportError(StoreError):
    """The export target is not empty, or a file's bytes do not match the manifest."""

class ConcurrentWriteError(RocketlakeError, RuntimeError):
    """Another batch committed since this one was planned."""
    exit_status = ExitCode.CONCURRENT

class LeaseLost(ConcurrentWriteError):
    """This writer's lease is gone (taken over, or not renewed for too long): it must not commit."""

class ConfigError(RocketlakeError, ValueError):
    """A configuration value is missing, malformed or inconsistent with the store."""
    exit_status = ExitCode.BAD_INPUT

class UnreachablePath(ConfigError):
    """A path on the driver's disk given to a job whose executors run on other hosts."""

class UnsafeObjectStore(ConfigError):
    """An object store whose server does not honour conditional puts (``If-None-Match: *``), on
    which a Delta commit could not stop a second writer (storelib.io.condput): refused (exit 2)."""


class TopicsError(RocketlakeError, ValueError):
    """topics.json cannot be read or is inconsistent."""
    exit_status = ExitCode.BAD_INPUT

class InputError(RocketlakeError, ValueError):
    """Bad input: each problem names the row (source and row number) and the field."""
    exit_status = ExitCode.BAD_INPUT

    SHOWN = 20
    rows: int | None = None      # raised for one split: its rows (later splits' row numbers count on from them)

    def __init__(self, problems: list[str], total: int | None = None) -> None:
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

class BadInput(RocketlakeError, ValueError):
    """A command's arguments are malformed: a query's, an export's target that is not empty (exit 2)."""
    exit_status = ExitCode.BAD_INPUT

class ExpireError(RocketlakeError, RuntimeError):
    """An expiry cannot go on (nothing was changed)."""

class AdoptError(RocketlakeError, RuntimeError):
    """A broker's store cannot be adopted as asked (nothing was committed)."""

class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached a job (exit 128 + the signal's number: 130, 143)."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(f"signal {self.signum}")


class RepairError(RocketlakeError, RuntimeError):
    """A repair cannot go on as asked (nothing was changed)."""
    exit_status = ExitCode.BAD_INPUT


class RepairRefused(CorruptStore):
    """A rocketlake store's CommitLog does not verify against its manifest rows: repair derives
    nothing from it and changes nothing (exit 3)."""
    exit_status = ExitCode.CONCURRENT


class BrokerRunning(ConcurrentWriteError):
    """A running broker holds the store's ``lock`` file (nothing was changed)."""


class MirrorDiverged(RocketlakeError, RuntimeError):
    """The broker's CommitLog no longer holds what a mirror committed from it (another store, a
    truncated tail, replaced files, or segments it deleted before the mirror copied them)."""
    exit_status = ExitCode.CONCURRENT


class MirrorError(RocketlakeError, ValueError):
    """A mirror cycle that cannot start: not a broker store directory, a store that is no mirror."""
    exit_status = ExitCode.BAD_INPUT


class DeltaJarsMissing(RocketlakeError, RuntimeError):
    """delta-spark's jars are not where ``make install`` puts them (or not on a session's classpath)."""


def _depth(cls: type) -> int:
    return len(cls.__mro__)


# Which error means which exit status, (class, code, recognized inside a Spark task's error), derived
# from the classes' own ``exit_status``; a subclass comes before its base (first match wins).
EXIT_TABLE = tuple((cls, cls.exit_status, True)
                   for cls in sorted(_CLASSES.values(), key=_depth, reverse=True))


def from_task(exc: BaseException) -> RocketlakeError | None:
    """The storelib error a Spark task raised, rebuilt from the Py4J / PythonException error that
    carries its traceback text (the last ``TASK_MARKER`` note in it: the outermost error); None if
    ``exc`` carries none."""
    text = str(exc)
    at = text.rfind(TASK_MARKER)
    if at < 0:
        return None
    try:
        mark = json.loads(text[at + len(TASK_MARKER):].split("\n", 1)[0])
        cls = _CLASSES[mark["class"]]
        line = str(mark["line"])
    except (ValueError, KeyError, TypeError):
        return None
    rebuilt = cls.__new__(cls, line)
    BaseException.__init__(rebuilt, line)     # the message alone: a subclass's own __init__ takes parts
    return rebuilt


def task_error(exc: BaseException) -> tuple[ExitCode, str] | None:
    """(code, one-line message) of a storelib error raised inside a Spark task; None if ``exc``
    is not one (``from_task``)."""
    err = from_task(exc)
    return None if err is None else (err.exit_status, err.line())


def exit_code(exc: BaseException) -> ExitCode:
    """The exit status of a job that ended with ``exc``: a storelib error's ``exit_status``, also
    when a Spark task raised it (``from_task``); anything else 1."""
    if isinstance(exc, RocketlakeError):
        return exc.exit_status
    err = from_task(exc)
    return err.exit_status if err is not None else ExitCode.FAILED
