"""How every command ends on an error: one line on stderr and its exit status.

A storelib error (``errors.RocketlakeError``) carries its status and its line; one raised inside a
Spark task is rebuilt by class from the task's error (``errors.from_task``), so it reads the same.
What differs between commands is only the wording around the line (a writer says nothing was
written, a query that it failed): a ``Voice``. ``guarded`` is the wrapper every command's entry
runs in; ``worded`` marks a stage whose errors a command words in another voice (the checks before
a job starts); ``line`` is the one line itself (the store browser shows it too).
"""
from __future__ import annotations

import dataclasses
import sys
import traceback
from contextlib import contextmanager
from types import MappingProxyType
from typing import Callable, Iterator, Mapping, Union

from ..errors import ExitCode, RocketlakeError, from_task

__all__ = ["Voice", "WRITER", "CONFIG", "CHECK", "VERIFY", "QUERY", "INSPECT", "EXPIRE", "REPAIR",
           "line", "fail", "guarded", "worded"]

# A template: str.format with ``e`` (the error's line), or a function of the error.
Template = Union[str, Callable[[BaseException], str]]


def _frozen(d: Mapping) -> Mapping:
    return MappingProxyType(dict(d))


@dataclasses.dataclass(frozen=True)
class Voice:
    """How a command words the errors it ends with (each line starts ``error: ``).

    ``by_class``: a storelib error class's name (the error's own or a base's, nearest first) ->
    template; ``by_status``: a storelib error no class template matched, by exit status (else
    ``{e}``); ``other``: an error outside storelib by class name (nearest first) -> (template, exit
    status); ``unexpected``: anything else (``{name}`` its class), after its traceback if
    ``traceback``. Exit status of a storelib error: its own ``exit_status``; of anything else: 1."""
    by_class: Mapping[str, Template] = dataclasses.field(default_factory=lambda: _frozen({}))
    by_status: Mapping[int, Template] = dataclasses.field(default_factory=lambda: _frozen({}))
    other: Mapping[str, tuple[Template, int]] = dataclasses.field(default_factory=lambda: _frozen({}))
    unexpected: str = "{name}: {e}"
    traceback: bool = True


def _oserror(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename:
        return f"{e.strerror or e}: {e.filename}"
    return str(e)


# What a writer job prints for the errors it expects (ingest, import: run_job).
WRITER = Voice(by_class=_frozen({
    "InputError": "bad input, nothing was written:\n{e}",
    "ConfigError": "configuration: {e}",
    "UnreachablePath": "{e}",
    "TopicsError": "configuration: {e}",
    "ConcurrentWriteError": "concurrent writer: {e}; this batch left nothing behind, rerun it",
    "StoreError": "the store is damaged, nothing was written: {e} (rocketlake verify --store STORE names every "
                  "problem)",
    "StorePathError": "{e}",
    "UnsupportedStore": "{e}",
}))
# A job's --config file that cannot be read or holds a bad value (before Spark starts).
CONFIG = Voice(by_class=_frozen({"ConfigError": "configuration: {e}"}),
               other=_frozen({"OSError": ("configuration: {e}", int(ExitCode.BAD_INPUT))}))
# An OSError where a store is read is a store that cannot be read (a file system or an object store
# that refuses or does not answer in time), not a bug: its line, no traceback, exit 1, in the checks
# before every command (CHECK) and in the readers' own voices (QUERY, INSPECT).
_READ_OSERROR = (_oserror, int(ExitCode.FAILED))
# The checks before a command starts its work (is it a store, its configuration, the arguments).
CHECK = dataclasses.replace(WRITER, other=_frozen({"OSError": _READ_OSERROR}),
                            unexpected="{e}", traceback=False)
VERIFY = dataclasses.replace(CHECK, unexpected="{name}: {e}", traceback=True)
QUERY = Voice(by_status=_frozen({int(ExitCode.FAILED): "query failed: {e}",
                                 int(ExitCode.CONCURRENT): "query failed: {e}"}),
              other=_frozen({"FileNotFoundError": ("query failed: {e}", int(ExitCode.FAILED)),
                             "OSError": (lambda e: "query failed: " + _oserror(e), int(ExitCode.FAILED))}),
              unexpected="query failed: {name}: {e}")
INSPECT = Voice(by_class=_frozen({"ConfigError": "configuration: {e}", "UnreachablePath": "{e}"}),
                other=_frozen({"FileNotFoundError": ("{e}", int(ExitCode.FAILED)), "OSError": _READ_OSERROR}))
EXPIRE = Voice(by_class=_frozen({"ConfigError": "configuration: {e}", "UnreachablePath": "{e}",
                                 "ConcurrentWriteError": "concurrent writer: {e}; nothing was removed, rerun"}))
REPAIR = Voice(other=_frozen({"OSError": ("{e}", int(ExitCode.BAD_INPUT))}))


def _say(template: Template, e: BaseException, text: str) -> str:
    return template(e) if callable(template) else template.format(e=text)


def _words(e: BaseException, voice: Voice) -> tuple[int, str, bool]:
    """(exit status, the one line, whether anything expected ``e``)."""
    err = e if isinstance(e, RocketlakeError) else from_task(e)
    if err is not None:
        named = (voice.by_class[c.__name__] for c in type(err).__mro__
                 if issubclass(c, RocketlakeError) and c.__name__ in voice.by_class)
        found: Template | None = next(named, None)
        template: Template = found if found is not None else voice.by_status.get(int(err.exit_status), "{e}")
        return int(err.exit_status), "error: " + _say(template, err, err.line()), True
    for c in type(e).__mro__:
        if c.__name__ in voice.other:
            template, status = voice.other[c.__name__]
            return status, "error: " + _say(template, e, str(e)), True
    return int(ExitCode.FAILED), "error: " + voice.unexpected.format(name=type(e).__name__, e=e), False


def line(e: BaseException, voice: Voice) -> tuple[int, str]:
    """(exit status, the one line) of a command that ended with ``e``."""
    status, text, _expected = _words(e, voice)
    return status, text


def fail(e: BaseException, voice: Voice) -> int:
    """Print the one line of ``e`` on stderr (after its traceback if nothing expected it); its status."""
    status, text, expected = _words(e, voice)
    if voice.traceback and not expected:
        traceback.print_exception(e)
    print(text, file=sys.stderr)
    return status


class _Worded(Exception):
    """An error of a stage that a command words in another voice than its own (``worded``)."""

    def __init__(self, error: Exception, voice: Voice):
        super().__init__(str(error))
        self.error = error
        self.voice = voice


@contextmanager
def worded(voice: Voice) -> Iterator[None]:
    """The errors of this stage are worded in ``voice`` (by ``guarded``, which prints them)."""
    try:
        yield
    except _Worded:
        raise
    except Exception as e:
        raise _Worded(e, voice) from e


def guarded(body: Callable[[], int], voice: Voice,
            interrupted: Callable[[KeyboardInterrupt], int] | None = None) -> int:
    """Run a command's ``body``: its exit status, or the one line and status of the error it ended
    with (``fail``); ``interrupted(e)``: what SIGINT / SIGTERM (``errors.Interrupted``) end it with."""
    try:
        return int(body())
    except KeyboardInterrupt as e:
        if interrupted is None:
            raise
        return interrupted(e)
    except BrokenPipeError:
        raise                 # the reader of stdout has gone (`| head`): the entry point ends quietly
    except _Worded as e:
        return fail(e.error, e.voice)
    except Exception as e:  # noqa: BLE001 - a command ends with one clear line
        return fail(e, voice)
