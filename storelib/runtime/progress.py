"""Driver-side progress of a long job: stage lines on stderr, a polling line while a Spark job
runs.

Used by ingest, adopt (``--from-store``) and expire.
"""
from __future__ import annotations

import sys
import threading
import time

from .milestones import mark

__all__ = ["Progress"]


def _spark_shows_progress(sc) -> bool:
    """Spark draws its own progress bar on this context (``spark.ui.showConsoleProgress``, on in a
    user's interactive or plain-python session): our polling line would be drawn into it."""
    try:
        return bool(sc._jsc.sc().progressBar().isDefined())
    except Exception:  # noqa: BLE001 - no JVM (LocalSession), or a Spark without it: ours then
        return False


class Progress:
    """Driver-side progress: stage lines, and while a Spark job runs a line every ``interval``
    seconds from a polling thread (``sc.statusTracker()``, no listener): tasks done of total,
    segments written (estimated from the write stage's finished tasks) and msgs/s."""

    def __init__(self, quiet: bool = False, sc=None, interval: float = 5.0):
        self.t0 = time.time()
        self.quiet = quiet
        self.sc = sc
        self.interval = interval
        self._stage: dict | None = None
        self._stage_t0 = 0.0
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def say(self, msg: str) -> None:
        mark(msg.split(":", 1)[0])
        if not self.quiet:
            print(f"[rocketlake {time.time() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    @staticmethod
    def warn(msg: str) -> None:
        """Always shown (``quiet`` or not): a warning is something to act on."""
        print(f"[rocketlake] warning: {msg}", file=sys.stderr, flush=True)

    def stage(self, name: str | None, tasks: int = 0, **info) -> None:
        """Start (name) or end (None) a Spark stage of the ingest; polling runs in between."""
        if self._thread is not None and self._stop is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
        self._stage = None
        mark(f"stage {name}" if name else "stage end")
        if name is None:
            return
        self._stage = dict(info, name=name, tasks=tasks)
        self._stage_t0 = time.time()
        if self.sc is None or self.quiet or _spark_shows_progress(self.sc):
            return
        self._stop = stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(stop,), name="rocketlake-progress", daemon=True)
        self._thread.start()

    def _poll(self, stop: threading.Event) -> None:
        while not stop.wait(min(self.interval, 5.0)):
            if not self.quiet:
                try:
                    self.say(self.line())
                except Exception:  # noqa: BLE001
                    pass

    def line(self) -> str:
        st: dict = self._stage or {}
        tracker = self.sc.statusTracker()
        done = total = 0
        stages = []
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is None:
                continue
            done += info.numCompletedTasks
            total += info.numTasks
            stages.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks "
                          f"({info.numActiveTasks} running)")
        el = time.time() - self._stage_t0
        text = f"{st.get('name')}: " + ("; ".join(stages) if stages else "between stages")
        if st.get("name") == "write" and st.get("segments"):
            # the write job is one stage: its finished tasks
            seg_tasks = max(1, st["tasks"])
            ids = sorted(tracker.getActiveStageIds())
            first = tracker.getStageInfo(ids[0]) if ids else None
            if first is not None and first.numTasks == seg_tasks:
                frac = first.numCompletedTasks / seg_tasks
            else:
                frac = 1.0 if ids else 0.0
            segs = int(round(frac * st["segments"]))
            rate = st.get("messages", 0) * frac / el if el > 0 else 0
            text += f"; segments written ~{segs}/{st['segments']}, {rate:,.0f} msgs/s"
        return text + f" [{el:.0f}s]"
