"""A writer stalled past its lease while another takes the store over (tests of the lease).

The stalled writer is held at a kill point (``ROCKETLAKE_HOLD``), stopped there (SIGSTOP), its
gate opened (so it goes on once continued) and left stopped for longer than its lease
(``ROCKETLAKE_LEASE_TTL``). The writer that takes the store over then starts and is held at its own
point (its attempt half done), or runs to its end. The test looks at the store between the steps
and decides when the stalled writer resumes and when the other one goes on.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from typing import Callable, Iterator

__all__ = ["Takeover", "stalled_past_lease", "wait_for"]

Start = Callable[[dict], subprocess.Popen]


def wait_for(path: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until ``path`` exists (a held writer's ``<gate>.reached``); an error if ``proc`` ends first."""
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            raise AssertionError(f"the writer ended first: {proc.communicate()[1][-2000:]}")
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


class Takeover:
    """The ``stalled`` writer stopped past its lease, and the ``taker`` that took the store over
    (held at its gate ``taker_gate``, or ended when it was not held)."""

    def __init__(self, stalled: subprocess.Popen, taker: subprocess.Popen, taker_gate: str | None):
        self.stalled, self.taker, self.taker_gate = stalled, taker, taker_gate
        self._taker_end: tuple[int, str] | None = None

    def resume_stalled(self, timeout: float = 300) -> tuple[int, str]:
        """Continue the stalled writer (SIGCONT) to its end: its exit status and stderr."""
        os.kill(self.stalled.pid, signal.SIGCONT)
        _, err = self.stalled.communicate(timeout=timeout)
        return self.stalled.returncode, err

    def release_taker(self, timeout: float = 300) -> tuple[int, str]:
        """Let the writer that took over go on (its gate opened) to its end: its exit status and stderr."""
        if self._taker_end is None:
            if self.taker_gate is not None:
                open(self.taker_gate, "w").close()
            _, err = self.taker.communicate(timeout=timeout)
            self._taker_end = self.taker.returncode, err
        return self._taker_end


@contextmanager
def stalled_past_lease(tmp: str, ttl: float, point: str, start_stalled: Start, start_taker: Start,
                       taker_point: str | None = "after-files-staged",
                       taker_ttl: float | None = None) -> Iterator[Takeover]:
    """``start_stalled(env)`` (a writer's process; ``env``: its lease of ``ttl`` seconds, held at
    ``point``) stopped there past its lease; then ``start_taker(env)`` (a lease of ``taker_ttl``
    seconds, default ``ttl``; held at ``taker_point``; None: not held, run to its end before this
    yields). Gates go in ``tmp``. Every process is ended on the way out (continued first, if stopped).

    A writer judges another's lease stale by its own TTL, so the stall lasts past the longer of the
    two. A longer ``taker_ttl`` gives the taker more time between its own renewals (half its TTL)
    before it counts its lease lost: on a loaded host a 2 s gap is not rare."""
    lease = {"ROCKETLAKE_LEASE_TTL": str(ttl)}
    taker_lease = {"ROCKETLAKE_LEASE_TTL": str(ttl if taker_ttl is None else taker_ttl)}
    gate, taker_gate = os.path.join(str(tmp), "gate-stalled"), os.path.join(str(tmp), "gate-taker")
    stalled = start_stalled(dict(lease, ROCKETLAKE_HOLD=f"{point}:{gate}"))
    taker = None
    try:
        wait_for(gate + ".reached", stalled)
        os.kill(stalled.pid, signal.SIGSTOP)
        open(gate, "w").close()
        time.sleep(max(ttl, taker_ttl or 0) + 0.5)         # past the stalled writer's lease, as the taker sees it
        held = taker_point is not None
        taker = start_taker(dict(taker_lease, ROCKETLAKE_HOLD=f"{taker_point}:{taker_gate}") if held else taker_lease)
        takeover = Takeover(stalled, taker, taker_gate if held else None)
        if held:
            wait_for(taker_gate + ".reached", taker)
        else:
            takeover.release_taker()
        yield takeover
    finally:
        for p in (stalled, taker):
            if p is not None and p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
