"""The structural check of a snapshot's manifest rows: what every operation checks before it
builds on a store (readers, ingest, expire, adopt, export, inspect, repair), and what ``verify``
reports of the rows without reading a file.

From the rows alone (no file is opened, so it runs before every query):

* every live row is one readers can use (``row_problem``: kind, path in its kind's directory,
  name = base offset, sizes within the kind's file size, sha256, index header);
* no batch names one path in two ``add`` rows that disagree (``manifest.Snapshot.duplicates``);
* commitlog segments contiguous (each starts one file size after the previous one), the first at
  the checkpoint row's min physical offset, the last ending at its max physical offset; a
  segment's records (``min_offset`` .. ``max_offset``) inside its valid bytes;
* a queue's files contiguous, every one but the last full, whole units, unit counts as the valid
  bytes say, the last ending at the queue's max offset in the checkpoint row (and no max offset
  without a file);
* an index file's valid bytes and count as its committed header's indexCount says;
* valid bytes within the file size; the checkpoint file has its row.

``snapshot_problems`` lists every problem as ``(path, offset, what)`` (verify's problem lines);
``check_snapshot`` raises ``CorruptStore`` for the first, which every operation lets out as its
one-line refusal before it changes anything.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import functools
import json
import os
import re
import stat

from ..errors import CorruptStore, StorePathError
from ..format import checkpoint, commitlog, consumequeue, indexfile
from ..format.checkpoint import FILE_NAME as CHECKPOINT_FILE
from ..format.config import StoreConfig
from ..format import names
from ..format.names import OFFSET_FILE_NAME
from ..format.paths import STAGING_DIR
from .rows import BatchRow, FileKind, ManifestRow

if TYPE_CHECKING:                   # (storage loads pyarrow: not on the shell lookup path)
    from ..io import storage

__all__ = ["check_row_paths", "check_row_targets", "snapshot_problems", "usable_rows", "row_problem", "check_snapshot", "segment_gaps", "HEADER_KEYS"]

_UNIT = consumequeue.UNIT_SIZE
_PREFIX = {"commitlog": "commitlog/", "consumequeue": "consumequeue/", "index": "index/", "checkpoint": "checkpoint"}


HEADER_KEYS = ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
               "index_count")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def row_problem(r: dict[Any, Any], cfg: StoreConfig) -> str | None:
    """What is wrong with a live manifest row (``None``: a row readers can use). Its path is
    already known to stay inside the store (``check_row_paths``)."""
    kind: Any = r.get("kind")
    path: str = r.get("path") or ""
    limits = {FileKind.COMMITLOG: cfg.mappedFileSizeCommitLog, FileKind.CONSUMEQUEUE: cfg.cq_file_size,
              FileKind.INDEX: cfg.index_file_size, FileKind.CHECKPOINT: checkpoint.FILE_SIZE}
    if kind not in limits:
        return f"manifest row of unknown kind {kind!r}"
    parts = path.split("/")
    if kind == FileKind.CHECKPOINT:
        ok = path == checkpoint.FILE_NAME
    elif kind == FileKind.COMMITLOG:
        ok = len(parts) == 2 and parts[0] == commitlog.DIR and bool(OFFSET_FILE_NAME.match(parts[1]))
    elif kind == FileKind.CONSUMEQUEUE:
        ok = (len(parts) == 4 and parts[0] == consumequeue.DIR and parts[1] == r.get("topic")
              and _is_int(r.get("queue_id")) and parts[2] == str(r["queue_id"]) and bool(OFFSET_FILE_NAME.match(parts[3])))
    else:
        ok = len(parts) == 2 and parts[0] == indexfile.DIR
    if not ok:
        return (f"manifest row of kind {kind} (topic {r.get('topic')!r}, queue {r.get('queue_id')!r}) names a path "
                "outside its directory")
    sp = r.get("staged_path")
    if sp is not None and not sp.startswith(STAGING_DIR + "/"):
        return f"manifest row's staged_path {sp!r} is not under {STAGING_DIR}/"
    for col, lo, hi in (("valid_bytes", 0, limits[kind]), ("file_size", 0, 1 << 62), ("count", 0, 1 << 62)):
        v: Any = r.get(col)
        if not _is_int(v) or not lo <= v <= hi:
            return f"manifest {col} {v!r} outside [{lo}, {hi}]"
    if not (isinstance(r.get("checksum"), str) and re.fullmatch(r"[0-9a-f]{64}", r["checksum"])):
        return f"manifest checksum {r.get('checksum')!r} is not a sha256"
    if kind in (FileKind.COMMITLOG, FileKind.CONSUMEQUEUE):
        b = r.get("base_offset")
        if not _is_int(b) or b != int(parts[-1]):
            return f"manifest base_offset {b!r} does not match the name"
    if kind == FileKind.INDEX:
        try:
            h = json.loads(r.get("detail") or "")["header"]
            bad = not all(_is_int(h[k]) for k in HEADER_KEYS)
        except (ValueError, TypeError, KeyError):
            bad = True
        if bad:
            return f"manifest detail {r.get('detail')!r} holds no index header"
        if not 1 <= h["index_count"] <= cfg.maxIndexNum:
            return f"manifest index header indexCount {h['index_count']} outside [1, {cfg.maxIndexNum}]"
    return None


def usable_rows(snap: Any, cfg: StoreConfig) -> tuple[dict[Any, Any], list[Any]]:
    """(path -> row of the live rows readers can use, problems of the others)."""
    rows, problems = {}, []
    for path, r in sorted(snap.files.items()):
        # a typed row keeps its verdict: a writer's check after its commit judges its new rows alone
        once = getattr(r, "once", None)
        p = once(("row_problem", cfg), functools.partial(row_problem, r, cfg)) if once else row_problem(r, cfg)
        if p:
            problems.append((path, 0, f"{p} (batch {r.get('batch_id')})"))
        else:
            rows[path] = r
    return rows, problems


def segment_gaps(bases: list[Any], F: int) -> list[Any]:
    """(path, base) pairs in base order -> problems: a segment not one file size after the previous."""
    out = []
    for i in range(1, len(bases)):
        if bases[i][1] != bases[i - 1][1] + F:
            out.append((bases[i][0], 0, f"gap: the previous segment starts at {bases[i - 1][1]}, this one "
                                        f"should start at {bases[i - 1][1] + F} (segment missing)"))
    return out


def snapshot_problems(snap: Any, cfg: StoreConfig) -> list[Any]:
    """Every structural problem of ``snap``'s rows (empty for a snapshot without a batch)."""
    if snap is None or snap.batch is None:
        return []
    rows, bad_rows = usable_rows(snap, cfg)
    out = []
    for path in getattr(snap, "duplicates", ()):
        out.append((path, 0, "manifest names this path in two add rows of one batch that disagree"))
    for r in rows.values():
        kind, path = r["kind"], r["path"]
        if not path.startswith(_PREFIX[kind]):
            out.append((path, 0, f"manifest row of kind {kind!r} names a path outside its directory"))
        if r["valid_bytes"] > r["file_size"]:
            out.append((path, 0, f"manifest valid_bytes {r['valid_bytes']} beyond its file_size {r['file_size']}"))
    out += _commitlog(rows, snap.batch, cfg)
    out += _queues(rows, snap.batch, cfg)
    out += _index(rows, cfg)
    if CHECKPOINT_FILE not in snap.files:
        out.append((CHECKPOINT_FILE, 0, "the manifest has no row for the checkpoint file"))
    return bad_rows + sorted(set(out))


def check_snapshot(snap: Any, cfg: StoreConfig | None = None) -> None:
    """``CorruptStore`` for the first structural problem of ``snap``'s rows (``cfg``: the store's
    file-shaping configuration, by default the one its checkpoint row records); nothing otherwise,
    also for None or a snapshot without a batch."""
    if snap is None or snap.batch is None:
        return
    if cfg is None:
        from .rows import recorded_config
        cfg = recorded_config(snap.batch)
    problems = snapshot_problems(snap, cfg)
    if problems:
        path, offset, what = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CorruptStore(path, offset, f"{what}{more} (refused before any change; `rocketlake verify` lists "
                                         f"every problem)")


def _of_kind(rows: dict[Any, Any], kind: str) -> list[Any]:
    return [r for r in rows.values() if r["kind"] == kind]


def _commitlog(rows: dict[Any, Any], batch: dict[Any, Any], cfg: StoreConfig) -> list[Any]:
    out = []
    segs = sorted(_of_kind(rows, FileKind.COMMITLOG), key=lambda r: r["base_offset"])
    F = cfg.mappedFileSizeCommitLog
    out += segment_gaps([(r["path"], r["base_offset"]) for r in segs], F)
    for r in segs:
        b, v = r["base_offset"], r["valid_bytes"]
        if b % F:
            out.append((r["path"], 0, f"segment start {b} is not a multiple of the file size {F}"))
        lo, hi = r.get("min_offset"), r.get("max_offset")
        if r["count"] and (lo is None or hi is None or not b <= lo <= hi <= b + v):
            out.append((r["path"], v, f"manifest valid_bytes {v}: the segment's {r['count']} records run "
                                      f"from {lo} to {hi}, beyond its valid end {b + v}"))
    max_phy = segs[-1]["base_offset"] + segs[-1]["valid_bytes"] if segs else 0
    min_phy = segs[0]["base_offset"] if segs else 0
    if batch["max_phy_offset"] != max_phy:
        out.append((segs[-1]["path"] if segs else "commitlog", max_phy - (segs[-1]["base_offset"] if segs else 0),
                    f"checkpoint table max_phy_offset {batch['max_phy_offset']}, last segment ends at {max_phy}"))
    if (batch["min_phy_offset"] or 0) != min_phy:
        out.append((segs[0]["path"] if segs else "commitlog", 0,
                    f"checkpoint table min_phy_offset {batch['min_phy_offset']}, first segment starts at {min_phy}"))
    return out


def _queues(rows: dict[Any, Any], batch: dict[Any, Any], cfg: StoreConfig) -> list[Any]:
    out = []
    size = cfg.cq_file_size
    cqs: dict[Any, Any] = {}
    for r in _of_kind(rows, FileKind.CONSUMEQUEUE):
        cqs.setdefault((r["topic"], r["queue_id"]), []).append(r)
    qmax = {(q["topic"], q["queue_id"]): q["max_offset"] for q in (batch["queue_offsets"] or [])}
    try:
        partial = BatchRow.of(batch).changed_queues_only     # the queues the batch changed, not all
    except ValueError:
        partial = False
    for key, fs in sorted(cqs.items()):
        fs.sort(key=lambda r: r["base_offset"])
        for i, r in enumerate(fs):
            v = r["valid_bytes"]
            if r["base_offset"] % size:
                out.append((r["path"], 0, f"queue file start {r['base_offset']} is not a multiple of the file "
                                          f"size {size}"))
            if v % _UNIT or r["count"] != v // _UNIT:
                out.append((r["path"], v, f"manifest valid_bytes {v} is not the {r['count']} units of its count"))
            if i < len(fs) - 1 and v != size:
                out.append((r["path"], v, f"manifest valid_bytes {v}: a queue file followed by another is full "
                                          f"({size} bytes)"))
            if i and r["base_offset"] != fs[i - 1]["base_offset"] + size:
                out.append((r["path"], 0, f"gap: the previous file of queue {key[0]}/{key[1]} starts at "
                                          f"{fs[i - 1]['base_offset']}, this one should start at "
                                          f"{fs[i - 1]['base_offset'] + size} (file missing)"))
        last = fs[-1]
        end = last["base_offset"] // _UNIT + last["valid_bytes"] // _UNIT
        if qmax.get(key) != end and not (partial and key not in qmax):
            out.append((last["path"], last["valid_bytes"],
                        f"queue {key[0]}/{key[1]} ends at offset {end}, checkpoint table says {qmax.get(key)}"))
    for key in set(qmax) - set(cqs):
        out.append((f"consumequeue/{key[0]}/{key[1]}", 0,
                    f"checkpoint table lists queue max offset {qmax[key]} but the manifest has no file of it"))
    return out


def _index(rows: dict[Any, Any], cfg: StoreConfig) -> list[Any]:
    out = []
    head = indexfile.entries_offset(cfg)
    for r in _of_kind(rows, FileKind.INDEX):
        ic = json.loads(r["detail"])["header"]["index_count"]
        want = head + ic * indexfile.ENTRY_SIZE
        if r["valid_bytes"] != want or r["count"] != ic - 1:
            out.append((r["path"], 0, f"manifest valid_bytes {r['valid_bytes']} / count {r['count']} disagree with "
                                      f"the committed header's indexCount {ic} (valid bytes {want})"))
    return out


def check_row_paths(row: dict[Any, Any]) -> None:
    """A manifest row's ``path`` (and ``staged_path``) must be store-relative paths that stay in
    the store; StorePathError naming the row otherwise (a reader never follows it)."""
    for col in ("path", "staged_path"):
        rel = row.get(col)
        if rel is None and col == "staged_path":
            continue
        problem = names.rel_path_problem(rel) if rel != "" else "is empty"
        if problem:
            raise StorePathError(
                f"manifest row of batch {row.get('batch_id')!r} (seq {row.get('batch_seq')}, {row.get('action')} "
                f"{row.get('kind')}): {col} {rel!r} {problem}: not a path inside the store; refusing to use it")


def check_row_targets(store: storage.Store, rows: list[ManifestRow]) -> None:
    """Before a commit: its publish can reach every file its rows name (``path``, ``staged_path``),
    so no committed batch is left unpublishable: a path out of the store (``Store.path``) is
    ``StorePathError``, a directory where a file goes (local stores) ``CorruptStore``."""
    dirs: dict[str, str] = {}
    for r in rows:
        check_row_paths(r)
        if r.staged_path:
            _reachable(store, r.staged_path, dirs)
        if _reachable(store, r.path, dirs) and r.action == "add":
            raise CorruptStore(r.path, 0, f"a directory where the {r.kind} file of batch {r.batch_id!r} goes: "
                                          "its publish could not put the file there; nothing was committed")


def _reachable(store: storage.Store, rel: str, dirs: dict[str, str]) -> bool:
    """``Store.path``'s rule for ``rel`` (StorePathError) at one ``lstat`` a new path component:
    a directory is resolved once a commit, from its parent's resolution (a real path from the root
    costs a ``lstat`` a component, for every one of a commit's tens of thousands of queue files); a
    link, FIFO or device along it goes through the whole rule. Whether a local store has a
    directory there."""
    if not store.os_paths:
        store.path(rel)
        return False
    mode = _component(store, rel, dirs)[0]
    return mode is not None and stat.S_ISDIR(mode)


def _component(store: storage.Store, rel: str, dirs: dict[str, str]) -> tuple[int | None, str]:
    """(the mode of what is at ``rel``, None for nothing; its path, inside the store); parents'
    paths kept in ``dirs``."""
    if rel == "":
        return stat.S_IFDIR, store.path("")
    parent, _, name = rel.rpartition("/")
    base = dirs.get(parent)
    if base is None:
        base = dirs[parent] = _component(store, parent, dirs)[1]
    path = os.path.join(base, name)
    try:
        found = os.lstat(path).st_mode
    except FileNotFoundError:
        return None, path                 # made there by the publish, below a directory checked already
    except OSError:
        return _whole_rule(store, rel)    # no directory above it
    if stat.S_ISREG(found) or stat.S_ISDIR(found):
        return found, path
    return _whole_rule(store, rel)        # a link (in the store, or StorePathError), a FIFO (StorePathError)


def _whole_rule(store: storage.Store, rel: str) -> tuple[int | None, str]:
    path = store.path(rel)
    return (os.stat(path).st_mode if os.path.exists(path) else None), path
