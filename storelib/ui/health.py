"""The Health page: the last verify run from the page, and a quick verify of one file.

Verify changes nothing, and nothing in the store records a verify run: the page keeps the result
of the last one it ran (``Health.last``). A whole-store run is ``verify.driver.verify_store``
(``rocketlake verify``'s checks, in this process). A quick verify checks one file of the latest
batch with the task ``rocketlake verify`` would run for it (``verify.driver.plan``, ``run_task``):
a commitlog segment or an index file alone, a consume-queue file with the other files of its
queue (a queue's files are checked together), plus the driver's findings that name the file.
"""
from __future__ import annotations

import dataclasses
import threading
import time

from ..cli.timeargs import iso
from ..verify import driver
from ..verify.commitlog import ScanBuffers
from .storeview import checked_rel

__all__ = ["Health", "files"]


class Health:
    """The verify results of one server (the last one shown on the page), one run at a time."""

    def __init__(self):
        self.last: dict | None = None
        self._lock = threading.Lock()

    def verify_store(self, view, as_of=None) -> dict:
        cfg = view.config(as_of)
        with self._lock:
            rep = driver.verify_store(view.uri, cfg, as_of_batch=as_of, threads=1)
            return self._keep("the whole store", as_of, [str(p) for p in rep.found], rep.summary())

    def verify_file(self, view, rel: str) -> dict:
        """Check one file of the latest batch (``rel``: one of ``files(view)``)."""
        cfg = view.config()
        snap = view.snapshot()
        checked_rel(rel, files(view, snap, cfg))
        t0 = time.time()
        with self._lock:
            ctx, tasks, problems = driver.plan(view.store, cfg, snap if snap.batch is not None else None, deep=False)
            task = _task_of(tasks, rel)
            local = dataclasses.replace(ctx, local_store=view.store, threads=1, scan_buffers=ScanBuffers())
            result = driver.run_task(local, task) if task is not None else {"problems": []}
            checked = [rel] if task is None or task["kind"] != "queues" else \
                [f["path"] for q in task["queues"] for f in q["files"]]
            found = sorted({str(p) for p in list(problems) + list(result["problems"]) if p.path in checked})
            summary = {"status": "ok" if not found else "FAILED", "problems": len(found), "files": len(checked),
                       "checked": ", ".join(checked), "seconds": round(time.time() - t0, 3)}
            return self._keep(f"file {rel}", snap.batch.batch_id if snap.batch else None, found, summary)

    def _keep(self, what: str, as_of, problems: list, summary: dict) -> dict:
        self.last = {"what": what, "as_of": as_of, "when": iso(int(time.time() * 1000)), "problems": problems,
                     "summary": summary, "ok": not problems}
        return self.last


def files(view, snap, cfg) -> list:
    """The files a quick verify may check: the latest batch's (a broker's directory: the files a
    broker's recovery reads)."""
    if snap.batch is not None:
        return sorted(snap.files)
    f = view.reader(None, cfg).files
    return sorted([s.rel for s in f.commitlog] + [c.rel for fs in f.consume_queues.values() for c in fs]
                  + [i.rel for i in f.index])


def _task_of(tasks: list, rel: str) -> dict | None:
    """The verify task that checks ``rel`` (a queue group narrowed to the queue holding it)."""
    for t in tasks:
        if t["kind"] != "queues" and t["path"] == rel:
            return t
        if t["kind"] == "queues":
            for q in t["queues"]:
                if any(f["path"] == rel for f in q["files"]):
                    return {"kind": "queues", "queues": [q]}
    return None
