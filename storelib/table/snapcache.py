"""The cached file list of the latest committed batch: ``_rocketlake/snapshot-cache.json``.

Opening a snapshot from the Delta tables takes deltalake, pyarrow and a Parquet read of both
tables (about 0.5 s of imports and reads before a shell lookup reads its first byte). Every
writer (ingest's commit, expire, adopt, repair) calls ``refresh`` after its commit, with the
snapshot its commit returned (``manifest.committed_snapshot``: the rows a read of the tables gives,
built from the snapshot it opened, its rows and its checkpoint row; the tables are read again,
``manifest.load_snapshot``, when either moved since) and writes the checkpoint row and the live
manifest rows to the cache. ``load`` gives that snapshot to ``storefiles.open_files`` with a few small reads and
``json``: no deltalake, no pyarrow.

What a batch uploads (a small batch on an object store costs what it adds): the cache is a
base, ``snapshot-cache.json``, plus one delta, ``snapshot-cache.delta.json``. The delta holds
the changes from the base's document to the new one (rows added, removed, and per changed field
its new value; a row's ``detail``, the JSON text that holds a continued file's extent list, as
the change of the value it holds: the extents added, not the list), so its size follows what
changed since the base, not what the store holds.
``refresh`` replaces the delta while it costs no more than the cache's writes since the base
averaged per batch (the base and each delta: ``REBASE_SHARE``), and otherwise writes a new base
(the whole document) and then removes the delta. Both are zlib-compressed JSON. Local stores use
the same two files (each written whole and renamed into place).

What a refresh reads: the sha256 of the Delta log files comes from the cache it replaces for
the commit and checkpoint files that cache names (they are created once; ``_log_state``), so a
commit reads its new log files, ``_last_checkpoint`` and the newest commit it knew, not every
commit since the newest Delta checkpoint. A writer that wrote the cache after its previous commit,
with no commit since, holds that base and delta in memory (``_LastWritten``) and does not read them
back. Neither changes what readers check.

The cache is a hint, never the truth: ``load`` uses it only when

* each file's header length and sha256 match its stored body (a torn, truncated or damaged
  file is ignored); the delta is applied only to the base whose document has the sha256 it names,
  and the document it gives must have the sha256 it records; a delta for another base (a base
  rewritten since, a delta left by a writer killed before removing it) is ignored and the base
  stands alone;
* for both tables, the next version's commit file does not exist (Delta versions are contiguous
  and each commit file is created once, put-if-absent: the cached version is the latest), and
  every log file a Delta reader of that version depends on (the commits since the newest Delta
  checkpoint, that checkpoint, ``_last_checkpoint``) still has the sha256 it had: a damaged log
  makes readers read the Delta tables (and fail as they did), a store deleted and rebuilt with
  as many commits has other commit files. Delta writes a checkpoint every 100 commits, and
  expire after each run, so that is a few small reads;
* every row names a plain store path (``localstore.is_plain_path``).

So a writer killed at any step (before its delta, between a new base and the old delta's
removal) leaves files that are either current or marked stale by the Delta versions. Otherwise
(``None``) the reader reads the Delta tables as before: a missing, stale or damaged cache costs
time, never a wrong answer, and every path is still checked by ``Store.path`` when a file is
read. A refresh that fails leaves the previous cache, which the versions then mark stale.

Format of both files: one header line, then ``length`` bytes of zlib-compressed JSON whose
sha256 (of the compressed bytes) is ``sha256``. The base: ``{"format":
"rocketlake-snapshot-cache", "version": 2, "encoding": "zlib", "length": N, "sha256": hex}``; its
document ``{"tables": {"manifest": {"version": v, "files": [[log file name, sha256], ...]},
"checkpoints": {...}}, "batch": {checkpoint row}, "files": [live manifest rows, by path]}`` as
canonical JSON (sorted keys, no spaces). The delta: ``{"format":
"rocketlake-snapshot-cache-delta", ..., "base": sha256 of the base's document, "result": sha256
of the document it gives, "n": deltas of this base so far, "paid": bytes of those before it}``;
its body is one change (``_diff``) of the document with its ``files`` keyed by path: ``["=", value]`` (replace), ``["o", {key: change}, [removed keys]]``
(an object), ``["i", [[index, change], ...]]`` (a list of the same length), ``["l", p, s, items]``
and ``["s", p, s, text]`` (a list or a string: the first ``p`` and last ``s`` of the old one
around new ones), ``["j", change]`` (a string of canonical JSON, such as a row's ``detail``:
the change of the value it holds).
"""
from __future__ import annotations

import hashlib
import json
import re
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from .deltalog import CHECKPOINT, COMMIT
from .rows import BatchRow, ManifestRow
from ..io.localstore import is_plain_path
from ..format.paths import CHECKPOINTS_DIR, MANIFEST_DIR, META_DIR, SNAPSHOT_CACHE, SNAPSHOT_CACHE_DELTA, delta_commit

__all__ = ["FORMAT", "DELTA_FORMAT", "VERSION", "REBASE_SHARE", "CachedSnapshot", "refresh", "load", "document",
           "encode", "decode"]

FORMAT = "rocketlake-snapshot-cache"
DELTA_FORMAT = "rocketlake-snapshot-cache-delta"
VERSION = 2
# A delta is written while its bytes stay under this share of what the cache's writes since the
# base cost on average (the base and each delta since); past that, a new base starts a cycle that
# costs less a batch (a base every k batches costs base / k a batch, and the delta grows with k).
REBASE_SHARE = 1.0
_TABLES = (("manifest", MANIFEST_DIR), ("checkpoints", CHECKPOINTS_DIR))
_SPLICE_MIN = 64          # strings shorter than this are replaced whole
# A delta only while at most this many rows differ from its base. The diff costs ~40 us a changed
# row in Python with both documents held keyed, so a batch that changes most rows of a large store
# (at 10^10 messages every batch continues ~160,000 consume-queue files: 8-45 s and over 1 GB) writes
# a new base instead: one zlib pass, and the old cache is not even read.
DELTA_MAX_ROWS = 16384


@dataclass(frozen=True)
class CachedSnapshot:
    """What the cache holds: the latest batch and its live files (``snapshots.open_snapshot``)."""
    batch: BatchRow
    files: dict[str, ManifestRow] = field(default_factory=dict)   # path -> manifest row
    tables: dict[str, Any] = field(default_factory=dict)   # table name -> {"version", "files": [[name, sha256]]}


# ----------------------------------------------------------------------------- writing
def encode(tables: dict[Any, Any], batch: dict[Any, Any], rows: list[Any]) -> bytes:
    """The bytes of a base file holding this document (``rows`` by path)."""
    return _frame(FORMAT, _document(tables, batch, rows))


def refresh(store: Any, committed: Any = None) -> bool:
    """Write the cache of the store's latest committed snapshot, as the Delta tables give it.

    Called once at the end of every commit (ingest, expire, adopt, repair) by the writer that
    holds the lease, with ``committed``: the snapshot its commit returned
    (``manifest.committed_snapshot``, the rows a read of the tables gives back, built in memory),
    used when both tables are still at the versions it names; otherwise (a version since, or
    None) the tables are read. Never raises: the commit is done, and without a fresh cache
    readers read the Delta tables. Returns whether it wrote."""
    try:
        mine = _WRITTEN.take(store)             # forgotten: held again only once this refresh has written
        from . import manifest
        snap = committed if committed is not None and _latest(store, committed.versions) \
            else manifest.load_snapshot(store, queue_offsets=False)
        if snap.batch is None or snap.versions is None:
            return False
        from .rowcheck import snapshot_problems
        from .rows import recorded_config
        if snapshot_problems(snap, recorded_config(snap.batch)):
            return False                     # readers read the Delta tables and refuse the rows
        if snap.versions.manifest is None or snap.versions.checkpoints is None:
            return False
        versions = {"manifest": snap.versions.manifest, "checkpoints": snap.versions.checkpoints}
        # A batch that owns more than DELTA_MAX_ROWS rows changes more than a delta may (``_store``):
        # the old cache is not read (its log hashes are read again instead).
        own = sum(1 for r in snap.files.values() if r["batch_id"] == snap.batch["batch_id"])
        now = _NONE if own > DELTA_MAX_ROWS else \
            (_WRITTEN.still_stored(store, mine, committed) if snap is committed else None) or _Current.read(store)
        tables = {name: _log_state(store, rel, versions[name], now.hashes(name)) for name, rel in _TABLES}
        _WRITTEN.keep(store, _store(store, _document(tables, snap.batch, sorted(snap.files.values(),
                                                                                key=lambda r: r["path"])),
                                    now, len(snap.files)))
        return True
    except Exception:  # noqa: BLE001 - the cache is an optimization; the Delta tables stay the truth
        return False


def _latest(store: Any, versions: Any) -> bool:
    """Both tables are at ``versions`` (no commit file of a later version)."""
    return (versions is not None and versions.manifest is not None and versions.checkpoints is not None
            and not any(store.exists(delta_commit(rel, v + 1))
                        for rel, v in ((MANIFEST_DIR, versions.manifest), (CHECKPOINTS_DIR, versions.checkpoints))))


def _log_state(store: Any, table: str, version: int, known: dict[str, str] | None = None) -> dict[str, Any]:
    """The Delta log files a reader of ``version`` depends on, with their sha256: the commits from
    the newest checkpoint at or below it (or version 0) up to it, that checkpoint's files and
    ``_last_checkpoint``.

    ``known``: the sha256 of this table's log files as the current cache recorded them
    (``_Current.hashes``). A commit or checkpoint file is created once and never changed, so of
    those the ones it names are not read again (a batch would otherwise read every commit since
    the newest Delta checkpoint, up to a hundred a table), once the newest commit it names still
    has its sha256 (a table rebuilt since has other commit files). ``_last_checkpoint`` and newer
    files are read. A hash taken earlier can only make readers refuse the cache (the file changed
    since), never accept one the Delta tables would not give."""
    log = f"{table}/_delta_log"
    names = [r.rsplit("/", 1)[-1] for r in store.list_files(log, recursive=False)]
    cps = [int(m.group(1)) for n in names for m in [CHECKPOINT.match(n)] if m and int(m.group(1)) <= version]
    since = max(cps) if cps else 0
    keep = [n for n in names
            if _numbered(COMMIT, n, lambda v: since <= v <= version)
            or (_numbered(CHECKPOINT, n, lambda v: v == since) and cps)
            or n == "_last_checkpoint"]
    if delta_commit(table, version).rsplit("/", 1)[-1] not in keep:
        raise ValueError(f"{log}: no commit file of version {version}")
    known = _still(store, log, {n: h for n, h in (known or {}).items() if n in keep}, version)
    return {"version": version,
            "files": [[n, known.get(n) or hashlib.sha256(store.read(f"{log}/{n}")).hexdigest()] for n in sorted(keep)]}


def _still(store: Any, log: str, known: dict[str, str], version: int) -> dict[str, str]:
    """Of ``known`` (log file name -> sha256), the commit and checkpoint files up to ``version``,
    if the newest commit among them still has its sha256 (one read); else nothing."""
    mine = {n: h for n, h in known.items() if _numbered(COMMIT, n, lambda v: v <= version)
            or _numbered(CHECKPOINT, n, lambda v: v <= version)}
    commits = [n for n in mine if COMMIT.match(n)]
    if not commits:
        return {}
    newest = max(commits)                     # (20-digit versions: the newest sorts last)
    try:
        return mine if hashlib.sha256(store.read(f"{log}/{newest}")).hexdigest() == mine[newest] else {}
    except (OSError, ValueError):
        return {}


def _numbered(pattern: re.Pattern[str], name: str, wanted: Callable[[int], bool]) -> bool:
    """``name`` is a Delta log file of ``pattern`` whose version is ``wanted``."""
    m = pattern.match(name)
    return m is not None and wanted(int(m.group(1)))


@dataclass(frozen=True)
class _Current:
    """The cache as a refresh finds it: its base file, the base's (document, sha256) if it checks
    out, the delta file, and the document they give (the base's alone when the delta is not its own)."""
    data: bytes
    base: tuple[dict[Any, Any], str] | None
    delta: bytes
    doc: dict[Any, Any] | None

    @staticmethod
    def read(store: Any) -> _Current:
        data = _read(store, SNAPSHOT_CACHE) or b""
        base = _base_of(data)
        delta = (_read(store, SNAPSHOT_CACHE_DELTA) or b"") if base is not None else b""
        doc = ((_applied(base[0], base[1], delta) if delta else None) or base[0]) if base is not None else None
        return _Current(data, base, delta, doc)

    def hashes(self, table: str) -> dict[str, str]:
        """The log files' sha256 this cache recorded for ``table`` (name -> hex), as far as well formed."""
        entry = (self.doc.get("tables") or {}).get(table) if isinstance(self.doc, dict) \
            and isinstance(self.doc.get("tables"), dict) else None
        files = entry.get("files") if isinstance(entry, dict) else None
        return {f[0]: f[1] for f in files if isinstance(f, list) and len(f) == 2 and isinstance(f[0], str)
                and isinstance(f[1], str) and re.fullmatch("[0-9a-f]{64}", f[1])} if isinstance(files, list) else {}


_NONE = _Current(b"", None, b"", None)   # no cache known (not read, or not worth holding)


class _LastWritten:
    """The cache this process wrote last, for one store (its URI) at a time, so that the refresh
    after its next commit computes the delta from memory instead of reading the base and the
    delta back.

    ``take`` gives it back and forgets it (a refresh that fails leaves nothing held);
    ``still_stored`` says whether it may be used; ``keep`` holds what a refresh wrote (``_store``
    gives ``_NONE`` for a large store: its document is not held between commits)."""

    def __init__(self) -> None:
        self.uri: Any = None
        self.cache: _Current = _NONE

    def clear(self) -> None:
        self.uri, self.cache = None, _NONE

    def take(self, store: Any) -> _Current | None:
        uri = getattr(store, "uri", None)
        if uri is None or uri != self.uri:
            return None
        mine = self.cache
        self.clear()
        return mine

    @staticmethod
    def still_stored(store: Any, mine: _Current | None, committed: Any) -> _Current | None:
        """``mine`` (``take``) when no one can have written another cache since: ``committed`` is the
        snapshot of this process's next commit, whose checkpoints version is the one after the
        version ``mine`` recorded (every writer commits one checkpoints row and refreshes after it:
        no other commit, so no other refresh, came between), and the stored base still has the
        size it was written with. Else None: read the cache. A delta computed from a base that is
        not the stored one would only be ignored by readers (it names its base's sha256): a cost,
        never a wrong snapshot."""
        if mine is None:
            return None
        versions = getattr(committed, "versions", None)
        recorded = ((mine.doc or {}).get("tables") or {}).get("checkpoints") or {}
        if versions is None or type(versions.checkpoints) is not int or not isinstance(recorded, dict) \
                or type(recorded.get("version")) is not int or recorded["version"] != versions.checkpoints - 1:
            return None
        try:
            return mine if store.size(SNAPSHOT_CACHE) == len(mine.data) else None
        except (OSError, ValueError):
            return None

    def keep(self, store: Any, cache: _Current) -> None:
        uri = getattr(store, "uri", None)
        if uri is not None:
            self.uri, self.cache = uri, cache


_WRITTEN = _LastWritten()


def _store(store: Any, raw: bytes, now: _Current, rows: int) -> _Current:
    """Make the document ``raw`` the cache: as a delta of the current base while that costs no
    more than the cache's uploads since the base averaged per batch, else as a new base (the old
    delta removed after it). ``now``: the cache as it is (``_Current.read``); returns the cache
    as it is after, to hold in memory (``rows``: the document's).

    ``DELTA_MAX_ROWS`` bounds both what a delta may change (a diff costs ~40 us a changed row)
    and the documents held: past it a new base is written, and a large document is parsed only
    to count its changed rows (not at all without a base)."""
    from ..runtime.faults import fault
    data, base = now.data, now.base
    small = rows <= DELTA_MAX_ROWS
    doc = json.loads(raw) if base is not None or small else None
    delta, (n, paid) = None, _since_base(now.delta, base[1]) if base is not None else (0, 0)
    if base is not None and doc is not None:
        try:
            old = _keyed(base[0])
            if _rows_changed(old["files"], doc) <= DELTA_MAX_ROWS:
                delta = _delta(old, base[1], raw, doc, n + 1, paid)
        except (ValueError, TypeError, RecursionError):   # a base this writer cannot change: replaced
            delta = None
    fault("cache-before-write")
    if delta is not None and base is not None and len(delta) <= REBASE_SHARE * (len(data) + paid) / (n + 1):
        _put(store, SNAPSHOT_CACHE_DELTA, delta)
        return _Current(data, base, delta, doc) if small else _NONE
    data = _frame(FORMAT, raw)
    _put(store, SNAPSHOT_CACHE, data)
    fault("cache-after-base")
    store.delete(SNAPSHOT_CACHE_DELTA)       # names the old base: ignored until removed
    if doc is None or not small:
        return _NONE
    return _Current(data, (doc, hashlib.sha256(raw).hexdigest()), b"", doc)


def _rows_changed(old: dict[Any, Any], doc: dict[Any, Any]) -> int:
    """About how many rows of the document ``doc`` differ from the base's rows ``old`` (by path:
    added, changed or gone), up to just past ``DELTA_MAX_ROWS`` (a plain comparison: no diff)."""
    rows = doc.get("files") or ()
    n = abs(len(old) - len(rows))
    for r in rows:
        if old.get(r.get("path")) != r:
            n += 1
            if n > DELTA_MAX_ROWS:
                break
    return n


def _since_base(data: bytes, base_sha: str) -> tuple[int, int]:
    """(deltas written since the base ``base_sha``, the bytes they took), from the current delta file."""
    got = _unframe(data, DELTA_FORMAT)
    if got is None or got[0].get("base") != base_sha:
        return 0, 0
    n, paid = got[0].get("n"), got[0].get("paid")
    if not (type(n) is int and type(paid) is int and n >= 1 and paid >= 0):
        return 0, 0
    return n, paid + len(data)


def _put(store: Any, rel: str, data: bytes) -> None:
    """``data`` as the whole file ``rel``: readers see the old file or the new one, never a part."""
    if store.atomic_rename:
        tmp = f"{META_DIR}/snapshot-cache.{uuid.uuid4().hex}.tmp"
        store.write_file(tmp, [data])
        try:
            store.publish(tmp, rel)
        finally:
            if store.exists(tmp):
                store.delete(tmp)
    else:                                    # an object PUT is atomic
        store.write_file(rel, [data])


# ----------------------------------------------------------------------------- the files
def _document(tables: Any, batch: Any, rows: Any) -> bytes:
    """The canonical JSON of a cache document; ``TypeError`` for a value JSON cannot hold as is."""
    return json.dumps({"tables": tables, "batch": batch, "files": rows}, sort_keys=True, separators=(",", ":"),
                      allow_nan=False).encode()


def _frame(fmt: str, raw: bytes, **extra: Any) -> bytes:
    """A cache file: its header line and ``raw`` compressed."""
    body = zlib.compress(raw, 6)
    header = json.dumps({"format": fmt, "version": VERSION, "encoding": "zlib", "length": len(body),
                         "sha256": hashlib.sha256(body).hexdigest(), **extra}, sort_keys=True)
    return header.encode() + b"\n" + body


def _unframe(data: bytes, fmt: str) -> tuple[dict[str, Any], bytes] | None:
    """(header, uncompressed body) of a cache file of ``fmt`` whose header checks out, else None."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        return None
    try:
        h = json.loads(head)
        if not (isinstance(h, dict) and h.get("format") == fmt and h.get("version") == VERSION
                and h.get("encoding") == "zlib" and h.get("length") == len(body)
                and h.get("sha256") == hashlib.sha256(body).hexdigest()):
            return None
        return h, zlib.decompress(body)
    except (ValueError, zlib.error):
        return None


def decode(data: bytes) -> dict[Any, Any] | None:
    """The document of a base file whose header checks out, else None."""
    got = _base_of(data)
    return got[0] if got else None


def _base_of(data: bytes) -> tuple[dict[Any, Any], str] | None:
    """(document, sha256 of its canonical JSON) of a base file, else None."""
    got = _unframe(data, FORMAT)
    if got is None:
        return None
    try:
        doc = json.loads(got[1])
    except ValueError:
        return None
    return (doc, hashlib.sha256(got[1]).hexdigest()) if isinstance(doc, dict) else None


def _keyed(doc: dict[Any, Any]) -> dict[Any, Any]:
    """``doc`` with its rows keyed by path (what a delta changes); ValueError for rows that are not."""
    rows = doc.get("files")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("path"), str) for r in rows):
        raise ValueError("rows without paths")
    keyed = {r["path"]: r for r in rows}
    if len(keyed) != len(rows):
        raise ValueError("two rows of one path")
    return {**doc, "files": keyed}


def _unkeyed(doc: Any) -> tuple[dict[Any, Any], bytes]:
    """A document whose rows are keyed by path as the cache holds it (its rows listed by path, as
    a parse of its canonical JSON gives it), and that canonical JSON."""
    if not (isinstance(doc, dict) and isinstance(doc.get("files"), dict)):
        raise ValueError("not a cache document")
    for path, r in doc["files"].items():
        if not (isinstance(r, dict) and r.get("path") == path):
            raise ValueError("a row under another path")
    listed = {"batch": doc.get("batch"), "files": [doc["files"][p] for p in sorted(doc["files"])],
              "tables": doc.get("tables")}
    return listed, _document(listed["tables"], listed["batch"], listed["files"])


# ----------------------------------------------------------------------------- changes
_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    """The same JSON (``False == 0`` in Python, also inside a list)."""
    return type(a) is type(b) and a == b and (not isinstance(a, (dict, list)) or _dumps(a) == _dumps(b))


def _common(a: Any, b: Any) -> int:
    """How many leading items (characters) ``a`` and ``b`` share: a binary search of slices."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _same(a[:mid], b[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _ends(a: Any, b: Any) -> tuple[int, int]:
    """The shared head and tail of two lists (strings), not overlapping."""
    p = _common(a, b)
    s = min(_common(a[::-1], b[::-1]), min(len(a), len(b)) - p)
    return p, s


def _diff(a: Any, b: Any) -> list[Any] | None:
    """The change that turns ``a`` into ``b`` (``_patch``); None when they are the same."""
    if _same(a, b):
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        changed = {k: c for k, v in b.items() for c in [_diff(a.get(k, _MISSING), v)] if c is not None}
        return ["o", changed, sorted(k for k in a if k not in b)]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) == len(b):
            return ["i", [[i, c] for i, (x, y) in enumerate(zip(a, b)) for c in [_diff(x, y)] if c is not None]]
        p, s = _ends(a, b)
        return ["l", p, s, b[p:len(b) - s]]
    if isinstance(a, str) and isinstance(b, str) and len(b) >= _SPLICE_MIN:
        inner = _json_text(a), _json_text(b)
        if inner[0] is not None and inner[1] is not None:     # a row's detail: changed as the value it holds
            return ["j", _diff(*inner) or ["=", inner[1]]]
        p, s = _ends(a, b)
        if p + s >= _SPLICE_MIN // 2:
            return ["s", p, s, b[p:len(b) - s]]
    return ["=", b]


def _json_text(text: str) -> Any:
    """The JSON value ``text`` holds, if ``text`` is its canonical JSON (``_dumps``); else None."""
    if not text.startswith(("{", "[")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if _dumps(value) == text else None


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _patch(a: Any, change: Any) -> Any:
    """``a`` changed by ``change``; ValueError for a change that does not fit ``a``."""
    if not (isinstance(change, list) and change and isinstance(change[0], str)):
        raise ValueError("not a change")
    tag, args = change[0], change[1:]
    if tag == "=" and len(args) == 1:
        return args[0]
    if tag == "o" and isinstance(a, dict) and len(args) == 2 and isinstance(args[0], dict) \
            and isinstance(args[1], list):
        out = dict(a)
        for k in args[1]:
            if k not in out:
                raise ValueError("removes a key that is not there")
            del out[k]
        for k, c in args[0].items():
            out[k] = _patch(out.get(k, _MISSING), c)
        return out
    if tag == "i" and isinstance(a, list) and len(args) == 1 and isinstance(args[0], list):
        items = list(a)
        for item in args[0]:
            if not (isinstance(item, list) and len(item) == 2 and type(item[0]) is int and 0 <= item[0] < len(items)):
                raise ValueError("changes an item that is not there")
            items[item[0]] = _patch(items[item[0]], item[1])
        return items
    if tag == "j" and isinstance(a, str) and len(args) == 1:
        return _dumps(_patch(json.loads(a), args[0]))
    if tag in ("l", "s") and len(args) == 3 and type(args[0]) is int and type(args[1]) is int:
        p, s, mid = args
        kind = list if tag == "l" else str
        if not (isinstance(a, kind) and isinstance(mid, kind) and 0 <= p and 0 <= s and p + s <= len(a)):
            raise ValueError("a splice that does not fit")
        return a[:p] + mid + a[len(a) - s:]
    raise ValueError(f"not a change of this value: {tag!r}")


def _delta(old: dict[Any, Any], base_sha: str, raw: bytes, new: dict[Any, Any], n: int, paid: int) -> bytes | None:
    """The delta file that turns the base document (``old``, its rows keyed: ``_keyed``) into
    ``new``, whose canonical JSON is ``raw``, checked by applying it; None when it does not give
    ``raw`` back. ``n``: the deltas of this base so far, this one included; ``paid``: the bytes
    of those before it. The change is applied as built: it holds only values parsed from JSON,
    which its JSON text gives back as they are (no second parse of what the body holds)."""
    change = _diff(old, _keyed(new))
    body = json.dumps(change, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    if _unkeyed(_patch(old, change))[1] != raw:
        return None
    return _frame(DELTA_FORMAT, body, base=base_sha, result=hashlib.sha256(raw).hexdigest(), n=n, paid=paid)


def _applied(base: dict[Any, Any], base_sha: str, data: bytes) -> dict[Any, Any] | None:
    """The document a delta file gives when applied to its own base; None for another base's or a
    damaged delta. The document is the one its canonical JSON (whose sha256 the delta records)
    was made of, not a parse of that JSON again: both hold only values parsed from JSON (the base's,
    the delta's), which that JSON gives back as they are (a value it cannot hold, such as NaN,
    fails to make it: no document)."""
    got = _unframe(data, DELTA_FORMAT)
    if got is None or got[0].get("base") != base_sha:
        return None
    try:
        doc, raw = _unkeyed(_patch(_keyed(base), json.loads(got[1])))
    except (ValueError, TypeError, RecursionError):
        return None
    return doc if hashlib.sha256(raw).hexdigest() == got[0].get("result") else None


# ----------------------------------------------------------------------------- reading
def _current(store: Any, rel: str, entry: Any) -> bool:
    """``entry`` names the latest version of the Delta table at ``rel``, whose log files are as
    they were when the cache was written."""
    if not isinstance(entry, dict):
        return False
    version, files = entry.get("version"), entry.get("files")
    if not (type(version) is int and version >= 0 and isinstance(files, list) and files):
        return False
    try:
        if store.exists(delta_commit(rel, version + 1)):
            return False
        for item in files:
            if not (isinstance(item, list) and len(item) == 2 and is_plain_path(item[0]) and "/" not in item[0]):
                return False
            if hashlib.sha256(store.read(f"{rel}/_delta_log/{item[0]}")).hexdigest() != item[1]:
                return False
    except (OSError, ValueError):
        return False
    return True


def _rows_usable(batch: Any, rows: Any) -> bool:
    if not (isinstance(batch, dict) and isinstance(batch.get("batch_id"), str)
            and type(batch.get("batch_seq")) is int and isinstance(rows, list)):
        return False
    for r in rows:
        if not (isinstance(r, dict) and r.get("action") == "add" and is_plain_path(r.get("path"))
                and (r.get("staged_path") is None or is_plain_path(r["staged_path"]))):
            return False
    return True


def _read(store: Any, rel: str) -> bytes | None:
    try:
        data: bytes = store.read(rel)
        return data
    except (OSError, ValueError):             # missing (FileNotFoundError), unreadable, refused path
        return None


def document(store: Any) -> bytes | None:
    """The canonical JSON of the document the cache holds (its base, with its delta applied when
    the delta is this base's), not checked against the Delta tables; None when there is none."""
    doc = _cached(store)
    return _document(doc.get("tables"), doc.get("batch"), doc.get("files")) if doc is not None else None


def _cached(store: Any) -> dict[Any, Any] | None:
    return _Current.read(store).doc


def load(store: Any) -> CachedSnapshot | None:
    """The latest committed snapshot from the cache, if the cache is sound and current; else None."""
    doc = _cached(store)
    if doc is None:
        return None
    tables: Any = doc.get("tables")
    batch: Any = doc.get("batch")
    rows: Any = doc.get("files")
    if not isinstance(tables, dict) or not _rows_usable(batch, rows):
        return None
    for name, rel in _TABLES:
        if not _current(store, rel, tables.get(name)):
            return None
    files = {r["path"]: ManifestRow(r) for r in rows}
    if len(files) != len(rows):
        return None
    return CachedSnapshot(batch=BatchRow(batch), files=files, tables=tables)
