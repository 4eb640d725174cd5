"""SIGINT / SIGTERM after a batch's commit: recorded, not raised, so the job finishes it.

A job's signal handler (``cli.common.on_signals``) raises ``errors.Interrupted`` so an
interrupted job says one line and leaves nothing uncommitted. Once the batch's commit has landed
that would be wrong: the batch is in the store, publishing its files and clearing its staging
are what is left, and a scheduler would record a failure for work that succeeded. The commit
calls ``committed()``; from then on the handler calls ``record(signum)`` instead of raising, and
the job, once finished, reports the signal with ``pending()`` and exits 0. A second signal is
raised as before (a job stuck after its commit can still be stopped; the batch stays committed
and a rerun finishes publishing it). ``reset()`` starts a job (the same process may run several,
e.g. tests calling ``main()``).
"""
from __future__ import annotations

__all__ = ["committed", "deferring", "record", "pending", "reset"]

_state: dict[str, bool | int | None] = {"defer": False, "signum": None}


def reset() -> None:
    _state.update(defer=False, signum=None)


def committed() -> None:
    """The batch is committed: interrupts from now on wait for the job to finish."""
    _state["defer"] = True


def deferring() -> bool:
    return bool(_state["defer"])


def record(signum: int) -> None:
    if _state["signum"] is None:
        _state["signum"] = signum


def pending() -> int | None:
    """The first signal that arrived after the commit, if any."""
    return _state["signum"]
