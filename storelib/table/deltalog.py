"""Integrity of the Delta logs of the ``_rocketlake`` tables (for ``verify``) and clean errors for
readers of a damaged one.

``log_problems(store, table)`` reads a table's ``_delta_log/`` (a few small JSON files) and
reports, as ``(path, offset, what)``: a log directory without any commit; a missing commit
between the newest Delta checkpoint (or version 0) and the newest version; a commit that is not
JSON lines of Delta actions (truncated, garbage); a commit with fewer ``add``/``remove`` actions
than its ``commitInfo`` counted (truncated at a line end); a first commit without ``protocol`` or
``metaData``; an unreadable ``_last_checkpoint`` or one naming a missing checkpoint.

A commit older than the newest Delta checkpoint may be gone (``cleanup_metadata`` deletes them);
one that is still there is checked like the others (``verify`` names it), although no reader
needs it. ``corrupt(store, table, error)`` turns a Delta read error into ``CorruptStore`` naming
the first damaged log file (or the log directory). ``tables_moved(store, versions)``: whether
either table has a commit after the versions a snapshot was read at (one probe per table).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import json
import re

from ..errors import CorruptStore
from ..format.paths import CHECKPOINTS_DIR, MANIFEST_DIR, delta_commit

if TYPE_CHECKING:
    from .manifest import TableVersions

__all__ = ["COMMIT", "CHECKPOINT", "ACTIONS", "log_problems", "corrupt", "tables_moved"]

COMMIT = re.compile(r"^(\d{20})\.json$")
CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")
ACTIONS = {"commitInfo", "protocol", "metaData", "add", "remove", "txn", "cdc", "domainMetadata",
           "checkpointMetadata", "sidecar"}


def log_problems(store: Any, table: str) -> list[Any]:
    """(path, offset, what) of every damaged file of ``table``'s Delta log (``[]`` when sound or
    when there is no table: no ``_delta_log`` directory)."""
    log = f"{table}/_delta_log"
    if not store.exists(log):
        return []
    names = [r.rsplit("/", 1)[-1] for r in store.list_files(log, recursive=False)]
    commits = {int(m.group(1)): n for n in names for m in [COMMIT.match(n)] if m}
    checkpoints = {int(m.group(1)) for n in names for m in [CHECKPOINT.match(n)] if m}
    out: list[Any] = []
    if not commits and not checkpoints:
        if not names:
            out.append((log, 0, "Delta log without any commit (its commit files were deleted)"))
        return out                        # only leftovers of an interrupted first commit: no table
    start = max(checkpoints) if checkpoints else 0
    last = max(set(commits) | checkpoints)
    have = f"versions {min(commits)}..{max(commits)}" if commits else "no commit file"
    for v in range(start, last + 1):
        if v not in commits:
            out.append((f"{log}/{v:020d}.json", 0, f"missing Delta commit ({have} present"
                                                   + (f", checkpoint at {start})" if checkpoints else ")")))
    for v in sorted(commits):
        out += _commit_problems(store, f"{log}/{commits[v]}", first=v == 0)
    if "_last_checkpoint" in names:
        rel = f"{log}/_last_checkpoint"
        try:
            cp = json.loads(store.read(rel))
            version = cp["version"] if isinstance(cp, dict) else None
        except (ValueError, KeyError):
            version = None
        if not isinstance(version, int):
            out.append((rel, 0, "not a Delta _last_checkpoint (JSON with an integer version)"))
        elif version not in checkpoints:
            out.append((rel, 0, f"names checkpoint version {version}, which has no checkpoint file"))
    return out


def _commit_problems(store: Any, rel: str, first: bool) -> list[Any]:
    data = store.read(rel)
    if not data.strip():
        return [(rel, 0, f"empty Delta commit ({len(data)} bytes)")]
    counts: dict[Any, Any] = {}
    metrics: dict[Any, Any] = {}
    at = 0
    lines = data.split(b"\n")
    if lines[-1] == b"":                  # a newline after the last action is allowed
        lines.pop()
    for line in lines:
        start, at = at, at + len(line) + 1
        if not line.strip():
            return [(rel, start, "empty line between Delta actions (damaged)")]
        try:
            action = json.loads(line)
        except ValueError as e:
            return [(rel, start, f"not a JSON line of Delta actions ({e}; truncated or garbage)")]
        if not (isinstance(action, dict) and len(action) == 1 and next(iter(action)) in ACTIONS
                and isinstance(next(iter(action.values())), dict)):
            return [(rel, start, f"not a Delta action: {line[:60]!r}")]
        kind, body = next(iter(action.items()))
        if kind in ("add", "remove") and not isinstance(body.get("path"), str):
            return [(rel, start, f"{kind} action without a path")]
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "commitInfo" and isinstance(body.get("operationMetrics"), dict):
            metrics = body["operationMetrics"]
    out = []
    for kind, metric in (("add", "num_added_files"), ("remove", "num_removed_files")):
        want = metrics.get(metric)
        if isinstance(want, int) and not isinstance(want, bool) and want != counts.get(kind, 0):
            out.append((rel, len(data), f"{counts.get(kind, 0)} {kind} action(s), its commitInfo counts {want} "
                                        "(truncated)"))
    if first:
        for kind in ("protocol", "metaData"):
            if kind not in counts:
                out.append((rel, len(data), f"first Delta commit without a {kind} action (truncated?)"))
    return out


def corrupt(store: Any, table: str, error: BaseException) -> CorruptStore:
    """``CorruptStore`` for a Delta table that could not be read: its first damaged log file, or
    the log directory with the reader's error (one line)."""
    try:
        problems = log_problems(store, table)
    except Exception:  # noqa: BLE001 - the log may be unreadable as a whole
        problems = []
    if problems:
        return CorruptStore(*problems[0])
    text = (str(error).strip().splitlines() or [""])[0][:300]
    return CorruptStore(f"{table}/_delta_log", 0, f"Delta table cannot be read ({type(error).__name__}: {text})")


def tables_moved(store: Any, versions: TableVersions) -> bool:
    """Whether a writer committed to either table after ``versions`` (a snapshot's: None, no table
    then): the commit file of the next version exists. Delta versions are consecutive, and a
    commit is its version's file, so one probe per table tells."""
    return any(store.exists(delta_commit(rel, 0 if v is None else v + 1))
               for rel, v in ((MANIFEST_DIR, versions.manifest), (CHECKPOINTS_DIR, versions.checkpoints)))
